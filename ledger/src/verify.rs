//! `verify`: recompute the hash chain and check every entry against its payload.

use rusqlite::OptionalExtension;
use rusqlite::types::Value;
use schemas::{Event, EventType};
use serde::Serialize;

use crate::Ledger;
use crate::chain::{self, ChainedFields, GENESIS, Hash};
use crate::error::ReadError;
use crate::links::{self, Head, LinksVerdict};
use crate::status::read_totals;
use crate::{dedup, details};

/// The first entry that does not hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct BadEntry {
    /// Its ledger sequence number.
    pub seq: u64,
    /// Its event_id.
    pub event_id: String,
    /// What does not hold, in words.
    pub problem: String,
}

/// What `verify` found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct VerifyReport {
    /// Entries that hold, from the first: every entry 1 to this one was checked good.
    pub entries_checked: u64,
    /// The ledger's watermark, as `status` reports it (the last batch's), in the snapshot the walk read: the same
    /// whether the chain holds or not.
    pub watermark: u64,
    /// The sequence number where the walk stopped: the first bad entry's, or the last entry's when every entry
    /// holds (0 for an empty ledger).
    pub walk_stopped_at: u64,
    /// `None` when the whole chain holds.
    pub first_bad: Option<BadEntry>,
    /// The ledger's id (contract §9.3).
    pub ledger_id: String,
    /// The chain head as stored: the last link's number (contract §9.3).
    pub head_seq: u64,
    /// The last link's hash, in hexadecimal.
    pub head_hash: String,
    /// How many expected heads (`--expect-head`, published checkpoints) were checked against the chain.
    pub checkpoints_checked: u64,
    /// The first of them that is not a link of the chain with its hash; `None` when all are (or none was given).
    pub first_bad_checkpoint: Option<BadCheckpoint>,
    /// The entries an earlier verify had found to hold and this one did not walk again (`verify --since HEAD`): 1 to
    /// this one. 0 for a full walk.
    #[serde(default)]
    pub walked_from: u64,
}

/// A head the chain must hold: given by the operator (`verify --expect-head`) or published as a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedHead {
    /// The link and its hash.
    pub head: Head,
    /// When the checkpoint was published (its `at`), when it is one.
    pub at: Option<String>,
}

/// An expected head the chain does not hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct BadCheckpoint {
    /// The link it names.
    pub head_seq: u64,
    /// The hash it gives that link, in hexadecimal.
    pub head_hash: String,
    /// When it was published, for a checkpoint.
    pub at: Option<String>,
    /// Why it does not hold, in words.
    pub problem: String,
}

/// One row of `entries`, as stored.
struct StoredEntry {
    seq: u64,
    event_id: String,
    event_type: String,
    status: String,
    duplicate_of: Option<u64>,
    header: [Value; 7],
    origin: String,
    origin_stream: Option<String>,
    origin_partition: Option<i64>,
    origin_offset: Option<i64>,
    recorded_at: i64,
    payload_fingerprint: i64,
    payload: Vec<u8>,
    raw: Option<Vec<u8>>,
    payload_hash: Vec<u8>,
    entry_hash: Vec<u8>,
}

impl StoredEntry {
    fn read(r: &rusqlite::Row<'_>) -> rusqlite::Result<StoredEntry> {
        Ok(StoredEntry {
            seq: r.get::<_, i64>(0)? as u64,
            event_id: r.get(1)?,
            event_type: r.get(2)?,
            status: r.get(3)?,
            duplicate_of: r.get::<_, Option<i64>>(4)?.map(|s| s as u64),
            header: [r.get(5)?, r.get(6)?, r.get(7)?, r.get(8)?, r.get(9)?, r.get(20)?, r.get(21)?],
            origin: r.get(10)?,
            origin_stream: r.get(11)?,
            origin_partition: r.get(12)?,
            origin_offset: r.get(13)?,
            recorded_at: r.get(14)?,
            payload_fingerprint: r.get(15)?,
            payload: r.get(16)?,
            raw: r.get(17)?,
            payload_hash: r.get(18)?,
            entry_hash: r.get(19)?,
        })
    }

