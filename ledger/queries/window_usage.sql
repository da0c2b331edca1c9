-- Counted usage of a tenant (:tenant) and metric (:metric) with occurred_at in [:from, :through], up to a watermark
-- (:watermark), with the corrections of that usage recorded up to it (each a row of its own: its entry, the original's
-- event time and members, its delta as the quantity): what had consumed a decision's window, in event time.
-- `entries_by_tenant` (`ddl/018-entries-by-tenant.sql`) holds the tenant's entries in event time, with their type and
-- metric, so only the window's usage entries are read.
SELECT * FROM (
    SELECT e.seq, e.event_id, e.occurred_at, e.tenant, e.subject, e.metric, e.source, u.quantity, u.request_id,
           e.project, e.api_key
    FROM entries e INDEXED BY entries_by_tenant CROSS JOIN usage_events u ON u.seq = e.seq
    WHERE e.tenant = :tenant AND e.occurred_at >= :from AND e.occurred_at <= :through
      AND e.event_type = 'UsageEvent' AND e.metric = :metric AND e.seq <= :watermark AND e.status = 'recorded'
    UNION ALL
    SELECT c.seq, e.event_id, c.occurred_at, c.tenant, c.subject, c.metric, e.source, c.delta, NULL, c.project, c.api_key
    FROM usage_corrections c CROSS JOIN entries e ON e.seq = c.seq
    WHERE c.tenant = :tenant AND c.metric = :metric AND c.occurred_at >= :from AND c.occurred_at <= :through
      AND c.seq <= :watermark
)
ORDER BY 3, 1
