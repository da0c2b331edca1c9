//! `status` and `quarantine list`: what the ledger holds, read without scanning it.

use rusqlite::{Connection, OptionalExtension};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::Ledger;
use crate::batch::{AppendReport, FileProgress, SourceOffset};
use crate::error::ReadError;

/// Running totals, as of the last committed batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Totals {
    pub watermark: u64,
    pub events_recorded: u64,
    pub duplicates: u64,
    pub conflicts: u64,
    pub quarantined: u64,
}

impl Totals {
    /// A row of `batches`: watermark, then the four totals.
    fn read(r: &rusqlite::Row<'_>) -> rusqlite::Result<Totals> {
        Ok(Totals {
            watermark: r.get::<_, i64>(0)? as u64,
            events_recorded: r.get::<_, i64>(1)? as u64,
            duplicates: r.get::<_, i64>(2)? as u64,
            conflicts: r.get::<_, i64>(3)? as u64,
            quarantined: r.get::<_, i64>(4)? as u64,
        })
    }

    pub fn after(&self, report: &AppendReport) -> Totals {
        Totals {
            watermark: report.watermark,
            events_recorded: self.events_recorded + report.recorded() as u64,
            duplicates: self.duplicates + report.duplicates() as u64,
            conflicts: self.conflicts + report.conflicts() as u64,
            quarantined: self.quarantined + report.quarantined,
        }
    }
}

pub(crate) fn read_totals(conn: &Connection) -> rusqlite::Result<Totals> {
    let totals = conn
        .prepare_cached(
            "SELECT watermark, events_recorded_total, duplicates_total, conflicts_total, quarantined_total
             FROM batches ORDER BY id DESC LIMIT 1",
        )?
        .query_row([], Totals::read)
        .optional()?;
    Ok(totals.unwrap_or_default())
}

/// The totals as batch `id` left them (none before the first batch).
pub(crate) fn totals_of_batch(conn: &Connection, id: i64) -> rusqlite::Result<Totals> {
    let totals = conn
        .prepare_cached(
            "SELECT watermark, events_recorded_total, duplicates_total, conflicts_total, quarantined_total
             FROM batches WHERE id = ?1",
        )?
        .query_row([id], Totals::read)
        .optional()?;
    Ok(totals.unwrap_or_default())
}

/// `status --json` (contract §7).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Status {
    /// Events recorded and counted (one per event_id).
    pub events_recorded: u64,
    /// Exact duplicates received (same event_id, same payload), not counted again.
    pub duplicates: u64,
    /// Conflicting duplicates kept for audit (same event_id, different payload), never counted.
    pub conflicts: u64,
    /// Messages quarantined.
    pub quarantined: u64,
    /// Of those, the ones no `quarantine replay` has recorded yet (as an event, a duplicate or a conflicting
    /// duplicate): what an operator still has to look at.
    pub quarantine_pending: u64,
    /// The last ledger sequence number.
    pub watermark: u64,
    /// Next offset to read per Kafka partition.
    pub offsets: Vec<SourceOffset>,
    /// Appends committed.
    pub batches: u64,
    /// Entries written here (adjustments, the hook's decisions and usage) not yet acknowledged by Kafka.
    pub outbox_pending: u64,
    /// Path of the ledger file.
    pub ledger: String,
    /// The ledger's id (contract §9.3): a UUID fixed at creation.
    pub ledger_id: String,
    /// The chain head: the last link's number (contract §9.3).
    pub head_seq: u64,
    /// The last link's hash, in hexadecimal.
    pub head_hash: String,
    /// Kafka offsets accepted as never read (`ingest --accept-gap`), oldest first.
    pub gaps: Vec<crate::OffsetGap>,
    /// Per topic, the events a shard read in another tenant's partition and forwarded to their tenant's partition
    /// (contract §9.4); only topics with any. Always empty for a ledger of every partition, which forwards nothing.
    pub misrouted: std::collections::BTreeMap<String, u64>,
    /// The plan defaults (PolicyEvents of tenant `*`) this shard read in its partition without the mark of a copy
    /// and forwarded to every other partition (contract §9.4). Always 0 for a ledger of every partition.
    #[serde(default)]
    pub plan_defaults_forwarded: u64,
    /// The plan defaults recorded: every shard of a set must hold each of them (contract §9.4).
    #[serde(default)]
    pub plan_defaults: u64,
    /// What tells two ledgers' plan defaults apart without listing them: SHA-256, in hexadecimal, over each recorded
    /// plan default's event_id (its length, then its bytes) and payload hash, in event_id order. Equal digests: the
    /// same plan defaults, with the same payloads.
    #[serde(default)]
    pub plan_defaults_digest: String,
}

