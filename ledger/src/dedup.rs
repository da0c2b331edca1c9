//! Deduplication forever: finding the entries that already hold an event_id, through the tiered key index of
//! `ddl/001-entries.sql` and `ddl/009-dedup-tiers.sql` (`event_keys_recent`, moved into `event_keys_middle`,
//! into `event_keys_large`, into `event_keys_sealed`).

use std::sync::LazyLock;

use rusqlite::{Connection, params};

use crate::chain;
use crate::{EVENT_KEYS_MOVE_EVERY, EVENT_KEYS_SLICES};

/// The tiers of the key index, newest first.
pub(crate) const TIERS: [&str; 4] = ["event_keys_recent", "event_keys_middle", "event_keys_large", "event_keys_sealed"];

/// The point probe of each tier.
static PROBES: LazyLock<[String; 4]> =
    LazyLock::new(|| TIERS.map(|tier| format!("SELECT seq FROM {tier} WHERE event_key = ?")));

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
    // Almost every event_id is new: a point probe per tier, and the entries are read only on a hit.
    let mut seqs = seqs_of_key(conn, key)?;
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

/// The entries indexed under `key`, in every tier.
fn seqs_of_key(conn: &Connection, key: i64) -> rusqlite::Result<Vec<i64>> {
    let mut seqs = Vec::new();
    for sql in PROBES.iter() {
        let mut statement = conn.prepare_cached(sql)?;
        let rows = statement.query_map([key], |r| r.get(0))?;
        for seq in rows {
            seqs.push(seq?);
        }
    }
    Ok(seqs)
}

/// Indexes a new entry under its key (`event_key` of its event_id): `(key, seq)`.
pub(crate) const INSERT_KEY: &str = "INSERT INTO event_keys_recent (event_key, seq) VALUES (?, ?)";

/// Moves keys down the tiers for each multiple of `EVENT_KEYS_MOVE_EVERY` entries this append crossed: the
/// whole recent tier into the middle one, then one slice of the middle tier into the large one, then one slice
/// of the large tier into the sealed one (`EVENT_KEYS_SLICES`, taken in turn). Returns the keys moved.
pub(crate) fn merge_if_due(conn: &Connection, watermark_before: u64, watermark_after: u64) -> rusqlite::Result<usize> {
    merge_tiers_if_due(conn, watermark_before, watermark_after, EVENT_KEYS_MOVE_EVERY, EVENT_KEYS_SLICES)
}

/// [`merge_if_due`] with how often and in how many slices given.
fn merge_tiers_if_due(
    conn: &Connection,
    before: u64,
    after: u64,
    every: u64,
    slices: [u64; 2],
) -> rusqlite::Result<usize> {
    let mut moved = 0;
    for crossed in before / every + 1..=after / every {
        moved += move_keys(conn, TIERS[0], TIERS[1], (i64::MIN, i64::MAX))?;
        for (tier, slices) in slices.into_iter().enumerate() {
            let range = slice_range(crossed % slices, slices);
            moved += move_keys(conn, TIERS[tier + 1], TIERS[tier + 2], range)?;
        }
    }
    Ok(moved)
}

/// The keys of slice `slice` of `slices` equal slices of the key space, inclusive at both ends (keys are
/// uniform: they are hash prefixes).
fn slice_range(slice: u64, slices: u64) -> (i64, i64) {
    let width = (1i128 << 64) / i128::from(slices);
    let low = i128::from(i64::MIN) + i128::from(slice) * width;
    let high = if slice + 1 == slices { i128::from(i64::MAX) } else { low + width - 1 };
    (low as i64, high as i64)
}

