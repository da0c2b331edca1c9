-- A tenant's ($1) conflicting duplicates: their event_id and event time (DataFusion; the status filter reaches
-- SQLite, which reads them through the partial index `entries_conflicting` instead of scanning every entry).
SELECT event_id, occurred_at
FROM entries
WHERE status = 'conflicting_duplicate' AND tenant = $1
