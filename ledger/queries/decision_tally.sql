-- Every tenant's recorded decisions of :metric with occurred_at in [:from, :to), per tenant, for a plan default (`*`)
-- version: how many, and how many policy :policy_id version :version denied (or, a SHADOW version, would have). No index
-- holds entries in event time across tenants: this reads every entry, once per plan default version judged.
SELECT e.tenant, count(*),
       coalesce(sum(d.policy_id = :policy_id AND d.policy_version = :version
                    AND (d.outcome = 'DENIED' OR d.reason = 'SHADOW_DENIED')), 0)
FROM entries e CROSS JOIN decision_events d ON d.seq = e.seq
WHERE e.occurred_at >= :from AND e.occurred_at < :to AND e.event_type = 'DecisionEvent' AND e.metric = :metric
  AND e.status = 'recorded'
GROUP BY e.tenant ORDER BY e.tenant
