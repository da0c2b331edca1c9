-- Messages that failed to decode or validate: kept whole, with where they came from and why, never lost.
CREATE TABLE quarantine (
    id               INTEGER PRIMARY KEY,
    origin           TEXT NOT NULL,            -- kafka, file, local
    origin_stream    TEXT,                     -- Kafka topic or file path
    origin_partition INTEGER,
    origin_offset    INTEGER,                  -- Kafka offset, or record index in a file
    raw              BLOB NOT NULL,            -- the bytes exactly as received
    reason_code      TEXT NOT NULL,            -- stable code: unknown_fingerprint, truncated, negative_quantity, ...
    reason           TEXT NOT NULL,            -- the specific message, quoting the bad value
    quarantined_at   INTEGER NOT NULL          -- timestamp-micros, UTC
);

CREATE TRIGGER quarantine_refuse_update BEFORE UPDATE ON quarantine
BEGIN SELECT RAISE(ABORT, 'quarantine is append-only: UPDATE refused'); END;
CREATE TRIGGER quarantine_refuse_delete BEFORE DELETE ON quarantine
BEGIN SELECT RAISE(ABORT, 'quarantine is append-only: DELETE refused'); END;

-- The next offset to read per Kafka partition, written in the same transaction as the events it covers.
-- The one mutable table: it only moves forward.
CREATE TABLE offsets (
    topic       TEXT NOT NULL,
    partition   INTEGER NOT NULL,
    next_offset INTEGER NOT NULL CHECK (next_offset >= 0),
    PRIMARY KEY (topic, partition)
) WITHOUT ROWID;

CREATE TRIGGER offsets_only_forward BEFORE UPDATE ON offsets
WHEN NEW.next_offset < OLD.next_offset
BEGIN SELECT RAISE(ABORT, 'offsets only move forward'); END;
CREATE TRIGGER offsets_refuse_delete BEFORE DELETE ON offsets
BEGIN SELECT RAISE(ABORT, 'offsets: DELETE refused'); END;
