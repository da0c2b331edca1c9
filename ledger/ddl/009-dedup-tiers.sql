-- More tiers in the deduplication key index (`ddl/001-entries.sql`): `event_keys_recent` holds only the last
-- entries' keys (a dozen pages); they move, sorted, into `event_keys_middle`, then one slice of the key space at a
-- time into `event_keys_large`, then into `event_keys_sealed` (how often: `EVENT_KEYS_MOVE_EVERY`,
-- `EVENT_KEYS_SLICES`). With two tiers, a recent tier large enough to move rarely was 200 pages that random
-- inserts dirtied in every commit, and each move rewrote most pages of a large sealed tier in one commit.
CREATE TABLE event_keys_middle (
    event_key INTEGER NOT NULL,
    seq       INTEGER NOT NULL REFERENCES entries (seq),
    PRIMARY KEY (event_key, seq)
) WITHOUT ROWID;
CREATE TABLE event_keys_large (
    event_key INTEGER NOT NULL,
    seq       INTEGER NOT NULL REFERENCES entries (seq),
    PRIMARY KEY (event_key, seq)
) WITHOUT ROWID;
