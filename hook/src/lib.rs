//! The enforcement hook (SPEC 6): "may this request proceed?", answered exactly, and written into the same
//! ledger. `check` evaluates every applicable policy (tenant and subject scope, `*` plan defaults, grants, open
//! reservations, throttles) before consuming any, then consumes all or nothing, recording the DecisionEvent
//! and, when allowed, the UsageEvent (or ReservationEvent) in one ledger transaction, in the outbox for Kafka.
//! A repeated idempotency key answers the original decision and consumes nothing more.
//!
//! One writer thread owns the ledger connection and an in-memory fold of it ([`state`]); concurrent requests
//! are grouped into one transaction each ([`writer`]).
//!
//! ```
//! use hook::{CheckRequest, Hook, HookSettings};
//! # let dir = tempfile::tempdir().unwrap();
//! let hook = Hook::start(dir.path().join("ledger.db"), HookSettings::default()).unwrap();
//! let ask = CheckRequest {
//!     tenant: "org-42".into(), subject: None, metric: "requests".into(), amount: 1,
//!     idempotency_key: "k-1".into(), request_id: Some("req-1".into()),
//! };
//! let first = hook.check(ask.clone()).unwrap();
//! assert!(first.allowed());
//! assert!(hook.check(ask).unwrap().replayed, "the same key answers the original decision");
//! ```

pub mod api;
pub mod buckets;
pub mod decide;
pub mod error;
pub mod ids;
pub mod state;
pub mod writer;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};

pub use api::*;
pub use error::{HookError, StartError};
use ledger::{Durability, Ledger};
use schemas::{ReservationAction, Timestamp};
use tokio::sync::oneshot;
use writer::{Work, Writer};

/// The `source` of every event the hook records.
pub const SOURCE: &str = "hook";
/// Longest reservation: a day. Longer holds would keep quota away from everyone else for too long.
pub const TTL_MS_MAX: i64 = 24 * 3_600 * 1_000;

/// How the writer groups requests, and its clock.
// Not PartialEq: comparing function pointers (`clock`) is not meaningful.
#[derive(Debug, Clone, Copy)]
pub struct HookSettings {
    /// Requests decided in one ledger transaction at most.
    pub group_max_requests: usize,
    /// How long the writer waits for more requests after the first of a group; 0 takes only what is queued
    /// (while one group commits, the next one queues: group commit without added latency).
    pub group_wait_us: u64,
    /// Requests waiting at most; beyond, `check_async` answers Overloaded at once and `check` waits.
    pub queue_max_requests: usize,
    pub durability: Durability,
    /// What "now" is for windows, expiries, throttles and the time stamped on what the hook records: the wall
    /// clock (`Timestamp::now`) unless a caller replays a past month (the `demo` decides inside the month it
    /// generates, which must be over to be closed). A plain function keeps the settings `Copy`.
    pub clock: fn() -> Timestamp,
}

/// Defaults: 512 requests per group (about 1,000 events, the ledger's best batch size measured in
/// `bench append`), no added wait, 8,192 queued (16 groups), fsync on every commit.
impl Default for HookSettings {
    fn default() -> HookSettings {
        HookSettings {
            group_max_requests: 512,
            group_wait_us: 0,
            queue_max_requests: 8_192,
            durability: Durability::Full,
            clock: Timestamp::now,
        }
    }
}

/// Which tenants a caller may act for (a token's `tenants`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TenantScope {
    All,
    Only(Vec<String>),
}

impl TenantScope {
    pub fn covers(&self, tenant: &str) -> bool {
        match self {
            TenantScope::All => true,
            TenantScope::Only(tenants) => tenants.iter().any(|t| t == tenant),
        }
    }
}

/// A handle to the hook: cheap to clone, usable from any thread and from async code.
#[derive(Clone)]
pub struct Hook {
    queue: SyncSender<Work>,
    queued: Arc<AtomicUsize>,
    limit: usize,
}

