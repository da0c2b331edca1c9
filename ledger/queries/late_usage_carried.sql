-- LATE_USAGE adjustments carried into an export: recorded after the previous close (:after) up to the export's
-- watermark (:watermark), summed per tenant and metric.
SELECT e.tenant, e.metric, SUM(a.amount)
FROM adjustment_events a CROSS JOIN entries e ON e.seq = a.seq
WHERE a.seq > :after AND a.seq <= :watermark AND a.kind = 'LATE_USAGE' AND e.status = 'recorded'
GROUP BY e.tenant, e.metric
ORDER BY e.tenant, e.metric
