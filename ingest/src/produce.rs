//! Producing events to Kafka: single-object Avro on the record type's topic, the tenant as key (SPEC 2), with
//! an idempotent producer. Used by `produce` (JSON lines), `generate --to-kafka` and the tests.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use serde::Serialize;

/// How long `finish` waits for outstanding deliveries. librdkafka retries within `delivery.timeout.ms`
/// (set to the same), so after this every message is either acknowledged or reported failed.
pub const DELIVERY_TIMEOUT_MS: u64 = 120_000;
/// Messages librdkafka may hold unacknowledged; `send` waits (polling for acknowledgements) when full.
pub const QUEUE_MAX_MESSAGES: u32 = 100_000;

/// Producing failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProduceError {
    #[error("cannot create the Kafka producer for {brokers}")]
    Create { brokers: String, source: KafkaError },
    #[error("cannot send to {topic}")]
    Send { topic: String, source: KafkaError },
    #[error("{failed} of {sent} messages were not acknowledged by {brokers} (first error: {first_error})")]
    Undelivered { brokers: String, sent: u64, failed: u64, first_error: String },
    #[error("messages still unacknowledged after {timeout_ms} ms")]
    FlushTimeout { timeout_ms: u64, source: KafkaError },
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
    pub sent: u64,
    pub delivered: u64,
}

/// An idempotent Kafka producer.
pub struct KafkaProducer {
    producer: BaseProducer<DeliveryCounter>,
    brokers: String,
    sent: u64,
}

/// Every librdkafka setting of the producer, in one place; `-X` overrides come last.
pub(crate) fn producer_config(brokers: &str, overrides: &[(String, String)]) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("client.id", "quota-ledger-produce")
        // Retries never duplicate or reorder a message within a partition.
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("delivery.timeout.ms", DELIVERY_TIMEOUT_MS.to_string())
        .set("queue.buffering.max.messages", QUEUE_MAX_MESSAGES.to_string())
        .set("linger.ms", "5");
    // The log level follows the binary's logger (warnings by default, `QUOTA_LEDGER_LOG` for more).
    for (key, value) in overrides {
        config.set(key, value);
    }
    config
}

impl KafkaProducer {
    pub fn new(brokers: &str, overrides: &[(String, String)]) -> Result<KafkaProducer, ProduceError> {
        let producer = producer_config(brokers, overrides)
            .create_with_context(DeliveryCounter::default())
            .map_err(|source| ProduceError::Create { brokers: brokers.to_string(), source })?;
        Ok(KafkaProducer { producer, brokers: brokers.to_string(), sent: 0 })
    }

    /// Queues one message; waits for acknowledgements while librdkafka's queue is full.
    pub fn send(&mut self, topic: &str, key: &str, payload: &[u8]) -> Result<(), ProduceError> {
        let mut record = BaseRecord::to(topic).key(key).payload(payload);
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
