//! The billing export of a month (contract §5 "Billing export", contract §7 columns): one row per (tenant, metric),
//! or per billing cycle of it that the month bills (PolicyEvent v11, [`cycles_billed`]).
//!
//! Reads, all at one watermark, through the ledger's typed reads: counted usage of the period (the totals every
//! append keeps when the export is computed at the current watermark, a scan of the usage events otherwise), valid
//! COMMITs (the commit totals the ledger keeps, or every reservation judged by `rules::reservation::judge`),
//! policies and grants, and the LATE_USAGE adjustments carried. Then [`rows`], a pure function, applies the rules
//! with `rules`' own `applicable`, `effective_limit` and `excess`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use chrono::Datelike;
use ledger::{CloseSnapshot, Ledger, MetricTotal, Period, PeriodClose, PeriodExportRow};
use rules::overshoot;
use rules::policy::PolicyIndex;
use schemas::*;

use crate::error::ReportError;

/// (tenant, metric).
pub type Key = (String, String);

/// Everything the rows of one period's export are computed from.
#[derive(Debug, Clone, Default)]
pub struct BillingInputs {
    /// Counted usage with occurred_at in the period.
    pub usage: BTreeMap<Key, i64>,
    /// Valid COMMIT amounts with occurred_at in the period.
    pub commits: BTreeMap<Key, i64>,
    /// Every policy version recorded up to the export's watermark.
    pub policies: Vec<PolicyEvent>,
    /// Every plan assignment recorded up to the export's watermark, in ledger order.
    pub assignments: Vec<PlanAssignmentEvent>,
    /// The tenant's grants per (tenant, metric).
    pub grants: HashMap<Key, Vec<GrantEvent>>,
    /// LATE_USAGE adjustments carried into this export.
    pub late: BTreeMap<Key, i64>,
    /// The billing cycles the period bills, per (tenant, metric) billed by cycle ([`cycles_billed`]), measured.
    pub cycles: BTreeMap<Key, Vec<CycleUse>>,
    /// The (tenant, metric)s billed by a meter other than SUM, their quantity in `usage` ([`crate::metered`]): billed
    /// by calendar month, a gauge's metric too, without COMMITs nor late usage (both sums).
    pub metered: BTreeSet<Key>,
}

/// One billing cycle of a (tenant, metric) that a period bills, as measured at the export's watermark; or the month
/// of a tenant that moved from cycles back to calendar months, billed from where its last cycle ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CycleUse {
    /// `[start, end)` of the cycle (of the period, for a month billed from a cycle's end).
    pub cycle: (Timestamp, Timestamp),
    /// Where the row bills from: the cycle's start, or the end of what an earlier export billed of it (a tenant moved
    /// from calendar months to cycles). The row's `cycle_start`.
    pub billed_from: Timestamp,
    /// Counted usage and valid COMMITs with occurred_at in the cycle, from where the key was last billed through
    /// (the cycle's start, unless an earlier export billed into it: a tenant moved from months to cycles).
    pub consumption: i64,
    /// The first cycle of the key in the period only: counted usage and valid COMMITs recorded since the last close
    /// whose occurred_at is before what this row bills from. Usage of a cycle billed before, billed now.
    pub late: i64,
}

/// Where the usage of the period is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageSource {
    /// The usage and commit totals the ledger keeps, read inside the ledger's write transaction that caught them up
    /// to the watermark (a close's, a preview's): only for the current watermark.
    Totals,
    /// A scan of the usage events and every reservation up to the watermark: for a past watermark.
    Scan,
}

/// The rows of `period`'s export from its inputs: sorted by tenant then metric; a row for every (tenant,
/// metric) with consumption in the period, an own TENANT-scope MONTH-window policy in force for it, or late
/// adjustments carried into it, except the metrics a gauge quota of the tenant or the plan names in any version:
/// their usage events report a level, and a level of 100 reported daily is not 3,000 consumed in
/// the month. Reconcile keeps them out of windows and late usage by the same test.
///
/// A (tenant, metric) with cycles in `inputs.cycles` is billed by cycle instead: a row per cycle, in order, priced
/// by the BILLING_CYCLE quota in force for it ([`cycle_policy`]), with the cycle's bounds, the first carrying the
/// key's late usage. Its LATE_USAGE adjustments (of UTC months) are not carried: the cycle's own late usage is. A
/// "cycle" that is the period itself is the month of a tenant back on calendar months, billed from its last cycle's
/// end and priced by the month's quota.
pub fn rows(period: Period, inputs: &BillingInputs) -> Vec<PeriodExportRow> {
    rows_of(period, &PolicyIndex::new(inputs.policies.clone()).with_assignments(&inputs.assignments), inputs)
}

/// [`rows`] with the index of `inputs.policies` made already.
fn rows_of(period: Period, index: &PolicyIndex, inputs: &BillingInputs) -> Vec<PeriodExportRow> {
    let mut keys: BTreeSet<Key> =
        inputs.usage.keys().chain(inputs.commits.keys()).chain(inputs.late.keys()).cloned().collect();
    keys.extend(own_month_policy_keys(index, period));
    keys.extend(inputs.cycles.keys().cloned());
    keys.retain(|key| inputs.metered.contains(key) || !index.gauge_metrics(&key.0).contains(key.1.as_str()));
    let mut rows = Vec::new();
    for key in keys {
        match inputs.cycles.get(&key).filter(|cycles| !cycles.is_empty()) {
            Some(cycles) => rows.extend(cycles.iter().map(|used| cycle_row(period, index, inputs, &key, used))),
            None => rows.push(row(period, index, inputs, key)),
        }
    }
    rows
}

/// The cycles of `tenant`'s `metric` that `period` bills, in order: the cycles of its BILLING_CYCLE quotas in force
/// (its own, or the plan's it has none of its own covering; [`cycle_policy`]) whose last instant lies in the month
/// of that name in their zone's calendar ([`rules::cycle::billed_month`]). A cycle is billed once, in the month it
/// ends in as its tenant's clock shows it: a cycle ending at local midnight on the 1st is the previous month's.
pub fn cycles_billed(index: &PolicyIndex, tenant: &str, metric: &str, period: Period) -> Vec<(Timestamp, Timestamp)> {
    let mut found = BTreeSet::new();
    let month = (period.start().to_datetime().map(|d| (d.year(), d.month()))).expect("a period's start is in range");
    let middle = Timestamp(period.start().micros() + (period.end().micros() - period.start().micros()) / 2);
    for ((_, _), versions) in cycle_groups(index, tenant, metric) {
        let Some(schedule) = rules::policy::cycle_schedule(versions.iter().copied()) else { continue };
        for zone in versions.iter().filter(|p| p.cycle_anchor.is_some()).map(|p| p.zone()) {
            let (from, until) = rules::window::bounds_in(Window::MONTH, zone, middle);
            for cycle in schedule.ending_within(from, until) {
                let Some(policy) = cycle_policy(index, tenant, metric, cycle) else { continue };
                if rules::cycle::billed_month(policy.zone(), cycle) == month {
                    found.insert(cycle);
                }
            }
        }
    }
    found.into_iter().collect()
}

