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
    entries_of_key(conn, event_id, event_key(event_id))
}

/// [`entries_of`] for a caller that has the key already (`key` is `event_key(event_id)`).
pub(crate) fn entries_of_key(conn: &Connection, event_id: &str, key: i64) -> rusqlite::Result<Vec<(u64, Vec<u8>)>> {
    // Almost every event_id is new: two point probes, and the entries are read only on a hit.
    let mut seqs: Vec<i64> = Vec::new();
    for sql in [
        "SELECT seq FROM event_keys_recent WHERE event_key = ?",
        "SELECT seq FROM event_keys_sealed WHERE event_key = ?",
    ] {
        let mut statement = conn.prepare_cached(sql)?;
        let rows = statement.query_map([key], |r| r.get(0))?;
        for seq in rows {
            seqs.push(seq?);
        }
    }
    if seqs.is_empty() {
        return Ok(Vec::new());
    }
    seqs.sort_unstable();
    let mut found = Vec::new();
    let mut statement = conn.prepare_cached("SELECT event_id, payload_hash FROM entries WHERE seq = ?")?;
    for seq in seqs {
        let (id, payload_hash): (String, Vec<u8>) = statement.query_row([seq], |r| Ok((r.get(0)?, r.get(1)?)))?;
        // Two event_ids may share a key; only the same event_id counts.
        if id == event_id {
            found.push((seq as u64, payload_hash));
        }
    }
    Ok(found)
}

/// Indexes a new entry under its key (`event_key` of its event_id).
pub(crate) fn insert(conn: &Connection, key: i64, seq: u64) -> rusqlite::Result<()> {
    conn.prepare_cached("INSERT INTO event_keys_recent (event_key, seq) VALUES (?, ?)")?
        .execute(params![key, seq as i64])?;
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

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use schemas::{Event, Header, Timestamp, UsageEvent};

    use super::*;
    use crate::{AppendOutcome, Batch, Incoming, Ledger, Origin};

    /// A UsageEvent of `event_id`, written locally (the other modules' tests use it too).
    pub(crate) fn usage(event_id: &str) -> Incoming {
        let header = Header {
            event_id: event_id.into(),
            occurred_at: Timestamp(1_793_491_200_000_000),
            tenant: "org-1".into(),
            subject: None,
            metric: "requests".into(),
            source: "test".into(),
        };
        let event = Event::Usage(UsageEvent { header, quantity: 1, request_id: None, attributes: BTreeMap::new() });
        Incoming { event, origin: Origin::Local { name: "test".into() }, raw: None }
    }

    // Proves that an event_id whose key collides with another's is not taken for a duplicate of it.
    #[test]
    fn a_key_collision_is_not_a_duplicate() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = Ledger::open(dir.path().join("ledger.db")).unwrap();
        ledger.append(&Batch { events: vec![usage("a")], ..Batch::default() }).unwrap();
        // Make "b" collide with "a": a key row for b pointing at a's entry (SHA-256 prefixes never collide by chance).
        ledger
            .connection()
            .execute("INSERT INTO event_keys_sealed (event_key, seq) VALUES (?, 1)", [event_key("b")])
            .unwrap();
        assert_eq!(entries_of(ledger.connection(), "b").unwrap(), vec![]);
        let report = ledger.append(&Batch { events: vec![usage("b")], ..Batch::default() }).unwrap();
        assert_eq!(report.outcomes, [AppendOutcome::Recorded { seq: 2 }]);
        assert_eq!(entries_of(ledger.connection(), "b").unwrap().len(), 1);
    }
}
