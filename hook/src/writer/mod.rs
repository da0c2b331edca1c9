//! The hook's single writer: one thread owns the ledger connection and the state. Requests wait in a bounded
//! queue; the writer takes every request queued (up to a group's bound), decides each in turn against the state
//! as the earlier ones of the group left it (each atomic, all or nothing), records the whole group in one ledger
//! transaction (group commit: one fsync for many decisions), then answers; at durability full the answers leave
//! from the [`crate::sync`] stage once the log is on the disk, while this thread decides the next group. A failed
//! transaction answers every request of the group with an error and takes the group's decisions back out of the
//! state, the throttle buckets and the recent decisions: nothing of a group the ledger did not record counts. Only
//! checks whose every policy is `on_failure: OPEN` are answered otherwise, under the emergency rate: allowed,
//! FAIL_OPEN, their events kept in the [`Spill`] (synced before the answer leaves) and appended before the next group
//! the ledger takes.
//!
//! This module is the group commit (taking a group, recording it, answering, catching up with other writers);
//! `request` holds the rules each request is decided by, `reads` what the writer reads from the ledger, and
//! `recent` the decisions it remembers for repeated idempotency keys.

mod reads;
mod recent;
mod request;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use ledger::{AppendOutcome, AppendReport, Batch, Durability, Incoming, Ledger, Origin, ReadError};
use schemas::{DecisionEvent, Event, OnFailure, Reason, Timestamp};

use crate::answer::Answer;
use crate::api::SOURCE;
use crate::buckets::{Buckets, Taken};
use crate::error::{HookError, StartError};
use crate::health::Health;
use crate::load::load;
use crate::queue::{Queued, Work};
use crate::replicate::{Replicate, ReplicateError};
use crate::settings::HookSettings;
use crate::snapshot::Snapshotter;
use crate::spill::Spill;
use crate::stages::{self, Stage};
use crate::state::{self, State};
use crate::sync::Syncer;
use reads::catch_up;
use recent::Recent;

/// Why a group fails before anything of it is decided: the error each of its requests is answered, made from the
/// message, and the message.
type GroupFailure = (fn(String) -> HookError, String);

/// Busy timeouts (10 s each) a group waits through for another process's write lock before it fails.
const BUSY_WAITS: u64 = 3;

/// The writer thread's own: the ledger connection, the state folded from it, and what deciding a group needs.
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
    /// The closes the group being decided made: a retry of one in the same group answers it again.
    group_closes: Vec<crate::api::Closed>,
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
    health: Arc<Health>,
    /// Checkpoints the ledger's log off this thread, so that no group waits for one (stopped with the writer).
    _checkpointer: ledger::Checkpointer,
    /// Takes snapshots of the state into the ledger off this thread, so that a start folds only what came after
    /// the last (stopped with the writer; none when the settings take none).
    _snapshotter: Option<Snapshotter>,
    /// At durability replicated: publishes each group's events before they are recorded.
    replicate: Option<Box<dyn Replicate>>,
    /// Set, for good, once the publisher was fenced: another node owns the shard, this writer decides nothing more.
    fenced: Option<String>,
    /// The partition of the ledger's shard (`None`: a ledger of every partition), which its reservation ids name.
    partition: Option<u32>,
    /// Where decisions made open wait for the ledger: opened at start when the file exists, else once a policy is
    /// OPEN.
    spill: Option<Spill>,
    /// When the writer, with no spill, last looked for an OPEN policy.
    looked_for_open: Option<Instant>,
    /// The emergency rate's tokens, and when they were last counted.
    emergency: (f64, Instant),
    /// The decision ids of the group's allowed checks whose every policy is OPEN.
    group_open: HashSet<String>,
}

