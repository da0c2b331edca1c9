//! Checkpoints (contract §9.3): the ledger's chain head published outside its file, on `quota.checkpoints`, keyed by the
//! ledger id, as `{ledger_id, head_seq, head_hash, at}`. Someone who can rewrite the ledger file cannot take back
//! what the brokers hold: `verify --checkpoints-from` reads them all and checks each against the chain.
//!
//! [`CheckpointPublisher`] is what a process that writes the ledger for long (`ingest --brokers`, `serve --brokers`)
//! keeps: it is offered the head as the process goes, publishes it when it moved, at most every
//! [`CHECKPOINT_EVERY_MS`] (so at least that often while the ledger grows, and never while it is idle), and the last
//! head when the process ends. A failure is logged and never stops the process. [`read_checkpoints`] reads the topic
//! whole, with a consumer of its own that commits nothing.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use serde::{Deserialize, Serialize};

/// The topic checkpoints are published to (contract §9.3).
pub const CHECKPOINTS_TOPIC: &str = "quota.checkpoints";
pub use crate::config::CHECKPOINT_EVERY_MS;
/// How long a publisher that stops waits for its last checkpoints to be acknowledged.
pub const FINISH_WAIT_MS: u64 = 5_000;
/// How long [`read_checkpoints`] may take to read the whole topic.
pub const READ_TIMEOUT_MS: u64 = 30_000;

/// One checkpoint, as published (JSON, key: `ledger_id`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The ledger's id.
    pub ledger_id: String,
    /// The head's link number.
    pub head_seq: u64,
    /// The head's link hash, in hexadecimal.
    pub head_hash: String,
    /// When it was published (RFC 3339, UTC).
    pub at: String,
}

/// Delivery results of the checkpoints, said on stderr when they fail.
struct CheckpointContext {
    /// The process publishing, the first word of its log lines.
    client: String,
    said: Mutex<crate::Said>,
}

impl ClientContext for CheckpointContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        crate::log_librdkafka(&self.client, level, facility, message);
    }
}

impl ProducerContext for CheckpointContext {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        let mut said = self.said.lock().expect("never poisoned: no code panics holding it");
        match result {
            Ok(_) => {
                if said.over() {
                    tracing::info!(topic = CHECKPOINTS_TOPIC, "{}: checkpoints are published again", self.client);
                }
            }
            Err((error, _)) => {
                let reason = error.to_string();
                if said.again(&reason) {
                    tracing::warn!(
                        topic = CHECKPOINTS_TOPIC,
                        %reason,
                        "{}: a checkpoint was not published (the ledger goes on; `quota-ledger topics create` creates \
                         the topic on brokers that do not create topics)",
                        self.client
                    );
                }
            }
        }
    }
}

/// Publishes the head of one ledger as it moves.
pub struct CheckpointPublisher {
    producer: BaseProducer<CheckpointContext>,
    ledger_id: String,
    /// The head last published, and when.
    last: Option<(u64, Instant)>,
}

impl CheckpointPublisher {
    /// A publisher of the ledger `ledger_id`'s checkpoints to `brokers` (settings: [`crate::config::checkpoint_producer`],
    /// `overrides` last); its log lines start with `client`.
    pub fn new(
        client: &str,
        brokers: &str,
        overrides: &[(String, String)],
        ledger_id: &str,
    ) -> Result<CheckpointPublisher, KafkaError> {
        let context = CheckpointContext { client: client.to_string(), said: Mutex::default() };
        let producer = crate::config::checkpoint_producer(brokers, overrides).create_with_context(context)?;
        Ok(CheckpointPublisher { producer, ledger_id: ledger_id.to_string(), last: None })
    }

    /// The head is now `(head_seq, head_hash)`: published when it differs from the last one published and
    /// [`CHECKPOINT_EVERY_MS`] passed since (the first offer publishes at once). Cheap enough to call at every turn
    /// of a loop.
    pub fn offer(&mut self, head_seq: u64, head_hash: &str) {
        let due = match self.last {
            None => true,
            Some((seq, at)) => seq != head_seq && at.elapsed() >= Duration::from_millis(CHECKPOINT_EVERY_MS),
        };
        if due {
            self.publish(head_seq, head_hash);
        }
        self.producer.poll(Duration::ZERO);
    }

    /// The process ends at `(head_seq, head_hash)`: published unless it was already, then waits up to
    /// [`FINISH_WAIT_MS`] for the acknowledgements.
    pub fn finish(mut self, head_seq: u64, head_hash: &str) {
        if self.last.is_none_or(|(seq, _)| seq != head_seq) {
            self.publish(head_seq, head_hash);
        }
        if let Err(error) = self.producer.flush(Duration::from_millis(FINISH_WAIT_MS)) {
            tracing::warn!(
                checkpoint = %format_args!("{head_seq}:{head_hash}"),
                wait_ms = FINISH_WAIT_MS,
                %error,
                "{}: the last checkpoint was not acknowledged in time",
                self.producer.context().client
            );
        }
    }

    fn publish(&mut self, head_seq: u64, head_hash: &str) {
        let checkpoint = Checkpoint {
            ledger_id: self.ledger_id.clone(),
            head_seq,
            head_hash: head_hash.to_string(),
            at: schemas::Timestamp::now().to_string(),
        };
        let body = serde_json::to_vec(&checkpoint).expect("a checkpoint serializes");
        let record = BaseRecord::to(CHECKPOINTS_TOPIC).key(&self.ledger_id).payload(&body);
        if let Err((error, _)) = self.producer.send(record) {
            tracing::warn!(
                checkpoint = %format_args!("{head_seq}:{head_hash}"),
                %error,
                "{}: cannot queue a checkpoint",
                self.producer.context().client
            );
        }
        // Tried, whatever came of it: the next try waits for the interval, so a broker away costs a line a minute.
        self.last = Some((head_seq, Instant::now()));
    }
}

