//! Which topic carries which record type (contract §2), configurable per type.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use rdkafka::client::{Client, ClientContext};
use schemas::EventType;

/// How long naming the missing topics waits for the brokers' list of topics.
const METADATA_WAIT_MS: u64 = 2_000;

/// The input topics and the record type each carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topics {
    by_name: BTreeMap<String, EventType>,
}

/// A `--topics` entry that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("topic entry {entry:?}: expected KIND=TOPIC with KIND one of usage, decisions, reservations, grants, policies")]
pub struct TopicsError {
    /// The entry as given.
    pub entry: String,
}

/// The kinds of input topic, by the short name used in `--topics`.
pub const INPUT_KINDS: [(&str, EventType); 5] = [
    ("usage", EventType::UsageEvent),
    ("decisions", EventType::DecisionEvent),
    ("reservations", EventType::ReservationEvent),
    ("grants", EventType::GrantEvent),
    ("policies", EventType::PolicyEvent),
];

impl Topics {
    /// The five input topics of contract §2 under their default names.
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

/// Every topic of contract §2 under its default name: the five inputs, then `quota.adjustments`.
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
