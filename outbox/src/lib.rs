//! The outbox: what the ledger records for others reaches Kafka. Reconcile's adjustments and the enforcement hook's
//! decisions and usage are written to the ledger's outbox in the transaction that records them (contract §6); this crate
//! publishes them: pending entries in ledger order, single-object Avro on their type's topic with the tenant as
//! key (or the Confluent wire format, [`OutboxFormat::Confluent`], [`confluent`]), through an idempotent producer;
//! each acknowledgement is recorded in the ledger. Unacknowledged entries stay pending and are sent again by the next
//! publish, so a broker outage delays them and never loses one. An entry acknowledged but not yet recorded when the
//! process dies is sent twice: consumers deduplicate by event_id (contract §4.3).
//!
//! A command publishes now and then with [`publish`] (`reconcile --brokers`, the demo); a server keeps a
//! [`PublisherThread`] that publishes every [`PUBLISH_INTERVAL_MS`] (`serve --brokers`).
//!
//! ```
//! use std::time::Duration;
//! use outbox::{OutboxFormat, OutboxTopics};
//!
//! # let dir = tempfile::tempdir().unwrap();
//! # let path = dir.path().join("ledger.db");
//! let hook = hook::Hook::start(&path, hook::HookSettings::default()).unwrap();
//! let ask = hook::Request::one(schemas::Who::tenant("org-42"), "requests", 1, "k-1");
//! assert!(hook.check(ask).unwrap().allowed());
//! drop(hook);
//! let broker = kafka::admin::EmbeddedBroker::start(1).unwrap();
//! let mut ledger = ledger::Ledger::open(&path).unwrap();
//! let topics = OutboxTopics::defaults();
//! let format = OutboxFormat::SingleObject;
//! let report =
//!     outbox::publish(&mut ledger, &broker.bootstrap_servers(), &[], &topics, &format, Duration::from_secs(10))
//!         .unwrap();
//! assert_eq!((report.published, report.pending), (2, 0), "the decision and its usage");
//! ```

#![deny(missing_docs)]

pub mod confluent;
mod thread;

pub use confluent::OutboxFormat;
pub use thread::{HealthWatch, OutboxHealth, PUBLISH_INTERVAL_MS, PublisherThread, StartError};

