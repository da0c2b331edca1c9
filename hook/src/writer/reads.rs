//! What the writer reads from the ledger: what other writers appended since (catch-up; the fold a fresh state starts
//! from is [`crate::load`]'s), a decision recorded before this process started (a repeated idempotency key), and
//! how the ledger judges a reservation the state does not hold open (why a close is refused, or the hook's own
//! close a retry answers again). Every query is the ledger's own.

use ledger::{Fold, Ledger, ReadError};
use rules::reservation::Facts;
use schemas::{Event, PolicyEvent, ReservationAction, Timestamp};

use crate::api::Decision;
use crate::api::{SOURCE, TenantScope};
use crate::ids;
use crate::load::fold_after;
use crate::state::State;

/// What the ledger holds under a key's decision id.
pub(super) enum Recorded {
    /// The decision this hook recorded for that tenant and key.
    Own(Box<Decision>),
    /// An event of another writer (a DecisionEvent another producer sent through ingest, of any tenant, or another
    /// type of event): never answered as the hook's decision.
    Foreign,
}

/// The decision recorded under `decision_id`, if any (an idempotency key seen before this process started): this
/// hook's, for `tenant` and `idempotency_key`, or another writer's event that took the id. `partition`: the writer's
/// shard's, which its reservation ids name.
pub(super) fn read_decision(
    ledger: &Ledger,
    state: &State,
    partition: Option<u32>,
    decision_id: &str,
    tenant: &str,
    idempotency_key: &str,
) -> Result<Option<Recorded>, ReadError> {
    let Some(event) = ledger.recorded_event(decision_id)? else { return Ok(None) };
    let event = match event {
        Event::Decision(d)
            if d.header.source == SOURCE && d.header.tenant == tenant && d.idempotency_key == idempotency_key =>
        {
            d
        }
        _ => return Ok(Some(Recorded::Foreign)),
    };
    // The version decided, the tenant's own copy before the plan's (a policy_id may be both), else any version of it.
    let deciding = event.policy_id.as_ref().and_then(|id| {
        let policies = state.policies.policies();
        let decided = |p: &&PolicyEvent| &p.policy_id == id && Some(p.version) == event.policy_version;
        let own = policies.iter().rev().filter(decided).find(|p| p.header.tenant == event.header.tenant);
        own.or_else(|| policies.iter().rev().find(decided))
            .or_else(|| policies.iter().rev().find(|p| &p.policy_id == id))
    });
    let mut decision = Decision::of_event(&event, deciding, true);
    decision.amounts = amounts_of_request(ledger, &event, decision_id)?;
    if decision.allowed() && decision_id.starts_with(ids::DECISION_PREFIX) {
        let reservation_id = ids::reservation_id(&decision_id[ids::DECISION_PREFIX.len()..], partition);
        if ledger.has_reservation_events(&reservation_id)? {
            // A lease's acquire answers its lease as granted: the token and first expiry its RESERVE recorded.
            if let Some(Event::Reservation(reserve)) = ledger.recorded_event(&ids::reserve_event_id(&reservation_id))?
                && let (Some(fencing_token), Some(expires_at)) = (reserve.fencing_token, reserve.expires_at)
            {
                let lease_id = reservation_id.clone();
                decision.lease = Some(crate::api::Lease { lease_id, fencing_token, expires_at });
            }
            decision.reservation_id = Some(reservation_id);
        }
    }
    Ok(Some(Recorded::Own(Box::new(decision))))
}

