//! What a store holds (`status`): counts, watermark, chain head, Kafka offsets and gaps; for a directory of shards,
//! each shard's, with the plan defaults each holds; in the words and the JSON `status` prints.

use std::collections::BTreeMap;
use std::io::Write;

use ledger::Status;
use ledger::shards::{PlanDefaultsAgreement, ShardStatus};
use reports::text::write_table;

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
