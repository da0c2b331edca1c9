//! The state a fresh process starts from, read from the ledger: the fold of its recent entries, the last level of
//! each gauge, the greatest fencing tokens. A starting writer loads it, and so does a quota read of a ledger no hook
//! serves ([`crate::quotas::from_ledger`]); the writer's catch-up folds what other writers appended the same way.

use ledger::{Fold, Ledger, ReadError};
use schemas::{EventType, PolicyEvent, Timestamp, Tz};

use crate::error::StartError;
use crate::state::State;

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

/// The state of a fresh process: the fold of the ledger's recent entries, counting the windows of every time zone
/// a recorded policy names (read first: usage folded before its policy counts in that policy's windows too).
pub(crate) fn load(ledger: &Ledger, now: Timestamp) -> Result<State, StartError> {
    let policies = ledger.policies()?;
    let zones: Vec<Tz> = policies.iter().map(PolicyEvent::zone).collect();
    let gauges = policies.iter().filter(|p| p.is_gauge()).map(|p| p.header.metric.clone());
    let scopes = policies.iter().map(|p| p.scope);
    let fresh = State::with_zones(zones, gauges).counting_scopes(scopes).keeping_rolling(&policies);
    let mut state = load_levels(ledger, fresh)?;
    fold_after(ledger, &mut state, now, &[], Fold::AtStart)?;
    if state.is_missing_zones() {
        // A policy naming another zone, making another metric a gauge or of a scope not counted yet was recorded
        // between the two reads: once more, knowing it.
        let gauges = state.gauge_metrics().cloned().collect::<Vec<_>>();
        let fresh = State::with_zones(state.zones().to_vec(), gauges)
            .counting_scopes(state.scopes_counted())
            .keeping_rolling(state.policies.policies());
        state = load_levels(ledger, fresh)?;
        fold_after(ledger, &mut state, now, &[], Fold::AtStart)?;
    }
    // Leases too old for the fold: the next one's token must still exceed theirs.
    for (tenant, metric, token) in ledger.greatest_fencing_tokens()? {
        state.note_fencing_token(&tenant, &metric, token);
    }
    // The first prune drops most windows the fold read (74 ms on a 17-million-event ledger): here, not in the
    // first group's answers.
    state.prune(now);
    Ok(state)
}