    fn chained_fields(&self) -> ChainedFields<'_> {
        ChainedFields {
            seq: self.seq,
            event_id: &self.event_id,
            event_type: &self.event_type,
            status: &self.status,
            duplicate_of: self.duplicate_of,
            origin: &self.origin,
            origin_stream: self.origin_stream.as_deref(),
            origin_partition: self.origin_partition,
            origin_offset: self.origin_offset,
            recorded_at: self.recorded_at,
            payload_fingerprint: self.payload_fingerprint,
            payload_hash: &self.payload_hash,
            raw: self.raw.as_deref(),
        }
    }
}

fn header_values(event: &Event) -> [Value; 7] {
    let h = event.header();
    [
        Value::Text(h.tenant.clone()),
        h.subject.clone().map_or(Value::Null, Value::Text),
        Value::Text(h.metric.clone()),
        Value::Text(h.source.clone()),
        Value::Integer(h.occurred_at.micros()),
        h.project.clone().map_or(Value::Null, Value::Text),
        h.api_key.clone().map_or(Value::Null, Value::Text),
    ]
}

const HEADER_COLUMNS: [&str; 7] = ["tenant", "subject", "metric", "source", "occurred_at", "project", "api_key"];

impl VerifyReport {
    /// A report of the walk alone: the ledger id, head and checkpoints are filled in after it.
    fn walked(entries_checked: u64, watermark: u64, walk_stopped_at: u64, first_bad: Option<BadEntry>) -> VerifyReport {
        VerifyReport {
            entries_checked,
            watermark,
            walk_stopped_at,
            first_bad,
            ledger_id: String::new(),
            head_seq: 0,
            head_hash: String::new(),
            checkpoints_checked: 0,
            first_bad_checkpoint: None,
            walked_from: 0,
        }
    }
}

impl Ledger {
    /// Walks the whole ledger in sequence order, in one read transaction: the sequence has no gaps, each
    /// payload hashes to its stored hash and decodes to the stored columns, each entry hash chains to the
    /// previous one, the last batch's totals match the rows, every row referring to an entry refers to one the
    /// ledger holds, no outbox entry below the outbox's cursor is pending, and every link holds over the tables it
    /// covers (`links.rs`). Stops at the first entry (or table, or link) that does not hold.
    pub fn verify(&self) -> Result<VerifyReport, ReadError> {
        self.verify_against(&[])
    }

    /// [`Ledger::verify`], then each of `expected` against the chain, in order: the first that is not a link of the
    /// chain with its hash is `first_bad_checkpoint`. Then the links (`links.rs`): each one's rows and hash recomputed,
    /// and the last one covering the watermark, every row of the tables they cover and the offsets.
    pub fn verify_against(&self, expected: &[ExpectedHead]) -> Result<VerifyReport, ReadError> {
        self.verify_from(None, expected)
    }

    /// [`Ledger::verify_against`] in time proportional to what was appended after `since`, a head an earlier verify
    /// found to hold: that link must still be in the chain with its hash and hash to it; then the entries and links
    /// after it are walked, and the tables beside them checked over what was added since. What `since` covers is taken
    /// as verified then: a row under it changed without recomputing the hashes is seen by a full verify only.
    pub fn verify_since(&self, since: &Head, expected: &[ExpectedHead]) -> Result<VerifyReport, ReadError> {
        self.verify_from(Some(since), expected)
    }

