//! The enforcement hook (contract §6): "may this request proceed?", answered exactly, and written into the same
//! ledger. `check` evaluates every applicable policy (tenant and subject scope, `*` plan defaults, grants, open
//! reservations, throttles) before consuming any, then consumes all or nothing, recording the DecisionEvent
//! and, when allowed, the UsageEvent (or ReservationEvent) in one ledger transaction, in the outbox for Kafka.
//! A repeated idempotency key with the same request answers the original decision and consumes nothing more; with
//! another request it is refused ([`HookError::IdempotencyKeyReused`]). Nothing a caller sends stops the writer or
//! fails the other requests of its group: fields are checked against contract §9.2 before deciding, and a request that
//! would take a sum past i64, or its tenant past [`HookSettings::counters_per_tenant_max`], is refused. A writer
//! that stops on a panic (a bug, a broken invariant of the ledger) says so in [`Hook::health`] at once.
//!
//! A [`Request`] names one metric or several: [`Hook::check_amounts`] checks several in one request, all or nothing,
//! and [`Hook::reserve_amounts`] reserves them so;
//! [`Hook::quotas`] answers a tenant's remaining quota per policy without consuming ([`quotas`]).
//!
//! One writer thread owns the ledger connection and an in-memory fold of it ([`state`]); concurrent requests
//! are grouped into one transaction each (the writer's group commit).
//!
//! ```
//! use hook::{Hook, HookSettings, Request};
//! use schemas::Who;
//! # let dir = tempfile::tempdir().unwrap();
//! let hook = Hook::start(dir.path().join("ledger.db"), HookSettings::default()).unwrap();
//! let ask = Request { request_id: Some("req-1".into()), ..Request::one(Who::tenant("org-42"), "requests", 1, "k-1") };
//! let first = hook.check(ask.clone()).unwrap();
//! assert!(first.allowed());
//! assert!(hook.check(ask).unwrap().replayed, "the same key answers the original decision");
//! ```

#![deny(missing_docs)]

pub mod alerts;
mod answer;
pub mod api;
pub mod buckets;
pub mod decide;
pub mod error;
pub mod figures;
pub mod health;
pub mod ids;
mod load;
mod queue;
pub mod quotas;
pub mod replicate;
mod settings;
pub mod shards;
pub mod snapshot;
pub mod spill;
pub mod stages;
pub mod state;
mod sync;
mod threads;
pub mod timeline;
mod writer;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::time::{Duration, Instant};

pub use api::*;
pub use error::{HookError, SnapshotFailed, StartError};
use ledger::{Durability, Ledger, ProcessLock};
use queue::{Queued, Work};
pub use quotas::{QuotaQuery, Quotas};
pub use replicate::{Replicate, ReplicateError};
use schemas::ReservationAction;
pub use settings::{COUNTERS_PER_TENANT_MAX, HookSettings};
pub use shards::{Shards, ShardsHealth};
pub use stages::{Stage, StageTimer};
use threads::{panic_message, poll_for};
use tokio::sync::oneshot;
use writer::Writer;

/// How long a caller whose answer was dropped waits for the writer to say it stopped (it unwinds a panic), so that
/// health says so before the caller answers: its next `/healthz` must not say ok.
const STOPPED_SAY_WAIT: Duration = Duration::from_secs(1);

/// The writer's answer if it has come (the reply dropped unanswered: the hook stopped).
fn try_answer<T>(answer: &mut oneshot::Receiver<T>) -> Option<Result<T, ()>> {
    match answer.try_recv() {
        Ok(result) => Some(Ok(result)),
        Err(oneshot::error::TryRecvError::Empty) => None,
        Err(oneshot::error::TryRecvError::Closed) => Some(Err(())),
    }
}

/// One caller counted in [`Hook::waiting`] while it waits, taken off when dropped (by either API: an async caller's
/// future may be dropped while it waits, its client gone).
struct Waiting<'a> {
    count: &'a AtomicUsize,
    /// No other caller was waiting when this one came.
    alone: bool,
}

