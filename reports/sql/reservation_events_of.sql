-- The recorded events of one reservation_id (?1) up to a watermark (?2), in ledger order.
SELECT e.seq, e.event_id, e.occurred_at, e.tenant, e.subject, e.metric, e.source,
       r.reservation_id, r.action, r.amount, r.expires_at
FROM reservation_events r JOIN entries e ON e.seq = r.seq
WHERE r.reservation_id = ?1 AND e.status = 'recorded' AND r.seq <= ?2
ORDER BY r.seq
