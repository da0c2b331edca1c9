//! The ledger's tiered key indexes: 64-bit keys (hash prefixes of a name) to the entries holding that name, in
//! four tiers each (`ddl/001-entries.sql`, `ddl/009-dedup-tiers.sql`, `ddl/010-request-keys.sql`): the recent
//! tier, moved into the middle one, into the large one, into the sealed one. A commit's random keys dirty only the
//! recent tier's few pages, and each move writes its keys sorted.
//!
//! Two indexes use them. Deduplication forever: every entry under the key of its event_id (`event_keys_*`).
//! `audit why`: every DecisionEvent under the key of its request_id (`request_keys_*`), where an index of the
//! request_id text dirtied a page of its own per decision with random request ids (UUIDs), and more the larger
//! it grew.

use std::sync::LazyLock;

use rusqlite::{Connection, params};

use crate::chain;
use crate::{EVENT_KEYS_MOVE_EVERY, EVENT_KEYS_MOVE_PARTS, EVENT_KEYS_SLICES};

/// One tiered key index: its tables, newest first, and their key column.
pub struct KeyIndex {
    /// Its tables, newest (the recent tier) first, sealed last.
    pub tiers: [&'static str; 4],
    /// The column holding the key in every tier.
    pub key_column: &'static str,
    /// The point probe of each tier.
    probes: LazyLock<[String; 4]>,
}

/// The dedup key index: every entry under [`event_key`] of its event_id.
pub static EVENT_KEYS: KeyIndex = KeyIndex {
    tiers: ["event_keys_recent", "event_keys_middle", "event_keys_large", "event_keys_sealed"],
    key_column: "event_key",
    probes: LazyLock::new(|| EVENT_KEYS.probe_sql()),
};

/// The request key index: every DecisionEvent entry under [`request_key`] of its request_id.
pub static REQUEST_KEYS: KeyIndex = KeyIndex {
    tiers: ["request_keys_recent", "request_keys_middle", "request_keys_large", "request_keys_sealed"],
    key_column: "request_key",
    probes: LazyLock::new(|| REQUEST_KEYS.probe_sql()),
};

impl KeyIndex {
    /// The entries indexed under `key`, in every tier.
    fn seqs_of_key(&self, conn: &Connection, key: i64) -> rusqlite::Result<Vec<i64>> {
        let mut seqs = Vec::new();
        for sql in self.probes.iter() {
            let mut statement = conn.prepare_cached(sql)?;
            let rows = statement.query_map([key], |r| r.get(0))?;
            for seq in rows {
                seqs.push(seq?);
            }
        }
        Ok(seqs)
    }

    /// A SQLite condition true for the entries indexed under a key: `seq_column IN` the probes of every tier,
    /// each with its own `?` for the key (bind it `tiers.len()` times). For a caller that looks entries up by name
    /// inside a larger query.
    pub fn condition(&self, seq_column: &str) -> String {
        format!("{seq_column} IN ({})", self.probes.join(" UNION ALL "))
    }

    /// The point probe of each tier: the entries under the key bound to its `?`.
    fn probe_sql(&self) -> [String; 4] {
        self.tiers.map(|tier| format!("SELECT seq FROM {tier} WHERE {} = ?", self.key_column))
    }

