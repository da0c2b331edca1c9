-- One version ($2) of one policy_id ($1), of the tenant ($3) or its plan default (DataFusion).
SELECT seq, tenant, policy_id, version, scope, "limit", "window", enforcement, effective_from
FROM policy_events
WHERE policy_id = $1 AND version = $2 AND (tenant = $3 OR tenant = '*') AND status = 'recorded'
ORDER BY seq
