-- The type-specific fields of every entry, one table per record type, keyed by ledger sequence number.
-- They are decoded from `entries.payload` when the entry is appended, so that reports can query them without
-- decoding Avro; `verify` decodes the payload again and checks that they agree.
CREATE TABLE usage_events (
    seq        INTEGER PRIMARY KEY REFERENCES entries (seq),
    quantity   INTEGER NOT NULL,
    request_id TEXT,
    attributes TEXT NOT NULL                    -- JSON object of strings, keys sorted
);

CREATE TABLE decision_events (
    seq             INTEGER PRIMARY KEY REFERENCES entries (seq),
    request_id      TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    amount          INTEGER NOT NULL,
    outcome         TEXT NOT NULL,
    reason          TEXT NOT NULL,
    policy_id       TEXT,
    policy_version  INTEGER,
    window_start    INTEGER,                    -- timestamp-micros
    window_end      INTEGER,                    -- timestamp-micros
    "limit"         INTEGER,
    used_before     INTEGER,
    remaining       INTEGER,
    retry_after_ms  INTEGER
);
CREATE INDEX decision_events_by_request_id ON decision_events (request_id);

CREATE TABLE reservation_events (
    seq            INTEGER PRIMARY KEY REFERENCES entries (seq),
    reservation_id TEXT NOT NULL,
    action         TEXT NOT NULL,
    amount         INTEGER NOT NULL,
    expires_at     INTEGER                      -- timestamp-micros
);
CREATE INDEX reservation_events_by_reservation_id ON reservation_events (reservation_id);

CREATE TABLE grant_events (
    seq         INTEGER PRIMARY KEY REFERENCES entries (seq),
    grant_id    TEXT NOT NULL,
    amount      INTEGER NOT NULL,
    valid_from  INTEGER NOT NULL,               -- timestamp-micros
    valid_until INTEGER NOT NULL,               -- timestamp-micros, exclusive
    reason      TEXT NOT NULL
);

CREATE TABLE policy_events (
    seq            INTEGER PRIMARY KEY REFERENCES entries (seq),
    policy_id      TEXT NOT NULL,
    version        INTEGER NOT NULL,
    scope          TEXT NOT NULL,
    "limit"        INTEGER NOT NULL,
    window         TEXT NOT NULL,
    enforcement    TEXT NOT NULL,
    effective_from INTEGER NOT NULL             -- timestamp-micros
);

CREATE TABLE adjustment_events (
    seq           INTEGER PRIMARY KEY REFERENCES entries (seq),
    adjustment_id TEXT NOT NULL,
    kind          TEXT NOT NULL,
    policy_id     TEXT,
    window_start  INTEGER,                      -- timestamp-micros
    window_end    INTEGER,                      -- timestamp-micros
    amount        INTEGER NOT NULL,
    refs          TEXT NOT NULL,                -- JSON array of event_ids
    run_id        TEXT NOT NULL
);

CREATE TRIGGER usage_events_refuse_update BEFORE UPDATE ON usage_events
BEGIN SELECT RAISE(ABORT, 'usage_events is append-only: UPDATE refused (record a correction as a new entry)'); END;
CREATE TRIGGER usage_events_refuse_delete BEFORE DELETE ON usage_events
BEGIN SELECT RAISE(ABORT, 'usage_events is append-only: DELETE refused (record a correction as a new entry)'); END;

CREATE TRIGGER decision_events_refuse_update BEFORE UPDATE ON decision_events
BEGIN SELECT RAISE(ABORT, 'decision_events is append-only: UPDATE refused (record a correction as a new entry)'); END;
CREATE TRIGGER decision_events_refuse_delete BEFORE DELETE ON decision_events
BEGIN SELECT RAISE(ABORT, 'decision_events is append-only: DELETE refused (record a correction as a new entry)'); END;

CREATE TRIGGER reservation_events_refuse_update BEFORE UPDATE ON reservation_events
BEGIN SELECT RAISE(ABORT, 'reservation_events is append-only: UPDATE refused (record a correction as a new entry)'); END;
CREATE TRIGGER reservation_events_refuse_delete BEFORE DELETE ON reservation_events
BEGIN SELECT RAISE(ABORT, 'reservation_events is append-only: DELETE refused (record a correction as a new entry)'); END;

CREATE TRIGGER grant_events_refuse_update BEFORE UPDATE ON grant_events
BEGIN SELECT RAISE(ABORT, 'grant_events is append-only: UPDATE refused (record a correction as a new entry)'); END;
CREATE TRIGGER grant_events_refuse_delete BEFORE DELETE ON grant_events
BEGIN SELECT RAISE(ABORT, 'grant_events is append-only: DELETE refused (record a correction as a new entry)'); END;

CREATE TRIGGER policy_events_refuse_update BEFORE UPDATE ON policy_events
BEGIN SELECT RAISE(ABORT, 'policy_events is append-only: UPDATE refused (record a correction as a new entry)'); END;
CREATE TRIGGER policy_events_refuse_delete BEFORE DELETE ON policy_events
BEGIN SELECT RAISE(ABORT, 'policy_events is append-only: DELETE refused (record a correction as a new entry)'); END;

CREATE TRIGGER adjustment_events_refuse_update BEFORE UPDATE ON adjustment_events
BEGIN SELECT RAISE(ABORT, 'adjustment_events is append-only: UPDATE refused (record a correction as a new entry)'); END;
CREATE TRIGGER adjustment_events_refuse_delete BEFORE DELETE ON adjustment_events
BEGIN SELECT RAISE(ABORT, 'adjustment_events is append-only: DELETE refused (record a correction as a new entry)'); END;
