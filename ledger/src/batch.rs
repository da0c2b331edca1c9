//! What an append takes and what it answers.

use schemas::{DecodeError, Event};

/// Where the ledger got a message.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Origin {
    /// A Kafka message.
    Kafka {
        /// The topic it was read from.
        topic: String,
        /// Its partition of the topic.
        partition: i32,
        /// Its offset in the partition.
        offset: i64,
    },
    /// A record of an Avro object container file, counted from 0.
    File {
        /// The file as it was named to ingest.
        path: String,
        /// The record's place in the file, from 0.
        record: u64,
    },
    /// Written by a process of ours (the enforcement hook, reconcile, a test) under that name.
    Local {
        /// The writer's name (`hook`, `reconcile`, ...).
        name: String,
    },
}

impl Origin {
    /// `(origin, origin_stream, origin_partition, origin_offset)` as stored.
    pub fn columns(&self) -> (&'static str, Option<&str>, Option<i64>, Option<i64>) {
        match self {
            Origin::Kafka { topic, partition, offset } => {
                ("kafka", Some(topic.as_str()), Some(i64::from(*partition)), Some(*offset))
            }
            Origin::File { path, record } => {
                ("file", Some(path.as_str()), None, Some(i64::try_from(*record).unwrap_or(i64::MAX)))
            }
            Origin::Local { name } => ("local", Some(name.as_str()), None, None),
        }
    }
}

impl Origin {
    /// The origin stored as `columns` gave it (the inverse of [`Origin::columns`]).
    pub fn from_columns(origin: &str, stream: Option<String>, partition: Option<i64>, offset: Option<i64>) -> Origin {
        let stream = stream.unwrap_or_default();
        match origin {
            "kafka" => Origin::Kafka {
                topic: stream,
                partition: partition.and_then(|p| i32::try_from(p).ok()).unwrap_or_default(),
                offset: offset.unwrap_or_default(),
            },
            "file" => {
                Origin::File { path: stream, record: offset.and_then(|o| u64::try_from(o).ok()).unwrap_or_default() }
            }
            _ => Origin::Local { name: stream },
        }
    }
}

/// A decoded, validated event to append.
#[derive(Debug, Clone)]
pub struct Incoming {
    /// The event, decoded and valid.
    pub event: Event,
    /// Where it came from.
    pub origin: Origin,
    /// The bytes as received (single-object encoding), when there were any.
    pub raw: Option<Vec<u8>>,
}

/// A message that failed to decode or validate, to quarantine.
#[derive(Debug, Clone)]
pub struct Rejected {
    /// Where it came from (contract §4.4: topic, partition, offset).
    pub origin: Origin,
    /// The bytes as received, kept so that a replay after a fix decodes them again.
    pub raw: Vec<u8>,
    /// Stable code (`DecodeError::code`).
    pub reason_code: String,
    /// The specific message.
    pub reason: String,
}

impl Rejected {
    /// A message from `origin` whose bytes `raw` failed to decode or validate with `error`.
    pub fn new(origin: Origin, raw: Vec<u8>, error: &DecodeError) -> Rejected {
        Rejected { origin, raw, reason_code: error.code().to_string(), reason: error.to_string() }
    }
}

/// The next offset to read of one Kafka partition.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct SourceOffset {
    /// The topic.
    pub topic: String,
    /// The partition of the topic.
    pub partition: i32,
    /// The offset of the first message not yet recorded (Kafka's committed-offset convention).
    pub next_offset: i64,
}

/// How far an ingest got in one Avro object container file (`file_progress`): the first `records` records, whose
/// digest is `digest`, are appended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileProgress {
    /// The file's sync marker: what names one container file, whatever its path.
    pub sync_marker: [u8; 16],
    /// The path it was last ingested by.
    pub path: String,
    /// How many records, from the first, are appended.
    pub records: u64,
    /// The SHA-256 of those records (each one's length, then its bytes): a file whose first records changed since
    /// is told apart from the one ingested.
    pub digest: [u8; 32],
}

