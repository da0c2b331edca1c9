-- A tenant's ($1) decisions with occurred_at in [$2, $3), in event time (DataFusion).
SELECT seq, occurred_at, request_id, subject, metric, amount, outcome, reason, policy_id, policy_version, window_start,
       window_end
FROM decision_events
WHERE tenant = $1 AND occurred_at >= $2 AND occurred_at < $3 AND status = 'recorded'
ORDER BY occurred_at, seq
