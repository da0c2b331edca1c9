//! Recording a plan: its adjustments in transactions of at most [`ADJUSTMENTS_PER_TRANSACTION`], each also put
//! into the outbox for `quota.adjustments`; then its alerts, put into the outbox for `quota.alerts`.

use ledger::{AppendOutcome, AppendReport, Batch, Incoming, Ledger, Origin};
use schemas::Event;

use crate::error::ReconcileError;
use crate::plan::{ADJUSTMENT_SOURCE, Plan};

/// Adjustments appended per transaction. Other writers of the ledger wait for one transaction at most: the hook
/// (`serve`) fails a group of decisions after waiting 10 s for the write lock, and a run of 485,590 adjustments in
/// one transaction held it about 50 s (a debug build). A run stopped between two
/// transactions leaves what it recorded, all of it right: each adjustment is a delta against what was recorded
/// before it, and a rerun with the same `--as-of` writes exactly the rest, under the same ids.
pub const ADJUSTMENTS_PER_TRANSACTION: usize = 10_000;

/// Appends the plan's adjustments, [`ADJUSTMENTS_PER_TRANSACTION`] at a time, then its alerts. Refuses a plan computed before another
/// run recorded adjustments (its deltas would count twice).
pub fn apply(ledger: &mut Ledger, plan: &Plan) -> Result<AppendReport, ReconcileError> {
    // Before the write: ids are unique and every adjustment belongs to this run. Two concerns that are one for the
    // delta rule (two windows told apart by nothing they record) would keep rewriting each other: refused, exit 2,
    // naming the id, rather than a panic.
    let mut ids: Vec<&str> = plan.adjustments.iter().map(|a| a.adjustment_id.as_str()).collect();
    ids.sort_unstable();
    if let Some(twice) = ids.windows(2).find(|pair| pair[0] == pair[1]) {
        return Err(ReconcileError::SameAdjustment { adjustment_id: twice[0].to_string() });
    }
    assert!(plan.adjustments.iter().all(|a| a.run_id == plan.run_id), "every adjustment belongs to the run");
    let found = ledger.adjustments_recorded()?;
    if found != plan.counts.adjustments_before {
        return Err(ReconcileError::Stale { planned: plan.counts.adjustments_before, found });
    }
    let mut report = AppendReport { watermark: ledger.status()?.watermark, ..AppendReport::default() };
    for (n, chunk) in plan.adjustments.chunks(ADJUSTMENTS_PER_TRANSACTION).enumerate() {
        if n > 0 {
            std::thread::sleep(ledger::STEP_PAUSE);
        }
        let recorded = report.outcomes.len();
        let events = chunk.iter().map(|a| Event::Adjustment(a.clone()));
        append_outboxed(ledger, events, &mut report).map_err(|source| ReconcileError::Append {
            recorded,
            planned: plan.adjustments.len(),
            source,
        })?;
    }
    // After: every adjustment is a new entry (a deterministic id met again would be a bug in the delta rule).
    assert!(
        report.outcomes.iter().all(|o| matches!(o, AppendOutcome::Recorded { .. })),
        "every planned adjustment is new to the ledger: {:?}",
        report.outcomes
    );
    assert_eq!(ledger.adjustments_recorded()?, found + plan.adjustments.len() as u64, "the ledger holds the plan");
    // The alerts after the adjustments: an alert a hook recorded since the plan read the ledger is met as a copy of
    // its id (recorded or conflicting, the ledger keeps the first), never counted twice.
    for chunk in plan.alerts.chunks(ADJUSTMENTS_PER_TRANSACTION) {
        let events = chunk.iter().map(|a| Event::Alert(a.clone()));
        append_outboxed(ledger, events, &mut report).map_err(|source| ReconcileError::Append {
            recorded: plan.adjustments.len(),
            planned: plan.adjustments.len(),
            source,
        })?;
    }
    Ok(report)
}

/// Appends `events` as reconcile's, each into the outbox, in one transaction, adding what happened to `report`.
fn append_outboxed(
    ledger: &mut Ledger,
    events: impl Iterator<Item = Event>,
    report: &mut AppendReport,
) -> Result<(), ledger::AppendError> {
    let events = events
        .map(|event| Incoming { event, origin: Origin::Local { name: ADJUSTMENT_SOURCE.to_string() }, raw: None })
        .collect();
    let appended = ledger.append(&Batch { events, outbox: true, ..Batch::default() })?;
    report.outcomes.extend(appended.outcomes);
    report.quarantined += appended.quarantined;
    report.watermark = appended.watermark;
    Ok(())
}
