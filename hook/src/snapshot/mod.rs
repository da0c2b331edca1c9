//! The hook's state kept in the ledger (contract §6), so that a start reads a snapshot and the entries after it, not
//! the ledger's last month: as Kafka Streams restores a state store from a checkpoint and its changelog's tail, or
//! TigerBeetle starts from a state snapshot and its log's tail.
//!
//! A snapshot is a fold, never the writer's live state: a thread of its own ([`Snapshotter`]), with a connection of
//! its own, loads the state as a start would (the previous snapshot and the entries after it, [`crate::load`]),
//! encodes it and records it in a transaction of its own, once at least [`SNAPSHOT_EVERY_ENTRIES`] entries were
//! appended since the last one, looking every [`SNAPSHOT_CHECK_MS`]. So a snapshot and the entries after it fold to
//! what the whole ledger folds to, whatever the writer was doing, and the writer's path gains nothing but the
//! ledger's write lock for the length of one insert.
//!
//! The body is `(Counting, State)` in postcard (serde's data model, compact), its SHA-256 beside it. A start uses it
//! only when the ledger says it is its own as it is now (same ledger id, watermark at or before the last entry, the
//! entry at the watermark the one it folded), its format is [`FORMAT_VERSION`], its checksum holds, it decodes, it
//! was not taken after now (a clock gone back), and it counts exactly what the recorded policies ask counted
//! ([`Counting`]: a policy recorded since may name a new zone, gauge, scope or longer window). Otherwise the start
//! folds the ledger as it always did, and says why.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ledger::{HookSnapshot, Ledger, ReadError, SnapshotMismatch};
use schemas::Timestamp;
use sha2::{Digest, Sha256};

use crate::error::SnapshotFailed;
use crate::state::{Counting, State};

/// The version of the body's format: the state's fields as serde writes them. Raised whenever a field of the state
/// (or of anything it holds) is added, removed or changes type: a snapshot of another version is not read, and the
/// start folds the ledger.
pub const FORMAT_VERSION: i64 = 2;

/// A snapshot is taken once this many entries were appended after the last one. A start folds at most about this
/// many plus what [`SNAPSHOT_CHECK_MS`] of traffic appends: a fold reads about 200,000 entries a second (a
/// 10-million-event ledger in 55 s), so the tail of a ledger at rest costs half a second.
pub const SNAPSHOT_EVERY_ENTRIES: u64 = 100_000;

/// How often the snapshot thread looks whether a snapshot is due: each look is two indexed reads.
pub const SNAPSHOT_CHECK_MS: u64 = 10_000;

/// How often a sleeping snapshot thread looks whether it must stop.
const STOP_POLL_MS: u64 = 100;

