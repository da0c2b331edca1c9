-- A tenant's (:tenant) alerts that occurred in [:from, :to), up to a watermark (:watermark), in ledger order
-- (`audit tenant`). `entries_by_tenant` holds the tenant's entries in event time, with their type.
SELECT e.seq, e.event_id, e.occurred_at, e.tenant, e.subject, e.metric, e.source,
       a.alert_id, a.kind, a.policy_id, a.policy_version, a.scope, a.window_start, a.window_end, a.threshold_percent,
       a."limit", a.observed, a.request_id, e.project, e.api_key
FROM entries e INDEXED BY entries_by_tenant CROSS JOIN alert_events a ON a.seq = e.seq
WHERE e.tenant = :tenant AND e.occurred_at >= :from AND e.occurred_at < :to AND e.event_type = 'AlertEvent'
  AND e.seq <= :watermark AND e.status = 'recorded'
ORDER BY e.seq
