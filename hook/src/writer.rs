//! The hook's single writer: one thread owns the ledger connection and the state. Requests wait in a bounded
//! queue; the writer takes every request queued (up to a group's bound), decides each in turn against the state
//! as the earlier ones of the group left it (each atomic, all or nothing), records the whole group in one ledger
//! transaction (group commit: one fsync for many decisions), then answers; at durability full the answers leave
//! from the [`crate::sync`] stage once the log is on the disk, while this thread decides the next group. A failed
//! transaction answers every request of the group with an error and takes the group's decisions back out of the
//! state, the throttle buckets and the recent decisions: nothing of a group the ledger did not record counts.

use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use ledger::{AppendReport, Batch, Durability, Fold, Incoming, Ledger, Origin, ReadError};
use rules::reservation::Facts;
use rustc_hash::FxHashMap;
use schemas::*;
use tokio::sync::oneshot;

use crate::api::*;
use crate::buckets::{Buckets, Taken};
use crate::decide::{self, Ask, Evaluated, Verdict};
use crate::error::HookError;
use crate::state::{self, State};
use crate::sync::Syncer;
use crate::{HookSettings, SOURCE, TenantScope, ids};

/// Decisions remembered for idempotent replies without a ledger read.
pub const RECENT_DECISIONS_MAX: usize = 100_000;
/// How far back usage is folded: a month and a day covers every window that can contain now. Reservations are
/// folded by when they expire (see [`Fold::AtStart`]).
const STARTUP_HORIZON_MICROS: i64 = 32 * 24 * 3_600 * 1_000_000;

/// One request and where its answer goes.
pub enum Work {
    Check(CheckRequest, oneshot::Sender<Result<Decision, HookError>>),
    Reserve(ReserveRequest, oneshot::Sender<Result<Decision, HookError>>),
    Close {
        reservation_id: String,
        action: ReservationAction,
        amount: i64,
        tenants: TenantScope,
        reply: oneshot::Sender<Result<Result<Closed, Refusal>, HookError>>,
    },
    /// Outbox entries a broker acknowledged, recorded by the writer (`Hook::record_published`).
    Published {
        acknowledged: Vec<(u64, String)>,
        reply: oneshot::Sender<Result<(), HookError>>,
    },
}

/// Busy timeouts (10 s each) a group waits through for another process's write lock before it fails.
const BUSY_WAITS: u64 = 3;

/// A request in the queue, and whether its caller polls for the answer (a lone caller of the blocking API).
pub struct Queued {
    pub work: Work,
    pub caller_polls: bool,
}

/// An answer waiting for its group's commit (and, at durability full, its sync). Short-lived, one per request of a
/// group: the size difference between the variants costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
pub enum Answer {
    Decision(oneshot::Sender<Result<Decision, HookError>>, Result<Decision, HookError>),
    Close(oneshot::Sender<Result<Result<Closed, Refusal>, HookError>>, Result<Result<Closed, Refusal>, HookError>),
}

/// A valid ask: new (with its idempotency key's hash), or a repeated key (with the original decision).
enum Admitted {
    New { hash: String },
    Replayed(Box<Decision>),
}

/// Recent decisions by decision_id, the oldest evicted first: a ring of decisions, and a map from the hash of
/// each one's id to its slot. The map's entries are small because hashbrown rehashes the whole table from time
/// to time under constant inserts and removals (its tombstones fill it): with the decisions themselves in the
/// map, those rehashes stalled the writer for 50 to 440 ms (`perf`, a long `wrk` run on a large ledger). The
/// map has room for twice the decisions, which keeps tombstones, and rehashes, rare.
struct Recent {
    ring: Vec<Decision>,
    /// The slot the next decision takes once the ring is full (its oldest).
    oldest: usize,
    slots: FxHashMap<u64, u32>,
}

impl Default for Recent {
    fn default() -> Recent {
        Recent {
            ring: Vec::with_capacity(RECENT_DECISIONS_MAX),
            oldest: 0,
            slots: FxHashMap::with_capacity_and_hasher(2 * RECENT_DECISIONS_MAX, Default::default()),
        }
    }
}

impl Recent {
    fn get(&self, id: &str) -> Option<&Decision> {
        // Two ids may share a hash: the decision in the slot must be the one asked for (else the ledger answers).
        let slot = *self.slots.get(&id_hash(id))?;
        Some(&self.ring[slot as usize]).filter(|d| d.decision_id == id)
    }

    fn insert(&mut self, decision: Decision) {
        let hash = id_hash(&decision.decision_id);
        let slot = if self.ring.len() < RECENT_DECISIONS_MAX {
            self.ring.push(decision);
            self.ring.len() - 1
        } else {
            let slot = self.oldest;
            let evicted = std::mem::replace(&mut self.ring[slot], decision);
            let evicted_hash = id_hash(&evicted.decision_id);
            if self.slots.get(&evicted_hash) == Some(&(slot as u32)) {
                self.slots.remove(&evicted_hash);
            }
            self.oldest = (slot + 1) % RECENT_DECISIONS_MAX;
            slot
        };
        self.slots.insert(hash, slot as u32);
    }

