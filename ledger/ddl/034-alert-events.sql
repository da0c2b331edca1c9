-- AlertEvent (issue 37 item 4): a warning before anyone hits a wall, written by the enforcement hook as a request
-- reaches a threshold of a window's effective limit, once per window, policy, member and threshold (its alert_id
-- is deterministic, so the same alert found again is a duplicate).
CREATE TABLE alert_events (
    seq               INTEGER PRIMARY KEY REFERENCES entries (seq),
    alert_id          TEXT NOT NULL,
    kind              TEXT NOT NULL,
    policy_id         TEXT,
    policy_version    INTEGER,
    scope             TEXT,
    window_start      INTEGER,                  -- timestamp-micros
    window_end        INTEGER,                  -- timestamp-micros
    threshold_percent INTEGER NOT NULL,
    "limit"           INTEGER,
    observed          INTEGER NOT NULL,
    request_id        TEXT
);

CREATE TRIGGER alert_events_refuse_update BEFORE UPDATE ON alert_events
BEGIN SELECT RAISE(ABORT, 'alert_events is append-only: UPDATE refused (record a correction as a new entry)'); END;
CREATE TRIGGER alert_events_refuse_delete BEFORE DELETE ON alert_events
BEGIN SELECT RAISE(ABORT, 'alert_events is append-only: DELETE refused (record a correction as a new entry)'); END;