/// The versions of each BILLING_CYCLE policy (owner, policy_id) that may bill `tenant`'s `metric`: its own and the
/// plan's, every version of a policy_id with a BILLING_CYCLE one.
fn cycle_groups<'a>(
    index: &'a PolicyIndex,
    tenant: &str,
    metric: &str,
) -> BTreeMap<(&'a str, &'a str), Vec<&'a PolicyEvent>> {
    let mut groups: BTreeMap<(&str, &str), Vec<&PolicyEvent>> = BTreeMap::new();
    let plans = plan_owners(index, tenant);
    for p in index.policies() {
        let owner = p.header.tenant.as_str();
        if p.header.metric == metric && (owner == tenant || plans.contains(owner)) {
            groups.entry((owner, p.policy_id.as_str())).or_default().push(p);
        }
    }
    groups.retain(|_, versions| versions.iter().any(|p| p.window == Window::BILLING_CYCLE));
    groups
}

/// The owners of policies that may price `tenant`'s rows besides its own: the plan defaults (`*`) and every named plan
/// it was ever assigned (`*pro`).
fn plan_owners(index: &PolicyIndex, tenant: &str) -> BTreeSet<String> {
    let named = index.plan_spans(tenant).iter().filter_map(|span| span.owner.clone());
    std::iter::once(rules::policy::PLAN_DEFAULT_TENANT.to_string()).chain(named).collect()
}

/// The TENANT-scope BILLING_CYCLE quota in force for `cycle` of `tenant`'s `metric`, whose cycle it is; of several,
/// as [`month_policy`] chooses. A named plan's window is its cycle clipped to the plan's span: it ends with the cycle
/// and starts within it when the plan was assigned mid-cycle.
pub fn cycle_policy<'a>(
    index: &'a PolicyIndex,
    tenant: &str,
    metric: &str,
    (start, end): (Timestamp, Timestamp),
) -> Option<&'a PolicyEvent> {
    index
        .applicable(tenant, metric, Timestamp(end.micros() - 1))
        .into_iter()
        .filter(|a| a.policy.window == Window::BILLING_CYCLE && a.policy.scope == Scope::TENANT)
        .filter(|a| !a.policy.is_throttle() && a.window_end == end)
        .filter(|a| a.window_start == start || (is_named_plan(a.policy) && a.window_start > start))
        .min_by_key(|a| (billing_rank(a.policy.enforcement), a.policy.policy_id.as_str()))
        .map(|a| a.policy)
}

/// Whether `policy` is a named plan's (its owner `*` and the plan's name).
fn is_named_plan(policy: &PolicyEvent) -> bool {
    schemas::partition::plan_of_owner(&policy.header.tenant).is_some()
}

/// The metrics of a BILLING_CYCLE policy of `tenant` (its own or a plan's): the keys a period may bill by cycle.
fn cycle_metrics<'a>(index: &'a PolicyIndex, tenant: &str) -> BTreeSet<&'a str> {
    let plans = plan_owners(index, tenant);
    index
        .policies()
        .iter()
        .filter(|p| p.window == Window::BILLING_CYCLE)
        .filter(|p| p.header.tenant == tenant || plans.contains(&p.header.tenant))
        .map(|p| p.header.metric.as_str())
        .collect()
}

/// The row of one billing cycle of `key`.
fn cycle_row(
    period: Period,
    index: &PolicyIndex,
    inputs: &BillingInputs,
    key: &Key,
    used: &CycleUse,
) -> PeriodExportRow {
    let (tenant, metric) = (key.0.clone(), key.1.clone());
    let mut row =
        PeriodExportRow::unpriced(tenant, metric, used.consumption, used.late, (used.billed_from, used.cycle.1));
    let month = || month_policy(index, &key.0, &key.1, period).map(|(policy, _)| policy);
    let Some(policy) = cycle_policy(index, &key.0, &key.1, used.cycle)
        .or_else(|| month().filter(|_| used.cycle == (period.start(), period.end())))
    else {
        return row;
    };
    let grants = inputs.grants.get(key).map_or(&[][..], Vec::as_slice);
    let (start, end) = used.cycle;
    let effective = overshoot::effective_limit(policy.limit, Scope::TENANT, None, grants, start, end);
    price(&mut row, policy, effective);
    row
}

/// Prices `row` by `policy` of effective limit `effective`: a SOFT quota's excess is billed, a HARD one's is an
/// enforcement miss.
fn price(row: &mut PeriodExportRow, policy: &PolicyEvent, effective: i64) {
    let excess = overshoot::excess(row.consumption, effective);
    row.policy_id = Some(policy.policy_id.clone());
    row.policy_version = Some(policy.version);
    row.limit = Some(policy.limit);
    row.grants = Some(effective - policy.limit);
    row.effective_limit = Some(effective);
    match policy.enforcement {
        Enforcement::SOFT => row.overage = Some(excess),
        // A throttled overage let the excess through at its rate on purpose: not billed, and not
        // a miss either, which only its events can tell (reconcile's OVERSHOOT, beyond the throttle's allowance).
        Enforcement::HARD if policy.overage_throttle().is_some() => {}
        Enforcement::HARD => row.overshoot = Some(excess),
        // SHADOW never denies and bills nothing: both stay empty (reconcile reports SHADOW_OVER_LIMIT).
        Enforcement::SHADOW => {}
    }
}

/// A close of `period` refused while a billing cycle it bills has not ended by `now`: its bill would miss the rest
/// of the cycle. Answers the first such cycle's tenant, policy and end.
pub fn unended_cycle(
    policies: &[PolicyEvent],
    tenants: impl IntoIterator<Item = (String, String)>,
    period: Period,
    now: Timestamp,
) -> Option<(String, String, Timestamp)> {
    let index = PolicyIndex::new(policies.to_vec());
    for (tenant, metric) in tenants {
        for cycle in cycles_billed(&index, &tenant, &metric, period) {
            if cycle.1 > now {
                let policy = cycle_policy(&index, &tenant, &metric, cycle).expect("a billed cycle has its policy");
                return Some((tenant, policy.policy_id.clone(), cycle.1));
            }
        }
    }
    None
}