use std::collections::{BTreeSet, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ledger::Ledger;
use rdkafka::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use schemas::EventType;
use serde::Serialize;

use kafka::topics::{missing_topics, missing_topics_message};

/// Entries sent before waiting for their acknowledgements and recording them. Each chunk waits for its last
/// acknowledgement: chunks of 1,000 published at most about 8,000 entries a second (to the mock broker on the same
/// machine), fewer than `serve` records at 64 clients.
pub const OUTBOX_CHUNK_ENTRIES: u64 = 10_000;
/// Acknowledgements recorded per transaction: `serve` records them through the hook's writer, and each such
/// transaction holds up the next group of decisions.
pub const OUTBOX_RECORD_ENTRIES: usize = 1_000;
/// Wait between two attempts while a broker does not acknowledge.
pub const OUTBOX_RETRY_WAIT_MS: u64 = 1_000;
/// How long a command that publishes now and then (`reconcile --brokers`, the demo) keeps retrying the outbox when a
/// broker does not acknowledge; what is left stays pending for the next.
pub const PUBLISH_TIMEOUT_MS: u64 = 30_000;

/// Publishing failed for a reason retrying cannot fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutboxPublishError {
    /// librdkafka refused the producer's configuration (a bad `-X` setting, say).
    #[error("cannot create the Kafka producer for {brokers}")]
    Create {
        /// `bootstrap.servers`.
        brokers: String,
        /// librdkafka's reason.
        source: KafkaError,
    },
    /// An entry's record type has no topic in the [`OutboxTopics`].
    #[error("no topic is configured for {event_type} entries of the outbox")]
    NoTopic {
        /// The record type's name.
        event_type: String,
    },
    /// Reading the pending entries failed.
    #[error("cannot read the outbox")]
    Read(#[from] ledger::ReadError),
    /// Recording acknowledgements failed: they are sent again by the next publish.
    #[error("cannot record acknowledgements")]
    Record(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The ledger's log could not be made durable, so nothing it holds is published.
    #[error("cannot sync the ledger's log before publishing what it holds")]
    SyncLog(#[source] std::io::Error),
}

/// Where [`Publisher::publish`] reads the pending entries and records their acknowledgements: a [`Ledger`]
/// connection, or (`serve`) a connection that reads and the enforcement hook's writer, the ledger's one writer, that
/// records.
pub trait Outbox {
    /// Up to `limit` pending entries after `after` (from the first when `None`), oldest first.
    fn pending(&self, after: Option<u64>, limit: u64) -> Result<Vec<ledger::OutboxEntry>, ledger::ReadError>;
    /// Makes everything committed so far durable, before what was read is published ([`Ledger::sync_log`]).
    fn sync_log(&self) -> std::io::Result<()>;
    /// Records that a broker acknowledged these (seq, topic).
    fn record(&mut self, acknowledged: &[(u64, String)]) -> Result<(), Box<dyn std::error::Error + Send + Sync>>;
    /// Entries still pending.
    fn pending_count(&self) -> Result<u64, ledger::ReadError>;
    /// When the oldest pending entry was recorded (microseconds, UTC), if one waits.
    fn oldest_pending_at(&self) -> Result<Option<i64>, ledger::ReadError>;
}

impl Outbox for Ledger {
    fn pending(&self, after: Option<u64>, limit: u64) -> Result<Vec<ledger::OutboxEntry>, ledger::ReadError> {
        self.outbox_pending_after(after, limit)
    }

    fn sync_log(&self) -> std::io::Result<()> {
        Ledger::sync_log(self)
    }

    fn record(&mut self, acknowledged: &[(u64, String)]) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        Ok(self.outbox_published(acknowledged)?)
    }

    fn pending_count(&self) -> Result<u64, ledger::ReadError> {
        self.outbox_pending_count()
    }

    fn oldest_pending_at(&self) -> Result<Option<i64>, ledger::ReadError> {
        self.outbox_oldest_pending_at()
    }
}

/// The topic each record type of the outbox goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxTopics {
    by_type: Vec<(EventType, String)>,
}

impl OutboxTopics {
    /// contract §2's default topic of every record type (`quota.adjustments`, `quota.decisions`, ...).
    pub fn defaults() -> OutboxTopics {
        OutboxTopics { by_type: EventType::ALL.iter().map(|t| (*t, t.default_topic().to_string())).collect() }
    }

    /// Sends `event_type` to `topic` instead.
    pub fn set(&mut self, event_type: EventType, topic: &str) {
        self.by_type.retain(|(t, _)| *t != event_type);
        self.by_type.push((event_type, topic.to_string()));
    }

    /// The topic of `event_type`, if it has one.
    pub fn topic_of(&self, event_type: EventType) -> Option<&str> {
        self.by_type.iter().find(|(t, _)| *t == event_type).map(|(_, name)| name.as_str())
    }
}

/// What a publish did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PublishReport {
    /// Entries acknowledged by the brokers and recorded as published.
    pub published: u64,
    /// Still pending when the time ran out (sent again by the next publish).
    pub pending: u64,
    /// Chunks sent, first attempts and retries.
    pub attempts: u64,
    /// The last delivery error seen, if any; with entries held for the schema registry, why they were first.
    pub last_error: Option<String>,
    /// Entries not sent in the Confluent wire format because the schema registry gave their schema no id (it refused
    /// it, or could not be reached): pending, sent by a later publish once it does. 0 in single-object encoding.
    pub awaiting_registry: u64,
}

/// Records which sequence numbers the broker acknowledged.
#[derive(Default)]
struct Acknowledged {
    seqs: Mutex<Vec<u64>>,
    last_error: Mutex<Option<String>>,
}

impl ClientContext for Acknowledged {
    // An outbox that does not publish must say why: librdkafka's warnings reach `serve`'s stderr.
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        kafka::log_librdkafka("outbox", level, facility, message);
    }
}

impl ProducerContext for Acknowledged {
    type DeliveryOpaque = Box<u64>;
    fn delivery(&self, result: &DeliveryResult<'_>, seq: Box<u64>) {
        match result {
            Ok(_) => self.seqs.lock().expect("never poisoned").push(*seq),
            Err((error, _)) => *self.last_error.lock().expect("never poisoned") = Some(error.to_string()),
        }
    }
}

