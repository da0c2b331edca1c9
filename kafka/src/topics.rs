//! Which topic carries which record type (contract §2), configurable per type.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use rdkafka::client::{Client, ClientContext};
use schemas::EventType;

/// How long naming the missing topics, or their partition counts, waits for the brokers' list of topics.
pub const METADATA_WAIT_MS: u64 = 2_000;

/// The input topics and the record type each carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topics {
    by_name: BTreeMap<String, EventType>,
}

/// A `--topics` entry that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "topic entry {entry:?}: expected KIND=TOPIC with KIND one of usage, decisions, reservations, grants, policies, alerts"
)]
pub struct TopicsError {
    /// The entry as given.
    pub entry: String,
}

/// The kinds of input topic, by the short name used in `--topics`. Alerts are read back as decisions are: what a
/// hook records, its outbox publishes, and a ledger of the topics holds it too.
pub const INPUT_KINDS: [(&str, EventType); 6] = [
    ("usage", EventType::UsageEvent),
    ("decisions", EventType::DecisionEvent),
    ("reservations", EventType::ReservationEvent),
    ("grants", EventType::GrantEvent),
    ("policies", EventType::PolicyEvent),
    ("alerts", EventType::AlertEvent),
];

impl Topics {
    /// The six input topics of contract §2 under their default names.
    pub fn defaults() -> Topics {
        Topics { by_name: INPUT_KINDS.iter().map(|(_, t)| (t.default_topic().to_string(), *t)).collect() }
    }

    /// Parses `KIND=TOPIC` entries (`usage=quota.usage`); only the given topics are consumed.
    pub fn parse(entries: &[String]) -> Result<Topics, TopicsError> {
        let mut by_name = BTreeMap::new();
        for entry in entries {
            let error = || TopicsError { entry: entry.clone() };
            let (kind, name) = entry.split_once('=').ok_or_else(error)?;
            let (_, event_type) = INPUT_KINDS.iter().find(|(k, _)| *k == kind).ok_or_else(error)?;
            if name.is_empty() {
                return Err(error());
            }
            by_name.insert(name.to_string(), *event_type);
        }
        Ok(Topics { by_name })
    }

    /// The record type a topic carries.
    pub fn event_type(&self, topic: &str) -> Option<EventType> {
        self.by_name.get(topic).copied()
    }

    /// The topics' names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.by_name.keys().map(String::as_str).collect()
    }

    /// The topic carrying a record type, if consumed.
    pub fn topic_of(&self, event_type: EventType) -> Option<&str> {
        self.by_name.iter().find(|(_, t)| **t == event_type).map(|(n, _)| n.as_str())
    }
}

/// Every topic of contract §2 under its default name: the six inputs, then `quota.adjustments`.
pub fn all_default_topic_names() -> Vec<&'static str> {
    INPUT_KINDS.iter().map(|(_, t)| t.default_topic()).chain([EventType::AdjustmentEvent.default_topic()]).collect()
}

impl fmt::Display for Topics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.names().join(","))
    }
}

/// Which of `wanted` the brokers do not have, if they answer. On a broker that does not create topics (Tansu), a
/// missing topic shows to a producer only as messages that time out, the same error as an outage, and to a
/// consumer as "Unknown topic or partition" without its name.
pub fn missing_topics<'a, C: ClientContext>(
    client: &Client<C>,
    wanted: impl IntoIterator<Item = &'a str>,
) -> Option<BTreeSet<String>> {
    let metadata = client.fetch_metadata(None, Duration::from_millis(METADATA_WAIT_MS)).ok()?;
    // Listed is there, even while its partitions have no leader: a broker lists every topic it has.
    let known: BTreeSet<&str> = metadata.topics().iter().map(|t| t.name()).collect();
    Some(wanted.into_iter().filter(|t| !known.contains(t)).map(str::to_string).collect())
}

/// Names topics the brokers at `brokers` do not have, and how to create them.
pub fn missing_topics_message(missing: &BTreeSet<String>, brokers: &str) -> String {
    format!(
        "{} {} not exist on {brokers} (`quota-ledger topics create --brokers {brokers}` creates them; with \
         `--topics KIND=TOPIC,...` under other names)",
        missing.iter().map(String::as_str).collect::<Vec<_>>().join(", "),
        if missing.len() == 1 { "does" } else { "do" },
    )
}

/// The input topics do not share one partition count P (contract §9.4), or the brokers did not say.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PartitionCountError {
    /// librdkafka refused the client's configuration (a bad `-X` setting, say).
    #[error("cannot create a Kafka client for {brokers}: {reason}")]
    Client {
        /// `bootstrap.servers`.
        brokers: String,
        /// librdkafka's reason.
        reason: String,
    },
    /// The brokers did not answer the request for the topics' metadata.
    #[error("the brokers did not list the topics' partitions within {timeout_ms} ms")]
    Unanswered {
        /// How long the request waited.
        timeout_ms: u64,
    },
    /// Topics the brokers do not have.
    #[error("no such topic: {}", .0.iter().map(String::as_str).collect::<Vec<_>>().join(", "))]
    Missing(BTreeSet<String>),
    /// The topics' partition counts differ: a tenant would hash to different partitions on each.
    #[error(
        "the input topics must have one partition count (a tenant's partition is murmur2(tenant) % P on every \
         topic), but {}",
        .0.iter().map(|(topic, count)| format!("{topic} has {count}")).collect::<Vec<_>>().join(", ")
    )]
    Mismatch(BTreeMap<String, u32>),
}