    /// Forgets a decision that was not recorded after all (its slot is reused in its turn).
    fn forget(&mut self, id: &str) {
        let hash = id_hash(id);
        if let Some(&slot) = self.slots.get(&hash)
            && self.ring[slot as usize].decision_id == id
        {
            self.slots.remove(&hash);
        }
    }
}

fn id_hash(id: &str) -> u64 {
    use std::hash::BuildHasher;
    rustc_hash::FxBuildHasher.hash_one(id)
}

pub struct Writer {
    /// At durability full: syncs the ledger's log and answers the groups it covers, while this thread decides the
    /// next group. Declared first, so dropped first: every group handed to it is answered before the connection
    /// closes.
    syncer: Option<Syncer>,
    ledger: Ledger,
    state: State,
    buckets: Buckets,
    /// What the group being decided took from the buckets, to put back if its transaction fails.
    taken: Vec<Taken>,
    recent: Recent,
    settings: HookSettings,
    /// The ledger's `PRAGMA data_version` when the state last caught up. It changes only when another
    /// connection commits: while it stays the same there is nothing to fold, and the tip need not be read.
    seen_version: Option<i64>,
    /// Set when the state may differ from what the ledger holds: a group was recorded but the fold of what other
    /// writers appended meanwhile stopped halfway (going on from there would fold the group's own entries again).
    /// The next group rebuilds it from the ledger before deciding anything, and fails while it cannot.
    rebuild: bool,
    /// What `/healthz` says of the groups recorded and failed.
    health: std::sync::Arc<crate::health::Health>,
    /// Checkpoints the ledger's log off this thread, so that no group waits for one (stopped with the writer).
    _checkpointer: ledger::Checkpointer,
}

impl Writer {
    pub fn new(
        mut ledger: Ledger,
        settings: HookSettings,
        health: std::sync::Arc<crate::health::Health>,
    ) -> Result<Writer, crate::StartError> {
        ledger.keep_key_filter()?;
        let state = load(&ledger, (settings.clock)())?;
        let checkpointer = ledger.checkpoint_in_background()?;
        // The connection's durability is set here only: at full its commits write the log and the syncer syncs it.
        let syncer = match settings.durability {
            Durability::Full => Some(Syncer::start(ledger.sync_log_apart()?, std::sync::Arc::clone(&health))?),
            Durability::Normal => {
                ledger.set_durability(Durability::Normal)?;
                None
            }
        };
        Ok(Writer {
            syncer,
            ledger,
            state,
            buckets: Buckets::default(),
            taken: Vec::new(),
            recent: Recent::default(),
            settings,
            seen_version: None,
            rebuild: false,
            health,
            _checkpointer: checkpointer,
        })
    }

    /// Serves until every sender is gone.
    pub fn run(mut self, queue: Receiver<Queued>, queued: &std::sync::atomic::AtomicUsize) {
        let polling = Duration::from_micros(self.settings.poll_us);
        // After a group of one request whose caller polls for its answer, the writer polls the queue as long
        // before it sleeps: that caller's next request then needs no wake-up through the kernel (see
        // `Hook::call`). After any other group it sleeps at once, leaving the cores to the callers it answered
        // (polling after groups of one from HTTP callers, which cannot poll, cost about 5% of the throughput at 8
        // HTTP clients, durability full).
        let next = |poll: Duration| {
            crate::poll_for(poll, || match queue.try_recv() {
                Ok(queued) => Some(Some(queued)),
                Err(TryRecvError::Empty) => None,
                Err(TryRecvError::Disconnected) => Some(None),
            })
            .unwrap_or_else(|| queue.recv().ok())
        };
        let mut poll_next = Duration::ZERO;
        while let Some(first) = next(poll_next) {
            let caller_polls = first.caller_polls;
            let mut group = vec![first.work];
            let deadline = Instant::now() + Duration::from_micros(self.settings.group_wait_us);
            while group.len() < self.settings.group_max_requests {
                match queue.try_recv() {
                    Ok(queued) => group.push(queued.work),
                    Err(TryRecvError::Disconnected) => break,
                    Err(TryRecvError::Empty) => match deadline.checked_duration_since(Instant::now()) {
                        Some(left) if !left.is_zero() => match queue.recv_timeout(left) {
                            Ok(queued) => group.push(queued.work),
                            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
                        },
                        _ => break,
                    },
                }
            }
            queued.fetch_sub(group.len(), std::sync::atomic::Ordering::Relaxed);
            poll_next = if group.len() == 1 && caller_polls { polling } else { Duration::ZERO };
            self.process(group, queued);
        }
    }

