-- The tenants with a counted usage event of a metric (:metric) before :until, recorded up to a watermark
-- (:watermark): whose meter the billing export aggregates (a gauge's level holds from its last report, however long
-- ago, into every month after it).
SELECT DISTINCT e.tenant
FROM entries e
WHERE e.metric = :metric AND e.event_type = 'UsageEvent' AND e.occurred_at < :until AND e.seq <= :watermark
  AND e.status = 'recorded'
ORDER BY e.tenant
