-- Adjustments of a tenant ($1) and metric ($2) whose window overlaps [$3, $4), in ledger order (DataFusion).
SELECT seq, adjustment_id, kind, policy_id, subject, window_start, window_end, amount, refs, run_id, occurred_at
FROM adjustment_events
WHERE tenant = $1 AND metric = $2 AND window_start < $4 AND window_end > $3 AND status = 'recorded'
ORDER BY seq
