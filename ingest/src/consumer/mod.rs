//! `ingest --brokers`: a Kafka consumer in a consumer group that puts every message into the ledger exactly
//! once (contract §4.2).
//!
//! The ledger owns the offsets. On assignment each partition starts at the next offset stored in the ledger
//! (the beginning when it has none), not at Kafka's committed offset; messages are decoded, gathered into a
//! bounded batch and appended with the offsets they cover in one transaction. Only then are the offsets
//! committed to Kafka, so that lag tools see progress. A crash between the two replays messages the ledger
//! already holds the offsets of: they are skipped by the seek, never recorded twice.
//!
//! Ingest never skips an offset on its own. A partition whose next offset the brokers no longer hold (messages removed
//! by retention before they were read, a topic deleted and recreated under the ledger's offsets) stops it, naming the
//! range ([`KafkaIngestError::OffsetsNeverRead`]); the operator accepts the loss with `--accept-gap`
//! ([`KafkaIngestSettings::accept_gaps`]), which the ledger records. A run `until_caught_up` ends well only when the
//! ledger reached the end of every partition of every topic, not only of those the group gave it. With
//! `publish_checkpoints`, the ledger's head goes to `quota.checkpoints` as it moves.
//!
//! The work is split by concern: the settings (`settings`), why ingest stops (`error`), the consumer's context and
//! its rebalances (`rebalance`), batching (`batch`), offsets never read (`gaps`), brokers away (`brokers`),
//! `--until-caught-up` (`caught_up`), and the loop that drives them (`consume`).

mod batch;
mod brokers;
mod caught_up;
mod consume;
mod error;
mod gaps;
mod progress;
mod rebalance;
mod settings;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka::checkpoints::CheckpointPublisher;
use kafka::topics::PartitionCountError;
use ledger::Ledger;
use ledger::shards::ShardDir;
use rdkafka::consumer::{BaseConsumer, Consumer};

pub use crate::bounds::BATCH_MAX_EVENTS;
use crate::shards::{ShardWriters, WriterSettings};

use batch::Target;
use brokers::{ASK_EVERY_MS, Waiting};
use consume::consume;
pub use error::{Behind, KafkaIngestError, MissingOffsets};
use gaps::{accept_gaps, accept_shard_gaps};
pub use progress::KafkaIngestProgress;
use progress::add_reasons;
use rebalance::{IngestContext, Shared, make_consumer, refresh_offsets};
pub use settings::{
    ASSIGNMENT_WAIT_MS, BATCH_WAIT_MS, BROKERS_WAIT_MS, KafkaIngestSettings, LAG_EVERY_MS, STANDING_ASK_MS,
    UNASSIGNED_WAIT_MS, default_group, default_shards_group,
};

/// Consumes until `stop` is set (or, with `until_caught_up`, until the ledger reached the end of every partition
/// of every topic), appending bounded batches to the ledger. `on_progress` is called after each append and when
/// the lag is measured. Gaps to accept are recorded first; with `publish_checkpoints`, the ledger's head is
/// published as it moves, and once more at the end, however ingest ends.
pub fn ingest_kafka(
    ledger: &mut Ledger,
    settings: &KafkaIngestSettings,
    stop: &AtomicBool,
    on_progress: impl FnMut(&KafkaIngestProgress),
) -> Result<KafkaIngestProgress, KafkaIngestError> {
    let shared = Arc::new(Mutex::new(Shared::default()));
    refresh_offsets(ledger, &shared)?;
    let consumer = make_consumer(settings, &shared, None)?;
    let mut checkpoints = start_checkpoints(ledger, settings);
    let result = accept_gaps(ledger, &consumer, &settings.accept_gaps)
        .and_then(|()| Ok(refresh_offsets(ledger, &shared)?))
        .and_then(|()| {
            let watermark = ledger.status()?.watermark;
            let head = ledger.head()?;
            let target = Target::Ledger { ledger: &mut *ledger, checkpoints: &mut checkpoints, head };
            consume(target, watermark, &consumer, settings, &shared, stop, on_progress)
        });
    if let Some(checkpoints) = checkpoints {
        match ledger.head() {
            Ok(head) => checkpoints.finish(head.seq, &head.hash_hex()),
            Err(error) => tracing::warn!(%error, "ingest: cannot read the ledger's head for its last checkpoint"),
        }
    }
    result
}