/// Publishes every pending outbox entry, retrying until all are acknowledged or `timeout` has passed, through a
/// producer of its own: for a publish now and then (`reconcile`, the demo). A process that publishes again and again
/// keeps a [`Publisher`].
pub fn publish(
    outbox: &mut impl Outbox,
    brokers: &str,
    overrides: &[(String, String)],
    topics: &OutboxTopics,
    format: &OutboxFormat,
    timeout: Duration,
) -> Result<PublishReport, OutboxPublishError> {
    Publisher::new(brokers, overrides, format.clone(), timeout)?.publish(outbox, topics, timeout)
}

/// An idempotent producer kept from one publish to the next (`serve` publishes every second). A producer per
/// publish opened new connections to the brokers each time and asked them for a new producer id, which a broker
/// keeps: Tansu 0.6.0 stored one more at nearly every publish that had something to send (10 in 20 s of `serve`
/// answering a check a second).
///
/// A producer that did not have all of a chunk acknowledged is replaced before the next attempt. After an outage
/// librdkafka gives an idempotent producer whose messages timed out a new epoch of its own; Tansu 0.6.0 refuses
/// every message of that epoch ("Unknown broker error") and the producer bumps again, for ever: a kept producer
/// published nothing more after outages of 6, 12 and 20 s. A new producer asks the broker for its id, which every
/// broker accepts.
pub struct Publisher {
    config: ClientConfig,
    producer: BaseProducer<Acknowledged>,
    brokers: String,
    /// How long one attempt waits for the broker (librdkafka's `delivery.timeout.ms`).
    attempt_ms: u64,
    /// Topics the brokers did not have at the last look: their entries wait, and are not sent until the brokers
    /// list them (looked up again at the start of every publish).
    missing: BTreeSet<String>,
    /// Every entry still pending up to this sequence number waits for a topic of `missing`, so a publish starts
    /// after it: a backlog that grows while a topic is missing is not read again, payloads and all, at every
    /// publish. Forgotten as soon as a missing topic appears.
    skipped_through: Option<u64>,
    /// How entries are written on their topics, and the schema ids the registry gave.
    framing: confluent::Framing,
}

impl Publisher {
    /// A producer whose attempts last at most `attempt`: an outage ends the attempt, not the entries. Entries go out
    /// in `format`.
    pub fn new(
        brokers: &str,
        overrides: &[(String, String)],
        format: OutboxFormat,
        attempt: Duration,
    ) -> Result<Publisher, OutboxPublishError> {
        let requested_ms = u64::try_from(attempt.as_millis()).unwrap_or(u64::MAX);
        let config = kafka::config::outbox_producer(brokers, overrides, requested_ms);
        let attempt_ms = kafka::config::outbox_attempt_ms(requested_ms);
        let producer = create(&config, brokers)?;
        Ok(Publisher {
            config,
            producer,
            brokers: brokers.to_string(),
            attempt_ms,
            missing: BTreeSet::new(),
            skipped_through: None,
            framing: confluent::Framing::new(format),
        })
    }