/// (tenant, metric) of every tenant's own TENANT-scope MONTH-window policy in force for the period.
fn own_month_policy_keys(index: &PolicyIndex, period: Period) -> Vec<Key> {
    let owners: BTreeSet<Key> = index
        .policies()
        .iter()
        .filter(|p| p.header.tenant != rules::policy::PLAN_DEFAULT_TENANT)
        .map(|p| (p.header.tenant.clone(), p.header.metric.clone()))
        .collect();
    owners
        .into_iter()
        .filter(|(tenant, metric)| month_policy(index, tenant, metric, period).is_some_and(|(_, own)| own))
        .collect()
}

/// The TENANT-scope MONTH-window quota version in force for the period, and whether it is the tenant's own.
/// When several apply: a SOFT one, then a HARD one, then a SHADOW one, then the smallest policy_id. The row is
/// a bill: a SOFT quota's excess is billed (overage), a HARD one's is an enforcement miss (overshoot, reported by
/// reconcile too) and a SHADOW policy bills nothing, so taken for the row beside a SOFT quota either lost that
/// quota's overage. A throttle is never the billed policy: it limits a rate, not the month's allowance.
///
/// The period is a UTC month, whatever the policy's time zone (billing cycles of their own are not in the contract);
/// the version billed is the one in force for the policy's own month of that name, its zone's calendar month. So
/// it is asked at the middle of the UTC month, which lies in the month of the same name in every zone (no zone is
/// more than 14 hours from UTC); at the period's first instant a policy in New York would answer October's version
/// for November.
fn month_policy<'a>(
    index: &'a PolicyIndex,
    tenant: &str,
    metric: &str,
    period: Period,
) -> Option<(&'a PolicyEvent, bool)> {
    let (start, end) = (period.start().micros(), period.end().micros());
    let middle = Timestamp(start + (end - start) / 2);
    index
        .applicable(tenant, metric, middle)
        .into_iter()
        .filter(|a| a.policy.scope == Scope::TENANT && a.policy.window == Window::MONTH && !a.policy.is_throttle())
        .min_by_key(|a| (billing_rank(a.policy.enforcement), a.policy.policy_id.as_str()))
        .map(|a| (a.policy, !a.plan_default))
}

/// Which enforcement a row takes first: what bills before what does not.
fn billing_rank(enforcement: Enforcement) -> u8 {
    match enforcement {
        Enforcement::SOFT => 0,
        Enforcement::HARD => 1,
        Enforcement::SHADOW => 2,
    }
}

fn row(period: Period, index: &PolicyIndex, inputs: &BillingInputs, key: Key) -> PeriodExportRow {
    let usage = inputs.usage.get(&key).copied().unwrap_or(0);
    let commits = inputs.commits.get(&key).copied().unwrap_or(0);
    let consumption = usage.checked_add(commits).expect("consumption fits in i64");
    let late_adjustments = inputs.late.get(&key).copied().unwrap_or(0);
    let month = (period.start(), period.end());
    let mut row = PeriodExportRow::unpriced(key.0.clone(), key.1.clone(), consumption, late_adjustments, month);
    let Some((policy, _)) = month_policy(index, &key.0, &key.1, period) else { return row };
    let grants = inputs.grants.get(&key).map_or(&[][..], Vec::as_slice);
    let effective = overshoot::effective_limit(policy.limit, Scope::TENANT, None, grants, period.start(), period.end());
    price(&mut row, policy, effective);
    row
}

/// Computes `period`'s export at `snapshot`, reading through `ledger`. With [`UsageSource::Totals`] it must run
/// inside the write transaction of [`Ledger::close_period_with_export`] or [`Ledger::preview_period_export`], which
/// bring the commit totals to the snapshot's watermark and hold the ledger at it.
pub fn compute(
    ledger: &Ledger,
    period: Period,
    snapshot: CloseSnapshot,
    source: UsageSource,
) -> Result<Vec<PeriodExportRow>, ReportError> {
    let (usage, commits) = match source {
        UsageSource::Totals => {
            (by_key(ledger.usage_totals_of_period(period)?), by_key(ledger.commit_totals_of_period(period)?))
        }
        UsageSource::Scan => (
            by_key(ledger.usage_of_period(period, snapshot.watermark)?),
            valid_commits(ledger, period, snapshot.watermark)?,
        ),
    };
    let mut inputs = BillingInputs {
        usage,
        commits,
        policies: ledger.policies_through(snapshot.watermark)?,
        assignments: ledger.plan_assignments_through(snapshot.watermark)?,
        grants: ledger.grants_through(snapshot.watermark)?,
        late: by_key(ledger.late_usage_carried(snapshot)?),
        cycles: BTreeMap::new(),
        metered: BTreeSet::new(),
    };
    let meters = ledger.meters_through(snapshot.watermark)?;
    let rows = compute_rows(ledger, period, snapshot, &mut inputs, (source, &meters))?;
    if inputs.assignments.is_empty() {
        return Ok(rows);
    }
    let index = PolicyIndex::new(inputs.policies.clone()).with_assignments(&inputs.assignments);
    rows_by_plan(ledger, period, snapshot.watermark, &index, &inputs, rows)
}

/// The rows of [`compute`] before they are split by plan.
fn compute_rows(
    ledger: &Ledger,
    period: Period,
    snapshot: CloseSnapshot,
    inputs: &mut BillingInputs,
    (source, meters): (UsageSource, &[MeterEvent]),
) -> Result<Vec<PeriodExportRow>, ReportError> {
    if inputs.policies.iter().any(|p| p.window == Window::BILLING_CYCLE) {
        let previous = match source {
            UsageSource::Totals => ledger.usage_totals_of_period(period.previous())?,
            UsageSource::Scan => ledger.usage_of_period(period.previous(), snapshot.watermark)?,
        };
        let touched: BTreeSet<Key> = inputs.usage.keys().cloned().chain(by_key(previous).into_keys()).collect();
        let index = PolicyIndex::new(inputs.policies.clone()).with_assignments(&inputs.assignments);
        inputs.cycles = measure_cycles(ledger, period, snapshot, &index, touched)?;
        meter_inputs(inputs, crate::metered::quantities(ledger, period, snapshot, meters)?);
        return Ok(rows_of(period, &index, inputs));
    }
    meter_inputs(inputs, crate::metered::quantities(ledger, period, snapshot, meters)?);
    Ok(rows(period, inputs))
}

