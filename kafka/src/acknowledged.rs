//! Sending a batch and awaiting the brokers' acknowledgement of each of its messages, from an async server: what
//! `serve`'s `POST /v1/events` answers on. [`crate::producer::KafkaProducer`] counts acknowledgements over its whole
//! life, which tells one caller at a time whether *its* messages landed; concurrent HTTP requests share one producer
//! here, each awaiting the delivery reports of its own messages.
//!
//! ```
//! # let cluster = rdkafka::mocking::MockCluster::new(1).unwrap();
//! # cluster.create_topic("quota.usage", 3, 1).unwrap();
//! use kafka::acknowledged::AcknowledgedProducer;
//! let producer = AcknowledgedProducer::new(&cluster.bootstrap_servers(), &[]).unwrap();
//! let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! let records = [("org-42".to_string(), b"single-object Avro goes here".to_vec())];
//! assert_eq!(runtime.block_on(producer.send_all("quota.usage", &records)).unwrap(), 1);
//! ```

use rdkafka::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::producer::{FutureProducer, FutureRecord};

use crate::producer::ProduceError;

/// librdkafka's log lines of this producer, through `log` as every client's.
struct Logged;

impl ClientContext for Logged {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        crate::log_librdkafka("events", level, facility, message);
    }
}

/// An idempotent producer ([`crate::config::events_producer`]) shared by concurrent callers, each awaiting its own
/// messages' acknowledgements.
pub struct AcknowledgedProducer {
    producer: FutureProducer<Logged>,
    brokers: String,
}

impl AcknowledgedProducer {
    /// A producer for `brokers`, `overrides` (`-X key=value`) applied as [`crate::config::events_producer`] says.
    pub fn new(brokers: &str, overrides: &[(String, String)]) -> Result<AcknowledgedProducer, ProduceError> {
        let producer = crate::config::events_producer(brokers, overrides)
            .create_with_context(Logged)
            .map_err(|source| ProduceError::Create { brokers: brokers.to_string(), source })?;
        Ok(AcknowledgedProducer { producer, brokers: brokers.to_string() })
    }

    /// Sends every `(key, payload)` of `records` to `topic`, each to the partition of its key (Kafka's default
    /// partitioner, [`crate::config::PARTITIONER`]), and answers once the brokers acknowledged them all: how many.
    /// All are queued before the first is awaited, so a batch costs one round trip, not one per message. A message
    /// librdkafka cannot queue (its queue full, a message too large) or that is not acknowledged within
    /// [`crate::config::EVENTS_DELIVERY_TIMEOUT_MS`] is the error: some of the batch may have landed, so the caller
    /// must resend all of it, which is safe only for messages deduplicated downstream (events, by their id).
    pub async fn send_all(&self, topic: &str, records: &[(String, Vec<u8>)]) -> Result<u64, ProduceError> {
        let mut deliveries = Vec::with_capacity(records.len());
        for (key, payload) in records {
            let record = FutureRecord::to(topic).key(key.as_str()).payload(payload.as_slice());
            let delivery = self
                .producer
                .send_result(record)
                .map_err(|(source, _)| ProduceError::Send { topic: topic.to_string(), source })?;
            deliveries.push(delivery);
        }
        let sent = deliveries.len() as u64;
        let (mut failed, mut first_error) = (0, None);
        for delivery in deliveries {
            let error = match delivery.await {
                Ok(Ok(_)) => continue,
                Ok(Err((error, _))) => error.to_string(),
                Err(_) => "the producer was dropped before the delivery report".to_string(),
            };
            failed += 1;
            first_error.get_or_insert(error);
        }
        match first_error {
            None => Ok(sent),
            Some(first_error) => {
                Err(ProduceError::Undelivered { brokers: self.brokers.clone(), sent, failed, first_error })
            }
        }
    }
}
