//! Batching: messages gathered per writer until a batch is due, then appended to the ledger (its offsets in the same
//! transaction, then committed to Kafka for lag tools) or queued for their shard's writer.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka::checkpoints::CheckpointPublisher;
use kafka::topics::Topics;
use ledger::{Batch, GapRange, Ledger, SourceOffset};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use schemas::Catalog;

use crate::consumed::{Consumed, Pending, decode};
use crate::shards::ShardWriters;

use super::error::KafkaIngestError;
use super::progress::{KafkaIngestProgress, add_reasons};
use super::rebalance::{IngestContext, Shared};
use super::settings::KafkaIngestSettings;

/// Messages waiting for their append, by writer: the one ledger (writer 0), or the shard of their partition.
#[derive(Default)]
pub(super) struct Gathered {
    by_writer: BTreeMap<u32, Gathering>,
}

/// The messages gathered for one writer's next append.
#[derive(Default)]
struct Gathering {
    messages: Vec<Consumed>,
    bytes: usize,
    since: Option<Instant>,
}

impl Gathered {
    pub(super) fn is_empty(&self) -> bool {
        self.by_writer.is_empty()
    }

    pub(super) fn push(&mut self, writer: u32, message: Consumed) {
        let gathering = self.by_writer.entry(writer).or_default();
        gathering.bytes += raw_len(&message);
        gathering.messages.push(message);
        gathering.since.get_or_insert_with(Instant::now);
    }

    /// The writers whose messages are due: as many as a batch holds, waited for long enough, or the consumer idle.
    pub(super) fn due(&self, settings: &KafkaIngestSettings, idle: bool) -> Vec<u32> {
        let wait = Duration::from_millis(settings.batch_wait_ms);
        self.by_writer
            .iter()
            .filter(|(_, g)| {
                idle || settings.batch.reached(g.messages.len(), g.bytes)
                    || g.since.is_some_and(|t| t.elapsed() >= wait)
            })
            .map(|(writer, _)| *writer)
            .collect()
    }

    /// The writers that have messages gathered.
    pub(super) fn writers(&self) -> Vec<u32> {
        self.by_writer.keys().copied().collect()
    }

    pub(super) fn take(&mut self, writer: u32) -> Vec<Consumed> {
        self.by_writer.remove(&writer).map(|g| g.messages).unwrap_or_default()
    }
}

/// The bytes of a gathered message as received.
fn raw_len(message: &Consumed) -> usize {
    message.payload.len()
}

/// Drops gathered messages of partitions revoked since the last look: the ledger's offsets do not cover them,
/// so whoever gets the partition reads them again.
/// Returns whether any partition was revoked.
pub(super) fn drop_revoked(shared: &Mutex<Shared>, gathered: &mut Gathered) -> bool {
    let revoked = std::mem::take(&mut shared.lock().expect("never poisoned").revoked);
    if revoked.is_empty() {
        return false;
    }
    for gathering in gathered.by_writer.values_mut() {
        gathering.messages.retain(|m| !revoked.contains(&(m.topic.clone(), m.partition)));
        gathering.bytes = gathering.messages.iter().map(raw_len).sum();
    }
    gathered.by_writer.retain(|_, gathering| !gathering.messages.is_empty());
    true
}

/// Where appends go: one ledger appended on the consumer's thread, or shards appended by their writers.
pub(super) enum Target<'a> {
    Ledger {
        ledger: &'a mut Ledger,
        checkpoints: &'a mut Option<CheckpointPublisher>,
        head: ledger::Head,
    },
    Shards {
        writers: Arc<ShardWriters>,
        /// Each shard's watermark after its last append.
        watermarks: BTreeMap<u32, u64>,
    },
}

