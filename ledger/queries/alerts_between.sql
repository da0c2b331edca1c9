-- Every alert that occurred in [:from, :to), in ledger order (`reconcile` reports the day before its --as-of).
-- alert_events is small (a few rows per window and policy): read whole, each entry found by its seq.
SELECT e.seq, e.event_id, e.occurred_at, e.tenant, e.subject, e.metric, e.source,
       a.alert_id, a.kind, a.policy_id, a.policy_version, a.scope, a.window_start, a.window_end, a.threshold_percent,
       a."limit", a.observed, a.request_id, e.project, e.api_key
FROM alert_events a CROSS JOIN entries e ON e.seq = a.seq
WHERE e.occurred_at >= :from AND e.occurred_at < :to AND e.status = 'recorded'
ORDER BY e.seq
