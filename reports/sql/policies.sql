-- Every recorded policy version up to a watermark, in ledger order.
SELECT e.event_id, e.occurred_at, e.tenant, e.subject, e.metric, e.source,
       p.policy_id, p.version, p.scope, p."limit", p.window, p.enforcement, p.effective_from, p.burst
FROM policy_events p JOIN entries e ON e.seq = p.seq
WHERE e.status = 'recorded' AND p.seq <= ?1
ORDER BY p.seq
