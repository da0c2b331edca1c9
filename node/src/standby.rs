//! Warm standbys (`node --standby N`; docs/decisions.md, "Nodes"): beside the shards it owns, a node keeps an
//! up-to-date copy of the shards of the partitions it stands by for, consumed by assignment (never through the group,
//! which gives each partition to one member), as Kafka Streams' standby replicas are. When the group then gives it one
//! of them, its catch-up reads the last seconds of the topics instead of the whole partition.
//!
//! Which partitions: the routing catalog's nodes in a ring ordered by id; a node stands by for each partition owned by
//! one of the N nodes before it in the ring. Every node computes the ring from the same catalog, so each partition
//! has N standbys (fewer when the cluster has fewer other nodes) without anything agreed between them. A node that
//! died stays in the ring until the group has given its partitions to others and the catalog says so.
//!
//! A standby copy is only ever written by this node's standby ingest, and only while the node does not own the
//! partition: the group's assignment of a partition waits until the standby has closed its copy
//! ([`Standby::release`]), and a partition the group takes back is stood by for again only once the node's own
//! writer has closed it ([`Standby::reclaimable`]). The shard's lock makes the two writers exclusive in any case.

use std::collections::BTreeSet;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use kafka::routing::{RoutingCatalog, RoutingTable};

/// How long the group's assignment of a partition waits for the standby to close its copy.
const RELEASE_WAIT_MS: u64 = 30_000;

/// The partitions of a node's standby: which it wants, which it holds, which the node owns (see the module).
pub struct Standby {
    node_id: String,
    copies: usize,
    catalog: Arc<RoutingCatalog>,
    /// The copies' lag, and the input topics whose series a copy let go takes with it.
    metrics: Arc<ingest::metrics::StandbyMetrics>,
    topics: Vec<String>,
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// Partitions the group gave this node (their shards are the node's own, not the standby's).
    owned: BTreeSet<u32>,
    /// Partitions whose copies the standby holds open, or is opening.
    holding: BTreeSet<u32>,
}

impl std::fmt::Debug for Standby {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "standby of node {} ({} copies)", self.node_id, self.copies)
    }
}

