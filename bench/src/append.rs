//! `bench append`: the ledger's append against the floor of this disk, in one run.
//!
//! The floor is a bare SQLite insert of the same rows (same tables and columns, same batches, same WAL and
//! synchronous settings) with no deduplication index, no hash chain, no triggers and no checks, its payloads
//! encoded before the clock starts. The ledger's append does all of that work inside the clock.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use ledger::{Batch, Incoming, Ledger, Origin};
use rusqlite::{Connection, params};
use schemas::{Catalog, Event, Header, Timestamp, UsageEvent};
use serde::Serialize;

use super::mix;
use generate::Progress;

/// What to append.
#[derive(Debug, Clone)]
pub struct AppendSettings {
    /// UsageEvents to append.
    pub events: u64,
    /// Events per batch (one transaction each).
    pub batch_events: usize,
    /// Directory for the two database files (a temporary directory when absent).
    pub dir: Option<PathBuf>,
}

/// The figures of one run.
#[derive(Debug, Clone, Serialize)]
pub struct AppendFigures {
    /// UsageEvents appended, each way.
    pub events: u64,
    /// Events per transaction.
    pub batch_events: usize,
    /// Seconds the ledger's appends took.
    pub ledger_seconds: f64,
    /// Events per second through the ledger.
    pub ledger_events_per_second: f64,
    /// Seconds the bare inserts took.
    pub bare_insert_seconds: f64,
    /// Events per second through bare inserts.
    pub bare_insert_events_per_second: f64,
    /// ledger rate / bare insert rate.
    pub ratio: f64,
    /// Where the database files were written.
    #[serde(skip)]
    pub dir: PathBuf,
}

/// The figures as lines for people: both rates and their ratio.
impl std::fmt::Display for AppendFigures {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(out, "events {}, {} per batch, files in {}", self.events, self.batch_events, self.dir.display())?;
        let (seconds, rate) = (self.ledger_seconds, self.ledger_events_per_second);
        writeln!(out, "ledger append  {seconds:8.2} s  {rate:>10.0} events/s")?;
        let (seconds, rate) = (self.bare_insert_seconds, self.bare_insert_events_per_second);
        writeln!(out, "bare insert    {seconds:8.2} s  {rate:>10.0} events/s")?;
        writeln!(out, "ratio          {:8.3}  (ledger / bare insert)", self.ratio)
    }
}

/// Appends `settings.events` UsageEvents to a new ledger, then bare-inserts the same rows into a new database.
pub fn run(settings: &AppendSettings, progress: &dyn Fn(Progress)) -> anyhow::Result<AppendFigures> {
    let AppendSettings { events, batch_events, .. } = *settings;
    anyhow::ensure!(batch_events > 0, "--batch-events must be at least 1");
    let temporary = tempfile::tempdir().context("cannot create a temporary directory")?;
    let dir = settings.dir.clone().unwrap_or_else(|| temporary.path().to_path_buf());
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let catalog = Catalog::builtin();
    for file in ["bench-ledger.db", "bench-bare.db"] {
        super::remove_database(&dir.join(file));
    }
    progress(Progress::Note(format!("generating {events} UsageEvents ...")));
    let usage: Vec<Event> = (0..events).map(usage_event).collect();
    let ledger_time = time_ledger(&dir.join("bench-ledger.db"), catalog, &usage, batch_events, progress)?;
    let bare_time = time_bare_insert(&dir.join("bench-bare.db"), catalog, &usage, batch_events, progress)?;
    let rate = |d: Duration| events as f64 / d.as_secs_f64();
    Ok(AppendFigures {
        events,
        batch_events,
        ledger_seconds: ledger_time.as_secs_f64(),
        ledger_events_per_second: rate(ledger_time),
        bare_insert_seconds: bare_time.as_secs_f64(),
        bare_insert_events_per_second: rate(bare_time),
        ratio: rate(ledger_time) / rate(bare_time),
        dir,
    })
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
            project: None,
            api_key: None,
            metric: METRICS[(bits >> 40) as usize % METRICS.len()].to_string(),
            source: "bench".to_string(),
        },
        quantity: (bits >> 8) as i64 % 1_000,
        request_id: Some(format!("req-{i}")),
        attributes: BTreeMap::new(),
    })
}

fn time_ledger(
    path: &Path,
    catalog: &Catalog,
    usage: &[Event],
    batch_events: usize,
    progress: &dyn Fn(Progress),
) -> anyhow::Result<Duration> {
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
    progress(Progress::Begin { step: "ledger append".into(), total: Some(usage.len() as u64) });
    let start = Instant::now();
    let mut appended = 0;
    for batch in &batches {
        ledger.append(batch)?;
        appended += batch.events.len() as u64;
        progress(Progress::At(appended));
    }
    let elapsed = start.elapsed();
    progress(Progress::End);
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

fn time_bare_insert(
    path: &Path,
    catalog: &Catalog,
    usage: &[Event],
    batch_events: usize,
    progress: &dyn Fn(Progress),
) -> anyhow::Result<Duration> {
    let mut conn = Connection::open(path)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "wal_autocheckpoint", ledger::WAL_AUTOCHECKPOINT_PAGES)?;
    conn.pragma_update(None, "cache_size", -ledger::CACHE_KIB)?;
    conn.execute_batch(BARE_TABLES)?;
    let payloads: Vec<Vec<u8>> = usage.iter().map(|e| catalog.encode_body(e)).collect();
    let fingerprint = catalog.current(schemas::EventType::UsageEvent).fingerprint as i64;
    let hash = [0u8; 32];
    progress(Progress::Begin { step: "bare insert".into(), total: Some(usage.len() as u64) });
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
        progress(Progress::At(seq as u64));
    }
    let elapsed = start.elapsed();
    progress(Progress::End);
    Ok(elapsed)
}
