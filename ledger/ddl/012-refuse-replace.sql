-- INSERT OR REPLACE of a row that exists deletes it and inserts the new one, and SQLite fires no delete trigger
-- for that (unless the connection turns recursive_triggers on): the append-only tables refused UPDATE and
-- DELETE, but not REPLACE. These refuse an insert over a row they hold. outbox_published ignores one instead:
-- the publisher records acknowledgements with INSERT OR IGNORE, and a second acknowledgement changes nothing.
--
-- Not the event details (usage_events, ...) nor outbox: every value there is a column of an entry's payload (or
-- its seq), which `verify` checks against the hash-chained entry, and a trigger per insert on each of them cost
-- 10 to 15% of the hook's decisions per second at 8 and 64 clients (one per insert, six per allowed check).
CREATE TRIGGER IF NOT EXISTS entries_refuse_replace BEFORE INSERT ON entries
    WHEN EXISTS (SELECT 1 FROM entries WHERE seq = NEW.seq)
BEGIN SELECT RAISE(ABORT, 'entries is append-only: a row is never replaced'); END;
CREATE TRIGGER IF NOT EXISTS duplicates_refuse_replace BEFORE INSERT ON duplicates
    WHEN EXISTS (SELECT 1 FROM duplicates WHERE id = NEW.id)
BEGIN SELECT RAISE(ABORT, 'duplicates is append-only: a row is never replaced'); END;
CREATE TRIGGER IF NOT EXISTS batches_refuse_replace BEFORE INSERT ON batches
    WHEN EXISTS (SELECT 1 FROM batches WHERE id = NEW.id)
BEGIN SELECT RAISE(ABORT, 'batches is append-only: a row is never replaced'); END;
CREATE TRIGGER IF NOT EXISTS quarantine_refuse_replace BEFORE INSERT ON quarantine
    WHEN EXISTS (SELECT 1 FROM quarantine WHERE id = NEW.id)
BEGIN SELECT RAISE(ABORT, 'quarantine is append-only: a row is never replaced'); END;
CREATE TRIGGER IF NOT EXISTS quarantine_replays_refuse_replace BEFORE INSERT ON quarantine_replays
    WHEN EXISTS (SELECT 1 FROM quarantine_replays WHERE quarantine_id = NEW.quarantine_id)
BEGIN SELECT RAISE(ABORT, 'quarantine_replays is append-only: a row is never replaced'); END;
CREATE TRIGGER IF NOT EXISTS period_closes_refuse_replace BEFORE INSERT ON period_closes
    WHEN EXISTS (SELECT 1 FROM period_closes WHERE period = NEW.period)
BEGIN SELECT RAISE(ABORT, 'period_closes is append-only: a row is never replaced'); END;
CREATE TRIGGER IF NOT EXISTS period_exports_refuse_replace BEFORE INSERT ON period_exports
    WHEN EXISTS (SELECT 1 FROM period_exports WHERE period = NEW.period AND row_index = NEW.row_index)
BEGIN SELECT RAISE(ABORT, 'period_exports is append-only: a row is never replaced'); END;
CREATE TRIGGER IF NOT EXISTS outbox_cursor_refuse_replace BEFORE INSERT ON outbox_cursor
    WHEN EXISTS (SELECT 1 FROM outbox_cursor WHERE next_seq = NEW.next_seq)
BEGIN SELECT RAISE(ABORT, 'outbox_cursor is append-only: a row is never replaced'); END;
CREATE TRIGGER IF NOT EXISTS outbox_published_refuse_replace BEFORE INSERT ON outbox_published
    WHEN EXISTS (SELECT 1 FROM outbox_published WHERE seq = NEW.seq)
BEGIN SELECT RAISE(IGNORE); END;
