//! Producing messages to Kafka through an idempotent producer: the callers send single-object Avro on the record
//! type's topic, the tenant as key (contract §2), to the tenant's partition by Kafka's default partitioner
//! ([`crate::config::PARTITIONER`], contract §9.4); a plan default (tenant `*`) to every partition of its topic
//! ([`KafkaProducer::send_to_every_partition`], each copy marked with [`PLAN_DEFAULT_HEADER`]). Used by `produce` (JSON
//! lines), `generate --to-kafka`, the demo and the tests.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use serde::Serialize;

use crate::config::DELIVERY_TIMEOUT_MS;
use crate::topics::PartitionCountError;

/// The header that marks a plan default (tenant `*`) as one of copies already on every partition of its topic
/// (contract §9.4): a shard that reads a plan default without it forwards the message to every other partition, one
/// with it only records it, so a copy is never forwarded again and forwarding ends after one round. Its value says
/// who sent the copies ([`SENT_TO_EVERY_PARTITION`], or `forwarded from partition N`), for people reading the topic.
pub const PLAN_DEFAULT_HEADER: &str = "quota-ledger-plan-default";
/// The value of [`PLAN_DEFAULT_HEADER`] on the copies [`KafkaProducer::send_to_every_partition`] sends.
pub const SENT_TO_EVERY_PARTITION: &str = "sent to every partition";

/// Producing failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProduceError {
    /// librdkafka refused the producer's configuration (a bad `-X` setting, say).
    #[error("cannot create the Kafka producer for {brokers}")]
    Create {
        /// `bootstrap.servers`.
        brokers: String,
        /// librdkafka's reason.
        source: KafkaError,
    },
    /// A message could not be queued for sending (too large, an unknown partition, ...).
    #[error("cannot send to {topic}")]
    Send {
        /// The topic of the message.
        topic: String,
        /// librdkafka's reason.
        source: KafkaError,
    },
    /// The partitions of a topic to send to every partition of could not be learned.
    #[error("cannot send to every partition of {topic}")]
    Partitions {
        /// The topic.
        topic: String,
        /// What the brokers answered.
        source: PartitionCountError,
    },
    /// Some messages were never acknowledged within librdkafka's retries.
    #[error("{failed} of {sent} messages were not acknowledged by {brokers} (first error: {first_error})")]
    Undelivered {
        /// `bootstrap.servers`.
        brokers: String,
        /// Messages sent.
        sent: u64,
        /// Messages not acknowledged.
        failed: u64,
        /// The first delivery error reported.
        first_error: String,
    },
    /// The final flush gave up while deliveries were still outstanding.
    #[error("messages still unacknowledged after {timeout_ms} ms")]
    FlushTimeout {
        /// How long the flush waited.
        timeout_ms: u64,
        /// librdkafka's reason.
        source: KafkaError,
    },
}

/// The headers of a plan default's copy: [`PLAN_DEFAULT_HEADER`] with `value`.
fn plan_default_header(value: &str) -> OwnedHeaders {
    OwnedHeaders::new().insert(Header { key: PLAN_DEFAULT_HEADER, value: Some(value) })
}

/// Counts acknowledgements.
#[derive(Default)]
struct DeliveryCounter {
    delivered: AtomicU64,
    failed: AtomicU64,
    first_error: std::sync::Mutex<Option<String>>,
}

impl ClientContext for DeliveryCounter {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        crate::log_librdkafka("produce", level, facility, message);
    }
}

impl ProducerContext for DeliveryCounter {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => self.delivered.fetch_add(1, Ordering::Relaxed),
            Err((error, _)) => {
                let mut first = self.first_error.lock().expect("never poisoned");
                first.get_or_insert_with(|| error.to_string());
                self.failed.fetch_add(1, Ordering::Relaxed)
            }
        };
    }
}

/// What a producer sent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ProduceReport {
    /// Messages sent.
    pub sent: u64,
    /// Messages the brokers acknowledged: all of them, when [`KafkaProducer::finish`] answers this.
    pub delivered: u64,
}

/// An idempotent Kafka producer.
pub struct KafkaProducer {
    producer: BaseProducer<DeliveryCounter>,
    brokers: String,
    sent: u64,
    /// Partition counts of the topics [`KafkaProducer::send_to_every_partition`] sent to, asked once each.
    partitions: BTreeMap<String, u32>,
}

impl KafkaProducer {
    /// A producer for `brokers` with the settings of [`config::producer`](crate::config::producer), `overrides`
    /// (`-X key=value`) last.
    pub fn new(brokers: &str, overrides: &[(String, String)]) -> Result<KafkaProducer, ProduceError> {
        let producer = crate::config::producer(brokers, overrides)
            .create_with_context(DeliveryCounter::default())
            .map_err(|source| ProduceError::Create { brokers: brokers.to_string(), source })?;
        Ok(KafkaProducer { producer, brokers: brokers.to_string(), sent: 0, partitions: BTreeMap::new() })
    }