    /// Decides and records a group; `queued` counts the requests waiting behind it.
    fn process(&mut self, group: Vec<Work>, queued: &std::sync::atomic::AtomicUsize) {
        let now = (self.settings.clock)();
        if let Some(failure) = self.syncer.as_ref().and_then(Syncer::failure) {
            self.health.failed(failure, group.len(), now);
            return fail_all(group, || HookError::NotDurable(failure.to_string()));
        }
        if self.rebuild
            && let Err(error) = self.reload(now)
        {
            let message = failure(&error, "rebuilding the state from the ledger for", group.len());
            self.health.failed(&message, group.len(), now);
            return fail_all(group, || HookError::Ledger(message.clone()));
        }
        // A catch-up that fails halfway leaves the state at the last entry it folded (each fold moves the state's
        // watermark): the next group's catch-up goes on from there.
        if let Err(error) = self.catch_up_if_changed(now) {
            let message = failure(&error, "reading what other writers appended for", group.len());
            self.health.failed(&message, group.len(), now);
            return fail_all(group, || HookError::Ledger(message.clone()));
        }
        self.taken.clear();
        self.state.expire(now);
        self.state.prune(now);
        let mut events = Vec::new();
        let mut answers = Vec::with_capacity(group.len());
        for work in group {
            let answer = match work {
                Work::Check(request, reply) => Answer::Decision(reply, self.check(&request, now, &mut events)),
                Work::Reserve(request, reply) => Answer::Decision(reply, self.reserve(&request, now, &mut events)),
                Work::Close { reservation_id, action, amount, tenants, reply } => {
                    let closed = self.close(&reservation_id, action, amount, &tenants, now, &mut events);
                    Answer::Close(reply, closed)
                }
                Work::Published { acknowledged, reply } => {
                    // A transaction of its own, answered at once: nothing decided rests on it, and losing it to a
                    // crash only publishes those entries again.
                    let recorded = self.ledger.outbox_published(&acknowledged);
                    drop(reply.send(recorded.map_err(|error| HookError::Ledger(error.to_string()))));
                    continue;
                }
            };
            answers.push(answer);
        }
        if !events.is_empty() {
            answers = self.record(events, answers, now);
        }
        match &self.syncer {
            Some(syncer) => syncer.answer(answers, queued.load(std::sync::atomic::Ordering::Relaxed) > 0),
            None => answers.into_iter().for_each(Answer::send),
        }
    }

    /// Records a group's events in one transaction; when the ledger refuses them, takes the group back and answers
    /// its requests with the error.
    fn record(&mut self, events: Vec<Event>, answers: Vec<Answer>, now: Timestamp) -> Vec<Answer> {
        let incoming = events
            .into_iter()
            .map(|event| Incoming { event, origin: Origin::Local { name: SOURCE.to_string() }, raw: None })
            .collect();
        let batch = Batch { events: incoming, outbox: true, ..Batch::default() };
        match self.append(&batch) {
            Ok(report) => {
                self.health.recorded();
                if let Err(error) = self.follow(&batch.events, &report, now) {
                    // Recorded: the answers stand. The state is what may be wrong now.
                    eprintln!(
                        "hook: a group of {} requests is recorded, but folding what other writers appended failed \
                         ({error}): the state is rebuilt from the ledger before the next group",
                        answers.len()
                    );
                    self.rebuild = true;
                }
                answers
            }
            Err(error) => {
                let message = failure(&error, "recording", answers.len());
                self.health.failed(&message, answers.len(), now);
                let taken_back = self.take_back(&batch.events, now);
                answers.into_iter().map(|a| a.failed(&message, &taken_back)).collect()
            }
        }
    }

    /// Appends a group's events in one transaction, waiting through [`BUSY_WAITS`] busy timeouts for another
    /// process's write lock.
    fn append(&mut self, batch: &Batch) -> Result<AppendReport, ledger::AppendError> {
        // Another process holding the write lock past the busy timeout (10 s) leaves the state as right as it was:
        // the group's decisions stand against it, as they would have had the other transaction come a moment later.
        // Waiting again beats failing the group and its callers.
        let mut waits = 1;
        let waiting_since = std::time::Instant::now();
        loop {
            match self.ledger.append(batch) {
                Err(error) if waits < BUSY_WAITS && ledger::is_busy(&error) => {
                    eprintln!(
                        "hook: another process has held the ledger's write lock for {} s; a group of {} events waits for it",
                        waiting_since.elapsed().as_secs(),
                        batch.events.len()
                    );
                    waits += 1;
                }
                answer => return answer,
            }
        }
    }

    /// After a group is recorded: numbers its reservation events as the ledger did, then folds what other writers
    /// appended meanwhile.
    fn follow(&mut self, events: &[Incoming], report: &AppendReport, now: Timestamp) -> Result<(), ReadError> {
        let own: Vec<u64> = report
            .outcomes
            .iter()
            .filter_map(|o| match o {
                ledger::AppendOutcome::Recorded { seq } | ledger::AppendOutcome::ConflictingDuplicate { seq, .. } => {
                    Some(*seq)
                }
                ledger::AppendOutcome::Duplicate { .. } => None,
            })
            .collect();
        for (n, incoming) in events.iter().enumerate() {
            if let Event::Reservation(r) = &incoming.event {
                let recorded = match report.outcomes[n] {
                    ledger::AppendOutcome::Recorded { seq } => Some(seq),
                    ledger::AppendOutcome::ConflictingDuplicate { .. } | ledger::AppendOutcome::Duplicate { .. } => {
                        None
                    }
                };
                self.state.number_own(&state::key_of(r), state::PROVISIONAL_SEQ + n as u64, recorded, now);
            }
        }
        // Almost always nobody else appended since this group's catch-up: the new entries are exactly this group's,
        // already applied to the state, and reading them back would cost as much as writing them.
        let before = self.state.watermark;
        let only_own = report.watermark == before + own.len() as u64
            && own.iter().zip(before + 1..).all(|(seq, expected)| *seq == expected);
        if only_own {
            self.state.watermark = report.watermark;
        } else {
            catch_up(&self.ledger, &mut self.state, now, &own)?;
        }
        assert!(self.state.watermark >= report.watermark, "the state has seen the ledger up to its new watermark");
        Ok(())
    }

