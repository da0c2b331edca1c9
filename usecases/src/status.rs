//! What a store holds (`status`): counts, watermark, chain head, Kafka offsets and gaps; for a directory of shards,
//! each shard's, with the plan defaults each holds; in the words and the JSON `status` prints.

use std::collections::BTreeMap;
use std::io::Write;

use ledger::Status;
use ledger::shards::{PlanDefaultsAgreement, ShardStatus};
use reports::text::write_table;
use serde::Deserialize;

use crate::store::Opened;
use crate::{Result, Store};

/// The status of a store.
#[derive(Debug)]
pub enum Statuses {
    /// One ledger's.
    One(Box<Status>),
    /// Each shard's, in partition order.
    Shards(Vec<ShardStatus>),
}

/// The status of `store`.
pub fn status(store: &Store) -> Result<Statuses> {
    Ok(match store.open_read()? {
        Opened::File(ledger) => Statuses::One(Box::new(ledger.status()?)),
        Opened::Shards(shards) => {
            let mut statuses = Vec::with_capacity(shards.len());
            for (shard, ledger) in shards {
                statuses.push(ledger.shard_status(shard)?);
            }
            Statuses::Shards(statuses)
        }
    })
}

/// One ledger's status as `status` prints it: a line per figure, then its accepted gaps and its Kafka offsets.
pub fn write_status(out: &mut dyn Write, status: &Status) -> std::io::Result<()> {
    writeln!(out, "ledger           {}", status.ledger)?;
    writeln!(out, "ledger id        {}", status.ledger_id)?;
    writeln!(out, "head             {}:{}", status.head_seq, status.head_hash)?;
    writeln!(out, "events recorded  {}", status.events_recorded)?;
    writeln!(out, "duplicates       {}", status.duplicates)?;
    writeln!(out, "conflicts        {}", status.conflicts)?;
    writeln!(out, "quarantined      {} ({} not replayed)", status.quarantined, status.quarantine_pending)?;
    writeln!(out, "watermark        {}", status.watermark)?;
    writeln!(out, "batches          {}", status.batches)?;
    if status.outbox_pending > 0 {
        writeln!(out, "outbox pending   {} (published by reconcile or serve with --brokers)", status.outbox_pending)?;
    }
    for (topic, count) in &status.misrouted {
        writeln!(out, "misrouted        {count} of {topic} (read in another tenant's partition, forwarded to theirs)")?;
    }
    writeln!(out, "plan defaults    {}", status.plan_defaults)?;
    if status.plan_defaults_forwarded > 0 {
        writeln!(
            out,
            "plan defaults forwarded {} (sent to this partition alone, forwarded to every other)",
            status.plan_defaults_forwarded
        )?;
    }
    if !status.gaps.is_empty() {
        writeln!(out)?;
        let rows: Vec<Vec<String>> = status
            .gaps
            .iter()
            .map(|g| {
                let offsets = format!("{}-{}", g.from_offset, g.to_offset);
                vec![g.topic.clone(), g.partition.to_string(), offsets, g.accepted_at.clone()]
            })
            .collect();
        write_table(out, &["GAP TOPIC", "PARTITION", "OFFSETS NEVER READ", "ACCEPTED AT"], &rows)?;
    }
    if !status.offsets.is_empty() {
        writeln!(out)?;
        let rows: Vec<Vec<String>> = status
            .offsets
            .iter()
            .map(|o| vec![o.topic.clone(), o.partition.to_string(), o.next_offset.to_string()])
            .collect();
        write_table(out, &["TOPIC", "PARTITION", "NEXT OFFSET"], &rows)?;
    }
    Ok(())
}

/// The owner of each partition of a running cluster, by partition: the URL its shard was asked at.
pub type Owners = BTreeMap<u32, String>;

/// A shard a node of a cluster holds in a state other than serving (fencing, catching up, opening, closing, or
/// failed to open), as the node answered it: what `status --cluster` shows beside the shards' statuses.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct InTransition {
    /// The node's URL.
    #[serde(default)]
    pub node: String,
    /// The shard's partition.
    pub partition: u32,
    /// Its state.
    pub state: String,
    /// Since when (RFC 3339).
    pub since: String,
    /// For how many seconds.
    pub seconds: f64,
}

