//! The plan of a reconciliation run: every adjustment to write, computed from the ledger's reads by the pure
//! rules of this crate, before anything is written. The report prints it; `apply` records it.

use std::collections::{BTreeSet, HashMap, HashSet};

use rustc_hash::{FxHashMap, FxHashSet};

use ledger::{Ledger, Period, PeriodClose, SequencedReservation, UsageRow};
use schemas::*;
use serde::Serialize;

pub use crate::concern::ADJUSTMENT_SOURCE;

use crate::after_close::{AfterClose, after_close};
use crate::alerts;
use crate::concern::{self, Concern, Members, Recorded, Truth};
use crate::error::ReconcileError;
use crate::gauge::{self, GaugeOverLimit, Reading};
use crate::incremental::Coverage;
use crate::inputs::PlanInputs;
use crate::names::{Interner, NAMES_NONE, WindowKey};
use crate::rolling;
use rules::overshoot::{self, Consumed};
use rules::policy::{Candidates, PolicyIndex};
use rules::reservation::{self, Verdict};

/// Rows read between two progress reports.
pub const PROGRESS_EVERY_ROWS: u64 = 100_000;

/// Where a run is, for a progress display.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Judging reservations.
    Reservations {
        /// Reservation events read so far.
        events: u64,
    },
    /// Summing consumption per window.
    Usage {
        /// UsageEvents read so far.
        events: u64,
    },
    /// Naming the events that crossed a limit (a second pass over usage).
    Refs {
        /// UsageEvents read so far in this pass.
        events: u64,
    },
}

/// What a run read and judged.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PlanCounts {
    /// Counted UsageEvents read.
    pub usage_events: u64,
    /// Recorded reservation events read.
    pub reservation_events: u64,
    /// Reservations judged this run (contract §5 "What a run covers": its RESERVE expired before `as_of`).
    pub reservations_judged: u64,
    /// Leases that expired unreleased by `as_of`, per tenant: workers that died or hung holding a
    /// slot. Each is also a RESERVATION_EXPIRED adjustment of amount 1.
    pub leases_expired: std::collections::BTreeMap<String, u64>,
    /// The windows of gauge quotas in which a tenant's level stood above the effective limit for some time, up to
    /// `as_of` ([`crate::gauge`]), sorted by tenant, metric, policy_id and window: how long the hook
    /// refused what each violation covers. A report only: no adjustment, and the run stays clean.
    pub gauges_over_limit: Vec<GaugeOverLimit>,
    /// What hooks allowed while their ledger refused writes (decisions of reason FAIL_OPEN), before
    /// `as_of`, per tenant and metric: its consumption counts like any other, this says how much of it there was.
    pub allowed_open: Vec<ledger::AllowedOpen>,
    /// The alerts recorded in the day before `as_of`, `[as_of - 24 h, as_of)`, in ledger order, then those the run
    /// writes: what reached a threshold, a share, an age or a deny rate since the last nightly run.
    /// A report: the run stays clean.
    pub alerts: Vec<schemas::AlertEvent>,
    /// COMMITs counted as consumption.
    pub valid_commits: u64,
    /// Windows of HARD and SHADOW policies, ended by `as_of`, with consumption.
    pub windows_judged: u64,
    /// Conflicting duplicates read.
    pub conflicting_copies: u64,
    /// Tenants whose usage the run read: every tenant with usage for a full run, those touched since the last run for
    /// an incremental one.
    pub tenants_read: u64,
    /// Adjustments recorded before this run: `apply` refuses the plan if another run recorded some since.
    pub adjustments_before: u64,
    /// Milliseconds spent in each step, for the benchmark and for an operator wondering where a night went.
    pub step_ms: Vec<(&'static str, u64)>,
}

/// How far back from `as_of` a run reports the alerts hooks wrote: a day, the span of a nightly run.
pub const ALERTS_REPORTED_MICROS: i64 = 24 * 3_600 * 1_000_000;

/// Every adjustment a run writes, with what it was computed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// `reconcile-<as_of>-w<watermark>`: the same ledger and `--as-of` give the same run.
    pub run_id: String,
    /// The instant the run judges as of (`--as-of`): windows and reservations ended by then.
    pub as_of: Timestamp,
    /// The last ledger sequence number the plan read.
    pub watermark: u64,
    /// Sorted by kind, then what they are about.
    pub adjustments: Vec<AdjustmentEvent>,
    /// The alerts the run found that no writer recorded yet ([`crate::alerts`]), by alert_id: `apply` records them
    /// after the adjustments. They leave the run clean: an alert warns, it corrects nothing.
    pub alerts: Vec<AlertEvent>,
    /// What the run read and judged.
    pub counts: PlanCounts,
    /// Policies and grants recorded after the close of a month they would change, for finance to settle by hand
    /// (`--json`: `after_close`); read by [`plan()`], empty from [`plan_from`].
    pub after_close: Vec<AfterClose>,
    /// What the run read: every event, or the tenants touched since the last run ([`crate::incremental`]).
    pub coverage: Coverage,
}

impl Plan {
    /// Whether the run found nothing to adjust (`reconcile` exits 0). What the counts report beside the adjustments,
    /// leases expired and gauges over their limit among them, leaves it clean by itself: a gauge over its limit is
    /// the hook enforcing, not a discrepancy of the ledger, and a rerun with the same `as_of`, which reports it again,
    /// must be clean.
    pub fn is_clean(&self) -> bool {
        self.adjustments.is_empty()
    }

    /// Whether `apply` has nothing to record: no adjustment and no alert.
    pub fn records_nothing(&self) -> bool {
        self.adjustments.is_empty() && self.alerts.is_empty()
    }
}

/// One closed period's consumption for a tenant and metric, by interned names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct LateKey {
    tenant: u32,
    metric: u32,
    period: Period,
}

/// A closed period's consumption for a tenant and metric: now, at its close, and the events that differ
/// (event time, ledger sequence, event_id).
type LateSums = (i64, i64, Vec<(Timestamp, u64, String)>);

