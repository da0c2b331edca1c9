//! `verify [--expect-head SEQ:HASH ...] [--checkpoints-from BROKERS]`: exit 0 when the chain holds (and holds every
//! head given or published), 1 naming the first bad entry or checkpoint.

use std::io::Write;
use std::process::ExitCode;

use clap::Args;
use ledger::Head;
use usecases::verify::{Verified, VerifyAsked};

use super::kafka_args::parse_setting;

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// A chain head the ledger had (as `status` printed it, SEQ:HASH), repeatable: exit 1 unless that link is in the
    /// chain with that hash (history rewritten, or cut back below it).
    #[arg(long, value_name = "SEQ:HASH")]
    expect_head: Vec<Head>,
    /// Kafka bootstrap servers to read quota.checkpoints from: every checkpoint this ledger published is checked
    /// against the chain (exit 1 naming the first that does not hold, or when there is none).
    #[arg(long, value_name = "BROKERS")]
    checkpoints_from: Option<String>,
    /// A librdkafka setting for --checkpoints-from (SASL, TLS), repeatable: -X security.protocol=SASL_SSL.
    #[arg(short = 'X', value_name = "KEY=VALUE", value_parser = parse_setting)]
    settings: Vec<(String, String)>,
    #[command(flatten)]
    cluster: super::cluster::ClusterArgs,
}

pub fn run(store: &super::Store, args: VerifyArgs) -> anyhow::Result<ExitCode> {
    let one_chain = args.expect_head.is_empty() && args.checkpoints_from.is_none();
    if let Some(cluster) = args.cluster.asked()? {
        anyhow::ensure!(one_chain, "--expect-head and --checkpoints-from check one chain: not with --cluster");
        let answered = cluster.ask_owners("/v1/admin/verify", &[])?;
        let reports = answered.parts("a report")?;
        return print_shards(&reports, args.json);
    }
    let asked = VerifyAsked {
        expect_heads: args.expect_head.clone(),
        checkpoints_from: args.checkpoints_from.clone().map(|brokers| (brokers, args.settings.clone())),
    };
    let report = match usecases::verify::verify(store, &asked)? {
        Verified::Shards(reports) => return print_shards(&reports, args.json),
        Verified::One { report, warnings } => {
            for warning in warnings {
                eprintln!("verify: warning: {warning}");
            }
            *report
        }
    };
    if args.json {
        super::print_json(&report)?;
    }
    let mut found = false;
    if let Some(bad) = &report.first_bad {
        let event = if bad.event_id.is_empty() { String::new() } else { format!(" (event_id {})", bad.event_id) };
        eprintln!("verify: entry {}{event} does not hold: {}", bad.seq, bad.problem);
        eprintln!("verify: {} entries before it hold", report.entries_checked);
        found = true;
    }
    if let Some(bad) = &report.first_bad_checkpoint {
        match (&bad.at, bad.head_seq) {
            (_, 0) => eprintln!("verify: {}", bad.problem),
            (Some(at), _) => eprintln!(
                "verify: checkpoint {}:{} published at {at} does not hold: {}",
                bad.head_seq, bad.head_hash, bad.problem
            ),
            (None, _) => eprintln!("verify: head {}:{} does not hold: {}", bad.head_seq, bad.head_hash, bad.problem),
        }
        found = true;
    }
    if found {
        return Ok(ExitCode::from(super::EXIT_DISCREPANCIES));
    }
    if !args.json {
        let checked = match report.checkpoints_checked {
            0 => String::new(),
            n => format!(", and holds the {n} heads given or published"),
        };
        writeln!(
            super::stdout(),
            "ok: {} entries, chain holds up to watermark {}; head {}:{}{checked}",
            report.entries_checked,
            report.watermark,
            report.head_seq,
            report.head_hash
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `verify --data DIR` or `--cluster`: every shard's chain, and that every entry of a shard is of its partition
/// (contract §9.4); exit 1 naming each shard that does not hold and its first bad entry.
fn print_shards(reports: &[ledger::shards::ShardVerifyReport], json: bool) -> anyhow::Result<ExitCode> {
    if json {
        super::print_json(&serde_json::json!({ "shards": reports }))?;
    }
    let mut found = false;
    for report in reports {
        let shard = format!("shard {} of {} ({})", report.partition, report.partitions, report.path);
        if let Some(bad) = &report.chain.first_bad {
            let event = if bad.event_id.is_empty() { String::new() } else { format!(" (event_id {})", bad.event_id) };
            eprintln!("verify: {shard}: entry {}{event} does not hold: {}", bad.seq, bad.problem);
            found = true;
        }
        if let Some(bad) = &report.first_misplaced {
            eprintln!(
                "verify: {shard}: entry {} (event_id {}) is of tenant {:?}, whose events belong to shard {} \
                 (docs/contract.md §9.4)",
                bad.seq, bad.event_id, bad.tenant, bad.belongs_to
            );
            found = true;
        }
        if !json && report.holds() {
            writeln!(
                super::stdout(),
                "ok: {shard}: {} entries, chain holds up to watermark {}, every entry of its partition; head {}:{}",
                report.chain.entries_checked,
                report.chain.watermark,
                report.chain.head_seq,
                report.chain.head_hash
            )?;
        }
    }
    Ok(if found { ExitCode::from(super::EXIT_DISCREPANCIES) } else { ExitCode::SUCCESS })
}
