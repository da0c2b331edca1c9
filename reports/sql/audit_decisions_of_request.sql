-- Every recorded decision of one request_id ($1), oldest first (DataFusion; the request_id filter reaches
-- SQLite as a probe of the ledger's request key index, `request_keys_*`).
SELECT seq, event_id, tenant, subject, metric, source, occurred_at, request_id, idempotency_key, amount, outcome,
       reason, policy_id, policy_version, window_start, window_end, "limit", used_before, remaining, retry_after_ms
FROM decision_events
WHERE request_id = $1 AND status = 'recorded'
ORDER BY occurred_at, seq
