-- CorrectionEvent: a correction of a recorded usage event (VOID, or AMEND to a new amount), a new entry that
-- references the original, which stays recorded as it was.
CREATE TABLE correction_events (
    seq               INTEGER PRIMARY KEY REFERENCES entries (seq),
    original_event_id TEXT NOT NULL,
    action            TEXT NOT NULL,            -- VOID | AMEND
    quantity          INTEGER,                  -- AMEND: what the original counts from now on
    actor             TEXT NOT NULL,
    reason            TEXT NOT NULL
);

CREATE TRIGGER correction_events_refuse_update BEFORE UPDATE ON correction_events
BEGIN SELECT RAISE(ABORT, 'correction_events is append-only: UPDATE refused (record a correction as a new entry)'); END;
CREATE TRIGGER correction_events_refuse_delete BEFORE DELETE ON correction_events
BEGIN SELECT RAISE(ABORT, 'correction_events is append-only: DELETE refused (record a correction as a new entry)'); END;

-- What each recorded correction changes, judged by the append that recorded it: the original's entry, its tenant,
-- members, metric and event time (where the change counts: the original's month and windows), what it counted before
-- and after, and the difference. Derived from the entries in ledger order (each correction against the one before it
-- of the same original), written in the correction's own transaction; every usage sum adds `delta` beside the
-- originals' quantities.
CREATE TABLE usage_corrections (
    seq             INTEGER PRIMARY KEY REFERENCES correction_events (seq),
    original_seq    INTEGER NOT NULL REFERENCES entries (seq),
    tenant          TEXT NOT NULL,
    subject         TEXT,
    project         TEXT,
    api_key         TEXT,
    metric          TEXT NOT NULL,
    occurred_at     INTEGER NOT NULL,          -- the original's, timestamp-micros
    period          TEXT NOT NULL,             -- the original's month, YYYY-MM, UTC
    quantity_before INTEGER NOT NULL,
    quantity_after  INTEGER NOT NULL,
    delta           INTEGER NOT NULL
);
CREATE INDEX usage_corrections_by_original ON usage_corrections (original_seq, seq);
CREATE INDEX usage_corrections_by_period ON usage_corrections (period, tenant, metric);

CREATE TRIGGER usage_corrections_refuse_update BEFORE UPDATE ON usage_corrections
BEGIN SELECT RAISE(ABORT, 'usage_corrections is append-only: UPDATE refused (record a correction as a new entry)'); END;
CREATE TRIGGER usage_corrections_refuse_delete BEFORE DELETE ON usage_corrections
BEGIN SELECT RAISE(ABORT, 'usage_corrections is append-only: DELETE refused (record a correction as a new entry)'); END;