impl Writer {
    /// Reads the key filter and the state from `ledger` and starts the checkpoint (and, at durability full, the
    /// sync) thread.
    pub fn new(
        mut ledger: Ledger,
        settings: HookSettings,
        health: Arc<Health>,
        replicate: Option<Box<dyn Replicate>>,
    ) -> Result<Writer, StartError> {
        ledger.keep_key_filter()?;
        let partition = ledger.shard()?.map(|shard| shard.partition);
        // What an earlier run made open goes into the ledger before the state is read from it.
        let spill_path = Spill::path_of(ledger.path());
        let spill = match spill_path.exists() {
            true => Some(take_spilled(&mut ledger, &spill_path, settings.spill_bytes, replicate.is_none())?),
            false => None,
        };
        let state = load(&ledger, (settings.clock)(), settings.start_from_snapshot)?;
        let checkpointer = ledger.checkpoint_in_background()?;
        let snapshotter = Snapshotter::start(
            ledger.path(),
            settings.clock,
            settings.snapshot_every_entries,
            settings.snapshot_check_ms,
        )?;
        // The connection's durability is set here only: at full its commits write the log and the syncer syncs it.
        let syncer = match settings.durability {
            Durability::Full => {
                Some(Syncer::start(ledger.sync_log_apart()?, Arc::clone(&health), settings.stages.clone())?)
            }
            Durability::Normal => {
                ledger.set_durability(Durability::Normal)?;
                None
            }
        };
        let emergency = (f64::from(settings.fail_open_per_second), Instant::now());
        Ok(Writer {
            syncer,
            ledger,
            state,
            buckets: Buckets::new((settings.clock)()),
            taken: Vec::new(),
            group_closes: Vec::new(),
            recent: Recent::default(),
            settings,
            seen_version: None,
            rebuild: false,
            health,
            _checkpointer: checkpointer,
            _snapshotter: snapshotter,
            replicate,
            fenced: None,
            partition,
            spill,
            looked_for_open: None,
            emergency,
            group_open: HashSet::new(),
        })
    }

    /// Serves until every sender is gone.
    pub fn run(mut self, queue: Receiver<Queued>, queued: &AtomicUsize) {
        let polling = Duration::from_micros(self.settings.poll_us);
        // After a group of one request whose caller polls for its answer, the writer polls the queue as long
        // before it sleeps: that caller's next request then needs no wake-up through the kernel (see
        // `Hook::call`). After any other group it sleeps at once, leaving the cores to the callers it answered
        // (polling after groups of one from HTTP callers, which cannot poll, cost about 5% of the throughput at 8
        // HTTP clients, durability full).
        let next = |poll: Duration| {
            crate::threads::poll_for(poll, || match queue.try_recv() {
                Ok(queued) => Some(Some(queued)),
                Err(TryRecvError::Empty) => None,
                Err(TryRecvError::Disconnected) => Some(None),
            })
            .unwrap_or_else(|| queue.recv().ok())
        };
        let mut poll_next = Duration::ZERO;
        while let Some(first) = next(poll_next) {
            let caller_polls = first.caller_polls;
            let group = self.take_group(first, &queue);
            queued.fetch_sub(group.len(), Ordering::Relaxed);
            poll_next = if group.len() == 1 && caller_polls { polling } else { Duration::ZERO };
            self.process(group, queued);
        }
    }

