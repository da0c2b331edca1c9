//! Closing a billing period (contract §5, §9.5): the refusals (a period not over, a billing cycle it bills not ended),
//! the late usage of the months closed before carried into this close, the commit totals brought up to date in short
//! steps, then the close and its export stored in one transaction. A closed period is re-exported from those rows,
//! byte for byte, whatever arrived since.

use std::collections::BTreeSet;

use ledger::{Ledger, Period, ProcessLock};
use reports::billing::{self, UsageSource};
use reports::export::BillingExport;
use schemas::{AdjustmentEvent, AdjustmentKind, Timestamp};

use crate::{Context, Error, Result, refuse};

/// What closing a period did.
#[derive(Debug)]
pub struct Closed {
    /// The period's stored export.
    pub export: BillingExport,
    /// What was closed, in words: the watermark, when, and what the ledger's first close closed with it.
    pub note: String,
    /// The LATE_USAGE adjustments this close recorded for the months closed before, to carry.
    pub late_usage_recorded: usize,
}

/// Closes `period` (or finds it closed) and answers its stored export.
pub fn close(ledger: &mut Ledger, period: Period) -> Result<Closed> {
    let first = ledger.period_closes()?.is_empty();
    let mut late_usage_recorded = 0;
    if ledger.period_export(period)?.is_none() {
        // A close refused records nothing, the late usage included.
        check(ledger, period)?;
        late_usage_recorded = record_late_usage(ledger, period)?;
        // Most of the commit totals' catch-up before the close's own transaction, in short ones: the hook and ingest
        // wait for the close meanwhile.
        ledger.catch_up_commit_totals_in_steps()?;
    }
    let closed = ledger
        .close_period_with_export(period, |ledger, snapshot| {
            Ok(billing::compute(ledger, period, snapshot, UsageSource::Totals)?)
        })
        .with_context(|| format!("cannot close period {period}"))?;
    let export = reports::export::stored_or_recomputed(ledger, &closed)?;
    let mut note = format!(
        "period {period} closed at watermark {} ({}){}",
        closed.close.watermark,
        closed.close.closed_at,
        reports::export::with_first_close(ledger, period)?
    );
    // The ledger's first close closes every month before it (contract §9.5): say which of them held consumption.
    let earlier = if first { ledger.periods_with_consumption_before(period)? } else { Vec::new() };
    if !earlier.is_empty() {
        let months: Vec<String> = earlier.iter().map(Period::to_string).collect();
        note.push_str(&format!(
            " (the ledger's first close, which closed every month before it too: {} with consumption)",
            months.join(", ")
        ));
    }
    Ok(Closed { export, note, late_usage_recorded })
}

/// Refuses a close of `period` (open in `ledger`) that [`close`] would refuse now: the period not over, out of order
/// with the closes before it, or a billing cycle it bills not ended. Records nothing: it is the first phase of a close
/// of a set of shards, all or none ([`crate::billing`]), as it is the first step of [`close`].
pub fn check(ledger: &Ledger, period: Period) -> Result<()> {
    ledger.refuse_close(period).with_context(|| format!("cannot close period {period}"))?;
    refuse_unended_cycles(ledger, period)
}

/// Refuses to close `period` while a billing cycle it bills (PolicyEvent v11) has not ended: a cycle ending at local
/// midnight on the 1st in New York ends 4 or 5 hours after the UTC month, and its bill must hold all of it.
fn refuse_unended_cycles(ledger: &Ledger, period: Period) -> Result<()> {
    let policies = ledger.policies()?;
    let keys: BTreeSet<(String, String)> = policies
        .iter()
        .filter(|p| p.window == schemas::Window::BILLING_CYCLE)
        .map(|p| (p.header.tenant.clone(), p.header.metric.clone()))
        .collect();
    if let Some((tenant, policy_id, ends)) = billing::unended_cycle(&policies, keys, period, Timestamp::now()) {
        refuse!(
            "cannot close period {period}: the billing cycle of policy {policy_id} (tenant {tenant}) it bills ends at \
             {ends}; a period closes once every cycle ending in it has ended"
        );
    }
    Ok(())
}

/// Records the late usage of the months closed before, as `reconcile` would (its LATE_USAGE adjustments, the same
/// concerns and ids, judged without the rest of a run: [`reconcile::late_usage`]): a close carries every late event recorded before it, whether or not a reconcile ran since
/// it arrived (not only those a reconcile had recorded, leaving the rest to wait for the next close). The reconcile
/// lock keeps it from running beside a reconcile, whose plan it would make stale. Answers how many it recorded.
fn record_late_usage(ledger: &mut Ledger, period: Period) -> Result<usize> {
    // A first close has no closed month before it whose usage could be late.
    if ledger.period_closes()?.is_empty() {
        return Ok(0);
    }
    let _lock = ProcessLock::acquire(ledger.path(), "reconcile").map_err(|error| match error {
        held @ ledger::LockError::Held { .. } => Error::caused(
            "--final records late usage as reconcile does, under its lock, which another process holds (a reconcile, \
             or another --final): close after it ends",
            held,
        ),
        other => other.into(),
    })?;
    let plan = reconcile::late_usage(ledger, Timestamp::now()).context("cannot judge late usage")?;
    // The run says it was the close's: `close-2026-10-reconcile-<as_of>-w<watermark>`.
    let run_id = format!("close-{period}-{}", plan.run_id);
    let late: Vec<_> = plan
        .adjustments
        .into_iter()
        .filter(|a| a.kind == AdjustmentKind::LATE_USAGE)
        .map(|a| AdjustmentEvent { run_id: run_id.clone(), ..a })
        .collect();
    if late.is_empty() {
        return Ok(0);
    }
    let recorded = late.len();
    // The close records late usage only: the alerts are the nightly run's.
    let plan = reconcile::Plan { run_id, adjustments: late, alerts: Vec::new(), ..plan };
    reconcile::apply(ledger, &plan).context("cannot record late usage")?;
    Ok(recorded)
}
