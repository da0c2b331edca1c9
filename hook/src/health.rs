//! What the writer says of the groups it records, for `serve`'s `/healthz`: whether recording fails now (the
//! last group that had anything to record failed), how many groups failed since the start, and the last failure.
//! A full disk or a failing one answers every request with an error; stderr says each failure, and this says
//! whether it still lasts. A failed sync of the log (durability full) is final until the hook restarts: this says
//! so apart (`not_durable`), since only a restart ends it.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use schemas::Timestamp;
use serde::Serialize;

/// Shared by the writer thread, which writes it, and the handles, which read it.
#[derive(Debug, Default)]
pub struct Health {
    failing: AtomicBool,
    not_durable: AtomicBool,
    failed_groups: AtomicU64,
    last_failure: Mutex<Option<Failure>>,
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
    /// failed (durability full), until the hook restarts.
    pub recording: &'static str,
    /// Groups failed since the hook started.
    pub failed_groups: u64,
    /// The last failure, of a group or of a sync.
    pub last_failure: Option<Failure>,
}

impl Health {
    /// A group was recorded.
    pub(crate) fn recorded(&self) {
        self.failing.store(false, Ordering::Relaxed);
    }

    /// A group of `requests` failed with `message`.
    pub(crate) fn failed(&self, message: &str, requests: usize, at: Timestamp) {
        *self.last_failure.lock().expect("never poisoned") =
            Some(Failure { at, requests, message: message.to_string() });
        self.failed_groups.fetch_add(1, Ordering::Relaxed);
        self.failing.store(true, Ordering::Relaxed);
    }

    /// A sync of the log failed: every request fails from now on, until the hook restarts.
    pub(crate) fn not_durable(&self, message: &str) {
        self.not_durable.store(true, Ordering::Relaxed);
        let at = Timestamp::now();
        *self.last_failure.lock().expect("never poisoned") = Some(Failure { at, requests: 0, message: message.into() });
    }

    /// What `/healthz` says now.
    pub fn report(&self) -> HealthReport {
        let last_failure = self.last_failure.lock().expect("never poisoned").clone();
        let recording = match (self.not_durable.load(Ordering::Relaxed), self.failing.load(Ordering::Relaxed)) {
            (true, _) => "not_durable",
            (false, true) => "failing",
            (false, false) => "ok",
        };
        HealthReport { recording, failed_groups: self.failed_groups.load(Ordering::Relaxed), last_failure }
    }
}
