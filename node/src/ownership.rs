//! What a node does when Kafka gives it a partition, and when Kafka takes it back (docs/decisions.md,
//! "Nodes").
//!
//! Given partition p: acquire the shard's fence (durability replicated: the previous owner's publishes are refused
//! by the brokers from now on), note the input topics' ends *after* that, let ingest bring shard p up to them (what
//! the previous owner published is then in the shard), start the hook for p and record the ownership in the routing
//! catalog. Until then a request for p is answered 421 naming the catalog's owner. Taken back: stop answering for p
//! at once, let the requests in flight finish, and let ingest close the shard.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hook::{Replicate, Shards};
use kafka::fence::ShardFence;
use kafka::routing::{RoutingCatalog, RoutingEntry, RoutingWriter};
use kafka::topics::Topics;
use ledger::shards::ShardDir;
use outbox::OutboxTopics;
use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::publisher::FencedPublisher;
use crate::standby::Standby;
use crate::transitions::{ShardState, Transitions};

/// How often a partition being caught up compares its shard's offsets with the topics' ends.
const CATCH_UP_LOOK_MS: u64 = 50;
/// How long a shard's offsets stay below the topics' ends before the node looks whether anything is left there.
const STILL_MS: u64 = 1_000;
/// How long that look waits for a message.
const LOOK_WAIT_MS: u64 = 500;
/// How long a broker request (the topics' ends) may take.
const BROKER_WAIT_MS: u64 = 10_000;
/// How long a revoked partition's hook may take to answer what it was given and close the shard.
const CLOSE_WAIT_MS: u64 = 10_000;

/// Who this node is and where it writes.
#[derive(Clone)]
pub struct Identity {
    /// The cluster's name: the consumer group and the fences' transactional ids are named after it.
    pub cluster: String,
    /// `--node-id`.
    pub node_id: String,
    /// `--advertise`: the URL clients reach this node at.
    pub url: String,
    /// Kafka bootstrap servers.
    pub brokers: String,
    /// `-X` settings.
    pub overrides: Vec<(String, String)>,
    /// The input topics.
    pub topics: Topics,
    /// Whether each shard's groups are published through its fence before they are recorded.
    pub replicated: bool,
}

/// The partitions of a node (see the module).
pub struct Ownership {
    identity: Identity,
    dir: ShardDir,
    shards: Arc<Shards>,
    catalog: Arc<RoutingCatalog>,
    writer: Mutex<RoutingWriter>,
    /// Each assignment's number: a catch-up of an assignment since revoked gives up.
    assignments: AtomicU64,
    current: Mutex<BTreeMap<u32, u64>>,
    /// The ends of the input topics are asked through this client (no group).
    watermarks: BaseConsumer,
    stopping: AtomicBool,
    /// Each shard's state and since when.
    transitions: Arc<Transitions>,
}

impl Ownership {
    /// The node's partitions: none yet.
    pub fn new(
        identity: Identity,
        dir: ShardDir,
        shards: Arc<Shards>,
        catalog: Arc<RoutingCatalog>,
        writer: RoutingWriter,
        transitions: Arc<Transitions>,
    ) -> Result<Ownership, rdkafka::error::KafkaError> {
        // The log's true end, not the last stable offset: a broker that fences by the epoch alone keeps the owner's
        // transaction open, and its last stable offset stays at that transaction's first record.
        let mut config = kafka::config::routing_reader(&identity.brokers, &identity.overrides);
        config.set("isolation.level", "read_uncommitted");
        let watermarks: BaseConsumer = config.create()?;
        Ok(Ownership {
            identity,
            dir,
            shards,
            catalog,
            writer: Mutex::new(writer),
            assignments: AtomicU64::new(0),
            current: Mutex::new(BTreeMap::new()),
            watermarks,
            stopping: AtomicBool::new(false),
            transitions,
        })
    }

