//! The request rules of the writer: each request of a group validated, replayed (a repeated idempotency key answers
//! its original decision, a repeated close its original close) or refused as a reuse of its key for another
//! request, or decided against the state as the group's earlier requests left it, and the events that record it
//! built: a DecisionEvent, and when allowed the UsageEvent or the RESERVE; a close checked against the holds it
//! names and recorded as a COMMIT or RELEASE.
//!
//! Nothing a caller sends stops the writer or fails the other requests of its group: every field the ledger checks
//! of an event is checked here first (a refused event would fail the group's whole append), and every sum a request
//! adds to must stay within i64.

use std::collections::BTreeMap;

use schemas::*;

use super::Writer;
use super::reads::{Judged, Recorded, judge_from_ledger, own_close, read_decision};
use crate::api::*;
use crate::buckets::BucketOf;
use crate::decide::{self, Ask, Evaluated, Verdict};
use crate::error::HookError;
use crate::state::{self, Adding, Hold};
use crate::{alerts, ids};

/// A valid ask: new (with its idempotency key's hash), or a repeated key (with the original decision).
enum Admitted {
    New { hash: String },
    Replayed(Box<Decision>),
}

/// Who asked for a new decision, and under which ids it is recorded.
struct Asked<'a> {
    /// The idempotency key's hash, which the event ids derive from.
    hash: &'a str,
    request_id: &'a str,
    idempotency_key: &'a str,
    /// The name of the token the caller authenticated with, if a server said.
    token_name: Option<&'a str>,
}

/// Which request an idempotency key was sent with: a reservation's decision answers only a reserve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Check,
    Reserve,
    Lease,
}

/// The open reservation a close applies to, chosen among the holds of its id.
struct Chosen {
    hold: Hold,
    /// Whether it is this hook's own (its close's event_id says so).
    own: bool,
}

impl Writer {
    /// What is recorded under `decision_id` for `tenant`'s `idempotency_key`: one of the last decisions, or what the
    /// ledger holds.
    fn replayed(&self, decision_id: &str, tenant: &str, idempotency_key: &str) -> Result<Option<Recorded>, HookError> {
        if let Some(decision) = self.recent.get(decision_id) {
            return Ok(Some(Recorded::Own(Box::new(Decision { replayed: true, ..decision.clone() }))));
        }
        let found = read_decision(&self.ledger, &self.state, self.partition, decision_id, tenant, idempotency_key)
            .map_err(|e| HookError::Ledger(ledger::causes(&e)))?;
        Ok(found.map(|recorded| match recorded {
            Recorded::Own(decision) => Recorded::Own(Box::new(Decision { replayed: true, ..*decision })),
            foreign => foreign,
        }))
    }

    /// Validates an ask, answers a repeated idempotency key with the decision recorded for it (contract §9.1: the same
    /// request, or 409), and refuses a new one that would take a sum past i64 or the tenant past its bound of
    /// counters.
    fn admit(
        &self,
        ask: &Ask<'_>,
        idempotency_key: &str,
        request_id: Option<&str>,
        kind: Kind,
        now: Timestamp,
    ) -> Result<Admitted, HookError> {
        validate_ask(ask, idempotency_key, request_id)?;
        let hash = ids::key_hash(ask.tenant(), idempotency_key);
        let decision_id = ids::decision_id(&hash);
        match self.replayed(&decision_id, ask.tenant(), idempotency_key)? {
            Some(Recorded::Own(decision)) => {
                same_request(&decision, ask, idempotency_key, kind)?;
                return Ok(Admitted::Replayed(decision));
            }
            Some(Recorded::Foreign) => return Err(foreign(idempotency_key, decision_id)),
            None => {}
        }
        let adding = match kind {
            Kind::Check => Adding::Consumption(now),
            Kind::Reserve | Kind::Lease => Adding::Held,
        };
        self.not_a_gauge(ask, now)?;
        self.has_room(ask, adding)?;
        Ok(Admitted::New { hash })
    }

    /// Refuses to decide consumption of a gauge's metric (a gauge quota of the tenant names it): its usage events
    /// are levels, and the usage a check records would set the level to the amount asked.
    fn not_a_gauge(&self, ask: &Ask<'_>, now: Timestamp) -> Result<(), HookError> {
        if !self.state.policies.is_gauge(ask.tenant(), ask.metric, now) {
            return Ok(());
        }
        let message = format!(
            "{:?} is a gauge of tenant {:?} (a gauge quota limits its level): its level is reported as a usage event \
             carrying the current value, not checked; check the request's own metric with its operation",
            ask.metric,
            ask.tenant()
        );
        Err(HookError::BadRequest { field: "metric", message })
    }

    /// Whether a new request of `ask` fits: in the tenant's bound of counters, and in every sum it adds to.
    fn has_room(&self, ask: &Ask<'_>, adding: Adding) -> Result<(), HookError> {
        let new = self.state.new_counters(ask.tenant(), ask.named(), ask.metric);
        let held = self.state.counters_of(ask.tenant());
        let bound = self.settings.counters_per_tenant_max;
        if new > 0 && held.saturating_add(new) > bound {
            let (field, value) = match (new, ask.who.subject.as_deref()) {
                (1, Some(subject)) => ("subject", subject),
                _ => ("metric", ask.metric),
            };
            return Err(HookError::BadRequest {
                field,
                message: format!(
                    "{value:?} would be a new {field} of tenant {:?}, which has counters for {held} metrics and \
                     subjects in memory, its bound ({bound}): nothing was decided; they age out a day after the \
                     month they were last used in",
                    ask.tenant()
                ),
            });
        }
        self.state
            .room(ask.tenant(), ask.named(), ask.metric, adding, ask.amount)
            .map_err(|no_room| too_much(ask.amount, no_room))
    }

