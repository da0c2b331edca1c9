//! `bench append|hook|reconcile|export|ingest|start`: the benchmarks of the `bench` crate, their figures printed as aligned lines
//! or, with `--json`, as JSON.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use bench::append::AppendSettings;
use bench::export::ExportBenchSettings;
use bench::hook::HookBenchSettings;
use bench::ingest::IngestBenchSettings;
use bench::reconcile::ReconcileBenchSettings;
use clap::Subcommand;

/// Progress bars of the benchmarks' long steps.
const BAR_TEMPLATE: &str = "{msg:16} {bar:40} {pos}/{len} [{elapsed}]";

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Append UsageEvents in batches, then bare-insert the same rows; print both rates and their ratio.
    Append {
        /// UsageEvents to append.
        #[arg(long, default_value_t = 1_000_000)]
        events: u64,
        /// Events per batch (one transaction each).
        #[arg(long, default_value_t = 1_000)]
        batch_events: usize,
        /// Directory for the two database files (a temporary directory when absent).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Print the figures as JSON.
        #[arg(long)]
        json: bool,
    },
    /// A generated month appended into 1 shard and into more (docs/contract.md §9.4), one process, a writer thread
    /// per shard: messages per second of each, per shard, and the speedup over the first count.
    Ingest {
        /// Generated messages of the month.
        #[arg(long, default_value_t = 1_000_000)]
        events: u64,
        /// Tenants of the month.
        #[arg(long, default_value_t = 1_000)]
        tenants: u32,
        /// Messages per append, per shard (ingest's default batch).
        #[arg(long, default_value_t = ingest::consumer::BATCH_MAX_EVENTS)]
        batch_events: usize,
        /// Shard counts measured in each round, in this order; the speedup is over the first.
        #[arg(long, value_delimiter = ',', default_value = "1,2")]
        shards: Vec<u32>,
        /// Rounds: each shard count is measured this many times, the median reported.
        #[arg(long, default_value_t = 3)]
        rounds: u32,
        /// Directory for the shards (a temporary directory when absent).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Print the figures as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Decisions per second and p50/p99 latency of the hook, in-process and over HTTP, beside Redis+Lua.
    Hook {
        /// Client threads, one measurement each.
        #[arg(long, value_delimiter = ',', default_value = "1,8,64")]
        concurrency: Vec<usize>,
        /// Seconds each measurement counts, after half a second of warm-up.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        /// Send each check a random request_id (32 hex digits, as a UUID's) instead of none (then the hook
        /// uses the idempotency key, and the ids of one client sort together).
        #[arg(long)]
        random_request_ids: bool,
        /// Also measure the hook over shards in one process (a writer per shard, `serve --data`): on 1 shard and
        /// on this many, with the same tenants; prints the speedup and the ratio to Redis+Lua per node.
        #[arg(long, value_parser = clap::value_parser!(u32).range(2..))]
        shards: Option<u32>,
        /// Print the figures as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Decisions per second and p50/p99 latency of one `serve` asked through Envoy's rate limit service (gRPC) and
    /// through `POST /v1/check` (HTTP), at each concurrency.
    Rls {
        /// Client connections, one measurement of each way each.
        #[arg(long, value_delimiter = ',', default_value = "1,64")]
        concurrency: Vec<usize>,
        /// Seconds each measurement counts, after half a second of warm-up.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        /// The served ledger's durability.
        #[arg(long, default_value = "full", value_parser = ["full", "normal"])]
        durability: String,
    },
    /// Generate a month of traffic into a ledger (kept for reuse), then time `reconcile` on it as a child
    /// process: seconds and peak memory of the first run and of a clean rerun.
    Reconcile {
        /// Generated messages (duplicates and conflicting copies included, malformed ones left out).
        #[arg(long, default_value_t = 10_000_000)]
        events: u64,
        /// Tenants of the generated month.
        #[arg(long, default_value_t = 1_000)]
        tenants: u32,
        /// Where the ledger is built and kept (`bench-reconcile-<events>-<tenants>.db`); a temporary directory
        /// when absent.
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Print the figures as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Seconds to the first decision and peak memory of `serve` started on a generated month: from the ledger's
    /// snapshot of the hook's state, and folding the ledger (`--full-fold`).
    Start {
        /// Generated messages of the month.
        #[arg(long, default_value_t = 10_000_000)]
        events: u64,
        /// Tenants of the generated month.
        #[arg(long, default_value_t = 1_000)]
        tenants: u32,
        /// Where the ledger is built and kept (reused within the hour); a temporary directory when absent.
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Print the figures as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Billing export of a generated month (the `bench reconcile` ledger, copied) as CSV and Parquet, against
    /// DuckDB summing the same consumption from Parquet: seconds, ratio and peak memory.
    Export {
        /// Generated messages of the month.
        #[arg(long, default_value_t = 10_000_000)]
        events: u64,
        /// Tenants of the generated month.
        #[arg(long, default_value_t = 1_000)]
        tenants: u32,
        /// Where the ledger is kept (shared with `bench reconcile`) and the run's files are written.
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Print the figures as JSON.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(command: BenchCommand) -> anyhow::Result<ExitCode> {
    let display = super::ProgressDisplay::new(BAR_TEMPLATE);
    let progress = |p| display.show(p);
    match command {
        BenchCommand::Append { events, batch_events, dir, json } => {
            print(&bench::append::run(&AppendSettings { events, batch_events, dir }, &progress)?, json)
        }
        BenchCommand::Ingest { events, tenants, batch_events, shards, rounds, dir, json } => {
            let settings = IngestBenchSettings { events, tenants, batch_events, shards, rounds, dir };
            print(&bench::ingest::run(&settings, &progress)?, json)
        }
        BenchCommand::Hook { concurrency, seconds, random_request_ids, shards, json } => {
            let settings = HookBenchSettings { concurrency, seconds, random_request_ids, binary: binary()?, shards };
            // Each concurrency's lines as they come: a run at the defaults takes minutes.
            let figures = bench::hook::run(&settings, &mut |measured| match json {
                true => Ok(()),
                false => Ok(measured.iter().try_for_each(|f| write!(super::stdout(), "{f}"))?),
            })?;
            if json {
                super::print_json(&figures)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Rls { concurrency, seconds, durability } => {
            let settings = bench::rls::RlsBenchSettings { concurrency, seconds, durability, binary: binary()? };
            bench::rls::run(&settings, &mut |measured| {
                Ok(measured.iter().try_for_each(|f| write!(super::stdout(), "{f}"))?)
            })?;
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Reconcile { events, tenants, dir, json } => {
            let settings = ReconcileBenchSettings { events, tenants, dir, binary: binary()? };
            print(&bench::reconcile::run(&settings, &progress)?, json)
        }
        BenchCommand::Start { events, tenants, dir, json } => {
            let settings = bench::start::StartBenchSettings { events, tenants, dir, binary: binary()? };
            print(&bench::start::run(&settings, &progress)?, json)
        }
        BenchCommand::Export { events, tenants, dir, json } => {
            let settings = ExportBenchSettings { events, tenants, dir, binary: binary()? };
            print(&bench::export::run(&settings, &progress)?, json)
        }
    }
}

/// This binary: the benchmarks run its commands as child processes.
fn binary() -> anyhow::Result<PathBuf> {
    std::env::current_exe().context("cannot find the quota-ledger binary")
}

/// Figures as JSON, or as the benchmark's lines for people.
fn print(figures: &(impl serde::Serialize + std::fmt::Display), json: bool) -> anyhow::Result<ExitCode> {
    super::print(figures, json, |out, figures| write!(out, "{figures}"))
}