/// Reading the checkpoints failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointReadError {
    /// librdkafka refused the consumer's configuration (a bad `-X` setting, say).
    #[error("cannot create a Kafka consumer for {brokers}")]
    Consumer {
        /// `bootstrap.servers`.
        brokers: String,
        /// librdkafka's reason.
        source: KafkaError,
    },
    /// The brokers did not say which partitions the topic has, or where they end.
    #[error("cannot read the partitions of {CHECKPOINTS_TOPIC} on {brokers}")]
    Metadata {
        /// `bootstrap.servers`.
        brokers: String,
        /// librdkafka's reason.
        source: KafkaError,
    },
    /// The topic does not exist: no checkpoint was ever published there.
    #[error(
        "{CHECKPOINTS_TOPIC} does not exist on {brokers}: no checkpoint was published there (`quota-ledger topics \
         create --brokers {brokers}` creates it for ingest and serve to publish to)"
    )]
    NoTopic {
        /// `bootstrap.servers`.
        brokers: String,
    },
    /// The topic could not be read to its end in time.
    #[error("{CHECKPOINTS_TOPIC} on {brokers} was not read to its end within {READ_TIMEOUT_MS} ms ({left})")]
    Timeout {
        /// `bootstrap.servers`.
        brokers: String,
        /// Which partitions were short, and of what.
        left: String,
    },
    /// Reading a message failed.
    #[error("reading {CHECKPOINTS_TOPIC} on {brokers} failed")]
    Consume {
        /// `bootstrap.servers`.
        brokers: String,
        /// librdkafka's reason.
        source: KafkaError,
    },
}

impl From<Box<crate::whole_topic::WholeTopicError>> for CheckpointReadError {
    fn from(error: Box<crate::whole_topic::WholeTopicError>) -> CheckpointReadError {
        use crate::whole_topic::WholeTopicError as E;
        match *error {
            E::Consumer { brokers, source } => CheckpointReadError::Consumer { brokers, source },
            E::Metadata { brokers, source, .. } => CheckpointReadError::Metadata { brokers, source },
            E::NoTopic { brokers, .. } => CheckpointReadError::NoTopic { brokers },
            E::Timeout { brokers, left, .. } => CheckpointReadError::Timeout { brokers, left },
            E::Consume { brokers, source, .. } => CheckpointReadError::Consume { brokers, source },
        }
    }
}

/// The checkpoints of one ledger found on the topic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerCheckpoints {
    /// This ledger's checkpoints, in the order they were published (by partition, then offset).
    pub checkpoints: Vec<Checkpoint>,
    /// Messages of other ledgers.
    pub others: u64,
    /// Messages under this ledger's key that are not a checkpoint of it (not JSON of the form above).
    pub unreadable: u64,
}

/// Reads the whole checkpoints topic from `brokers`, to the end each partition had when asked, and keeps the
/// checkpoints of `ledger_id`. Its own consumer, in no group: nothing is committed.
pub fn read_checkpoints(
    brokers: &str,
    overrides: &[(String, String)],
    ledger_id: &str,
) -> Result<LedgerCheckpoints, CheckpointReadError> {
    let mut found = LedgerCheckpoints::default();
    let mut by_partition: BTreeMap<i32, Vec<Checkpoint>> = BTreeMap::new();
    let config = crate::config::checkpoint_reader(brokers, overrides);
    crate::whole_topic::read(&config, brokers, CHECKPOINTS_TOPIC, READ_TIMEOUT_MS, |record| {
        if record.key != Some(ledger_id.as_bytes()) {
            found.others += 1;
            return;
        }
        match serde_json::from_slice::<Checkpoint>(record.payload.unwrap_or_default()) {
            Ok(checkpoint) if checkpoint.ledger_id == ledger_id => {
                by_partition.entry(record.partition).or_default().push(checkpoint)
            }
            _ => found.unreadable += 1,
        }
    })?;
    found.checkpoints = by_partition.into_values().flatten().collect();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves a published checkpoint is read back, only under its ledger's key, and that the publisher sends a moved
    // head only once the interval passed, and the last head when it finishes.
    #[test]
    fn checkpoints_are_read_back_by_ledger() {
        let broker = crate::admin::EmbeddedBroker::start(1).unwrap();
        let brokers = broker.bootstrap_servers();
        let mut mine = CheckpointPublisher::new("test", &brokers, &[], "ledger-a").unwrap();
        mine.offer(1, "aa");
        mine.offer(2, "bb"); // moved, but within the interval: not yet
        mine.offer(2, "bb");
        mine.finish(3, "cc");
        let other = CheckpointPublisher::new("test", &brokers, &[], "ledger-b").unwrap();
        other.finish(7, "ff");
        let read = read_checkpoints(&brokers, &[], "ledger-a").unwrap();
        let heads: Vec<(u64, &str)> = read.checkpoints.iter().map(|c| (c.head_seq, c.head_hash.as_str())).collect();
        assert_eq!(heads, [(1, "aa"), (3, "cc")]);
        assert_eq!((read.others, read.unreadable), (1, 0));
        assert!(read.checkpoints.iter().all(|c| c.ledger_id == "ledger-a" && c.at.ends_with('Z')));
    }
}
