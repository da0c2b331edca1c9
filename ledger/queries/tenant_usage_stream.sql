-- The counted UsageEvents of one tenant (:tenant), in ledger order: the consumption stream of an incremental reconcile,
-- which reads the tenants touched since its last run alone. `entries_by_tenant` holds the tenant's entries with their
-- type, so the other tenants' are not read.
SELECT e.seq, e.tenant, e.subject, e.metric, e.occurred_at, e.event_id, e.project, e.api_key, u.quantity
FROM entries e INDEXED BY entries_by_tenant CROSS JOIN usage_events u ON u.seq = e.seq
WHERE e.tenant = :tenant AND e.event_type = 'UsageEvent' AND e.status = 'recorded'
ORDER BY e.seq
