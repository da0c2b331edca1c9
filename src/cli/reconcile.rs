//! `reconcile --as-of T`: the nightly job (contract §5, §7). Plans every adjustment, records them in one
//! transaction, publishes them to `quota.adjustments` through the outbox when `--brokers` is given, and prints
//! a report. Exit 0 when the run wrote nothing (clean), 1 when it wrote adjustments (discrepancies found), 2 on
//! error.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use schemas::Timestamp;
use usecases::run::{Publish, RunSettings};

use super::kafka_args::parse_setting;

#[derive(Debug, Args)]
pub struct ReconcileArgs {
    /// Judge windows that ended and reservations that expired by this instant (RFC 3339, UTC).
    #[arg(long, value_parser = parse_as_of)]
    as_of: Timestamp,
    /// Print the run as JSON (docs/contract.md §7).
    #[arg(long)]
    json: bool,
    /// Alert a reservation or lease held longer than this many seconds (OPEN_TOO_LONG, contract §6).
    #[arg(long, value_name = "SECONDS", default_value_t = 3_600, value_parser = clap::value_parser!(u64).range(1..=31_622_400))]
    open_alert_after: u64,
    /// Compute and print the plan, record nothing.
    #[arg(long)]
    dry_run: bool,
    /// Read every event, even when the last run as of the same instant lets this one read only the tenants touched
    /// since (the same adjustments either way).
    #[arg(long)]
    full: bool,
    /// Kafka bootstrap servers to publish the adjustments to; without them they wait in the outbox.
    #[arg(long, env = "QUOTA_LEDGER_BROKERS")]
    brokers: Option<String>,
    /// A librdkafka setting for the outbox producer, repeatable.
    #[arg(short = 'X', value_name = "KEY=VALUE", value_parser = parse_setting)]
    settings: Vec<(String, String)>,
    /// Topic of the adjustments.
    #[arg(long, default_value = "quota.adjustments")]
    adjustments_topic: String,
    /// How long to keep retrying unacknowledged adjustments before leaving them pending.
    #[arg(long, default_value_t = outbox::PUBLISH_TIMEOUT_MS)]
    publish_timeout_ms: u64,
    // An `https://` --outbox-registry-url trusts the --ca-file of the cluster's flags.
    #[command(flatten)]
    outbox: super::kafka_args::OutboxFormatArgs,
    /// Write the run's figures to this file for the node exporter's textfile collector (Prometheus text format):
    /// the last success, its duration, adjustments and their amounts by kind, windows judged, outbox pending.
    #[arg(long, value_name = "FILE")]
    metrics_file: Option<std::path::PathBuf>,
    // With --cluster, each shard's owner reconciles the shards it holds as of the same --as-of and publishes their
    // adjustments with its own brokers (`POST /v1/admin/reconcile`); the token must be an admin one of every tenant.
    #[command(flatten)]
    cluster: super::cluster::ClusterArgs,
}

/// How long an owner may take to reconcile its shards.
const CLUSTER_RECONCILE_TIMEOUT: Duration = Duration::from_secs(3600);

fn parse_as_of(text: &str) -> Result<Timestamp, String> {
    let t = Timestamp::parse_rfc3339(text)
        .map_err(|e| format!("{text:?} is not an RFC 3339 instant such as 2026-12-01T00:00:00Z: {e}"))?;
    if t < schemas::validate::TIMESTAMP_MIN || t >= schemas::validate::TIMESTAMP_MAX {
        return Err(format!("{text} is outside the accepted range [2000, 2100)"));
    }
    Ok(t)
}

