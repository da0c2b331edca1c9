-- Quarantined messages replayed after a fix (`quarantine replay`): each at most once, with what became of it.
CREATE TABLE quarantine_replays (
    quarantine_id INTEGER PRIMARY KEY REFERENCES quarantine (id),
    replayed_at   INTEGER NOT NULL,             -- timestamp-micros, UTC
    outcome       TEXT NOT NULL CHECK (outcome IN ('recorded', 'duplicate', 'conflicting_duplicate')),
    seq           INTEGER NOT NULL REFERENCES entries (seq)  -- the entry it became or repeats
);

CREATE TRIGGER quarantine_replays_refuse_update BEFORE UPDATE ON quarantine_replays
BEGIN SELECT RAISE(ABORT, 'quarantine_replays is append-only: UPDATE refused'); END;
CREATE TRIGGER quarantine_replays_refuse_delete BEFORE DELETE ON quarantine_replays
BEGIN SELECT RAISE(ABORT, 'quarantine_replays is append-only: DELETE refused'); END;