/// As [`ingest_kafka`], into the shards of `shards` (contract §9.4): partition p of every input topic into shard p,
/// opened when the group assigns p and closed when it revokes it, each appended by a writer thread of its own
/// ([`ShardWriters`]). The input topics must share one partition count P. An event read in a partition other than
/// its tenant's is re-published to its tenant's partition and recorded as forwarded; a plan default read without the
/// mark of a copy is recorded and re-published to every other partition, so that every shard holds it whichever
/// partition its producer chose. Each shard publishes its own checkpoints with `publish_checkpoints`.
pub fn ingest_kafka_shards(
    shards: &ShardDir,
    settings: &KafkaIngestSettings,
    stop: &AtomicBool,
    on_progress: impl FnMut(&KafkaIngestProgress),
) -> Result<KafkaIngestProgress, KafkaIngestError> {
    let shared = Arc::new(Mutex::new(Shared::default()));
    // A client of its own asks for P: the consumer's rebalance callback needs the writers, which need P.
    let probe = make_consumer(settings, &shared, None)?;
    let partitions = partition_count(&probe, settings, stop)?;
    drop(probe);
    let mut writer_settings = WriterSettings::new(settings.topics.clone());
    writer_settings.forward_brokers = Some(settings.brokers.clone());
    writer_settings.overrides = settings.overrides.clone();
    writer_settings.publish_checkpoints = settings.publish_checkpoints;
    let writers = Arc::new(ShardWriters::new(shards.clone(), partitions, writer_settings));
    let consumer = make_consumer(settings, &shared, Some(writers.clone()))?;
    accept_shard_gaps(shards, partitions, &consumer, settings)?;
    let target = Target::Shards { writers: writers.clone(), watermarks: BTreeMap::new() };
    let result = consume(target, 0, &consumer, settings, &shared, stop, on_progress);
    // Closing the shards first, so that the consumer's own close (which revokes) finds nothing left to append.
    let closed = writers.close_all();
    let mut progress = result?;
    closed?;
    let last = writers.take_appended()?;
    progress.recorded += last.recorded;
    progress.duplicates += last.duplicates;
    progress.conflicts += last.conflicts;
    progress.quarantined += last.quarantined;
    add_reasons(&mut progress, last.quarantined_by_reason);
    progress.forwarded += last.forwarded;
    progress.plan_defaults_forwarded += last.plan_defaults_forwarded;
    progress.batches += last.batches;
    Ok(progress)
}

/// The input topics' one partition count P, waiting for brokers that do not answer (as ingest does; with
/// `until_caught_up`, for [`BROKERS_WAIT_MS`] at most).
fn partition_count(
    consumer: &BaseConsumer<IngestContext>,
    settings: &KafkaIngestSettings,
    stop: &AtomicBool,
) -> Result<u32, KafkaIngestError> {
    let mut waiting = Waiting::default();
    loop {
        match kafka::topics::common_partition_count(consumer.client(), settings.topics.names()) {
            Ok(partitions) => return Ok(partitions),
            Err(PartitionCountError::Missing(missing)) if !missing.is_empty() => {
                return Err(KafkaIngestError::MissingTopics { missing, brokers: settings.brokers.clone() });
            }
            Err(PartitionCountError::Unanswered { .. }) if !stop.load(Ordering::Relaxed) => {
                waiting.saw(&settings.brokers, "no answer to a request for the topics' partitions".to_string());
                if settings.until_caught_up {
                    waiting.give_up(&settings.brokers)?;
                }
                std::thread::sleep(Duration::from_millis(ASK_EVERY_MS));
            }
            Err(source) => return Err(KafkaIngestError::PartitionCount { brokers: settings.brokers.clone(), source }),
        }
    }
}

/// The checkpoint publisher of this run, when asked for; one that cannot be made is said, and ingest goes on.
fn start_checkpoints(ledger: &Ledger, settings: &KafkaIngestSettings) -> Option<CheckpointPublisher> {
    if !settings.publish_checkpoints {
        return None;
    }
    let started = ledger.ledger_id().map_err(|e| e.to_string()).and_then(|id| {
        CheckpointPublisher::new("ingest", &settings.brokers, &settings.overrides, &id).map_err(|e| e.to_string())
    });
    started.map_err(|error| tracing::warn!(%error, "ingest: no checkpoints will be published")).ok()
}