    /// `check`: decides the ask and, when allowed, consumes it (a UsageEvent).
    pub(super) fn check(
        &mut self,
        request: &Request,
        token_name: Option<&str>,
        now: Timestamp,
        events: &mut Vec<Event>,
    ) -> Result<Decision, HookError> {
        validate_token_name(token_name)?;
        request.holds_nothing()?;
        let (metric, amount) = request.one_metric()?;
        let ask = Ask::new(&request.who, metric, amount).doing(request.operation);
        let hash = match self.admit(&ask, &request.idempotency_key, request.request_id.as_deref(), Kind::Check, now)? {
            Admitted::New { hash } => hash,
            Admitted::Replayed(decision) => return Ok(*decision),
        };
        let request_id = request.request_id.clone().unwrap_or_else(|| request.idempotency_key.clone());
        let asked =
            Asked { hash: &hash, request_id: &request_id, idempotency_key: &request.idempotency_key, token_name };
        let (decision, header, fails_open) = self.decide(&ask, &asked, now, events);
        if decision.allowed() && fails_open {
            self.group_open.insert(decision.decision_id.clone());
        }
        if decision.allowed() {
            let usage = UsageEvent {
                header: Header { event_id: ids::usage_id(&hash), ..header.clone() },
                quantity: amount,
                request_id: Some(request_id),
                attributes: Default::default(),
            };
            self.state.consume(&usage.header, usage.quantity);
            events.push(Event::Usage(usage));
        }
        self.recent.insert(decision.clone());
        Ok(decision)
    }

    /// `reserve`: decides the ask and, when allowed, holds it until `ttl_ms` from now (a RESERVE).
    pub(super) fn reserve(
        &mut self,
        request: &Request,
        token_name: Option<&str>,
        now: Timestamp,
        events: &mut Vec<Event>,
    ) -> Result<Decision, HookError> {
        validate_token_name(token_name)?;
        let ttl_ms = request.held_ms()?;
        validate_ttl(ttl_ms)?;
        let (metric, amount) = request.one_metric()?;
        let ask = Ask::new(&request.who, metric, amount).doing(request.operation);
        let hash =
            match self.admit(&ask, &request.idempotency_key, request.request_id.as_deref(), Kind::Reserve, now)? {
                Admitted::New { hash } => hash,
                Admitted::Replayed(decision) => return Ok(*decision),
            };
        let reservation_id = ids::reservation_id(&hash, self.partition);
        let request_id = request.request_id.clone().unwrap_or_else(|| reservation_id.clone());
        let asked =
            Asked { hash: &hash, request_id: &request_id, idempotency_key: &request.idempotency_key, token_name };
        let (mut decision, header, _) = self.decide(&ask, &asked, now, events);
        if decision.allowed() {
            let expires_at = Timestamp(now.micros() + ttl_ms * 1_000);
            let reserve = ReservationEvent {
                header: Header { event_id: ids::reserve_event_id(&reservation_id), ..header },
                reservation_id: reservation_id.clone(),
                action: ReservationAction::RESERVE,
                amount,
                expires_at: Some(expires_at),
                fencing_token: None,
            };
            self.state.fold_own(state::PROVISIONAL_SEQ + events.len() as u64, &reserve, now);
            events.push(Event::Reservation(reserve));
            decision.reservation_id = Some(reservation_id);
        }
        self.recent.insert(decision.clone());
        Ok(decision)
    }

    /// `acquire` of a lease: decided against the CONCURRENT policies of the metric alone (a lease
    /// consumes nothing, so windows have no say), and when allowed granted one slot until `ttl_ms` from now under a
    /// fencing token greater than every one granted before for the tenant and metric (a RESERVE carrying it).
    pub(super) fn acquire(
        &mut self,
        request: &AcquireRequest,
        token_name: Option<&str>,
        now: Timestamp,
        events: &mut Vec<Event>,
    ) -> Result<Decision, HookError> {
        validate_token_name(token_name)?;
        validate_ttl(request.ttl_ms)?;
        let ask = Ask::new(&request.who, &request.metric, 1);
        let hash = match self.admit(&ask, &request.idempotency_key, request.request_id.as_deref(), Kind::Lease, now)? {
            Admitted::New { hash } => hash,
            Admitted::Replayed(decision) => return Ok(*decision),
        };
        let lease_id = ids::reservation_id(&hash, self.partition);
        let request_id = request.request_id.clone().unwrap_or_else(|| lease_id.clone());
        let asked =
            Asked { hash: &hash, request_id: &request_id, idempotency_key: &request.idempotency_key, token_name };
        let verdict = decide::decide(decide::evaluate_leases(&self.state, &ask, now));
        let (mut decision, header) = record_decision(&verdict, &ask, &asked, now, events);
        if decision.allowed() {
            let fencing_token = self.state.fencing_token(&ask.who.tenant, ask.metric).saturating_add(1);
            let expires_at = Timestamp(now.micros() + request.ttl_ms * 1_000);
            let reserve = ReservationEvent {
                header: Header { event_id: ids::reserve_event_id(&lease_id), ..header },
                reservation_id: lease_id.clone(),
                action: ReservationAction::RESERVE,
                amount: 1,
                expires_at: Some(expires_at),
                fencing_token: Some(fencing_token),
            };
            self.state.fold_own(state::PROVISIONAL_SEQ + events.len() as u64, &reserve, now);
            events.push(Event::Reservation(reserve));
            decision.lease = Some(Lease { lease_id: lease_id.clone(), fencing_token, expires_at });
            decision.reservation_id = Some(lease_id);
        }
        self.recent.insert(decision.clone());
        Ok(decision)
    }

