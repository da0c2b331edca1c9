-- Counted usage of one period per tenant and metric, as maintained by every append (current watermark only).
SELECT tenant, metric, quantity
FROM usage_totals
WHERE period = ?1
