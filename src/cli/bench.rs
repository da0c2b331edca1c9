//! `bench append`: the ledger's append against the floor of this disk, in one run.
//!
//! The floor is a bare SQLite insert of the same rows (same tables and columns, same batches, same WAL and
//! synchronous settings) with no deduplication index, no hash chain, no triggers and no checks, its payloads
//! encoded before the clock starts. The ledger's append does all of that work inside the clock.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Subcommand;
use indicatif::{ProgressBar, ProgressStyle};
use ledger::{Batch, Incoming, Ledger, Origin};
use rusqlite::{Connection, params};
use schemas::{Catalog, Event, Header, Timestamp, UsageEvent};

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

#[derive(Debug, serde::Serialize)]
struct AppendFigures {
    events: u64,
    batch_events: usize,
    ledger_seconds: f64,
    ledger_events_per_second: f64,
    bare_insert_seconds: f64,
    bare_insert_events_per_second: f64,
    /// ledger rate / bare insert rate.
    ratio: f64,
}

pub fn run(command: BenchCommand) -> anyhow::Result<ExitCode> {
    match command {
        BenchCommand::Append { events, batch_events, dir, json } => bench_append(events, batch_events, dir, json),
        BenchCommand::Hook { concurrency, seconds, random_request_ids, json } => {
            super::bench_hook::run(&concurrency, seconds, random_request_ids, json)
        }
        BenchCommand::Reconcile { events, tenants, dir, json } => {
            super::bench_reconcile::run(events, tenants, dir, json)
        }
        BenchCommand::Export { events, tenants, dir, json } => super::bench_export::run(events, tenants, dir, json),
    }
}

fn bench_append(events: u64, batch_events: usize, dir: Option<PathBuf>, json: bool) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(batch_events > 0, "--batch-events must be at least 1");
    let temporary = tempfile::tempdir().context("cannot create a temporary directory")?;
    let dir = dir.unwrap_or_else(|| temporary.path().to_path_buf());
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let catalog = Catalog::builtin();
    for file in ["bench-ledger.db", "bench-bare.db"] {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(dir.join(format!("{file}{suffix}")));
        }
    }
    eprintln!("generating {events} UsageEvents ...");
    let usage: Vec<Event> = (0..events).map(usage_event).collect();
    let ledger_time = time_ledger(&dir.join("bench-ledger.db"), catalog, &usage, batch_events)?;
    let bare_time = time_bare_insert(&dir.join("bench-bare.db"), catalog, &usage, batch_events)?;
    let rate = |d: Duration| events as f64 / d.as_secs_f64();
    let figures = AppendFigures {
        events,
        batch_events,
        ledger_seconds: ledger_time.as_secs_f64(),
        ledger_events_per_second: rate(ledger_time),
        bare_insert_seconds: bare_time.as_secs_f64(),
        bare_insert_events_per_second: rate(bare_time),
        ratio: rate(ledger_time) / rate(bare_time),
    };
    if json {
        super::print_json(&figures)?;
    } else {
        let mut out = super::stdout();
        writeln!(out, "events {events}, {batch_events} per batch, files in {}", dir.display())?;
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
    }
    Ok(ExitCode::SUCCESS)
}

/// splitmix64: a deterministic spread of bits for ids that look random, as producers' UUIDs do.
pub(super) fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The i-th UsageEvent of the benchmark: 1,000 tenants, three metrics, one November.
fn usage_event(i: u64) -> Event {
    const METRICS: [&str; 3] = ["requests", "tokens", "bytes"];
    let bits = mix(i);
    let november_2026 = Timestamp::parse_rfc3339("2026-11-01T00:00:00Z").expect("a valid timestamp").micros();
    let month_micros = 30 * 24 * 3_600 * 1_000_000i64;
    Event::Usage(UsageEvent {
        header: Header {
            event_id: format!("{:016x}{:016x}", bits, mix(bits)),
            occurred_at: Timestamp(november_2026 + (bits % month_micros as u64) as i64),
            tenant: format!("org-{}", bits % 1_000),
            subject: Some(format!("key-{}", (bits >> 20) % 10)),
            metric: METRICS[(bits >> 40) as usize % METRICS.len()].to_string(),
            source: "bench".to_string(),
        },
        quantity: (bits >> 8) as i64 % 1_000,
        request_id: Some(format!("req-{i}")),
        attributes: BTreeMap::new(),
    })
}

