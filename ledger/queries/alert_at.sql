-- The alert recorded at entry :seq (a webhook's delivery), with the fields `alerts_between` reads.
SELECT e.seq, e.event_id, e.occurred_at, e.tenant, e.subject, e.metric, e.source,
       a.alert_id, a.kind, a.policy_id, a.policy_version, a.scope, a.window_start, a.window_end, a.threshold_percent,
       a."limit", a.observed, a.request_id, e.project, e.api_key
FROM alert_events a CROSS JOIN entries e ON e.seq = a.seq
WHERE a.seq = :seq