impl Target<'_> {
    /// The writer of a message of `partition`.
    pub(super) fn writer_of(&self, partition: i32) -> u32 {
        match self {
            Target::Ledger { .. } => 0,
            Target::Shards { .. } => u32::try_from(partition).expect("Kafka partitions are not negative"),
        }
    }

    /// Appends `messages` (the ledger), or queues them for their shard's writer.
    pub(super) fn append(
        &mut self,
        writer: u32,
        messages: Vec<Consumed>,
        consumer: &BaseConsumer<IngestContext>,
        shared: &Mutex<Shared>,
        settings: &KafkaIngestSettings,
        progress: &mut KafkaIngestProgress,
    ) -> Result<(), KafkaIngestError> {
        match self {
            Target::Ledger { ledger, head, .. } => {
                append(ledger, consumer, shared, messages, &settings.topics, progress)?;
                *head = ledger.head()?;
                Ok(())
            }
            Target::Shards { writers, .. } => Ok(writers.send(writer, messages)?),
        }
    }

    /// Once a turn: the ledger's head offered to the checkpoints; or what the shards' writers appended since,
    /// counted and its offsets noted. Answers whether anything was appended.
    pub(super) fn collect(
        &mut self,
        consumer: &BaseConsumer<IngestContext>,
        shared: &Mutex<Shared>,
        progress: &mut KafkaIngestProgress,
    ) -> Result<bool, KafkaIngestError> {
        if let Some(error) = shared.lock().expect("never poisoned").shard_failure.take() {
            return Err(error.into());
        }
        match self {
            Target::Ledger { checkpoints, head, .. } => {
                offer_head(checkpoints, head);
                Ok(false)
            }
            Target::Shards { writers, watermarks } => {
                let appended = writers.take_appended()?;
                if appended.batches == 0 {
                    return Ok(false);
                }
                progress.recorded += appended.recorded;
                progress.duplicates += appended.duplicates;
                progress.conflicts += appended.conflicts;
                progress.quarantined += appended.quarantined;
                add_reasons(progress, appended.quarantined_by_reason);
                progress.forwarded += appended.forwarded;
                progress.plan_defaults_forwarded += appended.plan_defaults_forwarded;
                progress.batches += appended.batches;
                watermarks.extend(appended.watermarks);
                progress.watermark = watermarks.values().sum();
                store_offsets(consumer, shared, appended.offsets);
                Ok(true)
            }
        }
    }

    /// Waits until everything queued is appended, and counts it.
    pub(super) fn settle(
        &mut self,
        consumer: &BaseConsumer<IngestContext>,
        shared: &Mutex<Shared>,
        progress: &mut KafkaIngestProgress,
    ) -> Result<(), KafkaIngestError> {
        if let Target::Shards { writers, .. } = self {
            writers.wait_idle()?;
        }
        self.collect(consumer, shared, progress).map(|_| ())
    }

    /// The offset gaps the operator accepted, in the ledger or in every shard open.
    pub(super) fn accepted_gaps(&self) -> Result<Vec<GapRange>, KafkaIngestError> {
        match self {
            Target::Ledger { ledger, .. } => Ok(ledger.offset_gaps()?.iter().map(|g| g.range()).collect()),
            Target::Shards { writers, .. } => {
                let mut accepted = Vec::new();
                for partition in writers.assigned() {
                    let shard = Ledger::open_read_only(writers.dir().path_of(partition))
                        .map_err(|source| KafkaIngestError::ShardGaps { partition, source })?;
                    accepted.extend(shard.offset_gaps()?.iter().map(|g| g.range()));
                }
                Ok(accepted)
            }
        }
    }
}

fn append(
    ledger: &mut Ledger,
    consumer: &BaseConsumer<IngestContext>,
    shared: &Mutex<Shared>,
    messages: Vec<Consumed>,
    topics: &Topics,
    progress: &mut KafkaIngestProgress,
) -> Result<(), KafkaIngestError> {
    let catalog = Catalog::builtin();
    let mut next: BTreeMap<(String, i32), i64> = BTreeMap::new();
    let mut batch = Batch::default();
    for message in messages {
        let entry = next.entry((message.topic.clone(), message.partition)).or_insert(message.offset + 1);
        *entry = (*entry).max(message.offset + 1);
        match decode(catalog, topics, message) {
            Pending::Event(incoming) => batch.events.push(incoming),
            Pending::Rejected(rejected) => batch.rejected.push(rejected),
        }
    }
    batch.offsets = next
        .iter()
        .map(|((topic, partition), next_offset)| SourceOffset {
            topic: topic.clone(),
            partition: *partition,
            next_offset: *next_offset,
        })
        .collect();
    let report = ledger.append(&batch)?;
    crate::consumed::log_quarantined(&batch.rejected);
    add_reasons(progress, crate::consumed::by_reason(&batch.rejected));
    progress.recorded += report.recorded() as u64;
    progress.duplicates += report.duplicates() as u64;
    progress.conflicts += report.conflicts() as u64;
    progress.quarantined += report.quarantined;
    progress.batches += 1;
    progress.watermark = report.watermark;
    store_offsets(consumer, shared, next);
    Ok(())
}

/// Notes the offsets a ledger now stores, and commits them to Kafka for lag tools.
fn store_offsets(consumer: &BaseConsumer<IngestContext>, shared: &Mutex<Shared>, next: BTreeMap<(String, i32), i64>) {
    if next.is_empty() {
        return;
    }
    let mut tpl = TopicPartitionList::new();
    {
        let mut shared = shared.lock().expect("never poisoned");
        for ((topic, partition), next_offset) in next {
            let _ = tpl.add_partition_offset(&topic, partition, Offset::Offset(next_offset));
            let stored = shared.ledger_offsets.entry((topic, partition)).or_insert(next_offset);
            *stored = (*stored).max(next_offset);
        }
    }
    // For lag tools only: the ledger already holds these offsets, so a failed commit loses nothing.
    if let Err(e) = consumer.commit(&tpl, CommitMode::Async) {
        tracing::warn!(error = %e, "ingest: committing offsets to Kafka failed (the ledger holds them)");
    }
}

/// Offers the ledger's head to the checkpoint publisher, if there is one.
fn offer_head(checkpoints: &mut Option<CheckpointPublisher>, head: &ledger::Head) {
    if let Some(checkpoints) = checkpoints.as_mut() {
        checkpoints.offer(head.seq, &head.hash_hex());
    }
}