impl Standby {
    /// The standby of node `node_id`, keeping `copies` copies of each partition across the cluster, of the input
    /// `topics`, its copies' lag in `metrics`.
    pub fn new(
        node_id: &str,
        copies: usize,
        catalog: Arc<RoutingCatalog>,
        metrics: Arc<ingest::metrics::StandbyMetrics>,
        topics: &kafka::topics::Topics,
    ) -> Standby {
        Standby {
            node_id: node_id.to_string(),
            copies,
            catalog,
            metrics,
            topics: topics.names().into_iter().map(str::to_string).collect(),
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The copies' lag, for the standby's ingest to report.
    pub fn metrics(&self) -> Arc<ingest::metrics::StandbyMetrics> {
        Arc::clone(&self.metrics)
    }

    /// The group gives this node `partition`: the standby lets its copy go (waits until it is closed), so that the
    /// node's own writer opens it and resumes from the offsets it stores.
    pub fn release(&self, partition: u32) {
        let mut state = self.state();
        state.owned.insert(partition);
        let until = Instant::now() + Duration::from_millis(RELEASE_WAIT_MS);
        while state.holding.contains(&partition) {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                tracing::warn!(
                    partition,
                    wait_ms = RELEASE_WAIT_MS,
                    "node: a shard's standby copy was not closed in time"
                );
                return;
            }
            state = self.changed.wait_timeout(state, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// The node's own writer closed `partition`'s shard (the group took it back): the standby may hold it again.
    pub fn reclaimable(&self, partition: u32) {
        self.state().owned.remove(&partition);
    }

    /// The standby's ingest stopped: it holds nothing.
    pub fn stopped(&self) {
        self.now_holding(&BTreeSet::new());
    }

    /// The copies held are now `partitions`: the lag of those let go is forgotten.
    fn now_holding(&self, partitions: &BTreeSet<u32>) {
        let mut state = self.state();
        let topics: Vec<&str> = self.topics.iter().map(String::as_str).collect();
        for gone in state.holding.difference(partitions) {
            self.metrics.forget(&topics, *gone);
        }
        state.holding = partitions.clone();
        drop(state);
        self.changed.notify_all();
    }
}

impl ingest::Standing for Standby {
    fn wanted(&self) -> BTreeSet<u32> {
        let table = self.catalog.table();
        let mut state = self.state();
        let wanted: BTreeSet<u32> =
            standing_for(&table, &self.node_id, self.copies).difference(&state.owned).copied().collect();
        // Held from now, before the copies open: a release asked meanwhile waits for them to close again.
        state.holding.extend(wanted.iter().copied());
        wanted
    }

    fn holding(&self, partitions: &BTreeSet<u32>) {
        self.now_holding(partitions);
    }
}

/// The partitions node `node_id` stands by for with `copies` copies, from the catalog `table`: each partition owned by
/// another node when `node_id` is among the `copies` nodes after its owner in the ring of the catalog's nodes and
/// `node_id`, ordered by id.
pub fn standing_for(table: &RoutingTable, node_id: &str, copies: usize) -> BTreeSet<u32> {
    let mut ring: BTreeSet<&str> = table.entries().map(|e| e.node_id.as_str()).collect();
    ring.insert(node_id);
    let ring: Vec<&str> = ring.into_iter().collect();
    let Some(mine) = ring.iter().position(|n| *n == node_id) else { return BTreeSet::new() };
    table
        .entries()
        .filter(|entry| entry.node_id != node_id)
        .filter(|entry| {
            let owner = ring.iter().position(|n| *n == entry.node_id).unwrap_or(mine);
            // How far this node is after the owner, going round.
            let after = (mine + ring.len() - owner) % ring.len();
            after >= 1 && after <= copies
        })
        .map(|entry| entry.partition)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka::routing::RoutingEntry;

    fn table(owners: &[(u32, &str)]) -> RoutingTable {
        let mut table = RoutingTable::default();
        for (offset, (partition, node)) in owners.iter().enumerate() {
            table.apply(RoutingEntry::now(*partition, node, &format!("http://{node}"), 1), offset as i64);
        }
        table
    }

    #[test]
    fn each_partition_has_its_copies_on_the_nodes_after_its_owner() {
        let owners = table(&[(0, "a"), (1, "a"), (2, "b"), (3, "b"), (4, "c"), (5, "c")]);
        assert_eq!(standing_for(&owners, "b", 1), BTreeSet::from([0, 1]));
        assert_eq!(standing_for(&owners, "c", 1), BTreeSet::from([2, 3]));
        assert_eq!(standing_for(&owners, "a", 1), BTreeSet::from([4, 5]), "the ring wraps round");
        assert_eq!(standing_for(&owners, "a", 2), BTreeSet::from([2, 3, 4, 5]));
        assert_eq!(standing_for(&owners, "a", 5), BTreeSet::from([2, 3, 4, 5]), "never more than the other nodes");
        assert_eq!(standing_for(&owners, "a", 0), BTreeSet::new(), "no standby");
        for partition in 0..6 {
            let standbys = ["a", "b", "c"].iter().filter(|n| standing_for(&owners, n, 1).contains(&partition)).count();
            assert_eq!(standbys, 1, "one copy of partition {partition}");
        }
    }

    #[test]
    fn a_node_not_yet_in_the_catalog_takes_its_place_in_the_ring() {
        let owners = table(&[(0, "a"), (1, "a"), (2, "c")]);
        assert_eq!(standing_for(&owners, "b", 1), BTreeSet::from([0, 1]), "b comes after a");
        assert_eq!(standing_for(&owners, "d", 1), BTreeSet::from([2]), "d comes after c");
        assert_eq!(standing_for(&RoutingTable::default(), "a", 1), BTreeSet::new(), "nothing owned, nothing copied");
    }
}