    /// Takes back what deciding a group changed outside the ledger, after its transaction failed: nothing of it was
    /// recorded, so none of it counts, and a retry of its idempotency keys decides afresh. Until 2026-12-03 a failed
    /// group rebuilt the whole state from the ledger instead (about 27 s on a ledger of 10 million events), and did
    /// so for every group as long as the failure lasted (a full disk).
    /// Answers the ids of the decisions taken back.
    fn take_back<'e>(&mut self, events: &'e [Incoming], now: Timestamp) -> std::collections::HashSet<&'e str> {
        let mut decisions = std::collections::HashSet::new();
        for (n, incoming) in events.iter().enumerate().rev() {
            if let Event::Decision(d) = &incoming.event {
                self.recent.forget(&d.header.event_id);
                decisions.insert(d.header.event_id.as_str());
            }
            self.state.take_back(state::PROVISIONAL_SEQ + n as u64, &incoming.event, now);
        }
        self.buckets.put_back(std::mem::take(&mut self.taken));
        decisions
    }

    /// Folds what other writers appended since the last look, if anything.
    fn catch_up_if_changed(&mut self, now: Timestamp) -> Result<(), ReadError> {
        let version = self.ledger.data_version()?;
        if self.seen_version != Some(version) {
            self.ledger.refresh_key_filter()?;
            catch_up(&self.ledger, &mut self.state, now, &[])?;
            self.seen_version = Some(version);
        }
        Ok(())
    }

    /// Rebuilds the state from the ledger, as a start does. The recent decisions stay: every one is recorded.
    fn reload(&mut self, now: Timestamp) -> Result<(), crate::StartError> {
        self.state = load(&self.ledger, now)?;
        self.seen_version = None;
        self.rebuild = false;
        eprintln!("hook: the state is rebuilt from the ledger (up to entry {})", self.state.watermark);
        Ok(())
    }

    fn replayed(&self, decision_id: &str) -> Result<Option<Decision>, HookError> {
        if let Some(decision) = self.recent.get(decision_id) {
            return Ok(Some(Decision { replayed: true, ..decision.clone() }));
        }
        let found =
            read_decision(&self.ledger, &self.state, decision_id).map_err(|e| HookError::Ledger(ledger::causes(&e)))?;
        Ok(found.map(|decision| Decision { replayed: true, ..decision }))
    }

    /// Validates an ask, and answers a repeated idempotency key with the decision recorded for it.
    fn admit(&self, ask: &Ask<'_>, idempotency_key: &str) -> Result<Admitted, HookError> {
        validate_ask(ask.tenant, ask.metric, ask.amount, idempotency_key)?;
        let hash = ids::key_hash(ask.tenant, idempotency_key);
        Ok(match self.replayed(&ids::decision_id(&hash))? {
            Some(decision) => Admitted::Replayed(Box::new(decision)),
            None => Admitted::New { hash },
        })
    }

    fn check(
        &mut self,
        request: &CheckRequest,
        now: Timestamp,
        events: &mut Vec<Event>,
    ) -> Result<Decision, HookError> {
        let ask = Ask::new(&request.tenant, request.subject.as_deref(), &request.metric, request.amount);
        let hash = match self.admit(&ask, &request.idempotency_key)? {
            Admitted::New { hash } => hash,
            Admitted::Replayed(decision) => return Ok(*decision),
        };
        let request_id = request.request_id.clone().unwrap_or_else(|| request.idempotency_key.clone());
        let (decision, header) = self.decide(&ask, &hash, &request_id, &request.idempotency_key, now, events);
        if decision.allowed() {
            let usage = UsageEvent {
                header: Header { event_id: ids::usage_id(&hash), ..header.clone() },
                quantity: request.amount,
                request_id: Some(request_id),
                attributes: Default::default(),
            };
            self.state.consume(&usage.header, usage.quantity);
            events.push(Event::Usage(usage));
        }
        self.recent.insert(decision.clone());
        Ok(decision)
    }

    fn reserve(
        &mut self,
        request: &ReserveRequest,
        now: Timestamp,
        events: &mut Vec<Event>,
    ) -> Result<Decision, HookError> {
        if request.ttl_ms <= 0 || request.ttl_ms > crate::TTL_MS_MAX {
            return Err(HookError::BadRequest {
                field: "ttl_ms",
                message: format!("{} is outside (0, {}]", request.ttl_ms, crate::TTL_MS_MAX),
            });
        }
        let ask = Ask::new(&request.tenant, request.subject.as_deref(), &request.metric, request.amount);
        let hash = match self.admit(&ask, &request.idempotency_key)? {
            Admitted::New { hash } => hash,
            Admitted::Replayed(decision) => return Ok(*decision),
        };
        let reservation_id = ids::reservation_id(&hash);
        let request_id = request.request_id.clone().unwrap_or_else(|| reservation_id.clone());
        let (mut decision, header) = self.decide(&ask, &hash, &request_id, &request.idempotency_key, now, events);
        if decision.allowed() {
            let expires_at = Timestamp(now.micros() + request.ttl_ms * 1_000);
            let reserve = ReservationEvent {
                header: Header { event_id: ids::reserve_event_id(&reservation_id), ..header },
                reservation_id: reservation_id.clone(),
                action: ReservationAction::RESERVE,
                amount: request.amount,
                expires_at: Some(expires_at),
            };
            self.state.fold_own(state::PROVISIONAL_SEQ + events.len() as u64, &reserve, now);
            events.push(Event::Reservation(reserve));
            decision.reservation_id = Some(reservation_id);
        }
        self.recent.insert(decision.clone());
        Ok(decision)
    }

    /// Evaluates, decides, takes throttle tokens when allowed, and pushes the DecisionEvent.
    fn decide(
        &mut self,
        ask: &Ask<'_>,
        hash: &str,
        request_id: &str,
        idempotency_key: &str,
        now: Timestamp,
        events: &mut Vec<Event>,
    ) -> (Decision, Header) {
        let evaluated = decide::evaluate(&self.state, &self.buckets, ask, now);
        let throttles: Vec<Evaluated> = evaluated.iter().filter(|e| e.is_throttle()).cloned().collect();
        let verdict = decide::decide(evaluated);
        if verdict.outcome == Outcome::ALLOWED {
            // Only from buckets that had the tokens: a SHADOW (or SOFT) bucket that did not fit takes nothing, as a
            // HARD one would have denied and taken nothing. Emptied below zero, it said SHADOW_DENIED long after a
            // HARD bucket would have refilled.
            for t in throttles.iter().filter(|t| t.fits) {
                let subject = if t.policy.scope == Scope::SUBJECT { ask.subject } else { None };
                self.taken.push(self.buckets.take(&t.policy, ask.tenant, subject, ask.amount, now));
            }
        }
        let header = Header {
            event_id: ids::decision_id(hash),
            occurred_at: now,
            tenant: ask.tenant.to_string(),
            subject: ask.subject.map(String::from),
            metric: ask.metric.to_string(),
            source: SOURCE.to_string(),
        };
        let event = decision_event(&verdict, &header, request_id, idempotency_key, ask.amount, now);
        let decision = decision_of(&event, verdict.deciding.as_ref().map(|e| e.policy.scope), false);
        events.push(Event::Decision(event));
        (decision, header)
    }

    fn close(
        &mut self,
        reservation_id: &str,
        action: ReservationAction,
        amount: i64,
        tenants: &TenantScope,
        now: Timestamp,
        events: &mut Vec<Event>,
    ) -> Result<Result<Closed, Refusal>, HookError> {
        check_amount(amount)?;
        let id = reservation_id.to_string();
        let holds = self.state.holds_of(reservation_id);
        // Other enforcers' reservations of two tenants may share an id, and a close names no tenant: of those the
        // caller may close, this hook's own, or the only one; never a guess.
        let covered: Vec<&state::Hold> = holds.iter().filter(|h| tenants.covers(&h.tenant)).collect();
        let own: Vec<&state::Hold> =
            covered.iter().copied().filter(|h| self.state.is_own(&h.tenant, reservation_id)).collect();
        let chosen = match (own.as_slice(), covered.as_slice()) {
            ([hold], _) | ([], [hold]) => Some(*hold),
            (_, []) => None,
            _ => {
                let tenants: Vec<&str> = covered.iter().map(|h| h.tenant.as_str()).collect();
                return Err(HookError::BadRequest {
                    field: "reservation_id",
                    message: format!(
                        "{reservation_id} names open reservations of {} tenants ({}): close it through the enforcer \
                         that holds it, or with a token of one tenant",
                        tenants.len(),
                        tenants.join(", ")
                    ),
                });
            }
        };
        let Some(hold) = chosen.cloned() else {
            // The caller's own reservation of this id, closed, expired or never made, answers before another
            // tenant's that is open: a tenant retrying a commit of its reservation another enforcer committed hears
            // 409, not 403 because another tenant's producer chose the same id.
            // Closed earlier in this group: not in the ledger yet, which would call it expired.
            if let Some(close) = closed_in_group(events, reservation_id, tenants) {
                let by = close.action.symbol().to_string();
                return Ok(Err(Refusal::AlreadyClosed { reservation_id: id, by }));
            }
            let refusal = refusal_from_ledger(&self.ledger, reservation_id, tenants)
                .map_err(|e| HookError::Ledger(ledger::causes(&e)))?;
            // Held, or closed in this group, by tenants the caller does not cover only (not in the ledger yet).
            let others = !holds.is_empty() || events.iter().any(|e| is_close_of(e, reservation_id));
            return Ok(match refusal {
                Err(Refusal::NotFound { .. }) if others => Err(Refusal::Forbidden { reservation_id: id }),
                refusal => refusal,
            });
        };
        if hold.expires_at < now {
            return Ok(Err(Refusal::Expired { reservation_id: id, expires_at: hold.expires_at }));
        }
        let amount = if action == ReservationAction::COMMIT { amount } else { 0 };
        let header = Header {
            event_id: ids::close_event_id(&hold.tenant, reservation_id, action, own.len() == 1),
            occurred_at: now,
            tenant: hold.tenant.clone(),
            subject: hold.subject.clone(),
            metric: hold.metric.clone(),
            source: SOURCE.to_string(),
        };
        let event_id = header.event_id.clone();
        let close = ReservationEvent { header, reservation_id: id.clone(), action, amount, expires_at: None };
        // Open and closed in time: the verdict takes the hold back and, for a COMMIT, counts the amount.
        self.state.fold_own(state::PROVISIONAL_SEQ + events.len() as u64, &close, now);
        events.push(Event::Reservation(close));
        Ok(Ok(Closed {
            reservation_id: id,
            action,
            amount,
            reserved: hold.amount,
            charged_above_reserved: (amount - hold.amount).max(0),
            event_id,
        }))
    }
}

