-- Every recorded grant up to a watermark, in ledger order.
SELECT e.event_id, e.occurred_at, e.tenant, e.subject, e.metric, e.source,
       g.grant_id, g.amount, g.valid_from, g.valid_until, g.reason
FROM grant_events g JOIN entries e ON e.seq = g.seq
WHERE e.status = 'recorded' AND g.seq <= ?1
ORDER BY g.seq
