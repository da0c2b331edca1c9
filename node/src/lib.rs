//! A node of a quota-ledger cluster (docs/contract.md §9.4; docs/operations.md, "A cluster of nodes: `node`"): one process that
//! joins the cluster's consumer group and, for each partition Kafka assigns it, keeps shard p in its own `--data`
//! directory up to date from partition p of every input topic and serves the hook for the tenants of p; it answers
//! the others 421 naming their owner from the routing catalog (`quota.routing`). Kafka is the whole distributed
//! engine: the group decides who owns what, the brokers fence a previous owner's writes ([`kafka::fence`]), and the
//! topics are the truth every shard is rebuilt from. No membership or consensus of our own.
//!
//! With durability replicated (the default) the hook publishes each group's events to their topics, acknowledged by
//! every in-sync replica, before it records and answers them ([`hook::replicate`]): a node may die with its disk and
//! lose nothing a caller was told.

#![deny(missing_docs)]

mod ownership;
mod publisher;
pub mod standby;
pub mod transitions;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use hook::{HookSettings, Shards};
use ingest::{KafkaIngestError, KafkaIngestSettings};
use kafka::routing::{RoutingCatalog, RoutingError, RoutingWriter};
use kafka::topics::{ClientRole, PartitionCountError, Topics};
use ledger::shards::ShardDir;
use rdkafka::consumer::{BaseConsumer, Consumer};
use schemas::EventType;
use serve::{Listening, ServeError, ServeSettings};

pub use ownership::{Identity, Ownership};
pub use publisher::FencedPublisher;
pub use standby::Standby;

/// How a node is run (`quota-ledger node`).
#[derive(Debug, Clone)]
pub struct NodeSettings {
    /// The directory of this node's shards.
    pub data: ShardDir,
    /// Kafka bootstrap servers.
    pub brokers: String,
    /// The cluster's name (its consumer group is `quota-ledger-cluster-NAME`); by default the Kafka cluster's id, so
    /// that every node of one Kafka cluster joins the same group without being told.
    pub cluster: Option<String>,
    /// This node's id in the routing catalog.
    pub node_id: String,
    /// The URL clients reach this node at (`--advertise`): `https://` when the node serves TLS.
    pub advertise: String,
    /// Listening, tokens, TLS and the hook's settings: as `serve`'s.
    pub serve: ServeSettings,
    /// Publish each group through the shard's fence before recording it (durability replicated).
    pub replicated: bool,
    /// The input topics.
    pub topics: Topics,
    /// librdkafka settings (`-X key=value`).
    pub overrides: Vec<(String, String)>,
    /// Warm copies of each partition's shard kept on other nodes (`--standby N`; [`standby`]): 0 for none.
    pub standby: usize,
}

/// How long a standby whose ingest stopped waits before it starts again.
const STANDBY_RESTART_MS: u64 = 5_000;

