//! What the writer says of the groups it records, for `serve`'s `/healthz`: whether recording fails now (the
//! last group that had anything to record failed), how many groups failed since the start, and the last failure.
//! A full disk or a failing one answers every request with an error; stderr says each failure, and this says
//! whether it still lasts. A failed sync of the log (durability full) is final until the hook restarts: this says
//! so apart (`not_durable`), since only a restart ends it. So is a writer (or sync) thread that stopped on a panic
//! (`stopped`): every request fails from then on, and a server must say so and exit (`serve` answers `/healthz` 503
//! and exits 2) rather than answer a healthy `/healthz` in front of a dead writer.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::sync::watch;

use schemas::Timestamp;
use serde::Serialize;

/// Shared by the writer thread, which writes it, and the handles, which read it.
#[derive(Debug)]
pub struct Health {
    failing: AtomicBool,
    not_durable: AtomicBool,
    failed_groups: AtomicU64,
    last_failure: Mutex<Option<Failure>>,
    /// Set, for good, once the writer or sync thread stopped on a panic; waited for by [`Health::stopped`].
    stopped: watch::Sender<bool>,
}

impl Default for Health {
    fn default() -> Health {
        Health {
            failing: AtomicBool::new(false),
            not_durable: AtomicBool::new(false),
            failed_groups: AtomicU64::new(0),
            last_failure: Mutex::new(None),
            stopped: watch::channel(false).0,
        }
    }
}

/// A failed group: when, how many requests it had (those that were told the error, and any that failed on their
/// own or replayed a decision recorded before), and the error with its causes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Failure {
    /// When it failed.
    pub at: Timestamp,
    /// How many requests the group had (0 for a failed sync).
    pub requests: usize,
    /// The error with its causes.
    pub message: String,
}

/// [`Health`] as read at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HealthReport {
    /// `ok`; `failing` while the last group with anything to record failed; `not_durable` once a sync of the log
    /// failed (durability full), until the hook restarts; `stopped` once the writer (or its sync thread) stopped on
    /// a panic: nothing is decided any more.
    pub recording: &'static str,
    /// Groups failed since the hook started.
    pub failed_groups: u64,
    /// The last failure, of a group or of a sync.
    pub last_failure: Option<Failure>,
    /// Requests queued for the writer now (the queue's depth).
    pub queued: usize,
}

impl Health {
    /// A group was recorded.
    pub(crate) fn recorded(&self) {
        self.failing.store(false, Ordering::Relaxed);
    }

    /// A group of `requests` failed with `message`.
    pub(crate) fn failed(&self, message: &str, requests: usize, at: Timestamp) {
        *self.last_failure.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(Failure { at, requests, message: message.to_string() });
        self.failed_groups.fetch_add(1, Ordering::Relaxed);
        self.failing.store(true, Ordering::Relaxed);
    }

    /// A sync of the log failed: every request fails from now on, until the hook restarts.
    pub(crate) fn not_durable(&self, message: &str) {
        self.not_durable.store(true, Ordering::Relaxed);
        self.set_last_failure(message);
    }

    /// The writer or its sync thread stopped on a panic (`message` says which and why): nothing is decided any more.
    /// Said as the thread unwinds, before its last requests hear that it stopped; said again with the panic's
    /// message once it is known.
    pub(crate) fn writer_stopped(&self, message: &str) {
        self.set_last_failure(message);
        self.stopped.send_replace(true);
    }

    fn set_last_failure(&self, message: &str) {
        let at = Timestamp::now();
        let failure = Some(Failure { at, requests: 0, message: message.into() });
        *self.last_failure.lock().unwrap_or_else(|e| e.into_inner()) = failure;
    }

    /// Whether the writer (or its sync thread) has stopped on a panic.
    pub fn is_stopped(&self) -> bool {
        *self.stopped.borrow()
    }

    /// Waits until the writer (or its sync thread) stops on a panic; never answers while it runs.
    pub async fn stopped(&self) {
        let mut stopped = self.stopped.subscribe();
        // Never fails: the sender lives as long as `self`.
        let _ = stopped.wait_for(|stopped| *stopped).await;
    }

    /// What `/healthz` says now.
    pub fn report(&self) -> HealthReport {
        let last_failure = self.last_failure.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let recording = match (self.not_durable.load(Ordering::Relaxed), self.failing.load(Ordering::Relaxed)) {
            _ if self.is_stopped() => "stopped",
            (true, _) => "not_durable",
            (false, true) => "failing",
            (false, false) => "ok",
        };
        let failed_groups = self.failed_groups.load(Ordering::Relaxed);
        HealthReport { recording, failed_groups, last_failure, queued: 0 }
    }
}