    /// The partition count P every topic of `topics` shares, as the brokers list them
    /// ([`crate::topics::common_partition_count`]).
    pub fn common_partition_count<'a>(
        &self,
        topics: impl IntoIterator<Item = &'a str>,
    ) -> Result<u32, PartitionCountError> {
        crate::topics::common_partition_count(self.producer.client(), topics)
    }

    /// Topics of `wanted` the brokers do not have, if they answer ([`crate::topics::missing_topics`]).
    pub fn missing_topics<'a>(
        &self,
        wanted: impl IntoIterator<Item = &'a str>,
    ) -> Option<std::collections::BTreeSet<String>> {
        crate::topics::missing_topics(self.producer.client(), wanted)
    }

    /// Queues one message for the partition of `key` (Kafka's default partitioner, [`crate::config::PARTITIONER`]);
    /// waits for acknowledgements while librdkafka's queue is full.
    pub fn send(&mut self, topic: &str, key: &str, payload: &[u8]) -> Result<(), ProduceError> {
        self.send_record(BaseRecord::to(topic).key(key).payload(payload))
    }

    /// Queues the same message, same key and bytes, for every partition of `topic`: a plan default (tenant `*`,
    /// contract §9.4) belongs to every shard, and a shard holds exactly one partition of each topic. Answers the
    /// partitions sent to. A ledger that holds every partition sees the copies as exact duplicates, counted once.
    /// Each copy carries [`PLAN_DEFAULT_HEADER`], so that no shard forwards it again: sent to every partition
    /// already, forwarding would only add P - 1 duplicates per shard.
    pub fn send_to_every_partition(&mut self, topic: &str, key: &str, payload: &[u8]) -> Result<u32, ProduceError> {
        let partitions = match self.partitions.get(topic) {
            Some(count) => *count,
            None => {
                let count = self
                    .common_partition_count([topic])
                    .map_err(|source| ProduceError::Partitions { topic: topic.to_string(), source })?;
                self.partitions.insert(topic.to_string(), count);
                count
            }
        };
        for partition in 0..partitions {
            let partition = i32::try_from(partition).expect("Kafka numbers partitions in an i32");
            let record = BaseRecord::to(topic).key(key).payload(payload).partition(partition);
            self.send_record(record.headers(plan_default_header(SENT_TO_EVERY_PARTITION)))?;
        }
        Ok(partitions)
    }

    fn send_record(&mut self, mut record: BaseRecord<'_, str, [u8]>) -> Result<(), ProduceError> {
        loop {
            match self.producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), returned)) => {
                    record = returned;
                    self.producer.poll(Duration::from_millis(50));
                }
                Err((source, returned)) => {
                    return Err(ProduceError::Send { topic: returned.topic.to_string(), source });
                }
            }
        }
        self.sent += 1;
        self.producer.poll(Duration::ZERO);
        Ok(())
    }

    /// Queues one message for partition `partition` of `topic`, whatever the partitioner would choose: ingest
    /// forwarding an event read in another tenant's partition to its tenant's, or a plan default to every other
    /// partition (contract §9.4). `plan_default`, when given, is the value of the [`PLAN_DEFAULT_HEADER`] the copy
    /// carries.
    pub fn send_to_partition(
        &mut self,
        topic: &str,
        partition: i32,
        key: Option<&[u8]>,
        payload: &[u8],
        plan_default: Option<&str>,
    ) -> Result<(), ProduceError> {
        let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic).partition(partition).payload(payload);
        if let Some(key) = key {
            record = record.key(key);
        }
        if let Some(value) = plan_default {
            record = record.headers(plan_default_header(value));
        }
        loop {
            match self.producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), returned)) => {
                    record = returned;
                    self.producer.poll(Duration::from_millis(50));
                }
                Err((source, _)) => return Err(ProduceError::Send { topic: topic.to_string(), source }),
            }
        }
        self.sent += 1;
        self.producer.poll(Duration::ZERO);
        Ok(())
    }

    /// Waits until every message sent so far is acknowledged, and keeps the producer for more. Any message not
    /// acknowledged (librdkafka gave up within `delivery.timeout.ms`) is the error, and stays one for every later
    /// call: the caller must not record what it sent as delivered.
    pub fn wait_acknowledged(&mut self) -> Result<(), ProduceError> {
        let started = Instant::now();
        self.producer
            .flush(Duration::from_millis(DELIVERY_TIMEOUT_MS))
            .map_err(|source| ProduceError::FlushTimeout { timeout_ms: DELIVERY_TIMEOUT_MS, source })?;
        while self.delivered() + self.failed() < self.sent && started.elapsed() < Duration::from_secs(5) {
            self.producer.poll(Duration::from_millis(10));
        }
        let failed = self.failed();
        let unanswered = self.sent - (self.delivered() + failed).min(self.sent);
        if failed > 0 || unanswered > 0 {
            let context = self.producer.context();
            let first_error = context.first_error.lock().expect("never poisoned").clone().unwrap_or_default();
            let brokers = self.brokers.clone();
            return Err(ProduceError::Undelivered {
                brokers,
                sent: self.sent,
                failed: failed + unanswered,
                first_error,
            });
        }
        Ok(())
    }

    /// Waits until every message is acknowledged; an error names how many were not.
    pub fn finish(self) -> Result<ProduceReport, ProduceError> {
        let started = Instant::now();
        self.producer
            .flush(Duration::from_millis(DELIVERY_TIMEOUT_MS))
            .map_err(|source| ProduceError::FlushTimeout { timeout_ms: DELIVERY_TIMEOUT_MS, source })?;
        // Delivery callbacks run in poll; flush has polled them all, but be explicit about the count.
        while self.delivered() + self.failed() < self.sent && started.elapsed() < Duration::from_secs(5) {
            self.producer.poll(Duration::from_millis(10));
        }
        let failed = self.failed();
        if failed > 0 {
            let context = self.producer.context();
            let first_error = context.first_error.lock().expect("never poisoned").clone().unwrap_or_default();
            return Err(ProduceError::Undelivered { brokers: self.brokers, sent: self.sent, failed, first_error });
        }
        Ok(ProduceReport { sent: self.sent, delivered: self.delivered() })
    }

    fn delivered(&self) -> u64 {
        self.producer.context().delivered.load(Ordering::Relaxed)
    }

    fn failed(&self) -> u64 {
        self.producer.context().failed.load(Ordering::Relaxed)
    }
}
