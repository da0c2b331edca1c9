-- Counted usage with occurred_at in [:start, :end) per tenant and metric, recorded up to a watermark (:watermark), with
-- the deltas of the corrections of that usage recorded up to it: the scan behind the export of a period at a past
-- watermark (one closed without a stored export). CROSS JOIN keeps usage_events the outer loop, read in order, each
-- entry found by its seq.
SELECT tenant, metric, SUM(quantity)
FROM (
    SELECT e.tenant AS tenant, e.metric AS metric, u.quantity AS quantity
    FROM usage_events u CROSS JOIN entries e ON e.seq = u.seq
    WHERE u.seq <= :watermark AND e.status = 'recorded' AND e.occurred_at >= :start AND e.occurred_at < :end
    UNION ALL
    SELECT tenant, metric, delta FROM usage_corrections
    WHERE seq <= :watermark AND occurred_at >= :start AND occurred_at < :end
)
GROUP BY tenant, metric
ORDER BY tenant, metric
