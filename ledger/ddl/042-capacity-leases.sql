-- CapacityLeaseEvent: a step in the life of a capacity lease (GRANT, RENEW, RETURN, EXPIRE, RECLAIM), units of one
-- window of an ESCROW policy the tenant's owner shard lent to a holder. The allocator's book of a window is folded
-- from these rows in ledger order, so they are never changed: a lease's later steps are new entries.
CREATE TABLE capacity_lease_events (
    seq               INTEGER PRIMARY KEY REFERENCES entries (seq),
    capacity_lease_id TEXT NOT NULL,
    action            TEXT NOT NULL,            -- GRANT | RENEW | RETURN | EXPIRE | RECLAIM
    holder            TEXT NOT NULL,            -- shard-NNNN in one process, a node's id in a cluster
    policy_id         TEXT NOT NULL,
    policy_version    INTEGER NOT NULL,
    window_start      INTEGER NOT NULL,         -- timestamp-micros
    window_end        INTEGER NOT NULL,
    units             INTEGER NOT NULL,         -- GRANT: put out; RENEW: added; RETURN, RECLAIM: came back; EXPIRE: 0
    used              INTEGER,                  -- RENEW: so far; RETURN, RECLAIM: in all
    expires_at        INTEGER                   -- GRANT, RENEW
);

-- A lease's steps in order, and a window's leases: what the allocator folds and audit lists.
CREATE INDEX capacity_lease_events_by_lease ON capacity_lease_events (capacity_lease_id, seq);

CREATE TRIGGER capacity_lease_events_refuse_update BEFORE UPDATE ON capacity_lease_events
BEGIN SELECT RAISE(ABORT, 'capacity_lease_events is append-only: UPDATE refused (record the lease''s next step as a new entry)'); END;
CREATE TRIGGER capacity_lease_events_refuse_delete BEFORE DELETE ON capacity_lease_events
BEGIN SELECT RAISE(ABORT, 'capacity_lease_events is append-only: DELETE refused (record the lease''s next step as a new entry)'); END;
