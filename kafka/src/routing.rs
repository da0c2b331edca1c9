//! The routing catalog (`hbase:meta` of a cluster of nodes): which node owns which partition's shard, on the compacted
//! topic [`ROUTING_TOPIC`]. A node writes an entry for each partition Kafka assigns it ([`RoutingWriter::publish`]):
//! key the partition number as text, value [`RoutingEntry`] as JSON, its `epoch` the consumer group's generation at
//! the assignment. The [`RoutingTable`] keeps the latest entry per partition: a higher epoch wins, and of equal epochs
//! the later offset (entries of one partition share a key, so they share one partition of the topic and its order).
//! [`RoutingCatalog::follow`] keeps a table current in a background thread (a node answering `GET /v1/routing`);
//! [`read_routing`] reads the topic once to its end (`quota-ledger route`).
//!
//! ```
//! use kafka::routing::{RoutingCatalog, RoutingEntry, RoutingWriter, ROUTING_TOPIC};
//!
//! let cluster = rdkafka::mocking::MockCluster::new(1).unwrap();
//! cluster.create_topic(ROUTING_TOPIC, 1, 1).unwrap();
//! let brokers = cluster.bootstrap_servers();
//! let mut writer = RoutingWriter::new(&brokers, &[]).unwrap();
//! writer.publish(&RoutingEntry::now(3, "node-a", "http://127.0.0.2:8080", 7)).unwrap();
//! let table = kafka::routing::read_routing(&brokers, &[]).unwrap();
//! assert_eq!(table.owner(3).unwrap().node_id, "node-a");
//! ```

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Message, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};

/// The catalog's topic, compacted where the brokers support it (one entry per partition is what matters).
pub const ROUTING_TOPIC: &str = "quota.routing";
pub use crate::config::ROUTING_PUBLISH_TIMEOUT_MS as PUBLISH_TIMEOUT_MS;
/// How long [`read_routing`] may take to read the topic to its end.
pub const READ_TIMEOUT_MS: u64 = 30_000;
/// How long the brokers may take to list the topic's partitions and their ends.
const METADATA_TIMEOUT_MS: u64 = 10_000;
/// How long the follower's poll waits before it looks at whether it should stop.
const FOLLOW_POLL_MS: u64 = 100;

/// One partition's owner, as published (JSON; key: the partition as text).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoutingEntry {
    /// The partition of the input topics (the shard).
    pub partition: u32,
    /// The owning node's id (`node --node-id`).
    pub node_id: String,
    /// Where the node answers (`node --advertise`): `http://host:port` or `https://...`.
    pub url: String,
    /// The consumer group's generation when the node was assigned the partition: a later assignment has a higher one.
    pub epoch: i64,
    /// When it was published (RFC 3339, UTC).
    pub at: String,
}

impl RoutingEntry {
    /// An entry published now.
    pub fn now(partition: u32, node_id: &str, url: &str, epoch: i64) -> RoutingEntry {
        RoutingEntry {
            partition,
            node_id: node_id.to_string(),
            url: url.to_string(),
            epoch,
            at: schemas::Timestamp::now().to_string(),
        }
    }
}

/// The latest entry of each partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoutingTable {
    /// Per partition: the entry in force and the offset it was read at.
    owners: BTreeMap<u32, (RoutingEntry, i64)>,
}

impl RoutingTable {
    /// Takes `entry`, read at `offset`, if it is newer than the one held: a higher epoch, or the same epoch at a later
    /// offset. Answers whether it was taken.
    pub fn apply(&mut self, entry: RoutingEntry, offset: i64) -> bool {
        let newer = match self.owners.get(&entry.partition) {
            None => true,
            Some((held, held_offset)) => (entry.epoch, offset) > (held.epoch, *held_offset),
        };
        if newer {
            self.owners.insert(entry.partition, (entry, offset));
        }
        newer
    }

    /// The owner of `partition`, if one was recorded.
    pub fn owner(&self, partition: u32) -> Option<&RoutingEntry> {
        self.owners.get(&partition).map(|(entry, _)| entry)
    }

    /// Every entry in force, by partition.
    pub fn entries(&self) -> impl Iterator<Item = &RoutingEntry> {
        self.owners.values().map(|(entry, _)| entry)
    }

    /// Forgets `partition`'s entry (a tombstone read): answers whether one was held.
    pub fn remove(&mut self, partition: u32) -> bool {
        self.owners.remove(&partition).is_some()
    }

    /// How many partitions have an owner recorded.
    pub fn len(&self) -> usize {
        self.owners.len()
    }

    /// Whether no owner is recorded.
    pub fn is_empty(&self) -> bool {
        self.owners.is_empty()
    }

