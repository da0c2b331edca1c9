-- Counted usage with occurred_at in [:start, :end) per tenant, metric and project (null: usage naming no project),
-- recorded up to a watermark (:watermark), with the deltas of its corrections (at the original's project): the
-- breakdown of a bill's usage by project (`export billing --by project`), read as usage_of_period.sql reads the
-- bill's, so that a row's projects add up to its usage.
SELECT tenant, metric, project, SUM(quantity)
FROM (
    SELECT e.tenant AS tenant, e.metric AS metric, e.project AS project, u.quantity AS quantity
    FROM usage_events u CROSS JOIN entries e ON e.seq = u.seq
    WHERE u.seq <= :watermark AND e.status = 'recorded' AND e.occurred_at >= :start AND e.occurred_at < :end
    UNION ALL
    SELECT tenant, metric, project, delta FROM usage_corrections
    WHERE seq <= :watermark AND occurred_at >= :start AND occurred_at < :end
)
GROUP BY tenant, metric, project
ORDER BY tenant, metric, project
