//! `bench start`: how soon a starting `serve` answers its first decision, and its peak memory, on a generated month
//! (the lead's release measurement: 10,000,000 events): started from the ledger's snapshot of the hook's state, and,
//! as its peer in the same run, folding the ledger's last month (`serve --full-fold`).
//!
//! The month generated is the 30 days that end within the current hour, so that a start's fold (a month and a day back
//! from the wall clock) reads all of it and its windows are those of now. The ledger is built once and kept in `--dir`
//! for the hour (`bench-start-<events>-<tenants>-<first hour>.db`).
//! Each start is a child process of the real binary: the time is from its spawn to the first answer of
//! `POST /v1/check` (200 or 429), the peak memory its `VmHWM` read from `/proc` right after that answer.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use ledger::{Batch, Incoming, Ledger, Origin};
use schemas::{Timestamp, Window};
use serde::Serialize;

use generate::{GenerateSettings, Generated, Generator, Progress};

use crate::hook::{ChildGuard, free_port};

/// Events per append while building the benchmark ledger.
const BUILD_BATCH_EVENTS: usize = 10_000;
/// How long a start may take before the benchmark gives up on it.
const START_LIMIT: Duration = Duration::from_secs(600);
/// How often a start is asked for its first decision.
const ASK_EVERY: Duration = Duration::from_millis(10);
/// The bearer secret of the benchmark's token file.
const SECRET: &str = "bench-start-secret";

/// What to generate and where.
#[derive(Debug, Clone)]
pub struct StartBenchSettings {
    /// Generated messages of the month.
    pub events: u64,
    /// Tenants of the generated month.
    pub tenants: u32,
    /// Where the ledger is built and kept (reused within the hour); a temporary directory when absent.
    pub dir: Option<PathBuf>,
    /// The `quota-ledger` binary whose `serve` is started.
    pub binary: PathBuf,
}

/// One start of `serve`.
#[derive(Debug, Clone, Serialize)]
pub struct StartRun {
    /// Seconds from the spawn to the first decision answered.
    pub first_decision_seconds: f64,
    /// Peak resident memory (VmHWM) by then, in MiB.
    pub peak_memory_mib: f64,
}

/// The figures of one run.
#[derive(Debug, Clone, Serialize)]
pub struct StartFigures {
    /// Events in the ledger.
    pub events_recorded: u64,
    /// The watermark the snapshot covers.
    pub snapshot_watermark: u64,
    /// Seconds taking the snapshot took (once, before the starts: what the snapshot thread does in a running hook).
    pub snapshot_seconds: f64,
    /// The snapshot's body, in MiB.
    pub snapshot_mib: f64,
    /// The start from the snapshot.
    pub from_snapshot: StartRun,
    /// The start folding the ledger's last month (`--full-fold`).
    pub full_fold: StartRun,
    /// The kept ledger.
    #[serde(skip)]
    pub ledger: PathBuf,
}

/// The figures as lines for people: the ledger and its snapshot, then each start.
impl std::fmt::Display for StartFigures {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let line = |run: &StartRun| {
            format!(
                "{:7.2} s to the first decision  peak memory {:7.1} MiB",
                run.first_decision_seconds, run.peak_memory_mib
            )
        };
        writeln!(out, "ledger {}: {} events", self.ledger.display(), self.events_recorded)?;
        writeln!(
            out,
            "snapshot at entry {} ({:.1} MiB) taken in {:.2} s",
            self.snapshot_watermark, self.snapshot_mib, self.snapshot_seconds
        )?;
        writeln!(out, "serve from the snapshot    {}", line(&self.from_snapshot))?;
        writeln!(out, "serve --full-fold          {}", line(&self.full_fold))
    }
}

