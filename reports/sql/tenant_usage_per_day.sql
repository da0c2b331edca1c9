-- A tenant's ($1) counted usage with occurred_at in [$2, $3), per UTC day and metric (DataFusion).
SELECT date_trunc('day', occurred_at) AS day, metric, SUM(quantity) AS usage, COUNT(*) AS events
FROM usage_events
WHERE tenant = $1 AND occurred_at >= $2 AND occurred_at < $3 AND status = 'recorded'
GROUP BY 1, 2
ORDER BY 1, 2
