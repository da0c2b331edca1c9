-- Every recorded grant of a tenant (:tenant) and metric (:metric) up to a watermark (:watermark), in ledger order.
-- Grants are few: grant_events is read whole, each entry found by its seq.
SELECT e.seq, e.event_id, e.occurred_at, e.tenant, e.subject, e.metric, e.source,
       g.grant_id, g.amount, g.valid_from, g.valid_until, g.reason, g.actor, e.project, e.api_key
FROM grant_events g CROSS JOIN entries e ON e.seq = g.seq
WHERE g.seq <= :watermark AND e.tenant = :tenant AND e.metric = :metric AND e.status = 'recorded'
ORDER BY e.seq
