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

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kafka::checkpoints::CheckpointPublisher;
use ledger::shards::{Shard, ShardDir, ShardError};
use ledger::{AppendError, Batch, GapRange, Ledger, ProcessLock, SourceOffset};
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use schemas::Catalog;
use serde::Serialize;

use kafka::topics::{PartitionCountError, Topics, missing_topics};

use crate::BatchBounds;
use crate::consumed::{Consumed, Pending, decode};
use crate::shards::{ShardWriterError, ShardWriters, WriterSettings};

/// Most messages in one ledger append. A batch of this size is a few MB of decoded events and amortises the
/// commit's fsync; larger batches gain little (see `bench append`).
pub const BATCH_MAX_EVENTS: usize = 5_000;
/// Longest a message waits in a partial batch before it is appended: bounds the delay a quiet topic adds.
pub const BATCH_WAIT_MS: u64 = 500;
/// How long one poll of the consumer blocks when no message is ready.
const POLL_TIMEOUT_MS: u64 = 100;
/// Timeout of the broker requests made for `--until-caught-up` (high watermarks).
const WATERMARK_TIMEOUT_MS: u64 = 10_000;
/// How often `--until-caught-up` asks for the watermarks while messages keep arriving (when the consumer goes
/// idle it asks at once).
const CAUGHT_UP_ASK_MS: u64 = 2_000;
/// Watermark requests in flight at once, each from a thread of its own (see `caught_up`).
const WATERMARK_REQUESTS_AT_ONCE: usize = 64;
/// `--until-caught-up` gives up when the group assigns no partition for this long.
pub const ASSIGNMENT_WAIT_MS: u64 = 60_000;
/// `--until-caught-up` gives up when the brokers stay away this long. A running ingest waits for them as long as
/// it takes: librdkafka reconnects on its own.
pub const BROKERS_WAIT_MS: u64 = 60_000;
/// While the brokers are away, how often ingest asks them for the topics, to learn that they answer again.
const ASK_EVERY_MS: u64 = 1_000;
/// `--until-caught-up` gives up when partitions it was not assigned (other members of the group hold them) are still
/// behind this long after it caught up with its own. Longer than the session timeout (10 s), so that the partitions
/// of a member that died have had the time to come to this one.
pub const UNASSIGNED_WAIT_MS: u64 = 15_000;
/// How often a partition whose accepted gap runs past its end (a recreated topic, shorter than the ledger's offset)
/// is asked again from the ledger's offset: the brokers answer "out of range" until the topic reaches it.
const PAST_END_ASK_MS: u64 = 5_000;

/// Where and how to consume.
#[derive(Debug, Clone)]
pub struct KafkaIngestSettings {
    /// `bootstrap.servers`.
    pub brokers: String,
    /// `group.id`.
    pub group: String,
    /// The topics consumed, and the record type each carries.
    pub topics: Topics,
    /// Exit once every assigned partition is at its high watermark (a nightly job), instead of running on.
    pub until_caught_up: bool,
    /// Most messages and bytes in one ledger append ([`BatchBounds::kafka`] by default).
    pub batch: BatchBounds,
    /// Longest a message waits in a partial batch ([`BATCH_WAIT_MS`] by default).
    pub batch_wait_ms: u64,
    /// librdkafka settings given with `-X key=value` (SASL, TLS, tuning); applied last, so they win.
    pub overrides: Vec<(String, String)>,
    /// Offsets the ledger never read that the operator accepts as lost (`--accept-gap`): each must be exactly a
    /// range ingest names when it stops ([`KafkaIngestError::OffsetsNeverRead`]); recorded before consuming.
    pub accept_gaps: Vec<GapRange>,
    /// Publish the ledger's head to `quota.checkpoints` as it moves ([`kafka::checkpoints`]).
    pub publish_checkpoints: bool,
    /// Told when a shard's partition is assigned (its shard open) and before it is revoked (its shard still open): a
    /// `node` starts and stops serving the partition. Shards only.
    pub listener: Option<Arc<dyn crate::PartitionListener>>,
    /// Told each assigned partition's lag every [`LAG_EVERY_MS`] (librdkafka's statistics, turned on for it).
    pub lag_listener: Option<Arc<dyn crate::LagListener>>,
    /// Consume the partitions this names, by assignment, without joining the group (a node's standby shards). Shards
    /// only.
    pub standing: Option<Arc<dyn crate::Standing>>,
}

/// How often an ingest with [`KafkaIngestSettings::standing`] asks which partitions to hold.
pub const STANDING_ASK_MS: u64 = 500;

/// How often a [`KafkaIngestSettings::lag_listener`] is told the lag (`statistics.interval.ms`).
pub const LAG_EVERY_MS: u64 = 1_000;

/// The consumer group of a ledger that is given none: its own, named after its id, so that two ledgers consuming
/// the same brokers never split the partitions between them (each would then hold a part of the events, and both
/// would look complete).
pub fn default_group(ledger_id: &str) -> String {
    format!("quota-ledger-{ledger_id}")
}

/// The consumer group of a directory of shards given none: named after the directory's real path (created if need
/// be), so that two directories on one machine never split the partitions between them, and one directory gets the
/// same group at every start.
pub fn default_shards_group(dir: &std::path::Path) -> std::io::Result<String> {
    use sha2::Digest;
    std::fs::create_dir_all(dir)?;
    let real = std::fs::canonicalize(dir)?;
    let digest = sha2::Sha256::digest(real.as_os_str().as_encoded_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("quota-ledger-shards-{hex}"))
}

impl KafkaIngestSettings {
    /// Consuming contract §2's six input topics from `brokers` in group `group`, running on, with the default batches.
    pub fn new(brokers: impl Into<String>, group: impl Into<String>) -> KafkaIngestSettings {
        KafkaIngestSettings {
            brokers: brokers.into(),
            group: group.into(),
            topics: Topics::defaults(),
            until_caught_up: false,
            batch: BatchBounds::kafka(),
            batch_wait_ms: BATCH_WAIT_MS,
            overrides: Vec::new(),
            accept_gaps: Vec::new(),
            publish_checkpoints: true,
            listener: None,
            lag_listener: None,
            standing: None,
        }
    }
}