impl Answer {
    /// Its group failed: an error in its place, unless it replays a decision recorded before the group (a replay
    /// of one the group itself decided, now `taken_back`, fails with it). Until 2026-12-03 such a replay answered
    /// 500, "nothing of it was recorded", of a decision that was.
    fn failed(self, message: &str, taken_back: &std::collections::HashSet<&str>) -> Answer {
        match self {
            Answer::Decision(reply, Ok(decision))
                if decision.replayed && !taken_back.contains(decision.decision_id.as_str()) =>
            {
                Answer::Decision(reply, Ok(decision))
            }
            other => other.replaced(|| HookError::Ledger(message.to_string())),
        }
    }

    /// Its group was committed but no sync covered it.
    pub(crate) fn not_durable(self, message: &str) -> Answer {
        self.replaced(|| HookError::NotDurable(message.to_string()))
    }

    /// An error in place of a decision, a close or a refusal to close (a request that failed already keeps its
    /// own error). A refusal too: it records nothing, but it may rest on what the group or an earlier one did
    /// (a close refused as already closed by a close that the failed commit or sync did not keep).
    fn replaced(self, error: impl Fn() -> HookError) -> Answer {
        match self {
            Answer::Decision(reply, Ok(_)) => Answer::Decision(reply, Err(error())),
            Answer::Close(reply, Ok(_)) => Answer::Close(reply, Err(error())),
            other => other,
        }
    }