    /// Evaluates, decides, takes throttle tokens when allowed, and pushes the DecisionEvent; says too whether the ask
    /// fails open (policies apply, and every one is `on_failure: OPEN`).
    fn decide(
        &mut self,
        ask: &Ask<'_>,
        asked: &Asked<'_>,
        now: Timestamp,
        events: &mut Vec<Event>,
    ) -> (Decision, Header, bool) {
        let evaluated = decide::evaluate(&self.state, &self.buckets, ask, now);
        let fails_open =
            !evaluated.is_empty() && evaluated.iter().all(|e| e.policy.on_failure == Some(OnFailure::OPEN));
        let throttles: Vec<Evaluated> =
            evaluated.iter().filter(|e| e.is_throttle() || e.overage.is_some()).cloned().collect();
        // Below every threshold, as nearly every request is, this allocates nothing.
        let state = &self.state;
        let reached = alerts::reached(&evaluated, ask, now, asked.request_id, |id| state.is_alerted(id));
        let verdict = decide::decide(evaluated);
        if verdict.outcome == Outcome::ALLOWED {
            self.take_throttles(ask, &throttles, now);
        }
        let (decision, header) = record_decision(&verdict, ask, asked, now, events);
        if verdict.outcome == Outcome::ALLOWED {
            self.record_alerts(reached, events);
        }
        (decision, header, fails_open)
    }

    /// Records the alerts an allowed request reached beside its decision, and remembers them, so that the next request
    /// in their windows does not write them again.
    fn record_alerts(&mut self, reached: Vec<AlertEvent>, events: &mut Vec<Event>) {
        for alert in reached {
            self.state.note_alert(&alert);
            events.push(Event::Alert(alert));
        }
    }

    /// Takes an allowed ask's tokens from its throttles' buckets. Only from buckets that had the tokens: a SHADOW (or
    /// SOFT) bucket that did not fit takes nothing, as a HARD one would have denied and taken nothing. Emptied below
    /// zero, it said SHADOW_DENIED long after a HARD bucket would have refilled.
    fn take_throttles(&mut self, ask: &Ask<'_>, evaluated: &[Evaluated], now: Timestamp) {
        for t in evaluated.iter().filter(|t| t.fits) {
            let member = ask.member(t.policy.scope);
            let (of, amount) = match (t.is_throttle(), t.overage) {
                (true, _) => (BucketOf::Throttle, ask.amount),
                (false, Some(beyond)) => (BucketOf::Overage, beyond),
                (false, None) => continue,
            };
            self.taken.push(self.buckets.take(of, &t.policy, ask.tenant(), member, amount, now));
        }
    }

    /// `check` of several metrics: every policy of every metric evaluated against the state before
    /// anything is consumed, then all consumed or none. Each metric records its DecisionEvent and, when allowed, its
    /// UsageEvent, all under the request's one request_id, their ids derived from the key and the metric
    /// ([`ids::metric_hash`]). A metric whose own policies had room records DENIED with its own reason
    /// (WITHIN_LIMIT) when another metric denied: the decision that denied is the one that names a denying reason.
    pub(super) fn check_amounts(
        &mut self,
        request: &Request,
        token_name: Option<&str>,
        now: Timestamp,
        events: &mut Vec<Event>,
    ) -> Result<Decisions, HookError> {
        request.holds_nothing()?;
        self.decide_amounts(request, None, token_name, now, events)
    }

    /// `reserve` of several metrics: decided as [`Writer::check_amounts`] decides, all or nothing, each metric then
    /// holding its amount under a reservation of its own (its id derived from the key and the metric, as the
    /// decision's), committed or released on its own.
    pub(super) fn reserve_amounts(
        &mut self,
        request: &Request,
        token_name: Option<&str>,
        now: Timestamp,
        events: &mut Vec<Event>,
    ) -> Result<Decisions, HookError> {
        let ttl_ms = request.held_ms()?;
        validate_ttl(ttl_ms)?;
        self.decide_amounts(request, Some(ttl_ms), token_name, now, events)
    }

