-- Closed billing periods (contract §5 "Closing a period"): a period is closed once, at a watermark. Its export is
-- computed from the entries up to that watermark forever after; consumption for it recorded later is late usage.
CREATE TABLE period_closes (
    period       TEXT PRIMARY KEY,             -- YYYY-MM
    period_start INTEGER NOT NULL,             -- timestamp-micros, UTC, inclusive
    period_end   INTEGER NOT NULL,             -- timestamp-micros, UTC, exclusive
    watermark    INTEGER NOT NULL,             -- last ledger sequence number the close covers
    closed_at    INTEGER NOT NULL              -- timestamp-micros, UTC
);

-- Entries written by this process that must reach Kafka (adjustments, the hook's decisions and usage): the
-- outbox. Recorded in the same transaction as the entry; published afterwards with an idempotent producer.
CREATE TABLE outbox (
    seq INTEGER PRIMARY KEY REFERENCES entries (seq)
);

-- Outbox entries a broker acknowledged. Pending = in `outbox`, not here. A crash between the acknowledgement
-- and this row publishes the entry again: consumers deduplicate by event_id (contract §4.3).
CREATE TABLE outbox_published (
    seq          INTEGER PRIMARY KEY REFERENCES outbox (seq),
    topic        TEXT NOT NULL,
    published_at INTEGER NOT NULL              -- timestamp-micros, UTC
);

CREATE TRIGGER period_closes_refuse_update BEFORE UPDATE ON period_closes
BEGIN SELECT RAISE(ABORT, 'period_closes is append-only: a closed period stays closed'); END;
CREATE TRIGGER period_closes_refuse_delete BEFORE DELETE ON period_closes
BEGIN SELECT RAISE(ABORT, 'period_closes is append-only: a closed period stays closed'); END;
CREATE TRIGGER outbox_refuse_update BEFORE UPDATE ON outbox
BEGIN SELECT RAISE(ABORT, 'outbox is append-only: UPDATE refused'); END;
CREATE TRIGGER outbox_refuse_delete BEFORE DELETE ON outbox
BEGIN SELECT RAISE(ABORT, 'outbox is append-only: DELETE refused'); END;
CREATE TRIGGER outbox_published_refuse_update BEFORE UPDATE ON outbox_published
BEGIN SELECT RAISE(ABORT, 'outbox_published is append-only: UPDATE refused'); END;
CREATE TRIGGER outbox_published_refuse_delete BEFORE DELETE ON outbox_published
BEGIN SELECT RAISE(ABORT, 'outbox_published is append-only: DELETE refused'); END;
