//! A node's ownership of partitions, in this process: the consumer group's assignments, as ingest sees them, told to
//! `node::Ownership` over the node's shards, as `node::run` wires them, against librdkafka's mock cluster
//! (`kafka::admin::EmbeddedBroker`). `node::run` itself serves until a signal, which a test cannot send to its own
//! process without stopping every other; these are its parts, stopped as `node::run` stops them. Every assertion is
//! on the routing catalog the brokers hold and on what the node's shards answer.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hook::{Code, HookError, HookSettings, Request, Shards};
use ingest::{KafkaIngestSettings, PartitionListener};
use kafka::admin::EmbeddedBroker;
use kafka::producer::KafkaProducer;
use kafka::routing::{RoutingCatalog, RoutingWriter};
use kafka::topics::Topics;
use ledger::Durability;
use ledger::shards::ShardDir;
use node::transitions::{ShardState, Transitions};
use node::{Identity, Ownership};
use schemas::{Event, EventType, Who};

/// The partition count of the test's topics.
const PARTITIONS: u32 = 3;
/// The node's id in the routing catalog.
const NODE_ID: &str = "node-a";
/// Where the node says it answers.
const URL: &str = "http://127.0.0.1:9";
/// How long the node may take to own every partition: a group join and a catch-up per partition.
const OWN_WAIT: Duration = Duration::from_secs(90);

/// org-1's `tokens`: a HARD limit of 10 a day.
const POLICY: &str = r#"{"event_id":"p-tokens","occurred_at":"2026-01-01T00:00:00Z","tenant":"org-1",
    "metric":"tokens","source":"test","policy_id":"tokens-day","version":1,"scope":"TENANT","limit":10,
    "window":"DAY","enforcement":"HARD","effective_from":"2026-01-01T00:00:00Z","burst":null}"#;

/// The group's assignments told to the node's ownership, as `node::run`'s listener tells them.
struct Told(Arc<Ownership>);

impl std::fmt::Debug for Told {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{NODE_ID}")
    }
}

impl PartitionListener for Told {
    fn assigned(&self, partition: u32) {
        self.0.assigned(partition);
    }

    fn revoked(&self, partition: u32) {
        self.0.revoked(partition);
    }
}

/// One node on `broker`: its shards, its ownership, and its ingest in the group, running until [`Node::stop`].
struct Node {
    shards: Arc<Shards>,
    ownership: Arc<Ownership>,
    transitions: Arc<Transitions>,
    stop: Arc<AtomicBool>,
    ingest: std::thread::JoinHandle<Result<ingest::KafkaIngestProgress, ingest::KafkaIngestError>>,
}

impl Node {
    fn start(broker: &EmbeddedBroker, data: &std::path::Path) -> Node {
        let brokers = broker.bootstrap_servers();
        let data = ShardDir::new(data);
        let settings = HookSettings { durability: Durability::Normal, ..HookSettings::default() };
        let shards = Arc::new(Shards::new(data.clone(), PARTITIONS, settings));
        let catalog = Arc::new(RoutingCatalog::follow(&brokers, &[]).expect("the catalog is followed"));
        let writer = RoutingWriter::new(&brokers, &[]).expect("a catalog writer");
        let identity = Identity {
            cluster: "ownership-test".into(),
            node_id: NODE_ID.into(),
            url: URL.into(),
            brokers: brokers.clone(),
            overrides: Vec::new(),
            topics: Topics::defaults(),
            replicated: true,
        };
        let transitions = Arc::new(Transitions::default());
        let ownership =
            Ownership::new(identity, data.clone(), Arc::clone(&shards), catalog, writer, Arc::clone(&transitions));
        let ownership = Arc::new(ownership.expect("the node's ownership"));
        let mut settings = KafkaIngestSettings::new(brokers, node::group_of("ownership-test"));
        settings.publish_checkpoints = false;
        settings.listener = Some(Arc::new(Told(Arc::clone(&ownership))));
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let ingest = std::thread::spawn(move || ingest::ingest_kafka_shards(&data, &settings, &stopped, |_| {}));
        Node { shards, ownership, transitions, stop, ingest }
    }

    /// Stops as `node::run` stops: every partition given up, then ingest.
    fn stop(self) {
        self.ownership.stop();
        self.stop.store(true, Ordering::Relaxed);
        self.ingest.join().expect("ingest did not panic").expect("ingest ended well");
    }
}

/// The partitions the routing catalog on the brokers names `node_id` the owner of.
fn owned_by(broker: &EmbeddedBroker, node_id: &str) -> Vec<u32> {
    let topics = Topics::defaults();
    let (partitions, table) =
        kafka::routing::owners(&broker.bootstrap_servers(), &[], topics.names()).expect("the catalog reads");
    (0..partitions).filter(|p| table.owner(*p).is_some_and(|o| o.node_id == node_id && o.url == URL)).collect()
}

/// org-1's check of `amount` tokens under key `key`.
fn check(key: &str, amount: i64) -> Request {
    Request::one(Who::tenant("org-1"), "tokens", amount, key)
}

// Proves a node given every partition by the group comes to own them all: the catalog on the brokers names it the
// owner of each, its shards serve exactly those, and a check asked as soon as it owns them is decided under the policy
// that was on the topics before it started (allowed within it, refused beyond: the shard caught up before serving);
// once the node stops, it serves no partition.
#[test]
fn a_node_owns_every_partition_and_decides_on_its_shards() {
    let broker = EmbeddedBroker::start(PARTITIONS as i32).expect("a mock broker");
    let policy = Event::from_json(EventType::PolicyEvent, POLICY).expect("a valid policy");
    let mut producer = KafkaProducer::new(&broker.bootstrap_servers(), &[]).expect("a producer");
    let encoded = schemas::Catalog::builtin().encode_single_object(&policy);
    producer.send("quota.policies", "org-1", &encoded).expect("send");
    producer.finish().expect("the policy acknowledged");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let node = Node::start(&broker, dir.path());

    let every: Vec<u32> = (0..PARTITIONS).collect();
    let until = Instant::now() + OWN_WAIT;
    while owned_by(&broker, NODE_ID) != every {
        assert!(
            Instant::now() < until,
            "the node owns {:?} of {every:?} after {OWN_WAIT:?}",
            owned_by(&broker, NODE_ID)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(node.shards.held(), every, "the catalog names it the owner of what it serves");
    let states: Vec<(u32, ShardState)> = node.transitions.now().iter().map(|s| (s.partition, s.state)).collect();
    assert_eq!(states, every.iter().map(|p| (*p, ShardState::Serving)).collect::<Vec<_>>(), "none in transition");

    let allowed = node.shards.check(check("k-1", 8)).expect("the node decides");
    assert_eq!((allowed.code, allowed.remaining, allowed.policy_version), (Code::OK, Some(2), Some(1)), "{allowed:?}");
    let refused = node.shards.check(check("k-2", 5)).expect("the node decides");
    assert_eq!(refused.code, Code::QUOTA_EXCEEDED, "{refused:?}");

    let shards = Arc::clone(&node.shards);
    let transitions = Arc::clone(&node.transitions);
    node.stop();
    assert_eq!(transitions.now(), [], "a stopped node has no shard left, none stuck closing");
    assert_eq!(shards.held(), Vec::<u32>::new(), "a stopped node serves no partition");
    match shards.check(check("k-3", 1)) {
        Err(HookError::NotServing { partition, partitions }) => {
            assert_eq!((partition, partitions), (shards.partition_of("org-1"), PARTITIONS));
        }
        other => panic!("a stopped node should not decide: {other:?}"),
    }
}
