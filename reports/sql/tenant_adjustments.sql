-- A tenant's ($1) adjustments whose window overlaps [$2, $3), and all of its adjustments without a window (which
-- belong to the range by the events their refs name, found in Rust: refs is a JSON array), in ledger order
-- (DataFusion).
SELECT seq, occurred_at, kind, metric, subject, policy_id, window_start, window_end, amount, refs
FROM adjustment_events
WHERE tenant = $1 AND status = 'recorded'
  AND ((window_start < $3 AND window_end > $2) OR window_start IS NULL)
ORDER BY seq