    /// A group: `first`, then every request queued, up to the group's bound, waiting for more until the group's
    /// wait after the first has passed. Each decision's wait in the queue is told the stage timer as it is taken.
    fn take_group(&self, first: Queued, queue: &Receiver<Queued>) -> Vec<Work> {
        let timer = self.settings.stages.as_ref();
        let take = |queued: Queued| {
            if queued.work.decides() {
                stages::took(timer, Stage::QueueWait, queued.at.elapsed());
            }
            queued.work
        };
        let mut group = vec![take(first)];
        let deadline = Instant::now() + Duration::from_micros(self.settings.group_wait_us);
        while group.len() < self.settings.group_max_requests {
            match queue.try_recv() {
                Ok(queued) => group.push(take(queued)),
                Err(TryRecvError::Disconnected) => break,
                Err(TryRecvError::Empty) => match deadline.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => match queue.recv_timeout(left) {
                        Ok(queued) => group.push(take(queued)),
                        Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
                    },
                    _ => break,
                },
            }
        }
        group
    }

    /// Decides and records a group; `queued` counts the requests waiting behind it.
    fn process(&mut self, group: Vec<Work>, queued: &AtomicUsize) {
        let now = (self.settings.clock)();
        if let Some((error, message)) = self.unable(group.len(), now) {
            self.health.failed(&message, group.len(), now);
            return group.into_iter().for_each(|work| work.fail(error(message.clone())));
        }
        self.taken.clear();
        self.group_closes.clear();
        self.group_open.clear();
        self.open_spill_if_needed();
        self.drain_spill(now);
        self.state.expire(now);
        self.state.prune(now);
        let (events, mut answers) = self.decide_group(group, now);
        let recorded = !events.is_empty();
        if recorded {
            answers = self.record(events, answers, now);
        }
        match &self.syncer {
            Some(syncer) => syncer.answer(answers, queued.load(Ordering::Relaxed) > 0, recorded),
            None => answers.into_iter().for_each(Answer::send),
        }
    }

    /// Why no group can be decided now, if so: the error its requests are answered and its message. A sync that
    /// failed is final; a state to rebuild, or what other writers appended, must be read first.
    fn unable(&mut self, requests: usize, now: Timestamp) -> Option<GroupFailure> {
        if let Some(fenced) = &self.fenced {
            return Some((HookError::Fenced, fenced.clone()));
        }
        if let Some(failure) = self.syncer.as_ref().and_then(Syncer::failure) {
            return Some((HookError::NotDurable, failure.to_string()));
        }
        if self.rebuild
            && let Err(error) = self.reload(now)
        {
            return Some((HookError::Ledger, failure(&error, "rebuilding the state from the ledger for", requests)));
        }
        // A catch-up that fails halfway leaves the state at the last entry it folded (each fold moves the state's
        // watermark): the next group's catch-up goes on from there.
        if let Err(error) = self.catch_up_if_changed(now) {
            return Some((HookError::Ledger, failure(&error, "reading what other writers appended for", requests)));
        }
        if self.state.is_missing_zones() {
            tracing::info!("hook: a policy names a time zone whose windows were not counted; rebuilding the state");
            if let Err(error) = self.reload(now) {
                return Some((
                    HookError::Ledger,
                    failure(&error, "rebuilding the state from the ledger for", requests),
                ));
            }
        }
        None
    }

    /// Decides each request of a group in turn: the events that record them, and their answers.
    fn decide_group(&mut self, group: Vec<Work>, now: Timestamp) -> (Vec<Event>, Vec<Answer>) {
        let mut events = Vec::new();
        let mut answers = Vec::with_capacity(group.len());
        for work in group {
            let mut answer = match work {
                Work::Check(request, token_name, reply) => {
                    Answer::Decision(reply, self.check(&request, token_name.as_deref(), now, &mut events))
                }
                Work::CheckAmounts(request, token_name, reply) => {
                    Answer::Decisions(reply, self.check_amounts(&request, token_name.as_deref(), now, &mut events))
                }
                Work::Reserve(request, token_name, reply) => {
                    Answer::Decision(reply, self.reserve(&request, token_name.as_deref(), now, &mut events))
                }
                Work::ReserveAmounts(request, token_name, reply) => {
                    Answer::Decisions(reply, self.reserve_amounts(&request, token_name.as_deref(), now, &mut events))
                }
                Work::Acquire(request, token_name, reply) => {
                    Answer::Decision(reply, self.acquire(&request, token_name.as_deref(), now, &mut events))
                }
                Work::Close { reservation_id, action, amount, lease, tenants, reply } => {
                    let closed = self.close(&reservation_id, action, amount, lease, &tenants, now, &mut events);
                    Answer::Close(reply, closed)
                }
                Work::Quotas(query, reply) => {
                    let quotas = crate::quotas::validate(&query)
                        .map(|()| crate::quotas::of_state(&self.state, Some(&self.buckets), &query, now));
                    Answer::Quotas(reply, quotas)
                }
                Work::Figures(reply) => {
                    drop(reply.send(Ok(crate::figures::of(&self.state, now))));
                    continue;
                }
                Work::Published { acknowledged, reply } => {
                    // A transaction of its own, answered at once: nothing decided rests on it, and losing it to a
                    // crash only publishes those entries again.
                    let recorded = self.ledger.outbox_published(&acknowledged);
                    drop(reply.send(recorded.map_err(|error| HookError::Ledger(error.to_string()))));
                    continue;
                }
            };
            // Replays too: a policy recorded since may name the metric now.
            answer.name_metrics(&self.state.policies);
            answers.push(answer);
        }
        (events, answers)
    }

    /// Records a group's events in one transaction; when the ledger refuses them, takes the group back and answers
    /// its requests with the error.
    fn record(&mut self, events: Vec<Event>, answers: Vec<Answer>, now: Timestamp) -> Vec<Answer> {
        let incoming = events
            .into_iter()
            .map(|event| Incoming { event, origin: Origin::Local { name: SOURCE.to_string() }, raw: None })
            .collect();
        // Replicated events are on their topics already: the outbox would publish them a second time.
        let batch = Batch { events: incoming, outbox: self.replicate.is_none(), ..Batch::default() };
        if let Err(failed) = self.replicate(&batch.events) {
            let (error, message) = match failed {
                ReplicateError::Fenced(message) => {
                    tracing::error!(reason = %message, "hook: another node owns this shard now; it answers nothing more here");
                    self.fenced = Some(message.clone());
                    (HookError::Fenced as fn(String) -> HookError, message)
                }
                ReplicateError::Unavailable(message) => (HookError::NotReplicated as fn(String) -> HookError, message),
            };
            self.health.failed(&message, answers.len(), now);
            let taken_back = self.take_back(&batch.events, now, &HashSet::new());
            return answers.into_iter().map(|a| a.failed_with(|| error(message.clone()), &taken_back)).collect();
        }
        match self.append(&batch) {
            Ok(report) => {
                self.health.recorded();
                if let Err(error) = self.follow(&batch.events, &report, now) {
                    // Recorded: the answers stand. The state is what may be wrong now.
                    tracing::error!(
                        requests = answers.len(),
                        error = %ledger::causes(&error),
                        "hook: a group of requests is recorded, but folding what other writers appended failed: the \
                         state is rebuilt from the ledger before the next group"
                    );
                    self.rebuild = true;
                }
                answers
            }
            Err(error) => {
                let message = failure(&error, "recording", answers.len());
                self.health.failed(&message, answers.len(), now);
                let open = self.fail_open(&batch.events, &answers);
                let taken_back = self.take_back(&batch.events, now, &open);
                let opened = |decision: &crate::api::Decision| open.contains(decision.decision_id.as_str());
                answers
                    .into_iter()
                    .map(|answer| match answer {
                        Answer::Decision(reply, Ok(decision)) if opened(&decision) => {
                            let decision = made_open(decision);
                            self.recent.insert(decision.clone());
                            Answer::Decision(reply, Ok(decision))
                        }
                        Answer::Decisions(reply, Ok(decisions)) if decisions.decisions.iter().all(opened) => {
                            let decisions = crate::api::Decisions {
                                decisions: decisions.decisions.into_iter().map(made_open).collect(),
                                ..decisions
                            };
                            decisions.decisions.iter().for_each(|d| self.recent.insert(d.clone()));
                            Answer::Decisions(reply, Ok(decisions))
                        }
                        other => other.failed(&message, &taken_back),
                    })
                    .collect()
            }
        }
    }

    /// Publishes a group's events before they are recorded (durability replicated): Kafka holds what the caller is
    /// told, and the shard is rebuilt from it wherever it goes next. A group published but then refused by the shard
    /// reaches the shard anyway through ingest (its events carry their ids): it counts, as a retried request would.
    fn replicate(&mut self, events: &[Incoming]) -> Result<(), ReplicateError> {
        let Some(replicate) = self.replicate.as_mut() else { return Ok(()) };
        let events: Vec<Event> = events.iter().map(|incoming| incoming.event.clone()).collect();
        let started = Instant::now();
        let published = replicate.replicate(&events);
        stages::took(self.settings.stages.as_ref(), Stage::Replicate, started.elapsed());
        published
    }

    /// Appends a group's events in one transaction, waiting through [`BUSY_WAITS`] busy timeouts for another
    /// process's write lock.
    fn append(&mut self, batch: &Batch) -> Result<AppendReport, ledger::AppendError> {
        // Another process holding the write lock past the busy timeout (10 s) leaves the state as right as it was:
        // the group's decisions stand against it, as they would have had the other transaction come a moment later.
        // Waiting again beats failing the group and its callers.
        let mut waits = 1;
        let waiting_since = Instant::now();
        loop {
            let started = Instant::now();
            let appended = self.ledger.append(batch);
            stages::took(self.settings.stages.as_ref(), Stage::GroupCommit, started.elapsed());
            match appended {
                Err(error) if waits < BUSY_WAITS && ledger::is_busy(&error) => {
                    tracing::warn!(
                        seconds = waiting_since.elapsed().as_secs(),
                        events = batch.events.len(),
                        "hook: another process holds the ledger's write lock; a group of events waits for it"
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
                AppendOutcome::Recorded { seq } | AppendOutcome::ConflictingDuplicate { seq, .. } => Some(*seq),
                AppendOutcome::Duplicate { .. } | AppendOutcome::Quarantined { .. } => None,
            })
            .collect();
        for (n, incoming) in events.iter().enumerate() {
            let recorded = match report.outcomes[n] {
                AppendOutcome::Recorded { seq } => Some(seq),
                AppendOutcome::ConflictingDuplicate { .. }
                | AppendOutcome::Duplicate { .. }
                | AppendOutcome::Quarantined { .. } => None,
            };
            match &incoming.event {
                Event::Reservation(r) => {
                    self.state.number_own(&state::key_of(r), state::PROVISIONAL_SEQ + n as u64, recorded, now)
                }
                // Usage the ledger did not count (its id taken by another producer's event, or its month's total
                // full since the state last looked): the state follows the ledger, which counts it nowhere.
                Event::Usage(u) if recorded.is_none() => {
                    tracing::warn!(
                        event_id = %u.header.event_id,
                        outcome = ?report.outcomes[n],
                        "hook: the ledger did not count the usage of an allowed request: not counted here either"
                    );
                    self.state.take_back_usage(&u.header, u.quantity);
                }
                _ => {}
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
    /// recorded, so none of it counts, and a retry of its idempotency keys decides afresh. Rebuilding the whole
    /// state from the ledger instead takes about 27 s on a ledger of 10 million events, and would be done for
    /// every group as long as the failure lasts (a full disk). Answers the ids of the decisions and closes taken back.
    /// The events of the decisions made `open` stand: they are in the spill.
    fn take_back<'e>(&mut self, events: &'e [Incoming], now: Timestamp, open: &HashSet<&str>) -> HashSet<&'e str> {
        let mut decisions = HashSet::new();
        for (n, incoming) in events.iter().enumerate().rev() {
            if open.contains(incoming.event.event_id()) {
                continue;
            }
            match &incoming.event {
                Event::Decision(d) => {
                    self.recent.forget(&d.header.event_id);
                    decisions.insert(d.header.event_id.as_str());
                }
                // A retried close answered with this one in the same group was not recorded either.
                Event::Reservation(r) if r.action != schemas::ReservationAction::RESERVE => {
                    decisions.insert(r.header.event_id.as_str());
                }
                _ => {}
            }
            self.state.take_back(state::PROVISIONAL_SEQ + n as u64, &incoming.event, now);
        }
        self.buckets.put_back(std::mem::take(&mut self.taken));
        decisions
    }

    /// The checks of a group the ledger refused that are answered FAIL_OPEN: those whose every policy is OPEN (of
    /// every metric, for a check of several), while the emergency rate allows (a token per check), once their events
    /// (each DecisionEvent saying FAIL_OPEN, and its usage) are synced in the spill. Answers the event ids spilled, a check's decision id among them. None at durability replicated:
    /// its events are on their topics already, and the shard takes them from there.
    fn fail_open<'e>(&mut self, events: &'e [Incoming], answers: &[Answer]) -> HashSet<&'e str> {
        let mut open = HashSet::new();
        if self.group_open.is_empty() || self.replicate.is_some() {
            return open;
        }
        let Some(spill) = self.spill.as_mut() else {
            tracing::error!("hook: checks whose policies fail open fail closed: there is no spill to keep them in");
            return open;
        };
        let by_id: HashMap<&str, &Event> = events.iter().map(|i| (i.event.event_id(), &i.event)).collect();
        let mut spilled = Vec::new();
        for answer in answers {
            // A check of several metrics is one request: one token of the emergency rate, every metric made open.
            let decisions = match answer {
                Answer::Decision(_, Ok(decision)) => std::slice::from_ref(decision),
                Answer::Decisions(_, Ok(decisions)) => decisions.decisions.as_slice(),
                _ => continue,
            };
            if decisions.iter().any(|d| d.replayed || !self.group_open.contains(&d.decision_id)) {
                continue;
            }
            let mut request = Vec::new();
            for decision in decisions {
                let hash = decision.decision_id.strip_prefix(crate::ids::DECISION_PREFIX).unwrap_or_default();
                let usage_id = crate::ids::usage_id(hash);
                if let (Some((&decision_id, Event::Decision(d))), Some((&usage_id, usage))) =
                    (by_id.get_key_value(decision.decision_id.as_str()), by_id.get_key_value(usage_id.as_str()))
                {
                    request.push((decision_id, d, usage_id, *usage));
                }
            }
            if request.len() != decisions.len() {
                continue;
            }
            if !take_emergency_token(&mut self.emergency, self.settings.fail_open_per_second) {
                break;
            }
            for (decision_id, d, usage_id, usage) in request {
                spilled.push(Event::Decision(DecisionEvent { reason: Reason::FAIL_OPEN, ..d.clone() }));
                spilled.push(usage.clone());
                open.extend([decision_id, usage_id]);
            }
        }
        if open.is_empty() {
            return open;
        }
        match spill.push(&spilled) {
            Ok(()) => {
                tracing::warn!(
                    decisions = open.len() / 2,
                    spill_bytes = spill.used(),
                    "hook: decisions allowed FAIL_OPEN while the ledger refuses writes, kept in the spill"
                );
                open
            }
            Err(error) => {
                tracing::error!(%error, "hook: checks whose policies fail open fail closed");
                HashSet::new()
            }
        }
    }

    /// Opens the spill once a policy is OPEN (looking once a second while none is), so that its space is taken before
    /// a disk fills.
    fn open_spill_if_needed(&mut self) {
        if self.spill.is_some() || self.settings.fail_open_per_second == 0 {
            return;
        }
        if self.looked_for_open.is_some_and(|at| at.elapsed() < Duration::from_secs(1)) {
            return;
        }
        self.looked_for_open = Some(Instant::now());
        if !self.state.policies.policies().iter().any(|p| p.on_failure == Some(OnFailure::OPEN)) {
            return;
        }
        let path = Spill::path_of(self.ledger.path());
        match Spill::open(&path, self.settings.spill_bytes) {
            Ok(spill) => self.spill = Some(spill),
            Err(error) => tracing::error!(%error, "hook: a policy fails open, but its spill cannot be made"),
        }
    }

    /// Appends the decisions made open to the ledger, once it takes writes again, then empties the spill (after the
    /// ledger's log is synced: never both places without them).
    fn drain_spill(&mut self, now: Timestamp) {
        let Some(spill) = self.spill.as_ref().filter(|s| !s.pending().is_empty()) else { return };
        let batch = spilled_batch(spill.pending(), self.replicate.is_none());
        let report = match self.append(&batch) {
            Ok(report) => report,
            Err(error) => {
                let message = failure(&error, "recording the decisions made open for", batch.events.len() / 2);
                tracing::warn!(reason = %message, "hook: the spill still waits");
                return;
            }
        };
        let spill = self.spill.as_mut().expect("a spill with pending events");
        match self.ledger.sync_log() {
            Ok(()) => {
                tracing::info!(
                    events = batch.events.len(),
                    "hook: the events made open are recorded; the spill is empty"
                );
                if let Err(error) = spill.clear() {
                    tracing::error!(
                        %error,
                        "hook: the spill's events are recorded, but it was not emptied: the next start appends them \
                         again, and the ledger keeps each once"
                    );
                }
            }
            Err(error) => tracing::error!(
                %error,
                "hook: the spill's events are recorded but the ledger's log was not synced; the spill keeps them for \
                 the next start"
            ),
        }
        if let Err(error) = self.follow(&batch.events, &report, now) {
            tracing::error!(
                error = %ledger::causes(&error),
                "hook: folding after the spill was recorded failed: rebuilding the state"
            );
            self.rebuild = true;
        }
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
    fn reload(&mut self, now: Timestamp) -> Result<(), StartError> {
        self.state = load(&self.ledger, now, self.settings.start_from_snapshot)?;
        self.seen_version = None;
        self.rebuild = false;
        tracing::warn!(watermark = self.state.watermark, "hook: the state is rebuilt from the ledger");
        Ok(())
    }
}

/// A writer unwinding a panic says so before its fields (the ledger, the sync and checkpoint threads) are dropped,
/// which may take a while: its last callers, whose answers were dropped first, find health saying it.
impl Drop for Writer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.health.writer_stopped("the hook's writer stopped on a panic");
        }
    }
}

