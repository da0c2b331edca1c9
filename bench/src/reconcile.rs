//! `bench reconcile`: the nightly job on a generated month (issue: 10,000,000 events, 1,000 tenants, under 60 s).
//!
//! The ledger is built once by appending the generator's stream (the generation is not timed) and kept in
//! `--dir` for reruns. `reconcile` then runs as a child process of the real binary, so that its peak memory
//! (the child's maximum resident set, from `wait4`) is its own and not the generator's. After the first run, in the
//! same run of the benchmark: a rerun with nothing new (which starts from the first), the same rerun reading
//! everything (`--full`, what every rerun cost before runs started from the last one), then runs after appending 1%
//! more events, of a few tenants and then of every tenant.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;
use ledger::{Batch, Incoming, Ledger, Origin};
use schemas::Event;
use serde::Serialize;

use generate::{GenerateSettings, Generated, Generator, Progress};

/// Events per append while building the benchmark ledger.
const BUILD_BATCH_EVENTS: usize = 10_000;
/// The run judged: the whole generated November.
pub const AS_OF: &str = "2026-12-01T00:00:00Z";
/// The events appended before each run after new events, as a share of the ledger's: "1% new".
const NEW_EVENTS_PERCENT: u64 = 1;
/// The tenants the first appended events belong to, as a share of the month's: late events of a few producers.
const FEW_TENANTS_PERCENT: u32 = 1;
/// Seeds of the appended events: other ids than the month's (seed 1).
const NEW_EVENTS_SEEDS: [u64; 2] = [2, 3];

/// What to generate and where.
#[derive(Debug, Clone)]
pub struct ReconcileBenchSettings {
    /// Generated messages (duplicates and conflicting copies included, malformed ones left out).
    pub events: u64,
    /// Tenants of the generated month.
    pub tenants: u32,
    /// Where the ledger is built and kept (`bench-reconcile-<events>-<tenants>.db`); a temporary directory when
    /// absent.
    pub dir: Option<PathBuf>,
    /// The `quota-ledger` binary whose `reconcile` is timed.
    pub binary: PathBuf,
}

/// The figures of one run.
#[derive(Debug, Clone, Serialize)]
pub struct ReconcileFigures {
    /// Events in the ledger.
    pub events_recorded: u64,
    /// Tenants of the generated month.
    pub tenants: u32,
    /// Seconds of the first run.
    pub first_run_seconds: f64,
    /// Peak resident memory of the first run, in MiB.
    pub first_run_peak_memory_mib: f64,
    /// Entries the first run put in the outbox: its adjustments and its alerts.
    pub adjustments_written: u64,
    /// Seconds of the rerun (clean: it writes nothing).
    pub rerun_seconds: f64,
    /// Peak resident memory of the rerun, in MiB.
    pub rerun_peak_memory_mib: f64,
    /// What the rerun read (`coverage.mode` of `reconcile --json`, with its reason when full).
    pub rerun_coverage: String,
    /// Seconds of the same rerun reading every event (`--full`).
    pub full_rerun_seconds: f64,
    /// A run after appending 1% more events, of 1% of the tenants.
    pub new_events_of_few_tenants: NewEventsRun,
    /// A run after appending 1% more events again, of every tenant.
    pub new_events_of_every_tenant: NewEventsRun,
    /// Size of the ledger file, in MiB.
    pub ledger_file_mib: f64,
    /// The kept ledger.
    #[serde(skip)]
    pub ledger: PathBuf,
}

/// A run after appending new events.
#[derive(Debug, Clone, Serialize)]
pub struct NewEventsRun {
    /// Events appended (usage, reservation and decision events; duplicates of recorded ones not counted).
    pub events_appended: u64,
    /// Tenants they belong to.
    pub tenants: u32,
    /// Seconds of the run.
    pub seconds: f64,
    /// Its peak resident memory, in MiB.
    pub peak_memory_mib: f64,
    /// What it read (`coverage.mode`, with its reason when full).
    pub coverage: String,
}