    /// The statement indexing an entry: `(key, seq)` into tier `tier` (new entries go into the recent one, 0).
    fn insert_sql(&self, tier: usize) -> String {
        format!("INSERT INTO {} ({}, seq) VALUES (?, ?)", self.tiers[tier], self.key_column)
    }
}

/// The key of a name: the first 8 bytes of its SHA-256, as a signed integer.
fn name_key(name: &str) -> i64 {
    let hash = chain::sha256(name.as_bytes());
    i64::from_le_bytes(hash[..8].try_into().expect("8 bytes of a 32-byte hash"))
}

/// The dedup key of an event_id: the first 8 bytes of its SHA-256, as a signed integer.
pub fn event_key(event_id: &str) -> i64 {
    name_key(event_id)
}

/// The request key of a request_id, made as an event_id's (the two indexes never meet).
pub fn request_key(request_id: &str) -> i64 {
    name_key(request_id)
}

/// An entry holding an event_id: `(seq, payload_hash, payload_fingerprint)`, the fingerprint of the schema its payload
/// was encoded under.
pub(crate) type EntryOfId = (u64, Vec<u8>, u64);

/// The entries already holding `event_id`, oldest first. The oldest is the recorded one; the others are conflicting
/// duplicates.
pub(crate) fn entries_of(conn: &Connection, event_id: &str) -> rusqlite::Result<Vec<EntryOfId>> {
    entries_of_key(conn, event_id, event_key(event_id))
}

/// [`entries_of`] for a caller that has the key already (`key` is `event_key(event_id)`).
pub(crate) fn entries_of_key(conn: &Connection, event_id: &str, key: i64) -> rusqlite::Result<Vec<EntryOfId>> {
    // Almost every event_id is new: a point probe per tier, and the entries are read only on a hit.
    let mut seqs = EVENT_KEYS.seqs_of_key(conn, key)?;
    if seqs.is_empty() {
        return Ok(Vec::new());
    }
    seqs.sort_unstable();
    let mut found = Vec::new();
    let mut statement =
        conn.prepare_cached("SELECT event_id, payload_hash, payload_fingerprint FROM entries WHERE seq = ?")?;
    for seq in seqs {
        let (id, payload_hash, fingerprint): (String, Vec<u8>, i64) =
            statement.query_row([seq], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        // Two event_ids may share a key; only the same event_id counts.
        if id == event_id {
            found.push((seq as u64, payload_hash, fingerprint as u64));
        }
    }
    Ok(found)
}

/// Indexes a new entry under its key (`event_key` of its event_id): `(key, seq)`.
pub(crate) static INSERT_EVENT_KEY: LazyLock<String> = LazyLock::new(|| EVENT_KEYS.insert_sql(0));

/// Indexes a new DecisionEvent entry under its key (`request_key` of its request_id): `(key, seq)`.
pub(crate) static INSERT_REQUEST_KEY: LazyLock<String> = LazyLock::new(|| REQUEST_KEYS.insert_sql(0));

/// The tiered key indexes whose keys [`merge_if_due`] moves; the array's length is their count.
static KEY_INDEXES: [&KeyIndex; KEY_INDEX_COUNT] = [&EVENT_KEYS, &REQUEST_KEYS];
const KEY_INDEX_COUNT: usize = 2;
const _: () = assert!(
    3 * KEY_INDEX_COUNT as u64 * EVENT_KEYS_MOVE_PARTS <= EVENT_KEYS_MOVE_EVERY,
    "each part of the indexes' three moves has a watermark of its own in the period"
);

/// Moves keys down the tiers of both indexes, each move once every `EVENT_KEYS_MOVE_EVERY` entries: the whole
/// recent tier, sorted, into the middle one, then one slice of the middle tier into the large one, then one slice
/// of the large tier into the sealed one (`EVENT_KEYS_SLICES`, taken in turn). Each move runs in
/// `EVENT_KEYS_MOVE_PARTS` parts of its key range, and the parts of the six moves (three per index) at as many
/// evenly spaced watermarks, so that a commit runs a part of one move, not six moves. Returns the keys moved.
pub(crate) fn merge_if_due(conn: &Connection, watermark_before: u64, watermark_after: u64) -> rusqlite::Result<usize> {
    move_keys_due(conn, &KEY_INDEXES, watermark_before, watermark_after, SCHEDULE)
}

/// The ledger's [`Schedule`].
const SCHEDULE: Schedule =
    Schedule { every: EVENT_KEYS_MOVE_EVERY, slices: EVENT_KEYS_SLICES, parts: EVENT_KEYS_MOVE_PARTS };

/// Reads, without writing, the pages of the large and the sealed tiers that the moves [`merge_if_due`] will run
/// between two watermarks take keys from and land keys in: a range of keys in each, visited in one query. Those
/// pages are read rarely (a slice of the sealed tier once every 1,250,000 entries), so on a large ledger the
/// operating system may have dropped them from its page cache, and a move then waits for the disk inside the
/// writer's commit. Run on another connection (the checkpoint thread's) ahead of the writer, the reads warm the
/// page cache instead. Returns the keys read.
pub(crate) fn warm_moves_due(conn: &Connection, watermark_from: u64, watermark_to: u64) -> rusqlite::Result<usize> {
    warm(conn, moves_due(&KEY_INDEXES, watermark_from, watermark_to, SCHEDULE))
}

/// Reads the ranges of `moves` into the large and the sealed tier, in the tier each takes keys from and the one
/// it lands them in; the keys read.
fn warm(conn: &Connection, moves: Vec<Move<'_>>) -> rusqlite::Result<usize> {
    let mut read = 0;
    for due in moves {
        // The recent and the middle tiers are small and written in every period: their pages stay cached.
        if let (1.., Some((low, high))) = (due.tier, due.range) {
            for tier in &due.index.tiers[due.tier..=due.tier + 1] {
                let key = due.index.key_column;
                read += conn
                    .prepare_cached(&format!("SELECT COUNT(*) FROM {tier} WHERE {key} BETWEEN ?1 AND ?2"))?
                    .query_row([low, high], |r| r.get::<_, i64>(0))? as usize;
            }
        }
    }
    Ok(read)
}

/// When keys move down the tiers: every how many entries each tier moves, in how many slices the middle and the
/// large tier's key space is taken in turn, and in how many parts of its key range each move runs.
#[derive(Debug, Clone, Copy)]
struct Schedule {
    every: u64,
    slices: [u64; 2],
    parts: u64,
}

/// A move that is due: the keys of `index`'s tier `tier` in `range` (inclusive; `None`: all of them), into the
/// next tier.
struct Move<'a> {
    index: &'a KeyIndex,
    tier: usize,
    range: Option<(i64, i64)>,
}

/// [`merge_if_due`] for `indexes` on `schedule`: runs the [`moves_due`].
fn move_keys_due(
    conn: &Connection,
    indexes: &[&KeyIndex],
    before: u64,
    after: u64,
    schedule: Schedule,
) -> rusqlite::Result<usize> {
    let mut moved = 0;
    for due in moves_due(indexes, before, after, schedule) {
        moved += due.index.move_keys(conn, due.tier, due.range)?;
    }
    Ok(moved)
}

/// The moves due when the watermark goes from `before` to `after`, in the order they run. Part `p` of move `m`
/// (of the `3 * n` moves: the indexes' recent tiers first, then their middle ones, then their large ones) is step
/// `s = m * parts + p` of the period, and runs when the watermark passes `k * every + s * every / (3 * n *
/// parts)`: the steps of one period of `every` entries are spread over it. Part `p` of a move takes the `p`-th of
/// `parts` equal ranges of the keys that move would take whole, so the parts of a move write, together, about
/// the pages the whole move would (each lands in its own range of the next tier), while a commit of fewer entries
/// than a step waits for one part at most.
fn moves_due<'a>(indexes: &[&'a KeyIndex], before: u64, after: u64, schedule: Schedule) -> Vec<Move<'a>> {
    let Schedule { every, slices, parts } = schedule;
    let steps = 3 * indexes.len() as u64 * parts;
    let mut due = Vec::new();
    for step in 0..steps {
        let (each_move, part) = ((step / parts) as usize, step % parts);
        let (tier, index) = (each_move / indexes.len(), indexes[each_move % indexes.len()]);
        let offset = step * every / steps;
        // The periods whose watermark `k * every + offset` this append passed, numbered from 1.
        for period in (before + every - offset) / every + 1..=(after + every - offset) / every {
            let range = match tier.checked_sub(1) {
                // The recent tier: whole, or its part's range.
                None => (parts > 1).then(|| slice_range(part, parts)),
                Some(deeper) => {
                    let slice = period % slices[deeper];
                    Some(slice_range(slice * parts + part, slices[deeper] * parts))
                }
            };
            due.push(Move { index, tier, range });
        }
    }
    due
}

