//! `verify [--since SEQ:HASH] [--expect-head SEQ:HASH ...] [--checkpoints-from BROKERS]`: exit 0 when the chain holds (and holds every
//! head given or published), 1 naming the first bad entry or checkpoint.

use std::io::Write;
use std::process::ExitCode;

use clap::Args;
use ledger::Head;
use usecases::verify::{Verified, VerifyAsked, VerifyWords};

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
    /// The head the last verify printed (SEQ:HASH): walk only what was appended after it, in time proportional to
    /// that. Exit 1 when that link no longer holds. What it covers is not walked again: a full verify (without
    /// --since) also finds a row under it changed without recomputing the hashes.
    #[arg(long, value_name = "SEQ:HASH")]
    since: Option<Head>,
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
    let one_chain = args.expect_head.is_empty() && args.checkpoints_from.is_none() && args.since.is_none();
    if let Some(cluster) = args.cluster.asked()? {
        anyhow::ensure!(one_chain, "--since, --expect-head and --checkpoints-from check one chain: not with --cluster");
        let answered = cluster.ask_owners("/v1/admin/verify", &[])?;
        let reports = answered.parts("a report")?;
        return print_shards(&reports, args.json);
    }
    let asked = VerifyAsked {
        expect_heads: args.expect_head.clone(),
        since: args.since,
        checkpoints_from: args.checkpoints_from.clone().map(|brokers| (brokers, args.settings.clone())),
    };
    match usecases::verify::verify(store, &asked)? {
        Verified::Shards(reports) => print_shards(&reports, args.json),
        Verified::One { report, warnings } => {
            for warning in warnings {
                eprintln!("verify: warning: {warning}");
            }
            print(&report, usecases::verify::words_of_one(&report), args.json)
        }
    }
}

/// `verify --data DIR` or `--cluster`: every shard's chain, and that every entry of a shard is of its partition.
fn print_shards(reports: &[ledger::shards::ShardVerifyReport], json: bool) -> anyhow::Result<ExitCode> {
    let words = usecases::verify::words_of_shards(reports);
    print(&serde_json::json!({ "shards": reports }), words, json)
}

/// The report as JSON or, when every chain holds, the lines that say so; what does not hold on stderr (exit 1).
fn print(report: &impl serde::Serialize, words: VerifyWords, json: bool) -> anyhow::Result<ExitCode> {
    if json {
        super::print_json(report)?;
    }
    words.findings.iter().for_each(|finding| eprintln!("verify: {finding}"));
    if !json {
        words.holds.iter().try_for_each(|line| writeln!(super::stdout(), "{line}"))?;
    }
    Ok(if words.findings.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(super::EXIT_DISCREPANCIES) })
}
