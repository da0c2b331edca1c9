-- Counted usage of a tenant (:tenant) and metric (:metric) with occurred_at in [:from, :through], up to a watermark
-- (:watermark): what had consumed a decision's window. `entries_by_tenant` (`ddl/018-entries-by-tenant.sql`) holds
-- the tenant's entries in event time, with their type and metric, so only the window's usage entries are read.
SELECT e.seq, e.event_id, e.occurred_at, e.tenant, e.subject, e.metric, e.source, u.quantity, u.request_id, e.project, e.api_key
FROM entries e INDEXED BY entries_by_tenant CROSS JOIN usage_events u ON u.seq = e.seq
WHERE e.tenant = :tenant AND e.occurred_at >= :from AND e.occurred_at <= :through
  AND e.event_type = 'UsageEvent' AND e.metric = :metric AND e.seq <= :watermark AND e.status = 'recorded'
