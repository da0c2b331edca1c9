//! Reading a topic whole, as it is now: every partition from its low watermark to the high watermark it had when the
//! read began, by a consumer that assigns the partitions by hand and joins no group. What the checkpoints
//! (`verify --checkpoints-from`) and the schema registry's `_schemas` are read with.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};

/// How long the brokers have to say which partitions a topic has and where they end.
const METADATA_TIMEOUT_MS: u64 = 10_000;

/// A topic could not be read whole.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WholeTopicError {
    /// librdkafka refused the consumer's configuration (a bad `-X` setting, say).
    #[error("cannot create a Kafka consumer for {brokers}")]
    Consumer {
        /// `bootstrap.servers`.
        brokers: String,
        /// librdkafka's reason.
        source: KafkaError,
    },
    /// The brokers did not say which partitions the topic has, or where they end.
    #[error("cannot read the partitions of {topic} on {brokers}")]
    Metadata {
        /// The topic.
        topic: String,
        /// `bootstrap.servers`.
        brokers: String,
        /// librdkafka's reason.
        source: KafkaError,
    },
    /// The topic does not exist.
    #[error("{topic} does not exist on {brokers}")]
    NoTopic {
        /// The topic.
        topic: String,
        /// `bootstrap.servers`.
        brokers: String,
    },
    /// The topic could not be read to its end in time.
    #[error("{topic} on {brokers} was not read to its end within {timeout_ms} ms ({left})")]
    Timeout {
        /// The topic.
        topic: String,
        /// `bootstrap.servers`.
        brokers: String,
        /// The time allowed.
        timeout_ms: u64,
        /// The partitions not read to their end, and how far each got.
        left: String,
    },
    /// A message could not be read.
    #[error("cannot read {topic} from {brokers}")]
    Consume {
        /// The topic.
        topic: String,
        /// `bootstrap.servers`.
        brokers: String,
        /// librdkafka's reason.
        source: KafkaError,
    },
}

/// One message of the topic: its partition, key and payload (`None` for a tombstone).
pub struct Record<'m> {
    /// The partition it is in.
    pub partition: i32,
    /// Its key.
    pub key: Option<&'m [u8]>,
    /// Its value.
    pub payload: Option<&'m [u8]>,
}

/// Reads `topic` whole with a consumer configured by `config` (for `brokers`), giving each message to `on_record` in
/// partition offset order, within `timeout_ms`.
pub fn read(
    config: &ClientConfig,
    brokers: &str,
    topic: &str,
    timeout_ms: u64,
    mut on_record: impl FnMut(Record<'_>),
) -> Result<(), Box<WholeTopicError>> {
    let consumer: BaseConsumer =
        config.create().map_err(|source| WholeTopicError::Consumer { brokers: brokers.to_string(), source })?;
    let metadata_error =
        |source| WholeTopicError::Metadata { topic: topic.to_string(), brokers: brokers.to_string(), source };
    let timeout = Duration::from_millis(METADATA_TIMEOUT_MS);
    let metadata = consumer.fetch_metadata(Some(topic), timeout).map_err(metadata_error)?;
    let partitions: Vec<i32> = match metadata.topics().first() {
        Some(found) if found.error().is_none() && !found.partitions().is_empty() => {
            found.partitions().iter().map(|p| p.id()).collect()
        }
        _ => return Err(Box::new(WholeTopicError::NoTopic { topic: topic.to_string(), brokers: brokers.to_string() })),
    };
    // Where each partition ends now: what is published later is not this read's.
    let mut ends: BTreeMap<i32, (i64, i64)> = BTreeMap::new();
    let mut assignment = TopicPartitionList::new();
    for partition in partitions {
        let (low, high) = consumer.fetch_watermarks(topic, partition, timeout).map_err(metadata_error)?;
        if high > low {
            ends.insert(partition, (low, high));
            let _ = assignment.add_partition_offset(topic, partition, Offset::Offset(low));
        }
    }
    if ends.is_empty() {
        return Ok(());
    }
    let consume_error =
        |source| WholeTopicError::Consume { topic: topic.to_string(), brokers: brokers.to_string(), source };
    consumer.assign(&assignment).map_err(consume_error)?;
    let mut next: BTreeMap<i32, i64> = ends.iter().map(|(p, (low, _))| (*p, *low)).collect();
    let started = Instant::now();
    while ends.iter().any(|(p, (_, high))| next[p] < *high) {
        if started.elapsed() > Duration::from_millis(timeout_ms) {
            let left: Vec<String> = ends
                .iter()
                .filter(|(p, (_, high))| next[p] < *high)
                .map(|(p, (_, high))| format!("partition {p} read to offset {} of {high}", next[p]))
                .collect();
            return Err(Box::new(WholeTopicError::Timeout {
                topic: topic.to_string(),
                brokers: brokers.to_string(),
                timeout_ms,
                left: left.join(", "),
            }));
        }
        let Some(message) = consumer.poll(Duration::from_millis(100)) else { continue };
        let message = message.map_err(consume_error)?;
        next.insert(message.partition(), message.offset() + 1);
        on_record(Record { partition: message.partition(), key: message.key(), payload: message.payload() });
    }
    Ok(())
}