fn progress(label: &str, total: u64) -> ProgressBar {
    let style = ProgressStyle::with_template("{msg:14} {bar:40} {pos}/{len} [{elapsed}]").expect("a valid template");
    ProgressBar::new(total).with_style(style).with_message(label.to_string())
}

fn time_ledger(path: &Path, catalog: &Catalog, usage: &[Event], batch_events: usize) -> anyhow::Result<Duration> {
    let mut ledger = Ledger::open(path)?;
    // As ingest from Kafka appends.
    ledger.keep_key_filter()?;
    let batches: Vec<Batch> = usage
        .chunks(batch_events)
        .map(|chunk| Batch {
            events: chunk
                .iter()
                .map(|event| Incoming {
                    event: event.clone(),
                    origin: Origin::Local { name: "bench".into() },
                    raw: Some(catalog.encode_single_object(event)),
                })
                .collect(),
            ..Batch::default()
        })
        .collect();
    let bar = progress("ledger append", usage.len() as u64);
    let start = Instant::now();
    for batch in &batches {
        ledger.append(batch)?;
        bar.inc(batch.events.len() as u64);
    }
    let elapsed = start.elapsed();
    bar.finish_and_clear();
    anyhow::ensure!(ledger.status()?.events_recorded == usage.len() as u64, "every benchmark event is recorded");
    Ok(elapsed)
}

const BARE_TABLES: &str = "
    CREATE TABLE entries (
        seq INTEGER PRIMARY KEY, event_id TEXT, event_type TEXT, status TEXT, duplicate_of INTEGER, tenant TEXT,
        subject TEXT, metric TEXT, source TEXT, occurred_at INTEGER, origin TEXT, origin_stream TEXT,
        origin_partition INTEGER, origin_offset INTEGER, recorded_at INTEGER, payload_fingerprint INTEGER,
        payload BLOB, raw BLOB, payload_hash BLOB, entry_hash BLOB);
    CREATE TABLE usage_events (seq INTEGER PRIMARY KEY, quantity INTEGER, request_id TEXT, attributes TEXT);";

fn time_bare_insert(path: &Path, catalog: &Catalog, usage: &[Event], batch_events: usize) -> anyhow::Result<Duration> {
    let mut conn = Connection::open(path)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "wal_autocheckpoint", ledger::WAL_AUTOCHECKPOINT_PAGES)?;
    conn.pragma_update(None, "cache_size", -ledger::CACHE_KIB)?;
    conn.execute_batch(BARE_TABLES)?;
    let payloads: Vec<Vec<u8>> = usage.iter().map(|e| catalog.encode_body(e)).collect();
    let fingerprint = catalog.current(schemas::EventType::UsageEvent).fingerprint as i64;
    let hash = [0u8; 32];
    let bar = progress("bare insert", usage.len() as u64);
    let start = Instant::now();
    let mut seq = 0i64;
    for (chunk, payload_chunk) in usage.chunks(batch_events).zip(payloads.chunks(batch_events)) {
        let tx = conn.transaction()?;
        for (event, payload) in chunk.iter().zip(payload_chunk) {
            let Event::Usage(u) = event else { unreachable!("the benchmark appends UsageEvents") };
            seq += 1;
            let h = &u.header;
            tx.prepare_cached(
                "INSERT INTO entries VALUES (?1, ?2, 'UsageEvent', 'recorded', NULL, ?3, ?4, ?5, ?6, ?7, 'local',
                 'bench', NULL, NULL, ?8, ?9, ?10, NULL, ?11, ?11)",
            )?
            .execute(params![
                seq,
                h.event_id,
                h.tenant,
                h.subject,
                h.metric,
                h.source,
                h.occurred_at.micros(),
                seq,
                fingerprint,
                payload,
                &hash[..]
            ])?;
            tx.prepare_cached("INSERT INTO usage_events VALUES (?1, ?2, ?3, '{}')")?.execute(params![
                seq,
                u.quantity,
                u.request_id
            ])?;
        }
        tx.commit()?;
        bar.inc(chunk.len() as u64);
    }
    let elapsed = start.elapsed();
    bar.finish_and_clear();
    Ok(elapsed)
}
