//! Loading events into a store (contract §3): an Avro container file into one ledger or a directory of shards (each
//! record into its tenant's shard), resumable after a kill; and the Kafka consumer of one ledger, under the ledger's
//! ingest lock, exactly once. The consumer of a directory of shards needs no ledger opened here: the ingest stage
//! opens each shard as Kafka assigns its partition.

use std::path::Path;
use std::sync::atomic::AtomicBool;

use ingest::BatchBounds;
use ingest::consumer::{KafkaIngestProgress, KafkaIngestSettings};
use ingest::file::{ContainerFile, FileIngestReport, ShardsIngestReport};
use ledger::shards::ShardDir;
use ledger::{Ledger, ProcessLock};

use crate::{Context, Result};

/// The container file `file` appended to the ledger at `ledger_path`, in batches within `bounds`; `on_batch` sees each
/// batch's report. The file is opened first: one that cannot be read leaves no new, empty ledger behind.
pub fn file(
    ledger_path: &Path,
    file: &Path,
    bounds: BatchBounds,
    on_batch: impl FnMut(&FileIngestReport),
) -> Result<FileIngestReport> {
    let stopped = || format!("ingest of {} stopped", file.display());
    let container = ContainerFile::open(file).with_context(stopped)?;
    let mut ledger = crate::store::open_for_append(ledger_path)?;
    container.ingest(&mut ledger, bounds, on_batch).with_context(stopped)
}

/// The container file `file` appended to the shards of `shards` (`partitions` of them, created when missing; the
/// directory's own when `None`), each record into its tenant's shard.
pub fn file_into_shards(
    shards: &ShardDir,
    partitions: Option<u32>,
    file: &Path,
    bounds: BatchBounds,
    on_batch: impl FnMut(&ShardsIngestReport),
) -> Result<ShardsIngestReport> {
    let stopped = || format!("ingest of {} stopped", file.display());
    let container = ContainerFile::open(file).with_context(stopped)?;
    let mut ledgers = shards.open_set(partitions)?;
    for ledger in &mut ledgers {
        ledger.keep_commit_totals();
    }
    container.ingest_shards(&mut ledgers, bounds, on_batch).with_context(stopped)
}

/// One ledger opened to consume Kafka into: held under its ingest lock (one consumer per ledger) until dropped, its
/// key filter loaded (a consumer runs for long and most of what it reads is new: the filter spares those the dedup
/// probes).
pub struct Consumer {
    ledger: Ledger,
    _lock: ProcessLock,
}

impl Consumer {
    /// The ledger at `path`, locked for ingest and opened for appending.
    pub fn open(path: &Path) -> Result<Consumer> {
        let lock = ProcessLock::acquire(path, "ingest")?;
        let mut ledger = crate::store::open_for_append(path)?;
        ledger.keep_key_filter().context("cannot read the dedup keys into the key filter")?;
        Ok(Consumer { ledger, _lock: lock })
    }

    /// The ledger's id (its consumer group's name by default).
    pub fn ledger_id(&self) -> Result<String> {
        Ok(self.ledger.ledger_id()?)
    }

    /// Consumes the input topics of `settings` into the ledger until `stop` (or caught up, when asked);
    /// `on_progress` sees each report.
    pub fn run(
        &mut self,
        settings: &KafkaIngestSettings,
        stop: &AtomicBool,
        on_progress: impl FnMut(&KafkaIngestProgress),
    ) -> Result<KafkaIngestProgress> {
        ingest::consumer::ingest_kafka(&mut self.ledger, settings, stop, on_progress)
            .with_context(|| format!("ingest from {} stopped", settings.brokers))
    }
}

/// Consumes the input topics of `settings` into the shards of `shards`, partition p into shard p, until `stop` (or
/// caught up, when asked); `on_progress` sees each report.
pub fn kafka_into_shards(
    shards: &ShardDir,
    settings: &KafkaIngestSettings,
    stop: &AtomicBool,
    on_progress: impl FnMut(&KafkaIngestProgress),
) -> Result<KafkaIngestProgress> {
    ingest::consumer::ingest_kafka_shards(shards, settings, stop, on_progress)
        .with_context(|| format!("ingest from {} into {} stopped", settings.brokers, shards.dir().display()))
}