    /// Kafka gave this node `partition` (ingest has opened its shard): fence, then catch up and serve in the
    /// background.
    pub fn assigned(self: &Arc<Self>, partition: u32) {
        let number = self.assignments.fetch_add(1, Ordering::Relaxed) + 1;
        self.current.lock().unwrap_or_else(|e| e.into_inner()).insert(partition, number);
        // Acquired here, in the rebalance, before the topics' ends are read: whatever the previous owner published
        // before it was fenced is below those ends, and nothing after.
        let publisher: Option<Box<dyn Replicate>> = if self.identity.replicated {
            self.transitions.enter(partition, ShardState::Fencing);
            match ShardFence::acquire(
                &self.identity.brokers,
                &self.identity.cluster,
                partition,
                &self.identity.overrides,
            ) {
                Ok(fence) => Some(Box::new(FencedPublisher::new(fence, OutboxTopics::defaults()))),
                Err(error) => {
                    tracing::error!(partition, %error, "node: cannot acquire a shard's fence; not serving it");
                    self.transitions.enter(partition, ShardState::FailedOpen);
                    return;
                }
            }
        } else {
            None
        };
        self.transitions.enter(partition, ShardState::CatchingUp);
        let ownership = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name(format!("catch-up-{partition}"))
            .spawn(move || ownership.catch_up_then_serve(partition, number, publisher));
        if let Err(error) = spawned {
            tracing::error!(partition, %error, "node: cannot start a shard's catch-up; not serving it");
            self.transitions.enter(partition, ShardState::FailedOpen);
        }
    }

    /// Kafka takes `partition` back: stop answering for it at once; its hook answers what it was given and closes
    /// the shard before ingest closes it.
    pub fn revoked(&self, partition: u32) {
        self.current.lock().unwrap_or_else(|e| e.into_inner()).remove(&partition);
        self.transitions.enter(partition, ShardState::Closing);
        if let Some(stopped) = self.shards.remove(partition)
            && !stopped.wait(Duration::from_millis(CLOSE_WAIT_MS))
        {
            tracing::warn!(partition, wait_ms = CLOSE_WAIT_MS, "node: a shard's hook had not closed it in time");
        }
        self.transitions.leave(partition);
    }

