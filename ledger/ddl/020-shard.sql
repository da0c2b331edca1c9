-- Which Kafka partition a shard holds (contract §9.4). A shard of a `--data` directory has one row, written when it
-- was created and never changed: it holds partition `partition` of every input topic, of `partitions` in all, and
-- what the hook and reconcile recorded for that partition's tenants. A ledger without a row (`--ledger FILE`) holds
-- every partition.
CREATE TABLE shard_identity (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    partition  INTEGER NOT NULL CHECK (partition >= 0),
    partitions INTEGER NOT NULL CHECK (partitions > partition),
    created_at INTEGER NOT NULL                -- timestamp-micros, UTC
);

CREATE TRIGGER shard_identity_refuse_update BEFORE UPDATE ON shard_identity
BEGIN SELECT RAISE(ABORT, 'shard_identity is append-only: UPDATE refused (a shard keeps its partition)'); END;
CREATE TRIGGER shard_identity_refuse_delete BEFORE DELETE ON shard_identity
BEGIN SELECT RAISE(ABORT, 'shard_identity is append-only: DELETE refused (a shard keeps its partition)'); END;