impl Waiting<'_> {
    fn count(count: &AtomicUsize) -> Waiting<'_> {
        let alone = count.fetch_add(1, Ordering::Relaxed) == 0;
        Waiting { count, alone }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The hook lock of the ledger at `path`; held by this process, waited for a moment (a hook stopping).
fn acquire_lock(path: &Path) -> Result<ProcessLock, ledger::LockError> {
    let started = Instant::now();
    let ours = format!("pid {}", std::process::id());
    loop {
        match ProcessLock::acquire(path, "hook") {
            Err(ledger::LockError::Held { holder, .. })
                if holder == ours && started.elapsed() < OWN_STOPPING_HOOK_WAIT =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            taken => return taken,
        }
    }
}

/// A handle to the hook: cheap to clone, usable from any thread and from async code.
#[derive(Clone)]
pub struct Hook {
    queue: SyncSender<Queued>,
    queued: Arc<AtomicUsize>,
    /// Callers of the blocking API waiting for an answer.
    waiting: Arc<AtomicUsize>,
    limit: usize,
    poll: Duration,
    /// Async callers poll too (durability normal).
    async_polls: bool,
    /// Async calls in a row that found no other caller waiting.
    alone_streak: Arc<AtomicUsize>,
    health: Arc<health::Health>,
    stopped: Stopped,
    /// The shard of the ledger (`None`: a ledger of every partition): a request of a tenant of another partition is
    /// refused before it is queued ([`HookError::NotServing`]), so that no tenant's decisions land in another's shard.
    shard: Option<ledger::shards::Shard>,
}

/// Async calls in a row that must find no other caller waiting before the next one polls.
const ALONE_STREAK: usize = 8;

/// Tells when a hook's writer has stopped: after the last handle is dropped it records what was queued, closes the
/// ledger and lets the hook lock go. SQLite folds the write-ahead log into the ledger file and removes it when the
/// last connection to the file closes, so a process that waits for this before it exits leaves a ledger file that
/// holds everything alone (what a copy of only that file, a backup, needs).
#[derive(Clone, Default)]
pub struct Stopped(Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>);

impl Stopped {
    fn set(&self) {
        let (stopped, changed) = &*self.0;
        *stopped.lock().unwrap_or_else(|e| e.into_inner()) = true;
        changed.notify_all();
    }

    /// Waits at most `timeout` for the writer to stop; answers whether it has.
    pub fn wait(&self, timeout: Duration) -> bool {
        let (stopped, changed) = &*self.0;
        let guard = stopped.lock().unwrap_or_else(|e| e.into_inner());
        let (guard, _) =
            changed.wait_timeout_while(guard, timeout, |stopped| !*stopped).unwrap_or_else(|e| e.into_inner());
        *guard
    }
}

/// How long [`Hook::start`] waits for the hook lock held by this very process: a hook whose last handle was just
/// dropped lets it go once its writer has answered what was queued and closed the ledger.
const OWN_STOPPING_HOOK_WAIT: Duration = Duration::from_secs(2);

impl Hook {
    /// Opens the ledger, takes its hook lock `<ledger>.hook.lock` (refused while another hook holds it, in this
    /// process or another: each decides against its own state and appends afterwards, so two would each allow what
    /// one HARD limit fits), folds its recent entries into the state, and starts the writer thread, which holds the
    /// lock until it stops: after the last handle is dropped, once it has recorded what was queued.
    pub fn start(ledger_path: impl AsRef<Path>, settings: HookSettings) -> Result<Hook, StartError> {
        Hook::start_replicated(ledger_path, settings, None)
    }

