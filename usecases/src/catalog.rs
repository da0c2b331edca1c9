//! The routing catalog inspected and repaired (`catalog`), as HBase's HBCK2 and catalog janitor do for `hbase:meta`:
//! the catalog read whole, every node it names (and those the operator names) asked which shards it holds and in
//! which state, and each disagreement said with what can be done about it. A repair only asks for what the product
//! does anyway: the node that serves a partition records itself again ([`Repair::Claim`], the entry a node writes when
//! it starts serving), and an entry of a partition the cluster does not have is removed ([`Repair::Remove`]). Which
//! node owns a partition is the consumer group's to decide, never the repair's: a partition no node serves waits for
//! the group to assign it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kafka::routing::{RoutingEntry, RoutingWriter};
use serde::{Deserialize, Serialize};

use crate::cluster::Cluster;
use crate::{Context, Result};

/// How long a node may take to answer which shards it holds.
const ASK_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a node may take to record a partition again.
const CLAIM_TIMEOUT: Duration = Duration::from_secs(30);

/// A shard as a node said it holds it (`GET /v1/admin/status`, `shard_states`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardSeen {
    /// The shard's partition.
    pub partition: u32,
    /// Its state on the node: `serving`, or a transition (`fencing`, `catching_up`, `opening`, `closing`,
    /// `failed_open`).
    pub state: String,
    /// For how many seconds.
    pub seconds: f64,
}

/// A node asked, and what it said.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeSeen {
    /// Its URL.
    pub url: String,
    /// The shards it holds, or why it did not say.
    #[serde(flatten)]
    pub answer: NodeAnswer,
}

/// What a node answered.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum NodeAnswer {
    /// The shards it holds.
    Holds {
        /// By partition.
        shards: Vec<ShardSeen>,
    },
    /// It did not answer, or refused: why.
    Unreachable {
        /// The reason.
        error: String,
    },
}

/// A disagreement between the catalog and the nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Problem {
    /// A partition of the cluster has no entry: clients cannot find its owner.
    NoOwner,
    /// An entry names a partition the cluster does not have (left from another partition count, or written by hand).
    NotAPartition,
    /// The node an entry names did not answer.
    OwnerUnreachable,
    /// The node an entry names answered, and does not hold the partition.
    OwnerNotServing,
    /// Two nodes say they serve one partition.
    TwoOwners,
    /// A node has held a partition in a transition (fencing, catching up, opening, closing, failed to open) for
    /// longer than the operator allows.
    StuckInTransition,
}

impl Problem {
    /// The problem's name in lines and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Problem::NoOwner => "no_owner",
            Problem::NotAPartition => "not_a_partition",
            Problem::OwnerUnreachable => "owner_unreachable",
            Problem::OwnerNotServing => "owner_not_serving",
            Problem::TwoOwners => "two_owners",
            Problem::StuckInTransition => "stuck_in_transition",
        }
    }
}

/// What a repair does about a finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Repair {
    /// Ask the node at `url`, which serves the partition, to record itself in the catalog again.
    Claim {
        /// The node's URL.
        url: String,
    },
    /// Remove the partition's entry (a tombstone).
    Remove,
}

/// One disagreement: the partition, the problem, what was seen, and what a repair does about it (none: the operator's
/// or the consumer group's to resolve).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// The partition.
    pub partition: u32,
    /// The problem.
    pub problem: Problem,
    /// What was seen, in words.
    pub detail: String,
    /// What `--repair` does about it.
    pub repair: Option<Repair>,
    /// After `--repair`: what the repair did, or why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repaired: Option<String>,
}

/// The catalog read whole, the nodes asked, and the disagreements.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Inspection {
    /// P, the input topics' partition count.
    pub partitions: u32,
    /// Every entry in force, by partition.
    pub entries: Vec<RoutingEntry>,
    /// Every node asked, by URL.
    pub nodes: Vec<NodeSeen>,
    /// The disagreements, by partition.
    pub findings: Vec<Finding>,
}

impl Inspection {
    /// Whether the catalog and the nodes agree.
    pub fn consistent(&self) -> bool {
        self.findings.is_empty()
    }
}