/// Each row with the named plan its tenant held over what it bills; a row over which the tenant's plan changed split
/// into a row per plan in force, in time order (contract §5 "Named plans"): each part bills its own consumption
/// (usage and valid COMMITs between its bounds, as `cycle_start` and `cycle_end` say), priced by the quota in force at
/// its last instant (the plan's then, its window clipped to the part), with the grants overlapping it; the first part
/// carries the row's late usage. The parts' consumptions add up to the row's, or the export fails.
fn rows_by_plan(
    ledger: &Ledger,
    period: Period,
    watermark: u64,
    index: &PolicyIndex,
    inputs: &BillingInputs,
    rows: Vec<PeriodExportRow>,
) -> Result<Vec<PeriodExportRow>, ReportError> {
    let mut split = Vec::with_capacity(rows.len());
    for mut row in rows {
        let parts = plan_parts(index, &row.tenant, (row.cycle_start, row.cycle_end));
        // A metered row's quantity is its meter's over the whole month, not a sum that parts add up to: it is not
        // split, and names the plan held at its end.
        let metered = inputs.metered.contains(&(row.tenant.clone(), row.metric.clone()));
        if parts.len() < 2 || metered {
            row.plan = parts.into_iter().next_back().flatten().and_then(|(plan, _)| plan);
            split.push(row);
            continue;
        }
        let key = (row.tenant.clone(), row.metric.clone());
        let mut total: i64 = 0;
        for (n, part) in parts.into_iter().enumerate() {
            let (plan, (from, until)) = part.expect("a part of a split row is of a span");
            let names = (key.0.as_str(), key.1.as_str());
            let usage = ledger.usage_of_key_between(names, (from, until), 0, watermark)?;
            let commits = commits_of_key_between(ledger, &key, (from, until), period, watermark)?;
            let consumption = usage.checked_add(commits).expect("consumption fits in i64");
            total = total.checked_add(consumption).expect("consumption fits in i64");
            let late = if n == 0 { row.late_adjustments } else { 0 };
            let mut part_row =
                PeriodExportRow::unpriced(key.0.clone(), key.1.clone(), consumption, late, (from, until));
            if let Some(policy) = part_policy(index, &key, until) {
                let grants = inputs.grants.get(&key).map_or(&[][..], Vec::as_slice);
                price(
                    &mut part_row,
                    policy,
                    overshoot::effective_limit(policy.limit, Scope::TENANT, None, grants, from, until),
                );
            }
            part_row.plan = plan;
            split.push(part_row);
        }
        if total != row.consumption {
            return Err(ReportError::PlanSplit { tenant: key.0, metric: key.1, row: row.consumption, parts: total });
        }
    }
    Ok(split)
}

/// A part of a row's span and the plan its tenant held over it (none: no assignment in effect, or one of no plan).
type PlanPart = (Option<String>, (Timestamp, Timestamp));

/// `[from, until)` cut where `tenant`'s plan changes, each part with the plan it held. A single none: the tenant was
/// never assigned a plan over it.
fn plan_parts(index: &PolicyIndex, tenant: &str, (from, until): (Timestamp, Timestamp)) -> Vec<Option<PlanPart>> {
    let spans = index.plan_spans(tenant);
    if !spans.iter().any(|span| span.from < until && span.until > from) {
        return vec![None];
    }
    let mut cuts: Vec<Timestamp> = spans.iter().map(|span| span.from).filter(|t| *t > from && *t < until).collect();
    cuts.insert(0, from);
    cuts.push(until);
    cuts.windows(2)
        .map(|bounds| {
            let plan = index.plan_at(tenant, bounds[0]).and_then(|span| span.assignment.plan.clone());
            Some((plan, (bounds[0], bounds[1])))
        })
        .collect()
}

/// The TENANT-scope MONTH or BILLING_CYCLE quota in force for `key` at the last instant before `until`, chosen among
/// several as [`month_policy`] chooses.
fn part_policy<'a>(index: &'a PolicyIndex, key: &Key, until: Timestamp) -> Option<&'a PolicyEvent> {
    index
        .applicable(&key.0, &key.1, Timestamp(until.micros() - 1))
        .into_iter()
        .filter(|a| a.policy.scope == Scope::TENANT && !a.policy.is_throttle())
        .filter(|a| matches!(a.policy.window, Window::MONTH | Window::BILLING_CYCLE))
        .min_by_key(|a| (billing_rank(a.policy.enforcement), a.policy.policy_id.as_str()))
        .map(|a| a.policy)
}

/// The valid COMMITs of `key` (judged as the period's are) whose event time is in `[from, until)`.
fn commits_of_key_between(
    ledger: &Ledger,
    key: &Key,
    (from, until): (Timestamp, Timestamp),
    period: Period,
    watermark: u64,
) -> Result<i64, ReportError> {
    let mut sum: i64 = 0;
    ledger.for_each_reservation_through(watermark, |group| {
        let events: Vec<(u64, &ReservationEvent)> = group.iter().map(|(seq, e)| (*seq, e)).collect();
        let verdict = rules::reservation::judge(&events, period.end());
        let Some((seq, ReservationAction::COMMIT, amount)) = verdict.close else { return };
        let (_, commit) = group.iter().find(|(s, _)| *s == seq).expect("the close is one of the group");
        let at = commit.header.occurred_at;
        if (&commit.header.tenant, &commit.header.metric) == (&key.0, &key.1) && at >= from && at < until {
            sum = sum.checked_add(amount).expect("committed amounts fit in i64");
        }
    })?;
    Ok(sum)
}

/// Puts the metered keys' quantities in place of their sums: their usage is their meter's aggregate, and neither
/// COMMITs, late usage nor cycles (sums of amounts) apply to them.
fn meter_inputs(inputs: &mut BillingInputs, metered: BTreeMap<Key, i64>) {
    for (key, quantity) in metered {
        inputs.commits.remove(&key);
        inputs.late.remove(&key);
        inputs.cycles.remove(&key);
        inputs.usage.insert(key.clone(), quantity);
        inputs.metered.insert(key);
    }
}