/// Why a start folds the ledger rather than start from its snapshot (said in its log line).
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unused {
    #[error("the settings ask for a full fold")]
    Disabled,
    #[error(transparent)]
    Ledger(#[from] SnapshotMismatch),
    #[error("its format is version {found}; this hook reads version {FORMAT_VERSION}")]
    Format { found: i64 },
    #[error("its checksum does not match its body")]
    Checksum,
    #[error("its body cannot be decoded: {0}")]
    Decode(String),
    #[error("it was taken at {taken_at}, after now ({now}): the clock went back")]
    Future { taken_at: Timestamp, now: Timestamp },
    #[error("it counts {built_for:?}; the recorded policies ask for {needed:?}")]
    Policies { built_for: Box<Counting>, needed: Box<Counting> },
}

/// Encodes `state`, a fold of the ledger pruned at `now` ([`crate::load`]'s), as a snapshot.
pub(crate) fn encode(state: &State, now: Timestamp) -> Result<HookSnapshot, SnapshotFailed> {
    let body = postcard::to_stdvec(&(state.counting(), state)).map_err(|e| SnapshotFailed::Encode(e.to_string()))?;
    let checksum = Sha256::digest(&body).to_vec();
    Ok(HookSnapshot { watermark: state.watermark, format_version: FORMAT_VERSION, taken_at: now, checksum, body })
}

/// The state of the ledger's snapshot, when it is valid for this ledger as it is now and counts what `needed` says
/// (what the recorded policies ask counted); else why not.
pub(crate) fn restore(ledger: &Ledger, needed: &Counting, now: Timestamp) -> Result<Result<State, Unused>, ReadError> {
    Ok(ledger.hook_snapshot()?.map_err(Unused::from).and_then(|snapshot| decode(&snapshot, needed, now)))
}

fn decode(snapshot: &HookSnapshot, needed: &Counting, now: Timestamp) -> Result<State, Unused> {
    if snapshot.format_version != FORMAT_VERSION {
        return Err(Unused::Format { found: snapshot.format_version });
    }
    if Sha256::digest(&snapshot.body).as_slice() != snapshot.checksum.as_slice() {
        return Err(Unused::Checksum);
    }
    if snapshot.taken_at > now {
        return Err(Unused::Future { taken_at: snapshot.taken_at, now });
    }
    let (built_for, state): (Counting, State) =
        postcard::from_bytes(&snapshot.body).map_err(|e| Unused::Decode(e.to_string()))?;
    if state.watermark != snapshot.watermark || state.counting() != built_for || state.is_missing_zones() {
        return Err(Unused::Decode("its state is not the one its header describes".into()));
    }
    if &built_for != needed {
        return Err(Unused::Policies { built_for: Box::new(built_for), needed: Box::new(needed.clone()) });
    }
    Ok(state)
}

/// Takes a snapshot of the ledger at `ledger_path` now: loads the state as a start would and records it. Returns the
/// watermark it covers. What the snapshot thread does when one is due; also for a benchmark or an operator.
pub fn take(ledger_path: &Path, now: Timestamp) -> Result<u64, SnapshotFailed> {
    let mut ledger = Ledger::open(ledger_path).map_err(crate::error::StartError::from)?;
    take_in(&mut ledger, now)
}

fn take_in(ledger: &mut Ledger, now: Timestamp) -> Result<u64, SnapshotFailed> {
    let state = crate::load::load(ledger, now, true)?;
    let snapshot = encode(&state, now)?;
    drop(state);
    ledger.record_hook_snapshot(&snapshot)?;
    Ok(snapshot.watermark)
}

/// Whether a snapshot is due: `every_entries` entries appended after the last one (or the last one is past the last
/// entry: a ledger restored under it).
fn due(ledger: &Ledger, every_entries: u64) -> Result<bool, ReadError> {
    let tip = ledger.watermark()?;
    let last = ledger.hook_snapshot_watermark()?.unwrap_or(0);
    Ok(tip >= last.saturating_add(every_entries) || (tip < last && tip > 0))
}

/// The snapshot thread; stopped (after the snapshot it is taking) when dropped.
pub(crate) struct Snapshotter {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Snapshotter {
    /// Starts the thread on its own connection to `ledger_path`, looking every `check_ms` whether `every_entries`
    /// were appended since the last snapshot. None when `every_entries` is 0 (no snapshots).
    pub(crate) fn start(
        ledger_path: &Path,
        clock: fn() -> Timestamp,
        every_entries: u64,
        check_ms: u64,
    ) -> Result<Option<Snapshotter>, crate::error::StartError> {
        if every_entries == 0 {
            return Ok(None);
        }
        let mut ledger = Ledger::open(ledger_path)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::Builder::new().name("hook-snapshot".into()).spawn(move || {
            while sleep_unless_stopped(&stopping, check_ms) {
                run_once(&mut ledger, clock(), every_entries);
            }
        })?;
        Ok(Some(Snapshotter { stop, thread: Some(thread) }))
    }
}

/// Sleeps `ms`; false once asked to stop.
fn sleep_unless_stopped(stop: &AtomicBool, ms: u64) -> bool {
    let until = Instant::now() + Duration::from_millis(ms);
    while Instant::now() < until {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(STOP_POLL_MS.min(ms.max(1))));
    }
    !stop.load(Ordering::Relaxed)
}

/// One look: a snapshot when due. A failure loses nothing (a start folds from the last snapshot, or the ledger) and
/// is tried again at the next look.
fn run_once(ledger: &mut Ledger, now: Timestamp, every_entries: u64) {
    match due(ledger, every_entries) {
        Ok(false) => {}
        Ok(true) => {
            let started = Instant::now();
            match take_in(ledger, now) {
                Ok(watermark) => tracing::info!(
                    watermark,
                    millis = started.elapsed().as_millis() as u64,
                    "hook: recorded a snapshot of the state"
                ),
                Err(error) => tracing::warn!(%error, "hook: a snapshot of the state failed; the next look tries again"),
            }
        }
        Err(error) => tracing::warn!(%error, "hook: cannot tell whether a snapshot of the state is due"),
    }
}

impl Drop for Snapshotter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests;