    /// Takes one message of the topic: an entry, or a tombstone (a partition's key without a value, which `catalog
    /// --repair` writes for an entry of no partition of the cluster) that forgets the partition's entry. Anything else
    /// (a foreign message) is skipped and said.
    fn apply_message(&mut self, key: Option<&[u8]>, payload: Option<&[u8]>, offset: i64) {
        let partition = key.and_then(|key| std::str::from_utf8(key).ok()).and_then(|key| key.parse::<u32>().ok());
        match (partition, payload.map(serde_json::from_slice::<RoutingEntry>)) {
            (Some(partition), Some(Ok(entry))) if entry.partition == partition => {
                self.apply(entry, offset);
            }
            (Some(partition), None) => {
                if self.remove(partition) {
                    tracing::info!(
                        partition,
                        offset,
                        topic = ROUTING_TOPIC,
                        "routing: a partition's entry was removed"
                    );
                }
            }
            _ => tracing::warn!(offset, topic = ROUTING_TOPIC, "routing: a message is not a routing entry"),
        }
    }
}

/// Writing or reading the catalog failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RoutingError {
    /// librdkafka refused the client's configuration (a bad `-X` setting, say).
    #[error("cannot create the Kafka client of {ROUTING_TOPIC} for {brokers}")]
    Client {
        /// `bootstrap.servers`.
        brokers: String,
        /// librdkafka's reason.
        source: KafkaError,
    },
    /// The brokers did not acknowledge an entry.
    #[error("the entry of partition {partition} was not acknowledged by {brokers} within {PUBLISH_TIMEOUT_MS} ms")]
    Publish {
        /// `bootstrap.servers`.
        brokers: String,
        /// The entry's partition.
        partition: u32,
        /// librdkafka's reason.
        source: KafkaError,
    },
    /// The brokers did not list the topic or its ends.
    #[error("the brokers at {brokers} did not list {ROUTING_TOPIC}")]
    Metadata {
        /// `bootstrap.servers`.
        brokers: String,
        /// librdkafka's reason.
        source: KafkaError,
    },
    /// The brokers do not have the topic (`quota-ledger topics create` creates it).
    #[error(
        "{ROUTING_TOPIC} does not exist on {brokers} (`quota-ledger topics create --brokers {brokers}` creates it)"
    )]
    NoTopic {
        /// `bootstrap.servers`.
        brokers: String,
    },
    /// Reading failed.
    #[error("reading {ROUTING_TOPIC} from {brokers} failed")]
    Consume {
        /// `bootstrap.servers`.
        brokers: String,
        /// librdkafka's reason.
        source: KafkaError,
    },
    /// The input topics' partition count P is not known (missing topics, counts that differ).
    #[error("the partition count of the input topics on {brokers}: {source}")]
    PartitionCount {
        /// `bootstrap.servers`.
        brokers: String,
        /// Which topics, and their counts.
        source: crate::topics::PartitionCountError,
    },
    /// The topic was not read to its end in time.
    #[error("{ROUTING_TOPIC} was not read to its end within {READ_TIMEOUT_MS} ms from {brokers}")]
    Timeout {
        /// `bootstrap.servers`.
        brokers: String,
    },
}

/// Publishes a node's entries, each waited for.
pub struct RoutingWriter {
    producer: BaseProducer,
    brokers: String,
}

impl RoutingWriter {
    /// A writer to `brokers` (settings: [`crate::config::routing_producer`], `overrides` last).
    pub fn new(brokers: &str, overrides: &[(String, String)]) -> Result<RoutingWriter, RoutingError> {
        let producer = crate::config::routing_producer(brokers, overrides)
            .create()
            .map_err(|source| RoutingError::Client { brokers: brokers.to_string(), source })?;
        Ok(RoutingWriter { producer, brokers: brokers.to_string() })
    }

    /// Publishes `entry` under its partition's key and waits until the brokers acknowledged it.
    pub fn publish(&mut self, entry: &RoutingEntry) -> Result<(), RoutingError> {
        let failed =
            |source| RoutingError::Publish { brokers: self.brokers.clone(), partition: entry.partition, source };
        let key = entry.partition.to_string();
        let body = serde_json::to_vec(entry).expect("an entry serializes");
        self.producer.send(BaseRecord::to(ROUTING_TOPIC).key(&key).payload(&body)).map_err(|(e, _)| failed(e))?;
        self.producer.flush(Duration::from_millis(PUBLISH_TIMEOUT_MS)).map_err(failed)?;
        tracing::info!(
            partition = entry.partition,
            node = %entry.node_id,
            url = %entry.url,
            epoch = entry.epoch,
            "routing: a partition has an owner"
        );
        Ok(())
    }