/// Ingest stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KafkaIngestError {
    /// librdkafka refused the consumer's configuration (a bad `-X` setting, say).
    #[error("cannot create the Kafka consumer for {brokers}")]
    Consumer {
        /// `bootstrap.servers`.
        brokers: String,
        /// librdkafka's reason.
        source: KafkaError,
    },
    /// Subscribing to the topics failed.
    #[error("cannot subscribe to {topics}")]
    Subscribe {
        /// The topics, comma-separated.
        topics: String,
        /// librdkafka's reason.
        source: KafkaError,
    },
    /// The consumer failed for a reason librdkafka does not ride out.
    #[error("Kafka consumer failed")]
    Consume(#[source] KafkaError),
    /// The partitions a standby holds could not be assigned or unassigned.
    #[error("cannot change the partitions the standby consumes")]
    Standing(#[source] KafkaError),
    /// The brokers answer but lack subscribed topics.
    #[error("{}", kafka::topics::missing_topics_message(missing, brokers))]
    MissingTopics {
        /// The topics the brokers do not have.
        missing: BTreeSet<String>,
        /// `bootstrap.servers`.
        brokers: String,
    },
    /// With `until_caught_up`: the brokers stayed away for [`BROKERS_WAIT_MS`].
    #[error("the brokers at {brokers} did not answer for {waited_ms} ms: {last}")]
    Unreachable {
        /// `bootstrap.servers`.
        brokers: String,
        /// How long ingest waited.
        waited_ms: u64,
        /// The last reason librdkafka gave.
        last: String,
    },
    /// With `until_caught_up`: the group assigned no partition for [`ASSIGNMENT_WAIT_MS`].
    #[error(
        "no partition of {topics} was assigned to group {group} within {waited_ms} ms, although the brokers at \
         {brokers} have the topics: other members of the group may hold every partition (a group has at most as \
         many busy members as its topics have partitions); not assigned: {partitions}"
    )]
    NoAssignment {
        /// The topics, comma-separated.
        topics: String,
        /// `group.id`.
        group: String,
        /// `bootstrap.servers`.
        brokers: String,
        /// How long ingest waited.
        waited_ms: u64,
        /// The partitions, as `topic[partition]`, comma-separated.
        partitions: String,
    },
    /// With `until_caught_up`: partitions other members of the group hold are behind, so the ledger is not caught
    /// up although ingest read everything it was given.
    #[error(
        "the ledger did not reach the end of {}: group {group} assigned them to other members (still so after \
         {waited_ms} ms); the ledger holds what it was given, which is not every partition. Give each ledger its own \
         group (the default, derived from the ledger id) or stop the other members",
        describe_behind(behind)
    )]
    NotAssigned {
        /// `group.id`.
        group: String,
        /// The partitions not assigned whose end the ledger has not reached.
        behind: Vec<Behind>,
        /// How long ingest waited for them.
        waited_ms: u64,
    },
    /// Offsets the ledger never read are gone from the brokers (or below a topic recreated under its offsets).
    #[error("{}", describe_missing(missing))]
    OffsetsNeverRead {
        /// Each partition's missing range, with what the ledger and the brokers hold.
        missing: Vec<MissingOffsets>,
    },
    /// An `--accept-gap` that is not what is missing.
    #[error(
        "gap {asked} not accepted: {}",
        match missing {
            Some(missing) => format!("{missing}; --accept-gap takes exactly the range ingest names"),
            None => format!(
                "nothing is missing in {}[{}] (the ledger's next offset is {next}; the brokers hold offsets {low} to {})",
                asked.topic, asked.partition, high - 1
            ),
        }
    )]
    GapNotMissing {
        /// The range asked for.
        asked: GapRange,
        /// What is missing in that partition, if anything (boxed: the error stays small on the happy path).
        missing: Option<Box<MissingOffsets>>,
        /// The ledger's next offset of the partition.
        next: i64,
        /// The partition's first offset on the brokers.
        low: i64,
        /// The partition's end on the brokers.
        high: i64,
    },
    /// The ledger refused the accepted gap.
    #[error("recording the accepted gap failed")]
    Gap(#[from] ledger::GapError),
    /// With `until_caught_up`: a partition's high watermark could not be read.
    #[error("cannot read the high watermark of {topic}[{partition}]")]
    Watermark {
        /// The partition's topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// librdkafka's reason.
        source: KafkaError,
    },
    /// The ledger refused a batch; what was appended before stays appended.
    #[error("ledger append failed")]
    Append(#[from] AppendError),
    /// The ledger's offsets could not be read.
    #[error("cannot read the ledger's offsets")]
    Offsets(#[from] ledger::ReadError),
    /// The input topics do not share one partition count, which shards need (contract §9.4).
    #[error("cannot ingest into shards from {brokers}")]
    PartitionCount {
        /// `bootstrap.servers`.
        brokers: String,
        /// Which topics have which count, or why none was read.
        source: PartitionCountError,
    },
    /// A shard's writer failed, or a shard could not be opened or closed on a rebalance (boxed: the error stays
    /// small on the happy path).
    #[error(transparent)]
    Shard(Box<ShardWriterError>),
    /// A shard open for writing could not be read for its accepted gaps.
    #[error("cannot read the accepted gaps of shard {partition}")]
    ShardGaps {
        /// The partition.
        partition: u32,
        /// Why.
        source: ledger::OpenError,
    },
}

impl From<ShardWriterError> for KafkaIngestError {
    fn from(error: ShardWriterError) -> KafkaIngestError {
        KafkaIngestError::Shard(Box::new(error))
    }
}

/// Offsets of one partition the ledger never read and never will, as ingest found them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingOffsets {
    /// The range: what `--accept-gap` takes.
    pub range: GapRange,
    /// The ledger's next offset of the partition (0 when it never read it).
    pub next: i64,
    /// The partition's first offset on the brokers.
    pub low: i64,
    /// The partition's end (its high watermark) on the brokers.
    pub high: i64,
}

impl MissingOffsets {
    /// What is missing where the ledger is `next` and the brokers hold `low..high`: the offsets from `next` up to
    /// `low` (removed before they were read), or, when the partition ends below `next` (a topic deleted and
    /// recreated), every offset of it below `next` (the new topic's, which the ledger's offset has passed already).
    pub fn find(topic: &str, partition: i32, next: i64, low: i64, high: i64) -> Option<MissingOffsets> {
        let (from_offset, to_offset) = if next < low {
            (next, low - 1)
        } else if next > high {
            (low, next - 1)
        } else {
            return None;
        };
        let range = GapRange { topic: topic.to_string(), partition, from_offset, to_offset };
        Some(MissingOffsets { range, next, low, high })
    }
}

impl std::fmt::Display for MissingOffsets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let GapRange { topic, partition, from_offset, to_offset } = &self.range;
        if self.next < self.low {
            write!(
                f,
                "{topic}[{partition}] offsets {from_offset} to {to_offset} were never read: the ledger's next offset \
                 is {}, but the brokers now start the partition at {} (messages removed by retention or deleted \
                 before ingest read them)",
                self.next, self.low
            )
        } else {
            write!(
                f,
                "{topic}[{partition}] offsets {from_offset} to {to_offset} will never be read: the ledger's next \
                 offset is {}, but the partition now ends at {} (the topic was deleted and recreated, or the brokers \
                 lost messages), so its offsets below {} are not those the ledger read",
                self.next, self.high, self.next
            )
        }
    }
}

fn describe_missing(missing: &[MissingOffsets]) -> String {
    let lines: Vec<String> = missing.iter().map(|m| m.to_string()).collect();
    let accept: Vec<String> = missing.iter().map(|m| format!("--accept-gap {}", m.range)).collect();
    format!(
        "offsets the ledger never read: {}. Nothing of them can be recorded. Find the messages elsewhere if you can \
         (a backup of the topic, the producer), then `ingest {}` records them as lost and goes on; the billing \
         export of every period open now names them (column gaps)",
        lines.join("; "),
        accept.join(" ")
    )
}