    /// A check (`ttl_ms` none) or a reserve (held for `ttl_ms`) of several metrics.
    fn decide_amounts(
        &mut self,
        request: &Request,
        ttl_ms: Option<i64>,
        token_name: Option<&str>,
        now: Timestamp,
        events: &mut Vec<Event>,
    ) -> Result<Decisions, HookError> {
        validate_token_name(token_name)?;
        let amounts = request.several_metrics()?;
        let asks = validate_amounts(request, amounts)?;
        let hash = ids::key_hash(&request.who.tenant, &request.idempotency_key);
        let kind = if ttl_ms.is_some() { Kind::Reserve } else { Kind::Check };
        if let Some(replayed) = self.replay_amounts(request, amounts, &hash, kind)? {
            return Ok(replayed);
        }
        for ask in &asks {
            self.not_a_gauge(ask, now).map_err(|e| match e {
                HookError::BadRequest { message, .. } => HookError::BadRequest { field: "amounts", message },
                other => other,
            })?;
            self.has_room(ask, if ttl_ms.is_some() { Adding::Held } else { Adding::Consumption(now) })?;
        }
        let request_id = request.request_id.clone().unwrap_or_else(|| request.idempotency_key.clone());
        // Every policy of every metric, before anything is consumed: one verdict over all of them.
        let evaluated: Vec<Vec<Evaluated>> =
            asks.iter().map(|ask| decide::evaluate(&self.state, &self.buckets, ask, now)).collect();
        let allowed = decide::decide(evaluated.iter().flatten().cloned().collect()).outcome == Outcome::ALLOWED;
        // A check of several metrics fails open as one of a metric does: policies apply and every one, of every
        // metric, is OPEN. A reserve never: its commit or release needs the ledger as much as it does.
        let fails_open = ttl_ms.is_none()
            && evaluated.iter().flatten().next().is_some()
            && evaluated.iter().flatten().all(|e| e.policy.on_failure == Some(OnFailure::OPEN));
        let mut decisions = Vec::with_capacity(asks.len());
        for (n, (ask, evaluated)) in asks.iter().zip(evaluated).enumerate() {
            let metric_hash = ids::metric_hash(&hash, ask.metric, n == 0);
            let asked = Asked {
                hash: &metric_hash,
                request_id: &request_id,
                idempotency_key: &request.idempotency_key,
                token_name,
            };
            if allowed {
                self.take_throttles(ask, &evaluated, now);
            }
            let state = &self.state;
            let reached = alerts::reached(&evaluated, ask, now, &request_id, |id| state.is_alerted(id));
            let mut verdict = decide::decide(evaluated);
            if !allowed {
                verdict.outcome = Outcome::DENIED;
            }
            let (mut decision, header) = record_decision(&verdict, ask, &asked, now, events);
            if allowed {
                self.record_alerts(reached, events);
            }
            match ttl_ms {
                Some(ttl_ms) if allowed => {
                    let reservation_id = ids::reservation_id(&metric_hash, self.partition);
                    let reserve = ReservationEvent {
                        header: Header { event_id: ids::reserve_event_id(&reservation_id), ..header },
                        reservation_id: reservation_id.clone(),
                        action: ReservationAction::RESERVE,
                        amount: ask.amount,
                        expires_at: Some(Timestamp(now.micros() + ttl_ms * 1_000)),
                        fencing_token: None,
                    };
                    self.state.fold_own(state::PROVISIONAL_SEQ + events.len() as u64, &reserve, now);
                    events.push(Event::Reservation(reserve));
                    decision.reservation_id = Some(reservation_id);
                }
                None if allowed => {
                    let usage = UsageEvent {
                        header: Header { event_id: ids::usage_id(&metric_hash), ..header },
                        quantity: ask.amount,
                        request_id: Some(request_id.clone()),
                        attributes: Default::default(),
                    };
                    self.state.consume(&usage.header, usage.quantity);
                    events.push(Event::Usage(usage));
                }
                _ => {}
            }
            if asks.len() > 1 {
                decision.amounts = amounts.clone();
            }
            if allowed && fails_open {
                self.group_open.insert(decision.decision_id.clone());
            }
            self.recent.insert(decision.clone());
            decisions.push(decision);
        }
        Ok(decisions_of(decisions))
    }

