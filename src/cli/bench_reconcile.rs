//! `bench reconcile`: the nightly job on a generated month (issue: 10,000,000 events, 1,000 tenants, under 60 s).
//!
//! The ledger is built once by appending the generator's stream (the generation is not timed) and kept in
//! `--dir` for reruns. `reconcile` then runs as a child process of the real binary, so that its peak memory
//! (the child's maximum resident set, from `wait4`) is its own and not the generator's.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use ingest::generate::{GenerateSettings, Generated, Generator};
use ledger::{Batch, Incoming, Ledger, Origin};
use serde::Serialize;

/// Events per append while building the benchmark ledger.
const BUILD_BATCH_EVENTS: usize = 10_000;
/// The run judged: the whole generated November.
const AS_OF: &str = "2026-12-01T00:00:00Z";

#[derive(Debug, Serialize)]
struct ReconcileFigures {
    events_recorded: u64,
    tenants: u32,
    first_run_seconds: f64,
    first_run_peak_memory_mib: f64,
    adjustments_written: u64,
    rerun_seconds: f64,
    rerun_peak_memory_mib: f64,
    ledger_file_mib: f64,
}

/// One timed child run of `reconcile`.
struct ChildRun {
    elapsed: Duration,
    peak_memory_mib: f64,
    exit_code: i32,
}

pub fn run(events: u64, tenants: u32, dir: Option<PathBuf>, json: bool) -> anyhow::Result<ExitCode> {
    let temporary = tempfile::tempdir().context("cannot create a temporary directory")?;
    let dir = dir.unwrap_or_else(|| temporary.path().to_path_buf());
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = built_ledger(&dir, events, tenants)?;
    // A kept ledger may hold a previous benchmark's adjustments: copy it so every run starts from the same state.
    let run_path = dir.join("bench-reconcile-run.db");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", run_path.display()));
    }
    Ledger::open_read_only(&path)?.connection().execute("VACUUM INTO ?", [run_path.to_string_lossy()])?;
    // Migrated before the clock starts: a ledger built by an older binary gets its new indexes here.
    let events_recorded = Ledger::open(&run_path)?.status()?.events_recorded;
    let first = run_child(&run_path)?;
    anyhow::ensure!(first.exit_code <= 1, "reconcile failed with exit code {}", first.exit_code);
    let adjustments_written = Ledger::open_read_only(&run_path)?.outbox_status()?.enqueued;
    let rerun = run_child(&run_path)?;
    anyhow::ensure!(rerun.exit_code == 0, "a rerun with the same --as-of must be clean, exit {}", rerun.exit_code);
    let figures = ReconcileFigures {
        events_recorded,
        tenants,
        first_run_seconds: first.elapsed.as_secs_f64(),
        first_run_peak_memory_mib: first.peak_memory_mib,
        adjustments_written,
        rerun_seconds: rerun.elapsed.as_secs_f64(),
        rerun_peak_memory_mib: rerun.peak_memory_mib,
        ledger_file_mib: std::fs::metadata(&run_path)?.len() as f64 / (1024.0 * 1024.0),
    };
    if json {
        super::print_json(&figures)?;
    } else {
        let mut out = super::stdout();
        writeln!(
            out,
            "ledger {} ({:.0} MiB): {events_recorded} events, {tenants} tenants",
            path.display(),
            figures.ledger_file_mib
        )?;
        writeln!(
            out,
            "reconcile --as-of {AS_OF}   {:7.2} s  peak memory {:7.1} MiB  {adjustments_written} adjustments written",
            figures.first_run_seconds, figures.first_run_peak_memory_mib
        )?;
        writeln!(
            out,
            "rerun (clean)                              {:7.2} s  peak memory {:7.1} MiB",
            figures.rerun_seconds, figures.rerun_peak_memory_mib
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The benchmark ledger `bench-reconcile-<events>-<tenants>.db` in `dir`, built first when it is not complete
/// (`bench export` shares it).
pub(super) fn built_ledger(dir: &Path, events: u64, tenants: u32) -> anyhow::Result<PathBuf> {
    let path = dir.join(format!("bench-reconcile-{events}-{tenants}.db"));
    let built = path.with_extension("built");
    if !built.exists() {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
        build(&path, events, tenants)?;
        std::fs::write(&built, b"complete\n")?;
    }
    Ok(path)
}

/// Appends the generator's valid events (malformed ones left out: they only reach the quarantine).
fn build(path: &Path, events: u64, tenants: u32) -> anyhow::Result<()> {
    let mut ledger = super::open_for_append(path)?;
    let mut settings = GenerateSettings::new(tenants, events, 1);
    settings.raw_malformed = false;
    let style = ProgressStyle::with_template("{msg:16} {bar:40} {pos}/{len} [{elapsed}]").expect("a valid template");
    let bar = ProgressBar::new(events).with_style(style).with_message("building ledger");
    let mut batch = Batch::default();
    for generated in Generator::new(settings) {
        bar.inc(1);
        let Generated::Event(event) = generated else { continue };
        batch.events.push(Incoming { event, origin: Origin::Local { name: "bench".into() }, raw: None });
        if batch.events.len() == BUILD_BATCH_EVENTS {
            ledger.append(&std::mem::take(&mut batch))?;
        }
    }
    if !batch.events.is_empty() {
        ledger.append(&batch)?;
    }
    bar.finish_and_clear();
    Ok(())
}

fn run_child(ledger_path: &Path) -> anyhow::Result<ChildRun> {
    let binary = std::env::current_exe().context("cannot find the quota-ledger binary")?;
    let started = Instant::now();
    let child = Command::new(binary)
        .arg("--ledger")
        .arg(ledger_path)
        .args(["reconcile", "--as-of", AS_OF, "--json"])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .context("cannot start reconcile")?;
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it for the child this function owns.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as libc::pid_t;
    // SAFETY: waits for our own child, writing into locals that outlive the call.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    anyhow::ensure!(waited == pid, "wait4 failed: {}", std::io::Error::last_os_error());
    let elapsed = started.elapsed();
    let exit_code = if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { -1 };
    // Linux reports ru_maxrss in KiB.
    Ok(ChildRun { elapsed, peak_memory_mib: usage.ru_maxrss as f64 / 1024.0, exit_code })
}