/// A partition this ingest was not assigned, whose end the ledger has not reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Behind {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The ledger's next offset of it (0 when it never read it).
    pub next_offset: i64,
    /// Its end on the brokers (the high watermark).
    pub end: i64,
}

/// A watermark request that failed: the partition asked for, and librdkafka's reason.
type WatermarkFailure = (String, i32, KafkaError);

fn describe_behind(behind: &[Behind]) -> String {
    let parts: Vec<String> = behind
        .iter()
        .map(|b| format!("{}[{}] (next offset {}, end {})", b.topic, b.partition, b.next_offset, b.end))
        .collect();
    parts.join(", ")
}

/// What a consumer's error means: `Ok` with what to tell the user when librdkafka rides it out ([`transient`]),
/// or why ingest stops. A subscribed topic the brokers lack is named: librdkafka says "Unknown topic or
/// partition" without its name.
fn consume_error(
    consumer: &BaseConsumer<IngestContext>,
    settings: &KafkaIngestSettings,
    error: KafkaError,
) -> Result<String, KafkaIngestError> {
    // Fatal errors (`MessageConsumptionFatal`) and those of a message stop ingest whatever their code.
    let KafkaError::MessageConsumption(code) = error else { return Err(KafkaIngestError::Consume(error)) };
    if code == RDKafkaErrorCode::UnknownTopicOrPartition {
        return match missing_topics(consumer.client(), settings.topics.names()) {
            Some(missing) if !missing.is_empty() => {
                Err(KafkaIngestError::MissingTopics { missing, brokers: settings.brokers.clone() })
            }
            Some(_) => Err(KafkaIngestError::Consume(error)),
            // No broker answered the question: the brokers are away, not the topics.
            None => Ok(code.to_string()),
        };
    }
    if transient(code) { Ok(code.to_string()) } else { Err(KafkaIngestError::Consume(error)) }
}

/// The brokers away, or a partition's leader or the group's coordinator moving: librdkafka reconnects and retries
/// on its own, so ingest waits rather than stops: a broker restart would otherwise stop a running ingest with "All
/// broker connections are down".
fn transient(code: RDKafkaErrorCode) -> bool {
    use RDKafkaErrorCode as C;
    matches!(
        code,
        C::BrokerTransportFailure
            | C::AllBrokersDown
            | C::Resolve
            | C::OperationTimedOut
            | C::RequestTimedOut
            | C::NetworkException
            | C::BrokerNotAvailable
            | C::LeaderNotAvailable
            | C::NotLeaderForPartition
            | C::CoordinatorLoadInProgress
            | C::CoordinatorNotAvailable
            | C::NotCoordinator
    )
}

/// Asks the brokers for the subscribed topics: `true` when they answer and have them all; `false` when none
/// answered, which `waiting` notes; the missing topics' error when some are missing.
fn ask_for_topics(
    consumer: &BaseConsumer<IngestContext>,
    settings: &KafkaIngestSettings,
    waiting: &mut Waiting,
) -> Result<bool, KafkaIngestError> {
    match missing_topics(consumer.client(), settings.topics.names()) {
        None => {
            waiting.saw(&settings.brokers, "no answer to a request for the topics".to_string());
            Ok(false)
        }
        Some(missing) if !missing.is_empty() => {
            Err(KafkaIngestError::MissingTopics { missing, brokers: settings.brokers.clone() })
        }
        Some(_) => Ok(true),
    }
}

/// Ingest waiting for its brokers: since when, why, and what stderr said of it.
#[derive(Debug, Default)]
struct Waiting {
    since: Option<Instant>,
    reason: String,
    said: kafka::Said,
    /// When the brokers were last asked whether they answer again.
    asked: Option<Instant>,
}

impl Waiting {
    /// Whether to ask the brokers again whether they answer: once a second while waiting. A message is no sign
    /// that they do: librdkafka hands out what it fetched before they went away (taken as one, ingest would say
    /// "answer again" there, and "waiting" half a second later).
    fn ask_now(&mut self) -> bool {
        let due = self.since.is_some() && self.asked.is_none_or(|t| t.elapsed() >= Duration::from_millis(ASK_EVERY_MS));
        if due {
            self.asked = Some(Instant::now());
        }
        due
    }

    /// Another sign that the brokers are away; says so on stderr when the wait begins, and once a minute (the
    /// reason itself alternates: librdkafka reports each failed connection, then that all brokers are down).
    fn saw(&mut self, brokers: &str, reason: String) {
        let since = *self.since.get_or_insert_with(Instant::now);
        if self.said.again(brokers) {
            let so_far = match since.elapsed().as_secs() {
                0 => String::new(),
                seconds => format!(" ({seconds} s so far)"),
            };
            tracing::warn!(
                "ingest: waiting for the brokers at {brokers}{so_far}: {reason}; librdkafka reconnects on its own"
            );
        }
        self.reason = reason;
    }

    /// The brokers answered.
    fn over(&mut self, brokers: &str) {
        if let Some(since) = self.since.take()
            && self.said.over()
        {
            tracing::info!(
                "ingest: the brokers at {brokers} answer again, after {:.1} s",
                since.elapsed().as_secs_f64()
            );
        }
    }

    /// Gives up once the brokers have been away for [`BROKERS_WAIT_MS`].
    fn give_up(&self, brokers: &str) -> Result<(), KafkaIngestError> {
        match self.since {
            Some(since) if since.elapsed() >= Duration::from_millis(BROKERS_WAIT_MS) => {
                Err(KafkaIngestError::Unreachable {
                    brokers: brokers.to_string(),
                    waited_ms: BROKERS_WAIT_MS,
                    last: self.reason.clone(),
                })
            }
            _ => Ok(()),
        }
    }
}

/// Progress of a running ingest, for the display.
#[derive(Debug, Clone, Default, Serialize)]
pub struct KafkaIngestProgress {
    /// Messages consumed.
    pub messages: u64,
    /// Events recorded as new.
    pub recorded: u64,
    /// Exact duplicates of events recorded before.
    pub duplicates: u64,
    /// Conflicting duplicates: kept for audit, never counted.
    pub conflicts: u64,
    /// Messages quarantined (they failed to decode or validate).
    pub quarantined: u64,
    /// Messages quarantined, by reason code (`unknown_fingerprint`, `malformed_body`, ...), as read.
    pub quarantined_by_reason: BTreeMap<String, u64>,
    /// Ledger appends.
    pub batches: u64,
    /// The ledger's watermark after the last append; with shards, the sum of the shards' watermarks (their entries).
    pub watermark: u64,
    /// Times a partition's next message was past the offset expected (the seek position or the previous
    /// message plus one). Legitimate on compacted or transactional topics; otherwise the broker skipped
    /// messages, which the ledger cannot record.
    pub offset_gaps: u64,
    /// Times ingest left its group because an append outlasted `max.poll.interval.ms`, and rejoined.
    pub rejoins: u64,
    /// Events read in another tenant's partition and forwarded to their tenant's (shards only, contract §9.4).
    pub forwarded: u64,
    /// Plan defaults (tenant `*`) a producer sent to one partition, recorded and forwarded to every other partition
    /// (shards only, contract §9.4).
    pub plan_defaults_forwarded: u64,
    /// Per assigned partition: `(topic, partition)` -> messages behind the high watermark, when known.
    #[serde(skip)]
    pub lag: BTreeMap<(String, i32), i64>,
}

