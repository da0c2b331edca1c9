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
