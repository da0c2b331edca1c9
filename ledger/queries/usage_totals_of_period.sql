-- Counted usage of one period (:period, YYYY-MM) per tenant and metric, as every append keeps it (`usage_totals`),
-- with the deltas of the corrections of that month's usage (`usage_corrections`, few): the current watermark only.
SELECT tenant, metric, SUM(quantity)
FROM (
    SELECT tenant, metric, quantity FROM usage_totals WHERE period = :period
    UNION ALL
    SELECT tenant, metric, delta FROM usage_corrections WHERE period = :period
)
GROUP BY tenant, metric
ORDER BY tenant, metric