    /// [`Hook::start`], publishing every group's events through `replicate` before recording them (durability
    /// replicated, [`replicate`]).
    pub fn start_replicated(
        ledger_path: impl AsRef<Path>,
        settings: HookSettings,
        replicate: Option<Box<dyn Replicate>>,
    ) -> Result<Hook, StartError> {
        let ledger = Ledger::open(ledger_path.as_ref())?;
        let shard = ledger.shard()?;
        let lock = acquire_lock(ledger_path.as_ref())?;
        let health = Arc::new(health::Health::default());
        let writer = Writer::new(ledger, settings.clone(), Arc::clone(&health), replicate)?;
        let (queue, receiver) = std::sync::mpsc::sync_channel(settings.queue_max_requests);
        let queued = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&queued);
        let stopped = Stopped::default();
        let done = stopped.clone();
        let said = Arc::clone(&health);
        std::thread::Builder::new().name("hook-writer".into()).spawn(move || {
            // `run` ends once every handle is dropped, and drops the writer and its ledger. A panic (an invariant of
            // the ledger that does not hold, a bug) ends it too: health says so, for good, and every request fails.
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| writer.run(receiver, &counter)));
            if let Err(panic) = ran {
                let message = format!("the hook's writer stopped on a panic: {}", panic_message(&*panic));
                tracing::error!(error = %message, "hook: the writer stopped; every request fails until the hook restarts");
                said.writer_stopped(&message);
            }
            drop(lock);
            done.set();
        })?;
        Ok(Hook {
            queue,
            queued,
            waiting: Arc::new(AtomicUsize::new(0)),
            limit: settings.queue_max_requests,
            poll: Duration::from_micros(settings.poll_us),
            async_polls: settings.durability == Durability::Normal,
            alone_streak: Arc::new(AtomicUsize::new(0)),
            health,
            stopped,
            shard,
        })
    }

    /// The shard of the hook's ledger (`None`: a ledger of every partition).
    pub fn shard(&self) -> Option<ledger::shards::Shard> {
        self.shard
    }

    /// Refuses a request of `tenant` when the ledger is the shard of another partition.
    fn serves(&self, tenant: &str) -> Result<(), HookError> {
        match self.shard {
            Some(shard) if !shard.holds_tenant(tenant) => Err(HookError::NotServing {
                partition: schemas::partition::partition_of(tenant, shard.partitions),
                partitions: shard.partitions,
            }),
            _ => Ok(()),
        }
    }

    /// What tells when the writer has stopped, once every handle is dropped.
    pub fn stopped(&self) -> Stopped {
        self.stopped.clone()
    }

    /// Whether recording fails now, how many groups failed, the last failure, and the queue's depth (for
    /// `/healthz` and `/metrics`).
    pub fn health(&self) -> health::HealthReport {
        health::HealthReport { queued: self.queued.load(Ordering::Relaxed), ..self.health.report() }
    }

    /// Answers once the writer (or its sync thread) has stopped on a panic, never while it runs: a server stops
    /// then, so that a supervisor starts a new one.
    pub async fn writer_stopped(&self) {
        self.health.stopped().await
    }

    fn enqueue(&self, work: Work, wait: bool, caller_polls: bool) -> Result<(), HookError> {
        self.queued.fetch_add(1, Ordering::Relaxed);
        let work = Queued { work, caller_polls, at: std::time::Instant::now() };
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

    /// Sends `work` and waits for its answer (and for room in the queue). A caller waiting alone polls for its
    /// answer (for the settings' `poll_us`) before it sleeps: a sleeping thread is woken by the writer through the
    /// kernel, which on a virtual machine whose other core went idle cost more than the decision itself (one
    /// client, durability normal: p50 250 us). The writer polls for that caller's next request likewise. With
    /// more callers waiting they sleep at once, leaving the cores to the writer.
    fn call<T>(&self, work: impl FnOnce(oneshot::Sender<Result<T, HookError>>) -> Work) -> Result<T, HookError> {
        let (reply, mut answer) = oneshot::channel();
        let waiting = Waiting::count(&self.waiting);
        let poll = if waiting.alone { self.poll } else { Duration::ZERO };
        let waited = self.enqueue(work(reply), true, !poll.is_zero()).and_then(|()| {
            poll_for(poll, || try_answer(&mut answer))
                .unwrap_or_else(|| answer.blocking_recv().map_err(|_| ()))
                .map_err(|()| self.stopped_said())
        });
        drop(waiting);
        waited?
    }

    /// A caller's answer was dropped unanswered while it held a handle: the writer is unwinding a panic. Waits (a
    /// moment at most) until health says the writer stopped, so that nobody hears "stopped" while `/healthz` still
    /// says ok.
    fn stopped_said(&self) -> HookError {
        let until = Instant::now() + STOPPED_SAY_WAIT;
        while !self.health.is_stopped() && !self.stopped.wait(Duration::from_millis(1)) && Instant::now() < until {}
        HookError::Stopped
    }

    /// [`Hook::call`] from async code; a full queue answers Overloaded. At durability normal a caller alone, after
    /// [`ALONE_STREAK`] calls that were alone too, polls for its answer as the blocking one does (holding its
    /// runtime thread for `poll_us` at most): a task parked until the writer wakes its runtime through the kernel
    /// paid that wake-up on every answer (`serve` at one client, durability normal: about 4,300 checks/s parked,
    /// 6,000 polling). Otherwise it parks at once (a poll at 8 clients would hold back the other connections).
    async fn call_async<T>(
        &self,
        work: impl FnOnce(oneshot::Sender<Result<T, HookError>>) -> Work,
    ) -> Result<T, HookError> {
        let (reply, mut answer) = oneshot::channel();
        let waiting = Waiting::count(&self.waiting);
        // Alone for the last calls in a row (one client, not a lull between several), at durability normal (a
        // sync takes longer than the poll): polling then saves the wake-up instead of holding a runtime thread.
        let streak = match waiting.alone {
            true => self.alone_streak.fetch_add(1, Ordering::Relaxed) + 1,
            false => {
                self.alone_streak.store(0, Ordering::Relaxed);
                0
            }
        };
        let poll = if streak >= ALONE_STREAK && self.async_polls { self.poll } else { Duration::ZERO };
        self.enqueue(work(reply), false, false)?;
        let answered = match poll_for(poll, || try_answer(&mut answer)) {
            Some(answered) => answered,
            None => answer.await.map_err(|_| ()),
        };
        drop(waiting);
        match answered {
            Ok(answer) => answer,
            // Health says so as the writer unwinds, before it drops what it was answering: a short wait.
            Err(()) => Err(self.stopped_said()),
        }
    }

    /// `check` of one metric (a [`Request`] naming `metric` and `amount`), waiting for the answer (and for room in the
    /// queue).
    pub fn check(&self, request: Request) -> Result<Decision, HookError> {
        self.serves(&request.who.tenant)?;
        self.call(|reply| Work::Check(request, None, reply))
    }

    /// `check` from async code: never blocks a runtime thread; a full queue answers Overloaded.
    pub async fn check_async(&self, request: Request) -> Result<Decision, HookError> {
        self.serves(&request.who.tenant)?;
        self.call_async(|reply| Work::Check(request, None, reply)).await
    }

    /// [`Hook::check_async`] for a caller a server authenticated with the token named `token_name`: its
    /// DecisionEvent records the name (`token_name`), so that an audit tells which caller asked. The name is the
    /// server's to give, never the caller's to claim; it is checked as a tenant's name is (1 to 128 bytes, no
    /// control character: 400 naming `token_name` otherwise). A replay answers the original decision, which names
    /// the token that asked first.
    pub async fn check_async_as(&self, request: Request, token_name: &str) -> Result<Decision, HookError> {
        self.serves(&request.who.tenant)?;
        let token_name = Some(token_name.to_string());
        self.call_async(|reply| Work::Check(request, token_name, reply)).await
    }

    /// `check` of several metrics at once, waiting for the answer: every policy of every metric evaluated before any
    /// is consumed, all or nothing (a [`Request`] naming `amounts`).
    pub fn check_amounts(&self, request: Request) -> Result<Decisions, HookError> {
        self.serves(&request.who.tenant)?;
        self.call(|reply| Work::CheckAmounts(request, None, reply))
    }

    /// [`Hook::check_amounts`] from async code for a caller a server authenticated with the token named `token_name`
    /// (recorded on every DecisionEvent of the request, as [`Hook::check_async_as`] records it); `None`: a library
    /// caller.
    pub async fn check_amounts_async(
        &self,
        request: Request,
        token_name: Option<&str>,
    ) -> Result<Decisions, HookError> {
        self.serves(&request.who.tenant)?;
        let token_name = token_name.map(String::from);
        self.call_async(|reply| Work::CheckAmounts(request, token_name, reply)).await
    }

    /// `reserve` of several metrics, waiting for the answer: every policy of every metric is evaluated before any is
    /// held, and each metric is reserved under a reservation of its own, or none is (a [`Request`] naming `amounts`
    /// and `ttl_ms`).
    pub fn reserve_amounts(&self, request: Request) -> Result<Decisions, HookError> {
        self.serves(&request.who.tenant)?;
        self.call(|reply| Work::ReserveAmounts(request, None, reply))
    }

    /// [`Hook::reserve_amounts`] from async code, for a caller a server authenticated with the token named
    /// `token_name` (recorded on every DecisionEvent of the request); `None`: a library caller.
    pub async fn reserve_amounts_async(
        &self,
        request: Request,
        token_name: Option<&str>,
    ) -> Result<Decisions, HookError> {
        self.serves(&request.who.tenant)?;
        let token_name = token_name.map(String::from);
        self.call_async(|reply| Work::ReserveAmounts(request, token_name, reply)).await
    }

    /// `reserve` of one metric, waiting for the answer (and for room in the queue): an allowed decision holds its
    /// amount until the request's `ttl_ms` from now, under the reservation_id it answers.
    pub fn reserve(&self, request: Request) -> Result<Decision, HookError> {
        self.serves(&request.who.tenant)?;
        self.call(|reply| Work::Reserve(request, None, reply))
    }

    /// `reserve` from async code: never blocks a runtime thread; a full queue answers Overloaded.
    pub async fn reserve_async(&self, request: Request) -> Result<Decision, HookError> {
        self.serves(&request.who.tenant)?;
        self.call_async(|reply| Work::Reserve(request, None, reply)).await
    }

    /// [`Hook::reserve_async`] for a caller a server authenticated with the token named `token_name`, recorded on
    /// the reservation's DecisionEvent as [`Hook::check_async_as`] records it.
    pub async fn reserve_async_as(&self, request: Request, token_name: &str) -> Result<Decision, HookError> {
        self.serves(&request.who.tenant)?;
        let token_name = Some(token_name.to_string());
        self.call_async(|reply| Work::Reserve(request, token_name, reply)).await
    }

    /// A tenant's remaining quota per policy that applies now, as this hook's checks count it:
    /// nothing is consumed or recorded. Answered after what was decided before it is recorded.
    pub fn quotas(&self, query: QuotaQuery) -> Result<Quotas, HookError> {
        self.serves(&query.who.tenant)?;
        self.call(|reply| Work::Quotas(query, reply))
    }

    /// The state's figures now ([`figures::Figures`]): open reservations, the oldest, tenants near and at a limit.
    /// Read by the writer between groups, so they wait behind what is queued.
    pub async fn figures_async(&self) -> Result<figures::Figures, HookError> {
        self.call_async(Work::Figures).await
    }

    /// [`Hook::quotas`] from async code: never blocks a runtime thread; a full queue answers Overloaded.
    pub async fn quotas_async(&self, query: QuotaQuery) -> Result<Quotas, HookError> {
        self.serves(&query.who.tenant)?;
        self.call_async(|reply| Work::Quotas(query, reply)).await
    }

    /// `commit(reservation_id, actual)`: the actual consumption, more than reserved included.
    pub fn commit(&self, reservation_id: &str, actual: i64) -> Result<Result<Closed, Refusal>, HookError> {
        let (reservation_id, action, tenants) =
            (reservation_id.to_string(), ReservationAction::COMMIT, TenantScope::All);
        self.call(|reply| Work::Close { reservation_id, action, amount: actual, lease: None, tenants, reply })
    }

    /// `release(reservation_id)`: closes it, consuming nothing.
    pub fn release(&self, reservation_id: &str) -> Result<Result<Closed, Refusal>, HookError> {
        let (reservation_id, action, tenants) =
            (reservation_id.to_string(), ReservationAction::RELEASE, TenantScope::All);
        self.call(|reply| Work::Close { reservation_id, action, amount: 0, lease: None, tenants, reply })
    }

    /// Records that a broker acknowledged these outbox entries (`serve`'s publisher), through the writer thread:
    /// the ledger's one writer then never waits for its write lock behind the publisher, nor the publisher
    /// behind it (SQLite's busy handler sleeps up to 100 ms between tries, and the writer, committing group after
    /// group, left the publisher a fraction of the acknowledgements it had to record).
    pub fn record_published(&self, acknowledged: Vec<(u64, String)>) -> Result<(), HookError> {
        self.call(|reply| Work::Published { acknowledged, reply })
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
        self.call_async(|reply| Work::Close { reservation_id, action, amount, lease: None, tenants, reply }).await
    }

    /// `acquire`, waiting for the answer: a lease of one slot of every CONCURRENT policy of the metric, or a denial
    /// (CONCURRENCY_LIMITED, `retry_after_ms` until the first lease holding a slot expires).
    pub fn acquire(&self, request: AcquireRequest) -> Result<Decision, HookError> {
        self.serves(&request.who.tenant)?;
        self.call(|reply| Work::Acquire(request, None, reply))
    }

    /// [`Hook::acquire`] from async code, for a caller a server authenticated with the token named `token_name`
    /// (recorded on the DecisionEvent); `None`: a library caller.
    pub async fn acquire_async(
        &self,
        request: AcquireRequest,
        token_name: Option<&str>,
    ) -> Result<Decision, HookError> {
        self.serves(&request.who.tenant)?;
        let token_name = token_name.map(String::from);
        self.call_async(|reply| Work::Acquire(request, token_name, reply)).await
    }

    /// Renews a lease: presenting its fencing token, it then expires `ttl_ms` from now. A stale token, an expired or
    /// released lease is refused, changing nothing.
    pub fn renew(&self, lease_id: &str, fencing_token: i64, ttl_ms: i64) -> Result<Result<Closed, Refusal>, HookError> {
        let step = LeaseStep { fencing_token, ttl_ms: Some(ttl_ms) };
        self.lease_step(lease_id, ReservationAction::RENEW, step, TenantScope::All)
    }

    /// Releases a lease, presenting its fencing token: its slot frees at once. A stale token is refused.
    pub fn release_lease(&self, lease_id: &str, fencing_token: i64) -> Result<Result<Closed, Refusal>, HookError> {
        let step = LeaseStep { fencing_token, ttl_ms: None };
        self.lease_step(lease_id, ReservationAction::RELEASE, step, TenantScope::All)
    }

    fn lease_step(
        &self,
        lease_id: &str,
        action: ReservationAction,
        step: LeaseStep,
        tenants: TenantScope,
    ) -> Result<Result<Closed, Refusal>, HookError> {
        let reservation_id = lease_id.to_string();
        self.call(|reply| Work::Close { reservation_id, action, amount: 0, lease: Some(step), tenants, reply })
    }

    /// A renewal (RENEW) or release (RELEASE) of a lease from async code, for a caller allowed to act for `tenants`.
    pub async fn lease_step_async(
        &self,
        lease_id: &str,
        action: ReservationAction,
        step: LeaseStep,
        tenants: TenantScope,
    ) -> Result<Result<Closed, Refusal>, HookError> {
        let reservation_id = lease_id.to_string();
        self.call_async(|reply| Work::Close { reservation_id, action, amount: 0, lease: Some(step), tenants, reply })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves that polling answers what became ready, gives up once its time has passed, and without time polls
    // once.
    #[test]
    fn polling_answers_what_became_ready_or_gives_up() {
        let mut polls = 0;
        let ready_at_third = poll_for(Duration::from_secs(60), || {
            polls += 1;
            (polls == 3).then_some(polls)
        });
        assert_eq!(ready_at_third, Some(3));

        let started = Instant::now();
        let mut polls = 0;
        let never = poll_for(Duration::from_millis(20), || {
            polls += 1;
            None::<()>
        });
        assert_eq!(never, None);
        assert!(started.elapsed() >= Duration::from_millis(20), "gave up after {:?}", started.elapsed());
        assert!(polls > 1, "polled again while time was left");

        let mut polls = 0;
        assert_eq!(
            poll_for(Duration::ZERO, || {
                polls += 1;
                None::<()>
            }),
            None
        );
        assert_eq!(polls, 1);
    }

    // Proves that a caller of the blocking API stops counting as waiting however its call ended (answered,
    // refused as malformed, the writer gone): else every later caller would sleep rather than poll.
    #[test]
    fn a_caller_stops_waiting_however_its_call_ended() {
        let dir = tempfile::tempdir().unwrap();
        let hook = Hook::start(dir.path().join("ledger.db"), HookSettings::default()).unwrap();
        let ask = |amount| Request::one(schemas::Who::tenant("org-1"), "requests", amount, format!("k-{amount}"));
        assert!(hook.check(ask(1)).unwrap().allowed());
        assert_eq!(hook.waiting.load(Ordering::Relaxed), 0);
        assert!(matches!(hook.check(ask(-1)), Err(HookError::BadRequest { field: "amount", .. })));
        // More than the ledger accepts from any producer (2^53 - 1): a 400, not an amount its totals cannot sum.
        let too_large = ask(schemas::validate::AMOUNT_MAX + 1);
        assert!(matches!(hook.check(too_large), Err(HookError::BadRequest { field: "amount", .. })));
        assert_eq!(hook.waiting.load(Ordering::Relaxed), 0);

        // A handle whose writer is gone: its queue's receiver dropped.
        let (queue, receiver) = std::sync::mpsc::sync_channel(1);
        drop(receiver);
        let stopped = Hook { queue, ..hook.clone() };
        assert!(matches!(stopped.check(ask(2)), Err(HookError::Stopped)));
        assert_eq!(stopped.waiting.load(Ordering::Relaxed), 0);
    }

    // Proves that the stage timer hears each request's queue wait and each group's commit and sync (durability
    // full), and no publish where nothing is replicated: the figures `/metrics` splits a decision's latency into.
    #[test]
    fn each_stage_of_a_decision_is_timed() {
        let dir = tempfile::tempdir().unwrap();
        let heard = Arc::new(std::sync::Mutex::new(Vec::new()));
        let told = Arc::clone(&heard);
        let timer = StageTimer::new(move |stage, took| told.lock().unwrap().push((stage, took)));
        let settings = HookSettings { stages: Some(timer), ..HookSettings::default() };
        let hook = Hook::start(dir.path().join("ledger.db"), settings).unwrap();
        let started = std::time::Instant::now();
        for n in 0..3 {
            let request = Request::one(schemas::Who::tenant("org-1"), "requests", 1, format!("k-{n}"));
            assert!(hook.check(request).unwrap().allowed());
        }
        let took = started.elapsed();
        let heard = heard.lock().unwrap().clone();
        let count = |stage| heard.iter().filter(|(s, _)| *s == stage).count();
        assert_eq!(count(Stage::QueueWait), 3, "one per request: {heard:?}");
        assert_eq!(count(Stage::GroupCommit), 3, "one per group, each check alone: {heard:?}");
        assert_eq!(count(Stage::Sync), 3, "{heard:?}");
        assert_eq!(count(Stage::Replicate), 0, "{heard:?}");
        assert!(heard.iter().all(|(_, d)| *d <= took), "no stage longer than the calls: {heard:?}");
    }
}
