-- How far `ingest --file` got in each Avro object container file, written in the same transaction as the records it
-- covers, so that a rerun after a kill resumes where the last committed batch ended instead of reading the file
-- again (every record of it a duplicate, each one a row of `duplicates`). A file is known by its sync marker, the 16
-- random bytes its writer put after the header and every block; `digest` is the SHA-256 over the first `records`
-- records (each as its length, 8 bytes little-endian, then its single-object bytes), which a rerun recomputes before
-- it skips them: a different file that happens to carry the same marker is ingested whole, and its progress then
-- replaces the other's (so, unlike `offsets`, a row may move back). A wrong row can only make a rerun read records
-- again, never skip one: the digest must match first.
CREATE TABLE IF NOT EXISTS file_progress (
    sync_marker BLOB PRIMARY KEY CHECK (length(sync_marker) = 16),
    path        TEXT NOT NULL,                 -- as given to the last ingest that moved it (for people)
    records     INTEGER NOT NULL CHECK (records >= 0),
    digest      BLOB NOT NULL CHECK (length(digest) = 32),
    updated_at  INTEGER NOT NULL               -- timestamp-micros, UTC
) WITHOUT ROWID;

CREATE TRIGGER IF NOT EXISTS file_progress_refuse_delete BEFORE DELETE ON file_progress
BEGIN SELECT RAISE(ABORT, 'file_progress: DELETE refused'); END;
