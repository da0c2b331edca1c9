-- Every recorded grant of a tenant ($1) and metric ($2), in ledger order (DataFusion).
SELECT seq, event_id, tenant, subject, metric, source, occurred_at, grant_id, amount, valid_from, valid_until, reason
FROM grant_events
WHERE tenant = $1 AND metric = $2 AND status = 'recorded'
ORDER BY seq
