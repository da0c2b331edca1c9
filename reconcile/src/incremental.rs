//! A run that reads only what is new (contract §5 "What a run covers"). The nightly job reruns as of the same instant
//! after ingestion caught up with late events, and a clean rerun read the whole ledger again to find nothing. Every
//! concern of a run is a tenant's (its windows, periods, reservations and alerts; a plan default applies to each
//! tenant apart), so after a run whose plan was recorded, a run as of the same instant finds, for a tenant none of
//! whose entries came since, exactly what a rerun finds: nothing. It reads and judges the tenants touched since alone,
//! each through the index of a tenant's entries, and carries the others' reports. [`remember`] records where a run
//! got to (`reconcile_checkpoint`, one row); [`plan_incremental`] starts from it, or reads everything when it cannot
//! (the [`FullReason`]).
//!
//! What is judged whole each time, being small or not a tenant's own: policies, grants, period closes, recorded
//! adjustments and alerts, conflicting copies, deny rates, FAIL_OPEN decisions and the day's alerts.

use std::collections::{BTreeMap, BTreeSet};

use ledger::{Ledger, RunCheckpoint};
use schemas::Timestamp;
use serde::{Deserialize, Serialize};

use crate::after_close::after_close;
use crate::alerts::AlertSettings;
use crate::concern::ADJUSTMENT_SOURCE;
use crate::error::ReconcileError;
use crate::gauge::GaugeOverLimit;
use crate::inputs::TenantsOf;
use crate::plan::{Plan, PlanCounts, Progress, plan_from_with, plan_of_tenants};

/// The share of the tenants, in percent, that a run reads apart through the index of a tenant's entries; when more
/// were touched since the last run it reads everything in ledger order. A tenant read apart costs a lookup of its
/// entry and usage row per event where the full read steps through both tables in order: a few times the cost per
/// event, so past a few tenths of the ledger one read of everything is quicker.
pub const TENANTS_READ_APART_PERCENT: u64 = 20;

/// How a run reads the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// Every event (`--full`).
    Full,
    /// From the last run as of the same instant when it can: the tenants touched since read apart while they are at
    /// most `tenants_apart_percent` of the tenants known (default [`TENANTS_READ_APART_PERCENT`]), else every event.
    Since {
        /// The share of the tenants known, in percent.
        tenants_apart_percent: u64,
    },
}

impl Default for Reading {
    fn default() -> Reading {
        Reading::Since { tenants_apart_percent: TENANTS_READ_APART_PERCENT }
    }
}

/// What a run read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum Coverage {
    /// Every event of the ledger, and why.
    Full {
        /// Why the run could not start from the last one.
        reason: FullReason,
    },
    /// The tenants touched since the last run as of the same instant, which had read up to `since`; none when
    /// nothing came since.
    Incremental {
        /// The watermark the last run read up to (a set of shards: the sum of its shards').
        since: u64,
        /// The tenants read and judged again, by name.
        tenants: Vec<String>,
    },
}

/// Why a run read every event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FullReason {
    /// `--full`, or a plan computed over its inputs alone.
    Asked,
    /// No run recorded its plan yet (or the checkpoint cannot be read).
    NoCheckpoint,
    /// The last run that recorded its plan was as of another instant: what ended or expired differs.
    OtherAsOf,
    /// The last run alerted with another `--open-alert-after-s`.
    OtherSettings,
    /// Adjustments were recorded since by another writer (a close, a run stopped before its end).
    AdjustmentsSince,
    /// A period was closed since: what counted at the close changed.
    CloseSince,
    /// A plan default (tenant `*`) was recorded since: it applies to every tenant.
    PlanDefaultSince,
    /// More than [`TENANTS_READ_APART_PERCENT`] of the tenants (or the share asked) were touched since.
    ManyTenants,
}

/// What a run reports per tenant beside its adjustments, carried for the tenants the next run does not read.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Reports {
    /// Tenants known to the runs so far: the share [`TENANTS_READ_APART_PERCENT`] is of them.
    tenants: u64,
    leases_expired: BTreeMap<String, u64>,
    gauges_over_limit: Vec<GaugeOverLimit>,
}

/// Where a run starts.
enum Start {
    Full(FullReason),
    Tenants { checkpoint: RunCheckpoint, reports: Reports, tenants: BTreeSet<String> },
}

/// The plan of `reconcile --as-of as_of`, in one read snapshot: read as `reading` says, from the last run as of the same
/// instant when one recorded its plan, reading only the tenants touched since; else over every event
/// ([`crate::plan_with`]). Its adjustments, alerts and outcome are those of a full run; its counts say what this run
/// read, and its per-tenant reports are the full run's.
pub fn plan_incremental(
    ledger: &Ledger,
    as_of: Timestamp,
    settings: AlertSettings,
    reading: Reading,
    progress: &mut dyn FnMut(Progress),
) -> Result<Plan, ReconcileError> {
    let snapshot = ledger.read_snapshot()?;
    let mut plan = match start(ledger, as_of, settings, reading)? {
        Start::Full(reason) => {
            let mut plan = plan_from_with(ledger, as_of, settings, progress)?;
            plan.coverage = Coverage::Full { reason };
            plan
        }
        Start::Tenants { checkpoint, reports, tenants } => {
            let mut plan = if tenants.is_empty() {
                unchanged(ledger, as_of)?
            } else {
                plan_of_tenants(&TenantsOf { ledger, tenants: &tenants }, as_of, settings, &tenants, progress)?
            };
            carry(&mut plan.counts, reports, &tenants);
            plan.coverage =
                Coverage::Incremental { since: checkpoint.watermark, tenants: tenants.into_iter().collect() };
            plan
        }
    };
    plan.after_close = after_close(ledger)?;
    snapshot.finish()?;
    Ok(plan)
}