/// The partition count P that every topic of `topics` shares, as the brokers list them.
pub fn common_partition_count<'a, C: ClientContext>(
    client: &Client<C>,
    topics: impl IntoIterator<Item = &'a str>,
) -> Result<u32, PartitionCountError> {
    let metadata = client
        .fetch_metadata(None, Duration::from_millis(METADATA_WAIT_MS))
        .map_err(|_| PartitionCountError::Unanswered { timeout_ms: METADATA_WAIT_MS })?;
    let listed: BTreeMap<&str, u32> =
        metadata.topics().iter().map(|t| (t.name(), t.partitions().len() as u32)).collect();
    let mut counts = BTreeMap::new();
    let mut missing = BTreeSet::new();
    for topic in topics {
        match listed.get(topic) {
            Some(count) if *count > 0 => {
                counts.insert(topic.to_string(), *count);
            }
            _ => {
                missing.insert(topic.to_string());
            }
        }
    }
    if !missing.is_empty() {
        return Err(PartitionCountError::Missing(missing));
    }
    let distinct: BTreeSet<u32> = counts.values().copied().collect();
    match distinct.len() {
        1 => Ok(*distinct.first().expect("one count")),
        0 => Err(PartitionCountError::Missing(BTreeSet::new())),
        _ => Err(PartitionCountError::Mismatch(counts)),
    }
}

/// [`common_partition_count`] asked of `brokers` by a client of its own, a consumer or a producer (`role`) with the
/// settings of [`crate::config`] and `overrides` (the command's `-X`, so that they apply and none is out of place):
/// for the commands that check the input topics before they start (`ingest --brokers`, `serve --brokers`).
pub fn common_partition_count_at(
    brokers: &str,
    overrides: &[(String, String)],
    role: ClientRole,
    topics: &Topics,
) -> Result<u32, PartitionCountError> {
    let refused = |error: rdkafka::error::KafkaError| PartitionCountError::Client {
        brokers: brokers.to_string(),
        reason: error.to_string(),
    };
    match role {
        ClientRole::Consumer => {
            use rdkafka::consumer::Consumer;
            // No group is joined: the id is librdkafka's requirement only.
            let config = crate::config::consumer(brokers, "quota-ledger-partition-check", overrides);
            let consumer: rdkafka::consumer::BaseConsumer<CheckContext> =
                config.create_with_context(CheckContext).map_err(refused)?;
            common_partition_count(consumer.client(), topics.names())
        }
        ClientRole::Producer => {
            use rdkafka::producer::Producer;
            // Metadata only: an idempotent producer would ask the brokers for a producer id, which they keep.
            let mut config = crate::config::producer(brokers, overrides);
            config.set("enable.idempotence", "false");
            let producer: rdkafka::producer::BaseProducer<CheckContext> =
                config.create_with_context(CheckContext).map_err(refused)?;
            common_partition_count(producer.client(), topics.names())
        }
    }
}

/// The check's client: librdkafka's lines (brokers away, say) at debug level only, since the command's own client
/// says the same moments later, naming itself.
struct CheckContext;

impl ClientContext for CheckContext {
    fn log(&self, _: rdkafka::config::RDKafkaLogLevel, facility: &str, message: &str) {
        tracing::debug!(target: "librdkafka", facility, "partition check: librdkafka: {message}");
    }
}

impl rdkafka::consumer::ConsumerContext for CheckContext {}

impl rdkafka::producer::ProducerContext for CheckContext {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &rdkafka::producer::DeliveryResult<'_>, _: ()) {}
}

/// Which kind of client [`common_partition_count_at`] makes of a configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientRole {
    /// A consumer's settings (`ingest`).
    Consumer,
    /// A producer's settings (the outbox of `serve`).
    Producer,
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::consumer::Consumer;

    fn client(brokers: &str) -> rdkafka::consumer::BaseConsumer {
        rdkafka::ClientConfig::new().set("bootstrap.servers", brokers).create().unwrap()
    }

    #[test]
    fn one_partition_count_or_the_topics_named() {
        let cluster = rdkafka::mocking::MockCluster::new(1).unwrap();
        for (topic, partitions) in [("a", 6), ("b", 6), ("c", 4)] {
            cluster.create_topic(topic, partitions, 1).unwrap();
        }
        let consumer = client(&cluster.bootstrap_servers());
        assert_eq!(common_partition_count(consumer.client(), ["a", "b"]), Ok(6));
        let mismatch = common_partition_count(consumer.client(), ["a", "b", "c"]).unwrap_err();
        assert_eq!(
            mismatch.to_string(),
            "the input topics must have one partition count (a tenant's partition is murmur2(tenant) % P on every \
             topic), but a has 6, b has 6, c has 4"
        );
        assert!(matches!(
            common_partition_count(consumer.client(), ["a", "nope"]),
            Err(PartitionCountError::Missing(missing)) if missing.contains("nope")
        ));
    }
}
