-- Adjustments of a tenant (:tenant) and metric (:metric) whose window overlaps [:start, :end), up to a watermark
-- (:watermark), in ledger order. `entries_by_tenant` holds the tenant's entries with their type and metric.
SELECT e.seq, e.event_id, e.occurred_at, e.tenant, e.subject, e.metric, e.source,
       a.adjustment_id, a.kind, a.policy_id, a.window_start, a.window_end, a.amount, a.refs, a.run_id, a.scope, e.project, e.api_key
FROM entries e INDEXED BY entries_by_tenant CROSS JOIN adjustment_events a ON a.seq = e.seq
WHERE e.tenant = :tenant AND e.event_type = 'AdjustmentEvent' AND e.metric = :metric AND e.seq <= :watermark
  AND e.status = 'recorded' AND a.window_start < :end AND a.window_end > :start
ORDER BY e.seq
