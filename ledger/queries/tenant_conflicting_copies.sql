-- A tenant's (:tenant) conflicting duplicates up to a watermark (:watermark), in ledger order, with their quantity
-- when they are UsageEvents. The partial index `entries_conflicting` holds every conflicting copy, few in all.
SELECT e.seq, e.event_id, e.occurred_at, e.tenant, e.subject, e.metric, e.source, COALESCE(u.quantity, 0), e.project, e.api_key
FROM entries e INDEXED BY entries_conflicting LEFT JOIN usage_events u ON u.seq = e.seq
WHERE e.status = 'conflicting_duplicate' AND e.tenant = :tenant AND e.seq <= :watermark
ORDER BY e.seq