impl Hook {
    /// Opens the ledger, folds its recent entries into the state, and starts the writer thread.
    pub fn start(ledger_path: impl AsRef<Path>, settings: HookSettings) -> Result<Hook, StartError> {
        let ledger = Ledger::open(ledger_path)?;
        ledger.set_durability(settings.durability)?;
        let writer = Writer::new(ledger, settings)?;
        let (queue, receiver) = std::sync::mpsc::sync_channel(settings.queue_max_requests);
        let queued = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&queued);
        std::thread::Builder::new().name("hook-writer".into()).spawn(move || writer.run(receiver, &counter))?;
        Ok(Hook { queue, queued, limit: settings.queue_max_requests })
    }

    fn enqueue(&self, work: Work, wait: bool) -> Result<(), HookError> {
        self.queued.fetch_add(1, Ordering::Relaxed);
        let sent = if wait {
            self.queue.send(work).map_err(|_| HookError::Stopped)
        } else {
            self.queue.try_send(work).map_err(|e| match e {
                TrySendError::Full(_) => {
                    HookError::Overloaded { queued: self.queued.load(Ordering::Relaxed), limit: self.limit }
                }
                TrySendError::Disconnected(_) => HookError::Stopped,
            })
        };
        if sent.is_err() {
            self.queued.fetch_sub(1, Ordering::Relaxed);
        }
        sent
    }

    /// Sends `work` and waits for its answer (and for room in the queue).
    fn call<T>(&self, work: impl FnOnce(oneshot::Sender<Result<T, HookError>>) -> Work) -> Result<T, HookError> {
        let (reply, answer) = oneshot::channel();
        self.enqueue(work(reply), true)?;
        answer.blocking_recv().map_err(|_| HookError::Stopped)?
    }

    /// [`Hook::call`] from async code: never blocks a runtime thread; a full queue answers Overloaded.
    async fn call_async<T>(
        &self,
        work: impl FnOnce(oneshot::Sender<Result<T, HookError>>) -> Work,
    ) -> Result<T, HookError> {
        let (reply, answer) = oneshot::channel();
        self.enqueue(work(reply), false)?;
        answer.await.map_err(|_| HookError::Stopped)?
    }

    /// `check`, waiting for the answer (and for room in the queue).
    pub fn check(&self, request: CheckRequest) -> Result<Decision, HookError> {
        self.call(|reply| Work::Check(request, reply))
    }

    /// `check` from async code: never blocks a runtime thread; a full queue answers Overloaded.
    pub async fn check_async(&self, request: CheckRequest) -> Result<Decision, HookError> {
        self.call_async(|reply| Work::Check(request, reply)).await
    }

    pub fn reserve(&self, request: ReserveRequest) -> Result<Decision, HookError> {
        self.call(|reply| Work::Reserve(request, reply))
    }

    pub async fn reserve_async(&self, request: ReserveRequest) -> Result<Decision, HookError> {
        self.call_async(|reply| Work::Reserve(request, reply)).await
    }

    /// `commit(reservation_id, actual)`: the actual consumption, more than reserved included.
    pub fn commit(&self, reservation_id: &str, actual: i64) -> Result<Result<Closed, Refusal>, HookError> {
        let (reservation_id, action, tenants) =
            (reservation_id.to_string(), ReservationAction::COMMIT, TenantScope::All);
        self.call(|reply| Work::Close { reservation_id, action, amount: actual, tenants, reply })
    }

    /// `release(reservation_id)`: closes it, consuming nothing.
    pub fn release(&self, reservation_id: &str) -> Result<Result<Closed, Refusal>, HookError> {
        let (reservation_id, action, tenants) =
            (reservation_id.to_string(), ReservationAction::RELEASE, TenantScope::All);
        self.call(|reply| Work::Close { reservation_id, action, amount: 0, tenants, reply })
    }

    /// `commit` or `release` from async code, for a caller allowed to act for `tenants` only.
    pub async fn close_async(
        &self,
        reservation_id: &str,
        action: ReservationAction,
        amount: i64,
        tenants: TenantScope,
    ) -> Result<Result<Closed, Refusal>, HookError> {
        let reservation_id = reservation_id.to_string();
        self.call_async(|reply| Work::Close { reservation_id, action, amount, tenants, reply }).await
    }
}