/// The SQL of [`Ledger::plan_defaults`].
const PLAN_DEFAULTS_RECORDED: &str = include_str!("../queries/plan_defaults_recorded.sql");
/// The SQL of the count [`Status::plan_defaults_forwarded`].
const PLAN_DEFAULTS_FORWARDED: &str = include_str!("../queries/plan_defaults_forwarded.sql");

/// The digest [`Status::plan_defaults_digest`] of plan defaults given as (event_id, SHA-256 of the payload counted),
/// sorted by event_id: each event_id's length (8 bytes, little-endian) and bytes, then the payload hash, so that no
/// two lists hash the same bytes. Over none, SHA-256 of nothing.
fn plan_defaults_digest(recorded: &[(String, Vec<u8>)]) -> String {
    let mut hasher = Sha256::new();
    for (event_id, payload_hash) in recorded {
        hasher.update((event_id.len() as u64).to_le_bytes());
        hasher.update(event_id.as_bytes());
        hasher.update(payload_hash);
    }
    hasher.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// One quarantined message (`quarantine list`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QuarantinedMessage {
    /// Its quarantine id (what `quarantine replay` takes).
    pub id: i64,
    /// `kafka`, `file` or `local`.
    pub origin: String,
    /// Kafka topic or file path.
    pub topic: Option<String>,
    /// Kafka partition.
    pub partition: Option<i64>,
    /// Kafka offset, or record index in a file.
    pub offset: Option<i64>,
    /// Why it was quarantined, as a stable code (`DecodeError::code`).
    pub reason_code: String,
    /// Why, in words.
    pub reason: String,
    /// RFC 3339.
    pub quarantined_at: String,
    /// How many bytes were received.
    pub raw_bytes: usize,
    /// The bytes as received, in hexadecimal.
    pub raw_hex: String,
    /// What `quarantine replay` made of it, if it has been replayed into the ledger; `None` while pending.
    pub replayed: Option<Replayed>,
}

/// A quarantined message replayed after a fix (`quarantine_replays`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Replayed {
    /// `recorded`, `duplicate` or `conflicting_duplicate`.
    pub outcome: String,
    /// The entry it became or repeats.
    pub seq: u64,
    /// RFC 3339.
    pub replayed_at: String,
}

impl Ledger {
    /// The last ledger sequence number, from the last batch's row: one indexed read, for callers that poll it
    /// (the hook, before every group of decisions).
    pub fn watermark(&self) -> Result<u64, ReadError> {
        Ok(read_totals(&self.conn)?.watermark)
    }

    /// The counts of contract §7 `status`, from the last batch's totals.
    pub fn status(&self) -> Result<Status, ReadError> {
        // One snapshot for every figure: read one after another as appends commit, `quarantine_pending` can come
        // out above `quarantined`, and the offsets, outbox and watermark each be of another instant.
        let snapshot = self.conn.unchecked_transaction()?;
        let totals = read_totals(&self.conn)?;
        let batches: i64 = self.conn.query_row("SELECT COUNT(*) FROM batches", [], |r| r.get(0))?;
        let head = crate::links::read_head(&self.conn)?;
        let plan_defaults = self.plan_defaults()?;
        let status = Status {
            events_recorded: totals.events_recorded,
            duplicates: totals.duplicates,
            conflicts: totals.conflicts,
            quarantined: totals.quarantined,
            quarantine_pending: self.conn.query_row(
                "SELECT COUNT(*) FROM quarantine q
                 WHERE NOT EXISTS (SELECT 1 FROM quarantine_replays r WHERE r.quarantine_id = q.id)",
                [],
                |r| r.get::<_, i64>(0).map(|n| n as u64),
            )?,
            watermark: totals.watermark,
            offsets: self.offsets()?,
            batches: batches as u64,
            outbox_pending: self.outbox_pending_count()?,
            ledger: self.path.display().to_string(),
            ledger_id: crate::links::read_ledger_id(&self.conn)?,
            head_seq: head.seq,
            head_hash: head.hash_hex(),
            gaps: self.offset_gaps()?,
            misrouted: self.misrouted()?,
            plan_defaults_forwarded: self.conn.query_row(PLAN_DEFAULTS_FORWARDED, [], |r| r.get::<_, i64>(0))? as u64,
            plan_defaults: plan_defaults.len() as u64,
            plan_defaults_digest: plan_defaults_digest(&plan_defaults),
        };
        snapshot.finish()?;
        Ok(status)
    }

