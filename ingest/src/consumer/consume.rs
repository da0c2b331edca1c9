//! The consuming loop: each turn takes what the shards' writers appended, polls one message and gathers it, appends
//! the batches that are due, and, with `until_caught_up`, looks whether the ledger reached the end of every partition.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Message};

use crate::consumed::Consumed;
use crate::listeners::Standing;

use super::batch::{Gathered, Target, drop_revoked};
use super::brokers::{Waiting, ask_for_topics, consume_error};
use super::caught_up::UntilCaughtUp;
use super::error::KafkaIngestError;
use super::gaps::{ask_past_end_again, check_gap, offsets_out_of_range};
use super::progress::KafkaIngestProgress;
use super::rebalance::{IngestContext, Shared};
use super::settings::{KafkaIngestSettings, STANDING_ASK_MS};

/// How long one poll of the consumer blocks when no message is ready.
const POLL_TIMEOUT_MS: u64 = 100;

/// The consuming loop of [`super::ingest_kafka`] and [`super::ingest_kafka_shards`]; `watermark` is the ledger's at
/// the start.
pub(super) fn consume(
    target: Target<'_>,
    watermark: u64,
    consumer: &BaseConsumer<IngestContext>,
    settings: &KafkaIngestSettings,
    shared: &Mutex<Shared>,
    stop: &AtomicBool,
    mut on_progress: impl FnMut(&KafkaIngestProgress),
) -> Result<KafkaIngestProgress, KafkaIngestError> {
    let standing = subscribe(&target, consumer, settings)?;
    let mut consuming = Consuming {
        target,
        consumer,
        settings,
        shared,
        standing,
        stood: None,
        progress: KafkaIngestProgress { watermark, ..KafkaIngestProgress::default() },
        gathered: Gathered::default(),
        expected_offsets: BTreeMap::new(),
        waiting: Waiting::default(),
        progress_until: UntilCaughtUp::new(),
        past_end: BTreeMap::new(),
        left: false,
    };
    while !stop.load(Ordering::Relaxed) {
        if consuming.turn(&mut on_progress)? {
            break;
        }
    }
    consuming.flush()?;
    Ok(consuming.progress)
}

/// Subscribes to the topics, unless the partitions are held by assignment ([`KafkaIngestSettings::standing`], with
/// shards): then the standing and the partition count, which the loop asks now and then what to hold.
fn subscribe(
    target: &Target<'_>,
    consumer: &BaseConsumer<IngestContext>,
    settings: &KafkaIngestSettings,
) -> Result<Option<Stand>, KafkaIngestError> {
    let standing = match (&settings.standing, target) {
        (Some(standing), Target::Shards { writers, .. }) => Some((Arc::clone(standing), writers.partitions())),
        _ => None,
    };
    if standing.is_none() {
        let names = settings.topics.names();
        consumer
            .subscribe(&names)
            .map_err(|source| KafkaIngestError::Subscribe { topics: settings.topics.to_string(), source })?;
    }
    Ok(standing)
}

/// A standing whose partitions are held by assignment, and the partition count of the topics.
type Stand = (Arc<dyn Standing>, u32);

/// What the loop keeps between turns.
struct Consuming<'a, 't> {
    target: Target<'t>,
    consumer: &'a BaseConsumer<IngestContext>,
    settings: &'a KafkaIngestSettings,
    shared: &'a Mutex<Shared>,
    /// The partitions held by assignment (see [`subscribe`]).
    standing: Option<Stand>,
    /// When the standing was last asked what to hold.
    stood: Option<Instant>,
    progress: KafkaIngestProgress,
    gathered: Gathered,
    expected_offsets: BTreeMap<(String, i32), i64>,
    waiting: Waiting,
    progress_until: UntilCaughtUp,
    /// Partitions whose accepted gap runs past their end: asked again from the ledger's offset now and then.
    past_end: BTreeMap<(String, i32), Instant>,
    /// Whether the consumer left the group as [`KafkaIngestSettings::leave_group`] asked.
    left: bool,
}