/// The cycles `period` bills of every (tenant, metric) that may be billed by cycle (`touched`: those with usage in the
/// period or the month before, and those with a BILLING_CYCLE policy of their own), measured at `snapshot`
/// ([`CycleUse`]).
fn measure_cycles(
    ledger: &Ledger,
    period: Period,
    snapshot: CloseSnapshot,
    index: &PolicyIndex,
    mut touched: BTreeSet<Key>,
) -> Result<BTreeMap<Key, Vec<CycleUse>>, ReportError> {
    touched.extend(
        index
            .policies()
            .iter()
            .filter(|p| p.window == Window::BILLING_CYCLE && p.header.tenant != rules::policy::PLAN_DEFAULT_TENANT)
            .map(|p| (p.header.tenant.clone(), p.header.metric.clone())),
    );
    let billed_through: HashMap<Key, Timestamp> =
        ledger.billed_through(period)?.into_iter().map(|(tenant, metric, end)| ((tenant, metric), end)).collect();
    // Per key: its cycles, each from where it bills (never before what was billed already), and where its first
    // bills from (late usage is what was recorded since the last close before that).
    let mut measured: BTreeMap<Key, Vec<CycleUse>> = BTreeMap::new();
    for key in touched {
        if !cycle_metrics(index, &key.0).contains(key.1.as_str()) {
            continue;
        }
        let through = billed_through.get(&key).copied();
        let mut cycles = cycles_billed(index, &key.0, &key.1, period);
        // Back on calendar months after a cycle that ended in the month before: the month bills from that end, so
        // the days between it and the month's start are billed (they are in no cycle and in no month billed).
        let previous = period.previous();
        if cycles.is_empty() && through.is_some_and(|t| t > previous.start() && t < period.start()) {
            cycles.push((period.start(), period.end()));
        }
        if cycles.is_empty() {
            continue;
        }
        let mut uses: Vec<CycleUse> = Vec::new();
        for cycle in cycles {
            let from = match through {
                Some(t) if cycle == (period.start(), period.end()) && t < cycle.0 => t,
                through => through.map_or(cycle.0, |t| t.max(cycle.0)).min(cycle.1),
            };
            let names = (key.0.as_str(), key.1.as_str());
            let consumption = ledger.usage_of_key_between(names, (from, cycle.1), 0, snapshot.watermark)?;
            let late = match uses.is_empty() {
                true => ledger.usage_of_key_between(
                    names,
                    (schemas::validate::TIMESTAMP_MIN, from),
                    snapshot.carried_after,
                    snapshot.watermark,
                )?,
                false => 0,
            };
            uses.push(CycleUse { cycle, billed_from: from, consumption, late });
        }
        measured.insert(key, uses);
    }
    if measured.is_empty() {
        return Ok(measured);
    }
    // Valid COMMITs: in one pass over the reservations, each added to its cycle, or to the first cycle's late usage.
    ledger.for_each_reservation_through(snapshot.watermark, |group| {
        let events: Vec<(u64, &ReservationEvent)> = group.iter().map(|(seq, e)| (*seq, e)).collect();
        let verdict = rules::reservation::judge(&events, period.end());
        let Some((seq, ReservationAction::COMMIT, amount)) = verdict.close else { return };
        let (_, commit) = group.iter().find(|(s, _)| *s == seq).expect("the close is one of the group");
        let key = (commit.header.tenant.clone(), commit.header.metric.clone());
        let Some(uses) = measured.get_mut(&key) else { return };
        let at = commit.header.occurred_at;
        for used in uses.iter_mut() {
            if at >= used.billed_from && at < used.cycle.1 {
                used.consumption = used.consumption.checked_add(amount).expect("consumption fits in i64");
            }
        }
        if at < uses[0].billed_from && seq > snapshot.carried_after {
            uses[0].late = uses[0].late.checked_add(amount).expect("late usage fits in i64");
        }
    })?;
    Ok(measured)
}

/// The export of an open period at the ledger's current watermark, with that snapshot. Appends wait meanwhile
/// ([`Ledger::preview_period_export`]).
pub fn compute_open(ledger: &Ledger, period: Period) -> Result<(CloseSnapshot, Vec<PeriodExportRow>), ReportError> {
    let compute = |ledger: &Ledger, snapshot| Ok(compute(ledger, period, snapshot, UsageSource::Totals)?);
    Ok(ledger.preview_period_export(period, compute)?)
}

/// The export of a period closed without a stored one (closed by reconcile's tests or before exports were
/// stored): recomputed at its close's watermark, usage scanned, carrying what the closes before it left.
pub fn compute_closed(
    ledger: &Ledger,
    close: &PeriodClose,
    closes: &[PeriodClose],
) -> Result<Vec<PeriodExportRow>, ReportError> {
    let carried_after = closes
        .iter()
        .filter(|c| c.period != close.period && (c.watermark, c.closed_at) < (close.watermark, close.closed_at))
        .map(|c| c.watermark)
        .max()
        .unwrap_or(0);
    let snapshot = CloseSnapshot { watermark: close.watermark, carried_after };
    compute(ledger, close.period, snapshot, UsageSource::Scan)
}

fn by_key(totals: Vec<MetricTotal>) -> BTreeMap<Key, i64> {
    totals.into_iter().map(|t| ((t.tenant, t.metric), t.amount)).collect()
}

/// Valid COMMIT amounts with occurred_at in the period, per (tenant, metric), judged by `rules`' reservation rules on
/// every event of each reservation up to `watermark`. A COMMIT of 0 consumed nothing, as a RELEASE, and makes no
/// key by itself, as in the commit totals (which keep no total of 0): the scan of a closed period and the totals of
/// an open one give the same rows.
pub fn valid_commits(ledger: &Ledger, period: Period, watermark: u64) -> Result<BTreeMap<Key, i64>, ReportError> {
    valid_commits_by(ledger, period, watermark, |h| (h.tenant.clone(), h.metric.clone()))
}

/// [`valid_commits`] summed per the key `key_of` makes of each valid COMMIT's header.
fn valid_commits_by<K: Ord>(
    ledger: &Ledger,
    period: Period,
    watermark: u64,
    key_of: impl Fn(&Header) -> K,
) -> Result<BTreeMap<K, i64>, ReportError> {
    let (start, end) = (period.start(), period.end());
    let mut sums: BTreeMap<K, i64> = BTreeMap::new();
    ledger.for_each_reservation_through(watermark, |group| {
        let events: Vec<(u64, &ReservationEvent)> = group.iter().map(|(seq, e)| (*seq, e)).collect();
        // `as_of` only decides expiry, which is not consumption: the period's end will do.
        let verdict = rules::reservation::judge(&events, end);
        let Some((seq, ReservationAction::COMMIT, amount)) = verdict.close else { return };
        let (_, commit) = group.iter().find(|(s, _)| *s == seq).expect("the close is one of the group");
        if amount != 0 && commit.header.occurred_at >= start && commit.header.occurred_at < end {
            let sum = sums.entry(key_of(&commit.header)).or_insert(0);
            *sum = sum.checked_add(amount).expect("committed amounts fit in i64");
        }
    })?;
    Ok(sums)
}

