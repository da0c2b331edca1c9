-- Counted usage with occurred_at in [:start, :end) per tenant, metric and project (null: usage naming no project),
-- recorded up to a watermark (:watermark): the breakdown of a bill's usage by project (`export billing --by
-- project`), read as usage_of_period.sql reads the bill's, so that a row's projects add up to its usage.
SELECT e.tenant, e.metric, e.project, SUM(u.quantity)
FROM usage_events u CROSS JOIN entries e ON e.seq = u.seq
WHERE u.seq <= :watermark AND e.status = 'recorded' AND e.occurred_at >= :start AND e.occurred_at < :end
GROUP BY e.tenant, e.metric, e.project
ORDER BY e.tenant, e.metric, e.project