/// Reads the catalog of `cluster` whole, asks every node it names and every node of `more` (URLs: nodes the catalog
/// names for nothing) which shards it holds, and says each disagreement; a node in a transition longer than
/// `stuck_after` is one.
pub fn inspect(cluster: &Cluster, more: &[String], stuck_after: Duration) -> Result<Inspection> {
    let topics = kafka::topics::Topics::defaults();
    let (partitions, table) = kafka::routing::owners(&cluster.brokers, &[], topics.names())
        .with_context(|| format!("cannot read the routing catalog at {}", cluster.brokers))?;
    let entries: Vec<RoutingEntry> = table.entries().cloned().collect();
    let urls: BTreeSet<String> =
        entries.iter().map(|e| e.url.as_str()).chain(more.iter().map(String::as_str)).map(trimmed).collect();
    let nodes: Vec<NodeSeen> = urls.into_iter().map(|url| ask_node(cluster, url)).collect();
    let findings = findings(partitions, &entries, &nodes, stuck_after);
    Ok(Inspection { partitions, entries, nodes, findings })
}

fn trimmed(url: &str) -> String {
    url.trim_end_matches('/').to_string()
}

/// What the node at `url` says it holds.
fn ask_node(cluster: &Cluster, url: String) -> NodeSeen {
    let asked = format!("{url}/v1/admin/shards");
    let answer = match client::get_json(&asked, &[], &cluster.token, &cluster.trust, ASK_TIMEOUT) {
        Ok(client::Answer { status: 200, body, .. }) => {
            let shards = body["shard_states"].as_array().into_iter().flatten();
            NodeAnswer::Holds { shards: shards.filter_map(|s| ShardSeen::deserialize(s).ok()).collect() }
        }
        Ok(client::Answer { status, body, .. }) => NodeAnswer::Unreachable {
            error: format!("answered {status}: {}", body["message"].as_str().unwrap_or_default()),
        },
        Err(e) => NodeAnswer::Unreachable { error: e.to_string() },
    };
    NodeSeen { url, answer }
}

/// The disagreements between the catalog's `entries` of a cluster of `partitions` and what `nodes` hold (pure).
pub fn findings(partitions: u32, entries: &[RoutingEntry], nodes: &[NodeSeen], stuck_after: Duration) -> Vec<Finding> {
    let mut serving: BTreeMap<u32, Vec<&str>> = BTreeMap::new();
    let mut found = Vec::new();
    for node in nodes {
        let NodeAnswer::Holds { shards } = &node.answer else { continue };
        for shard in shards {
            if shard.state == "serving" {
                serving.entry(shard.partition).or_default().push(&node.url);
            } else if shard.seconds > stuck_after.as_secs_f64() {
                let detail = format!("{} has held it {} for {:.0} s", node.url, shard.state, shard.seconds);
                found.push(finding(shard.partition, Problem::StuckInTransition, detail, None));
            }
        }
    }
    let by_partition: BTreeMap<u32, &RoutingEntry> = entries.iter().map(|e| (e.partition, e)).collect();
    for partition in 0..partitions {
        let servers = serving.get(&partition).map(Vec::as_slice).unwrap_or_default();
        found.extend(of_partition(partition, by_partition.get(&partition).copied(), servers, nodes));
    }
    for entry in entries.iter().filter(|e| e.partition >= partitions) {
        let detail = format!("the cluster has {partitions} partitions; the entry names {}", entry.node_id);
        found.push(finding(entry.partition, Problem::NotAPartition, detail, Some(Repair::Remove)));
    }
    found.sort_by_key(|f| (f.partition, f.problem.name()));
    found
}

/// What is wrong with one partition of the cluster: its entry (if any) against the nodes that serve it.
fn of_partition(partition: u32, entry: Option<&RoutingEntry>, servers: &[&str], nodes: &[NodeSeen]) -> Option<Finding> {
    let claim = match servers {
        [one] => Some(Repair::Claim { url: one.to_string() }),
        _ => None,
    };
    if servers.len() > 1 {
        let detail = format!("{} all say they serve it", servers.join(", "));
        return Some(finding(partition, Problem::TwoOwners, detail, None));
    }
    let Some(entry) = entry else {
        let detail = match servers {
            [one] => format!("no entry; {one} serves it"),
            _ => "no entry, and no node asked serves it (the consumer group has not assigned it yet?)".to_string(),
        };
        return Some(finding(partition, Problem::NoOwner, detail, claim));
    };
    let url = trimmed(&entry.url);
    if servers.contains(&url.as_str()) {
        return None;
    }
    let serves_elsewhere = match servers {
        [one] => format!("; {one} serves it"),
        _ => String::new(),
    };
    let node = nodes.iter().find(|n| n.url == url);
    match node.map(|n| &n.answer) {
        Some(NodeAnswer::Holds { shards }) => {
            let held = shards.iter().find(|s| s.partition == partition);
            // A node still opening the partition it was given is where it should be: the catalog names it once it
            // serves. The stuck ones are found above.
            if held.is_some() && servers.is_empty() {
                return None;
            }
            let detail = format!(
                "the entry names {} at {url} (epoch {}), which does not serve it{serves_elsewhere}",
                entry.node_id, entry.epoch
            );
            Some(finding(partition, Problem::OwnerNotServing, detail, claim))
        }
        Some(NodeAnswer::Unreachable { error }) => {
            let detail = format!(
                "the entry names {} at {url} (epoch {}), which did not answer: {error}{serves_elsewhere}",
                entry.node_id, entry.epoch
            );
            Some(finding(partition, Problem::OwnerUnreachable, detail, claim))
        }
        None => {
            let detail = format!(
                "the entry names {} at {url} (epoch {}), which was not asked{serves_elsewhere}",
                entry.node_id, entry.epoch
            );
            Some(finding(partition, Problem::OwnerUnreachable, detail, claim))
        }
    }
}