    pub(crate) fn send(self) {
        // A caller that stopped waiting (a closed HTTP connection) just misses its answer.
        match self {
            Answer::Decision(reply, result) => drop(reply.send(result)),
            Answer::Close(reply, result) => drop(reply.send(result)),
        }
    }
}

fn fail_all(group: Vec<Work>, error: impl Fn() -> HookError) {
    for work in group {
        match work {
            Work::Check(_, reply) | Work::Reserve(_, reply) => drop(reply.send(Err(error()))),
            Work::Close { reply, .. } => drop(reply.send(Err(error()))),
            Work::Published { reply, .. } => drop(reply.send(Err(error()))),
        }
    }
}

fn validate_ask(tenant: &str, metric: &str, amount: i64, idempotency_key: &str) -> Result<(), HookError> {
    let bad = |field, message: &str| Err(HookError::BadRequest { field, message: message.to_string() });
    if tenant.is_empty() {
        return bad("tenant", "is empty");
    }
    if tenant == rules::policy::PLAN_DEFAULT_TENANT {
        return bad("tenant", "\"*\" names plan defaults, not a tenant");
    }
    if metric.is_empty() {
        return bad("metric", "is empty");
    }
    if idempotency_key.is_empty() {
        return bad("idempotency_key", "is empty");
    }
    check_amount(amount)
}

/// An amount the ledger accepts from producers too: at least 0, at most `schemas::validate::AMOUNT_MAX`.
fn check_amount(amount: i64) -> Result<(), HookError> {
    if amount < 0 {
        return Err(HookError::BadRequest { field: "amount", message: format!("{amount} is negative") });
    }
    if amount > schemas::validate::AMOUNT_MAX {
        let message = format!("{amount} is more than {}", schemas::validate::AMOUNT_MAX);
        return Err(HookError::BadRequest { field: "amount", message });
    }
    Ok(())
}