    fn verify_from(&self, since: Option<&Head>, expected: &[ExpectedHead]) -> Result<VerifyReport, ReadError> {
        let tx = self.conn.unchecked_transaction()?;
        let start = match since {
            None => None,
            Some(head) => match links::verified_at(&tx, head)? {
                Ok(verified) => Some(verified),
                Err(problem) => {
                    let watermark = read_totals(&tx)?.watermark;
                    let mut report = VerifyReport::walked(0, watermark, 0, None);
                    report.first_bad_checkpoint =
                        Some(BadCheckpoint { head_seq: head.seq, head_hash: head.hash_hex(), at: None, problem });
                    return Ok(report);
                }
            },
        };
        let mut report = self.walk(&tx, start.as_ref())?;
        report.walked_from = start.as_ref().map_or(0, |s| s.entries_through);
        report.ledger_id = links::read_ledger_id(&tx).unwrap_or_default();
        let head = links::read_head(&tx)?;
        (report.head_seq, report.head_hash) = (head.seq, head.hash_hex());
        for checkpoint in expected {
            report.checkpoints_checked += 1;
            if let Some(problem) = links::check_head(&tx, &checkpoint.head)? {
                report.first_bad_checkpoint = Some(BadCheckpoint {
                    head_seq: checkpoint.head.seq,
                    head_hash: checkpoint.head.hash_hex(),
                    at: checkpoint.at.clone(),
                    problem,
                });
                break;
            }
        }
        Ok(report)
    }

    /// The walk of [`Ledger::verify`], in the read transaction `tx`: of the entries after `since`, when given.
    fn walk(&self, tx: &rusqlite::Transaction<'_>, since: Option<&links::Verified>) -> Result<VerifyReport, ReadError> {
        let mut statement = tx.prepare(
            "SELECT seq, event_id, event_type, status, duplicate_of, tenant, subject, metric, source, occurred_at,
                    origin, origin_stream, origin_partition, origin_offset, recorded_at, payload_fingerprint,
                    payload, raw, payload_hash, entry_hash, project, api_key
             FROM entries WHERE seq > ?1 ORDER BY seq",
        )?;
        // Read before the walk (the same snapshot), but a row of totals that does not read must not hide the
        // first bad entry: it is reported after the walk, as before.
        let totals = read_totals(tx);
        let mut checked = since.map_or(0, |s| s.entries_through);
        let mut rows = statement.query([checked as i64])?;
        let mut previous: Hash = since.map_or(GENESIS, |s| s.entry_hash);
        while let Some(row) = rows.next()? {
            let entry = StoredEntry::read(row)?;
            if let Err(problem) = self.check_entry(&entry, checked + 1, &previous) {
                let watermark = totals.as_ref().map_or(entry.seq, |t| t.watermark);
                let bad = BadEntry { seq: entry.seq, event_id: entry.event_id, problem };
                return Ok(VerifyReport::walked(checked, watermark, entry.seq, Some(bad)));
            }
            previous = entry.entry_hash.as_slice().try_into().expect("checked to be 32 bytes");
            checked += 1;
        }
        let totals = totals?;
        if totals.watermark != checked {
            let problem =
                format!("the last batch's watermark is {} but the ledger ends at {checked}", totals.watermark);
            let bad = BadEntry { seq: totals.watermark, event_id: String::new(), problem };
            return Ok(VerifyReport::walked(checked, totals.watermark, checked, Some(bad)));
        }
        // The tables beside the entries, in order; the links last, as they cover all of them.
        let checks: [&dyn Fn() -> rusqlite::Result<Option<String>>; 6] = [
            &|| check_totals(tx, totals, since),
            &|| check_references(tx, checked),
            &|| check_outbox_cursor(tx),
            &|| check_detail_counts(tx, since.map_or(0, |s| s.entries_through)),
            &|| check_usage_totals(tx, since.map_or(0, |s| s.entries_through)),
            &|| {
                Ok(match links::verify_links(tx, checked, since)? {
                    LinksVerdict::Hold(_) => None,
                    LinksVerdict::Broken { problem, .. } => Some(problem),
                })
            },
        ];
        let mut first_bad = None;
        for check in checks {
            if let Some(problem) = check()? {
                first_bad = Some(BadEntry { seq: checked, event_id: String::new(), problem });
                break;
            }
        }
        Ok(VerifyReport::walked(checked, totals.watermark, checked, first_bad))
    }