/// A bill's consumption by project (`export billing --by project`): of each (tenant, metric) row, the consumption of
/// every project that the period's counted usage events or valid COMMITs (of a non-zero amount, as the bill keys
/// them) name, by project name, then that of those naming no project (`None`), only when there are some. Its
/// amounts add up to the row's consumption.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ByProject(pub BTreeMap<Key, Vec<(Option<String>, i64)>>);

impl ByProject {
    /// The projects of one row, in the order they are exported; none for a row without consumption.
    pub fn of(&self, tenant: &str, metric: &str) -> &[(Option<String>, i64)] {
        self.0.get(&(tenant.to_string(), metric.to_string())).map_or(&[], Vec::as_slice)
    }

    /// The breakdowns of a set of shards together: a tenant's rows live in its one shard, so none overlaps.
    pub fn union(parts: impl IntoIterator<Item = ByProject>) -> ByProject {
        ByProject(parts.into_iter().flat_map(|p| p.0).collect())
    }
}

/// The consumption by project of the rows of an export of `period` computed at `watermark` ([`ByProject`]): usage
/// scanned and COMMITs judged up to that watermark, as a closed period's rows are recomputed, so that an open
/// period's (computed from the totals at that watermark) and a closed one's (stored at its close's) add up the same.
/// Rows a gauge metric would make are not in `rows` (the bill leaves levels out), so neither are their projects.
/// A row whose projects do not add up to its consumption is refused ([`ReportError::ProjectsDisagree`]): exported,
/// the breakdown would contradict the bill.
pub fn by_project(
    ledger: &Ledger,
    period: Period,
    watermark: u64,
    rows: &[PeriodExportRow],
) -> Result<ByProject, ReportError> {
    let mut sums: BTreeMap<(String, String, Option<String>), i64> = BTreeMap::new();
    for total in ledger.usage_of_period_by_project(period, watermark)? {
        sums.insert((total.tenant, total.metric, total.project), total.amount);
    }
    let commits =
        valid_commits_by(ledger, period, watermark, |h| (h.tenant.clone(), h.metric.clone(), h.project.clone()))?;
    for (key, amount) in commits {
        let sum = sums.entry(key).or_insert(0);
        *sum = sum.checked_add(amount).expect("consumption fits in i64");
    }
    let mut breakdown: BTreeMap<Key, Vec<(Option<String>, i64)>> = BTreeMap::new();
    for ((tenant, metric, project), amount) in sums {
        breakdown.entry((tenant, metric)).or_default().push((project, amount));
    }
    let mut kept = BTreeMap::new();
    // A row of a billing cycle bills days of more than the month: its projects are not broken down.
    for row in rows.iter().filter(|r| (r.cycle_start, r.cycle_end) == (period.start(), period.end())) {
        let key = (row.tenant.clone(), row.metric.clone());
        let mut projects = breakdown.remove(&key).unwrap_or_default();
        // Sorted with `None` first; exported after the named projects, as the rest of the row.
        let unnamed_first = projects.first().is_some_and(|(p, _)| p.is_none());
        projects.rotate_left(usize::from(unnamed_first));
        let sum = projects.iter().fold(0i64, |sum, (_, amount)| sum.saturating_add(*amount));
        if sum != row.consumption {
            return Err(ReportError::ProjectsDisagree {
                tenant: row.tenant.clone(),
                metric: row.metric.clone(),
                projects: sum,
                consumption: row.consumption,
            });
        }
        if !projects.is_empty() {
            kept.insert(key, projects);
        }
    }
    Ok(ByProject(kept))
}

#[cfg(test)]
mod tests {
    use super::*;
    use testkit::fixtures::at;

    fn header(tenant: &str, metric: &str, t: &str) -> Header {
        testkit::fixtures::header(&format!("{tenant}-{metric}-{t}"), t, tenant, metric)
    }

    fn policy(tenant: &str, id: &str, version: i32, metric: &str, limit: i64, enforcement: Enforcement) -> PolicyEvent {
        PolicyEvent {
            version,
            ..PolicyEvent::new(
                header(tenant, metric, "2026-10-01T00:00:00Z"),
                id,
                limit,
                Window::MONTH,
                enforcement,
                at("2026-10-01T00:00:00Z"),
            )
        }
    }

    fn key(tenant: &str, metric: &str) -> Key {
        (tenant.into(), metric.into())
    }

    fn cells(rows: &[PeriodExportRow]) -> Vec<String> {
        let n = |v: Option<i64>| v.map_or(String::new(), |v| v.to_string());
        rows.iter()
            .map(|r| {
                format!(
                    "{},{},{},{},{},{},{},{},{},{},{}",
                    r.tenant,
                    r.metric,
                    r.consumption,
                    r.policy_id.clone().unwrap_or_default(),
                    n(r.policy_version.map(i64::from)),
                    n(r.limit),
                    n(r.grants),
                    n(r.effective_limit),
                    n(r.overage),
                    n(r.overshoot),
                    r.late_adjustments
                )
            })
            .collect()
    }

