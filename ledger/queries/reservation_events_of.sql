-- The recorded events of one reservation: reservation_id :reservation_id of tenant :tenant, up to a watermark
-- (:watermark), in ledger order.
SELECT e.seq, e.event_id, e.occurred_at, e.tenant, e.subject, e.metric, e.source,
       r.reservation_id, r.action, r.amount, r.expires_at, r.fencing_token, e.project, e.api_key
FROM reservation_events r JOIN entries e ON e.seq = r.seq
WHERE r.reservation_id = :reservation_id AND e.tenant = :tenant AND e.status = 'recorded' AND r.seq <= :watermark
ORDER BY r.seq