    fn check_entry(&self, entry: &StoredEntry, expected_seq: u64, previous: &Hash) -> Result<(), String> {
        if entry.seq != expected_seq {
            return Err(format!("sequence gap: expected entry {expected_seq}, found {}", entry.seq));
        }
        if chain::sha256(&entry.payload)[..] != entry.payload_hash[..] {
            return Err("payload does not hash to the stored payload_hash".into());
        }
        let event = self
            .catalog
            .decode_payload(entry.payload_fingerprint as u64, &entry.payload)
            .map_err(|e| format!("payload does not decode: {e}"))?;
        self.check_columns(entry, &event)?;
        match dedup::is_indexed(&self.conn, &entry.event_id, entry.seq) {
            Ok(true) => {}
            Ok(false) => return Err("missing from the deduplication key index (event_keys_*)".into()),
            Err(e) => return Err(format!("cannot read the deduplication key index: {e}")),
        }
        if let Event::Decision(decision) = &event {
            match dedup::is_request_indexed(&self.conn, &decision.request_id, entry.seq) {
                Ok(true) => {}
                Ok(false) => return Err("missing from the request key index (request_keys_*)".into()),
                Err(e) => return Err(format!("cannot read the request key index: {e}")),
            }
        }
        let expected_hash = chain::entry_hash(previous, &entry.chained_fields());
        if expected_hash[..] != entry.entry_hash[..] {
            return Err("entry_hash does not match the chain (a chained column was changed)".into());
        }
        Ok(())
    }

    fn check_columns(&self, entry: &StoredEntry, event: &Event) -> Result<(), String> {
        if event.event_id() != entry.event_id {
            return Err(format!("event_id column {:?}, payload says {:?}", entry.event_id, event.event_id()));
        }
        if event.event_type().name() != entry.event_type {
            return Err(format!("event_type column {:?}, payload says {}", entry.event_type, event.event_type()));
        }
        let expected = header_values(event);
        for ((column, stored), expected) in HEADER_COLUMNS.iter().zip(&entry.header).zip(&expected) {
            if stored != expected {
                return Err(format!("entries.{column} is {stored:?}, payload says {expected:?}"));
            }
        }
        self.check_details(entry.seq, event)
    }

    fn check_details(&self, seq: u64, event: &Event) -> Result<(), String> {
        let event_type: EventType = event.event_type();
        let table = details::table(event_type);
        let columns = details::columns(event_type);
        let expected = details::values(event);
        let stored: Option<Vec<Value>> = self
            .conn
            .prepare_cached(&details::select_sql(event_type))
            .and_then(|mut s| {
                let mut rows = s.query([seq as i64])?;
                rows.next()?.map(|r| (0..columns.len()).map(|i| r.get::<_, Value>(i)).collect()).transpose()
            })
            .map_err(|e| format!("cannot read {table}: {e}"))?;
        let stored = stored.ok_or_else(|| format!("no row in {table}"))?;
        for ((column, stored), expected) in columns.iter().zip(&stored).zip(&expected) {
            if stored != expected {
                return Err(format!("{table}.{} is {stored:?}, payload says {expected:?}", column.trim_matches('"')));
            }
        }
        Ok(())
    }
}

/// The last batch's totals against the rows they count; after `since`, what they grew by since its batch against the
/// rows added since.
fn check_totals(
    conn: &rusqlite::Connection,
    totals: crate::status::Totals,
    since: Option<&links::Verified>,
) -> rusqlite::Result<Option<String>> {
    let (from_seq, (from_duplicate, from_quarantined)) =
        since.map_or((0, (0, 0)), |s| (s.entries_through as i64, s.duplicates_and_quarantine_through()));
    let before = match since {
        None => crate::status::Totals::default(),
        Some(s) => crate::status::totals_of_batch(conn, s.batches_through())?,
    };
    let count = |sql: &str, from: i64| conn.query_row(sql, [from], |r| r.get::<_, i64>(0).map(|n| n as u64));
    let found = [
        (
            "events_recorded",
            totals.events_recorded.saturating_sub(before.events_recorded),
            count("SELECT COUNT(*) FROM entries WHERE seq > ?1 AND status = 'recorded'", from_seq)?,
        ),
        (
            "conflicts",
            totals.conflicts.saturating_sub(before.conflicts),
            count("SELECT COUNT(*) FROM entries WHERE seq > ?1 AND status <> 'recorded'", from_seq)?,
        ),
        (
            "duplicates",
            totals.duplicates.saturating_sub(before.duplicates),
            count("SELECT COUNT(*) FROM duplicates WHERE id > ?1", from_duplicate)?,
        ),
        (
            "quarantined",
            totals.quarantined.saturating_sub(before.quarantined),
            count("SELECT COUNT(*) FROM quarantine WHERE id > ?1", from_quarantined)?,
        ),
    ];
    let since_words = if since.is_some() { " since the head verified" } else { "" };
    Ok(found.iter().find(|(_, total, rows)| total != rows).map(|(name, total, rows)| {
        format!("the last batch counts {total} {name}{since_words} but the ledger holds {rows}")
    }))
}

