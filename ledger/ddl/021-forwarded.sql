-- Events a shard received in another tenant's partition (a producer with another partitioner) and re-published to
-- their tenant's partition (contract §9.4): the shard records the copy it forwarded instead of the event, in the
-- transaction that stores the offset past it, and only after the broker acknowledged the copy. The shard of the
-- tenant's partition ingests the copy; a copy published twice (a crash between the broker's acknowledgement and the
-- commit) is one event_id, counted once there. `status` counts these rows per topic as `misrouted`.
CREATE TABLE forwarded (
    id           INTEGER PRIMARY KEY,
    topic        TEXT    NOT NULL,
    partition    INTEGER NOT NULL,            -- where the event was read
    offset       INTEGER NOT NULL,
    event_id     TEXT    NOT NULL,
    tenant       TEXT    NOT NULL,
    to_partition INTEGER NOT NULL,            -- the tenant's partition, where the copy went
    forwarded_at INTEGER NOT NULL             -- timestamp-micros, UTC: when the append recorded it
);

CREATE INDEX forwarded_by_topic ON forwarded (topic);

CREATE TRIGGER forwarded_refuse_update BEFORE UPDATE ON forwarded
BEGIN SELECT RAISE(ABORT, 'forwarded is append-only: UPDATE refused'); END;
CREATE TRIGGER forwarded_refuse_delete BEFORE DELETE ON forwarded
BEGIN SELECT RAISE(ABORT, 'forwarded is append-only: DELETE refused'); END;
