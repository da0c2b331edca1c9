-- One version ($2) of one policy_id ($1) for a metric ($3), of the tenant ($4) or its plan default (DataFusion).
-- The metric is part of what the decision names: a policy_id is only unique per (owner, metric).
SELECT seq, tenant, policy_id, version, scope, "limit", "window", enforcement, effective_from
FROM policy_events
WHERE policy_id = $1 AND version = $2 AND metric = $3 AND (tenant = $4 OR tenant = '*') AND status = 'recorded'
ORDER BY seq