/// Builds the month's ledger when it is not kept yet, takes a snapshot of the hook's state in it, and starts `serve`
/// on it twice: from the snapshot, then folding the ledger.
pub fn run(settings: &StartBenchSettings, progress: &dyn Fn(Progress)) -> anyhow::Result<StartFigures> {
    let temporary = tempfile::tempdir().context("cannot create a temporary directory")?;
    let dir = settings.dir.clone().unwrap_or_else(|| temporary.path().to_path_buf());
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    // The generator's month is 30 days from its start: these end within the hour.
    let hour = rules::window::bounds(Window::HOUR, Timestamp::now()).0;
    let month_start = Timestamp(hour.micros() - 30 * 86_400_000_000 + 3_600_000_000);
    let path = built_ledger(&dir, settings, month_start, progress)?;
    let events_recorded = Ledger::open(&path)?.status()?.events_recorded;
    let started = Instant::now();
    let snapshot_watermark = hook::snapshot::take(&path, Timestamp::now())?;
    let snapshot_seconds = started.elapsed().as_secs_f64();
    let snapshot = Ledger::open_read_only(&path)?.hook_snapshot()?.map_err(|why| anyhow::anyhow!("{why}"))?;
    let tokens = dir.join("bench-start-tokens.toml");
    serve::tokens::write_private(
        &tokens,
        &format!("[[token]]\nname = \"bench\"\nsecret = \"{SECRET}\"\ntenants = [\"*\"]\n"),
    )?;
    let from_snapshot = first_decision(&settings.binary, &path, &tokens, &[])?;
    let full_fold = first_decision(&settings.binary, &path, &tokens, &["--full-fold"])?;
    Ok(StartFigures {
        events_recorded,
        snapshot_watermark,
        snapshot_seconds,
        snapshot_mib: snapshot.body.len() as f64 / (1024.0 * 1024.0),
        from_snapshot,
        full_fold,
        ledger: path,
    })
}

/// The benchmark ledger in `dir`, built first when it is not complete.
fn built_ledger(
    dir: &Path,
    settings: &StartBenchSettings,
    month_start: Timestamp,
    progress: &dyn Fn(Progress),
) -> anyhow::Result<PathBuf> {
    let month = &month_start.to_string()[..13];
    let path = dir.join(format!("bench-start-{}-{}-{month}.db", settings.events, settings.tenants));
    let built = path.with_extension("built");
    if !built.exists() {
        crate::remove_database(&path);
        let mut generate = GenerateSettings::new(settings.tenants, settings.events, 1);
        (generate.raw_malformed, generate.month_start) = (false, month_start);
        build(&path, generate, progress)?;
        std::fs::write(&built, b"complete\n")?;
    }
    Ok(path)
}

/// Appends the generator's valid events (malformed ones left out: they only reach the quarantine).
fn build(path: &Path, settings: GenerateSettings, progress: &dyn Fn(Progress)) -> anyhow::Result<()> {
    let mut ledger = usecases::store::open_for_append(path)?;
    progress(Progress::Begin { step: "building ledger".into(), total: Some(settings.messages) });
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

/// `binary --ledger LEDGER serve ... EXTRA` as a child process (taking no snapshot of its own): the time to its first
/// decision and its peak memory by then.
fn first_decision(binary: &Path, ledger: &Path, tokens: &Path, extra: &[&str]) -> anyhow::Result<StartRun> {
    let port = free_port()?;
    let mut command = Command::new(binary);
    command
        .arg("--ledger")
        .arg(ledger)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--durability", "normal"])
        .args(["--snapshot-every-entries", "0", "--tokens"])
        .arg(tokens)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let started = Instant::now();
    let mut guard = ChildGuard(command.spawn().context("cannot start serve")?);
    let mut asked = 0u64;
    while !decided(port, asked)? {
        anyhow::ensure!(started.elapsed() < START_LIMIT, "serve answered no decision in {START_LIMIT:?}");
        if let Some(status) = guard.0.try_wait()? {
            anyhow::bail!("serve exited with {status} before its first decision");
        }
        std::thread::sleep(ASK_EVERY);
        asked += 1;
    }
    let first_decision_seconds = started.elapsed().as_secs_f64();
    let status = std::fs::read_to_string(format!("/proc/{}/status", guard.0.id()))?;
    let kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmHWM in the child's /proc status")?;
    Ok(StartRun { first_decision_seconds, peak_memory_mib: kib / 1024.0 })
}

/// Whether a check sent now is answered with a decision (200 or 429); false while nothing listens yet.
fn decided(port: u16, asked: u64) -> anyhow::Result<bool> {
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return Ok(false) };
    let body =
        format!(r#"{{"tenant":"org-1","metric":"requests","amount":1,"idempotency_key":"bench-start-{asked}"}}"#);
    let request = format!(
        "POST /v1/check HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {SECRET}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes())?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    let status = answer.split(' ').nth(1).unwrap_or("");
    anyhow::ensure!(status == "200" || status == "429", "serve answered a check with {:?}", answer.lines().next());
    Ok(true)
}
