-- The request key index (`ledger/src/dedup.rs`): every DecisionEvent entry under the key of its request_id (the
-- first 8 bytes of its SHA-256), in four tiers moved like the dedup key index's (`009-dedup-tiers.sql`), for
-- `audit why REQUEST_ID`. It replaces the index of the request_id text: with random request ids (UUIDs) each
-- decision's insert landed in a page of its own, which every commit then wrote, and more of them the larger the
-- index grew. The keys of the decisions already recorded are computed by the migration's code
-- (`dedup::index_recorded_requests`) and written, sorted, into the sealed tier.
CREATE TABLE request_keys_recent (
    request_key INTEGER NOT NULL,
    seq         INTEGER NOT NULL REFERENCES entries (seq),
    PRIMARY KEY (request_key, seq)
) WITHOUT ROWID;
CREATE TABLE request_keys_middle (
    request_key INTEGER NOT NULL,
    seq         INTEGER NOT NULL REFERENCES entries (seq),
    PRIMARY KEY (request_key, seq)
) WITHOUT ROWID;
CREATE TABLE request_keys_large (
    request_key INTEGER NOT NULL,
    seq         INTEGER NOT NULL REFERENCES entries (seq),
    PRIMARY KEY (request_key, seq)
) WITHOUT ROWID;
CREATE TABLE request_keys_sealed (
    request_key INTEGER NOT NULL,
    seq         INTEGER NOT NULL REFERENCES entries (seq),
    PRIMARY KEY (request_key, seq)
) WITHOUT ROWID;
DROP INDEX decision_events_by_request_id;