impl KeyIndex {
    /// Moves the keys of tier `from` in `range` (inclusive; `None`: all of them), sorted, into the next tier.
    fn move_keys(&self, conn: &Connection, from: usize, range: Option<(i64, i64)>) -> rusqlite::Result<usize> {
        let (key, into, from) = (self.key_column, self.tiers[from + 1], self.tiers[from]);
        // A whole tier is emptied without a WHERE: SQLite then clears its pages instead of deleting each row (a
        // move took 7.2 ms of the hook's writer before, 6.1 ms after: `perf`, `wrk -c64`, a new ledger).
        let (filter, bounds) = match range {
            Some((low, high)) => (format!(" WHERE {key} BETWEEN ?1 AND ?2"), vec![low, high]),
            None => (String::new(), Vec::new()),
        };
        let moved = conn
            .prepare_cached(&format!(
                "INSERT INTO {into} ({key}, seq) SELECT {key}, seq FROM {from}{filter} ORDER BY {key}, seq"
            ))?
            .execute(rusqlite::params_from_iter(&bounds))?;
        let deleted = conn
            .prepare_cached(&format!("DELETE FROM {from}{filter}"))?
            .execute(rusqlite::params_from_iter(&bounds))?;
        assert_eq!(moved, deleted, "every key of {from} in the range moved to {into}");
        Ok(moved)
    }