    // contract §5: SOFT excess is overage, HARD excess is overshoot, SHADOW neither; grants raise the limit; plan
    // defaults fill in without creating rows; an own policy creates a row without consumption.
    #[test]
    fn rows_apply_the_policy_in_force_with_grants() {
        let period: Period = "2026-11".parse().unwrap();
        let mut inputs = BillingInputs {
            policies: vec![
                policy("*", "plan-tokens", 1, "tokens", 1_000, Enforcement::SOFT),
                policy("org-1", "own-bytes", 1, "bytes", 500, Enforcement::HARD),
                policy("org-1", "own-bytes", 2, "bytes", 600, Enforcement::HARD),
                policy("org-2", "shadow", 1, "requests", 10, Enforcement::SHADOW),
                policy("org-3", "idle", 1, "requests", 10, Enforcement::HARD),
            ],
            ..BillingInputs::default()
        };
        inputs.usage.insert(key("org-1", "bytes"), 650);
        inputs.commits.insert(key("org-1", "bytes"), 100);
        inputs.usage.insert(key("org-1", "tokens"), 1_200);
        inputs.usage.insert(key("org-2", "requests"), 50);
        inputs.usage.insert(key("org-4", "other"), 7);
        inputs.late.insert(key("org-5", "tokens"), -3);
        let grant = GrantEvent {
            header: header("org-1", "bytes", "2026-11-10T00:00:00Z"),
            grant_id: "g".into(),
            amount: 100,
            valid_from: at("2026-11-10T00:00:00Z"),
            valid_until: at("2026-11-11T00:00:00Z"),
            reason: "credit".into(),
            actor: None,
        };
        inputs.grants.insert(key("org-1", "bytes"), vec![grant]);
        assert_eq!(
            cells(&rows(period, &inputs)),
            [
                "org-1,bytes,750,own-bytes,2,600,100,700,,50,0",
                "org-1,tokens,1200,plan-tokens,1,1000,0,1000,200,,0",
                "org-2,requests,50,shadow,1,10,0,10,,,0",
                "org-3,requests,0,idle,1,10,0,10,,0,0",
                "org-4,other,7,,,,,,,,0",
                "org-5,tokens,0,plan-tokens,1,1000,0,1000,0,,-3",
            ]
        );
    }

    // Choice where the contract is silent (no billing cycles): a MONTH policy in a zone is billed per UTC month at the
    // version in force for its own month of that name. New York's November starts at 04:00 UTC on Nov 1, so asked at
    // the UTC month's first instant the version of New York's October would have been billed for November.
    #[test]
    fn a_zoned_month_policy_is_billed_at_its_own_months_version() {
        let period: Period = "2026-11".parse().unwrap();
        let zoned = |version: i32, limit: i64, effective_from: &str| PolicyEvent {
            effective_from: at(effective_from),
            time_zone: Some("America/New_York".into()),
            ..policy("org-1", "monthly", version, "tokens", limit, Enforcement::SOFT)
        };
        let mut inputs = BillingInputs {
            policies: vec![zoned(1, 100, "2026-10-01T04:00:00Z"), zoned(2, 200, "2026-11-01T04:00:00Z")],
            ..BillingInputs::default()
        };
        inputs.usage.insert(key("org-1", "tokens"), 250);
        assert_eq!(cells(&rows(period, &inputs)), ["org-1,tokens,250,monthly,2,200,0,200,50,,0"]);
    }

    // Choice where the contract is silent: when several TENANT MONTH policies apply, the smallest policy_id decides.
    #[test]
    fn the_smallest_policy_id_decides_among_several() {
        let period: Period = "2026-11".parse().unwrap();
        let mut inputs = BillingInputs {
            policies: vec![
                policy("org-1", "b-policy", 1, "tokens", 10, Enforcement::SOFT),
                policy("org-1", "a-policy", 1, "tokens", 20, Enforcement::SOFT),
            ],
            ..BillingInputs::default()
        };
        inputs.usage.insert(key("org-1", "tokens"), 25);
        assert_eq!(cells(&rows(period, &inputs)), ["org-1,tokens,25,a-policy,1,20,0,20,5,,0"]);
    }

    // A throttle (a policy with a burst) limits a rate, not the month's allowance: never the quota billed against.
    #[test]
    fn a_throttle_is_not_the_monthly_quota() {
        let period: Period = "2026-11".parse().unwrap();
        let throttle = |tenant: &str| PolicyEvent {
            burst: Some(50),
            ..policy(tenant, "a-throttle", 1, "tokens", 10, Enforcement::HARD)
        };
        let mut inputs = BillingInputs {
            policies: vec![
                throttle("org-1"),
                policy("org-1", "b-quota", 1, "tokens", 20, Enforcement::SOFT),
                throttle("org-2"),
            ],
            ..BillingInputs::default()
        };
        inputs.usage.insert(key("org-1", "tokens"), 25);
        inputs.usage.insert(key("org-2", "tokens"), 25);
        assert_eq!(
            cells(&rows(period, &inputs)),
            ["org-1,tokens,25,b-quota,1,20,0,20,5,,0", "org-2,tokens,25,,,,,,,,0"]
        );
    }

    // Choice where the contract is silent: of several TENANT MONTH policies in force, a SOFT quota is billed before a
    // HARD one before a SHADOW trial, then the smallest policy_id (org-4: a HARD quota sorting first lost the SOFT
    // one's overage); a SHADOW policy of its own still replaces the plan's quota (contract §3). A SHADOW trial starting
    // mid-month must not take the row from the SOFT quota, whose overage of 20 would be lost.
    #[test]
    fn an_enforcing_quota_is_billed_before_a_shadow_one() {
        let period: Period = "2026-11".parse().unwrap();
        let trial = |tenant: &str, id: &str| PolicyEvent {
            effective_from: at("2026-11-20T00:00:00Z"),
            ..policy(tenant, id, 1, "requests", 5, Enforcement::SHADOW)
        };
        let mut inputs = BillingInputs {
            policies: vec![
                policy("*", "plan", 1, "requests", 10, Enforcement::SOFT),
                policy("org-1", "quota", 1, "requests", 10, Enforcement::SOFT),
                trial("org-1", "a-shadow-trial"),
                policy("org-2", "z-hard", 1, "requests", 10, Enforcement::HARD),
                trial("org-2", "a-shadow-trial"),
                trial("org-3", "shadow-trial"),
                policy("org-4", "a-hard", 1, "requests", 100, Enforcement::HARD),
                policy("org-4", "b-soft", 1, "requests", 10, Enforcement::SOFT),
            ],
            ..BillingInputs::default()
        };
        for tenant in ["org-1", "org-2", "org-3", "org-4"] {
            inputs.usage.insert(key(tenant, "requests"), 30);
        }
        assert_eq!(
            cells(&rows(period, &inputs)),
            [
                "org-1,requests,30,quota,1,10,0,10,20,,0",
                "org-2,requests,30,z-hard,1,10,0,10,,20,0",
                "org-3,requests,30,shadow-trial,1,5,0,5,,,0",
                "org-4,requests,30,b-soft,1,10,0,10,20,,0",
            ]
        );
    }