/// What a file's ingest says in words: its summary for stdout, its warnings (a resume refused) and, for a damaged file,
/// the error that fails the command. Recorded is recorded, but the rest of a damaged file was never read, which the
/// caller must hear (exit 2), not find out from a record count: an exit of 0 would hide the damage from a job that
/// checks the status.
#[derive(Debug)]
pub struct FileWords {
    /// Lines for stdout.
    pub summary: String,
    /// Each warning, a line for stderr.
    pub warnings: Vec<String>,
    /// The damage, when the file could not be read to its end: an error for stderr.
    pub damaged: Option<String>,
}

/// ` (N more quarantined already, by an earlier ingest of this file)`, when there are some.
fn already_quarantined(count: u64) -> String {
    match count {
        0 => String::new(),
        n => format!(" ({n} more quarantined already, by an earlier ingest of this file)"),
    }
}

/// The words of a file ingested into one ledger.
pub fn words_of_file(report: &FileIngestReport) -> FileWords {
    let r = report;
    let mut summary = format!(
        "{}: {} {} records: {} recorded, {} duplicates, {} conflicting duplicates, {} quarantined{}; watermark {}\n",
        r.file,
        r.records,
        r.record_type,
        r.recorded,
        r.duplicates,
        r.conflicts,
        r.quarantined,
        already_quarantined(r.already_quarantined),
        r.watermark
    );
    if r.resumed_after > 0 {
        summary += &format!(
            "resumed after record {}: an earlier ingest of this file appended the records before it\n",
            r.resumed_after
        );
    }
    let damaged = r.damaged.as_ref().map(|damage| {
        format!(
            "{} is damaged: it cannot be read past record {} ({}); the records before it are recorded, the rest was \
             not read. Repair the file (or get it again) and ingest it again: it resumes at record {} if the file \
             still begins with what is recorded (otherwise what is recorded counts as duplicates).",
            r.file, damage.record, damage.message, damage.record
        )
    });
    let warnings = r.resume_refused.iter().map(|refused| format!("{}: {refused}", r.file)).collect();
    FileWords { summary, warnings, damaged }
}

/// The words of a file ingested into the shards of `shards`: the sums, then a line per shard.
pub fn words_of_shards(report: &ShardsIngestReport, shards: &ShardDir) -> FileWords {
    let r = report;
    let mut summary = format!(
        "{}: {} {} records into {} shards: {} recorded, {} duplicates, {} conflicting duplicates, {} quarantined{}\n",
        r.file,
        r.records,
        r.record_type,
        r.shards.len(),
        r.recorded,
        r.duplicates,
        r.conflicts,
        r.quarantined,
        already_quarantined(r.already_quarantined),
    );
    let rows: Vec<Vec<String>> = r
        .shards
        .iter()
        .map(|s| {
            let resumed =
                if s.resumed_after == 0 { String::new() } else { format!("after record {}", s.resumed_after) };
            let path = shards.path_of(s.partition).display().to_string();
            let counts = [s.records, s.recorded, s.duplicates, s.quarantined, s.watermark].map(|n| n.to_string());
            [path].into_iter().chain(counts).chain([resumed]).collect()
        })
        .collect();
    let header = ["SHARD", "RECORDS", "RECORDED", "DUPLICATES", "QUARANTINED", "WATERMARK", "RESUMED"];
    let mut table = Vec::new();
    reports::text::write_table(&mut table, &header, &rows).expect("a table written into memory");
    summary += &String::from_utf8_lossy(&table);
    let damaged = r.damaged.as_ref().map(|damage| {
        format!(
            "{} is damaged: it cannot be read past record {} ({}); the records before it are recorded in their shards, \
             the rest was not read. Repair the file (or get it again) and ingest it again: each shard resumes where it \
             got to if the file still begins with what it recorded.",
            r.file, damage.record, damage.message
        )
    });
    let warnings = r.resume_refused.iter().map(|refused| format!("{}: {refused}", r.file)).collect();
    FileWords { summary, warnings, damaged }
}