fn decision_event(
    verdict: &Verdict,
    header: &Header,
    request_id: &str,
    idempotency_key: &str,
    amount: i64,
    now: Timestamp,
) -> DecisionEvent {
    let e = verdict.deciding.as_ref();
    let allowed = verdict.outcome == Outcome::ALLOWED;
    let remaining = e.map(|e| if allowed { e.limit - e.used_before - amount } else { e.remaining_before() });
    let retry_after_ms = match verdict.reason {
        Reason::QUOTA_EXCEEDED => e.map(|e| ((e.window_end.micros() - now.micros()) / 1_000).max(1)),
        Reason::RATE_LIMITED => e.and_then(|e| e.retry_after_ms),
        _ => None,
    };
    DecisionEvent {
        header: header.clone(),
        request_id: request_id.to_string(),
        idempotency_key: idempotency_key.to_string(),
        amount,
        outcome: verdict.outcome,
        reason: verdict.reason,
        policy_id: e.map(|e| e.policy.policy_id.clone()),
        policy_version: e.map(|e| e.policy.version),
        window_start: e.map(|e| e.window_start),
        window_end: e.map(|e| e.window_end),
        limit: e.map(|e| e.limit),
        used_before: e.map(|e| e.used_before),
        remaining: remaining.map(|r| r.max(0)),
        retry_after_ms,
    }
}

fn decision_of(event: &DecisionEvent, scope: Option<Scope>, replayed: bool) -> Decision {
    Decision {
        decision_id: event.header.event_id.clone(),
        request_id: event.request_id.clone(),
        outcome: event.outcome,
        reason: event.reason,
        code: Code::of(event.outcome, event.reason),
        tenant: event.header.tenant.clone(),
        subject: event.header.subject.clone(),
        metric: event.header.metric.clone(),
        amount: event.amount,
        scope,
        policy_id: event.policy_id.clone(),
        policy_version: event.policy_version,
        limit: event.limit,
        used_before: event.used_before,
        remaining: event.remaining,
        window_start: event.window_start,
        resets_at: event.reason.resets_at(event.header.occurred_at, event.window_end, event.retry_after_ms),
        retry_after_ms: event.retry_after_ms,
        decided_at: event.header.occurred_at,
        reservation_id: None,
        replayed,
    }
}

/// The decision recorded under `decision_id`, if any (an idempotency key seen before this process started).
fn read_decision(ledger: &Ledger, state: &State, decision_id: &str) -> Result<Option<Decision>, ReadError> {
    let Some(Event::Decision(event)) = ledger.recorded_event(decision_id)? else { return Ok(None) };
    let scope = event
        .policy_id
        .as_ref()
        .and_then(|id| state.policies.policies().iter().find(|p| &p.policy_id == id).map(|p| p.scope));
    let mut decision = decision_of(&event, scope, true);
    if decision.allowed() && decision_id.starts_with(ids::DECISION_PREFIX) {
        let reservation_id = ids::reservation_id(&decision_id[ids::DECISION_PREFIX.len()..]);
        if ledger.has_reservation_events(&reservation_id)? {
            decision.reservation_id = Some(reservation_id);
        }
    }
    Ok(Some(decision))
}

/// The close of `reservation_id` of a tenant the caller covers decided earlier in the group whose events these
/// are, if any.
fn closed_in_group<'e>(
    events: &'e [Event],
    reservation_id: &str,
    tenants: &TenantScope,
) -> Option<&'e ReservationEvent> {
    events.iter().rev().find_map(|event| match event {
        Event::Reservation(r) if is_close_of(event, reservation_id) && tenants.covers(&r.header.tenant) => Some(r),
        _ => None,
    })
}

/// Whether `event` is a COMMIT or RELEASE of `reservation_id` (of any tenant).
fn is_close_of(event: &Event, reservation_id: &str) -> bool {
    matches!(event, Event::Reservation(r) if r.reservation_id == reservation_id && r.action != ReservationAction::RESERVE)
}

/// Why a close of a reservation the state does not hold open (for the caller) is refused, from the ledger.
fn refusal_from_ledger(
    ledger: &Ledger,
    reservation_id: &str,
    tenants: &TenantScope,
) -> Result<Result<Closed, Refusal>, ReadError> {
    let id = reservation_id.to_string();
    let rows = ledger.reservation_facts(reservation_id)?;
    // A reservation per tenant with a RESERVE (other enforcers' may share an id): the caller's, the first by tenant
    // name, judged as reconcile judges it (and as the state folded it): by event time.
    let mut reserved: Vec<&str> = rows
        .iter()
        .filter(|row| row.facts.action == ReservationAction::RESERVE)
        .map(|row| row.tenant.as_str())
        .collect();
    reserved.sort_unstable();
    if reserved.is_empty() {
        return Ok(Err(Refusal::NotFound { reservation_id: id }));
    }
    let Some(tenant) = reserved.into_iter().find(|t| tenants.covers(t)) else {
        return Ok(Err(Refusal::Forbidden { reservation_id: id }));
    };
    let events: Vec<(u64, &Facts)> =
        rows.iter().filter(|row| row.tenant == tenant).map(|row| (row.seq, &row.facts)).collect();
    let verdict = rules::reservation::judge(&events, Timestamp(i64::MAX));
    let reserve = verdict.reserve.and_then(|seq| events.iter().find(|(s, _)| *s == seq)).map(|(_, f)| *f);
    let reserve = reserve.expect("a tenant with a RESERVE has one in its verdict");
    Ok(Err(match verdict.close {
        Some((_, action, _)) => Refusal::AlreadyClosed { reservation_id: id, by: action.symbol().to_string() },
        None => Refusal::Expired { reservation_id: id, expires_at: reserve.expires_at.unwrap_or(Timestamp(i64::MIN)) },
    }))
}

