//! `status [--json]`.

use std::io::Write;
use std::process::ExitCode;

use clap::Args;
use ledger::shards::{PlanDefaultsAgreement, ShardStatus};

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print JSON: events_recorded, duplicates, conflicts, quarantined, watermark, offsets, ledger_id, head_seq,
    /// head_hash, gaps, misrouted, plan_defaults, plan_defaults_digest, plan_defaults_forwarded; of shards, also
    /// plan_defaults_lacking.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    cluster: super::cluster::ClusterArgs,
}

pub fn run(store: &super::Store, args: StatusArgs) -> anyhow::Result<ExitCode> {
    if let Some(cluster) = args.cluster.asked()? {
        let answered = cluster.ask_owners("/v1/admin/status", &[])?;
        let statuses = answered.parts("a status")?;
        let at = format!("the cluster at {} ({} nodes)", cluster.brokers, answered.nodes);
        return print_shards(&at, &statuses, Some(&answered.owners), args.json);
    }
    let status = match usecases::status::status(store)? {
        usecases::status::Statuses::One(status) => *status,
        usecases::status::Statuses::Shards(statuses) => {
            let dir = match store {
                super::Store::Shards(shards) => shards.dir().display().to_string(),
                super::Store::File(path) => path.display().to_string(),
            };
            return print_shards(&dir, &statuses, None, args.json);
        }
    };
    if args.json {
        super::print_json(&status)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = super::stdout();
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
                vec![
                    g.topic.clone(),
                    g.partition.to_string(),
                    format!("{}-{}", g.from_offset, g.to_offset),
                    g.accepted_at.clone(),
                ]
            })
            .collect();
        reports::text::write_table(&mut out, &["GAP TOPIC", "PARTITION", "OFFSETS NEVER READ", "ACCEPTED AT"], &rows)?;
    }
    if !status.offsets.is_empty() {
        writeln!(out)?;
        let rows: Vec<Vec<String>> = status
            .offsets
            .iter()
            .map(|o| vec![o.topic.clone(), o.partition.to_string(), o.next_offset.to_string()])
            .collect();
        reports::text::write_table(&mut out, &["TOPIC", "PARTITION", "NEXT OFFSET"], &rows)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `status --data DIR` or `--cluster`: the sums over the shards of `at` (a plan default counted in every shard that
/// records it), whether the shards hold the same plan defaults, then a line per shard, with its owner's URL for a
/// cluster (`owners`); `--json`: `partitions`, `plan_defaults_lacking` (the shards that do not hold the plan defaults
/// the fullest shards hold) and `shards`, each shard's status with its `partition` (and `owner`).
fn print_shards(
    at: &str,
    statuses: &[ShardStatus],
    owners: Option<&std::collections::BTreeMap<u32, String>>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let partitions = statuses[0].partitions;
    let owner = |partition: u32| owners.and_then(|o| o.get(&partition)).cloned().unwrap_or_default();
    let agreement = PlanDefaultsAgreement::of(statuses);
    if json {
        let mut shards = serde_json::to_value(statuses)?;
        for shard in shards.as_array_mut().into_iter().flatten() {
            let partition = shard["partition"].as_u64().and_then(|p| u32::try_from(p).ok());
            if let (Some(object), Some(partition), Some(_)) = (shard.as_object_mut(), partition, owners) {
                object.insert("owner".into(), owner(partition).into());
            }
        }
        let lacking = agreement.lacking;
        super::print_json(
            &serde_json::json!({ "partitions": partitions, "plan_defaults_lacking": lacking, "shards": shards }),
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = super::stdout();
    writeln!(out, "shards           {at} ({partitions} partitions)")?;
    let sum = |f: &dyn Fn(&ledger::Status) -> u64| -> u64 { statuses.iter().map(|s| f(&s.status)).sum() };
    writeln!(out, "events recorded  {} (summed over the shards)", sum(&|s| s.events_recorded))?;
    writeln!(out, "duplicates       {}", sum(&|s| s.duplicates))?;
    writeln!(out, "conflicts        {}", sum(&|s| s.conflicts))?;
    writeln!(out, "quarantined      {} ({} not replayed)", sum(&|s| s.quarantined), sum(&|s| s.quarantine_pending))?;
    write_plan_defaults(&mut out, statuses, &agreement)?;
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
            vec![
                s.partition.to_string(),
                file,
                t.events_recorded.to_string(),
                t.duplicates.to_string(),
                t.conflicts.to_string(),
                t.quarantined.to_string(),
                t.watermark.to_string(),
                format!("{}:{}", t.head_seq, t.head_hash),
            ]
        })
        .collect();
    reports::text::write_table(
        &mut out,
        &[
            "SHARD",
            if owners.is_some() { "OWNER FILE" } else { "FILE" },
            "EVENTS",
            "DUPLICATES",
            "CONFLICTS",
            "QUARANTINED",
            "WATERMARK",
            "HEAD",
        ],
        &rows,
    )?;
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
        reports::text::write_table(&mut out, &["SHARD", "TOPIC", "PARTITION", "NEXT OFFSET"], &offsets)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The plan defaults line of a set of shards: how many each holds, or a warning naming the shards that do not hold
/// those of the fullest shards (contract §9.4: their tenants are billed and enforced without the ones they lack).
fn write_plan_defaults(
    out: &mut impl Write,
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