    /// Whether the entry `seq` is indexed exactly once under `key`.
    fn holds_once(&self, conn: &Connection, key: i64, seq: u64) -> rusqlite::Result<bool> {
        let seqs = self.seqs_of_key(conn, key)?;
        Ok(seqs.iter().filter(|&&s| s == seq as i64).count() == 1)
    }
}

/// The keys of slice `slice` of `slices` equal slices of the key space, inclusive at both ends (keys are
/// uniform: they are hash prefixes).
fn slice_range(slice: u64, slices: u64) -> (i64, i64) {
    let width = (1i128 << 64) / i128::from(slices);
    let low = i128::from(i64::MIN) + i128::from(slice) * width;
    let high = if slice + 1 == slices { i128::from(i64::MAX) } else { low + width - 1 };
    (low as i64, high as i64)
}

/// Indexes every DecisionEvent entry already recorded under its request key, sorted, in the sealed tier (the
/// fill of migration `010-request-keys.sql`; about 16 bytes of memory per decision while it runs).
pub(crate) fn index_recorded_requests(conn: &Connection) -> rusqlite::Result<()> {
    let mut keys = Vec::new();
    let mut statement = conn.prepare("SELECT seq, request_id FROM decision_events")?;
    let mut rows = statement.query([])?;
    while let Some(row) = rows.next()? {
        keys.push((request_key(row.get_ref(1)?.as_str()?), row.get::<_, i64>(0)?));
    }
    keys.sort_unstable();
    let mut insert = conn.prepare(&REQUEST_KEYS.insert_sql(3))?;
    for (key, seq) in keys {
        insert.execute(params![key, seq])?;
    }
    Ok(())
}

/// Whether the entry `seq` of `event_id` is in the key index (`verify`: an entry missing there would let a
/// duplicate of it be counted again).
pub fn is_indexed(conn: &Connection, event_id: &str, seq: u64) -> rusqlite::Result<bool> {
    EVENT_KEYS.holds_once(conn, event_key(event_id), seq)
}

