//! What the writer reads from the ledger: the fold of recent entries a fresh state starts from, what other writers
//! appended since (catch-up), a decision recorded before this process started (a repeated idempotency key), and
//! why a close of a reservation the state does not hold open is refused. Every query is the ledger's own.

use ledger::{Fold, Ledger, ReadError};
use rules::reservation::Facts;
use schemas::{Event, EventType, ReservationAction, Timestamp};

use crate::api::{Closed, Decision, Refusal};
use crate::state::State;
use crate::{StartError, TenantScope, ids};

/// How far back usage is folded: a month and a day covers every window that can contain now. Reservations are
/// folded by when they expire (see [`Fold::AtStart`]).
const STARTUP_HORIZON_MICROS: i64 = 32 * 24 * 3_600 * 1_000_000;

/// The decision recorded under `decision_id`, if any (an idempotency key seen before this process started).
pub(super) fn read_decision(ledger: &Ledger, state: &State, decision_id: &str) -> Result<Option<Decision>, ReadError> {
    let Some(Event::Decision(event)) = ledger.recorded_event(decision_id)? else { return Ok(None) };
    let scope = event
        .policy_id
        .as_ref()
        .and_then(|id| state.policies.policies().iter().find(|p| &p.policy_id == id).map(|p| p.scope));
    let mut decision = Decision::of_event(&event, scope, true);
    if decision.allowed() && decision_id.starts_with(ids::DECISION_PREFIX) {
        let reservation_id = ids::reservation_id(&decision_id[ids::DECISION_PREFIX.len()..]);
        if ledger.has_reservation_events(&reservation_id)? {
            decision.reservation_id = Some(reservation_id);
        }
    }
    Ok(Some(decision))
}

/// Why a close of a reservation the state does not hold open (for the caller) is refused, from the ledger.
pub(super) fn refusal_from_ledger(
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
pub(super) fn catch_up(ledger: &Ledger, state: &mut State, now: Timestamp, own: &[u64]) -> Result<(), ReadError> {
    fold_after(ledger, state, now, own, Fold::After)
}

/// Folds the entries after the state's watermark that `fold` reads, skipping `own`, up to the tip read first.
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
pub(super) fn load(ledger: &Ledger, now: Timestamp) -> Result<State, StartError> {
    let mut state = State::default();
    fold_after(ledger, &mut state, now, &[], Fold::AtStart)?;
    // The first prune drops most windows the fold read (74 ms on a 17-million-event ledger): here, not in the
    // first group's answers.
    state.prune(now);
    Ok(state)
}
