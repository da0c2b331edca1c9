-- Counted usage of one period (:period, YYYY-MM) per tenant and metric, as every append keeps it (`usage_totals`):
-- the current watermark only.
SELECT tenant, metric, quantity
FROM usage_totals
WHERE period = :period
ORDER BY tenant, metric