/// Moves the keys of the tier `from` in `range` (inclusive), sorted, into the tier `into`.
fn move_keys(conn: &Connection, from: &str, into: &str, (low, high): (i64, i64)) -> rusqlite::Result<usize> {
    let moved = conn
        .prepare_cached(&format!(
            "INSERT INTO {into} (event_key, seq) SELECT event_key, seq FROM {from}
             WHERE event_key BETWEEN ?1 AND ?2 ORDER BY event_key, seq"
        ))?
        .execute(params![low, high])?;
    let deleted = conn
        .prepare_cached(&format!("DELETE FROM {from} WHERE event_key BETWEEN ?1 AND ?2"))?
        .execute(params![low, high])?;
    assert_eq!(moved, deleted, "every key of {from} in the range moved to {into}");
    Ok(moved)
}

/// Whether the entry `seq` of `event_id` is in the key index (`verify`: an entry missing there would let a
/// duplicate of it be counted again).
pub fn is_indexed(conn: &Connection, event_id: &str, seq: u64) -> rusqlite::Result<bool> {
    let seqs = seqs_of_key(conn, event_key(event_id))?;
    Ok(seqs.iter().filter(|&&s| s == seq as i64).count() == 1)
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

    // Proves that every key stays in exactly one tier and is found through all the moves, that a key waits in the
    // middle and the large tier no longer than their slices allow, and that an event seen before still is a
    // duplicate wherever its key now is.
    #[test]
    fn keys_move_down_the_tiers_and_stay_found() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = Ledger::open(dir.path().join("ledger.db")).unwrap();
        let ids: Vec<String> = (0..30).map(|i| format!("e-{i}")).collect();
        let (every, slices) = (2, [2, 3]);
        for (id, watermark) in ids.iter().zip(1u64..) {
            ledger.append(&Batch { events: vec![usage(id)], ..Batch::default() }).unwrap();
            merge_tiers_if_due(ledger.connection(), watermark - 1, watermark, every, slices).unwrap();
        }
        let seqs = |tier: &str| -> Vec<i64> {
            let mut statement = ledger.connection().prepare(&format!("SELECT seq FROM {tier}")).unwrap();
            statement.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
        };
        let [recent, middle, large, sealed] = TIERS.map(seqs);
        assert_eq!(recent.len() + middle.len() + large.len() + sealed.len(), ids.len());
        assert!(!sealed.is_empty(), "keys reached the sealed tier");
        // 30 entries are 15 moves; move m takes the recent tier's entries (2m - 1, 2m) into the middle one. A key
        // leaves the middle tier by move m + 1 (2 slices), then the large one 2 moves later at most (3 slices).
        assert!(recent.is_empty(), "30 is a multiple of 2: the recent tier just moved");
        assert!(middle.iter().all(|&seq| seq > 14 * 2), "only move 15's keys may wait in the middle tier: {middle:?}");
        assert!(
            large.iter().all(|&seq| seq > 12 * 2),
            "only moves 13 to 15's keys may wait in the large tier: {large:?}"
        );
        for (id, seq) in ids.iter().zip(1u64..) {
            assert_eq!(entries_of(ledger.connection(), id).unwrap().len(), 1, "{id}");
            assert!(is_indexed(ledger.connection(), id, seq).unwrap(), "{id}");
        }
        for id in &ids {
            let report = ledger.append(&Batch { events: vec![usage(id)], ..Batch::default() }).unwrap();
            assert!(matches!(report.outcomes[..], [AppendOutcome::Duplicate { .. }]), "{id}");
        }
    }

    // Proves that the slices cover the key space exactly: adjacent, in order, from the least key to the greatest.
    #[test]
    fn slices_cover_the_key_space() {
        for slices in [1, 2, 3, 25, 625] {
            let ranges: Vec<(i64, i64)> = (0..slices).map(|slice| slice_range(slice, slices)).collect();
            assert_eq!(ranges[0].0, i64::MIN);
            assert_eq!(ranges[ranges.len() - 1].1, i64::MAX);
            for pair in ranges.windows(2) {
                assert!(pair[0].0 <= pair[0].1 && pair[0].1 + 1 == pair[1].0, "{slices}: {pair:?}");
            }
        }
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