/// The shards in transition on the nodes of `answered` (a cluster's `GET /v1/admin/status`), by node then
/// partition; a node that says nothing of its shards (an older one) has none.
pub fn in_transition(answered: &crate::cluster::Answered) -> Vec<InTransition> {
    let mut found = Vec::new();
    for (url, said) in &answered.said {
        for state in said["shard_states"].as_array().into_iter().flatten() {
            if let Ok(shard) = InTransition::deserialize(state)
                && shard.state != "serving"
            {
                found.push(InTransition { node: url.clone(), ..shard });
            }
        }
    }
    found
}

/// The shards in transition as `status --cluster` says them: a line each, or that there are none.
pub fn write_transitions(out: &mut dyn Write, moving: &[InTransition]) -> std::io::Result<()> {
    if moving.is_empty() {
        return writeln!(out, "in transition    none: every shard is served");
    }
    writeln!(
        out,
        "in transition    {} shards (a takeover or a close under way; long ones are incidents)",
        moving.len()
    )?;
    for m in moving {
        writeln!(out, "  shard {} on {}: {} for {:.1} s (since {})", m.partition, m.node, m.state, m.seconds, m.since)?;
    }
    Ok(())
}

/// A running cluster's shards as `status --cluster --json` prints them: [`shards_json`] with each shard's owner, and
/// `in_transition`, the shards its nodes hold in transition ([`in_transition`]).
pub fn cluster_json(statuses: &[ShardStatus], answered: &crate::cluster::Answered) -> Result<serde_json::Value> {
    let mut json = shards_json(statuses, Some(&answered.owners))?;
    json["in_transition"] = serde_json::to_value(in_transition(answered))?;
    Ok(json)
}

/// A running cluster's shards as `status --cluster` prints them: [`write_shards`] with each shard's owner, then the
/// shards its nodes hold in transition ([`write_transitions`]).
pub fn write_cluster(
    out: &mut dyn Write,
    at: &str,
    statuses: &[ShardStatus],
    answered: &crate::cluster::Answered,
) -> std::io::Result<()> {
    write_shards(out, at, statuses, Some(&answered.owners))?;
    write_transitions(out, &in_transition(answered))
}

/// The statuses of a set of shards as `status --json` prints them: `partitions`, `plan_defaults_lacking` (the shards
/// that do not hold the plan defaults the fullest shards hold) and `shards`, each shard's status with its `partition`
/// (and, of a cluster's, its `owner`).
pub fn shards_json(statuses: &[ShardStatus], owners: Option<&Owners>) -> Result<serde_json::Value> {
    let mut shards = serde_json::to_value(statuses)?;
    for shard in shards.as_array_mut().into_iter().flatten() {
        let partition = shard["partition"].as_u64().and_then(|p| u32::try_from(p).ok());
        if let (Some(object), Some(partition), Some(owners)) = (shard.as_object_mut(), partition, owners) {
            object.insert("owner".into(), owners.get(&partition).cloned().unwrap_or_default().into());
        }
    }
    let lacking = PlanDefaultsAgreement::of(statuses).lacking;
    let partitions = statuses[0].partitions;
    Ok(serde_json::json!({ "partitions": partitions, "plan_defaults_lacking": lacking, "shards": shards }))
}