    /// Publishes a tombstone for `partition` (its key, no value) and waits until the brokers acknowledged it: every
    /// reader forgets the partition's entry, and compaction drops it. Only for an entry no node will ever replace (a
    /// partition the cluster does not have); a partition's owner replaces its entry by publishing a newer one.
    pub fn remove(&mut self, partition: u32) -> Result<(), RoutingError> {
        let failed = |source| RoutingError::Publish { brokers: self.brokers.clone(), partition, source };
        let key = partition.to_string();
        self.producer.send(BaseRecord::<String, [u8]>::to(ROUTING_TOPIC).key(&key)).map_err(|(e, _)| failed(e))?;
        self.producer.flush(Duration::from_millis(PUBLISH_TIMEOUT_MS)).map_err(failed)?;
        tracing::info!(partition, "routing: a partition's entry removed");
        Ok(())
    }
}

/// Publishes one entry with a writer of its own.
pub fn publish_owner(brokers: &str, overrides: &[(String, String)], entry: &RoutingEntry) -> Result<(), RoutingError> {
    RoutingWriter::new(brokers, overrides)?.publish(entry)
}

/// A consumer of the whole topic, assigned every partition from its beginning, and each partition's end now.
fn assigned_reader(
    brokers: &str,
    overrides: &[(String, String)],
) -> Result<(BaseConsumer, BTreeMap<i32, i64>), RoutingError> {
    let consumer: BaseConsumer = crate::config::routing_reader(brokers, overrides)
        .create()
        .map_err(|source| RoutingError::Client { brokers: brokers.to_string(), source })?;
    let metadata_error = |source| RoutingError::Metadata { brokers: brokers.to_string(), source };
    let timeout = Duration::from_millis(METADATA_TIMEOUT_MS);
    let metadata = consumer.fetch_metadata(Some(ROUTING_TOPIC), timeout).map_err(metadata_error)?;
    let partitions: Vec<i32> = match metadata.topics().first() {
        Some(topic) if topic.error().is_none() && !topic.partitions().is_empty() => {
            topic.partitions().iter().map(|p| p.id()).collect()
        }
        _ => return Err(RoutingError::NoTopic { brokers: brokers.to_string() }),
    };
    let mut ends = BTreeMap::new();
    let mut assignment = TopicPartitionList::new();
    for partition in partitions {
        let (_, high) = consumer.fetch_watermarks(ROUTING_TOPIC, partition, timeout).map_err(metadata_error)?;
        ends.insert(partition, high);
        assignment.add_partition_offset(ROUTING_TOPIC, partition, Offset::Beginning).map_err(metadata_error)?;
    }
    consumer.assign(&assignment).map_err(|source| RoutingError::Consume { brokers: brokers.to_string(), source })?;
    Ok((consumer, ends))
}

/// Reads the whole topic to the end each partition had when asked: the table as it stands.
pub fn read_routing(brokers: &str, overrides: &[(String, String)]) -> Result<RoutingTable, RoutingError> {
    let (consumer, ends) = assigned_reader(brokers, overrides)?;
    let mut next: BTreeMap<i32, i64> = ends.keys().map(|p| (*p, 0)).collect();
    let mut table = RoutingTable::default();
    let started = Instant::now();
    while ends.iter().any(|(p, high)| next[p] < *high) {
        if started.elapsed() > Duration::from_millis(READ_TIMEOUT_MS) {
            return Err(RoutingError::Timeout { brokers: brokers.to_string() });
        }
        let Some(message) = consumer.poll(Duration::from_millis(FOLLOW_POLL_MS)) else { continue };
        let message = message.map_err(|source| RoutingError::Consume { brokers: brokers.to_string(), source })?;
        next.insert(message.partition(), message.offset() + 1);
        table.apply_message(message.key(), message.payload(), message.offset());
    }
    Ok(table)
}

/// A tenant's partition and the owner the catalog records for it (`quota-ledger route`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Route {
    /// The tenant.
    pub tenant: String,
    /// P, the input topics' partition count.
    pub partitions: u32,
    /// The tenant's partition: murmur2 of its UTF-8 bytes, made positive, modulo P (contract §9.4).
    pub partition: u32,
    /// Its owner, if one was recorded.
    pub owner: Option<RoutingEntry>,
}

/// Where `tenant`'s requests go: P from the input topics `topics` (they must share one count), the tenant's
/// partition, and its owner in the catalog read to its end.
pub fn route<'a>(
    brokers: &str,
    overrides: &[(String, String)],
    topics: impl IntoIterator<Item = &'a str>,
    tenant: &str,
) -> Result<Route, RoutingError> {
    let (partitions, table) = owners(brokers, overrides, topics)?;
    let partition = schemas::partition::partition_of(tenant, partitions);
    Ok(Route { tenant: tenant.to_string(), partitions, partition, owner: table.owner(partition).cloned() })
}

