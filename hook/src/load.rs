//! The state a fresh process starts from, read from the ledger: the fold of its recent entries, the last level of
//! each gauge, the greatest fencing tokens. A starting writer loads it, and so does a quota read of a ledger no hook
//! serves ([`crate::quotas::from_ledger`]); the writer's catch-up folds what other writers appended the same way. A
//! start begins from the ledger's snapshot of the state when it is valid ([`crate::snapshot`]), and folds only the
//! entries after it.

use std::collections::HashMap;

use ledger::{Fold, Ledger, ReadError};
use schemas::{Event, EventType, PolicyEvent, ReservationEvent, Timestamp, Tz};

use crate::error::StartError;
use crate::snapshot::{self, Unused};
use crate::state::{Key, State};

/// How far back usage is folded: a month and a day covers every window that can contain now. Reservations are
/// folded by when they expire (see [`Fold::AtStart`]).
const STARTUP_HORIZON_MICROS: i64 = 32 * 24 * 3_600 * 1_000_000;

/// Folds the entries after the state's watermark that `fold` reads, skipping `own`, up to the tip read first.
pub(crate) fn fold_after(
    ledger: &Ledger,
    state: &mut State,
    now: Timestamp,
    own: &[u64],
    fold: Fold,
) -> Result<(), ReadError> {
    fold_after_with(ledger, state, now, own, fold, |_, _| {})
}

/// [`fold_after`], calling `before` with each event just before it is folded.
fn fold_after_with(
    ledger: &Ledger,
    state: &mut State,
    now: Timestamp,
    own: &[u64],
    fold: Fold,
    mut before: impl FnMut(&mut State, &Event),
) -> Result<(), ReadError> {
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
        let event = entry.event()?;
        before(state, &event);
        state.fold(entry.seq, &event, now);
        Ok(())
    })?;
    state.watermark = tip;
    Ok(())
}

/// Notes in `state` the last level of each of its gauge metrics per tenant, however long ago it was reported: a
/// gauge keeps its level until the next report, which may come monthly (the fold reads the last month and a day).
fn load_levels(ledger: &Ledger, mut state: State) -> Result<State, ReadError> {
    let metrics = state.gauge_metrics().cloned().collect::<Vec<_>>();
    for metric in metrics {
        for (tenant, at, level) in ledger.latest_levels(&metric)? {
            state.note_level(&tenant, &metric, at, level);
        }
    }
    Ok(state)
}

/// Folds the entries after a snapshot's watermark into its state. A reservation an entry after it goes on with, that
/// the snapshot does not keep (forgotten once it stopped mattering, or of events its fold did not read), is put back
/// first from its events before the watermark, as a fold of the whole ledger judges them together.
fn fold_tail(ledger: &Ledger, state: &mut State, now: Timestamp) -> Result<(), ReadError> {
    let horizon = Timestamp(now.micros() - STARTUP_HORIZON_MICROS);
    state.unprune();
    let mut earlier: HashMap<Key, Vec<(u64, ReservationEvent)>> = HashMap::new();
    ledger.for_each_reservation_entry_before_tail(state.watermark, horizon, |entry| {
        if let Event::Reservation(r) = entry.event()? {
            let key = (r.header.tenant.clone(), r.reservation_id.clone());
            if !state.keeps_reservation(&key) {
                earlier.entry(key).or_default().push((entry.seq, r));
            }
        }
        Ok(())
    })?;
    fold_after_with(ledger, state, now, &[], Fold::AtStart, |state, event| {
        if let Event::Reservation(r) = event
            && let Some(events) = earlier.remove(&(r.header.tenant.clone(), r.reservation_id.clone()))
        {
            state.restore_reservation(&(r.header.tenant.clone(), r.reservation_id.clone()), &events, now);
        }
    })
}

/// An empty state counting what `policies` (every recorded policy) ask counted.
fn counting_all(policies: &[PolicyEvent]) -> State {
    let zones: Vec<Tz> = policies.iter().map(PolicyEvent::zone).collect();
    let gauges = policies.iter().filter(|p| p.is_gauge()).map(|p| p.header.metric.clone());
    let scopes = policies.iter().map(|p| p.scope);
    State::with_zones(zones, gauges).counting_scopes(scopes).keeping_rolling(policies)
}

/// The state of a fresh process: the ledger's snapshot of the state when it is valid (`from_snapshot` and
/// [`crate::snapshot`]), else nothing, counting the windows of every time zone a recorded policy names (read first:
/// usage folded before its policy counts in that policy's windows too); then the fold of the entries after it.
pub(crate) fn load(ledger: &Ledger, now: Timestamp, from_snapshot: bool) -> Result<State, StartError> {
    let started = std::time::Instant::now();
    let fresh = counting_all(&ledger.policies()?).knowing_meters(ledger.meters()?);
    let restored = match from_snapshot {
        true => snapshot::restore(ledger, &fresh.counting(), now)?,
        false => Err(Unused::Disabled),
    };
    let (state, snapshot_watermark) = match restored {
        Ok(state) => {
            let watermark = state.watermark;
            (state, Some(watermark))
        }
        Err(reason) => {
            tracing::info!(%reason, "hook: no snapshot of the state used; folding the ledger's last month");
            (fresh, None)
        }
    };
    let mut state = fold_from(ledger, state, now, snapshot_watermark.is_some())?;
    // Leases too old for the fold: the next one's token must still exceed theirs.
    for (tenant, metric, token) in ledger.greatest_fencing_tokens()? {
        state.note_fencing_token(&tenant, &metric, token);
    }
    // A snapshot's holds that expired since it was taken are closed, as a fold never opens them; then the first
    // prune drops most windows the fold read (74 ms on a 17-million-event ledger), and the counters those holds
    // left empty: here, not in the first group's answers.
    state.expire(now);
    state.prune_at_start(now);
    if let Some(snapshot_watermark) = snapshot_watermark {
        tracing::info!(
            snapshot_watermark,
            watermark = state.watermark,
            entries_after = state.watermark.saturating_sub(snapshot_watermark),
            millis = started.elapsed().as_millis() as u64,
            "hook: started from the snapshot of the state and the entries after it"
        );
    }
    Ok(state)
}

/// `state` (fresh, or a snapshot's) with the last gauge levels and the entries after its watermark folded; folded
/// anew from nothing when a policy among those entries asks counted what it did not count.
fn fold_from(ledger: &Ledger, state: State, now: Timestamp, from_snapshot: bool) -> Result<State, StartError> {
    let mut state = load_levels(ledger, state)?;
    match from_snapshot {
        true => fold_tail(ledger, &mut state, now)?,
        false => fold_after(ledger, &mut state, now, &[], Fold::AtStart)?,
    }
    if state.is_missing_zones() {
        // A policy naming another zone, making another metric a gauge or of a scope not counted yet was recorded
        // between the two reads: once more, knowing it.
        let gauges = state.gauge_metrics().cloned().collect::<Vec<_>>();
        let fresh = State::with_zones(state.zones().to_vec(), gauges)
            .counting_scopes(state.scopes_counted())
            .keeping_rolling(state.policies.policies())
            .knowing_meters(state.meters().to_vec());
        state = load_levels(ledger, fresh)?;
        fold_after(ledger, &mut state, now, &[], Fold::AtStart)?;
    }
    Ok(state)
}