/// What the rebalance callback and the loop share.
#[derive(Debug, Default)]
struct Shared {
    /// Next offset per partition as committed in the ledger (the loop updates it after each append).
    ledger_offsets: BTreeMap<(String, i32), i64>,
    assigned: BTreeSet<(String, i32)>,
    /// Partitions revoked since the loop last looked: their pending messages are dropped, not appended.
    revoked: BTreeSet<(String, i32)>,
    /// A shard that could not be opened or closed on a rebalance: the loop stops with it.
    shard_failure: Option<ShardWriterError>,
}

/// Seeks every assigned partition to the ledger's offset; with shards, opens shard p when partition p is assigned
/// (its stored offsets are where consuming resumes) and closes it when p is revoked.
struct IngestContext {
    shared: Arc<Mutex<Shared>>,
    writers: Option<Arc<ShardWriters>>,
    listener: Option<Arc<dyn crate::PartitionListener>>,
    lag_listener: Option<Arc<dyn crate::LagListener>>,
}

impl ClientContext for IngestContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        kafka::log_librdkafka("ingest", level, facility, message);
    }

    /// The lag of each assigned partition: its high watermark as the fetcher last saw it, less the ledger's next
    /// offset there (the partition's low watermark when the ledger never read it).
    fn stats(&self, statistics: rdkafka::Statistics) {
        let Some(listener) = &self.lag_listener else { return };
        let shared = self.shared.lock().expect("never poisoned");
        for (topic, stats) in &statistics.topics {
            for (&partition, stats) in &stats.partitions {
                let key = (topic.clone(), partition);
                if partition < 0 || stats.hi_offset < 0 || !shared.assigned.contains(&key) {
                    continue;
                }
                let next = shared.ledger_offsets.get(&key).copied().unwrap_or(stats.lo_offset.max(0));
                listener.lag(topic, partition, stats.hi_offset, next);
            }
        }
    }
}

impl IngestContext {
    /// Opens the shards of `partitions` and notes the offsets they store.
    fn open_shards(&self, shared: &mut Shared, partitions: &[(String, i32)]) {
        let Some(writers) = &self.writers else { return };
        let numbers: BTreeSet<i32> = partitions.iter().map(|(_, partition)| *partition).collect();
        for partition in numbers {
            if let (Some(listener), Ok(partition)) = (&self.listener, u32::try_from(partition)) {
                listener.opening(partition);
            }
            match u32::try_from(partition).map(|p| writers.assign(p)) {
                Ok(Ok(offsets)) => {
                    for offset in offsets {
                        shared.ledger_offsets.insert((offset.topic, offset.partition), offset.next_offset);
                    }
                    if let Some(listener) = &self.listener {
                        listener.assigned(partition as u32);
                    }
                }
                Ok(Err(error)) => {
                    shared.shard_failure.get_or_insert(error);
                }
                Err(_) => tracing::error!("ingest: partition {partition} is negative"),
            }
        }
    }

    /// Closes the shards of `partitions` once what was queued for them is appended.
    fn close_shards(&self, shared: &mut Shared, partitions: &[(String, i32)]) {
        let Some(writers) = &self.writers else { return };
        let numbers: BTreeSet<u32> = partitions.iter().filter_map(|(_, p)| u32::try_from(*p).ok()).collect();
        for partition in numbers {
            if let Some(listener) = &self.listener {
                listener.revoked(partition);
            }
            if let Err(error) = writers.revoke(partition) {
                shared.shard_failure.get_or_insert(error);
            }
            if let Some(listener) = &self.listener {
                listener.closed(partition);
            }
        }
    }

    /// Holds the shards `standing` wants, by assignment: those no longer wanted are closed and unassigned (their
    /// pending messages dropped, as on a revocation), those newly wanted opened and assigned from their stored offsets.
    fn stand(
        &self,
        consumer: &BaseConsumer<Self>,
        standing: &dyn crate::Standing,
        topics: &Topics,
        partitions: u32,
    ) -> Result<(), KafkaIngestError> {
        let wanted: BTreeSet<u32> = standing.wanted().into_iter().filter(|p| *p < partitions).collect();
        let mut shared = self.shared.lock().expect("never poisoned");
        let held: BTreeSet<u32> = shared.assigned.iter().filter_map(|(_, p)| u32::try_from(*p).ok()).collect();
        if wanted == held {
            return Ok(());
        }
        let of = |numbers: &BTreeSet<u32>| -> Vec<(String, i32)> {
            numbers
                .iter()
                .flat_map(|p| topics.names().into_iter().map(move |topic| (topic.to_string(), *p as i32)))
                .collect()
        };
        let gone = of(&held.difference(&wanted).copied().collect());
        if !gone.is_empty() {
            for key in &gone {
                shared.assigned.remove(key);
                shared.revoked.insert(key.clone());
            }
            self.close_shards(&mut shared, &gone);
            consumer.incremental_unassign(&list_of(&gone, |_| Offset::Invalid)).map_err(KafkaIngestError::Standing)?;
            tracing::info!("ingest: no longer standing by for {}", list(&gone));
        }
        let new = of(&wanted.difference(&held).copied().collect());
        if !new.is_empty() {
            self.open_shards(&mut shared, &new);
            let offsets = &shared.ledger_offsets;
            let assignment = list_of(&new, |key| Offset::Offset(offsets.get(key).copied().unwrap_or(0)));
            consumer.incremental_assign(&assignment).map_err(KafkaIngestError::Standing)?;
            tracing::info!("ingest: standing by for {}", list(&new));
            shared.assigned.extend(new);
        }
        let holding = shared.assigned.iter().filter_map(|(_, p)| u32::try_from(*p).ok()).collect();
        drop(shared);
        standing.holding(&holding);
        Ok(())
    }
}

/// `partitions` as a librdkafka list, each at `offset_of` it.
fn list_of(partitions: &[(String, i32)], offset_of: impl Fn(&(String, i32)) -> Offset) -> TopicPartitionList {
    let mut list = TopicPartitionList::new();
    for key in partitions {
        // Only an offset librdkafka does not take fails, and every one given here is one it takes.
        let _ = list.add_partition_offset(&key.0, key.1, offset_of(key));
    }
    list
}

