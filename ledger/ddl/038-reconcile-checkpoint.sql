-- What the last reconcile run that recorded its plan concluded, so that the next run as of the same instant reads only
-- what was appended since (`reconcile/src/incremental.rs`): one row, replaced by each such run. Derived state: a
-- ledger without it (or a row a run cannot use) is reconciled in full, with the same result.
CREATE TABLE reconcile_checkpoint (
    id                   INTEGER PRIMARY KEY CHECK (id = 1),
    as_of                INTEGER NOT NULL,  -- timestamp-micros: the run's --as-of
    open_too_long_micros INTEGER NOT NULL,  -- its alert setting (--open-alert-after-s), which its alerts depend on
    watermark            INTEGER NOT NULL,  -- the last ledger sequence number its plan read
    run_id               TEXT NOT NULL,     -- its adjustments' run_id
    adjustments          INTEGER NOT NULL,  -- adjustments recorded once its plan was: another writer's shows as more
    closes               INTEGER NOT NULL,  -- period closes then: a close since changes what is late
    reports              TEXT NOT NULL,     -- JSON: its per-tenant reports (leases expired, gauges over their limit)
    recorded_at          INTEGER NOT NULL   -- timestamp-micros
);
