-- The enforcement hook's state as of a watermark (contract §6): what a starting hook reads, then the entries after
-- the watermark, instead of folding the ledger's last month. Derived data, not a record: a snapshot is replaced by
-- the next (only the latest is kept), and a start that finds it invalid folds the ledger as if it were not there.
-- watermark: the last entry the state folded; entry_hash: that entry's entry_hash when the snapshot was written, so
-- that a ledger restored or rewritten under it is told apart; ledger_id: the ledger it was written in; taken_at: the
-- instant (microseconds) the state was pruned at; checksum: SHA-256 of body; body: the state, encoded by the hook in
-- the format format_version names.
CREATE TABLE hook_snapshots (
    watermark      INTEGER PRIMARY KEY,
    entry_hash     BLOB NOT NULL,
    ledger_id      TEXT NOT NULL,
    format_version INTEGER NOT NULL,
    taken_at       INTEGER NOT NULL,
    checksum       BLOB NOT NULL,
    body           BLOB NOT NULL
);
