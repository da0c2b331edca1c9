-- MeterEvent: one version of a meter, how a metric's usage events aggregate into the quantity a window counts and a
-- bill charges (SUM when the metric has none). Keyed by tenant (or '*') and metric in the entry; versions grow.
CREATE TABLE meter_events (
    seq            INTEGER PRIMARY KEY REFERENCES entries (seq),
    version        INTEGER NOT NULL,
    aggregation    TEXT NOT NULL,            -- SUM | COUNT | UNIQUE_COUNT | MAX | LATEST | TIME_WEIGHTED_SUM | TIME_WEIGHTED_AVERAGE
    field          TEXT,                     -- UNIQUE_COUNT: SUBJECT | PROJECT | API_KEY
    effective_from INTEGER NOT NULL,         -- timestamp-micros
    actor          TEXT NOT NULL,
    reason         TEXT NOT NULL
);

CREATE TRIGGER meter_events_refuse_update BEFORE UPDATE ON meter_events
BEGIN SELECT RAISE(ABORT, 'meter_events is append-only: UPDATE refused (record a new meter version)'); END;
CREATE TRIGGER meter_events_refuse_delete BEFORE DELETE ON meter_events
BEGIN SELECT RAISE(ABORT, 'meter_events is append-only: DELETE refused (record a new meter version)'); END;