    /// The plan defaults recorded (PolicyEvents of tenant `*`), by event_id, each with the SHA-256 of the payload
    /// counted.
    pub fn plan_defaults(&self) -> Result<Vec<(String, Vec<u8>)>, ReadError> {
        let mut statement = self.conn.prepare_cached(PLAN_DEFAULTS_RECORDED)?;
        let rows = statement.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, Vec<u8>>(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Per topic, how many events this shard forwarded to their tenant's partition (`forwarded`); the plan defaults
    /// it forwarded to every partition are not misrouted ([`Status::plan_defaults_forwarded`]).
    pub fn misrouted(&self) -> Result<std::collections::BTreeMap<String, u64>, ReadError> {
        let mut statement = self
            .conn
            .prepare("SELECT topic, COUNT(*) FROM forwarded WHERE tenant <> '*' GROUP BY topic ORDER BY topic")?;
        let rows = statement.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The next offset to read per Kafka partition, as stored with the events.
    pub fn offsets(&self) -> Result<Vec<SourceOffset>, ReadError> {
        let mut statement =
            self.conn.prepare("SELECT topic, partition, next_offset FROM offsets ORDER BY topic, partition")?;
        let rows = statement
            .query_map([], |r| Ok(SourceOffset { topic: r.get(0)?, partition: r.get(1)?, next_offset: r.get(2)? }))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// How far an earlier ingest got in the container file with this sync marker, if one did.
    pub fn file_progress(&self, sync_marker: &[u8; 16]) -> Result<Option<FileProgress>, ReadError> {
        let mut statement =
            self.conn.prepare_cached("SELECT path, records, digest FROM file_progress WHERE sync_marker = ?")?;
        let progress = statement
            .query_row([&sync_marker[..]], |r| {
                let digest: Vec<u8> = r.get(2)?;
                Ok(FileProgress {
                    sync_marker: *sync_marker,
                    path: r.get(0)?,
                    records: r.get::<_, i64>(1)? as u64,
                    digest: digest.try_into().unwrap_or([0; 32]),
                })
            })
            .optional()?;
        Ok(progress)
    }

    /// Every quarantined message, oldest first.
    pub fn quarantined(&self) -> Result<Vec<QuarantinedMessage>, ReadError> {
        let mut statement = self.conn.prepare(
            "SELECT q.id, q.origin, q.origin_stream, q.origin_partition, q.origin_offset, q.reason_code, q.reason,
                    q.quarantined_at, q.raw, r.outcome, r.seq, r.replayed_at
             FROM quarantine q LEFT JOIN quarantine_replays r ON r.quarantine_id = q.id ORDER BY q.id",
        )?;
        let rows = statement.query_map([], |r| {
            let raw: Vec<u8> = r.get(8)?;
            Ok(QuarantinedMessage {
                id: r.get(0)?,
                origin: r.get(1)?,
                topic: r.get(2)?,
                partition: r.get(3)?,
                offset: r.get(4)?,
                reason_code: r.get(5)?,
                reason: r.get(6)?,
                quarantined_at: schemas::Timestamp(r.get(7)?).to_string(),
                raw_bytes: raw.len(),
                raw_hex: raw.iter().map(|b| format!("{b:02x}")).collect(),
                replayed: match r.get::<_, Option<String>>(9)? {
                    None => None,
                    Some(outcome) => Some(Replayed {
                        outcome,
                        seq: r.get::<_, i64>(10)? as u64,
                        replayed_at: schemas::Timestamp(r.get(11)?).to_string(),
                    }),
                },
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}