/// Every row referring to another (the schema's `REFERENCES`, which SQLite does not check at insert: see
/// `configure`) refers to one that exists. The entries are exactly 1..=`watermark` (the walk checked it), so a
/// reference to an entry needs only its table's least and greatest value (two index lookups when the column is
/// the table's key); the few references to other tables are checked by SQLite's `foreign_key_check`.
fn check_references(conn: &rusqlite::Connection, watermark: u64) -> rusqlite::Result<Option<String>> {
    let mut statement = conn.prepare(
        "SELECT m.name, f.\"from\", f.\"table\", f.\"to\" FROM sqlite_master m, pragma_foreign_key_list(m.name) f
         WHERE m.type = 'table' ORDER BY m.name, f.id",
    )?;
    let references: Vec<(String, String, String, Option<String>)> =
        statement.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?.collect::<Result<_, _>>()?;
    for (table, column, parent, to) in references {
        if parent == "entries" && to.as_deref() == Some("seq") {
            let (least, greatest): (Option<i64>, Option<i64>) =
                conn.query_row(&format!("SELECT MIN(\"{column}\"), MAX(\"{column}\") FROM \"{table}\""), [], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?;
            if let Some(outside) = [least, greatest].into_iter().flatten().find(|s| *s < 1 || *s as u64 > watermark) {
                return Ok(Some(format!(
                    "{table}.{column} refers to entry {outside}, but the entries are 1 to {watermark}"
                )));
            }
        } else {
            let mut check = conn.prepare(&format!("PRAGMA foreign_key_check(\"{table}\")"))?;
            let mut rows = check.query([])?;
            if let Some(row) = rows.next()? {
                let rowid: Option<i64> = row.get(1)?;
                let row = rowid.map_or_else(|| "a row".to_string(), |id| format!("row {id}"));
                return Ok(Some(format!("{table} holds {row} that refers to no row of {parent}")));
            }
        }
    }
    Ok(None)
}

/// No outbox entry below the cursor is pending: the publisher never reads below it, so such an entry would never
/// reach Kafka.
fn check_outbox_cursor(conn: &rusqlite::Connection) -> rusqlite::Result<Option<String>> {
    let cursor = crate::outbox::cursor(conn)?;
    let skipped: Option<i64> = conn
        .query_row(
            concat!(
                "SELECT o.seq FROM outbox o WHERE o.seq < ?1 AND ",
                crate::outbox::unpublished!(),
                " ORDER BY o.seq LIMIT 1"
            ),
            [cursor],
            |r| r.get(0),
        )
        .optional()?;
    Ok(skipped.map(|seq| {
        format!(
            "outbox_cursor starts the pending entries at {cursor}, but outbox entry {seq} below it is not published"
        )
    }))
}

/// Every detail table holds exactly one row per entry of its type: the walk found each entry's row, so a count
/// above it is a row added under an entry of another type (counted as usage by every report reading the table;
/// no trigger refuses an INSERT, so only this check sees one). Of the entries after `after` (0: all).
fn check_detail_counts(conn: &rusqlite::Connection, after: u64) -> rusqlite::Result<Option<String>> {
    for event_type in schemas::EventType::ALL {
        let table = crate::details::table(event_type);
        let rows: i64 =
            conn.query_row(&format!("SELECT COUNT(*) FROM {table} WHERE seq > ?1"), [after as i64], |r| r.get(0))?;
        let entries: i64 = conn.query_row(
            "SELECT COUNT(*) FROM entries WHERE seq > ?1 AND event_type = ?2",
            rusqlite::params![after as i64, event_type.name()],
            |r| r.get(0),
        )?;
        if rows != entries {
            return Ok(Some(format!(
                "{table} holds {rows} rows, but the ledger has {entries} {} entries",
                event_type.name()
            )));
        }
    }
    Ok(None)
}

/// `usage_totals` is the sum of the recorded usage of each tenant, metric and month: the billing export reads it,
/// so a total raised by hand (its trigger lets it grow) would bill what no event says. One pass over the usage
/// entries; after `after` (not 0), the totals of each tenant, metric and month that a usage entry after it counts in,
/// each summed again from the tenant's entries of that month.
fn check_usage_totals(conn: &rusqlite::Connection, after: u64) -> rusqlite::Result<Option<String>> {
    let (sql, after) = if after == 0 { (ALL_USAGE_TOTALS, None) } else { (USAGE_TOTALS_TOUCHED, Some(after as i64)) };
    let found = conn
        .prepare(sql)?
        .query_row(rusqlite::params_from_iter(after), |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, Option<rusqlite::types::Value>>(3)?,
                r.get::<_, Option<i64>>(4)?,
            ))
        })
        .optional()?;
    Ok(found.map(|(tenant, metric, period, total, summed)| {
        let total = match total {
            None => "no total".to_string(),
            Some(rusqlite::types::Value::Integer(n)) => format!("a total of {n}"),
            Some(other) => format!("a total of {other:?}"),
        };
        format!(
            "usage_totals holds {total} for {tenant} {metric} {period}, but its recorded usage entries sum to {}",
            summed.unwrap_or(0)
        )
    }))
}

