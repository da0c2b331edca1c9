-- The recorded events of one reservation: reservation_id ?1 of tenant ?2, up to a watermark (?3), in ledger order.
SELECT e.seq, e.event_id, e.occurred_at, e.tenant, e.subject, e.metric, e.source,
       r.reservation_id, r.action, r.amount, r.expires_at
FROM reservation_events r JOIN entries e ON e.seq = r.seq
WHERE r.reservation_id = ?1 AND e.tenant = ?2 AND e.status = 'recorded' AND r.seq <= ?3
ORDER BY r.seq
