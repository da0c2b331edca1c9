-- The deliveries not settled yet (no DELIVERED or GIVEN_UP attempt), in ledger order then by endpoint: each alert
-- of (:after, :until] of a tenant with an enabled endpoint that wants its kind and was registered before it, with
-- the attempts made so far, the first one's time and when the next is due (null: now, none was made).
-- alert_events is small (a few rows per window and policy); an endpoint's `kinds` is a short list.
SELECT a.seq, w.tenant, w.endpoint_id, w.url, w.secret,
       (SELECT count(*) FROM webhook_attempts t
        WHERE t.alert_seq = a.seq AND t.tenant = w.tenant AND t.endpoint_id = w.endpoint_id) AS attempts,
       (SELECT min(t.attempted_at) FROM webhook_attempts t
        WHERE t.alert_seq = a.seq AND t.tenant = w.tenant AND t.endpoint_id = w.endpoint_id) AS first_attempted_at,
       (SELECT t.next_attempt_at FROM webhook_attempts t
        WHERE t.alert_seq = a.seq AND t.tenant = w.tenant AND t.endpoint_id = w.endpoint_id
        ORDER BY t.id DESC LIMIT 1) AS next_attempt_at
FROM alert_events a
JOIN entries e ON e.seq = a.seq
JOIN webhook_endpoints w ON w.tenant = e.tenant AND w.enabled = 1 AND a.seq > w.from_seq
     AND instr(',' || w.kinds || ',', ',' || a.kind || ',') > 0
     AND w.id = (SELECT max(x.id) FROM webhook_endpoints x WHERE x.tenant = w.tenant AND x.endpoint_id = w.endpoint_id)
WHERE a.seq > :after AND a.seq <= :until AND e.status = 'recorded'
  AND NOT EXISTS (SELECT 1 FROM webhook_attempts s
                  WHERE s.alert_seq = a.seq AND s.tenant = w.tenant AND s.endpoint_id = w.endpoint_id
                    AND s.outcome <> 'FAILED')
ORDER BY a.seq, w.tenant, w.endpoint_id
LIMIT :limit