impl ConsumerContext for IngestContext {
    fn rebalance(&self, consumer: &BaseConsumer<Self>, err: RDKafkaRespErr, tpl: &mut TopicPartitionList) {
        let mut shared = self.shared.lock().expect("the ingest state is never poisoned: no code panics holding it");
        let partitions: Vec<(String, i32)> =
            tpl.elements().iter().map(|e| (e.topic().to_string(), e.partition())).collect();
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                self.open_shards(&mut shared, &partitions);
                for (topic, partition) in &partitions {
                    // A partition the ledger never read starts at offset 0, not at "the beginning": one whose first
                    // messages are gone is then named as a gap (auto.offset.reset is "error"), not skipped.
                    let next = shared.ledger_offsets.get(&(topic.clone(), *partition)).copied().unwrap_or(0);
                    let offset = Offset::Offset(next);
                    let _ = tpl.set_partition_offset(topic, *partition, offset);
                }
                if let Err(e) = consumer.assign(tpl) {
                    tracing::error!("ingest: assigning {partitions:?} failed: {e}");
                }
                tracing::info!(assigned = %list(&partitions), "ingest: assigned {}", list(&partitions));
                shared.assigned.extend(partitions);
            }
            _ => {
                for key in &partitions {
                    shared.assigned.remove(key);
                    shared.revoked.insert(key.clone());
                }
                // Before the partitions may go to another member: what was queued for their shards is appended,
                // so that the next owner finds its offsets stored.
                self.close_shards(&mut shared, &partitions);
                tracing::info!(revoked = %list(&partitions), "ingest: revoked {}", list(&partitions));
                if let Err(e) = consumer.unassign() {
                    tracing::error!("ingest: unassigning failed: {e}");
                }
            }
        }
    }
}

/// Partitions as `topic[p],topic[q]`.
fn list(partitions: &[(String, i32)]) -> String {
    partitions.iter().map(|(topic, p)| format!("{topic}[{p}]")).collect::<Vec<_>>().join(",")
}

/// Messages waiting for their append, by writer: the one ledger (writer 0), or the shard of their partition.
#[derive(Default)]
struct Gathered {
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
    fn is_empty(&self) -> bool {
        self.by_writer.is_empty()
    }

    fn push(&mut self, writer: u32, message: Consumed) {
        let gathering = self.by_writer.entry(writer).or_default();
        gathering.bytes += raw_len(&message);
        gathering.messages.push(message);
        gathering.since.get_or_insert_with(Instant::now);
    }

    /// The writers whose messages are due: as many as a batch holds, waited for long enough, or the consumer idle.
    fn due(&self, settings: &KafkaIngestSettings, idle: bool) -> Vec<u32> {
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

    fn take(&mut self, writer: u32) -> Vec<Consumed> {
        self.by_writer.remove(&writer).map(|g| g.messages).unwrap_or_default()
    }
}

/// Where appends go: one ledger appended on the consumer's thread, or shards appended by their writers.
enum Target<'a> {
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
    fn writer_of(&self, partition: i32) -> u32 {
        match self {
            Target::Ledger { .. } => 0,
            Target::Shards { .. } => u32::try_from(partition).expect("Kafka partitions are not negative"),
        }
    }