    // contract §3/5, quotas and throttles apart: a tenant's own MONTH throttle is no quota of its own, so the plan's
    // SOFT MONTH quota is still the policy billed and its overage billed (not a row without policy or overage).
    #[test]
    fn an_own_throttle_leaves_the_plan_quota_billed() {
        let period: Period = "2026-11".parse().unwrap();
        let mut inputs = BillingInputs {
            policies: vec![
                policy("*", "plan", 1, "requests", 10, Enforcement::SOFT),
                PolicyEvent {
                    burst: Some(50),
                    ..policy("org-t", "own-throttle", 1, "requests", 1_000, Enforcement::HARD)
                },
            ],
            ..BillingInputs::default()
        };
        inputs.usage.insert(key("org-t", "requests"), 30);
        assert_eq!(cells(&rows(period, &inputs)), ["org-t,requests,30,plan,1,10,0,10,20,,0"]);
    }

    // A HARD monthly quota whose overage is throttled let its excess through on purpose: the row
    // shows the consumption over the effective limit with neither overage (not billed) nor overshoot (no miss by
    // itself; reconcile judges the throttle's allowance from the events), beside a plain HARD quota's overshoot.
    #[test]
    fn a_throttled_overage_is_neither_billed_nor_an_overshoot() {
        let period: Period = "2026-11".parse().unwrap();
        let throttled = PolicyEvent {
            overage_rate: Some(10),
            overage_window: Some(Window::HOUR),
            violation: None,
            window_seconds: None,
            cycle_anchor: None,
            ..policy("org-t", "throttled", 1, "requests", 100, Enforcement::HARD)
        };
        let mut inputs = BillingInputs {
            policies: vec![throttled, policy("org-w", "wall", 1, "requests", 100, Enforcement::HARD)],
            ..BillingInputs::default()
        };
        inputs.usage.insert(key("org-t", "requests"), 130);
        inputs.usage.insert(key("org-w", "requests"), 130);
        assert_eq!(
            cells(&rows(period, &inputs)),
            ["org-t,requests,130,throttled,1,100,0,100,,,0", "org-w,requests,130,wall,1,100,0,100,,30,0"]
        );
    }

    // A metric a gauge quota names, the tenant's own or the plan's, is a level: its readings summed
    // over the month are no consumption, so it has no row, not even for the tenant's own MONTH quota of it or late
    // adjustments of it; a version that stopped being a gauge still marks the metric. The tenant's other metrics,
    // and another tenant's same metric when no plan gauge names it, are billed as ever.
    #[test]
    fn a_gauge_metric_is_not_billed() {
        let period: Period = "2026-11".parse().unwrap();
        let gauge = |tenant: &str, id: &str, version: i32, metric: &str| PolicyEvent {
            window: Window::DAY,
            violation: Some(Violation::NO_INSERTS),
            window_seconds: None,
            cycle_anchor: None,
            ..policy(tenant, id, version, metric, 1_000, Enforcement::HARD)
        };
        let mut inputs = BillingInputs {
            policies: vec![
                gauge("org-g", "storage", 1, "storage_bytes"),
                policy("org-g", "storage-month", 1, "storage_bytes", 10, Enforcement::SOFT),
                policy("org-g", "tokens", 1, "tokens", 100, Enforcement::SOFT),
                gauge("org-h", "storage", 1, "storage_bytes"),
                PolicyEvent { violation: None, ..gauge("org-h", "storage", 2, "storage_bytes") },
                gauge("*", "plan-rows", 1, "rows"),
            ],
            ..BillingInputs::default()
        };
        inputs.usage.insert(key("org-g", "storage_bytes"), 30 * 900);
        inputs.usage.insert(key("org-g", "tokens"), 120);
        inputs.late.insert(key("org-g", "storage_bytes"), 900);
        inputs.usage.insert(key("org-h", "storage_bytes"), 30 * 900);
        inputs.usage.insert(key("org-o", "storage_bytes"), 7);
        inputs.usage.insert(key("org-o", "rows"), 5);
        assert_eq!(
            cells(&rows(period, &inputs)),
            ["org-g,tokens,120,tokens,1,100,0,100,20,,0", "org-o,storage_bytes,7,,,,,,,,0"]
        );
    }

    // Proves a month whose billing cycles end at local midnight in Los Angeles cannot close before that midnight
    // (08:00 UTC on the 1st), and that an anchor moved mid-cycle leaves that cycle whole and makes a short one, from
    // its end to the new anchor's first start, billed in the month it ends in.
    #[test]
    fn a_cycle_is_billed_in_the_month_it_ends_in_its_zone() {
        let cycle = |version: i32, anchor: &str, effective_from: &str| PolicyEvent {
            window: Window::BILLING_CYCLE,
            cycle_anchor: Some(at(anchor)),
            time_zone: Some("America/Los_Angeles".into()),
            effective_from: at(effective_from),
            ..policy("org-la", "cycle", version, "tokens", 100, Enforcement::SOFT)
        };
        let first = cycle(1, "2026-01-01T08:00:00Z", "2026-01-01T08:00:00Z");
        let november: Period = "2026-11".parse().unwrap();
        let keys = || [("org-la".to_string(), "tokens".to_string())];
        let policies = [first.clone()];
        let unended = unended_cycle(&policies, keys(), november, at("2026-12-01T03:00:00Z"));
        assert_eq!(unended, Some(("org-la".into(), "cycle".into(), at("2026-12-01T08:00:00Z"))));
        assert_eq!(unended_cycle(&policies, keys(), november, at("2026-12-01T08:00:00Z")), None);
        let index = PolicyIndex::new(policies.to_vec());
        assert_eq!(
            cycles_billed(&index, "org-la", "tokens", november),
            [(at("2026-11-01T07:00:00Z"), at("2026-12-01T08:00:00Z"))],
            "November in Los Angeles: PDT to PST"
        );
        // Moved to the 10th on November 20th: December bills December 1st to 10th, and the 10th to January 10th.
        let moved = cycle(2, "2026-01-10T08:00:00Z", "2026-11-20T00:00:00Z");
        let index = PolicyIndex::new(vec![first, moved]);
        let december: Period = "2026-12".parse().unwrap();
        assert_eq!(
            cycles_billed(&index, "org-la", "tokens", december),
            [(at("2026-12-01T08:00:00Z"), at("2026-12-10T08:00:00Z"))],
            "the short cycle ends in December; the next, on January 10th, in January"
        );
        assert_eq!(
            cycles_billed(&index, "org-la", "tokens", "2027-01".parse().unwrap()),
            [(at("2026-12-10T08:00:00Z"), at("2027-01-10T08:00:00Z"))]
        );
    }
}
