//! Creating the topics of contract §2 (brokers such as Tansu do not create topics on first use).

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// How long the broker may take to create the topics.
const CREATE_TIMEOUT_MS: u64 = 30_000;
/// How long the brokers may take to answer at all.
const REACH_TIMEOUT_MS: u64 = 10_000;

/// Creating topics failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdminError {
    /// librdkafka refused the admin client's configuration (a bad `-X` setting, say).
    #[error("cannot create the Kafka admin client for {brokers}")]
    Client {
        /// `bootstrap.servers`.
        brokers: String,
        /// librdkafka's reason.
        source: KafkaError,
    },
    /// No broker answered a request for the topics' metadata.
    #[error("no broker at {brokers} answered within {timeout_ms} ms")]
    Unreachable {
        /// `bootstrap.servers`.
        brokers: String,
        /// How long the request waited.
        timeout_ms: u64,
        /// librdkafka's reason.
        source: KafkaError,
    },
    /// The create request as a whole failed.
    #[error("creating topics on {brokers} failed")]
    Request {
        /// `bootstrap.servers`.
        brokers: String,
        /// librdkafka's reason.
        source: KafkaError,
    },
    /// The broker refused to create one topic.
    #[error("topic {topic}: {code}")]
    Topic {
        /// The topic refused.
        topic: String,
        /// The broker's error code.
        code: RDKafkaErrorCode,
    },
}

/// Creates each topic with `partitions` partitions (replication 1 unless `-X` says otherwise on the broker), but
/// [`crate::routing::ROUTING_TOPIC`] with one, compacted; a topic that already exists is left as it is. Returns the
/// topics created.
pub fn create_topics(
    brokers: &str,
    topics: &[&str],
    partitions: i32,
    overrides: &[(String, String)],
) -> Result<Vec<String>, AdminError> {
    let client: AdminClient<DefaultClientContext> = crate::config::admin(brokers, overrides)
        .create()
        .map_err(|source| AdminError::Client { brokers: brokers.to_string(), source })?;
    // Without a broker, the create request waits a minute in silence and ends as "Timed out" (librdkafka's lines
    // that say why never reach an admin client's caller): the brokers' metadata, asked first, fails sooner.
    let metadata = client.inner().fetch_metadata(None, Duration::from_millis(REACH_TIMEOUT_MS)).map_err(|source| {
        AdminError::Unreachable { brokers: brokers.to_string(), timeout_ms: REACH_TIMEOUT_MS, source }
    })?;
    // Only the missing ones are asked for: a broker that has them all is not asked at all (librdkafka's mock
    // cluster, which has them from the start, let the request time out after a minute).
    let known: Vec<&str> = metadata.topics().iter().map(|t| t.name()).collect();
    let new_topics: Vec<NewTopic<'_>> = topics
        .iter()
        .filter(|t| !known.contains(t))
        .map(|t| match *t {
            // One entry per partition is what the catalog keeps: compacted, and in one partition so that its
            // entries have one order.
            crate::routing::ROUTING_TOPIC => {
                NewTopic::new(t, 1, TopicReplication::Fixed(1)).set("cleanup.policy", "compact")
            }
            _ => NewTopic::new(t, partitions, TopicReplication::Fixed(1)),
        })
        .collect();
    if new_topics.is_empty() {
        return Ok(Vec::new());
    }
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_millis(CREATE_TIMEOUT_MS)));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("a tokio runtime");
    let results = runtime
        .block_on(client.create_topics(&new_topics, &options))
        .map_err(|source| AdminError::Request { brokers: brokers.to_string(), source })?;
    let mut created = Vec::new();
    for result in results {
        match result {
            Ok(topic) => created.push(topic),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((topic, code)) => return Err(AdminError::Topic { topic, code }),
        }
    }
    Ok(created)
}

/// librdkafka's in-process mock cluster (the real Kafka protocol on localhost) with the topics of contract §2: the
/// embedded broker of a first run, the demo and the fast tests. It lives as long as the value.
pub struct EmbeddedBroker {
    cluster: rdkafka::mocking::MockCluster<'static, rdkafka::producer::DefaultProducerContext>,
}

impl EmbeddedBroker {
    /// Starts one mock broker and creates the topics of contract §2 (with `quota.alerts`) and `quota.checkpoints` with `partitions` partitions each,
    /// and `quota.routing` with one (the mock does not compact).
    pub fn start(partitions: i32) -> Result<EmbeddedBroker, KafkaError> {
        let cluster = rdkafka::mocking::MockCluster::new(1)?;
        let checkpoints = [crate::checkpoints::CHECKPOINTS_TOPIC];
        for name in crate::topics::all_default_topic_names().into_iter().chain(checkpoints) {
            cluster.create_topic(name, partitions, 1)?;
        }
        cluster.create_topic(crate::routing::ROUTING_TOPIC, 1, 1)?;
        Ok(EmbeddedBroker { cluster })
    }

    /// `host:port` to give as `--brokers`.
    pub fn bootstrap_servers(&self) -> String {
        self.cluster.bootstrap_servers()
    }
}