    /// The original answer of a request of several metrics whose key was used before (contract §9.1): the same
    /// tenant, subject and amounts, or 409. Its first metric's decision has the key's own id ([`ids::metric_hash`]),
    /// whichever form the original took.
    fn replay_amounts(
        &self,
        request: &Request,
        amounts: &BTreeMap<String, i64>,
        hash: &str,
        kind: Kind,
    ) -> Result<Option<Decisions>, HookError> {
        let key = &request.idempotency_key;
        let anchor_id = ids::decision_id(hash);
        let anchor = match self.replayed(&anchor_id, &request.who.tenant, key)? {
            None => return Ok(None),
            Some(Recorded::Foreign) => return Err(foreign(key, anchor_id)),
            Some(Recorded::Own(anchor)) => anchor,
        };
        let original = match anchor.amounts.is_empty() {
            true => BTreeMap::from([(anchor.metric.clone(), anchor.amount)]),
            false => anchor.amounts.clone(),
        };
        let differs = |field: &'static str, first: String, now: String| HookError::IdempotencyKeyReused {
            field,
            message: format!(
                "idempotency_key {key:?} was first used with {field} {first} (decision {anchor_id}), this request has \
                 {now}: nothing was decided; send a new request with a new key"
            ),
            decision_id: anchor_id.clone(),
        };
        let (first, now) = (&anchor.who, &request.who);
        if first.subject != now.subject {
            return Err(differs("subject", format!("{:?}", first.subject), format!("{:?}", now.subject)));
        }
        if first.project != now.project {
            return Err(differs("project", format!("{:?}", first.project), format!("{:?}", now.project)));
        }
        if first.api_key != now.api_key {
            return Err(differs("api_key", format!("{:?}", first.api_key), format!("{:?}", now.api_key)));
        }
        if original != *amounts {
            return Err(differs("amounts", format!("{original:?}"), format!("{amounts:?}")));
        }
        // A denied check and a denied reserve record the same decisions; allowed ones say which they were.
        match (kind, anchor.allowed(), anchor.reservation_id.is_some()) {
            (Kind::Check, _, true) => return Err(differs("kind", "a reserve".into(), "a check".into())),
            (Kind::Reserve, true, false) => return Err(differs("kind", "a check".into(), "a reserve".into())),
            _ => {}
        }
        let mut decisions = vec![*anchor];
        for metric in amounts.keys().skip(1) {
            let id = ids::decision_id(&ids::metric_hash(hash, metric, false));
            match self.replayed(&id, &request.who.tenant, key)? {
                Some(Recorded::Own(decision)) => decisions.push(*decision),
                _ => {
                    let message = format!("decision {id} of metric {metric:?} of key {key:?} is not recorded");
                    return Err(HookError::Ledger(message));
                }
            }
        }
        Ok(Some(decisions_of(decisions)))
    }

    /// `commit` or `release` of a reservation, or the renewal or release of a lease presenting `lease`: the hold it
    /// closes or extends, or why it is refused.
    #[allow(clippy::too_many_arguments)] // One request's fields, as the queue carries them.
    pub(super) fn close(
        &mut self,
        reservation_id: &str,
        action: ReservationAction,
        amount: i64,
        lease: Option<LeaseStep>,
        tenants: &TenantScope,
        now: Timestamp,
        events: &mut Vec<Event>,
    ) -> Result<Result<Closed, Refusal>, HookError> {
        check_amount(amount)?;
        let amount = if action == ReservationAction::COMMIT { amount } else { 0 };
        let renewal = match (action, lease) {
            (ReservationAction::RENEW, Some(LeaseStep { ttl_ms: Some(ttl_ms), .. })) => {
                validate_ttl(ttl_ms)?;
                Some(Timestamp(now.micros() + ttl_ms * 1_000))
            }
            (ReservationAction::RENEW, _) => {
                let message = "a renewal says for how long the lease holds from now".to_string();
                return Err(HookError::BadRequest { field: "ttl_ms", message });
            }
            _ => None,
        };
        let Some(Chosen { hold, own }) = self.choose_hold(reservation_id, tenants)? else {
            return self.refuse_close(reservation_id, action, amount, lease, tenants, events);
        };
        let id = reservation_id.to_string();
        match (hold.fencing_token, lease) {
            (Some(current), Some(step)) if step.fencing_token != current => {
                let presented = step.fencing_token;
                return Ok(Err(Refusal::StaleToken { reservation_id: id, presented }));
            }
            (Some(_), None) => {
                let what = "a lease: it is renewed or released presenting its fencing_token, never committed".into();
                return Ok(Err(Refusal::WrongKind { reservation_id: id, what }));
            }
            (None, Some(_)) => {
                let what = "a reservation of an amount, not a lease: it is committed or released".into();
                return Ok(Err(Refusal::WrongKind { reservation_id: id, what }));
            }
            _ => {}
        }
        if hold.expires_at < now {
            return Ok(Err(Refusal::Expired { reservation_id: id, expires_at: hold.expires_at }));
        }
        if action == ReservationAction::COMMIT {
            let consumption = Adding::Consumption(now);
            let room = self.state.room(&hold.who.tenant, hold.named(), &hold.metric, consumption, amount);
            room.map_err(|no_room| too_much(amount, no_room))?;
        }
        let event_id = ids::close_event_id(&hold.who.tenant, reservation_id, action, own);
        let header = Header {
            // Each renewal is an event of its own: its id names the expiry it sets.
            event_id: match renewal {
                Some(expires_at) => format!("{event_id}-{}", expires_at.micros()),
                None => event_id,
            },
            occurred_at: now,
            tenant: hold.who.tenant.clone(),
            subject: hold.who.subject.clone(),
            project: hold.who.project.clone(),
            api_key: hold.who.api_key.clone(),
            metric: hold.metric.clone(),
            source: SOURCE.to_string(),
        };
        let event_id = header.event_id.clone();
        let fencing_token = hold.fencing_token;
        let expires_at = renewal;
        let close = ReservationEvent { header, reservation_id: id.clone(), action, amount, expires_at, fencing_token };
        // Open and closed in time: the verdict takes the hold back and, for a COMMIT, counts the amount; a RENEW moves
        // the lease's expiry.
        self.state.fold_own(state::PROVISIONAL_SEQ + events.len() as u64, &close, now);
        events.push(Event::Reservation(close));
        let closed = Closed {
            reservation_id: id,
            action,
            amount,
            reserved: hold.amount,
            charged_above_reserved: amount.saturating_sub(hold.amount).max(0),
            event_id,
            replayed: false,
            fencing_token,
            expires_at,
        };
        self.group_closes.push(closed.clone());
        Ok(Ok(closed))
    }

    /// The open hold of `reservation_id` a close by a caller covering `tenants` applies to, if any.
    fn choose_hold(&self, reservation_id: &str, tenants: &TenantScope) -> Result<Option<Chosen>, HookError> {
        let holds = self.state.holds_of(reservation_id);
        // Other enforcers' reservations of two tenants may share an id, and a close names no tenant: of those the
        // caller may close, this hook's own, or the only one; never a guess.
        let covered: Vec<&Hold> = holds.iter().filter(|h| tenants.covers(&h.who.tenant)).collect();
        let own: Vec<&Hold> =
            covered.iter().copied().filter(|h| self.state.is_own(&h.who.tenant, reservation_id)).collect();
        match (own.as_slice(), covered.as_slice()) {
            ([hold], _) => Ok(Some(Chosen { hold: (*hold).clone(), own: true })),
            ([], [hold]) => Ok(Some(Chosen { hold: (*hold).clone(), own: false })),
            (_, []) => Ok(None),
            _ => {
                let tenants: Vec<&str> = covered.iter().map(|h| h.who.tenant.as_str()).collect();
                Err(HookError::BadRequest {
                    field: "reservation_id",
                    message: format!(
                        "{reservation_id} names open reservations of {} tenants ({}): close it through the enforcer \
                         that holds it, or with a token of one tenant",
                        tenants.len(),
                        tenants.join(", ")
                    ),
                })
            }
        }
    }

    /// A close of a reservation the caller holds no open hold of: the original answer of the same close retried
    /// (contract §9.1: the same action, and for a COMMIT the same amount, that this hook recorded), or why it is refused.
    fn refuse_close(
        &self,
        reservation_id: &str,
        action: ReservationAction,
        amount: i64,
        lease: Option<LeaseStep>,
        tenants: &TenantScope,
        events: &[Event],
    ) -> Result<Result<Closed, Refusal>, HookError> {
        let id = reservation_id.to_string();
        // The caller's own reservation of this id, closed, expired or never made, answers before another
        // tenant's that is open: a tenant retrying a commit of its reservation another enforcer committed hears
        // 409, not 403 because another tenant's producer chose the same id.
        // Closed earlier in this group: not in the ledger yet, which would call it expired.
        if let Some(close) = closed_in_group(events, reservation_id, tenants) {
            let original = self.group_closes.iter().find(|c| c.event_id == close.header.event_id);
            if let Some(original) = original.filter(|c| (c.action, c.amount) == (action, amount)) {
                return Ok(Ok(Closed { replayed: true, ..original.clone() }));
            }
            let by = close.action.symbol().to_string();
            return Ok(Err(Refusal::AlreadyClosed { reservation_id: id, by }));
        }
        let ledger_error = |e: ledger::ReadError| HookError::Ledger(ledger::causes(&e));
        let judged = judge_from_ledger(&self.ledger, reservation_id, tenants).map_err(ledger_error)?;
        // Held, or closed in this group, by tenants the caller does not cover only (not in the ledger yet).
        let others =
            !self.state.holds_of(reservation_id).is_empty() || events.iter().any(|e| is_close_of(e, reservation_id));
        Ok(Err(match judged {
            Judged::NotFound if others => Refusal::Forbidden { reservation_id: id },
            Judged::NotFound => Refusal::NotFound { reservation_id: id },
            Judged::Forbidden => Refusal::Forbidden { reservation_id: id },
            Judged::Expired(expires_at) => Refusal::Expired { reservation_id: id, expires_at },
            Judged::Closed { tenant, reserved, action: by, amount: closed, occurred_at, fencing_token } => {
                let close = (by, closed, occurred_at);
                // A lease released already: a retry presenting another token is a stale holder's, not the release's.
                if let (Some(current), Some(step)) = (fencing_token, lease)
                    && step.fencing_token != current
                {
                    let presented = step.fencing_token;
                    return Ok(Err(Refusal::StaleToken { reservation_id: id, presented }));
                }
                if (by, closed) == (action, amount)
                    && let Some(event_id) =
                        own_close(&self.ledger, &tenant, reservation_id, close).map_err(ledger_error)?
                {
                    let charged_above_reserved = amount.saturating_sub(reserved).max(0);
                    let replayed = true;
                    return Ok(Ok(Closed {
                        reservation_id: id,
                        action,
                        amount,
                        reserved,
                        charged_above_reserved,
                        event_id,
                        replayed,
                        fencing_token,
                        expires_at: None,
                    }));
                }
                Refusal::AlreadyClosed { reservation_id: id, by: by.symbol().to_string() }
            }
        }))
    }
}