/// P, the input topics' `topics` common partition count, and the catalog read to its end: who owns each shard of a
/// running cluster (a read across it asks each owner).
pub fn owners<'a>(
    brokers: &str,
    overrides: &[(String, String)],
    topics: impl IntoIterator<Item = &'a str>,
) -> Result<(u32, RoutingTable), RoutingError> {
    let consumer: BaseConsumer = crate::config::routing_reader(brokers, overrides)
        .create()
        .map_err(|source| RoutingError::Client { brokers: brokers.to_string(), source })?;
    let partitions = crate::topics::common_partition_count(consumer.client(), topics)
        .map_err(|source| RoutingError::PartitionCount { brokers: brokers.to_string(), source })?;
    Ok((partitions, read_routing(brokers, overrides)?))
}

/// A table kept current by a background thread that follows the topic; the thread stops when this is dropped.
pub struct RoutingCatalog {
    table: Arc<RwLock<RoutingTable>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl RoutingCatalog {
    /// Starts following the topic at `brokers` from its beginning. Errors are those of starting (no topic, no
    /// brokers); afterwards a failing read is logged and the thread goes on (librdkafka reconnects).
    pub fn follow(brokers: &str, overrides: &[(String, String)]) -> Result<RoutingCatalog, RoutingError> {
        let (consumer, _) = assigned_reader(brokers, overrides)?;
        let table = Arc::new(RwLock::new(RoutingTable::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (shared, stopped) = (Arc::clone(&table), Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name("routing".to_string())
            .spawn(move || follow(&consumer, &shared, &stopped))
            .expect("a thread starts");
        Ok(RoutingCatalog { table, stop, thread: Some(thread) })
    }

    /// The table as read so far.
    pub fn table(&self) -> RoutingTable {
        self.table.read().expect("never poisoned: the follower does not panic holding it").clone()
    }
}

impl Drop for RoutingCatalog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn follow(consumer: &BaseConsumer, table: &RwLock<RoutingTable>, stop: &AtomicBool) {
    let mut said = crate::Said::default();
    while !stop.load(Ordering::Relaxed) {
        match consumer.poll(Duration::from_millis(FOLLOW_POLL_MS)) {
            None => {}
            Some(Ok(message)) => {
                let mut table = table.write().expect("never poisoned: nothing panics holding it");
                table.apply_message(message.key(), message.payload(), message.offset());
            }
            Some(Err(error)) => {
                let reason = error.to_string();
                if said.again(&reason) {
                    tracing::warn!(topic = ROUTING_TOPIC, %reason, "routing: reading the catalog failed; the table may be behind");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(partition: u32, node: &str, epoch: i64) -> RoutingEntry {
        RoutingEntry { partition, node_id: node.to_string(), url: format!("http://{node}"), epoch, at: String::new() }
    }

    #[test]
    fn a_higher_epoch_wins_and_of_equal_epochs_the_later_offset() {
        let mut table = RoutingTable::default();
        assert!(table.apply(entry(0, "a", 5), 10));
        assert!(!table.apply(entry(0, "b", 4), 11), "a lower epoch, even later, loses");
        assert!(table.apply(entry(0, "c", 5), 12), "the same epoch, later");
        assert!(!table.apply(entry(0, "d", 5), 9), "the same epoch, earlier");
        assert!(table.apply(entry(0, "e", 6), 3), "a higher epoch, whatever the offset");
        assert!(table.apply(entry(1, "a", 1), 0));
        assert_eq!(table.owner(0).unwrap().node_id, "e");
        assert_eq!(table.entries().map(|e| e.partition).collect::<Vec<_>>(), [0, 1]);
        assert!(table.owner(2).is_none());
    }

    #[test]
    fn a_tombstone_forgets_its_partition_and_foreign_messages_change_nothing() {
        let mut table = RoutingTable::default();
        let body = serde_json::to_vec(&entry(7, "a", 3)).unwrap();
        table.apply_message(Some(b"7".as_slice()), Some(body.as_slice()), 0);
        table.apply_message(Some(b"8".as_slice()), Some(body.as_slice()), 1);
        table.apply_message(Some(b"x".as_slice()), None, 2);
        assert_eq!(table.owner(7).unwrap().node_id, "a");
        assert!(table.owner(8).is_none(), "an entry under another partition's key is foreign");
        table.apply_message(Some(b"7".as_slice()), None, 3);
        assert!(table.is_empty());
        table.apply_message(Some(b"7".as_slice()), Some(body.as_slice()), 4);
        assert_eq!(table.owner(7).unwrap().epoch, 3, "an entry after the tombstone is taken, whatever its epoch");
    }
}