/// Consumption, as the window and late-usage rules see it (names interned; the project and API key only while a
/// policy of their scope is recorded, [`Run::scopes`]).
struct Consumption<'r> {
    seq: u64,
    tenant: u32,
    subject: Option<u32>,
    project: Option<u32>,
    api_key: Option<u32>,
    metric: u32,
    occurred_at: Timestamp,
    quantity: i64,
    event_id: &'r str,
    /// Counted now (a UsageEvent, or a COMMIT valid now).
    counted_now: bool,
    /// Counted at the close of its period, when that period is closed (entry up to the close's watermark and,
    /// for a COMMIT, its valid close then).
    counted_at_close: bool,
}

impl Consumption<'_> {
    /// Its member of `scope`, as a window key holds it: none for TENANT; the subject, project or API key it names,
    /// [`NAMES_NONE`] when it names none.
    fn member(&self, scope: Scope) -> Option<u32> {
        let named = match scope {
            Scope::TENANT => return None,
            Scope::SUBJECT => self.subject,
            Scope::PROJECT => self.project,
            Scope::API_KEY => self.api_key,
        };
        Some(named.unwrap_or(NAMES_NONE))
    }
}

/// A COMMIT that is consumption now or was at its period's close (names interned: there may be millions).
struct Commit {
    seq: u64,
    tenant: u32,
    subject: Option<u32>,
    project: Option<u32>,
    api_key: Option<u32>,
    metric: u32,
    occurred_at: Timestamp,
    amount: i64,
    event_id: String,
    counted_now: bool,
    counted_at_close: bool,
}

