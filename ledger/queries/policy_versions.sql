-- Every recorded version of one policy_id (:policy_id) for a metric (:metric; null: of every metric, for a gauge quota,
-- which decides requests of other metrics than its own), of the tenant (:tenant), its plan default or a named plan
-- (an owner `*` followed by the plan's name), up to a
-- watermark (:watermark), in ledger order. The metric is part of what a decision names: a policy_id
-- is only unique per (owner, metric). All versions, not only the one decided: which copy of it applied depends on the
-- others. Policies are few: policy_events is read whole, each entry found by its seq.
SELECT e.seq, e.event_id, e.occurred_at, e.tenant, e.subject, e.metric, e.source,
       p.policy_id, p.version, p.scope, p."limit", p.window, p.enforcement, p.effective_from, p.burst,
       p.actor, p.reason, p.time_zone, p.on_failure, p.overage_rate, p.overage_window, p.violation, p.window_seconds, p.cycle_anchor, p.alert_thresholds, p.alert_subject_share, e.project, e.api_key
FROM policy_events p CROSS JOIN entries e ON e.seq = p.seq
WHERE p.policy_id = :policy_id AND p.seq <= :watermark AND (:metric IS NULL OR e.metric = :metric) AND (e.tenant = :tenant OR e.tenant LIKE '*%')
  AND e.status = 'recorded'
ORDER BY e.seq
