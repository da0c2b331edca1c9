//! `export billing --period YYYY-MM --format csv|parquet|jsonl [--final] [--out PATH] [--by project]` (contract §5,
//! §7).
//!
//! An open period is computed at the ledger's current watermark. `--final` closes the period and stores its
//! rows in the ledger in the same transaction; a closed period is re-exported from those rows, byte for byte,
//! whatever arrived since.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use ledger::Period;
use reports::export::Format;
use usecases::billing::{Billed, BillingAsked};

#[derive(Debug, Subcommand)]
pub enum ExportCommand {
    /// Billable usage of a month, one row per (tenant, metric).
    Billing(BillingArgs),
}

#[derive(Debug, Args)]
pub struct BillingArgs {
    /// The billing period, a month in UTC: YYYY-MM.
    #[arg(long, value_parser = parse_period)]
    period: Period,
    /// File format.
    #[arg(long, value_enum)]
    format: FormatArg,
    /// Close the period: the export is stored in the ledger and never changes; later events for it become
    /// LATE_USAGE adjustments carried into the next period closed.
    #[arg(long = "final")]
    final_: bool,
    /// Write to this file (replaced whole, atomically) instead of stdout.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Write the export's figures to this file for the node exporter's textfile collector (Prometheus text format):
    /// the last success, its duration, rows, tenants, whether the period is closed.
    #[arg(long, value_name = "FILE")]
    metrics_file: Option<PathBuf>,
    /// Read the running cluster at these brokers instead of local ledgers: each shard's owner, found in the routing
    /// catalog, is asked over HTTP (`GET /v1/admin/billing`) and the shards' exports are joined. An owner that does
    /// not answer fails the command naming its shard. With --final, the period is closed in every shard or in none:
    /// every owner first says whether each of its shards can close it (a shard that cannot refuses the close, named,
    /// and nothing is closed), then each closes its shards at the watermarks it answered.
    #[arg(long, value_name = "BROKERS")]
    cluster: Option<String>,
    /// With --cluster: the token to ask the nodes with, one for every tenant (`tenants = ["*"]`).
    #[arg(long, env = "QUOTA_LEDGER_TOKEN", hide_env_values = true, requires = "cluster")]
    token: Option<String>,
    #[command(flatten)]
    ca_file: super::trust_args::CaFileArg,
    /// Follow each row with its consumption per project: a row per project its consumption names, then one with
    /// `project` empty for the consumption naming none, each with tenant, metric, period, consumption, watermark and
    /// gaps only, in a column `project` added last (empty in the bill's rows). The bill's rows are unchanged. With
    /// --cluster, each owner splits its shards' rows.
    #[arg(long, value_enum, value_name = "SCOPE")]
    by: Option<ByArg>,
}

/// What `--by` splits each row's consumption by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ByArg {
    Project,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum FormatArg {
    Csv,
    Parquet,
    Jsonl,
}

fn parse_period(text: &str) -> Result<Period, String> {
    text.parse().map_err(|e: ledger::PeriodParseError| e.to_string())
}

pub fn run(store: &super::Store, command: ExportCommand) -> anyhow::Result<ExitCode> {
    let ExportCommand::Billing(args) = command;
    let started = std::time::Instant::now();
    // A close cannot be undone: an --out that cannot be written stops the command before anything is closed (failing
    // after the close, it would leave the user taking the period for still open).
    if let Some(path) = &args.out {
        usecases::files::check_writable(path)?;
    }
    let asked = BillingAsked { period: args.period, close: args.final_, by_project: args.by == Some(ByArg::Project) };
    let billed = match &args.cluster {
        Some(brokers) => {
            usecases::billing::of_cluster(&super::cluster::of(brokers, args.token.as_deref(), &args.ca_file)?, asked)?
        }
        None => usecases::billing::export(store, asked)?,
    };
    for note in &billed.shard_notes {
        eprintln!("{note}");
    }
    if billed.late_usage_recorded > 0 {
        eprintln!(
            "late usage of closed periods: {} LATE_USAGE adjustments recorded for this close to carry",
            billed.late_usage_recorded
        );
    }
    let Billed { export, note, projects, .. } = billed;
    let format = match args.format {
        FormatArg::Csv => Format::Csv,
        FormatArg::Parquet => Format::Parquet,
        FormatArg::Jsonl => Format::Jsonl,
    };
    let bytes = match &projects {
        Some(projects) => export.to_bytes_by_project(format, projects)?,
        None => export.to_bytes(format)?,
    };
    match &args.out {
        // Past the check above (a full disk, say): a --final run has closed the period, which must be said.
        Some(path) => usecases::files::write_atomically(path, &bytes).with_context(|| match args.final_ {
            true => format!("{note}, but its export was not written: run the same command again to write it"),
            false => "the export was not written".to_string(),
        })?,
        None => super::stdout().write_all(&bytes)?,
    }
    eprintln!("{note}: {} rows", export.rows.len());
    if let Some(path) = &args.metrics_file {
        let figures = usecases::billing::figures(&export, args.final_, started.elapsed());
        figures.write(path).with_context(|| format!("cannot write the metrics file {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