/// Everything the run holds in memory: small tables, and one number per window.
struct Run<'p> {
    as_of: Timestamp,
    settings: alerts::AlertSettings,
    policies: &'p PolicyIndex,
    grants: HashMap<(String, String), Vec<GrantEvent>>,
    closes: Vec<PeriodClose>,
    recorded: HashMap<Concern, Recorded>,
    names: Interner,
    /// Whether any PROJECT (API_KEY) policy is recorded: until one is, no window counts by project (API key), and the
    /// usage stream's projects (API keys) are not interned, which would cost a lookup per event for nothing.
    scopes: [bool; 2],
    /// The policy groups of each (tenant, metric), looked up once.
    candidates: FxHashMap<(u32, u32), Candidates<'p>>,
    windows: FxHashMap<WindowKey, (i64, &'p PolicyEvent)>,
    /// The scopes of the ROLLING versions that may apply to each (tenant, metric), looked up once: a consumption of
    /// it joins its member's stream of each.
    rolling_scopes: FxHashMap<(u32, u32), Vec<Scope>>,
    /// The consumption before `as_of` of each member of a ROLLING policy, by (tenant, metric, scope, member): a rolling
    /// window ends at every instant, so it is judged from the events, not from sums per window.
    rolling: FxHashMap<(u32, u32, Scope, Option<u32>), Vec<Consumed>>,
    late: FxHashMap<LateKey, LateSums>,
    /// Whether each (tenant, metric) is a level (a gauge quota of the tenant or the plan names it), looked up once.
    levels: FxHashMap<(u32, u32), bool>,
    /// Every meter version other than SUM ([`Run::is_metered`]).
    meters: Vec<MeterEvent>,
    /// Whether each (tenant, metric) is metered ([`Run::is_metered`]), looked up once.
    metered: FxHashMap<(u32, u32), bool>,
    /// The readings before `as_of` of each (tenant, metric) that is a level: held until the stream is read, since
    /// a level holds until the next reading by event time and the stream is in ledger order. Gauge readings are a
    /// tenant's periodic report of a level, few beside its usage, and 24 bytes each here.
    readings: FxHashMap<(u32, u32), Vec<Reading>>,
    /// The consumption before `as_of` of each window alerted ([`crate::alerts`]): of a policy whose windows are
    /// alerted, ending after [`alerts::WINDOWS_ALERTED_MICROS`] before `as_of`.
    alert_windows: FxHashMap<WindowKey, (i64, &'p PolicyEvent)>,
    /// The windows alerts judge that an event falls in: a buffer reused for each event.
    alert_keys: Vec<(WindowKey, &'p PolicyEvent)>,
    /// Each subject's consumption in those of [`Run::alert_windows`] whose policy sets `alert_subject_share`.
    shares: FxHashMap<(WindowKey, u32), i64>,
    /// The alerts found, recorded or not.
    alerts: Vec<AlertEvent>,
    /// Truths that write an adjustment (and windows whose refs are still to be named).
    truths: Vec<Truth>,
    /// Window and late-usage concerns judged this run that have recorded adjustments.
    judged: HashSet<Concern>,
    /// The tenants whose usage the run read.
    tenants_read: FxHashSet<u32>,
    counts: PlanCounts,
}

/// Computes the plan of `reconcile --as-of as_of` over everything the ledger holds, in one read snapshot.
pub fn plan(ledger: &Ledger, as_of: Timestamp, progress: &mut dyn FnMut(Progress)) -> Result<Plan, ReconcileError> {
    plan_with(ledger, as_of, alerts::AlertSettings::default(), progress)
}

/// [`plan()`] with the alert settings an operator gave.
pub fn plan_with(
    ledger: &Ledger,
    as_of: Timestamp,
    settings: alerts::AlertSettings,
    progress: &mut dyn FnMut(Progress),
) -> Result<Plan, ReconcileError> {
    let snapshot = ledger.read_snapshot()?;
    let mut plan = plan_from_with(ledger, as_of, settings, progress)?;
    plan.after_close = after_close(ledger)?;
    snapshot.finish()?;
    Ok(plan)
}

/// Computes the plan of `reconcile --as-of as_of` over `inputs`: pure, given the same inputs it gives the same
/// plan. The usage stream is read twice when a window's adjustment must name the events that crossed its limit.
pub fn plan_from(
    inputs: &impl PlanInputs,
    as_of: Timestamp,
    progress: &mut dyn FnMut(Progress),
) -> Result<Plan, ReconcileError> {
    plan_from_with(inputs, as_of, alerts::AlertSettings::default(), progress)
}

/// [`plan_from`] with the alert settings an operator gave.
pub fn plan_from_with(
    inputs: &impl PlanInputs,
    as_of: Timestamp,
    settings: alerts::AlertSettings,
    progress: &mut dyn FnMut(Progress),
) -> Result<Plan, ReconcileError> {
    plan_judging(inputs, as_of, settings, Judged::Everything, progress)
}

/// [`plan_from_with`] over the tenants `tenants` alone, whose events `inputs` hold: the adjustments and alerts of a
/// full run that concern them. Only their windows and periods with recorded adjustments are taken back when nothing
/// is consumed in them any more; conflicting copies, deny rates and what the counts report of the whole ledger are
/// judged whole.
pub(crate) fn plan_of_tenants(
    inputs: &impl PlanInputs,
    as_of: Timestamp,
    settings: alerts::AlertSettings,
    tenants: &BTreeSet<String>,
    progress: &mut dyn FnMut(Progress),
) -> Result<Plan, ReconcileError> {
    plan_judging(inputs, as_of, settings, Judged::Tenants(tenants), progress)
}

/// The LATE_USAGE adjustments a run as of `as_of` would make, and nothing else (what a close records of the months
/// closed before it): the reservations judged and the consumption summed as a run does, without judging windows,
/// gauges, rolling limits or alerts, and without the second read that names the events crossing a limit. Its
/// adjustments are exactly the LATE_USAGE ones of [`plan()`] as of the same instant.
pub fn late_usage(ledger: &Ledger, as_of: Timestamp) -> Result<Plan, ReconcileError> {
    let snapshot = ledger.read_snapshot()?;
    let plan = plan_judging(ledger, as_of, alerts::AlertSettings::default(), Judged::LateUsage, &mut |_| {})?;
    snapshot.finish()?;
    Ok(plan)
}

/// What a plan judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Judged<'t> {
    /// Everything a nightly run judges.
    Everything,
    /// Everything a nightly run judges of these tenants, whose events alone the inputs hold.
    Tenants(&'t BTreeSet<String>),
    /// The late usage of closed periods alone.
    LateUsage,
}

fn plan_judging(
    inputs: &impl PlanInputs,
    as_of: Timestamp,
    settings: alerts::AlertSettings,
    judged: Judged<'_>,
    progress: &mut dyn FnMut(Progress),
) -> Result<Plan, ReconcileError> {
    let watermark = inputs.watermark()?;
    let policies = PolicyIndex::new(inputs.policies()?).with_assignments(&inputs.plan_assignments()?);
    let mut clock = std::time::Instant::now();
    let (recorded, adjustments_before) =
        concern::recorded(inputs, &|tenant, metric, policy_id| policies.scope_of(tenant, metric, policy_id))?;
    let mut run = Run {
        as_of,
        settings,
        policies: &policies,
        grants: inputs.grants()?,
        closes: inputs.period_closes()?,
        recorded,
        names: Interner::default(),
        scopes: [Scope::PROJECT, Scope::API_KEY].map(|scope| policies.policies().iter().any(|p| p.scope == scope)),
        candidates: FxHashMap::default(),
        windows: FxHashMap::default(),
        rolling_scopes: FxHashMap::default(),
        rolling: FxHashMap::default(),
        late: FxHashMap::default(),
        levels: FxHashMap::default(),
        meters: inputs.meters()?.into_iter().filter(|m| m.aggregation != Aggregation::SUM).collect(),
        metered: FxHashMap::default(),
        readings: FxHashMap::default(),
        alert_windows: FxHashMap::default(),
        alert_keys: Vec::new(),
        shares: FxHashMap::default(),
        alerts: Vec::new(),
        truths: Vec::new(),
        judged: HashSet::new(),
        tenants_read: FxHashSet::default(),
        counts: PlanCounts {
            adjustments_before,
            allowed_open: inputs.allowed_open(as_of)?,
            alerts: inputs.alerts_between(Timestamp(as_of.micros() - ALERTS_REPORTED_MICROS), as_of)?,
            ..PlanCounts::default()
        },
    };
    let mut step = |run: &mut Run<'_>, name: &'static str| {
        run.counts.step_ms.push((name, clock.elapsed().as_millis() as u64));
        clock = std::time::Instant::now();
    };
    step(&mut run, "read policies, grants, adjustments");
    let commits = run.judge_reservations(inputs, progress)?;
    step(&mut run, "judge reservations");
    if judged == Judged::LateUsage {
        run.sum_consumption(inputs, &commits, progress)?;
        run.judge_late_usage();
        run.take_back_vanished(|concern| matches!(concern, Concern::LateUsage { .. }));
        // What judging the reservations found of them (expiries, refused transitions) and their age's alerts are
        // the nightly run's.
        run.truths.retain(|truth| matches!(truth.concern, Concern::LateUsage { .. }));
        run.alerts.clear();
        step(&mut run, "judge late usage");
        return Ok(run.into_plan(run_id(as_of, watermark), watermark));
    }
    run.judge_conflicts(inputs)?;
    step(&mut run, "judge conflicting duplicates");
    run.sum_consumption(inputs, &commits, progress)?;
    step(&mut run, "sum consumption per window");
    run.judge_gauges();
    step(&mut run, "judge gauges over their limits");
    let (mut flagged, throttled) = run.judge_windows();
    run.judge_throttled(inputs, &commits, throttled, &mut flagged, progress)?;
    run.judge_rolling(inputs, &commits)?;
    run.judge_late_usage();
    match judged {
        Judged::Tenants(tenants) => {
            run.take_back_vanished(|concern| concern.tenant().is_some_and(|t| tenants.contains(t)))
        }
        _ => run.take_back_vanished(|_| true),
    }
    step(&mut run, "judge windows and late usage");
    run.name_crossers(inputs, &commits, &flagged, progress)?;
    step(&mut run, "name the events that crossed limits");
    run.judge_alert_windows();
    run.judge_deny_rates(inputs)?;
    let recorded_alerts = inputs.alert_ids()?;
    run.alerts.retain(|a| !recorded_alerts.contains(&a.alert_id));
    step(&mut run, "judge alerts");
    Ok(run.into_plan(run_id(as_of, watermark), watermark))
}

/// `reconcile-<as_of>-w<watermark>`: the same ledger and `--as-of` give the same run.
pub(crate) fn run_id(as_of: Timestamp, watermark: u64) -> String {
    format!("reconcile-{as_of}-w{watermark}")
}

impl<'p> Run<'p> {
    /// Keeps a truth when it writes an adjustment; remembers judged window and period concerns that have some.
    fn keep(&mut self, truth: Truth) {
        let recorded = self.recorded.get(&truth.concern).copied();
        if recorded.is_some() && matches!(truth.concern, Concern::Window { .. } | Concern::LateUsage { .. }) {
            self.judged.insert(truth.concern.clone());
        }
        if concern::delta(&truth, recorded.unwrap_or_default()).is_some() {
            self.truths.push(truth);
        }
    }

    fn judge_reservations(
        &mut self,
        inputs: &impl PlanInputs,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<Vec<Commit>, ReconcileError> {
        let mut commits = Vec::new();
        let mut events = 0;
        self.counts.reservation_events = inputs.for_each_reservation(|group| {
            events += group.len() as u64;
            if events / PROGRESS_EVERY_ROWS != (events - group.len() as u64) / PROGRESS_EVERY_ROWS {
                progress(Progress::Reservations { events });
            }
            self.judge_reservation(group, &mut commits);
        })?;
        self.counts.valid_commits = commits.iter().filter(|c| c.counted_now).count() as u64;
        Ok(commits)
    }

    fn judge_reservation(&mut self, group: &[SequencedReservation], commits: &mut Vec<Commit>) {
        let events: Vec<(u64, &ReservationEvent)> = group.iter().map(|(seq, e)| (*seq, e)).collect();
        let verdict = reservation::judge(&events, self.as_of);
        self.collect_commits(group, &events, &verdict, commits);
        self.alerts.extend(alerts::open_too_long(group, &verdict, self.as_of, self.settings.open_too_long_micros));
        // Not judged yet (contract §5 "What a run covers"): nothing new is reported of it, but what earlier runs
        // reported of its events follows the current verdict. A late RESERVE that makes a refused COMMIT valid
        // takes the REFUSED_TRANSITION back in the run that starts counting the COMMIT, not once the new RESERVE
        // expires: meanwhile the ledger would count the COMMIT and call it refused.
        let judged = self.is_judged(group, &verdict);
        if judged {
            self.counts.reservations_judged += 1;
            if verdict.expired.is_some()
                && verdict.fencing_token.is_some()
                && let Some((_, reserve)) = verdict.reserve.and_then(|seq| group.iter().find(|(s, _)| *s == seq))
            {
                *self.counts.leases_expired.entry(reserve.header.tenant.clone()).or_default() += 1;
            }
        }
        // Every event gets its refused-transition concern and every RESERVE its expiry concern, 0 where they do
        // not apply: when a RESERVE that happened earlier arrives late and becomes "the" RESERVE, the verdicts
        // about the one it displaced are taken back.
        for (seq, event) in group {
            let refused = verdict.refused.iter().any(|(s, _)| s == seq);
            let amount = if refused { event.amount } else { 0 };
            let concern = Concern::Refused { event_id: event.header.event_id.clone() };
            if judged || self.recorded.contains_key(&concern) {
                self.keep(truth_of_event(concern, &event.header, amount, refused));
            }
            if event.action == ReservationAction::RESERVE {
                let expired = verdict.reserve == Some(*seq) && verdict.expired.is_some();
                let amount = if expired { verdict.expired.unwrap_or(0) } else { 0 };
                let concern = Concern::Expiry { reserve_event_id: event.header.event_id.clone() };
                if judged || self.recorded.contains_key(&concern) {
                    self.keep(truth_of_event(concern, &event.header, amount, expired));
                }
            }
        }
    }

    /// A reservation is judged once the `expires_at` of its RESERVE (the first by event time; a lease's as its renewals
    /// moved it) is before `as_of`; one with no RESERVE once all of its events happened before `as_of` (contract §5
    /// "What a run covers").
    fn is_judged(&self, group: &[SequencedReservation], verdict: &Verdict) -> bool {
        match verdict.reserve.and_then(|seq| group.iter().find(|(s, _)| *s == seq)) {
            Some(_) => verdict.expires_at.is_some_and(|expiry| expiry < self.as_of),
            None => group.iter().all(|(_, e)| e.header.occurred_at < self.as_of),
        }
    }

    fn collect_commits(
        &mut self,
        group: &[SequencedReservation],
        events: &[(u64, &ReservationEvent)],
        verdict: &Verdict,
        commits: &mut Vec<Commit>,
    ) {
        let valid_now = verdict.close.filter(|(_, action, _)| *action == ReservationAction::COMMIT).map(|c| c.0);
        for (seq, event) in group.iter().filter(|(_, e)| e.action == ReservationAction::COMMIT) {
            let counted_now = valid_now == Some(*seq);
            let counted_at_close = self.close_of(event.header.occurred_at).is_some_and(|close| {
                let seen: Vec<(u64, &ReservationEvent)> =
                    events.iter().filter(|(s, _)| *s <= close.watermark).copied().collect();
                let then = reservation::judge(&seen, self.as_of);
                then.close.is_some_and(|(s, action, _)| s == *seq && action == ReservationAction::COMMIT)
            });
            if counted_now || counted_at_close {
                let header = &event.header;
                let (project, api_key) = self.scope_members(header.project.as_deref(), header.api_key.as_deref());
                commits.push(Commit {
                    seq: *seq,
                    tenant: self.names.id(&header.tenant),
                    subject: header.subject.as_deref().map(|s| self.names.id(s)),
                    project,
                    api_key,
                    metric: self.names.id(&header.metric),
                    occurred_at: header.occurred_at,
                    amount: event.amount,
                    event_id: header.event_id.clone(),
                    counted_now,
                    counted_at_close,
                });
            }
        }
    }

    /// The close of the period containing `t`, when that period is closed: by its own close, or, before the
    /// ledger's first close, with it (`ledger::covering_close`).
    fn close_of(&self, t: Timestamp) -> Option<PeriodClose> {
        if self.closes.is_empty() {
            return None;
        }
        ledger::covering_close(&self.closes, Period::containing(t))
    }

    fn judge_conflicts(&mut self, inputs: &impl PlanInputs) -> Result<(), ReconcileError> {
        let copies = inputs.conflicting_copies()?;
        self.counts.conflicting_copies = copies.len() as u64;
        let mut ordinals: HashMap<String, u32> = HashMap::new();
        for copy in copies {
            let ordinal = ordinals.entry(copy.header.event_id.clone()).or_insert(0);
            *ordinal += 1;
            let concern = Concern::Conflict { event_id: copy.header.event_id.clone(), ordinal: *ordinal };
            self.keep(truth_of_event(concern, &copy.header, copy.quantity, true));
        }
        Ok(())
    }

    fn sum_consumption(
        &mut self,
        inputs: &impl PlanInputs,
        commits: &[Commit],
        progress: &mut dyn FnMut(Progress),
    ) -> Result<(), ReconcileError> {
        let mut keys = Vec::new();
        let mut events = 0;
        self.counts.usage_events = inputs.for_each_usage(|row| {
            events += 1;
            if events % PROGRESS_EVERY_ROWS == 0 {
                progress(Progress::Usage { events });
            }
            let counted_at_close = self.close_of(row.occurred_at).is_some_and(|c| row.seq <= c.watermark);
            let c = self.consumption_of_usage(&row, counted_at_close);
            self.tenants_read.insert(c.tenant);
            if self.is_level(c.tenant, c.metric) {
                // A correction of a reading is no reading: a level is billed by no period, and a gauge judged by the
                // levels its producers report.
                if !row.correction {
                    self.read_level(&c);
                }
            } else if !self.is_metered(c.tenant, c.metric) {
                self.add(&c, &mut keys);
            }
        })?;
        for commit in commits {
            if !self.is_level(commit.tenant, commit.metric) && !self.is_metered(commit.tenant, commit.metric) {
                self.add(&consumption_of_commit(commit), &mut keys);
            }
        }
        self.counts.tenants_read = self.tenants_read.len() as u64;
        Ok(())
    }

    /// Whether `tenant`'s `metric` is a level rather than consumption: a gauge quota of the tenant or of the plan names
    /// it, in any version ([`PolicyIndex::gauge_metrics`], the test the bill applies). Its usage events are readings,
    /// summed by no window and no period: a level of 100 reported hourly is not 2,400 consumed a day, and a late
    /// reading changes no bill, since the bill leaves the metric out.
    fn is_level(&mut self, tenant: u32, metric: u32) -> bool {
        let (policies, names) = (self.policies, &self.names);
        *self
            .levels
            .entry((tenant, metric))
            .or_insert_with(|| policies.gauge_metrics(names.name(tenant)).contains(names.name(metric)))
    }

    /// Whether `tenant`'s `metric` is metered (a meter other than SUM of the tenant or of `*` names it, in any
    /// version): its windows count events or members, which the hook enforces and the bill aggregates, not the sum of
    /// amounts a window adds up here; it is left out of windows and late usage, as the bill leaves it out of late usage.
    fn is_metered(&mut self, tenant: u32, metric: u32) -> bool {
        let (names, meters) = (&self.names, &self.meters);
        *self.metered.entry((tenant, metric)).or_insert_with(|| {
            let (tenant, metric) = (names.name(tenant), names.name(metric));
            meters.iter().any(|m| {
                m.header.metric == metric
                    && (m.header.tenant == tenant || m.header.tenant == rules::policy::PLAN_DEFAULT_TENANT)
            })
        })
    }

    /// Keeps a reading of a level, when it is before `as_of`.
    fn read_level(&mut self, c: &Consumption<'_>) {
        if c.occurred_at < self.as_of {
            let reading = Reading { occurred_at: c.occurred_at, seq: c.seq, level: c.quantity };
            self.readings.entry((c.tenant, c.metric)).or_default().push(reading);
        }
    }

    /// The windows of gauge quotas each level stood above the effective limit in ([`gauge::judge`]).
    fn judge_gauges(&mut self) {
        let readings = std::mem::take(&mut self.readings);
        self.counts.gauges_over_limit = gauge::judge(readings, &self.names, self.policies, &self.grants, self.as_of);
    }

    /// Adds one consumption to the windows it falls in and to its closed period.
    fn add(&mut self, c: &Consumption<'_>, keys: &mut Vec<(WindowKey, &'p PolicyEvent)>) {
        if c.counted_now {
            let mut alerted = std::mem::take(&mut self.alert_keys);
            self.window_keys(c, keys, &mut alerted);
            for (key, policy) in keys.drain(..) {
                let entry = self.windows.entry(key).or_insert((0, policy));
                entry.0 = entry.0.checked_add(c.quantity).expect("consumption fits in i64");
            }
            for (key, policy) in alerted.drain(..) {
                let entry = self.alert_windows.entry(key).or_insert((0, policy));
                entry.0 = entry.0.checked_add(c.quantity).expect("consumption fits in i64");
                if let Some(subject) = c.subject.filter(|_| alerts::subject_share(policy).is_some()) {
                    *self.shares.entry((key, subject)).or_default() += c.quantity;
                }
            }
            self.alert_keys = alerted;
            if c.occurred_at < self.as_of {
                self.add_rolling(c);
            }
        }
        if let Some(close) = self.close_of(c.occurred_at).filter(|close| close.period.end() <= self.as_of) {
            let key = LateKey { tenant: c.tenant, metric: c.metric, period: close.period };
            let late = self.late.entry(key).or_default();
            if c.counted_now {
                late.0 += c.quantity;
            }
            if c.counted_at_close {
                late.1 += c.quantity;
            }
            if c.counted_now != c.counted_at_close {
                late.2.push((c.occurred_at, c.seq, c.event_id.to_string()));
            }
        }
    }

    /// The judged windows (ended by `as_of`, HARD or SHADOW) a consumption falls in, with the policy in force; and in
    /// `alerted` the windows it falls in that alerts judge ([`Run::alert_windows`]).
    fn window_keys(
        &mut self,
        c: &Consumption<'_>,
        keys: &mut Vec<(WindowKey, &'p PolicyEvent)>,
        alerted: &mut Vec<(WindowKey, &'p PolicyEvent)>,
    ) {
        if c.occurred_at >= self.as_of {
            return;
        }
        let policies: &'p PolicyIndex = self.policies;
        let names = &self.names;
        let candidates = *self
            .candidates
            .entry((c.tenant, c.metric))
            .or_insert_with(|| policies.candidates(names.name(c.tenant), names.name(c.metric)));
        if candidates.is_empty() {
            return;
        }
        let alerted_after = self.as_of.micros() - alerts::WINDOWS_ALERTED_MICROS;
        for a in candidates.applicable(c.occurred_at) {
            let is_alerted = a.window_end.micros() > alerted_after && rules::alert::alerts_windows(a.policy);
            // A ROLLING window ends at every instant: judged from the events ([`Run::judge_rolling`]).
            let is_judged = a.window_end <= self.as_of
                && overshoot::excess_kind(a.policy.enforcement).is_some()
                && !a.policy.is_throttle()
                && a.policy.window != Window::ROLLING;
            if !is_alerted && !is_judged {
                continue;
            }
            let key = WindowKey {
                tenant: c.tenant,
                metric: c.metric,
                policy_id: self.names.id(&a.policy.policy_id),
                scope: a.policy.scope,
                member: c.member(a.policy.scope),
                start: a.window_start.micros(),
                end: a.window_end.micros(),
            };
            if is_alerted {
                alerted.push((key, a.policy));
            }
            if is_judged {
                keys.push((key, a.policy));
            }
        }
    }

    /// Adds a consumption to its member's stream of each scope a ROLLING version of its tenant's (or the plan's)
    /// policies of its metric has.
    fn add_rolling(&mut self, c: &Consumption<'_>) {
        let policies: &'p PolicyIndex = self.policies;
        let names = &self.names;
        let scopes = self.rolling_scopes.entry((c.tenant, c.metric)).or_insert_with(|| {
            let (tenant, metric) = (names.name(c.tenant), names.name(c.metric));
            let mut scopes: Vec<Scope> = policies
                .policies()
                .iter()
                .filter(|p| p.window == Window::ROLLING && p.header.metric == metric)
                .filter(|p| p.header.tenant == tenant || p.header.tenant == rules::policy::PLAN_DEFAULT_TENANT)
                .map(|p| p.scope)
                .collect();
            scopes.sort();
            scopes.dedup();
            scopes
        });
        for scope in scopes.iter() {
            let consumed =
                Consumed { occurred_at: c.occurred_at, seq: c.seq, quantity: c.quantity, event_id: String::new() };
            self.rolling.entry((c.tenant, c.metric, *scope, c.member(*scope))).or_default().push(consumed);
        }
    }

    /// Truths of the days of ROLLING policies ([`rolling::judge`]).
    fn judge_rolling(&mut self, inputs: &impl PlanInputs, commits: &[Commit]) -> Result<(), ReconcileError> {
        if self.rolling.is_empty() {
            return Ok(());
        }
        let commit_ids: FxHashMap<u64, &str> = commits.iter().map(|c| (c.seq, c.event_id.as_str())).collect();
        let streams = std::mem::take(&mut self.rolling);
        let judging = rolling::Judging {
            as_of: self.as_of,
            names: &mut self.names,
            candidates: &self.candidates,
            grants: &self.grants,
            windows: &self.windows,
            recorded: &self.recorded,
        };
        let truths = rolling::judge(streams, judging, inputs, &commit_ids)?;
        self.counts.windows_judged += truths.len() as u64;
        for truth in truths {
            self.keep(truth);
        }
        Ok(())
    }

    /// THRESHOLD and SUBJECT_SHARE alerts of the windows alerts judge ([`alerts::judge_windows`]).
    fn judge_alert_windows(&mut self) {
        let (windows, shares) = (std::mem::take(&mut self.alert_windows), std::mem::take(&mut self.shares));
        let found = alerts::judge_windows(windows, shares, &self.names, &self.grants, self.as_of);
        self.alerts.extend(found);
    }

    /// DENY_RATE alerts of the version changes whose first hour ended in the week before `as_of`
    /// ([`alerts::judge_deny_rates`]).
    fn judge_deny_rates(&mut self, inputs: &impl PlanInputs) -> Result<(), ReconcileError> {
        let found = alerts::judge_deny_rates(inputs, self.policies.policies(), self.as_of)?;
        self.alerts.extend(found);
        Ok(())
    }

    /// A window key's member by name: none for TENANT and for what names no member.
    fn member_name(&self, member: Option<u32>) -> Option<String> {
        self.names.member(member)
    }

    fn window_concern(&self, key: &WindowKey, kind: AdjustmentKind) -> Concern {
        key.concern(&self.names, kind)
    }

    fn consumption_of_usage<'r>(&mut self, row: &UsageRow<'r>, counted_at_close: bool) -> Consumption<'r> {
        let (project, api_key) = self.scope_members(row.project, row.api_key);
        Consumption {
            seq: row.seq,
            tenant: self.names.id(row.tenant),
            subject: row.subject.map(|s| self.names.id(s)),
            project,
            api_key,
            metric: self.names.id(row.metric),
            occurred_at: row.occurred_at,
            quantity: row.quantity,
            event_id: row.event_id,
            counted_now: true,
            counted_at_close,
        }
    }

    /// A consumption's project and API key, interned while a policy of their scope is recorded, else none.
    fn scope_members(&mut self, project: Option<&str>, api_key: Option<&str>) -> (Option<u32>, Option<u32>) {
        let [projects, api_keys] = self.scopes;
        let project = project.filter(|_| projects).map(|p| self.names.id(p));
        let api_key = api_key.filter(|_| api_keys).map(|k| self.names.id(k));
        (project, api_key)
    }

    /// Truths of every window with consumption; returns the windows whose adjustment needs the events that
    /// crossed the limit, with their effective limit, and apart the windows of HARD quotas with a throttled overage
    /// whose consumption went beyond their effective limit (given with it): judged by [`Run::judge_throttled`],
    /// which needs their events.
    fn judge_windows(&mut self) -> (HashMap<WindowKey, i64>, HashMap<WindowKey, i64>) {
        let mut flagged = HashMap::new();
        let mut throttled = HashMap::new();
        let mut keys: Vec<WindowKey> = self.windows.keys().copied().collect();
        keys.sort();
        self.counts.windows_judged = keys.len() as u64;
        for key in keys {
            let (consumption, policy) = self.windows[&key];
            let kind = overshoot::excess_kind(policy.enforcement).expect("only HARD and SHADOW windows are summed");
            let tenant = self.names.name(key.tenant).to_string();
            let metric = self.names.name(key.metric).to_string();
            let member = self.member_name(key.member);
            let grants = self.grants.get(&(tenant.clone(), metric.clone())).map_or(&[][..], Vec::as_slice);
            let limit = overshoot::effective_limit(
                policy.limit,
                key.scope,
                member.as_deref(),
                grants,
                Timestamp(key.start),
                Timestamp(key.end),
            );
            let excess = overshoot::excess(consumption, limit);
            if excess > 0 && policy.overage_throttle().is_some() {
                throttled.insert(key, limit);
                continue;
            }
            self.keep_window(key, (tenant, member, metric), policy, (kind, excess, limit), &mut flagged);
        }
        (flagged, throttled)
    }

    /// Keeps the truth of window `key` under `policy`: an excess of `kind` (judged above `limit`, the sum whose
    /// crossers its adjustment names). A window whose adjustment is written joins `flagged` with that sum.
    fn keep_window(
        &mut self,
        key: WindowKey,
        (tenant, member, metric): (String, Option<String>, String),
        policy: &PolicyEvent,
        (kind, excess, limit): (AdjustmentKind, i64, i64),
        flagged: &mut HashMap<WindowKey, i64>,
    ) {
        let concern = self.window_concern(&key, kind);
        let recorded = self.recorded.get(&concern).copied().unwrap_or_default();
        let truth = Truth {
            concern,
            amount: excess,
            present: excess > 0,
            tenant,
            members: Members::of_window(key.scope, member),
            metric,
            policy_id: Some(policy.policy_id.clone()),
            refs: Vec::new(),
        };
        if excess > 0 && concern::delta(&truth, recorded).is_some() {
            flagged.insert(key, limit);
        }
        self.keep(truth);
    }

    /// Truths of the windows of HARD quotas with a throttled overage that went beyond their effective limit:
    /// beyond it the hook let the overage rate through on purpose, so the enforcement miss is
    /// only what passed the limit plus the allowance of [`overshoot::throttled_allowance`] from the first event
    /// beyond the limit. A window whose adjustment is written joins `flagged`, with that sum as its limit, so the
    /// events named are those beyond what the throttle allowed.
    fn judge_throttled(
        &mut self,
        inputs: &impl PlanInputs,
        commits: &[Commit],
        throttled: HashMap<WindowKey, i64>,
        flagged: &mut HashMap<WindowKey, i64>,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<(), ReconcileError> {
        if throttled.is_empty() {
            return Ok(());
        }
        let windows: FxHashSet<WindowKey> = throttled.keys().copied().collect();
        let mut consumed = self.consumed_in(inputs, commits, &windows, progress)?;
        let mut keys: Vec<WindowKey> = windows.into_iter().collect();
        keys.sort();
        for key in keys {
            let (consumption, policy) = self.windows[&key];
            let (rate, per) = policy.overage_throttle().expect("only throttled overages are given");
            let limit = throttled[&key];
            let items = consumed.get_mut(&key).map_or(&mut [][..], Vec::as_mut_slice);
            let beyond_from = overshoot::first_beyond(items, limit).unwrap_or(Timestamp(key.end));
            let allowed =
                limit.saturating_add(overshoot::throttled_allowance(rate, per, beyond_from, Timestamp(key.end)));
            let excess = overshoot::excess(consumption, allowed);
            let names = (
                self.names.name(key.tenant).to_string(),
                self.member_name(key.member),
                self.names.name(key.metric).to_string(),
            );
            self.keep_window(key, names, policy, (AdjustmentKind::OVERSHOOT, excess, allowed), flagged);
        }
        Ok(())
    }

    fn judge_late_usage(&mut self) {
        let mut keys: Vec<LateKey> = self.late.keys().copied().collect();
        keys.sort();
        for key in keys {
            let (now, at_close, mut late) = self.late.remove(&key).expect("a key of the map");
            late.sort();
            let period = key.period;
            let amount = now - at_close;
            let (tenant, metric) = (self.names.name(key.tenant).to_string(), self.names.name(key.metric).to_string());
            let concern = Concern::LateUsage {
                tenant: tenant.clone(),
                metric: metric.clone(),
                period_start: period.start(),
                period_end: period.end(),
            };
            let refs = late.into_iter().map(|(_, _, id)| id).collect();
            let members = Members::default();
            let truth = Truth { concern, amount, present: amount != 0, tenant, members, metric, policy_id: None, refs };
            self.keep(truth);
        }
    }

    /// Windows and periods with recorded adjustments but no consumption left (a COMMIT invalidated by a late
    /// close), of the concerns `of` judges: their truth is 0, so their adjustments are taken back.
    fn take_back_vanished(&mut self, of: impl Fn(&Concern) -> bool) {
        let mut vanished: Vec<Truth> = Vec::new();
        for concern in self.recorded.keys().filter(|c| !self.judged.contains(*c) && of(c)) {
            let (tenant, members, metric, policy_id, end) = match concern {
                Concern::Window { tenant, scope, member, metric, policy_id, window_end, .. } => {
                    (tenant, Members::of_window(*scope, member.clone()), metric, Some(policy_id.clone()), *window_end)
                }
                Concern::LateUsage { tenant, metric, period_end, .. } => {
                    (tenant, Members::default(), metric, None, *period_end)
                }
                _ => continue,
            };
            if end <= self.as_of {
                vanished.push(Truth {
                    concern: concern.clone(),
                    amount: 0,
                    present: false,
                    tenant: tenant.clone(),
                    members,
                    metric: metric.clone(),
                    policy_id,
                    refs: Vec::new(),
                });
            }
        }
        for truth in vanished {
            self.keep(truth);
        }
    }

    /// Second pass, only over windows whose adjustment is written: the events that crossed each limit.
    fn name_crossers(
        &mut self,
        inputs: &impl PlanInputs,
        commits: &[Commit],
        flagged: &HashMap<WindowKey, i64>,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<(), ReconcileError> {
        if flagged.is_empty() {
            return Ok(());
        }
        let windows: FxHashSet<WindowKey> = flagged.keys().copied().collect();
        let consumed = self.consumed_in(inputs, commits, &windows, progress)?;
        let commit_ids: FxHashMap<u64, &str> = commits.iter().map(|c| (c.seq, c.event_id.as_str())).collect();
        let mut refs_by_concern: HashMap<Concern, Vec<String>> = HashMap::new();
        for (key, mut items) in consumed {
            let limit = flagged[&key];
            let kind = overshoot::excess_kind(self.windows[&key].1.enforcement).expect("a judged window");
            let seqs = overshoot::crossing_seqs(&mut items, limit);
            let refs = inputs.event_ids(&seqs, &commit_ids)?;
            refs_by_concern.insert(self.window_concern(&key, kind), refs);
        }
        for truth in &mut self.truths {
            if let Some(refs) = refs_by_concern.remove(&truth.concern) {
                truth.refs = refs;
            }
        }
        Ok(())
    }

    /// What each of `windows` consumed, one more read of the usage stream (and the valid COMMITs): only (event time,
    /// sequence, quantity) per event, event_ids are looked up later for the crossers alone.
    fn consumed_in(
        &mut self,
        inputs: &impl PlanInputs,
        commits: &[Commit],
        windows: &FxHashSet<WindowKey>,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<FxHashMap<WindowKey, Vec<Consumed>>, ReconcileError> {
        let mut consumed: FxHashMap<WindowKey, Vec<Consumed>> = FxHashMap::default();
        let pairs: FxHashSet<(u32, u32)> = windows.iter().map(|k| (k.tenant, k.metric)).collect();
        let (mut keys, mut alerted) = (Vec::new(), Vec::new());
        let mut collect = |run: &mut Run<'p>, c: &Consumption<'_>| {
            if !c.counted_now || !pairs.contains(&(c.tenant, c.metric)) {
                return;
            }
            run.window_keys(c, &mut keys, &mut alerted);
            alerted.clear();
            for (key, _) in keys.drain(..) {
                if windows.contains(&key) {
                    consumed.entry(key).or_default().push(Consumed {
                        occurred_at: c.occurred_at,
                        seq: c.seq,
                        quantity: c.quantity,
                        event_id: String::new(),
                    });
                }
            }
        };
        let mut events = 0;
        inputs.for_each_usage(|row| {
            events += 1;
            if events % PROGRESS_EVERY_ROWS == 0 {
                progress(Progress::Refs { events });
            }
            let c = self.consumption_of_usage(&row, false);
            collect(self, &c);
        })?;
        for commit in commits {
            collect(self, &consumption_of_commit(commit));
        }
        Ok(consumed)
    }

    fn into_plan(mut self, run_id: String, watermark: u64) -> Plan {
        self.truths.sort_by(|a, b| (a.concern.kind(), &a.concern).cmp(&(b.concern.kind(), &b.concern)));
        let mut adjustments = Vec::new();
        for truth in &self.truths {
            let recorded = self.recorded.get(&truth.concern).copied().unwrap_or_default();
            if let Some(delta) = concern::delta(truth, recorded) {
                adjustments.push(adjustment(truth, recorded, delta, self.as_of, &run_id));
            }
        }
        let mut alerts = self.alerts;
        alerts.sort_by(|a, b| a.alert_id.cmp(&b.alert_id));
        alerts.dedup_by(|a, b| a.alert_id == b.alert_id);
        let mut counts = self.counts;
        counts.alerts.extend(alerts.iter().cloned());
        let coverage = Coverage::Full { reason: crate::incremental::FullReason::Asked };
        Plan { run_id, as_of: self.as_of, watermark, adjustments, alerts, counts, after_close: Vec::new(), coverage }
    }
}

fn consumption_of_commit(commit: &Commit) -> Consumption<'_> {
    Consumption {
        seq: commit.seq,
        tenant: commit.tenant,
        subject: commit.subject,
        project: commit.project,
        api_key: commit.api_key,
        metric: commit.metric,
        occurred_at: commit.occurred_at,
        quantity: commit.amount,
        event_id: &commit.event_id,
        counted_now: commit.counted_now,
        counted_at_close: commit.counted_at_close,
    }
}

/// The truth about one event's concern (expiry, refused transition, conflicting copy): refs name the event.
fn truth_of_event(concern: Concern, header: &Header, amount: i64, present: bool) -> Truth {
    Truth {
        concern,
        amount,
        present,
        tenant: header.tenant.clone(),
        members: Members::of_event(header),
        metric: header.metric.clone(),
        policy_id: None,
        refs: vec![header.event_id.clone()],
    }
}

/// The AdjustmentEvent that writes `delta` for a concern.
fn adjustment(truth: &Truth, recorded: Recorded, delta: i64, as_of: Timestamp, run_id: &str) -> AdjustmentEvent {
    let adjustment_id = concern::adjustment_id(&truth.concern, recorded, delta);
    let window = truth.concern.window();
    AdjustmentEvent {
        header: Header {
            event_id: adjustment_id.clone(),
            occurred_at: as_of,
            tenant: truth.tenant.clone(),
            subject: truth.members.subject.clone(),
            project: truth.members.project.clone(),
            api_key: truth.members.api_key.clone(),
            metric: truth.metric.clone(),
            source: ADJUSTMENT_SOURCE.to_string(),
        },
        adjustment_id,
        kind: truth.concern.kind(),
        policy_id: truth.policy_id.clone(),
        window_start: window.map(|w| w.0),
        window_end: window.map(|w| w.1),
        amount: delta,
        refs: truth.refs.clone(),
        run_id: run_id.to_string(),
        scope: truth.concern.scope(),
    }
}

#[cfg(test)]
mod tests;
