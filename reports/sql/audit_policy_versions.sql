-- Every version of one policy_id ($1) for a metric ($2), of the tenant ($3) or its plan default, in ledger order
-- (DataFusion). The metric is part of what the decision names: a policy_id is only unique per (owner, metric).
-- All versions, not only the one decided: which copy of it applied depends on the others (a later version of the
-- tenant's own that no longer covers the plan default leaves the decision to the plan's copy). The caller picks by
-- reconcile's own rule; a version published twice has two copies.
SELECT seq, event_id, tenant, subject, metric, source, occurred_at, policy_id, version, scope, "limit", "window",
       enforcement, effective_from, burst
FROM policy_events
WHERE policy_id = $1 AND metric = $2 AND (tenant = $3 OR tenant = '*') AND status = 'recorded'
ORDER BY seq