impl Consuming<'_, '_> {
    /// One turn of the loop: `true` once a run `until_caught_up` is caught up.
    fn turn(&mut self, on_progress: &mut impl FnMut(&KafkaIngestProgress)) -> Result<bool, KafkaIngestError> {
        let (consumer, settings, shared) = (self.consumer, self.settings, self.shared);
        if !self.left && settings.leave_group.as_ref().is_some_and(|leave| leave.load(Ordering::Relaxed)) {
            self.leave_group()?;
        }
        let forwarded = (self.progress.forwarded, self.progress.plan_defaults_forwarded);
        if self.target.collect(consumer, shared, &mut self.progress)? {
            on_progress(&self.progress);
        }
        if (self.progress.forwarded, self.progress.plan_defaults_forwarded) != forwarded {
            // Copies now at the end of their tenant's partitions: caught up includes them.
            self.progress_until.forget_targets();
        }
        if let Some((standing, partitions)) = &self.standing
            && self.stood.is_none_or(|at| at.elapsed() >= Duration::from_millis(STANDING_ASK_MS))
        {
            consumer.context().stand(consumer, standing.as_ref(), &settings.topics, *partitions)?;
            self.stood = Some(Instant::now());
        }
        let polled = consumer.poll(Duration::from_millis(POLL_TIMEOUT_MS));
        let idle = polled.is_none();
        self.take(polled)?;
        if drop_revoked(shared, &mut self.gathered) {
            self.expected_offsets.clear();
        }
        let due = self.gathered.due(settings, idle);
        for writer in &due {
            let messages = self.gathered.take(*writer);
            self.target.append(*writer, messages, consumer, shared, settings, &mut self.progress)?;
        }
        if !due.is_empty() && matches!(self.target, Target::Ledger { .. }) {
            on_progress(&self.progress);
        }
        ask_past_end_again(consumer, shared, &mut self.past_end);
        if self.waiting.ask_now() && ask_for_topics(consumer, settings, &mut self.waiting)? {
            self.waiting.over(&settings.brokers);
        }
        if !settings.until_caught_up {
            return Ok(false);
        }
        self.is_caught_up(idle, on_progress)
    }

    /// Appends what is gathered, then leaves the group: librdkafka revokes every partition (the listener closes their
    /// shards) and tells the coordinator, which rebalances the others now.
    fn leave_group(&mut self) -> Result<(), KafkaIngestError> {
        self.flush()?;
        self.consumer.unsubscribe();
        self.left = true;
        tracing::info!(group = %self.settings.group, "ingest: left the consumer group, as asked");
        Ok(())
    }

    /// Takes what a poll returned: a message gathered, or an error ridden out, waited for or stopped at.
    fn take(&mut self, polled: Option<Result<BorrowedMessage<'_>, KafkaError>>) -> Result<(), KafkaIngestError> {
        let (consumer, settings, shared) = (self.consumer, self.settings, self.shared);
        match polled {
            Some(Ok(message)) => {
                check_gap(shared, &mut self.expected_offsets, &message, &mut self.progress);
                self.gathered.push(self.target.writer_of(message.partition()), Consumed::of(&message));
                self.progress.messages += 1;
            }
            // An append (a stalling disk, a large batch; or, with -X max.poll.interval.ms below the ledger's 10 s
            // busy timeout, another writer holding the ledger) kept the loop from polling for longer than
            // max.poll.interval.ms: librdkafka left the group, which gave the partitions to other
            // members. Polling again rejoins, and the assignment seeks to the ledger's offsets, so nothing is
            // lost or recorded twice: no reason to stop ingest.
            Some(Err(KafkaError::MessageConsumption(RDKafkaErrorCode::PollExceeded))) => {
                tracing::warn!(
                    group = %settings.group,
                    "ingest: an append kept the consumer from polling for longer than max.poll.interval.ms, so it \
                     left the group; rejoining, each partition resumes at the ledger's offset"
                );
                self.progress.rejoins += 1;
            }
            // A partition's next offset is not on the brokers (auto.offset.reset is "error"): what is pending is
            // appended, then the partitions are asked which it is.
            Some(Err(KafkaError::MessageConsumption(RDKafkaErrorCode::AutoOffsetReset))) => {
                self.flush()?;
                self.expected_offsets.clear();
                let accepted = self.target.accepted_gaps()?;
                offsets_out_of_range(&accepted, consumer, shared, &mut self.past_end)?;
            }
            Some(Err(error)) => {
                let reason = consume_error(consumer, settings, error)?;
                self.waiting.saw(&settings.brokers, reason);
            }
            None => {}
        }
        Ok(())
    }

    /// With `until_caught_up`, one look when nothing is pending and the brokers answer: `true` once the ledger
    /// reached the end of every partition.
    fn is_caught_up(
        &mut self,
        idle: bool,
        on_progress: &mut impl FnMut(&KafkaIngestProgress),
    ) -> Result<bool, KafkaIngestError> {
        let settings = self.settings;
        // A nightly job waits for the brokers only so long.
        self.waiting.give_up(&settings.brokers)?;
        if !self.gathered.is_empty() || self.waiting.since.is_some() {
            return Ok(false);
        }
        let (consumer, shared) = (self.consumer, self.shared);
        if self.progress_until.step(consumer, settings, shared, &mut self.waiting, &mut self.progress, idle)? {
            on_progress(&self.progress);
            return Ok(true);
        }
        Ok(false)
    }

    /// Appends everything gathered (but what revoked partitions had), and waits until it is appended.
    fn flush(&mut self) -> Result<(), KafkaIngestError> {
        let (consumer, settings, shared) = (self.consumer, self.settings, self.shared);
        drop_revoked(shared, &mut self.gathered);
        for writer in self.gathered.writers() {
            let messages = self.gathered.take(writer);
            self.target.append(writer, messages, consumer, shared, settings, &mut self.progress)?;
        }
        self.target.settle(consumer, shared, &mut self.progress)
    }
}
