-- Counted usage with occurred_at in [:start, :end) per tenant and metric, recorded up to a watermark (:watermark):
-- the scan behind the export of a period at a past watermark (one closed without a stored export). CROSS JOIN keeps
-- usage_events the outer loop, read in order, each entry found by its seq.
SELECT e.tenant, e.metric, SUM(u.quantity)
FROM usage_events u CROSS JOIN entries e ON e.seq = u.seq
WHERE u.seq <= :watermark AND e.status = 'recorded' AND e.occurred_at >= :start AND e.occurred_at < :end
GROUP BY e.tenant, e.metric
ORDER BY e.tenant, e.metric
