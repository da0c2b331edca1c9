-- Every recorded decision of one request_id (:request_id), oldest first (event time, then ledger order), up to a
-- watermark (:watermark). The request key index (`ddl/010-request-keys.sql`, every tier) holds the decisions under
-- the id's key (:request_key); the request_id itself is then compared, since two ids may share a key.
SELECT e.seq, e.event_id, e.occurred_at, e.tenant, e.subject, e.metric, e.source,
       d.request_id, d.idempotency_key, d.amount, d.outcome, d.reason, d.policy_id, d.policy_version,
       d.window_start, d.window_end, d."limit", d.used_before, d.remaining, d.retry_after_ms, e.project, e.api_key
FROM decision_events d CROSS JOIN entries e ON e.seq = d.seq
WHERE d.seq IN (SELECT seq FROM request_keys_recent WHERE request_key = :request_key
                UNION ALL SELECT seq FROM request_keys_middle WHERE request_key = :request_key
                UNION ALL SELECT seq FROM request_keys_large WHERE request_key = :request_key
                UNION ALL SELECT seq FROM request_keys_sealed WHERE request_key = :request_key)
  AND d.request_id = :request_id AND d.seq <= :watermark AND e.status = 'recorded'
ORDER BY e.occurred_at, e.seq
