-- A tenant's ($1) adjustments whose window overlaps [$2, $3), or, without a window, written for an instant in
-- it, in ledger order (DataFusion).
SELECT seq, occurred_at, kind, metric, subject, policy_id, window_start, window_end, amount
FROM adjustment_events
WHERE tenant = $1 AND status = 'recorded'
  AND ((window_start < $3 AND window_end > $2) OR (window_start IS NULL AND occurred_at >= $2 AND occurred_at < $3))
ORDER BY seq
