-- Where the outbox's pending entries start (`ledger/src/outbox.rs`): every outbox entry below the greatest
-- `next_seq` is in `outbox_published`. The publisher reads from there instead of from the first entry ever
-- enqueued: that read skipped every published entry, every second for `serve`, and grew with each one (1.5 s per
-- pass at 2 million published entries). A row per advance, written in the transaction that records the
-- acknowledgements; `verify` checks that no pending entry lies below it. A ledger without rows reads from the
-- start once, then has one.
CREATE TABLE outbox_cursor (
    next_seq    INTEGER PRIMARY KEY,
    recorded_at INTEGER NOT NULL              -- timestamp-micros, UTC
);

CREATE TRIGGER outbox_cursor_refuse_update BEFORE UPDATE ON outbox_cursor
BEGIN SELECT RAISE(ABORT, 'outbox_cursor is append-only: UPDATE refused'); END;
CREATE TRIGGER outbox_cursor_refuse_delete BEFORE DELETE ON outbox_cursor
BEGIN SELECT RAISE(ABORT, 'outbox_cursor is append-only: DELETE refused'); END;