/// The statuses of the shards of `at` as `status` prints them: the sums over the shards (a plan default counted in
/// every shard that records it), whether the shards hold the same plan defaults, then a line per shard, with its
/// owner's URL for a cluster (`owners`), and the Kafka offsets of each.
pub fn write_shards(
    out: &mut dyn Write,
    at: &str,
    statuses: &[ShardStatus],
    owners: Option<&Owners>,
) -> std::io::Result<()> {
    let owner = |partition: u32| owners.and_then(|o| o.get(&partition)).cloned().unwrap_or_default();
    writeln!(out, "shards           {at} ({} partitions)", statuses[0].partitions)?;
    let sum = |f: &dyn Fn(&Status) -> u64| -> u64 { statuses.iter().map(|s| f(&s.status)).sum() };
    writeln!(out, "events recorded  {} (summed over the shards)", sum(&|s| s.events_recorded))?;
    writeln!(out, "duplicates       {}", sum(&|s| s.duplicates))?;
    writeln!(out, "conflicts        {}", sum(&|s| s.conflicts))?;
    writeln!(out, "quarantined      {} ({} not replayed)", sum(&|s| s.quarantined), sum(&|s| s.quarantine_pending))?;
    write_plan_defaults(out, statuses, &PlanDefaultsAgreement::of(statuses))?;
    writeln!(out)?;
    let rows: Vec<Vec<String>> = statuses
        .iter()
        .map(|s| {
            let t = &s.status;
            // A cluster's shard is named by its owner and the file there.
            let file = match owners {
                Some(_) => format!("{} {}", owner(s.partition), t.ledger),
                None => t.ledger.clone(),
            };
            let counts =
                [t.events_recorded, t.duplicates, t.conflicts, t.quarantined, t.watermark].map(|n| n.to_string());
            [s.partition.to_string(), file]
                .into_iter()
                .chain(counts)
                .chain([format!("{}:{}", t.head_seq, t.head_hash)])
                .collect()
        })
        .collect();
    let file = if owners.is_some() { "OWNER FILE" } else { "FILE" };
    let header = ["SHARD", file, "EVENTS", "DUPLICATES", "CONFLICTS", "QUARANTINED", "WATERMARK", "HEAD"];
    write_table(out, &header, &rows)?;
    let offsets: Vec<Vec<String>> = statuses
        .iter()
        .flat_map(|s| {
            s.status.offsets.iter().map(|o| {
                vec![s.partition.to_string(), o.topic.clone(), o.partition.to_string(), o.next_offset.to_string()]
            })
        })
        .collect();
    if !offsets.is_empty() {
        writeln!(out)?;
        write_table(out, &["SHARD", "TOPIC", "PARTITION", "NEXT OFFSET"], &offsets)?;
    }
    Ok(())
}

/// The plan defaults line of a set of shards: how many each holds, or a warning naming the shards that do not hold
/// those of the fullest shards (contract §9.4: their tenants are billed and enforced without the ones they lack).
fn write_plan_defaults(
    out: &mut dyn Write,
    statuses: &[ShardStatus],
    agreement: &PlanDefaultsAgreement,
) -> std::io::Result<()> {
    if agreement.lacking.is_empty() {
        return writeln!(out, "plan defaults    {} in every shard", agreement.most);
    }
    let names = |partitions: &[u32]| {
        let listed = partitions.iter().map(u32::to_string).collect::<Vec<_>>().join(", ");
        format!("{} {listed}", if partitions.len() == 1 { "shard" } else { "shards" })
    };
    let held: Vec<String> = statuses
        .iter()
        .filter(|s| agreement.lacking.contains(&s.partition))
        .map(|s| format!("{} in shard {}", s.status.plan_defaults, s.partition))
        .collect();
    let (verb, whose) = if agreement.lacking.len() == 1 { ("does", "its") } else { ("do", "their") };
    writeln!(
        out,
        "plan defaults    WARNING: {} ({}) {verb} not hold the {} plan defaults of {}: {whose} tenants are billed \
         and enforced without the ones missing (docs/operations.md, \"Plan defaults in every shard\")",
        names(&agreement.lacking),
        held.join(", "),
        agreement.most,
        names(&agreement.fullest),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves the shards a node holds in transition are found in its answer and said with their node and state; a
    // serving shard and a node that says nothing of its shards add none.
    #[test]
    fn shards_in_transition_are_named_with_their_node() {
        let said = |states: serde_json::Value| serde_json::json!({"shard_states": states});
        let answered = crate::cluster::Answered {
            shards: BTreeMap::new(),
            nodes: 3,
            owners: BTreeMap::new(),
            said: BTreeMap::from([
                (
                    "http://a".to_string(),
                    said(serde_json::json!([
                        {"partition": 0, "state": "serving", "since": "2026-12-07T10:00:00Z", "seconds": 50.0},
                        {"partition": 2, "state": "catching_up", "since": "2026-12-07T10:00:30Z", "seconds": 20.5},
                    ])),
                ),
                ("http://b".to_string(), serde_json::json!({})),
            ]),
        };
        let moving = in_transition(&answered);
        assert_eq!(moving.len(), 1, "{moving:?}");
        assert_eq!(
            (moving[0].node.as_str(), moving[0].partition, moving[0].state.as_str()),
            ("http://a", 2, "catching_up")
        );
        let mut words = Vec::new();
        write_transitions(&mut words, &moving).unwrap();
        let words = String::from_utf8(words).unwrap();
        assert!(words.contains("shard 2 on http://a: catching_up for 20.5 s (since 2026-12-07T10:00:30Z)"), "{words}");
    }
}