/// The figures as lines for people: the ledger, then the first run and the rerun.
impl std::fmt::Display for ReconcileFigures {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (events_recorded, tenants) = (self.events_recorded, self.tenants);
        let (ledger, mib) = (self.ledger.display(), self.ledger_file_mib);
        writeln!(out, "ledger {ledger} ({mib:.0} MiB): {events_recorded} events, {tenants} tenants")?;
        writeln!(
            out,
            "reconcile --as-of {AS_OF}   {:7.2} s  peak memory {:7.1} MiB  {} adjustments and alerts written",
            self.first_run_seconds, self.first_run_peak_memory_mib, self.adjustments_written
        )?;
        writeln!(
            out,
            "rerun (clean, nothing new)                 {:7.2} s  peak memory {:7.1} MiB  read: {}",
            self.rerun_seconds, self.rerun_peak_memory_mib, self.rerun_coverage
        )?;
        writeln!(out, "rerun --full (clean)                       {:7.2} s", self.full_rerun_seconds)?;
        for (name, run) in [
            ("1% new events of 1% of tenants", &self.new_events_of_few_tenants),
            ("1% new events of every tenant", &self.new_events_of_every_tenant),
        ] {
            writeln!(
                out,
                "{name:<42} {:7.2} s  peak memory {:7.1} MiB  {} events of {} tenants appended, read: {}",
                run.seconds, run.peak_memory_mib, run.events_appended, run.tenants, run.coverage
            )?;
        }
        Ok(())
    }
}

/// Builds the month's ledger when it is not kept yet, copies it, and times `reconcile --as-of` [`AS_OF`] on the copy
/// twice: the first run and a clean rerun.
pub fn run(settings: &ReconcileBenchSettings, progress: &dyn Fn(Progress)) -> anyhow::Result<ReconcileFigures> {
    let ReconcileBenchSettings { events, tenants, .. } = *settings;
    let temporary = tempfile::tempdir().context("cannot create a temporary directory")?;
    let dir = settings.dir.clone().unwrap_or_else(|| temporary.path().to_path_buf());
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = built_ledger(&dir, events, tenants, progress)?;
    // A kept ledger may hold a previous benchmark's adjustments: copy it so every run starts from the same state.
    let run_path = dir.join("bench-reconcile-run.db");
    super::remove_database(&run_path);
    Ledger::open_read_only(&path)?.copy_into(&run_path)?;
    // Migrated before the clock starts: a ledger built by an older binary gets its new indexes here.
    let events_recorded = Ledger::open(&run_path)?.status()?.events_recorded;
    let (first, _) = reconcile_child(&settings.binary, &run_path, false)?;
    anyhow::ensure!(first.exit_code <= 1, "reconcile failed with exit code {}", first.exit_code);
    let adjustments_written = Ledger::open_read_only(&run_path)?.outbox_status()?.enqueued;
    let (rerun, rerun_coverage) = reconcile_child(&settings.binary, &run_path, false)?;
    anyhow::ensure!(rerun.exit_code == 0, "a rerun with the same --as-of must be clean, exit {}", rerun.exit_code);
    let (full_rerun, _) = reconcile_child(&settings.binary, &run_path, true)?;
    anyhow::ensure!(full_rerun.exit_code == 0, "a full rerun must be clean too, exit {}", full_rerun.exit_code);
    let new_events = (events * NEW_EVENTS_PERCENT / 100).max(1);
    let few = (tenants * FEW_TENANTS_PERCENT / 100).max(1);
    let new_events_of_few_tenants = after_new_events(settings, &run_path, (new_events, few, NEW_EVENTS_SEEDS[0]))?;
    let new_events_of_every_tenant = after_new_events(settings, &run_path, (new_events, tenants, NEW_EVENTS_SEEDS[1]))?;
    Ok(ReconcileFigures {
        events_recorded,
        tenants,
        first_run_seconds: first.elapsed.as_secs_f64(),
        first_run_peak_memory_mib: first.peak_memory_mib,
        adjustments_written,
        rerun_seconds: rerun.elapsed.as_secs_f64(),
        rerun_peak_memory_mib: rerun.peak_memory_mib,
        rerun_coverage,
        full_rerun_seconds: full_rerun.elapsed.as_secs_f64(),
        new_events_of_few_tenants,
        new_events_of_every_tenant,
        ledger_file_mib: std::fs::metadata(&run_path)?.len() as f64 / (1024.0 * 1024.0),
        ledger: path,
    })
}