/// A node could not start, or stopped on an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// The input topics' partition count could not be read or differs between topics.
    #[error("cannot learn the partition count of the input topics")]
    Partitions(#[source] PartitionCountError),
    /// No Kafka cluster id and no `--cluster` name.
    #[error("the brokers at {brokers} did not give their cluster id; name the cluster with --cluster")]
    ClusterId {
        /// Kafka bootstrap servers.
        brokers: String,
    },
    /// A Kafka client could not be made.
    #[error("cannot create a Kafka client for {brokers}: {reason}")]
    Client {
        /// Kafka bootstrap servers.
        brokers: String,
        /// librdkafka's reason.
        reason: String,
    },
    /// The routing catalog could not be read or written.
    #[error(transparent)]
    Routing(#[from] RoutingError),
    /// Ingest stopped.
    #[error("ingest stopped")]
    Ingest(#[source] KafkaIngestError),
    /// The HTTP server stopped on an error.
    #[error(transparent)]
    Serve(#[from] ServeError),
    /// The node serves TLS but would advertise a plain `http://` URL.
    #[error(
        "--advertise {url} is not an https:// URL, but this node serves TLS (--tls-cert): clients following the routing \
         catalog would speak plain HTTP to it"
    )]
    AdvertisedInClear {
        /// The URL given.
        url: String,
    },
}

/// The consumer group of cluster `cluster`.
pub fn group_of(cluster: &str) -> String {
    format!("quota-ledger-cluster-{cluster}")
}

/// Runs the node until SIGTERM or Ctrl-C (or an error): `listening` is told where it listens.
pub fn run(settings: NodeSettings, listening: impl FnOnce(Listening) -> std::io::Result<()>) -> Result<(), NodeError> {
    // The catalog is how clients find a node: a node serving TLS recorded at an http:// URL would be sent plain
    // requests (bearer tokens in clear) that it refuses. A plain node advertised at https:// is left alone: a
    // TLS-terminating proxy in front of it is what --insecure-listen is for.
    if settings.serve.tls.is_some() && !settings.advertise.starts_with("https://") {
        return Err(NodeError::AdvertisedInClear { url: settings.advertise.clone() });
    }
    let brokers = settings.brokers.clone();
    let overrides = settings.overrides.clone();
    let partitions =
        kafka::topics::common_partition_count_at(&brokers, &overrides, ClientRole::Consumer, &settings.topics)
            .map_err(NodeError::Partitions)?;
    let cluster = match settings.cluster.clone() {
        Some(cluster) => cluster,
        None => cluster_id(&brokers, &overrides)?,
    };
    let group = group_of(&cluster);
    tracing::info!(
        node = %settings.node_id,
        %cluster,
        %group,
        partitions,
        shards = %settings.data.dir().display(),
        durability = if settings.replicated { "replicated" } else { "local" },
        "node: starting"
    );
    // The node's figures: its server's, with the stages of its shards' decisions, beside its ingest's.
    let mut registry = telemetry::registry();
    let hook_metrics = serve::metrics::HookMetrics::register(&mut registry);
    let hook_settings = HookSettings { stages: Some(serve::stage_timer(&hook_metrics)), ..settings.serve.hook.clone() };
    let shards = Arc::new(Shards::new(settings.data.clone(), partitions, hook_settings));
    let catalog = Arc::new(RoutingCatalog::follow(&brokers, &overrides)?);
    let writer = RoutingWriter::new(&brokers, &overrides)?;
    let identity = Identity {
        cluster,
        node_id: settings.node_id.clone(),
        url: settings.advertise.clone(),
        brokers: brokers.clone(),
        overrides: overrides.clone(),
        topics: settings.topics.clone(),
        replicated: settings.replicated,
    };
    let transitions = Arc::new(transitions::Transitions::default());
    registry.register_collector(Box::new(Arc::clone(&transitions)));
    let ownership = Arc::new(
        Ownership::new(
            identity,
            settings.data.clone(),
            Arc::clone(&shards),
            Arc::clone(&catalog),
            writer,
            Arc::clone(&transitions),
        )
        .map_err(|e| NodeError::Client { brokers: brokers.clone(), reason: e.to_string() })?,
    );

    let standby = (settings.standby > 0).then(|| {
        let metrics = ingest::metrics::StandbyMetrics::register(&mut registry);
        let catalog = Arc::clone(&catalog);
        Arc::new(Standby::new(&settings.node_id, settings.standby, catalog, metrics, &settings.topics))
    });
    let mut ingest = KafkaIngestSettings::new(brokers.clone(), group.clone());
    ingest.topics = settings.topics.clone();
    ingest.overrides = overrides.clone();
    ingest.publish_checkpoints = false;
    let mut standby_ingest = ingest.clone();
    // `POST /v1/admin/drain`: the group consumer leaves the group (the standby's is in none), and the node runs on
    // answering 421 until it is stopped.
    let drain = Arc::new(std::sync::atomic::AtomicBool::new(false));
    ingest.leave_group = Some(Arc::clone(&drain));
    ingest.listener =
        Some(Arc::new(ownership::Listener { ownership: Arc::clone(&ownership), standby: standby.clone() }));
    let ingest_metrics = ingest::metrics::IngestMetrics::register(&mut registry);
    ingest.lag_listener = Some(ingest_metrics.clone());
    let stop_ingest = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (ended_tx, ended_rx) = tokio::sync::oneshot::channel::<String>();
    let ingest_thread = {
        let dir = settings.data.clone();
        let stop = Arc::clone(&stop_ingest);
        std::thread::Builder::new()
            .name("node-ingest".into())
            .spawn(move || {
                let ran =
                    ingest::ingest_kafka_shards(&dir, &ingest, &stop, |progress| ingest_metrics.observe(progress));
                let why = match &ran {
                    Ok(_) => "ingest ended".to_string(),
                    Err(error) => format!("ingest stopped: {}", ledger::causes(error)),
                };
                drop(ended_tx.send(why));
                ran
            })
            .map_err(|e| NodeError::Client { brokers: brokers.clone(), reason: e.to_string() })?
    };
    let standby_thread = match standby {
        None => None,
        Some(standby) => {
            // Never a member of the group: a group of its own name, which it never joins, assigning by hand.
            standby_ingest.group = format!("{group}-standby-{}", settings.node_id);
            standby_ingest.standing = Some(Arc::clone(&standby) as Arc<dyn ingest::Standing>);
            standby_ingest.lag_listener = Some(standby.metrics() as Arc<dyn ingest::LagListener>);
            let dir = settings.data.clone();
            let stop = Arc::clone(&stop_ingest);
            let spawned = std::thread::Builder::new()
                .name("node-standby".into())
                .spawn(move || keep_standby(&dir, &standby_ingest, &standby, &stop));
            Some(spawned.map_err(|e| NodeError::Client { brokers: brokers.clone(), reason: e.to_string() })?)
        }
    };
    let stop: serve::StopAsked = Box::pin(async move { ended_rx.await.unwrap_or_else(|_| "ingest ended".into()) });
    let routing = Arc::new(CatalogView {
        catalog: Arc::clone(&catalog),
        partitions,
        transitions,
        ownership: Arc::clone(&ownership),
        drain,
    });
    // `POST /v1/events` sends to the usage topic this cluster ingests, from any node: the partitioner, not the node
    // that takes the request, decides which shard records it.
    let topic = settings.topics.topic_of(EventType::UsageEvent).unwrap_or(EventType::UsageEvent.default_topic());
    let events_to =
        serve::EventsTo { brokers: brokers.clone(), overrides: overrides.clone(), topic: topic.to_string() };
    let serve_settings = ServeSettings { events_to: Some(events_to), ..settings.serve.clone() };
    let served = serve::run_node(Arc::clone(&shards), routing, serve_settings, listening, stop, registry, hook_metrics);
    ownership.stop();
    stop_ingest.store(true, std::sync::atomic::Ordering::Relaxed);
    let ingested = ingest_thread.join().unwrap_or_else(|_| Ok(Default::default()));
    if let Some(thread) = standby_thread {
        let _ = thread.join();
    }
    served?;
    ingested.map(|_| ()).map_err(NodeError::Ingest)
}

/// Runs the standby's ingest until `stop`: one that stops on an error (a copy that cannot be opened, brokers gone) is
/// said and started again, since the node serves its own shards without it.
fn keep_standby(dir: &ShardDir, settings: &KafkaIngestSettings, standby: &Standby, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        let ran = ingest::ingest_kafka_shards(dir, settings, stop, |_| {});
        standby.stopped();
        if let Err(error) = ran {
            tracing::warn!(
                error = %ledger::causes(&error),
                restart_ms = STANDBY_RESTART_MS,
                "node: the standby stopped; starting it again"
            );
            let until = std::time::Instant::now() + std::time::Duration::from_millis(STANDBY_RESTART_MS);
            while !stop.load(Ordering::Relaxed) && std::time::Instant::now() < until {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
    }
}

/// The Kafka cluster's id, which names the cluster by default.
fn cluster_id(brokers: &str, overrides: &[(String, String)]) -> Result<String, NodeError> {
    let client: BaseConsumer = kafka::config::routing_reader(brokers, overrides)
        .create()
        .map_err(|e| NodeError::Client { brokers: brokers.to_string(), reason: e.to_string() })?;
    client
        .client()
        .fetch_cluster_id(std::time::Duration::from_secs(10))
        .filter(|id| !id.is_empty())
        .ok_or_else(|| NodeError::ClusterId { brokers: brokers.to_string() })
}

/// The routing catalog as `serve` shows it.
struct CatalogView {
    catalog: Arc<RoutingCatalog>,
    partitions: u32,
    transitions: Arc<transitions::Transitions>,
    ownership: Arc<Ownership>,
    /// Set by `POST /v1/admin/drain`: ingest leaves the consumer group.
    drain: Arc<std::sync::atomic::AtomicBool>,
}

impl serve::Routing for CatalogView {
    fn shard_states(&self) -> serde_json::Value {
        serde_json::to_value(self.transitions.now()).unwrap_or_default()
    }

    fn drain(&self) -> bool {
        let already = self.drain.swap(true, std::sync::atomic::Ordering::Relaxed);
        if !already {
            tracing::info!("node: draining: leaving the consumer group, as asked");
        }
        true
    }

    fn draining(&self) -> bool {
        self.drain.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn claim(&self, partition: u32) -> Result<i64, serve::ClaimRefused> {
        self.ownership.claim(partition)
    }

    fn owner_url(&self, partition: u32) -> Option<String> {
        self.catalog.table().owner(partition).map(|owner| owner.url.clone())
    }

    fn table(&self) -> serde_json::Value {
        let table = self.catalog.table();
        let owners: Vec<serde_json::Value> = table
            .entries()
            .map(
                |o| serde_json::json!({"partition": o.partition, "node_id": o.node_id, "url": o.url, "epoch": o.epoch}),
            )
            .collect();
        serde_json::json!({"partitions": self.partitions, "owners": owners})
    }
}