/// Folds the entries other writers appended after the state's watermark (`own` are this writer's, already
/// applied, in ascending order), and moves the watermark to the last entry.
fn catch_up(ledger: &Ledger, state: &mut State, now: Timestamp, own: &[u64]) -> Result<(), ReadError> {
    fold_after(ledger, state, now, own, Fold::After)
}

fn fold_after(ledger: &Ledger, state: &mut State, now: Timestamp, own: &[u64], fold: Fold) -> Result<(), ReadError> {
    let tip = ledger.watermark()?;
    if tip == state.watermark {
        return Ok(());
    }
    let horizon = Timestamp(now.micros() - STARTUP_HORIZON_MICROS);
    // `State::fold` moves the state's watermark to each entry it folds: a read that fails halfway leaves the state
    // at the last one, and the next catch-up goes on from there.
    ledger.for_each_entry_after(state.watermark, horizon, fold, |entry| {
        let skipped = matches!(entry.event_type, EventType::DecisionEvent | EventType::AdjustmentEvent);
        if skipped || own.binary_search(&entry.seq).is_ok() || entry.seq > tip {
            return Ok(());
        }
        state.fold(entry.seq, &entry.event()?, now);
        Ok(())
    })?;
    state.watermark = tip;
    Ok(())
}

/// The state of a fresh process: the fold of the ledger's recent entries.
fn load(ledger: &Ledger, now: Timestamp) -> Result<State, crate::StartError> {
    let mut state = State::default();
    fold_after(ledger, &mut state, now, &[], Fold::AtStart)?;
    // The first prune drops most windows the fold read (74 ms on a 17-million-event ledger): here, not in the
    // first group's answers.
    state.prune(now);
    Ok(state)
}

/// What a group's callers are told when the ledger refused it, said on stderr too (an operator sees the cause, where
/// the callers see a 500): the error with every cause (until 2026-12-03 only the outermost, "ledger write failed,
/// nothing appended", without "database is locked"), and when another process held the write lock too long, so.
fn failure(error: &(dyn std::error::Error + 'static), doing: &str, requests: usize) -> String {
    let mut message = ledger::causes(error);
    if ledger::is_busy(error) {
        message.push_str(&format!(
            " (another process held the ledger's write lock for longer than the hook waits, {} busy timeouts of {} s: \
             a long export, reconcile or ingest)",
            BUSY_WAITS,
            ledger::BUSY_TIMEOUT_MS / 1_000
        ));
    }
    eprintln!("hook: {doing} a group of {requests} requests failed, nothing of it recorded: {message}");
    message
}
#[cfg(test)]
mod tests {
    use super::*;

    // Proves a refused group is told every cause, and when another process held the write lock, so (the 500's body
    // used to end at "ledger write failed, nothing appended").
    #[test]
    fn a_refused_group_is_told_every_cause() {
        let code = rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY);
        let busy = rusqlite::Error::SqliteFailure(code, Some("database is locked".into()));
        let error = ledger::AppendError::from(busy);
        let message = failure(&error, "recording", 3);
        assert!(message.starts_with("ledger write failed, nothing appended: database is locked"), "{message}");
        assert!(message.ends_with("3 busy timeouts of 10 s: a long export, reconcile or ingest)"), "{message}");
        let other = ledger::AppendError::from(rusqlite::Error::InvalidQuery);
        assert!(!failure(&other, "recording", 1).contains("write lock"));
    }

    fn decision(n: usize) -> Decision {
        Decision {
            decision_id: format!("dec-{n}"),
            request_id: format!("req-{n}"),
            outcome: Outcome::ALLOWED,
            reason: Reason::WITHIN_LIMIT,
            code: Code::of(Outcome::ALLOWED, Reason::WITHIN_LIMIT),
            tenant: "org-1".into(),
            subject: None,
            metric: "requests".into(),
            amount: n as i64,
            scope: None,
            policy_id: None,
            policy_version: None,
            limit: None,
            used_before: None,
            remaining: None,
            window_start: None,
            resets_at: None,
            retry_after_ms: None,
            decided_at: Timestamp(0),
            reservation_id: None,
            replayed: false,
        }
    }

    // Proves that the recent decisions are the last RECENT_DECISIONS_MAX, each found by its id, the older ones
    // evicted in order, also after the ring went round more than once.
    #[test]
    fn recent_keeps_the_last_decisions_in_order() {
        let mut recent = Recent::default();
        let total = 2 * RECENT_DECISIONS_MAX + 7;
        for n in 0..total {
            recent.insert(decision(n));
        }
        let first_kept = total - RECENT_DECISIONS_MAX;
        assert!(recent.get(&format!("dec-{}", first_kept - 1)).is_none());
        assert!(recent.get("dec-0").is_none());
        for n in [first_kept, first_kept + 1, total / 2 + RECENT_DECISIONS_MAX / 2, total - 1] {
            assert_eq!(recent.get(&format!("dec-{n}")).map(|d| d.amount), Some(n as i64), "dec-{n}");
        }
        assert_eq!(recent.slots.len(), RECENT_DECISIONS_MAX);
    }
}
