//! `bench reconcile`: the nightly job on a generated month (issue: 10,000,000 events, 1,000 tenants, under 60 s).
//!
//! The ledger is built once by appending the generator's stream (the generation is not timed) and kept in
//! `--dir` for reruns. `reconcile` then runs as a child process of the real binary, so that its peak memory
//! (the child's maximum resident set, from `wait4`) is its own and not the generator's.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;
use ledger::{Batch, Incoming, Ledger, Origin};
use serde::Serialize;

use generate::{GenerateSettings, Generated, Generator, Progress};

/// Events per append while building the benchmark ledger.
const BUILD_BATCH_EVENTS: usize = 10_000;
/// The run judged: the whole generated November.
pub const AS_OF: &str = "2026-12-01T00:00:00Z";

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
    /// Size of the ledger file, in MiB.
    pub ledger_file_mib: f64,
    /// The kept ledger.
    #[serde(skip)]
    pub ledger: PathBuf,
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
            "rerun (clean)                              {:7.2} s  peak memory {:7.1} MiB",
            self.rerun_seconds, self.rerun_peak_memory_mib
        )
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
    let first = reconcile_child(&settings.binary, &run_path)?;
    anyhow::ensure!(first.exit_code <= 1, "reconcile failed with exit code {}", first.exit_code);
    let adjustments_written = Ledger::open_read_only(&run_path)?.outbox_status()?.enqueued;
    let rerun = reconcile_child(&settings.binary, &run_path)?;
    anyhow::ensure!(rerun.exit_code == 0, "a rerun with the same --as-of must be clean, exit {}", rerun.exit_code);
    Ok(ReconcileFigures {
        events_recorded,
        tenants,
        first_run_seconds: first.elapsed.as_secs_f64(),
        first_run_peak_memory_mib: first.peak_memory_mib,
        adjustments_written,
        rerun_seconds: rerun.elapsed.as_secs_f64(),
        rerun_peak_memory_mib: rerun.peak_memory_mib,
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

/// `binary --ledger LEDGER reconcile --as-of AS_OF --json`, timed; its report is not kept.
fn reconcile_child(binary: &Path, ledger_path: &Path) -> anyhow::Result<super::ChildRun> {
    let mut command = Command::new(binary);
    command.arg("--ledger").arg(ledger_path).args(["reconcile", "--as-of", AS_OF, "--json"]);
    super::timed_child(command, false).context("cannot start reconcile")
}