/// Whether the DecisionEvent entry `seq` of `request_id` is in the request key index (`verify`: `audit why`
/// would not find it).
pub fn is_request_indexed(conn: &Connection, request_id: &str, seq: u64) -> rusqlite::Result<bool> {
    REQUEST_KEYS.holds_once(conn, request_key(request_id), seq)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;

    use schemas::{Event, EventType, Header, Timestamp, UsageEvent};

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
            api_key: None,
            project: None,
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
        let schedule = Schedule { every: 2, slices: [2, 3], parts: 1 };
        for (id, watermark) in ids.iter().zip(1u64..) {
            ledger.append(&Batch { events: vec![usage(id)], ..Batch::default() }).unwrap();
            move_keys_due(&ledger.conn, &[&EVENT_KEYS], watermark - 1, watermark, schedule).unwrap();
        }
        let seqs = |tier: &str| -> Vec<i64> {
            let mut statement = ledger.conn.prepare(&format!("SELECT seq FROM {tier}")).unwrap();
            statement.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
        };
        let [recent, middle, large, sealed] = EVENT_KEYS.tiers.map(seqs);
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
            assert_eq!(entries_of(&ledger.conn, id).unwrap().len(), 1, "{id}");
            assert!(is_indexed(&ledger.conn, id, seq).unwrap(), "{id}");
        }
        for id in &ids {
            let report = ledger.append(&Batch { events: vec![usage(id)], ..Batch::default() }).unwrap();
            assert!(matches!(report.outcomes[..], [AppendOutcome::Duplicate { .. }]), "{id}");
        }
    }

    // Proves that warming the moves due reads the keys of their ranges in the large and the sealed tiers (the
    // ones a later move takes or lands among), nothing outside the window, and writes nothing.
    #[test]
    fn warming_the_moves_due_reads_their_ranges_and_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = Ledger::open(dir.path().join("ledger.db")).unwrap();
        let schedule = Schedule { every: 2, slices: [2, 3], parts: 1 };
        for watermark in 1..=30u64 {
            ledger.append(&Batch { events: vec![usage(&format!("e-{watermark}"))], ..Batch::default() }).unwrap();
            move_keys_due(&ledger.conn, &[&EVENT_KEYS], watermark - 1, watermark, schedule).unwrap();
        }
        let tiers = |ledger: &Ledger| -> [Vec<(i64, i64)>; 4] {
            let rows = |tier: &str| {
                let mut statement = ledger.conn.prepare(&format!("SELECT * FROM {tier}")).unwrap();
                statement.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(Result::unwrap).collect()
            };
            EVENT_KEYS.tiers.map(rows)
        };
        let before = tiers(&ledger);
        let conn = &ledger.conn;
        let changes = conn.total_changes();
        assert_eq!(warm(conn, moves_due(&[&EVENT_KEYS], 30, 30, schedule)).unwrap(), 0, "an empty window");
        // The large tier's slices (3) and the middle tier's (2) cover every key within 6 entries.
        let read = warm(conn, moves_due(&[&EVENT_KEYS], 30, 36, schedule)).unwrap();
        // Each move reads its source and its target range: the large tier's moves (3 periods) take every slice
        // once, the middle tier's (3 periods of 2 slices) one of them twice.
        let [_, middle, large, sealed] = before.each_ref().map(Vec::len);
        assert!(sealed > 0 && large > 0, "keys reached the deeper tiers");
        assert!(read >= middle + 2 * large + sealed, "every range read: {read}");
        assert!(read <= 2 * middle + 3 * large + sealed, "one middle slice twice at most: {read}");
        assert_eq!(conn.total_changes(), changes, "nothing written");
        assert_eq!(tiers(&ledger), before);
    }

    /// A DecisionEvent of `event_id` for `request_id`, written locally.
    fn decision(event_id: &str, request_id: &str) -> Incoming {
        let json = format!(
            r#"{{"event_id":"{event_id}","occurred_at":"2026-11-02T10:00:00Z","tenant":"org-1","metric":"requests",
                "source":"test","request_id":"{request_id}","idempotency_key":"idem-{event_id}","amount":1,
                "outcome":"ALLOWED","reason":"WITHIN_LIMIT"}}"#
        );
        let event = Event::from_json(EventType::DecisionEvent, &json).unwrap();
        Incoming { event, origin: Origin::Local { name: "test".into() }, raw: None }
    }

    /// The entries `REQUEST_KEYS.condition` finds for `request_id`, as a report's query asks.
    fn seqs_of_request(ledger: &Ledger, request_id: &str) -> Vec<i64> {
        let sql = format!(
            "SELECT d.seq FROM decision_events d WHERE {} AND d.request_id = ? ORDER BY d.seq",
            REQUEST_KEYS.condition("d.seq")
        );
        let key = request_key(request_id);
        let mut statement = ledger.conn.prepare(&sql).unwrap();
        let rows = statement.query_map(params![key, key, key, key, request_id], |r| r.get(0)).unwrap();
        rows.map(Result::unwrap).collect()
    }

    // Proves that every DecisionEvent, and only those, is found by its request_id through the request key index
    // wherever the moves put its key, that two decisions of one request are both found, and that verify agrees.
    #[test]
    fn decisions_are_found_by_request_id_through_the_moves() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = Ledger::open(dir.path().join("ledger.db")).unwrap();
        let schedule = Schedule { every: 2, slices: [2, 3], parts: 1 };
        for i in 0..30u64 {
            // Request r's two decisions are entries 3r + 1 and 3r + 2; entry 3r + 3 is usage.
            let incoming = if i % 3 == 2 {
                usage(&format!("u-{i}"))
            } else {
                decision(&format!("d-{i}"), &format!("req-{}", i / 3))
            };
            ledger.append(&Batch { events: vec![incoming], ..Batch::default() }).unwrap();
            move_keys_due(&ledger.conn, &[&REQUEST_KEYS], i, i + 1, schedule).unwrap();
        }
        let count = |tier: &str| -> i64 {
            ledger.conn.query_row(&format!("SELECT COUNT(*) FROM {tier}"), [], |r| r.get(0)).unwrap()
        };
        assert!(count(REQUEST_KEYS.tiers[3]) > 0, "keys reached the sealed tier");
        assert_eq!(REQUEST_KEYS.tiers.map(count).iter().sum::<i64>(), 20, "one key per decision, none for usage");
        for request in 0..10u64 {
            let expected = vec![(request * 3 + 1) as i64, (request * 3 + 2) as i64];
            assert_eq!(seqs_of_request(&ledger, &format!("req-{request}")), expected, "req-{request}");
        }
        assert_eq!(seqs_of_request(&ledger, "req-10"), Vec::<i64>::new());
        assert!(ledger.verify().unwrap().first_bad.is_none());
    }

    // Proves that a decision whose request key is missing is named by verify (audit why would not find it).
    #[test]
    fn a_decision_missing_from_the_request_key_index_is_named_by_verify() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = Ledger::open(dir.path().join("ledger.db")).unwrap();
        let events = vec![usage("u-1"), decision("d-1", "req-1"), decision("d-2", "req-2")];
        ledger.append(&Batch { events, ..Batch::default() }).unwrap();
        ledger.conn.execute("DELETE FROM request_keys_recent WHERE seq = 3", []).unwrap();
        let bad = ledger.verify().unwrap().first_bad.expect("verify finds the missing key");
        assert_eq!((bad.seq, bad.problem.as_str()), (3, "missing from the request key index (request_keys_*)"));
    }

    // Proves that migration 010 indexes the decisions a ledger recorded before it, under their request keys, and
    // drops the index of the request_id text: a ledger taken back to schema version 9 by hand, then opened (which
    // runs 010 and the migrations after it).
    #[test]
    fn the_migration_indexes_the_decisions_recorded_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        let mut ledger = Ledger::open(&path).unwrap();
        let events = vec![decision("d-1", "req-b"), usage("u-1"), decision("d-2", "req-a"), decision("d-3", "req-b")];
        ledger.append(&Batch { events, ..Batch::default() }).unwrap();
        // Migrations 011 and 014 undone too: their table and column.
        let mut version_9 = crate::links::tests::UNDO_019.to_string();
        version_9.push_str(&REQUEST_KEYS.tiers.map(|tier| format!("DROP TABLE {tier};")).concat());
        version_9.push_str("DROP TABLE outbox_cursor; ALTER TABLE adjustment_events DROP COLUMN scope;");
        version_9.push_str(
            "CREATE INDEX decision_events_by_request_id ON decision_events (request_id); PRAGMA user_version = 9;",
        );
        ledger.conn.execute_batch(&version_9).unwrap();
        drop(ledger);
        let ledger = Ledger::open(&path).unwrap();
        assert_eq!(seqs_of_request(&ledger, "req-b"), vec![1, 4]);
        assert_eq!(seqs_of_request(&ledger, "req-a"), vec![3]);
        let sealed: i64 = ledger.conn.query_row("SELECT COUNT(*) FROM request_keys_sealed", [], |r| r.get(0)).unwrap();
        assert_eq!(sealed, 3);
        let index: i64 = ledger
            .conn
            .query_row("SELECT COUNT(*) FROM sqlite_schema WHERE name = 'decision_events_by_request_id'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(index, 0, "the index of the request_id text is gone");
        assert!(ledger.verify().unwrap().first_bad.is_none());
    }

    // Proves that the six moves of the two indexes run in six different appends of each period, each once: no
    // commit of the hook's writer runs them all.
    #[test]
    fn the_moves_of_a_period_run_in_different_appends() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = Ledger::open(dir.path().join("ledger.db")).unwrap();
        let indexes = [&EVENT_KEYS, &REQUEST_KEYS];
        // Whole tiers as one slice each, so that every move of a tier that holds keys empties it.
        let schedule = Schedule { every: 6, slices: [1, 1], parts: 1 };
        let count = |ledger: &Ledger, tier: &str| -> i64 {
            ledger.conn.query_row(&format!("SELECT COUNT(*) FROM {tier}"), [], |r| r.get(0)).unwrap()
        };
        // The tiers a move empties: every tier but the sealed one, of both indexes.
        let sources: Vec<&str> = indexes.iter().flat_map(|index| index.tiers[..3].to_vec()).collect();
        let mut emptied_in_period = Vec::new();
        for i in 0..18u64 {
            // Decisions: each entry has a key in both indexes.
            ledger
                .append(&Batch { events: vec![decision(&format!("d-{i}"), &format!("r-{i}"))], ..Batch::default() })
                .unwrap();
            let before: Vec<i64> = sources.iter().map(|tier| count(&ledger, tier)).collect();
            move_keys_due(&ledger.conn, &indexes, i, i + 1, schedule).unwrap();
            let emptied: Vec<&str> = sources
                .iter()
                .zip(&before)
                .filter(|(tier, before)| **before > 0 && count(&ledger, tier) == 0)
                .map(|(tier, _)| *tier)
                .collect();
            assert!(emptied.len() <= 1, "watermark {}: one move at most, not {emptied:?}", i + 1);
            if i >= 6 {
                emptied_in_period.extend(emptied);
            }
        }
        // The last two periods (watermarks 7 to 18), when every tier holds keys at its move: each tier emptied
        // once per period.
        emptied_in_period.sort_unstable();
        let mut expected: Vec<&str> = sources.iter().flat_map(|&tier| [tier, tier]).collect();
        expected.sort_unstable();
        assert_eq!(emptied_in_period, expected);
        assert!(ledger.verify().unwrap().first_bad.is_none());
    }

    // Proves that a move in parts takes one range of keys per append, its part's, and that a key still waits in
    // the recent tier no longer than a period: the parts of a period together move what the whole move would.
    #[test]
    fn a_move_in_parts_takes_one_range_of_keys_per_append() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = Ledger::open(dir.path().join("ledger.db")).unwrap();
        // Six steps of two entries each: the recent tier's part 0 (negative keys) moves at watermarks 12, 24, ...;
        // its part 1 (the others) at 2, 14, 26, ...; then the middle tier's two parts, then the large tier's.
        let schedule = Schedule { every: 12, slices: [1, 1], parts: 2 };
        let keys = |ledger: &Ledger, tier: &str| -> Vec<(i64, i64)> {
            let sql = format!("SELECT event_key, seq FROM {tier}");
            let mut statement = ledger.conn.prepare(&sql).unwrap();
            statement.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(Result::unwrap).collect()
        };
        let ids: Vec<String> = (0..48).map(|i| format!("e-{i}")).collect();
        for (id, watermark) in ids.iter().zip(1u64..) {
            ledger.append(&Batch { events: vec![usage(id)], ..Batch::default() }).unwrap();
            let before: Vec<Vec<(i64, i64)>> = EVENT_KEYS.tiers[..3].iter().map(|t| keys(&ledger, t)).collect();
            move_keys_due(&ledger.conn, &[&EVENT_KEYS], watermark - 1, watermark, schedule).unwrap();
            let after: Vec<Vec<(i64, i64)>> = EVENT_KEYS.tiers[..3].iter().map(|t| keys(&ledger, t)).collect();
            let left: Vec<(usize, bool)> = before
                .iter()
                .zip(&after)
                .enumerate()
                .flat_map(|(tier, (b, a))| b.iter().filter(|k| !a.contains(k)).map(move |k| (tier, k.0 >= 0)))
                .collect();
            let mut moves = left.clone();
            moves.dedup();
            assert!(moves.len() <= 1, "watermark {watermark}: one part of one move at most, not {moves:?}");
        }
        // Watermark 48: part 0 of the recent tier just ran, part 1 last ran at 38.
        let recent = keys(&ledger, EVENT_KEYS.tiers[0]);
        assert!(recent.iter().all(|&(key, seq)| key >= 0 && seq > 38), "waited longer than a period: {recent:?}");
        assert!(!keys(&ledger, EVENT_KEYS.tiers[3]).is_empty(), "keys reached the sealed tier");
        let all: usize = EVENT_KEYS.tiers.iter().map(|t| keys(&ledger, t).len()).sum();
        assert_eq!(all, ids.len(), "every key is in exactly one tier");
        for (id, seq) in ids.iter().zip(1u64..) {
            assert!(is_indexed(&ledger.conn, id, seq).unwrap(), "{id}");
        }
        assert!(ledger.verify().unwrap().first_bad.is_none());
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
        ledger.conn.execute("INSERT INTO event_keys_sealed (event_key, seq) VALUES (?, 1)", [event_key("b")]).unwrap();
        assert_eq!(entries_of(&ledger.conn, "b").unwrap(), vec![]);
        let report = ledger.append(&Batch { events: vec![usage("b")], ..Batch::default() }).unwrap();
        assert_eq!(report.outcomes, [AppendOutcome::Recorded { seq: 2 }]);
        assert_eq!(entries_of(&ledger.conn, "b").unwrap().len(), 1);
    }
}
