-- The tenants of the entries after a watermark (:after), but for the adjustments and alerts of the reconcile run
-- (:run_id) that read up to it: what an incremental reconcile recomputes. Reads the entries after the watermark alone
-- (by seq, the table's key). The run's alerts are told by their source and the adjustments' run by its id; an alert
-- a hook wrote meanwhile has another source, and touches its tenant.
SELECT DISTINCT e.tenant
FROM entries e LEFT JOIN adjustment_events a ON a.seq = e.seq
WHERE e.seq > :after
  AND NOT (e.event_type = 'AdjustmentEvent' AND a.run_id IS :run_id)
  AND NOT (e.event_type = 'AlertEvent' AND e.source = :source)
ORDER BY e.tenant