/// Every usage total against the sum of its entries, and every sum against its total.
const ALL_USAGE_TOTALS: &str = "WITH summed AS (
             SELECT e.tenant, e.metric, strftime('%Y-%m', e.occurred_at / 1000000, 'unixepoch') AS period,
                    SUM(u.quantity) AS quantity
             FROM usage_events u JOIN entries e ON e.seq = u.seq WHERE e.status = 'recorded'
             GROUP BY 1, 2, 3)
         SELECT t.tenant, t.metric, t.period, t.quantity, s.quantity FROM usage_totals t
         LEFT JOIN summed s ON s.tenant = t.tenant AND s.metric = t.metric AND s.period = t.period
         WHERE s.quantity IS NOT t.quantity
         UNION ALL
         SELECT s.tenant, s.metric, s.period, NULL, s.quantity FROM summed s
         WHERE NOT EXISTS (SELECT 1 FROM usage_totals t WHERE t.tenant = s.tenant AND t.metric = s.metric
                           AND t.period = s.period)
         LIMIT 1";

/// The totals a usage entry after `?1` counts in, each against its entries of that month found by the tenant's index.
const USAGE_TOTALS_TOUCHED: &str = "WITH touched AS (
         SELECT DISTINCT tenant, metric, strftime('%Y-%m', occurred_at / 1000000, 'unixepoch') AS period
         FROM entries WHERE seq > ?1 AND event_type = 'UsageEvent' AND status = 'recorded'),
     summed AS (
         SELECT t.tenant, t.metric, t.period,
                (SELECT SUM(u.quantity) FROM entries e JOIN usage_events u ON u.seq = e.seq
                 WHERE e.tenant = t.tenant
                   AND e.occurred_at >= unixepoch(t.period || '-01') * 1000000
                   AND e.occurred_at < unixepoch(t.period || '-01', '+1 month') * 1000000
                   AND e.event_type = 'UsageEvent' AND e.metric = t.metric AND e.status = 'recorded') AS quantity
         FROM touched t)
     SELECT s.tenant, s.metric, s.period, t.quantity, s.quantity FROM summed s
     LEFT JOIN usage_totals t ON t.tenant = s.tenant AND t.metric = s.metric AND t.period = s.period
     WHERE t.quantity IS NOT s.quantity
     LIMIT 1";
