//! `bench append|hook|reconcile|export|ingest`: the benchmarks of the `bench` crate, their figures printed as aligned lines
//! or, with `--json`, as JSON.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use bench::append::{AppendFigures, AppendSettings};
use bench::export::{ExportBenchSettings, ExportFigures, PERIOD};
use bench::hook::{Figures, HookBenchSettings};
use bench::ingest::{IngestBenchSettings, IngestFigures};
use bench::reconcile::{AS_OF, ReconcileBenchSettings, ReconcileFigures};
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
            let figures = bench::append::run(&AppendSettings { events, batch_events, dir }, &progress)?;
            print(&figures, json, print_append)
        }
        BenchCommand::Ingest { events, tenants, batch_events, shards, rounds, dir, json } => {
            let settings = IngestBenchSettings { events, tenants, batch_events, shards, rounds, dir };
            print(&bench::ingest::run(&settings, &progress)?, json, print_ingest)
        }
        BenchCommand::Hook { concurrency, seconds, random_request_ids, shards, json } => {
            let settings = HookBenchSettings { concurrency, seconds, random_request_ids, binary: binary()?, shards };
            // Each concurrency's lines as they come: a run at the defaults takes minutes.
            let figures =
                bench::hook::run(&settings, &mut |measured| if json { Ok(()) } else { print_hook(measured) })?;
            if json {
                super::print_json(&figures)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Reconcile { events, tenants, dir, json } => {
            let settings = ReconcileBenchSettings { events, tenants, dir, binary: binary()? };
            print(&bench::reconcile::run(&settings, &progress)?, json, print_reconcile)
        }
        BenchCommand::Export { events, tenants, dir, json } => {
            let settings = ExportBenchSettings { events, tenants, dir, binary: binary()? };
            print(&bench::export::run(&settings, &progress)?, json, print_export)
        }
    }
}

/// This binary: the benchmarks run its commands as child processes.
fn binary() -> anyhow::Result<PathBuf> {
    std::env::current_exe().context("cannot find the quota-ledger binary")
}

/// Figures as JSON, or as lines for people.
fn print<F: serde::Serialize>(
    figures: &F,
    json: bool,
    for_people: fn(&F) -> anyhow::Result<()>,
) -> anyhow::Result<ExitCode> {
    if json {
        super::print_json(figures)?
    } else {
        for_people(figures)?
    }
    Ok(ExitCode::SUCCESS)
}

fn print_append(figures: &AppendFigures) -> anyhow::Result<()> {
    let mut out = super::stdout();
    let (events, batch_events) = (figures.events, figures.batch_events);
    writeln!(out, "events {events}, {batch_events} per batch, files in {}", figures.dir.display())?;
    writeln!(
        out,
        "ledger append  {:8.2} s  {:>10.0} events/s",
        figures.ledger_seconds, figures.ledger_events_per_second
    )?;
    writeln!(
        out,
        "bare insert    {:8.2} s  {:>10.0} events/s",
        figures.bare_insert_seconds, figures.bare_insert_events_per_second
    )?;
    writeln!(out, "ratio          {:8.3}  (ledger / bare insert)", figures.ratio)?;
    Ok(())
}

fn print_ingest(f: &IngestFigures) -> anyhow::Result<()> {
    let mut out = super::stdout();
    writeln!(
        out,
        "{} messages, {} tenants, {} per append; decoding them all on one thread: {:.2} s",
        f.messages, f.tenants, f.batch_events, f.decode_seconds
    )?;
    for run in &f.runs {
        let shares: Vec<String> =
            run.per_shard.iter().map(|s| format!("shard {} {:.0}/s", s.partition, s.messages_per_second)).collect();
        writeln!(
            out,
            "round {} {:2} shards {:8.2} s {:>10.0} messages/s  ({})",
            run.round,
            run.shards,
            run.seconds,
            run.messages_per_second,
            shares.join(", ")
        )?;
    }
    for (shards, rate) in &f.median_messages_per_second {
        writeln!(out, "median {shards:2} shards {rate:>10.0} messages/s  speedup {:.2}", f.speedup[shards])?;
    }
    Ok(())
}

fn print_hook(measured: &[Figures]) -> anyhow::Result<()> {
    for f in measured {
        let caught_up = match f.outbox_caught_up_ms {
            Some(ms) => format!("  outbox published {ms} ms after"),
            None => String::new(),
        };
        let speedup = f.speedup_over_one_shard.map_or_else(String::new, |x| format!("  {x:.2}x one shard"));
        let per_node = f.ratio_to_redis_fsync_always.map_or_else(String::new, |x| format!("  {x:.2}x redis (always)"));
        let caught_up = format!("{caught_up}{speedup}{per_node}");
        writeln!(
            super::stdout(),
            "{:42} c={:<3} {:>8} req  {:>9.0} decisions/s  p50 {:>8.0} us  p99 {:>8.0} us{caught_up}",
            f.peer,
            f.concurrency,
            f.requests,
            f.decisions_per_second,
            f.p50_us,
            f.p99_us
        )?;
    }
    Ok(())
}

fn print_reconcile(figures: &ReconcileFigures) -> anyhow::Result<()> {
    let mut out = super::stdout();
    let (events_recorded, tenants) = (figures.events_recorded, figures.tenants);
    writeln!(
        out,
        "ledger {} ({:.0} MiB): {events_recorded} events, {tenants} tenants",
        figures.ledger.display(),
        figures.ledger_file_mib
    )?;
    writeln!(
        out,
        "reconcile --as-of {AS_OF}   {:7.2} s  peak memory {:7.1} MiB  {} adjustments and alerts written",
        figures.first_run_seconds, figures.first_run_peak_memory_mib, figures.adjustments_written
    )?;
    writeln!(
        out,
        "rerun (clean)                              {:7.2} s  peak memory {:7.1} MiB",
        figures.rerun_seconds, figures.rerun_peak_memory_mib
    )?;
    Ok(())
}

fn print_export(f: &ExportFigures) -> anyhow::Result<()> {
    let mut out = super::stdout();
    writeln!(
        out,
        "ledger ({:.0} MiB): {} events, {} tenants; migration {:.2} s; commit totals {:.2} s ({} reservations judged)",
        f.ledger_file_mib,
        f.events_recorded,
        f.tenants,
        f.migration_seconds,
        f.commit_totals_seconds,
        f.reservations_judged
    )?;
    writeln!(
        out,
        "export billing --period {PERIOD} --format csv      {:7.3} s  peak memory {:7.1} MiB  {} rows",
        f.csv_seconds, f.csv_peak_memory_mib, f.rows
    )?;
    writeln!(
        out,
        "export billing --period {PERIOD} --format parquet  {:7.3} s  peak memory {:7.1} MiB",
        f.parquet_seconds, f.parquet_peak_memory_mib
    )?;
    writeln!(
        out,
        "duckdb: sum of {} consumption rows by tenant, metric  {:7.3} s query ({:.3} s process)  peak memory {:7.1} MiB",
        f.consumption_parquet_rows, f.duckdb_query_seconds, f.duckdb_process_seconds, f.duckdb_peak_memory_mib
    )?;
    writeln!(
        out,
        "ratio: parquet export / duckdb {:.2}, csv export / duckdb {:.2} (goal: at most 1.5)",
        f.ratio_parquet, f.ratio_csv
    )?;
    Ok(())
}
