-- LATE_USAGE adjustments carried into an export: recorded after the previous close ($1) up to the export's
-- watermark ($2), summed per tenant and metric (DataFusion).
SELECT tenant, metric, SUM(amount) AS late_adjustments
FROM adjustment_events
WHERE kind = 'LATE_USAGE' AND status = 'recorded' AND seq > $1 AND seq <= $2
GROUP BY tenant, metric
ORDER BY tenant, metric
