-- The decisions a hook made open (reason FAIL_OPEN) that happened before :as_of, per tenant and metric: how many,
-- and the amount they allowed. The partial index decision_events_made_open finds them.
SELECT e.tenant, e.metric, COUNT(*), SUM(d.amount)
FROM decision_events d CROSS JOIN entries e ON e.seq = d.seq
WHERE d.reason = 'FAIL_OPEN' AND e.status = 'recorded' AND e.occurred_at < :as_of
GROUP BY e.tenant, e.metric
ORDER BY e.tenant, e.metric