pub fn run(store: &super::Store, args: ReconcileArgs) -> anyhow::Result<ExitCode> {
    if let Some(cluster) = args.cluster.asked()? {
        anyhow::ensure!(
            args.brokers.is_none() && args.metrics_file.is_none(),
            "with --cluster each owner publishes its shards' adjustments with its own brokers, and its figures are its \
             own: not with --brokers or --metrics-file"
        );
        return of_cluster(&cluster, &args);
    }
    let started = std::time::Instant::now();
    let format = args.outbox.format(&args.cluster.ca_file)?;
    let settings = RunSettings {
        as_of: args.as_of,
        open_alert_after_s: args.open_alert_after,
        dry_run: args.dry_run,
        full: args.full,
        publish: args.brokers.as_ref().map(|brokers| Publish {
            brokers: brokers.clone(),
            settings: args.settings.clone(),
            adjustments_topic: args.adjustments_topic.clone(),
            timeout: Duration::from_millis(args.publish_timeout_ms),
            format,
        }),
    };
    let spinner = super::spinner();
    spinner.enable_steady_tick(Duration::from_millis(200));
    let run = usecases::run::run(store, &settings, &mut |doing| spinner.set_message(doing))?;
    spinner.finish_and_clear();
    for note in &run.notes {
        eprintln!("reconcile: {note}");
    }
    if let Some(path) = &args.metrics_file {
        let figures = usecases::run::figures(&run, args.dry_run, started.elapsed());
        figures.write(path).with_context(|| format!("cannot write the metrics file {}", path.display()))?;
    }
    if args.json {
        super::print_json(&usecases::run::run_json(&run, args.dry_run))?;
    } else {
        usecases::run::write_report(&mut super::stdout(), &run, args.dry_run)?;
    }
    Ok(if run.plan.is_clean() { ExitCode::SUCCESS } else { ExitCode::from(super::EXIT_DISCREPANCIES) })
}

/// `reconcile --cluster`: every owner reconciles the shards it holds as of the same `--as-of` (a tenant's windows live
/// in its one shard) and publishes their adjustments; the report is each shard's, in partition order. An owner that
/// does not answer fails the command naming its shards: the shards the others reconciled stay reconciled, and a rerun
/// with the same `--as-of` writes nothing more to them.
fn of_cluster(cluster: &usecases::cluster::Cluster, args: &ReconcileArgs) -> anyhow::Result<ExitCode> {
    let body = serde_json::json!({
        "as_of": args.as_of.to_string(),
        "dry_run": args.dry_run,
        "open_alert_after_s": args.open_alert_after,
    });
    let ask = usecases::cluster::Ask::Post(&body, CLUSTER_RECONCILE_TIMEOUT);
    let answered = cluster.ask_owners_to("/v1/admin/reconcile", ask)?;
    let count = answered.shards.len();
    let clean = answered.shards.values().all(|part| part["clean"] == serde_json::json!(true));
    if args.json {
        let written: u64 =
            answered.shards.values().filter_map(|part| part["run"]["adjustments_written"].as_u64()).sum();
        let shards: Vec<serde_json::Value> = answered
            .shards
            .iter()
            .map(|(partition, part)| {
                let mut run = part["run"].clone();
                if let Some(object) = run.as_object_mut() {
                    object.insert("partition".into(), serde_json::json!(partition));
                }
                run
            })
            .collect();
        super::print_json(&serde_json::json!({
            "as_of": args.as_of,
            "dry_run": args.dry_run,
            "adjustments_written": written,
            "shards": shards,
        }))?;
    } else {
        let mut out = super::stdout();
        for (partition, part) in &answered.shards {
            let owner = answered.owners.get(partition).map_or("", String::as_str);
            writeln!(out, "== shard {partition} of {count} ({owner})")?;
            out.write_all(part["words"].as_str().unwrap_or_default().as_bytes())?;
            writeln!(out)?;
        }
        let state = if clean { "clean" } else { "adjusted" };
        writeln!(
            out,
            "{count} shards of the cluster at {} ({} nodes) reconciled as of {}: {state}",
            cluster.brokers, answered.nodes, args.as_of
        )?;
    }
    Ok(if clean { ExitCode::SUCCESS } else { ExitCode::from(super::EXIT_DISCREPANCIES) })
}