/// The benchmark ledger `bench-reconcile-<events>-<tenants>.db` in `dir`, built first when it is not complete
/// (`bench export` shares it).
pub(super) fn built_ledger(
    dir: &Path,
    events: u64,
    tenants: u32,
    progress: &dyn Fn(Progress),
) -> anyhow::Result<PathBuf> {
    let path = dir.join(format!("bench-reconcile-{events}-{tenants}.db"));
    let built = path.with_extension("built");
    if !built.exists() {
        super::remove_database(&path);
        build(&path, events, tenants, progress)?;
        std::fs::write(&built, b"complete\n")?;
    }
    Ok(path)
}

/// Appends the generator's valid events (malformed ones left out: they only reach the quarantine).
fn build(path: &Path, events: u64, tenants: u32, progress: &dyn Fn(Progress)) -> anyhow::Result<()> {
    let mut ledger = usecases::store::open_for_append(path)?;
    let mut settings = GenerateSettings::new(tenants, events, 1);
    settings.raw_malformed = false;
    progress(Progress::Begin { step: "building ledger".into(), total: Some(events) });
    let mut batch = Batch::default();
    for (generated, at) in Generator::new(settings).zip(1..) {
        progress(Progress::At(at));
        let Generated::Event(event) = generated else { continue };
        batch.events.push(Incoming { event, origin: Origin::Local { name: "bench".into() }, raw: None });
        if batch.events.len() == BUILD_BATCH_EVENTS {
            ledger.append(&std::mem::take(&mut batch))?;
        }
    }
    if !batch.events.is_empty() {
        ledger.append(&batch)?;
    }
    progress(Progress::End);
    Ok(())
}

/// Appends `events` new messages of the generator's (seed `seed`) of the first `tenants` tenants, its usage, reservation
/// and decision events alone (its policies and grants are the month's again, and a plan default changes every tenant),
/// then times a run as of [`AS_OF`].
fn after_new_events(
    settings: &ReconcileBenchSettings,
    path: &Path,
    (events, tenants, seed): (u64, u32, u64),
) -> anyhow::Result<NewEventsRun> {
    let before = Ledger::open_read_only(path)?.status()?.events_recorded;
    let mut ledger = usecases::store::open_for_append(path)?;
    let mut generate = GenerateSettings::new(tenants, events, seed);
    generate.raw_malformed = false;
    let mut batch = Batch::default();
    for generated in Generator::new(generate) {
        let Generated::Event(event) = generated else { continue };
        if !matches!(event, Event::Usage(_) | Event::Reservation(_) | Event::Decision(_)) {
            continue;
        }
        batch.events.push(Incoming { event, origin: Origin::Local { name: "bench".into() }, raw: None });
        if batch.events.len() == BUILD_BATCH_EVENTS {
            ledger.append(&std::mem::take(&mut batch))?;
        }
    }
    if !batch.events.is_empty() {
        ledger.append(&batch)?;
    }
    let events_appended = ledger.status()?.events_recorded - before;
    drop(ledger);
    let (run, coverage) = reconcile_child(&settings.binary, path, false)?;
    anyhow::ensure!(run.exit_code <= 1, "reconcile failed with exit code {}", run.exit_code);
    let (seconds, peak_memory_mib) = (run.elapsed.as_secs_f64(), run.peak_memory_mib);
    Ok(NewEventsRun { events_appended, tenants, seconds, peak_memory_mib, coverage })
}

/// `binary --ledger LEDGER reconcile --as-of AS_OF --json [--full]`, timed, with what it read
/// (`coverage.mode`, and its reason when full).
fn reconcile_child(binary: &Path, ledger_path: &Path, full: bool) -> anyhow::Result<(super::ChildRun, String)> {
    let mut command = Command::new(binary);
    command.arg("--ledger").arg(ledger_path).args(["reconcile", "--as-of", AS_OF, "--json"]);
    if full {
        command.arg("--full");
    }
    let run = super::timed_child(command, true).context("cannot start reconcile")?;
    let report: serde_json::Value = match run.exit_code {
        0 | 1 => serde_json::from_str(&run.stdout).context("reconcile --json printed no JSON")?,
        _ => serde_json::Value::Null,
    };
    let coverage = &report["coverage"];
    let mode = coverage["mode"].as_str().unwrap_or("unknown");
    let coverage = match coverage["reason"].as_str() {
        Some(reason) => format!("{mode} ({reason})"),
        None => format!("{mode} ({} tenants)", coverage["tenants"].as_array().map_or(0, Vec::len)),
    };
    Ok((run, coverage))
}
