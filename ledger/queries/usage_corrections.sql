-- The corrections of usage recorded up to a watermark (:watermark), in ledger order, with what each changed (the
-- original's event_id, event time and request, the count before and after, the delta) and who made it and why: of a
-- tenant (:tenant) whose original happened or which was made in [:from, :to) (`audit tenant`), or of the usage of a
-- request (:request_id, `audit why`); a null parameter does not filter. Corrections are few: read from their table.
SELECT c.seq, e.event_id, e.occurred_at, o.event_id, c.occurred_at, c.tenant, c.metric, d.action, c.quantity_before,
       c.quantity_after, c.delta, d.actor, d.reason, u.request_id
FROM usage_corrections c
JOIN correction_events d ON d.seq = c.seq
JOIN entries e ON e.seq = c.seq
JOIN entries o ON o.seq = c.original_seq
JOIN usage_events u ON u.seq = c.original_seq
WHERE c.seq <= :watermark
  AND (:tenant IS NULL OR c.tenant = :tenant)
  AND (:request_id IS NULL OR u.request_id = :request_id)
  AND (:from IS NULL OR (c.occurred_at >= :from AND c.occurred_at < :to) OR (e.occurred_at >= :from AND e.occurred_at < :to))
ORDER BY c.seq