    /// Appends `messages` (the ledger), or queues them for their shard's writer.
    fn append(
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
    fn collect(
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
    fn settle(
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
    fn accepted_gaps(&self) -> Result<Vec<GapRange>, KafkaIngestError> {
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
            Err(error) => tracing::warn!("ingest: cannot read the ledger's head for its last checkpoint: {error}"),
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

fn add_reasons(progress: &mut KafkaIngestProgress, reasons: BTreeMap<String, u64>) {
    for (reason, n) in reasons {
        *progress.quarantined_by_reason.entry(reason).or_insert(0) += n;
    }
}

/// The consumer of a run, its rebalance callback opening and closing `writers`' shards when there are any.
fn make_consumer(
    settings: &KafkaIngestSettings,
    shared: &Arc<Mutex<Shared>>,
    writers: Option<Arc<ShardWriters>>,
) -> Result<BaseConsumer<IngestContext>, KafkaIngestError> {
    let mut config = kafka::config::consumer(&settings.brokers, &settings.group, &settings.overrides);
    if settings.lag_listener.is_some() {
        config.set("statistics.interval.ms", LAG_EVERY_MS.to_string());
    }
    let context = IngestContext {
        shared: shared.clone(),
        writers,
        listener: settings.listener.clone(),
        lag_listener: settings.lag_listener.clone(),
    };
    config
        .create_with_context(context)
        .map_err(|source| KafkaIngestError::Consumer { brokers: settings.brokers.clone(), source })
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

/// Records the accepted gaps of `settings` in the shards of their partitions, each opened for the moment.
fn accept_shard_gaps(
    shards: &ShardDir,
    partitions: u32,
    consumer: &BaseConsumer<IngestContext>,
    settings: &KafkaIngestSettings,
) -> Result<(), KafkaIngestError> {
    let mut by_shard: BTreeMap<u32, Vec<GapRange>> = BTreeMap::new();
    for gap in &settings.accept_gaps {
        let partition = u32::try_from(gap.partition).ok().filter(|p| *p < partitions).ok_or_else(|| {
            KafkaIngestError::GapNotMissing { asked: gap.clone(), missing: None, next: 0, low: 0, high: 0 }
        })?;
        by_shard.entry(partition).or_default().push(gap.clone());
    }
    for (partition, gaps) in by_shard {
        let shard = Shard { partition, partitions };
        let shard_error = |source| ShardWriterError::Open { partition, source };
        let directory = |source| shard_error(ShardError::Directory { dir: shards.dir().to_path_buf(), source });
        std::fs::create_dir_all(shards.dir()).map_err(directory)?;
        let _lock = ProcessLock::acquire(&shards.path_of(partition), "ingest")
            .map_err(|source| ShardWriterError::Lock { partition, source })?;
        let mut ledger = shards.open(shard).map_err(shard_error)?;
        accept_gaps(&mut ledger, consumer, &gaps)?;
    }
    Ok(())
}

/// The checkpoint publisher of this run, when asked for; one that cannot be made is said, and ingest goes on.
fn start_checkpoints(ledger: &Ledger, settings: &KafkaIngestSettings) -> Option<CheckpointPublisher> {
    if !settings.publish_checkpoints {
        return None;
    }
    let started = ledger.ledger_id().map_err(|e| e.to_string()).and_then(|id| {
        CheckpointPublisher::new("ingest", &settings.brokers, &settings.overrides, &id).map_err(|e| e.to_string())
    });
    started.map_err(|error| tracing::warn!("ingest: no checkpoints will be published: {error}")).ok()
}

/// Offers the ledger's head to the checkpoint publisher, if there is one.
fn offer_head(checkpoints: &mut Option<CheckpointPublisher>, head: &ledger::Head) {
    if let Some(checkpoints) = checkpoints.as_mut() {
        checkpoints.offer(head.seq, &head.hash_hex());
    }
}

/// Records each gap of `gaps` (`--accept-gap`) that is exactly what is missing in its partition now (the ledger's
/// next offset against what the brokers hold); a gap recorded already is left as it is. Anything else is refused
/// before anything is recorded or consumed.
fn accept_gaps(
    ledger: &mut Ledger,
    consumer: &BaseConsumer<IngestContext>,
    gaps: &[GapRange],
) -> Result<(), KafkaIngestError> {
    let recorded: Vec<GapRange> = ledger.offset_gaps()?.iter().map(|g| g.range()).collect();
    let offsets = ledger.offsets()?;
    for asked in gaps {
        let (topic, partition) = (asked.topic.as_str(), asked.partition);
        let next = offsets.iter().find(|o| o.topic == topic && o.partition == partition).map_or(0, |o| o.next_offset);
        let (low, high) = consumer
            .fetch_watermarks(topic, partition, Duration::from_millis(WATERMARK_TIMEOUT_MS))
            .map_err(|source| KafkaIngestError::Watermark { topic: topic.to_string(), partition, source })?;
        let missing = MissingOffsets::find(topic, partition, next, low, high);
        match &missing {
            _ if recorded.contains(asked) => {}
            Some(missing) if missing.range == *asked => {
                ledger.accept_gap(asked)?;
                tracing::warn!(
                    "ingest: recorded {} offsets of {topic}[{partition}] as never read (gap {asked}): {missing}",
                    asked.len()
                );
            }
            _ => {
                let missing = missing.map(Box::new);
                return Err(KafkaIngestError::GapNotMissing { asked: asked.clone(), missing, next, low, high });
            }
        }
    }
    Ok(())
}

/// The consuming loop of [`ingest_kafka`] and [`ingest_kafka_shards`]; `watermark` is the ledger's at the start.
fn consume(
    mut target: Target<'_>,
    watermark: u64,
    consumer: &BaseConsumer<IngestContext>,
    settings: &KafkaIngestSettings,
    shared: &Mutex<Shared>,
    stop: &AtomicBool,
    mut on_progress: impl FnMut(&KafkaIngestProgress),
) -> Result<KafkaIngestProgress, KafkaIngestError> {
    let standing = match (&settings.standing, &target) {
        (Some(standing), Target::Shards { writers, .. }) => Some((Arc::clone(standing), writers.partitions())),
        _ => None,
    };
    if standing.is_none() {
        let names = settings.topics.names();
        consumer
            .subscribe(&names)
            .map_err(|source| KafkaIngestError::Subscribe { topics: settings.topics.to_string(), source })?;
    }
    let mut stood: Option<Instant> = None;
    let mut progress = KafkaIngestProgress { watermark, ..KafkaIngestProgress::default() };
    let mut gathered = Gathered::default();
    let mut expected_offsets: BTreeMap<(String, i32), i64> = BTreeMap::new();
    let mut waiting = Waiting::default();
    let mut progress_until = UntilCaughtUp::new();
    // Partitions whose accepted gap runs past their end: asked again from the ledger's offset now and then.
    let mut past_end: BTreeMap<(String, i32), Instant> = BTreeMap::new();
    while !stop.load(Ordering::Relaxed) {
        let forwarded = (progress.forwarded, progress.plan_defaults_forwarded);
        if target.collect(consumer, shared, &mut progress)? {
            on_progress(&progress);
        }
        if (progress.forwarded, progress.plan_defaults_forwarded) != forwarded {
            // Copies now at the end of their tenant's partitions: caught up includes them.
            progress_until.forget_targets();
        }
        if let Some((standing, partitions)) = &standing
            && stood.is_none_or(|at| at.elapsed() >= Duration::from_millis(STANDING_ASK_MS))
        {
            consumer.context().stand(consumer, standing.as_ref(), &settings.topics, *partitions)?;
            stood = Some(Instant::now());
        }
        let polled = consumer.poll(Duration::from_millis(POLL_TIMEOUT_MS));
        let idle = polled.is_none();
        match polled {
            Some(Ok(message)) => {
                check_gap(shared, &mut expected_offsets, &message, &mut progress);
                gathered.push(target.writer_of(message.partition()), Consumed::of(&message));
                progress.messages += 1;
            }
            // An append (a stalling disk, a large batch; or, with -X max.poll.interval.ms below the ledger's 10 s
            // busy timeout, another writer holding the ledger) kept the loop from polling for longer than
            // max.poll.interval.ms: librdkafka left the group, which gave the partitions to other
            // members. Polling again rejoins, and the assignment seeks to the ledger's offsets, so nothing is
            // lost or recorded twice: no reason to stop ingest.
            Some(Err(KafkaError::MessageConsumption(RDKafkaErrorCode::PollExceeded))) => {
                tracing::warn!(
                    "ingest: an append kept the consumer from polling for longer than max.poll.interval.ms, so it \
                     left group {}; rejoining, each partition resumes at the ledger's offset",
                    settings.group
                );
                progress.rejoins += 1;
            }
            // A partition's next offset is not on the brokers (auto.offset.reset is "error"): what is pending is
            // appended, then the partitions are asked which it is.
            Some(Err(KafkaError::MessageConsumption(RDKafkaErrorCode::AutoOffsetReset))) => {
                drop_revoked(shared, &mut gathered);
                for writer in gathered.by_writer.keys().copied().collect::<Vec<_>>() {
                    let messages = gathered.take(writer);
                    target.append(writer, messages, consumer, shared, settings, &mut progress)?;
                }
                target.settle(consumer, shared, &mut progress)?;
                expected_offsets.clear();
                let accepted = target.accepted_gaps()?;
                offsets_out_of_range(&accepted, consumer, shared, &mut past_end)?;
            }
            Some(Err(error)) => {
                let reason = consume_error(consumer, settings, error)?;
                waiting.saw(&settings.brokers, reason);
            }
            None => {}
        }
        if drop_revoked(shared, &mut gathered) {
            expected_offsets.clear();
        }
        let due = gathered.due(settings, idle);
        for writer in &due {
            let messages = gathered.take(*writer);
            target.append(*writer, messages, consumer, shared, settings, &mut progress)?;
        }
        if !due.is_empty() && matches!(target, Target::Ledger { .. }) {
            on_progress(&progress);
        }
        ask_past_end_again(consumer, shared, &mut past_end);
        if waiting.ask_now() && ask_for_topics(consumer, settings, &mut waiting)? {
            waiting.over(&settings.brokers);
        }
        if !settings.until_caught_up {
            continue;
        }
        // A nightly job waits for the brokers only so long.
        waiting.give_up(&settings.brokers)?;
        if !gathered.is_empty() || waiting.since.is_some() {
            continue;
        }
        if progress_until.step(consumer, settings, shared, &mut waiting, &mut progress, idle)? {
            on_progress(&progress);
            break;
        }
    }
    drop_revoked(shared, &mut gathered);
    for writer in gathered.by_writer.keys().copied().collect::<Vec<_>>() {
        let messages = gathered.take(writer);
        target.append(writer, messages, consumer, shared, settings, &mut progress)?;
    }
    target.settle(consumer, shared, &mut progress)?;
    Ok(progress)
}

/// After librdkafka said a partition's offset is out of range: finds which, from each assigned partition's ends and
/// the ledger's next offset. A range the operator accepted already (a recreated topic, still shorter than the
/// ledger's offset) is asked again later; any other stops ingest, named. When none is out of range any more, every
/// assigned partition is asked again from the ledger's offset (librdkafka stops fetching the one that failed).
fn offsets_out_of_range(
    accepted: &[GapRange],
    consumer: &BaseConsumer<IngestContext>,
    shared: &Mutex<Shared>,
    past_end: &mut BTreeMap<(String, i32), Instant>,
) -> Result<(), KafkaIngestError> {
    let (assigned, offsets) = {
        let shared = shared.lock().expect("never poisoned");
        (shared.assigned.iter().cloned().collect::<Vec<_>>(), shared.ledger_offsets.clone())
    };
    let mut missing = Vec::new();
    for (key, ends) in assigned.iter().zip(fetch_all_watermarks(consumer, &assigned)) {
        let (low, high) =
            ends.map_err(|source| KafkaIngestError::Watermark { topic: key.0.clone(), partition: key.1, source })?;
        let next = offsets.get(key).copied().unwrap_or(0);
        match MissingOffsets::find(&key.0, key.1, next, low, high) {
            Some(found) if accepted.iter().any(|a| a.covers(&found.range)) => {
                past_end.entry(key.clone()).or_insert_with(Instant::now);
            }
            Some(found) => missing.push(found),
            None => {}
        }
    }
    if !missing.is_empty() {
        return Err(KafkaIngestError::OffsetsNeverRead { missing });
    }
    if past_end.is_empty() {
        tracing::warn!(
            "ingest: the brokers said an offset was out of range, but every partition's is in range now; asking again"
        );
        for (topic, partition) in &assigned {
            let next = offsets.get(&(topic.clone(), *partition)).copied().unwrap_or(0);
            seek(consumer, topic, *partition, next);
        }
    }
    Ok(())
}

/// Asks again, from the ledger's offset, each partition waiting for its recreated topic to reach that offset, every
/// [`PAST_END_ASK_MS`]. Out of range again, it comes back to [`offsets_out_of_range`].
fn ask_past_end_again(
    consumer: &BaseConsumer<IngestContext>,
    shared: &Mutex<Shared>,
    past_end: &mut BTreeMap<(String, i32), Instant>,
) {
    let due: Vec<(String, i32)> = past_end
        .iter()
        .filter(|(_, since)| since.elapsed() >= Duration::from_millis(PAST_END_ASK_MS))
        .map(|(key, _)| key.clone())
        .collect();
    for key in due {
        past_end.remove(&key);
        let (assigned, next) = {
            let shared = shared.lock().expect("never poisoned");
            (shared.assigned.contains(&key), shared.ledger_offsets.get(&key).copied().unwrap_or(0))
        };
        if assigned {
            seek(consumer, &key.0, key.1, next);
        }
    }
}

fn seek(consumer: &BaseConsumer<IngestContext>, topic: &str, partition: i32, next: i64) {
    if let Err(error) = consumer.seek(topic, partition, Offset::Offset(next), Duration::from_millis(1_000)) {
        tracing::warn!("ingest: cannot ask {topic}[{partition}] again from offset {next}: {error}");
    }
}

/// The state of `--until-caught-up` between turns of the loop.
struct UntilCaughtUp {
    /// The high watermark each partition had when first asked is the end of this run's work; producers that keep
    /// producing move the watermark on, and a job that chased it would never end.
    targets: BTreeMap<(String, i32), i64>,
    last_asked: Option<Instant>,
    /// Since when no partition is assigned: from the start, and again whenever a rebalance revokes them all.
    unassigned_since: Instant,
    /// Since when the assigned partitions are caught up but others, held by other members, are behind.
    others_behind_since: Option<Instant>,
}

impl UntilCaughtUp {
    fn new() -> UntilCaughtUp {
        UntilCaughtUp {
            targets: BTreeMap::new(),
            last_asked: None,
            unassigned_since: Instant::now(),
            others_behind_since: None,
        }
    }

    /// One look, when due: `true` once the ledger reached the end of every partition. While the brokers are away,
    /// asking for the topics says when they answer again; a watermark request would block for its whole timeout,
    /// and a SIGTERM with it. Asked when the consumer is idle, and on topics that are never idle (producers at
    /// work) after an append, at most every `CAUGHT_UP_ASK_MS`.
    fn step(
        &mut self,
        consumer: &BaseConsumer<IngestContext>,
        settings: &KafkaIngestSettings,
        shared: &Mutex<Shared>,
        waiting: &mut Waiting,
        progress: &mut KafkaIngestProgress,
        idle: bool,
    ) -> Result<bool, KafkaIngestError> {
        let due = self.last_asked.is_none_or(|t| t.elapsed() >= Duration::from_millis(CAUGHT_UP_ASK_MS));
        if !(idle || due) {
            return Ok(false);
        }
        self.last_asked = Some(Instant::now());
        match caught_up(consumer, shared, &mut self.targets, progress) {
            Ok(Some(true)) => match behind_elsewhere(consumer, settings, shared) {
                Ok(behind) if behind.is_empty() => return Ok(true),
                Ok(behind) => {
                    let since = *self.others_behind_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= Duration::from_millis(UNASSIGNED_WAIT_MS) {
                        let waited_ms = UNASSIGNED_WAIT_MS;
                        return Err(KafkaIngestError::NotAssigned { group: settings.group.clone(), behind, waited_ms });
                    }
                }
                Err(error) => self.watermark_error(settings, waiting, error)?,
            },
            Ok(Some(false) | None) => self.others_behind_since = None,
            Err(error) => self.watermark_error(settings, waiting, error)?,
        }
        if !shared.lock().expect("never poisoned").assigned.is_empty() {
            self.unassigned_since = Instant::now();
        } else if waiting.since.is_none()
            && self.unassigned_since.elapsed() > Duration::from_millis(ASSIGNMENT_WAIT_MS)
            // Nothing assigned, and nothing said why: the brokers away, a topic missing, or the partitions held.
            && ask_for_topics(consumer, settings, waiting)?
        {
            let partitions = match behind_elsewhere(consumer, settings, shared) {
                Ok(behind) => describe_behind(&behind),
                Err((topic, partition, _)) => format!("(the end of {topic}[{partition}] did not read)"),
            };
            return Err(KafkaIngestError::NoAssignment {
                topics: settings.topics.to_string(),
                group: settings.group.clone(),
                brokers: settings.brokers.clone(),
                waited_ms: ASSIGNMENT_WAIT_MS,
                partitions,
            });
        }
        Ok(false)
    }

    /// Asks the high watermarks again at the next look: events were forwarded past the ones asked for.
    fn forget_targets(&mut self) {
        self.targets.clear();
        self.last_asked = None;
    }

    /// A watermark that did not read: waited for when the brokers are away, the end of ingest otherwise.
    fn watermark_error(
        &self,
        settings: &KafkaIngestSettings,
        waiting: &mut Waiting,
        (topic, partition, source): WatermarkFailure,
    ) -> Result<(), KafkaIngestError> {
        match source.rdkafka_error_code().filter(|code| transient(*code)) {
            Some(code) => {
                waiting.saw(&settings.brokers, format!("the high watermark of {topic}[{partition}]: {code}"));
                Ok(())
            }
            None => Err(KafkaIngestError::Watermark { topic, partition, source }),
        }
    }
}

/// The partitions of the subscribed topics not assigned to this ingest whose end the ledger has not reached.
fn behind_elsewhere(
    consumer: &BaseConsumer<IngestContext>,
    settings: &KafkaIngestSettings,
    shared: &Mutex<Shared>,
) -> Result<Vec<Behind>, WatermarkFailure> {
    let timeout = Duration::from_millis(WATERMARK_TIMEOUT_MS);
    let metadata = consumer.fetch_metadata(None, timeout).map_err(|e| (settings.topics.to_string(), -1, e))?;
    let (assigned, offsets) = {
        let shared = shared.lock().expect("never poisoned");
        (shared.assigned.clone(), shared.ledger_offsets.clone())
    };
    let others: Vec<(String, i32)> = metadata
        .topics()
        .iter()
        .filter(|t| settings.topics.event_type(t.name()).is_some())
        .flat_map(|t| t.partitions().iter().map(|p| (t.name().to_string(), p.id())))
        .filter(|key| !assigned.contains(key))
        .collect();
    let mut behind = Vec::new();
    for (key, ends) in others.iter().zip(fetch_all_watermarks(consumer, &others)) {
        let (_, high) = ends.map_err(|error| (key.0.clone(), key.1, error))?;
        let next = offsets.get(key).copied().unwrap_or(0);
        if next < high {
            behind.push(Behind { topic: key.0.clone(), partition: key.1, next_offset: next, end: high });
        }
    }
    Ok(behind)
}

fn refresh_offsets(ledger: &Ledger, shared: &Mutex<Shared>) -> Result<(), ledger::ReadError> {
    let offsets = ledger.offsets()?;
    let mut shared = shared.lock().expect("never poisoned");
    for offset in offsets {
        shared.ledger_offsets.insert((offset.topic, offset.partition), offset.next_offset);
    }
    Ok(())
}

/// The bytes of a gathered message as received.
fn raw_len(message: &Consumed) -> usize {
    message.payload.len()
}

/// Counts and reports a message whose offset is past the one expected in its partition: the ledger's offset
/// for the first message after an assignment, the previous offset plus one after that.
fn check_gap(
    shared: &Mutex<Shared>,
    expected: &mut BTreeMap<(String, i32), i64>,
    message: &rdkafka::message::BorrowedMessage<'_>,
    progress: &mut KafkaIngestProgress,
) {
    let key = (message.topic().to_string(), message.partition());
    let want = match expected.get(&key) {
        Some(next) => Some(*next),
        None => shared.lock().expect("never poisoned").ledger_offsets.get(&key).copied(),
    };
    if let Some(want) = want.filter(|w| message.offset() > *w) {
        progress.offset_gaps += 1;
        tracing::warn!(
            "ingest: warning: {}[{}] jumped from offset {want} to {}: the broker returned no message for {} \
             offsets (expected only on compacted or transactional topics)",
            key.0,
            key.1,
            message.offset(),
            message.offset() - want
        );
    }
    expected.insert(key, message.offset() + 1);
}

/// Drops gathered messages of partitions revoked since the last look: the ledger's offsets do not cover them,
/// so whoever gets the partition reads them again.
/// Returns whether any partition was revoked.
fn drop_revoked(shared: &Mutex<Shared>, gathered: &mut Gathered) -> bool {
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
        tracing::warn!("ingest: committing offsets to Kafka failed (the ledger holds them): {e}");
    }
}

/// Whether every assigned partition's ledger offset has reached its target: the high watermark it had when first
/// asked in this run (`targets`), so that messages produced since do not keep the job running for ever (chasing the
/// current watermark, it would never exit while producers work). `None` with no partition assigned. Records the
/// lag behind the current watermark. A watermark the brokers did not give is the error, with its partition.
///
/// A broker answers the requests of one connection in order, so a request for a watermark waits behind the
/// consumer's long-polling fetch (up to `fetch.wait.max.ms`, 500 ms) on the same connection: asked one partition
/// after another, 15 partitions took 7 s, during which the loop did not poll; 60 would have outlasted
/// `max.poll.interval.ms`. They are asked for every partition at once, which takes one such wait.
fn caught_up(
    consumer: &BaseConsumer<IngestContext>,
    shared: &Mutex<Shared>,
    targets: &mut BTreeMap<(String, i32), i64>,
    progress: &mut KafkaIngestProgress,
) -> Result<Option<bool>, WatermarkFailure> {
    let (assigned, offsets) = {
        let shared = shared.lock().expect("never poisoned");
        (shared.assigned.clone(), shared.ledger_offsets.clone())
    };
    if assigned.is_empty() {
        return Ok(None);
    }
    let position = |key: &(String, i32), low: i64| offsets.get(key).copied().unwrap_or(low);
    let assigned: Vec<(String, i32)> = assigned.into_iter().collect();
    let asked = fetch_all_watermarks(consumer, &assigned);
    let mut all = true;
    progress.lag.clear();
    for (key, asked) in assigned.into_iter().zip(asked) {
        let (low, high) = asked.map_err(|error| (key.0.clone(), key.1, error))?;
        let target = *targets.entry(key.clone()).or_insert(high);
        all &= position(&key, low) >= target.min(high);
        progress.lag.insert(key.clone(), (high - position(&key, low)).max(0));
    }
    Ok(Some(all))
}

/// The (low, high) watermarks of `partitions`, in order, asked all at once (see [`caught_up`]).
fn fetch_all_watermarks(
    consumer: &BaseConsumer<IngestContext>,
    partitions: &[(String, i32)],
) -> Vec<Result<(i64, i64), KafkaError>> {
    let mut asked = Vec::with_capacity(partitions.len());
    for some in partitions.chunks(WATERMARK_REQUESTS_AT_ONCE) {
        std::thread::scope(|scope| {
            let asking: Vec<_> = some
                .iter()
                .map(|(topic, partition)| {
                    scope.spawn(move || {
                        consumer.fetch_watermarks(topic, *partition, Duration::from_millis(WATERMARK_TIMEOUT_MS))
                    })
                })
                .collect();
            asked.extend(asking.into_iter().map(|one| one.join().expect("a watermark request does not panic")));
        });
    }
    asked
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(next: i64, low: i64, high: i64) -> Option<String> {
        MissingOffsets::find("quota.usage", 1, next, low, high).map(|m| m.range.to_string())
    }

    // Proves what is missing, from the ledger's next offset and the partition's ends: nothing while the offset lies
    // within them (at the end included: nothing new yet); the offsets up to the new start when messages were removed
    // before they were read; every offset below the ledger's when the partition ends before it (a recreated topic).
    #[test]
    fn missing_offsets_are_what_the_ledger_can_no_longer_read() {
        assert_eq!(found(3, 0, 10), None);
        assert_eq!(found(10, 0, 10), None, "at the end");
        assert_eq!(found(0, 0, 0), None, "an empty partition");
        assert_eq!(found(3, 5, 12), Some("quota.usage:1:3-4".into()), "removed before read");
        assert_eq!(found(0, 5, 12), Some("quota.usage:1:0-4".into()), "never read, the head expired");
        assert_eq!(found(7, 0, 2), Some("quota.usage:1:0-6".into()), "recreated, shorter");
        assert_eq!(found(7, 0, 0), Some("quota.usage:1:0-6".into()), "recreated, empty");
        let removed = MissingOffsets::find("quota.usage", 1, 3, 5, 12).unwrap();
        assert!(removed.to_string().contains("offsets 3 to 4 were never read"), "{removed}");
        let recreated = MissingOffsets::find("quota.usage", 1, 7, 0, 2).unwrap();
        assert!(recreated.to_string().contains("the partition now ends at 2"), "{recreated}");
    }
}
