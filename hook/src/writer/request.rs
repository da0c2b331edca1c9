//! The request rules of the writer: each request of a group validated, replayed (a repeated idempotency key answers
//! its original decision) or decided against the state as the group's earlier requests left it, and the events
//! that record it built: a DecisionEvent, and when allowed the UsageEvent or the RESERVE; a close checked against
//! the holds it names and recorded as a COMMIT or RELEASE.

use schemas::*;

use super::Writer;
use super::reads::{read_decision, refusal_from_ledger};
use crate::api::*;
use crate::decide::{self, Ask, Evaluated, Verdict};
use crate::error::HookError;
use crate::state::{self, Hold};
use crate::{SOURCE, TenantScope, ids};

/// A valid ask: new (with its idempotency key's hash), or a repeated key (with the original decision).
enum Admitted {
    New { hash: String },
    Replayed(Box<Decision>),
}

/// The open reservation a close applies to, chosen among the holds of its id.
struct Chosen {
    hold: Hold,
    /// Whether it is this hook's own (its close's event_id says so).
    own: bool,
}

impl Writer {
    /// The decision already made for `decision_id`: one of the last ones, or one the ledger holds.
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

    /// `check`: decides the ask and, when allowed, consumes it (a UsageEvent).
    pub(super) fn check(
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

    /// `reserve`: decides the ask and, when allowed, holds it until `ttl_ms` from now (a RESERVE).
    pub(super) fn reserve(
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
        let decision = Decision::of_event(&event, verdict.deciding.as_ref().map(|e| e.policy.scope), false);
        events.push(Event::Decision(event));
        (decision, header)
    }

    /// `commit` or `release` of a reservation: the hold it closes, or why it is refused.
    pub(super) fn close(
        &mut self,
        reservation_id: &str,
        action: ReservationAction,
        amount: i64,
        tenants: &TenantScope,
        now: Timestamp,
        events: &mut Vec<Event>,
    ) -> Result<Result<Closed, Refusal>, HookError> {
        check_amount(amount)?;
        let Some(Chosen { hold, own }) = self.choose_hold(reservation_id, tenants)? else {
            return self.refuse_close(reservation_id, tenants, events);
        };
        let id = reservation_id.to_string();
        if hold.expires_at < now {
            return Ok(Err(Refusal::Expired { reservation_id: id, expires_at: hold.expires_at }));
        }
        let amount = if action == ReservationAction::COMMIT { amount } else { 0 };
        let header = Header {
            event_id: ids::close_event_id(&hold.tenant, reservation_id, action, own),
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

    /// The open hold of `reservation_id` a close by a caller covering `tenants` applies to, if any.
    fn choose_hold(&self, reservation_id: &str, tenants: &TenantScope) -> Result<Option<Chosen>, HookError> {
        let holds = self.state.holds_of(reservation_id);
        // Other enforcers' reservations of two tenants may share an id, and a close names no tenant: of those the
        // caller may close, this hook's own, or the only one; never a guess.
        let covered: Vec<&Hold> = holds.iter().filter(|h| tenants.covers(&h.tenant)).collect();
        let own: Vec<&Hold> =
            covered.iter().copied().filter(|h| self.state.is_own(&h.tenant, reservation_id)).collect();
        match (own.as_slice(), covered.as_slice()) {
            ([hold], _) => Ok(Some(Chosen { hold: (*hold).clone(), own: true })),
            ([], [hold]) => Ok(Some(Chosen { hold: (*hold).clone(), own: false })),
            (_, []) => Ok(None),
            _ => {
                let tenants: Vec<&str> = covered.iter().map(|h| h.tenant.as_str()).collect();
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

    /// Why a close of a reservation the caller holds no open hold of is refused.
    fn refuse_close(
        &self,
        reservation_id: &str,
        tenants: &TenantScope,
        events: &[Event],
    ) -> Result<Result<Closed, Refusal>, HookError> {
        let id = reservation_id.to_string();
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
        let others =
            !self.state.holds_of(reservation_id).is_empty() || events.iter().any(|e| is_close_of(e, reservation_id));
        Ok(match refusal {
            Err(Refusal::NotFound { .. }) if others => Err(Refusal::Forbidden { reservation_id: id }),
            refusal => refusal,
        })
    }
}

/// An ask the ledger can record: a tenant (not the plan default's `*`), a metric, an idempotency key, an amount it
/// accepts.
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

/// The DecisionEvent recording `verdict` of an ask of `amount`.
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