    /// Stops every partition (the node is stopping).
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Relaxed);
        for partition in self.shards.held() {
            self.revoked(partition);
        }
    }

    fn still_assigned(&self, partition: u32, number: u64) -> bool {
        !self.stopping.load(Ordering::Relaxed)
            && self.current.lock().unwrap_or_else(|e| e.into_inner()).get(&partition) == Some(&number)
    }

    /// `partition` is in `state` from now, if assignment `number` still holds it: a state entered after the partition
    /// was revoked would stay behind as a transition that never ends.
    fn enter_if_current(&self, partition: u32, number: u64, state: ShardState) {
        let current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if !self.stopping.load(Ordering::Relaxed) && current.get(&partition) == Some(&number) {
            self.transitions.enter(partition, state);
        }
    }

    fn catch_up_then_serve(&self, partition: u32, number: u64, publisher: Option<Box<dyn Replicate>>) {
        let started = Instant::now();
        let ends = match self.ends(partition) {
            Ok(ends) => ends,
            Err(error) => {
                tracing::error!(partition, %error, "node: cannot read the topics' ends; not serving the shard");
                self.enter_if_current(partition, number, ShardState::FailedOpen);
                return;
            }
        };
        let mut last: Option<(BTreeMap<String, i64>, Instant)> = None;
        loop {
            if !self.still_assigned(partition, number) {
                return;
            }
            match self.stored(partition) {
                Ok(stored) if ends.iter().all(|(topic, end)| stored.get(topic).copied().unwrap_or(0) >= *end) => break,
                // Below an end but still for a while: only transaction markers may be left there (consumers never
                // see them, so ingest stores no offset past them). Caught up when nothing is left to read.
                Ok(stored) => match &last {
                    Some((before, since)) if *before == stored => {
                        if since.elapsed() >= Duration::from_millis(STILL_MS)
                            && self.nothing_left(partition, &stored, &ends)
                        {
                            break;
                        }
                    }
                    _ => last = Some((stored, Instant::now())),
                },
                Err(error) => tracing::warn!(partition, %error, "node: reading a shard's offsets failed"),
            }
            std::thread::sleep(Duration::from_millis(CATCH_UP_LOOK_MS));
        }
        self.enter_if_current(partition, number, ShardState::Opening);
        if let Err(error) = self.shards.add_replicated(partition, publisher) {
            tracing::error!(partition, %error, "node: cannot start a shard's hook; not serving it");
            self.enter_if_current(partition, number, ShardState::FailedOpen);
            return;
        }
        if !self.still_assigned(partition, number) {
            self.shards.remove(partition);
            return;
        }
        // Its hook answers from here; the catalog tells clients next.
        self.enter_if_current(partition, number, ShardState::Serving);
        let epoch = match self.record_owner(partition) {
            Ok(epoch) => epoch,
            Err(error) => {
                tracing::error!(partition, %error, "node: recording a shard's ownership in the catalog failed");
                0
            }
        };
        tracing::info!(
            partition,
            caught_up_ms = started.elapsed().as_millis() as u64,
            epoch,
            "node: serving a partition"
        );
    }

    /// Records in the catalog that this node owns `partition`, at an epoch above the entry it holds now: answers the
    /// epoch.
    fn record_owner(&self, partition: u32) -> Result<i64, kafka::routing::RoutingError> {
        let epoch = self.catalog.table().owner(partition).map_or(1, |owner| owner.epoch + 1);
        let entry = RoutingEntry::now(partition, &self.identity.node_id, &self.identity.url, epoch);
        self.writer.lock().unwrap_or_else(|e| e.into_inner()).publish(&entry)?;
        Ok(epoch)
    }

    /// Records `partition` in the catalog again if this node serves it (`catalog --repair`, for an entry that names
    /// another node or none): the epoch published, or why not.
    pub fn claim(&self, partition: u32) -> Result<i64, serve::ClaimRefused> {
        let serving = self.transitions.now().iter().any(|s| s.partition == partition && s.state == ShardState::Serving);
        if !serving {
            let reason = format!("node {} does not serve partition {partition}", self.identity.node_id);
            return Err(serve::ClaimRefused::NotServing(reason));
        }
        let epoch = self.record_owner(partition).map_err(|e| serve::ClaimRefused::Failed(e.to_string()))?;
        tracing::info!(partition, epoch, "node: a partition's ownership recorded again, as asked");
        Ok(epoch)
    }

    /// The end (high watermark) of `partition` of every input topic.
    fn ends(&self, partition: u32) -> Result<BTreeMap<String, i64>, rdkafka::error::KafkaError> {
        let mut ends = BTreeMap::new();
        for topic in self.identity.topics.names() {
            let (_, high) =
                self.watermarks.fetch_watermarks(topic, partition as i32, Duration::from_millis(BROKER_WAIT_MS))?;
            ends.insert(topic.to_string(), high);
        }
        Ok(ends)
    }

    /// Whether nothing a consumer would read lies between `stored` and `ends` of `partition` (only transaction
    /// markers, which consumers never see).
    fn nothing_left(&self, partition: u32, stored: &BTreeMap<String, i64>, ends: &BTreeMap<String, i64>) -> bool {
        let mut config = kafka::config::routing_reader(&self.identity.brokers, &self.identity.overrides);
        config.set("isolation.level", "read_committed");
        let Ok(reader) = config.create::<BaseConsumer>() else { return false };
        let mut assignment = rdkafka::TopicPartitionList::new();
        for (topic, end) in ends {
            let from = stored.get(topic).copied().unwrap_or(0);
            if from < *end
                && assignment.add_partition_offset(topic, partition as i32, rdkafka::Offset::Offset(from)).is_err()
            {
                return false;
            }
        }
        if reader.assign(&assignment).is_err() {
            return false;
        }
        let until = Instant::now() + Duration::from_millis(LOOK_WAIT_MS);
        while Instant::now() < until {
            match reader.poll(Duration::from_millis(50)) {
                Some(Ok(_)) => return false,
                Some(Err(_)) => return false,
                None => {}
            }
        }
        true
    }

    /// The next offset shard `partition` stores for each topic.
    fn stored(&self, partition: u32) -> Result<BTreeMap<String, i64>, String> {
        let ledger = ledger::Ledger::open_read_only(self.dir.path_of(partition)).map_err(|e| e.to_string())?;
        let offsets = ledger.offsets().map_err(|e| e.to_string())?;
        Ok(offsets
            .into_iter()
            .filter(|o| i64::from(o.partition) == i64::from(partition))
            .map(|o| (o.topic, o.next_offset))
            .collect())
    }
}

/// Kafka's assignments as ingest sees them, told to the node's [`Ownership`] and its [`Standby`].
pub struct Listener {
    /// The node's partitions.
    pub ownership: Arc<Ownership>,
    /// Its standby copies, with `--standby`.
    pub standby: Option<Arc<Standby>>,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "node {}", self.ownership.identity.node_id)
    }
}

impl ingest::PartitionListener for Listener {
    fn opening(&self, partition: u32) {
        if let Some(standby) = &self.standby {
            standby.release(partition);
        }
    }

    fn assigned(&self, partition: u32) {
        self.ownership.assigned(partition);
    }

    fn revoked(&self, partition: u32) {
        self.ownership.revoked(partition);
    }

    fn closed(&self, partition: u32) {
        if let Some(standby) = &self.standby {
            standby.reclaimable(partition);
        }
    }
}
