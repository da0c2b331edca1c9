-- Counted usage with occurred_at in [$1, $2) per tenant and metric, up to the session's watermark: the scan
-- behind the export of a period closed without a stored export (DataFusion).
SELECT tenant, metric, SUM(quantity) AS quantity
FROM usage_events
WHERE status = 'recorded' AND occurred_at >= $1 AND occurred_at < $2
GROUP BY tenant, metric
ORDER BY tenant, metric