fn finding(partition: u32, problem: Problem, detail: String, repair: Option<Repair>) -> Finding {
    Finding { partition, problem, detail, repair, repaired: None }
}

/// Does what each finding's repair says, noting in it what was done or why not; findings without a repair are left
/// as they are.
pub fn repair(cluster: &Cluster, inspection: &mut Inspection) -> Result<()> {
    let mut writer = None;
    for found in &mut inspection.findings {
        let done = match &found.repair {
            None => continue,
            Some(Repair::Claim { url }) => claim(cluster, url, found.partition),
            Some(Repair::Remove) => {
                if writer.is_none() {
                    let created = RoutingWriter::new(&cluster.brokers, &[])
                        .with_context(|| format!("cannot write the routing catalog at {}", cluster.brokers))?;
                    writer = Some(created);
                }
                let writer = writer.as_mut().expect("created above");
                match writer.remove(found.partition) {
                    Ok(()) => "removed the entry".to_string(),
                    Err(e) => format!("could not remove the entry: {e}"),
                }
            }
        };
        tracing::info!(partition = found.partition, problem = found.problem.name(), done = %done, "catalog: repaired");
        found.repaired = Some(done);
    }
    Ok(())
}

/// Asks the node at `url` to record `partition` in the catalog again: what it answered, in words.
fn claim(cluster: &Cluster, url: &str, partition: u32) -> String {
    let asked = format!("{url}/v1/admin/routing/claim");
    let body = serde_json::json!({ "partition": partition });
    match client::post_json(&asked, &body, &cluster.token, &cluster.trust, CLAIM_TIMEOUT) {
        Ok(client::Answer { status: 200, body, .. }) => format!("{url} recorded itself at epoch {}", body["epoch"]),
        Ok(client::Answer { status, body, .. }) => {
            format!("{url} refused ({status}): {}", body["message"].as_str().unwrap_or_default())
        }
        Err(e) => format!("{url} did not answer: {e}"),
    }
}

/// How often a drain looks whether the node's partitions have moved.
const DRAIN_LOOK: Duration = Duration::from_millis(500);

/// A shard in transition longer than this is stuck, as far as a drain waits for it: the catalog check's default. A
/// drain gives up at its patience anyway; a stuck shard only names why in its message.
const STUCK_WHILE_DRAINING: Duration = Duration::from_secs(300);

/// A node drained: where each partition the catalog named it for went, and how long it took.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Drained {
    /// The node's URL.
    pub node: String,
    /// Each partition it owned, and its owner now.
    pub moved: Vec<Moved>,
    /// Seconds from the ask to the last partition's new owner in the catalog.
    pub seconds: f64,
}

/// A partition that moved off a drained node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Moved {
    /// The partition.
    pub partition: u32,
    /// Its owner's node id now.
    pub node_id: String,
    /// Its owner's URL now.
    pub url: String,
}

