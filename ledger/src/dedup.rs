//! Deduplication forever: finding the entries that already hold an event_id, through the two-tier key index
//! of `ddl/001-entries.sql` (`event_keys_recent`, merged into `event_keys_sealed`).

use rusqlite::{Connection, params};

use crate::EVENT_KEYS_RECENT_ENTRIES;
use crate::chain;

/// The dedup key of an event_id: the first 8 bytes of its SHA-256, as a signed integer.
pub fn event_key(event_id: &str) -> i64 {
    let hash = chain::sha256(event_id.as_bytes());
    i64::from_le_bytes(hash[..8].try_into().expect("8 bytes of a 32-byte hash"))
}

/// The entries already holding `event_id`: `(seq, payload_hash)`, oldest first. The oldest is the recorded
/// one; the others are conflicting duplicates.
pub fn entries_of(conn: &Connection, event_id: &str) -> rusqlite::Result<Vec<(u64, Vec<u8>)>> {
    let mut statement = conn.prepare_cached(
        "SELECT e.seq, e.event_id, e.payload_hash
         FROM (SELECT seq FROM event_keys_recent WHERE event_key = ?1
               UNION ALL SELECT seq FROM event_keys_sealed WHERE event_key = ?1) k
         JOIN entries e ON e.seq = k.seq
         ORDER BY e.seq",
    )?;
    let rows = statement.query_map([event_key(event_id)], |r| {
        Ok((r.get::<_, i64>(0)? as u64, r.get::<_, String>(1)?, r.get::<_, Vec<u8>>(2)?))
    })?;
    let mut found = Vec::new();
    for row in rows {
        let (seq, id, payload_hash) = row?;
        // Two event_ids may share a key; only the same event_id counts.
        if id == event_id {
            found.push((seq, payload_hash));
        }
    }
    Ok(found)
}

/// Indexes a new entry.
pub fn insert(conn: &Connection, event_id: &str, seq: u64) -> rusqlite::Result<()> {
    conn.prepare_cached("INSERT INTO event_keys_recent (event_key, seq) VALUES (?, ?)")?
        .execute(params![event_key(event_id), seq as i64])?;
    Ok(())
}

/// Moves the recent keys, sorted, into the sealed tier when this append crossed a multiple of
/// `EVENT_KEYS_RECENT_ENTRIES` entries. Returns the keys moved.
pub fn merge_if_due(conn: &Connection, watermark_before: u64, watermark_after: u64) -> rusqlite::Result<usize> {
    if watermark_before / EVENT_KEYS_RECENT_ENTRIES == watermark_after / EVENT_KEYS_RECENT_ENTRIES {
        return Ok(0);
    }
    let moved = conn.execute(
        "INSERT INTO event_keys_sealed (event_key, seq)
         SELECT event_key, seq FROM event_keys_recent ORDER BY event_key, seq",
        [],
    )?;
    let deleted = conn.execute("DELETE FROM event_keys_recent", [])?;
    assert_eq!(moved, deleted, "every recent key moved to the sealed tier");
    Ok(moved)
}

/// Whether the entry `seq` of `event_id` is in the key index (`verify`: an entry missing there would let a
/// duplicate of it be counted again).
pub fn is_indexed(conn: &Connection, event_id: &str, seq: u64) -> rusqlite::Result<bool> {
    let key = event_key(event_id);
    let count: i64 = conn
        .prepare_cached(
            "SELECT (SELECT COUNT(*) FROM event_keys_recent WHERE event_key = ?1 AND seq = ?2)
              + (SELECT COUNT(*) FROM event_keys_sealed WHERE event_key = ?1 AND seq = ?2)",
        )?
        .query_row(params![key, seq as i64], |r| r.get(0))?;
    Ok(count == 1)
}