/// The amounts of every metric of the request of several metrics the hook's decision `decision` (recorded as
/// `decision_id`) is one of, read from the decisions sharing its request_id, tenant and key whose ids derive from the
/// same key ([`ids::metric_hash`]); empty for a request of one metric.
fn amounts_of_request(
    ledger: &Ledger,
    decision: &schemas::DecisionEvent,
    decision_id: &str,
) -> Result<std::collections::BTreeMap<String, i64>, ReadError> {
    let key_id = decision_id.get(..ids::DECISION_PREFIX.len() + 32).unwrap_or(decision_id);
    let siblings: std::collections::BTreeMap<String, i64> = ledger
        .decisions_of_request(&decision.request_id, ledger.watermark()?)?
        .into_iter()
        .filter(|d| d.header.source == SOURCE && d.header.tenant == decision.header.tenant)
        .filter(|d| d.idempotency_key == decision.idempotency_key && d.header.event_id.starts_with(key_id))
        .map(|d| (d.header.metric, d.amount))
        .collect();
    Ok(if siblings.len() > 1 { siblings } else { Default::default() })
}

/// How the ledger judges a reservation that the state does not hold open for a caller.
pub(super) enum Judged {
    /// No RESERVE of that id is recorded.
    NotFound,
    /// Only other tenants' reservations have that id.
    Forbidden,
    /// The caller's reservation of that id expired before any valid close.
    Expired(Timestamp),
    /// The caller's reservation of that id was closed.
    Closed {
        /// Its tenant.
        tenant: String,
        /// What its RESERVE held.
        reserved: i64,
        /// The valid close: its action and amount, and when it happened.
        action: ReservationAction,
        amount: i64,
        occurred_at: Timestamp,
        /// A lease's fencing token.
        fencing_token: Option<i64>,
    },
}

/// How the ledger judges a reservation the state does not hold open (for the caller).
pub(super) fn judge_from_ledger(
    ledger: &Ledger,
    reservation_id: &str,
    tenants: &TenantScope,
) -> Result<Judged, ReadError> {
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
        return Ok(Judged::NotFound);
    }
    let Some(tenant) = reserved.into_iter().find(|t| tenants.covers(t)) else {
        return Ok(Judged::Forbidden);
    };
    let events: Vec<(u64, &Facts)> =
        rows.iter().filter(|row| row.tenant == tenant).map(|row| (row.seq, &row.facts)).collect();
    let verdict = rules::reservation::judge(&events, Timestamp(i64::MAX));
    let facts = |seq: u64| events.iter().find(|(s, _)| *s == seq).map(|(_, f)| *f);
    let reserve = verdict.reserve.and_then(facts).expect("a tenant with a RESERVE has one in its verdict");
    Ok(match verdict.close {
        Some((seq, action, amount)) => Judged::Closed {
            tenant: tenant.to_string(),
            reserved: reserve.amount,
            action,
            amount,
            occurred_at: facts(seq).expect("the close is one of the events judged").occurred_at,
            fencing_token: verdict.fencing_token,
        },
        // A lease's as its renewals moved it.
        None => Judged::Expired(verdict.expires_at.unwrap_or(Timestamp(i64::MIN))),
    })
}

/// The close this hook recorded of `tenant`'s reservation `reservation_id`, if the valid close the ledger judged
/// (`action`, `amount`, at `occurred_at`) is it: the event_id a retry of that close is answered with.
pub(super) fn own_close(
    ledger: &Ledger,
    tenant: &str,
    reservation_id: &str,
    (action, amount, occurred_at): (ReservationAction, i64, Timestamp),
) -> Result<Option<String>, ReadError> {
    // The hook's close of its own reservation, or of another enforcer's (or of its own after a restart): two ids.
    for own in [true, false] {
        let event_id = ids::close_event_id(tenant, reservation_id, action, own);
        if let Some(Event::Reservation(r)) = ledger.recorded_event(&event_id)?
            && r.header.source == SOURCE
            && r.header.tenant == tenant
            && r.reservation_id == reservation_id
            && (r.action, r.amount, r.header.occurred_at) == (action, amount, occurred_at)
        {
            return Ok(Some(event_id));
        }
    }
    Ok(None)
}

/// Folds the entries other writers appended after the state's watermark (`own` are this writer's, already
/// applied, in ascending order), and moves the watermark to the last entry.
pub(super) fn catch_up(ledger: &Ledger, state: &mut State, now: Timestamp, own: &[u64]) -> Result<(), ReadError> {
    fold_after(ledger, state, now, own, Fold::After)
}
