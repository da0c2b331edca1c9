//! The benchmarks: each measures a stage of the pipeline on this machine against a floor or a peer, in one run, and
//! answers its figures for the binary to print. [`append`]: the ledger's append against bare SQLite inserts;
//! [`hook`]: the enforcement hook's decisions in-process and over HTTP against Redis with Lua; [`reconcile`]: the
//! nightly job on a generated month; [`export`]: the billing export against DuckDB; [`ingest`]: a generated month
//! into 1 shard and into more, a writer per shard; [`start`]: how soon a starting `serve` decides, from the ledger's
//! snapshot of the hook's state and folding the ledger.
//!
//! The runs of a command (`reconcile`, `export billing`, `serve`) are child processes of the real binary, named in
//! each benchmark's settings: their peak memory is then their own.
//!
//! None draws on a terminal: long steps report [`Progress`](generate::Progress), and results come back as data whose
//! JSON is their serialization and whose lines for people are their `Display`, so that the binary only prints them.
//! The benchmarks answer `anyhow::Result`: each is the body of a developer's command, its errors only ever end on the
//! binary's error line, and they come from a dozen crates with the context of the step that failed; a typed enum per
//! benchmark would restate them without a caller that tells them apart.

#![deny(missing_docs)]

pub mod append;
mod client;
pub mod export;
pub mod hook;
pub mod ingest;
pub mod reconcile;
pub mod rls;
pub mod start;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

/// splitmix64: a deterministic spread of bits for ids that look random, as producers' UUIDs do.
pub(crate) fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Removes a SQLite database and its write-ahead log and shared-memory files, where they exist.
pub(crate) fn remove_database(path: &std::path::Path) {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

/// One timed child process.
pub(crate) struct ChildRun {
    pub(crate) elapsed: Duration,
    pub(crate) peak_memory_mib: f64,
    /// The exit code; -1 when a signal ended it.
    pub(crate) exit_code: i32,
    /// What it printed, when kept.
    pub(crate) stdout: String,
}

/// Runs `command` to its end, its stderr on ours: wall-clock time and peak memory (the child's maximum resident set,
/// from `wait4`), and its stdout when `keep_stdout` (else it goes to /dev/null).
pub(crate) fn timed_child(mut command: Command, keep_stdout: bool) -> anyhow::Result<ChildRun> {
    let stdout = if keep_stdout { Stdio::piped() } else { Stdio::null() };
    let started = Instant::now();
    let mut child = command.stdout(stdout).stderr(Stdio::inherit()).spawn().context("cannot start the child")?;
    let pid = child.id() as libc::pid_t;
    // The child's output is read to the end before waiting, so that a full pipe never blocks it.
    let mut text = String::new();
    if let Some(mut out) = child.stdout.take() {
        std::io::Read::read_to_string(&mut out, &mut text)?;
    }
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it for the child this function owns.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, writing into locals that outlive the call.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    anyhow::ensure!(waited == pid, "wait4 failed: {}", std::io::Error::last_os_error());
    let elapsed = started.elapsed();
    let exit_code = if libc::WIFEXITED(status) { libc::WEXITSTATUS(status) } else { -1 };
    // Linux reports ru_maxrss in KiB.
    Ok(ChildRun { elapsed, peak_memory_mib: usage.ru_maxrss as f64 / 1024.0, exit_code, stdout: text })
}