/// The 409 of a key whose decision id holds an event this hook did not record for this tenant and key.
fn foreign(idempotency_key: &str, decision_id: String) -> HookError {
    HookError::IdempotencyKeyReused {
        field: "idempotency_key",
        message: format!(
            "idempotency_key {idempotency_key:?}: its decision id {decision_id} is held by an event this hook did not \
             record for this tenant and key; nothing was decided: use another key"
        ),
        decision_id,
    }
}

/// Pushes the DecisionEvent recording `verdict` of `ask`: the decision answered, and the event's header.
fn record_decision(
    verdict: &Verdict,
    ask: &Ask<'_>,
    asked: &Asked<'_>,
    now: Timestamp,
    events: &mut Vec<Event>,
) -> (Decision, Header) {
    let header = Header {
        event_id: ids::decision_id(asked.hash),
        occurred_at: now,
        tenant: ask.who.tenant.clone(),
        subject: ask.who.subject.clone(),
        project: ask.who.project.clone(),
        api_key: ask.who.api_key.clone(),
        metric: ask.metric.to_string(),
        source: SOURCE.to_string(),
    };
    let event = decision_event(verdict, &header, asked, ask.amount, now);
    let decision = Decision::of_event(&event, verdict.deciding.as_ref().map(|e| &e.policy), false);
    events.push(Event::Decision(event));
    (decision, header)
}

/// A request's decisions, one per metric, with the one that speaks for it. Denied, a metric that had room carries the
/// code of the denial (its reason, WITHIN_LIMIT, says it had room): a client reading any metric's `code` must never
/// read QUOTA_EXCEEDED where the request was only RATE_LIMITED.
fn decisions_of(mut decisions: Vec<Decision>) -> Decisions {
    let deciding = deciding_of(&decisions);
    let code = decisions[deciding].code;
    if code != Code::OK {
        decisions.iter_mut().filter(|d| !denies(d)).for_each(|d| d.code = code);
    }
    Decisions { decisions, deciding }
}