    /// Publishes every pending outbox entry, retrying until all are acknowledged or `timeout` has passed. Entries
    /// for a topic the brokers do not have are left pending, and the pass reads on past them: the rest is published
    /// whatever waits ahead of it, and the pass ends once only such entries are left. So are the entries of a topic
    /// whose schema the registry gave no id in the Confluent wire format (asked again at the next publish).
    pub fn publish(
        &mut self,
        outbox: &mut impl Outbox,
        topics: &OutboxTopics,
        timeout: Duration,
    ) -> Result<PublishReport, OutboxPublishError> {
        let started = Instant::now();
        let mut report = PublishReport::default();
        self.framing.begin_pass();
        if !self.missing.is_empty() {
            // Created since the last pass? Asked once per pass, not for every entry that waits.
            let client = self.producer.client();
            if let Some(still) = missing_topics(client, self.missing.iter().map(String::as_str)) {
                if still.len() < self.missing.len() {
                    self.skipped_through = None;
                }
                self.missing = still;
            }
        }
        // The last entry read in this pass: the next chunk starts after it, past the entries left pending.
        let mut after = self.skipped_through;
        let pass_from = self.skipped_through;
        loop {
            let read = outbox.pending(after, OUTBOX_CHUNK_ENTRIES)?;
            let Some(last) = read.last() else {
                // Every entry up to `after` was published or waits for a missing topic, unless some waited for the
                // schema registry: then the next pass starts where this one did, to send them.
                self.skipped_through = match self.framing.held_entries() {
                    0 => after.filter(|_| !self.missing.is_empty()),
                    _ => pass_from,
                };
                break;
            };
            let chunk_from = after;
            after = Some(last.seq);
            let pending: Vec<_> = read
                .into_iter()
                .filter(|e| topics.topic_of(e.event_type).is_none_or(|t| !self.missing.contains(t)))
                .collect();
            let pending = self.framing.frame(pending, topics);
            if pending.is_empty() {
                continue;
            }
            // In the ledger first, on the disk too: the enforcement hook answers a group only once a sync covered
            // it, but its commits are visible to this connection a moment before (`Ledger::sync_log_apart`). A
            // decision published and then lost from the ledger by a power loss would be an event Kafka holds that
            // the ledger never answered.
            outbox.sync_log().map_err(OutboxPublishError::SyncLog)?;
            report.attempts += 1;
            let acknowledged = send_chunk(&self.producer, &pending, topics, self.attempt_ms)?;
            report.published += acknowledged.len() as u64;
            for part in acknowledged.chunks(OUTBOX_RECORD_ENTRIES) {
                outbox.record(part).map_err(OutboxPublishError::Record)?;
            }
            if acknowledged.len() < pending.len() {
                let error = self.producer.context().last_error.lock().expect("never poisoned").take();
                self.producer = create(&self.config, &self.brokers)?;
                let wanted = pending.iter().filter_map(|e| topics.topic_of(e.event_type));
                let missing = missing_topics(self.producer.client(), wanted).unwrap_or_default();
                if !missing.is_empty() {
                    // The chunk again, at once: its entries for those topics wait, its others not acknowledged are
                    // sent again.
                    self.missing.extend(missing);
                    after = chunk_from;
                    continue;
                }
                // An outage, or a broker slower than the attempt: everything from the first entry again.
                report.last_error = Some(error.unwrap_or_else(|| {
                    format!(
                        "{} of {} entries not acknowledged within {} ms",
                        pending.len() - acknowledged.len(),
                        pending.len(),
                        self.attempt_ms
                    )
                }));
                after = self.skipped_through;
                if started.elapsed() >= timeout {
                    break;
                }
                std::thread::sleep(Duration::from_millis(OUTBOX_RETRY_WAIT_MS));
            }
        }
        report.pending = outbox.pending_count()?;
        if report.pending > 0 && !self.missing.is_empty() {
            report.last_error = Some(missing_topics_message(&self.missing, &self.brokers));
        }
        report.awaiting_registry = self.framing.held_entries();
        if let Some(held) = self.framing.held_reason() {
            report.last_error = Some(match report.last_error.take() {
                Some(other) => format!("{held}; {other}"),
                None => held,
            });
        }
        Ok(report)
    }
}

fn create(config: &ClientConfig, brokers: &str) -> Result<BaseProducer<Acknowledged>, OutboxPublishError> {
    config
        .create_with_context(Acknowledged::default())
        .map_err(|source| OutboxPublishError::Create { brokers: brokers.to_string(), source })
}

/// Sends one chunk and waits for its acknowledgements: the (seq, topic) of those acknowledged.
fn send_chunk(
    producer: &BaseProducer<Acknowledged>,
    pending: &[ledger::OutboxEntry],
    topics: &OutboxTopics,
    attempt_ms: u64,
) -> Result<Vec<(u64, String)>, OutboxPublishError> {
    let mut sent: Vec<(u64, String)> = Vec::with_capacity(pending.len());
    for entry in pending {
        let topic = topics
            .topic_of(entry.event_type)
            .ok_or_else(|| OutboxPublishError::NoTopic { event_type: entry.event_type.name().to_string() })?;
        let mut record =
            BaseRecord::with_opaque_to(topic, Box::new(entry.seq)).key(entry.tenant.as_str()).payload(&entry.message);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), returned)) => {
                    record = returned;
                    producer.poll(Duration::from_millis(50));
                }
                Err((error, _)) => {
                    *producer.context().last_error.lock().expect("never poisoned") = Some(error.to_string());
                    break;
                }
            }
        }
        sent.push((entry.seq, topic.to_string()));
    }
    // Errors here are per message and arrive through the delivery callbacks.
    let _ = producer.flush(Duration::from_millis(attempt_ms + 5_000));
    let acknowledged: HashSet<u64> =
        std::mem::take(&mut *producer.context().seqs.lock().expect("never poisoned")).into_iter().collect();
    Ok(sent.into_iter().filter(|(seq, _)| acknowledged.contains(seq)).collect())
}