/// Drains the node at `url` before maintenance: asks it to leave the consumer group (`POST /v1/admin/drain`), which
/// gives its partitions to the other nodes at once, then waits, `patience` at most, until it holds no shard and the
/// catalog names another node, one that serves it, for each partition it owned.
pub fn drain(cluster: &Cluster, url: &str, patience: Duration) -> Result<Drained> {
    let node = trimmed(url);
    let started = std::time::Instant::now();
    let before = inspect(cluster, std::slice::from_ref(&node), STUCK_WHILE_DRAINING)?;
    let owned: Vec<u32> = before.entries.iter().filter(|e| trimmed(&e.url) == node).map(|e| e.partition).collect();
    let asked = format!("{node}/v1/admin/drain");
    match client::post_json(&asked, &serde_json::json!({}), &cluster.token, &cluster.trust, CLAIM_TIMEOUT) {
        Ok(client::Answer { status: 202, .. }) => {}
        Ok(client::Answer { status, body, .. }) => {
            crate::refuse!("{node} refused to drain ({status}): {}", body["message"].as_str().unwrap_or_default())
        }
        Err(e) => crate::refuse!("{node} did not answer the drain: {e}"),
    }
    tracing::info!(node = %node, partitions = ?owned, "catalog: draining a node");
    loop {
        let now = inspect(cluster, std::slice::from_ref(&node), STUCK_WHILE_DRAINING)?;
        if let Some(moved) = drained(&now, &node, &owned) {
            return Ok(Drained { node, moved, seconds: started.elapsed().as_secs_f64() });
        }
        if started.elapsed() > patience {
            let left: Vec<String> =
                now.findings.iter().map(|f| format!("{} {}", f.partition, f.problem.name())).collect();
            crate::refuse!(
                "{node} is not drained after {} s: it still holds shards, or the catalog does not yet name a serving \
                 owner for each of {owned:?} ({})",
                patience.as_secs(),
                left.join(", ")
            );
        }
        std::thread::sleep(DRAIN_LOOK);
    }
}

/// Where `owned` went when `node` holds nothing and the catalog names a node serving each partition (pure).
fn drained(now: &Inspection, node: &str, owned: &[u32]) -> Option<Vec<Moved>> {
    let holds = now
        .nodes
        .iter()
        .any(|n| n.url == node && !matches!(&n.answer, NodeAnswer::Holds { shards } if shards.is_empty()));
    let named = now.entries.iter().any(|e| trimmed(&e.url) == node);
    let settled = !now.findings.iter().any(|f| owned.contains(&f.partition));
    if holds || named || !settled {
        return None;
    }
    let moved = owned.iter().filter_map(|p| now.entries.iter().find(|e| e.partition == *p));
    Some(moved.map(|e| Moved { partition: e.partition, node_id: e.node_id.clone(), url: e.url.clone() }).collect())
}

/// What `catalog` found, and after `--repair`, what it found again.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Checked {
    /// The cluster's brokers.
    #[serde(skip)]
    pub at: String,
    /// The first inspection (with what each repair did).
    pub inspection: Inspection,
    /// The inspection after the repair, when one ran.
    pub after_repair: Option<Inspection>,
}

impl Checked {
    /// Whether the catalog and the nodes agree now.
    pub fn consistent(&self) -> bool {
        self.after_repair.as_ref().unwrap_or(&self.inspection).consistent()
    }
}

/// `catalog` for people: the inspection, then the one after the repair.
pub fn write_checked(out: &mut dyn std::io::Write, checked: &Checked) -> std::io::Result<()> {
    let at = format!("the cluster at {}", checked.at);
    write_inspection(out, &at, &checked.inspection)?;
    if let Some(after) = &checked.after_repair {
        writeln!(out, "\nafter the repair:")?;
        write_inspection(out, &at, after)?;
    }
    Ok(())
}

/// `drain` for people: where each partition went.
pub fn write_drained(out: &mut dyn std::io::Write, drained: &Drained) -> std::io::Result<()> {
    writeln!(
        out,
        "{} drained in {:.1} s: it holds no shard; stop it when you are ready",
        drained.node, drained.seconds
    )?;
    for moved in &drained.moved {
        writeln!(out, "partition {} now at {} ({})", moved.partition, moved.node_id, moved.url)?;
    }
    Ok(())
}

