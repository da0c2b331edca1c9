-- Every recorded reservation event of a tenant ($1), one reservation after another (DataFusion).
SELECT seq, event_id, tenant, subject, metric, source, occurred_at, reservation_id, action, amount, expires_at
FROM reservation_events
WHERE tenant = $1 AND status = 'recorded'
ORDER BY reservation_id, seq
