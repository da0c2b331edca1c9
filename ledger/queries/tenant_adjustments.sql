-- A tenant's (:tenant) adjustments whose window overlaps [:from, :to), and all of its adjustments without a window
-- (which belong to the range by the events their refs name), up to a watermark (:watermark), in ledger order.
-- `entries_by_tenant` holds the tenant's entries with their type.
SELECT e.seq, e.event_id, e.occurred_at, e.tenant, e.subject, e.metric, e.source,
       a.adjustment_id, a.kind, a.policy_id, a.window_start, a.window_end, a.amount, a.refs, a.run_id, a.scope, e.project, e.api_key
FROM entries e INDEXED BY entries_by_tenant CROSS JOIN adjustment_events a ON a.seq = e.seq
WHERE e.tenant = :tenant AND e.event_type = 'AdjustmentEvent' AND e.seq <= :watermark AND e.status = 'recorded'
  AND ((a.window_start < :to AND a.window_end > :from) OR a.window_start IS NULL)
ORDER BY e.seq