/// What a group's callers are told when the ledger refused it, logged too (an operator sees the cause, where
/// the callers see a 500): the error with every cause (the outermost alone, "ledger write failed, nothing
/// appended", hides "database is locked"), and when another process held the write lock too long, so.
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
    tracing::error!(doing, requests, error = %message, "hook: a group of requests failed, nothing of it recorded");
    message
}

/// A batch of the events of the spill, as the writer records its own.
fn spilled_batch(events: &[Event], outbox: bool) -> Batch {
    let incoming = events
        .iter()
        .map(|event| Incoming { event: event.clone(), origin: Origin::Local { name: SOURCE.to_string() }, raw: None })
        .collect();
    Batch { events: incoming, outbox, ..Batch::default() }
}

/// Opens the spill at `path` and appends what it holds to `ledger` (synced), emptying it: a start records what the
/// last run made open before anything else.
fn take_spilled(ledger: &mut Ledger, path: &std::path::Path, bytes: u64, outbox: bool) -> Result<Spill, StartError> {
    let spill_error = |e: crate::spill::SpillError| StartError::Spill(e.to_string());
    let mut spill = Spill::open(path, bytes).map_err(spill_error)?;
    if spill.pending().is_empty() {
        return Ok(spill);
    }
    let pending = spill.pending().len();
    let batch = spilled_batch(spill.pending(), outbox);
    ledger.append(&batch).map_err(|e| {
        StartError::Spill(format!(
            "{pending} events in {}; the ledger refused them: {}",
            path.display(),
            ledger::causes(&e)
        ))
    })?;
    ledger.sync_log().map_err(|e| StartError::Spill(format!("syncing the ledger's log after taking them: {e}")))?;
    spill.clear().map_err(spill_error)?;
    tracing::info!(events = pending, spill = %path.display(), "hook: the events of decisions made open are recorded");
    Ok(spill)
}

/// Takes one token of the emergency rate (`per_second`, a second's worth at most), if one is there.
fn take_emergency_token(bucket: &mut (f64, Instant), per_second: u32) -> bool {
    let rate = f64::from(per_second);
    let now = Instant::now();
    bucket.0 = (bucket.0 + now.duration_since(bucket.1).as_secs_f64() * rate).min(rate);
    bucket.1 = now;
    if bucket.0 >= 1.0 {
        bucket.0 -= 1.0;
        true
    } else {
        false
    }
}

/// A check allowed although the ledger refused its group.
fn made_open(decision: crate::api::Decision) -> crate::api::Decision {
    crate::api::Decision { reason: Reason::FAIL_OPEN, code: crate::api::Code::FAIL_OPEN, ..decision }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves a refused group is told every cause, and when another process held the write lock, so.
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
}
