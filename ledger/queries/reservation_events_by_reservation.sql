-- Every recorded reservation event up to a watermark (:watermark), one reservation (tenant, reservation_id) after
-- another (its events in ledger order), so that each reservation is judged on its own with bounded memory. The index
-- by reservation_id gives the order; SQLite sorts only the rows of one reservation_id by tenant (CROSS JOIN keeps
-- reservation_events the outer loop: ordered by the tenant too, the planner would rather scan every entry).
SELECT e.seq, e.event_id, e.occurred_at, e.tenant, e.subject, e.metric, e.source,
       r.reservation_id, r.action, r.amount, r.expires_at, r.fencing_token, e.project, e.api_key
FROM reservation_events r CROSS JOIN entries e ON e.seq = r.seq
WHERE e.status = 'recorded' AND r.seq <= :watermark
ORDER BY r.reservation_id, e.tenant, r.seq
