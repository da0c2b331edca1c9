-- The ledger's identity and its head (contract §9.3), and accepted Kafka offset gaps.
--
-- `ledger_identity`: one row, the ledger id (a UUID made when this migration ran: at creation for a new ledger, at
-- the upgrade for an older one) that names the ledger on `quota.checkpoints` and derives ingest's default consumer
-- group. Filled in code (`links::anchor`).
CREATE TABLE ledger_identity (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    ledger_id  TEXT NOT NULL,                  -- UUID, lower-case, fixed for the ledger's life
    created_at INTEGER NOT NULL                -- timestamp-micros, UTC
);

-- The links: one per write transaction, each hashed and chained to the one before, over the entries' chain (the
-- entry hash at `entries_through`) and every row of the other tables that change a bill or an answer which that
-- transaction wrote: batches, duplicates, quarantine, quarantine replays, period closes with their stored exports,
-- accepted gaps, and the offsets after it. The last link is the head, `(head_seq, head_hash)`, what checkpoints
-- publish. Link 1, the anchor, covers what the ledger held when this migration ran: a ledger made before it keeps
-- its recorded history as it is, and everything it held then is covered from here on (`ledger/src/links.rs`).
CREATE TABLE chain_links (
    seq                INTEGER PRIMARY KEY,    -- 1, 2, 3, ... without gaps: head_seq is the last
    kind               TEXT NOT NULL CHECK (kind IN ('anchor', 'append', 'close', 'gap')),
    entries_through    INTEGER NOT NULL,       -- the watermark after the transaction
    batches_through    INTEGER NOT NULL,       -- the greatest id of batches, duplicates, quarantine, offset_gaps
    duplicates_through INTEGER NOT NULL,       -- and rowid of period_closes after it: the link covers the rows
    quarantine_through INTEGER NOT NULL,       -- between the previous link's and these
    closes_through     INTEGER NOT NULL,
    gaps_through       INTEGER NOT NULL,
    offsets_hash       BLOB NOT NULL,          -- SHA-256 over the whole `offsets` table after the transaction
    rows_hash          BLOB NOT NULL,          -- SHA-256 over the rows the link covers
    recorded_at        INTEGER NOT NULL,       -- timestamp-micros, UTC
    link_hash          BLOB NOT NULL           -- SHA-256 over the previous link_hash and all of the above
);

-- Quarantined messages replayed are covered by the link of the append that replayed them (quarantine ids are not in
-- the order of replays, so no range names them). NULL: replayed before this migration, covered by the anchor.
ALTER TABLE quarantine_replays ADD COLUMN link INTEGER;
CREATE INDEX quarantine_replays_by_link ON quarantine_replays (link);

-- Kafka offsets the ledger never read and the operator accepted as lost (`ingest --accept-gap`): messages removed
-- by retention before ingest read them, or a topic deleted and recreated under the ledger's offsets. Recorded with
-- the offset moved past them, in one transaction; listed by `status` and named by the billing export of every
-- period that was open when it was accepted.
CREATE TABLE offset_gaps (
    id          INTEGER PRIMARY KEY,
    topic       TEXT NOT NULL,
    partition   INTEGER NOT NULL,
    from_offset INTEGER NOT NULL CHECK (from_offset >= 0),
    to_offset   INTEGER NOT NULL CHECK (to_offset >= from_offset),
    accepted_at INTEGER NOT NULL               -- timestamp-micros, UTC
);

CREATE TRIGGER ledger_identity_refuse_update BEFORE UPDATE ON ledger_identity
BEGIN SELECT RAISE(ABORT, 'ledger_identity is append-only: UPDATE refused (a ledger keeps its id)'); END;
CREATE TRIGGER ledger_identity_refuse_delete BEFORE DELETE ON ledger_identity
BEGIN SELECT RAISE(ABORT, 'ledger_identity is append-only: DELETE refused (a ledger keeps its id)'); END;
CREATE TRIGGER chain_links_refuse_update BEFORE UPDATE ON chain_links
BEGIN SELECT RAISE(ABORT, 'chain_links is append-only: UPDATE refused'); END;
CREATE TRIGGER chain_links_refuse_delete BEFORE DELETE ON chain_links
BEGIN SELECT RAISE(ABORT, 'chain_links is append-only: DELETE refused'); END;
CREATE TRIGGER chain_links_refuse_replace BEFORE INSERT ON chain_links
    WHEN EXISTS (SELECT 1 FROM chain_links WHERE seq = NEW.seq)
BEGIN SELECT RAISE(ABORT, 'chain_links is append-only: a row is never replaced'); END;
CREATE TRIGGER offset_gaps_refuse_update BEFORE UPDATE ON offset_gaps
BEGIN SELECT RAISE(ABORT, 'offset_gaps is append-only: UPDATE refused'); END;
CREATE TRIGGER offset_gaps_refuse_delete BEFORE DELETE ON offset_gaps
BEGIN SELECT RAISE(ABORT, 'offset_gaps is append-only: DELETE refused'); END;
CREATE TRIGGER offset_gaps_refuse_replace BEFORE INSERT ON offset_gaps
    WHEN EXISTS (SELECT 1 FROM offset_gaps WHERE id = NEW.id)
BEGIN SELECT RAISE(ABORT, 'offset_gaps is append-only: a row is never replaced'); END;