/// Records where `plan`'s run got to, once the plan is recorded (or had nothing to record): the next run as of the
/// same instant starts from it. Not after a dry run, nor after a failed apply: the ledger would not hold the plan.
pub fn remember(ledger: &mut Ledger, plan: &Plan, settings: AlertSettings) -> Result<(), ReconcileError> {
    let adjustments = plan.counts.adjustments_before + plan.adjustments.len() as u64;
    if ledger.adjustments_recorded()? != adjustments {
        // Not this run's state (another writer recorded adjustments since its plan): the next run reads everything.
        return Ok(());
    }
    let known = match &plan.coverage {
        Coverage::Full { .. } => 0,
        Coverage::Incremental { .. } => previous_reports(ledger)?.map_or(0, |r| r.tenants),
    };
    let reports = Reports {
        tenants: known.max(plan.counts.tenants_read),
        leases_expired: plan.counts.leases_expired.clone(),
        gauges_over_limit: plan.counts.gauges_over_limit.clone(),
    };
    let checkpoint = RunCheckpoint {
        as_of: plan.as_of,
        open_too_long_micros: settings.open_too_long_micros,
        watermark: plan.watermark,
        run_id: plan.run_id.clone(),
        adjustments,
        closes: ledger.period_closes()?.len() as u64,
        reports: serde_json::to_string(&reports).expect("reports serialize"),
    };
    ledger.record_run_checkpoint(&checkpoint)?;
    Ok(())
}

fn previous_reports(ledger: &Ledger) -> Result<Option<Reports>, ReconcileError> {
    Ok(ledger.run_checkpoint()?.and_then(|c| serde_json::from_str(&c.reports).ok()))
}

/// Whether a run as of `as_of` can start from the last one, and with which tenants.
fn start(
    ledger: &Ledger,
    as_of: Timestamp,
    settings: AlertSettings,
    reading: Reading,
) -> Result<Start, ReconcileError> {
    let Reading::Since { tenants_apart_percent } = reading else {
        return Ok(Start::Full(FullReason::Asked));
    };
    let Some(checkpoint) = ledger.run_checkpoint()? else {
        return Ok(Start::Full(FullReason::NoCheckpoint));
    };
    let Ok(reports) = serde_json::from_str::<Reports>(&checkpoint.reports) else {
        return Ok(Start::Full(FullReason::NoCheckpoint));
    };
    let reason = if checkpoint.as_of != as_of {
        Some(FullReason::OtherAsOf)
    } else if checkpoint.open_too_long_micros != settings.open_too_long_micros {
        Some(FullReason::OtherSettings)
    } else if ledger.adjustments_recorded()? != checkpoint.adjustments {
        Some(FullReason::AdjustmentsSince)
    } else if ledger.period_closes()?.len() as u64 != checkpoint.closes {
        Some(FullReason::CloseSince)
    } else {
        None
    };
    if let Some(reason) = reason {
        return Ok(Start::Full(reason));
    }
    let tenants: BTreeSet<String> = ledger
        .tenants_touched_after(checkpoint.watermark, &checkpoint.run_id, ADJUSTMENT_SOURCE)?
        .into_iter()
        .collect();
    // A plan default, or a named plan's policy (`*pro`): every tenant the plan covers is touched.
    if tenants.iter().any(|t| t.starts_with(rules::policy::PLAN_DEFAULT_TENANT)) {
        return Ok(Start::Full(FullReason::PlanDefaultSince));
    }
    if tenants.len() as u64 * 100 > reports.tenants.max(1) * tenants_apart_percent && tenants.len() > 1 {
        return Ok(Start::Full(FullReason::ManyTenants));
    }
    Ok(Start::Tenants { checkpoint, reports, tenants })
}

/// The plan when nothing came since the last run as of the same instant but its own adjustments and alerts: what a
/// rerun finds, nothing to adjust and no alert, with the counts read whole that cost a query each.
fn unchanged(ledger: &Ledger, as_of: Timestamp) -> Result<Plan, ReconcileError> {
    let watermark = ledger.watermark()?;
    let counts = PlanCounts {
        adjustments_before: ledger.adjustments_recorded()?,
        allowed_open: ledger.allowed_open(as_of)?,
        alerts: crate::PlanInputs::alerts_between(
            ledger,
            Timestamp(as_of.micros() - crate::plan::ALERTS_REPORTED_MICROS),
            as_of,
        )?,
        ..PlanCounts::default()
    };
    Ok(Plan {
        run_id: crate::plan::run_id(as_of, watermark),
        as_of,
        watermark,
        adjustments: Vec::new(),
        alerts: Vec::new(),
        counts,
        after_close: Vec::new(),
        coverage: Coverage::Full { reason: FullReason::Asked },
    })
}

/// The per-tenant reports of the tenants not read, as the last run left them, beside those of the tenants read.
fn carry(counts: &mut PlanCounts, reports: Reports, read: &BTreeSet<String>) {
    for (tenant, leases) in reports.leases_expired {
        if !read.contains(&tenant) {
            counts.leases_expired.insert(tenant, leases);
        }
    }
    let carried = reports.gauges_over_limit.into_iter().filter(|g| !read.contains(&g.tenant));
    counts.gauges_over_limit.extend(carried);
    counts.gauges_over_limit.sort_by(|a, b| a.order().cmp(&b.order()));
}
