-- Counted usage of a tenant ($1) and metric ($2) with occurred_at in [$3, $4] (DataFusion).
SELECT seq, event_id, subject, occurred_at, quantity, request_id
FROM usage_events
WHERE tenant = $1 AND metric = $2 AND occurred_at >= $3 AND occurred_at <= $4 AND status = 'recorded'
