//! `--until-caught-up`: whether the ledger reached the end of every partition of every topic, the ends asked of all
//! partitions at once, and when to give up (no partition assigned, or partitions other members hold still behind).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;

use super::brokers::{Waiting, ask_for_topics, transient};
use super::error::{Behind, KafkaIngestError, describe_behind};
use super::progress::KafkaIngestProgress;
use super::rebalance::{IngestContext, Shared};
use super::settings::{ASSIGNMENT_WAIT_MS, KafkaIngestSettings, UNASSIGNED_WAIT_MS};

/// Timeout of the broker requests made for `--until-caught-up` (high watermarks).
pub(super) const WATERMARK_TIMEOUT_MS: u64 = 10_000;

/// How often `--until-caught-up` asks for the watermarks while messages keep arriving (when the consumer goes
/// idle it asks at once).
const CAUGHT_UP_ASK_MS: u64 = 2_000;

/// Watermark requests in flight at once, each from a thread of its own (see `caught_up`).
const WATERMARK_REQUESTS_AT_ONCE: usize = 64;

/// A watermark request that failed: the partition asked for, and librdkafka's reason.
type WatermarkFailure = (String, i32, KafkaError);

/// The state of `--until-caught-up` between turns of the loop.
pub(super) struct UntilCaughtUp {
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
    pub(super) fn new() -> UntilCaughtUp {
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
    pub(super) fn step(
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
    pub(super) fn forget_targets(&mut self) {
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
pub(super) fn fetch_all_watermarks(
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
