-- Counted usage of a tenant (:tenant) and metric (:metric) with occurred_at in [:from, :until), of the entries after
-- :after up to a watermark (:watermark), with the corrections of such usage recorded in that range (at the original's
-- event time): what a billing cycle consumed, or what was recorded late for cycles billed before (`export billing`,
-- PolicyEvent v11). `entries_by_tenant` (`ddl/018-entries-by-tenant.sql`) holds the tenant's entries in event time,
-- so only the cycle's entries are read.
SELECT COALESCE((
    SELECT SUM(u.quantity)
    FROM entries e INDEXED BY entries_by_tenant CROSS JOIN usage_events u ON u.seq = e.seq
    WHERE e.tenant = :tenant AND e.occurred_at >= :from AND e.occurred_at < :until
      AND e.event_type = 'UsageEvent' AND e.metric = :metric AND e.seq > :after AND e.seq <= :watermark
      AND e.status = 'recorded'
), 0) + COALESCE((
    SELECT SUM(delta) FROM usage_corrections
    WHERE tenant = :tenant AND metric = :metric AND occurred_at >= :from AND occurred_at < :until
      AND seq > :after AND seq <= :watermark
), 0)