/// Whether a decision's reason is one that denies (not a metric denied only because another of its request did).
fn denies(d: &Decision) -> bool {
    !d.allowed() && matches!(d.reason, Reason::QUOTA_EXCEEDED | Reason::RATE_LIMITED | Reason::CONCURRENCY_LIMITED)
}

/// Which decision of a request of several metrics speaks for it: denied, the one that denied, by the precedence of
/// one metric's policies (`decide::decide`: an exhausted quota before an empty bucket, the longest wait first); allowed,
/// the one with the least room left for its limit, what `RateLimit-*` headers should warn of.
fn deciding_of(decisions: &[Decision]) -> usize {
    let quota = |d: &Decision| d.reason == Reason::QUOTA_EXCEEDED;
    let denied = decisions.iter().enumerate().filter(|(_, d)| denies(d));
    let first_denied = denied.max_by(|(_, a), (_, b)| {
        (quota(a), a.resets_at, a.retry_after_ms)
            .cmp(&(quota(b), b.resets_at, b.retry_after_ms))
            .then(std::cmp::Ordering::Greater)
    });
    if let Some((n, _)) = first_denied {
        return n;
    }
    // remaining / limit, compared as remaining_a * limit_b < remaining_b * limit_a.
    let room = |d: &Decision| match (d.remaining, d.limit) {
        (Some(remaining), Some(limit)) if limit > 0 => Some((i128::from(remaining), i128::from(limit))),
        _ => None,
    };
    let mut tightest: Option<(usize, (i128, i128))> = None;
    for (n, d) in decisions.iter().enumerate() {
        if let Some((r, l)) = room(d)
            && tightest.is_none_or(|(_, (tr, tl))| r * tl < tr * l)
        {
            tightest = Some((n, (r, l)));
        }
    }
    tightest.map_or(0, |(n, _)| n)
}

/// The asks of a request of several metrics, in metric order, each checked as a check's (contract §9.2); a fault of
/// one names `amounts` and the metric.
/// A reservation's time to live: more than 0, at most [`TTL_MS_MAX`].
fn validate_ttl(ttl_ms: i64) -> Result<(), HookError> {
    if ttl_ms <= 0 || ttl_ms > TTL_MS_MAX {
        let message = format!("{ttl_ms} is outside (0, {}]", TTL_MS_MAX);
        return Err(HookError::BadRequest { field: "ttl_ms", message });
    }
    Ok(())
}

/// The ask of each metric of a request of several, each valid, or the 400 naming `amounts` (and the metric).
fn validate_amounts<'a>(request: &'a Request, amounts: &'a BTreeMap<String, i64>) -> Result<Vec<Ask<'a>>, HookError> {
    if amounts.is_empty() || amounts.len() > AMOUNTS_MAX {
        let message = format!("names {} metrics; 1 to {} are accepted", amounts.len(), AMOUNTS_MAX);
        return Err(HookError::BadRequest { field: "amounts", message });
    }
    let asks: Vec<Ask<'_>> = amounts
        .iter()
        .map(|(metric, amount)| Ask::new(&request.who, metric, *amount).doing(request.operation))
        .collect();
    for ask in &asks {
        validate_ask(ask, &request.idempotency_key, request.request_id.as_deref()).map_err(|e| match e {
            HookError::BadRequest { field: field @ ("metric" | "amount"), message } => {
                HookError::BadRequest { field: "amounts", message: format!("{field} {:?}: {message}", ask.metric) }
            }
            other => other,
        })?;
    }
    Ok(asks)
}

/// Whether a repeated idempotency key comes with the request it was first used for (contract §9.1): the same tenant,
/// subject, metric and amount, and a reserve for a reservation's decision (an allowed one names its reservation).
/// Otherwise 409: the original answer would not answer this request, and deciding it afresh would give one key two
/// decisions.
fn same_request(original: &Decision, ask: &Ask<'_>, idempotency_key: &str, kind: Kind) -> Result<(), HookError> {
    let differs = |field: &'static str, first: String, now: String| HookError::IdempotencyKeyReused {
        field,
        message: format!(
            "idempotency_key {idempotency_key:?} was first used with {field} {first} (decision {}), this request has \
             {now}: nothing was decided; send a new request with a new key",
            original.decision_id
        ),
        decision_id: original.decision_id.clone(),
    };
    let (first, now) = (&original.who, ask.who);
    if first.tenant != now.tenant {
        return Err(differs("tenant", format!("{:?}", first.tenant), format!("{:?}", now.tenant)));
    }
    if first.subject != now.subject {
        return Err(differs("subject", format!("{:?}", first.subject), format!("{:?}", now.subject)));
    }
    if first.project != now.project {
        return Err(differs("project", format!("{:?}", first.project), format!("{:?}", now.project)));
    }
    if first.api_key != now.api_key {
        return Err(differs("api_key", format!("{:?}", first.api_key), format!("{:?}", now.api_key)));
    }
    if original.metric != ask.metric {
        return Err(differs("metric", format!("{:?}", original.metric), format!("{:?}", ask.metric)));
    }
    if original.amount != ask.amount {
        return Err(differs("amount", original.amount.to_string(), ask.amount.to_string()));
    }
    if original.amounts.len() > 1 {
        let first = format!("{:?}", original.amounts);
        return Err(differs("amounts", first, format!("only {:?} of {}", ask.metric, ask.amount)));
    }
    // A denied check and a denied reserve record the same decision; an allowed one says which it was.
    let was = match (original.allowed(), original.lease.is_some(), original.reservation_id.is_some()) {
        (true, true, _) => Some(Kind::Lease),
        (true, false, true) => Some(Kind::Reserve),
        (true, false, false) => Some(Kind::Check),
        (false, ..) => None,
    };
    match was {
        Some(was) if was != kind => {
            let name = |kind: Kind| match kind {
                Kind::Check => "a check",
                Kind::Reserve => "a reserve",
                Kind::Lease => "an acquire",
            };
            Err(differs("kind", name(was).to_string(), name(kind).to_string()))
        }
        _ => Ok(()),
    }
}

