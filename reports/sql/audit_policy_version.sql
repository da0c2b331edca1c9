-- Every copy of one version ($2) of one policy_id ($1) for a metric ($3), of the tenant ($4) or its plan default,
-- in ledger order (DataFusion). The metric is part of what the decision names: a policy_id is only unique per
-- (owner, metric). A version published twice has two copies; the caller picks one by reconcile's own rule.
SELECT seq, event_id, tenant, subject, metric, source, occurred_at, policy_id, version, scope, "limit", "window",
       enforcement, effective_from, burst
FROM policy_events
WHERE policy_id = $1 AND version = $2 AND metric = $3 AND (tenant = $4 OR tenant = '*') AND status = 'recorded'
ORDER BY seq
