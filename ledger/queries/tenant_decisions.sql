-- A tenant's (:tenant) recorded decisions with occurred_at in [:from, :to), up to a watermark (:watermark), in event
-- time then ledger order. `entries_by_tenant` holds the tenant's entries in event time.
SELECT e.seq, e.event_id, e.occurred_at, e.tenant, e.subject, e.metric, e.source,
       d.request_id, d.idempotency_key, d.amount, d.outcome, d.reason, d.policy_id, d.policy_version,
       d.window_start, d.window_end, d."limit", d.used_before, d.remaining, d.retry_after_ms, e.project, e.api_key
FROM entries e INDEXED BY entries_by_tenant CROSS JOIN decision_events d ON d.seq = e.seq
WHERE e.tenant = :tenant AND e.occurred_at >= :from AND e.occurred_at < :to AND e.event_type = 'DecisionEvent'
  AND e.seq <= :watermark AND e.status = 'recorded'
ORDER BY e.occurred_at, e.seq
