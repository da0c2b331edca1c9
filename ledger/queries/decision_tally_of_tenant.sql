-- A tenant's (:tenant) recorded decisions of :metric with occurred_at in [:from, :to): how many, and how many policy
-- :policy_id version :version denied (or, a SHADOW version, would have). `entries_by_tenant` holds the tenant's entries
-- in event time.
SELECT e.tenant, count(*),
       coalesce(sum(d.policy_id = :policy_id AND d.policy_version = :version
                    AND (d.outcome = 'DENIED' OR d.reason = 'SHADOW_DENIED')), 0)
FROM entries e INDEXED BY entries_by_tenant CROSS JOIN decision_events d ON d.seq = e.seq
WHERE e.tenant = :tenant AND e.occurred_at >= :from AND e.occurred_at < :to AND e.event_type = 'DecisionEvent'
  AND e.metric = :metric AND e.status = 'recorded'
GROUP BY e.tenant