/// An inspection as `catalog` prints it: the entries, each node and what it holds, then each finding with its repair
/// (and what the repair did).
pub fn write_inspection(out: &mut dyn std::io::Write, at: &str, inspection: &Inspection) -> std::io::Result<()> {
    writeln!(out, "catalog of {at}: {} partitions, {} entries", inspection.partitions, inspection.entries.len())?;
    let rows: Vec<Vec<String>> = inspection
        .entries
        .iter()
        .map(|e| vec![e.partition.to_string(), e.node_id.clone(), e.url.clone(), e.epoch.to_string(), e.at.clone()])
        .collect();
    reports::text::write_table(out, &["PARTITION", "OWNER", "URL", "EPOCH", "SINCE"], &rows)?;
    writeln!(out)?;
    let rows: Vec<Vec<String>> = inspection
        .nodes
        .iter()
        .map(|node| match &node.answer {
            NodeAnswer::Holds { shards } => {
                let held: Vec<String> = shards.iter().map(|s| format!("{} {}", s.partition, s.state)).collect();
                vec![node.url.clone(), held.join(", ")]
            }
            NodeAnswer::Unreachable { error } => vec![node.url.clone(), format!("did not answer: {error}")],
        })
        .collect();
    reports::text::write_table(out, &["NODE", "HOLDS"], &rows)?;
    writeln!(out)?;
    if inspection.consistent() {
        return writeln!(out, "consistent: every partition's entry names the node that serves it");
    }
    for found in &inspection.findings {
        writeln!(out, "partition {}: {}: {}", found.partition, found.problem.name(), found.detail)?;
        let repair = match &found.repair {
            Some(Repair::Claim { url }) => format!("ask {url} to record itself again"),
            Some(Repair::Remove) => "remove the entry".to_string(),
            None => "none by the catalog (see docs/operations.md, \"The routing catalog\")".to_string(),
        };
        match &found.repaired {
            Some(done) => writeln!(out, "  repaired: {done}")?,
            None => writeln!(out, "  repair: {repair}")?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(partition: u32, node: &str, epoch: i64) -> RoutingEntry {
        RoutingEntry { partition, node_id: node.into(), url: format!("http://{node}"), epoch, at: String::new() }
    }

    fn node(name: &str, shards: &[(u32, &str, f64)]) -> NodeSeen {
        let shards = shards
            .iter()
            .map(|(partition, state, seconds)| ShardSeen {
                partition: *partition,
                state: state.to_string(),
                seconds: *seconds,
            })
            .collect();
        NodeSeen { url: format!("http://{name}"), answer: NodeAnswer::Holds { shards } }
    }

    fn problems(found: &[Finding]) -> Vec<(u32, &'static str)> {
        found.iter().map(|f| (f.partition, f.problem.name())).collect()
    }

    const STUCK: Duration = Duration::from_secs(300);

    // Proves a catalog whose every partition names the node serving it has nothing to say.
    #[test]
    fn a_consistent_catalog_has_no_findings() {
        let entries = [entry(0, "a", 1), entry(1, "b", 2)];
        let nodes = [node("a", &[(0, "serving", 9.0)]), node("b", &[(1, "serving", 9.0), (3, "opening", 1.0)])];
        assert!(findings(2, &entries, &nodes, STUCK).is_empty());
    }

    // Proves each disagreement is found, with the repair the product can do for it and none where it cannot.
    #[test]
    fn each_disagreement_is_found_with_its_repair() {
        let entries = [entry(0, "ghost", 9), entry(1, "a", 1), entry(5, "a", 1)];
        let nodes = [
            node("a", &[(0, "serving", 9.0), (3, "catching_up", 900.0)]),
            node("b", &[(2, "serving", 9.0), (1, "closing", 2.0)]),
            node("c", &[(2, "serving", 1.0)]),
            NodeSeen { url: "http://ghost".into(), answer: NodeAnswer::Unreachable { error: "refused".into() } },
        ];
        let found = findings(4, &entries, &nodes, STUCK);
        assert_eq!(
            problems(&found),
            [
                (0, "owner_unreachable"),
                (1, "owner_not_serving"),
                (2, "two_owners"),
                (3, "no_owner"),
                (3, "stuck_in_transition"),
                (5, "not_a_partition")
            ]
        );
        let repairs: Vec<Option<Repair>> = found.iter().map(|f| f.repair.clone()).collect();
        let claim_a = Some(Repair::Claim { url: "http://a".into() });
        assert_eq!(repairs, [claim_a, None, None, None, None, Some(Repair::Remove)]);
    }

    // Proves a partition its named owner is still opening is not a finding until it stays too long.
    #[test]
    fn an_owner_opening_its_partition_is_left_alone_until_stuck() {
        let entries = [entry(0, "a", 1)];
        assert!(findings(1, &entries, &[node("a", &[(0, "catching_up", 10.0)])], STUCK).is_empty());
        let found = findings(1, &entries, &[node("a", &[(0, "catching_up", 301.0)])], STUCK);
        assert_eq!(problems(&found), [(0, "stuck_in_transition")]);
    }
}