/// Everything one append records, in one transaction: events, rejected messages, and the offsets they cover.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    /// The events to record, in order: each is recorded, a duplicate, or a conflicting duplicate.
    pub events: Vec<Incoming>,
    /// The messages to quarantine.
    pub rejected: Vec<Rejected>,
    /// The Kafka offsets the events and rejected messages cover, stored in the same transaction (contract §4.2).
    pub offsets: Vec<SourceOffset>,
    /// When the events are quarantined messages replayed after a fix: the quarantine id of each event, in order
    /// (empty otherwise). The append records each replay, so that none is replayed twice.
    pub replayed_from: Vec<i64>,
    /// Whether the events this batch records must also reach Kafka: each recorded entry joins the outbox in
    /// the same transaction (adjustments, the hook's decisions). Events that came from Kafka never do.
    pub outbox: bool,
    /// When the batch comes from a container file: how far into the file it reaches.
    pub file_progress: Option<FileProgress>,
    /// Events read in a partition other than their tenant's, which a shard re-published to their tenant's
    /// partition (contract §9.4) instead of recording them: recorded with the offsets that pass them.
    pub forwarded: Vec<Forwarded>,
}

/// An event a shard read in another tenant's partition and re-published, same bytes and key, to its tenant's
/// partition once the broker acknowledged the copy (contract §9.4).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Forwarded {
    /// The topic it was read from, and the copy went to.
    pub topic: String,
    /// The partition it was read from.
    pub partition: i32,
    /// Its offset there.
    pub offset: i64,
    /// The event's id.
    pub event_id: String,
    /// Its tenant.
    pub tenant: String,
    /// The tenant's partition, where the copy went.
    pub to_partition: i32,
}

/// The quarantine reason of a usage event that would take its (tenant, metric, period) usage total past 2^63 - 1
/// ([`AppendOutcome::Quarantined`]).
pub const TOTAL_OVERFLOW: &str = "total_overflow";

/// What became of one event of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendOutcome {
    /// A new event_id: recorded and counted, at this ledger sequence number.
    Recorded {
        /// Its ledger sequence number.
        seq: u64,
    },
    /// Same event_id and payload as the entry `of`: counted once, only its arrival is kept.
    Duplicate {
        /// The recorded entry it repeats.
        of: u64,
    },
    /// Same event_id as the recorded entry `of`, different payload: kept at `seq` for audit, never counted.
    ConflictingDuplicate {
        /// Its own ledger sequence number.
        seq: u64,
        /// The recorded entry whose event_id it shares.
        of: u64,
    },
    /// Not recorded: quarantined with its raw bytes (or, for a writer of ours, its encoding), as a message that
    /// fails to validate is. Only a usage event that would take its usage total past 2^63 - 1 ([`TOTAL_OVERFLOW`]):
    /// failing the batch instead would fail every retry of it.
    Quarantined {
        /// Why ([`TOTAL_OVERFLOW`]).
        reason_code: &'static str,
    },
}

/// The answer of an append.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppendReport {
    /// One outcome per event, in batch order.
    pub outcomes: Vec<AppendOutcome>,
    /// Messages added to the quarantine: rejected ones, and events quarantined by the append
    /// ([`AppendOutcome::Quarantined`]).
    pub quarantined: u64,
    /// Messages the quarantine held already (the same bytes from the same place: a file ingested again, a
    /// quarantined message replayed that still cannot be recorded).
    pub already_quarantined: u64,
    /// The last ledger sequence number after the append.
    pub watermark: u64,
}

impl AppendReport {
    /// How many events were recorded.
    pub fn recorded(&self) -> usize {
        self.outcomes.iter().filter(|o| matches!(o, AppendOutcome::Recorded { .. })).count()
    }
    /// How many events were duplicates.
    pub fn duplicates(&self) -> usize {
        self.outcomes.iter().filter(|o| matches!(o, AppendOutcome::Duplicate { .. })).count()
    }
    /// How many events were conflicting duplicates.
    pub fn conflicts(&self) -> usize {
        self.outcomes.iter().filter(|o| matches!(o, AppendOutcome::ConflictingDuplicate { .. })).count()
    }
    /// How many events were quarantined by the append (counted in `quarantined` or `already_quarantined` too).
    pub fn quarantined_events(&self) -> usize {
        self.outcomes.iter().filter(|o| matches!(o, AppendOutcome::Quarantined { .. })).count()
    }
}
