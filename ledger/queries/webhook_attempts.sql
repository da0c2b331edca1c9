-- The attempts to deliver alerts to webhooks, of a tenant (:tenant, null: every tenant) and an endpoint
-- (:endpoint_id, null: every one), oldest first, with the alert's id and kind.
SELECT t.alert_seq, t.tenant, t.endpoint_id, t.webhook_id, t.attempt, t.outcome, t.status, t.error,
       t.attempted_at, t.next_attempt_at, a.alert_id, a.kind
FROM webhook_attempts t JOIN alert_events a ON a.seq = t.alert_seq
WHERE (:tenant IS NULL OR t.tenant = :tenant) AND (:endpoint_id IS NULL OR t.endpoint_id = :endpoint_id)
ORDER BY t.id