/// The 400 of a request that would take a sum past i64.
fn too_much(amount: i64, no_room: state::NoRoom) -> HookError {
    HookError::BadRequest {
        field: "amount",
        message: format!(
            "{amount} more would take {} past 2^63 - 1 (it is {} now): nothing was decided",
            no_room.what, no_room.now
        ),
    }
}

/// An ask the ledger can record (contract §9.2): a tenant (not the plan default's `*`), subject and metric of 1 to 128
/// bytes, an idempotency key and request id of at most 256 (the key not empty), none with a control character,
/// and an amount it accepts. Checked before anything is decided: the ledger refuses an event that breaks them, and
/// with it the whole group's append, every other caller's decision included.
fn validate_ask(ask: &Ask<'_>, idempotency_key: &str, request_id: Option<&str>) -> Result<(), HookError> {
    let invalid = |e: schemas::validate::Invalid| {
        let field = match &e {
            schemas::validate::Invalid::Empty { field }
            | schemas::validate::Invalid::TooLong { field, .. }
            | schemas::validate::Invalid::ControlCharacter { field, .. } => *field,
            _ => "request",
        };
        // The message names the field already ("tenant is 300 bytes long, ..."): said once, after it.
        let message = e.to_string();
        let message = message.strip_prefix(field).map_or(message.clone(), |m| m.trim_start().to_string());
        HookError::BadRequest { field, message }
    };
    schemas::validate::check_name("tenant", ask.tenant()).map_err(invalid)?;
    if ask.tenant().starts_with(rules::policy::PLAN_DEFAULT_TENANT) {
        let message = format!("{:?} names plan defaults or a plan's policies, not a tenant", ask.tenant());
        return Err(HookError::BadRequest { field: "tenant", message });
    }
    if let Some(subject) = &ask.who.subject {
        schemas::validate::check_name("subject", subject).map_err(invalid)?;
    }
    if let Some(project) = &ask.who.project {
        schemas::validate::check_name("project", project).map_err(invalid)?;
    }
    if let Some(api_key) = &ask.who.api_key {
        schemas::validate::check_name("api_key", api_key).map_err(invalid)?;
    }
    schemas::validate::check_name("metric", ask.metric).map_err(invalid)?;
    if idempotency_key.is_empty() {
        return Err(HookError::BadRequest { field: "idempotency_key", message: "is empty".into() });
    }
    schemas::validate::check_id("idempotency_key", idempotency_key).map_err(invalid)?;
    if let Some(request_id) = request_id {
        if request_id.is_empty() {
            return Err(HookError::BadRequest { field: "request_id", message: "is empty".into() });
        }
        schemas::validate::check_id("request_id", request_id).map_err(invalid)?;
    }
    check_amount(ask.amount)
}

/// A token's name the ledger accepts on a DecisionEvent (a name: 1 to 128 bytes, no control character). A server
/// checks the names of its token file when it reads it; checked again here, since a refused event would fail the
/// group's whole append.
fn validate_token_name(token_name: Option<&str>) -> Result<(), HookError> {
    match token_name {
        Some(name) => schemas::validate::check_name("token_name", name).map_err(|e| {
            let message = e.to_string();
            let message = message.strip_prefix("token_name ").map_or(message.clone(), String::from);
            HookError::BadRequest { field: "token_name", message }
        }),
        None => Ok(()),
    }
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

/// The DecisionEvent recording `verdict` of an ask of `amount`.
fn decision_event(verdict: &Verdict, header: &Header, asked: &Asked<'_>, amount: i64, now: Timestamp) -> DecisionEvent {
    let e = verdict.deciding.as_ref();
    let allowed = verdict.outcome == Outcome::ALLOWED;
    // Saturating: a SHADOW policy that would deny allows with its used_before above its limit, perhaps far above.
    let remaining = e.map(|e| {
        if allowed { e.limit.saturating_sub(e.used_before).saturating_sub(e.cost) } else { e.remaining_before() }
    });
    let retry_after_ms = match verdict.reason {
        // Until the denial lifts: a calendar window's end, a ROLLING one's wait for enough usage to age out.
        Reason::QUOTA_EXCEEDED => e.map(|e| ((e.lifts_at().micros() - now.micros()) / 1_000).max(1)),
        Reason::RATE_LIMITED | Reason::CONCURRENCY_LIMITED => e.and_then(|e| e.retry_after_ms),
        _ => None,
    };
    DecisionEvent {
        header: header.clone(),
        request_id: asked.request_id.to_string(),
        idempotency_key: asked.idempotency_key.to_string(),
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
        token_name: asked.token_name.map(String::from),
    }
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
