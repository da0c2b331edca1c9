//! The window counters: consumption per window (the minute, and the hour, day and month in the calendar of UTC and
//! of every time zone a policy names), what open reservations hold and the leases active, per tenant, subject,
//! project and API key, and the timelines ROLLING and BILLING_CYCLE windows are summed from. Windows that ended a
//! day ago are dropped.

use rules::window;
use rustc_hash::FxHashMap;
use schemas::*;
use serde::{Deserialize, Serialize};

use crate::timeline::Timeline;

/// The window kinds counted in each time zone's calendar, beside the minute (the same in every zone).
const ZONED_WINDOWS: [Window; 3] = [Window::HOUR, Window::DAY, Window::MONTH];
/// Windows are dropped once they ended a day ago: a decision only asks about windows containing now, the day
/// leaves room for a clock that steps back.
const PRUNE_AFTER_MICROS: i64 = 24 * 3_600 * 1_000_000;
/// Ended windows are looked for at most once a minute (the shortest window): pruning walks every counter, so
/// doing it before every group would make each group cost as much as the state is large.
const PRUNE_EVERY_MICROS: i64 = 60 * 1_000_000;

/// What one tenant (all its subjects) or one subject has of one metric.
///
/// Sums cannot stop the writer: what other writers recorded is folded whatever it adds up to (the hook cannot
/// refuse it), and the hook refuses its own requests that would take a sum past i64 ([`super::State::room`]). Consumption
/// saturates at `i64::MAX` (more than a thousand of the largest events in one window: above every limit either
/// way); what open reservations hold is summed in i128, exactly, since holds come and go and a saturated sum would
/// be wrong once they close.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Consumption by window: its start and end (microseconds), whatever kind and zone it is of.
    pub consumed: FxHashMap<(i64, i64), i64>,
    /// What open reservations hold now: the sum of their amounts.
    pub held: i128,
    /// The leases active now by expiry (microseconds): how many expire at each instant. A lease
    /// holds a slot of a CONCURRENT policy, never an amount of a window.
    pub leases: std::collections::BTreeMap<i64, u32>,
    /// Consumption by instant (microseconds), kept once a ROLLING policy is recorded: a rolling
    /// window is any interval ending now, so it is summed exactly from the instants it holds, not from buckets.
    pub timeline: Timeline,
}

impl Counters {
    fn is_empty(&self) -> bool {
        self.consumed.is_empty() && self.held == 0 && self.leases.is_empty() && self.timeline.is_empty()
    }

    /// Consumption at the instants `[start, end)`, from the timeline (a ROLLING window's).
    pub fn consumed_between(&self, start: Timestamp, end: Timestamp) -> i64 {
        self.timeline.sum(start, end)
    }

    /// When a request that needs `excess` more room than the ROLLING window `[start, end)` of `length` microseconds
    /// leaves has it by usage aging out alone: the instant the earliest usage whose leaving frees `excess` is
    /// `length` old. None when the window's usage is not that much (what reservations hold does not age).
    pub fn room_by_aging(&self, (start, end): (Timestamp, Timestamp), length: i64, excess: i64) -> Option<Timestamp> {
        let aged = self.timeline.reaches(start, end, excess)?;
        Some(Timestamp(aged.micros().saturating_add(length)))
    }

    /// How many leases are active now.
    pub fn active_leases(&self) -> i64 {
        self.leases.values().map(|n| i64::from(*n)).sum()
    }

    /// When the first active lease expires, if any: when a slot frees without any call.
    pub fn first_lease_expiry(&self) -> Option<Timestamp> {
        self.leases.keys().next().map(|micros| Timestamp(*micros))
    }
}

/// One tenant's metric: the tenant's counters, each subject's, and those of what carries no subject; each project's
/// and API key's likewise, kept only once a policy of that scope was recorded ([`super::State::counting_scopes`]).
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Usage {
    tenant: Counters,
    subjects: FxHashMap<String, Counters>,
    no_subject: Counters,
    projects: Members,
    api_keys: Members,
}

/// The counters of one scope's members (projects, or API keys): each one's, and those of what names none.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Members {
    named: FxHashMap<String, Counters>,
    unnamed: Counters,
}

impl Members {
    fn of(&mut self, member: Option<&str>, counted: &mut usize) -> &mut Counters {
        match member {
            Some(member) => {
                if !self.named.contains_key(member) {
                    *counted += 1;
                }
                entry_of(&mut self.named, member)
            }
            None => &mut self.unnamed,
        }
    }

    fn get(&self, member: Option<&str>) -> Option<&Counters> {
        match member {
            Some(member) => self.named.get(member),
            None => Some(&self.unnamed),
        }
    }

    /// Keeps the counters `live` says still count; whether any is left.
    fn retain(&mut self, live: &impl Fn(&mut Counters) -> bool) -> bool {
        self.named.retain(|_, counters| live(counters));
        live(&mut self.unnamed) || !self.named.is_empty()
    }
}

/// The members a request or an event names, of every scope: what its consumption and holds count for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[allow(missing_docs)] // The header's fields, by their contract §3 names.
pub struct Named<'a> {
    pub subject: Option<&'a str>,
    pub project: Option<&'a str>,
    pub api_key: Option<&'a str>,
}

impl<'a> Named<'a> {
    /// What a request (or a hold) names.
    pub fn of_who(who: &'a Who) -> Named<'a> {
        Named { subject: who.subject.as_deref(), project: who.project.as_deref(), api_key: who.api_key.as_deref() }
    }

    /// What an event's header names.
    pub fn of(header: &'a Header) -> Named<'a> {
        Named {
            subject: header.subject.as_deref(),
            project: header.project.as_deref(),
            api_key: header.api_key.as_deref(),
        }
    }

    /// The member of `scope` named (none for TENANT).
    pub fn member(&self, scope: Scope) -> Option<&'a str> {
        match scope {
            Scope::TENANT => None,
            Scope::SUBJECT => self.subject,
            Scope::PROJECT => self.project,
            Scope::API_KEY => self.api_key,
        }
    }
}

/// One tenant's metrics, and how many metrics and subjects (of each metric) it has counters for: what the bound
/// on a tenant's own requests counts ([`super::State::new_counters`]).
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct TenantUsage {
    metrics: FxHashMap<String, Usage>,
    /// `metrics.len()` plus every metric's named subjects, projects and API keys.
    counted: usize,
}

impl TenantUsage {
    fn recount(&mut self) {
        let members = |u: &Usage| u.subjects.len() + u.projects.named.len() + u.api_keys.named.len();
        self.counted = self.metrics.len() + self.metrics.values().map(members).sum::<usize>();
    }
}

/// A sum a request would take past i64: which one, for the message that refuses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoRoom {
    /// What would overflow, in words ("the consumption of tenant \"org-1\" in its DAY window from ...").
    pub what: String,
    /// The sum now.
    pub now: i128,
}

/// Which sum a request adds to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adding {
    /// Consumption at this instant (a check allowed, a COMMIT): every window containing it.
    Consumption(Timestamp),
    /// What open reservations hold (a RESERVE).
    Held,
}

/// Whose counters a policy asks for: a TENANT policy the tenant's (all its subjects and what carries none), a
/// SUBJECT policy one subject's, or, for a request without a subject, those of everything without one: a group
/// of its own, as reconcile judges it (contract §3: a SUBJECT policy applies to every subject separately). PROJECT
/// and API_KEY policies likewise, of projects and API keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Whose<'a> {
    /// The tenant's, for a TENANT policy.
    Tenant,
    /// One subject's (or, with none, those of what carries no subject), for a SUBJECT policy.
    Subject(Option<&'a str>),
    /// One project's (or of what names none), for a PROJECT policy.
    Project(Option<&'a str>),
    /// One API key's (or of what names none), for an API_KEY policy.
    ApiKey(Option<&'a str>),
}

impl<'a> Whose<'a> {
    /// Whose counters a policy of `scope` asks for, for a request naming `member` of that scope.
    pub fn of(scope: Scope, member: Option<&'a str>) -> Whose<'a> {
        match scope {
            Scope::TENANT => Whose::Tenant,
            Scope::SUBJECT => Whose::Subject(member),
            Scope::PROJECT => Whose::Project(member),
            Scope::API_KEY => Whose::ApiKey(member),
        }
    }
}

/// The longest cycle of a BILLING_CYCLE window: 31 days and the hour a fall-back adds, within the month and a day a
/// starting hook folds.
const CYCLE_LONGEST_MICROS: i64 = (31 * 24 + 1) * 3_600 * 1_000_000;

/// How far back the timelines must reach for `p`'s windows, when its windows are not ones the counters keep: a ROLLING
/// window's length, a BILLING_CYCLE's longest cycle. None for calendar windows.
/// A named plan's policy too, of any window: its windows are clipped to the spans its tenants held the plan (a plan
/// assigned mid-month counts from its instant), so they are not ones the counters keep either.
pub(crate) fn timeline_micros(p: &PolicyEvent) -> Option<i64> {
    let plan = schemas::partition::plan_of_owner(&p.header.tenant).is_some();
    match p.window {
        Window::BILLING_CYCLE => Some(CYCLE_LONGEST_MICROS),
        _ if plan => Some(p.rolling_micros().unwrap_or(0).max(CYCLE_LONGEST_MICROS)),
        _ => p.rolling_micros(),
    }
}

/// The value under `key`, created when missing; the key is copied only then.
fn entry_of<'m, V: Default>(map: &'m mut FxHashMap<String, V>, key: &str) -> &'m mut V {
    if !map.contains_key(key) {
        map.insert(key.to_string(), V::default());
    }
    map.get_mut(key).expect("just inserted")
}

/// The counters of every tenant, and which windows, zones and scopes they keep.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Windows {
    /// Tenant -> metric -> counters.
    usage: FxHashMap<String, TenantUsage>,
    /// The earliest window end still counted: windows ending before it are gone.
    pruned_before: i64,
    /// The time zones whose calendars the counters keep windows of: UTC first, then every zone a policy named.
    #[serde(with = "super::serial::zones")]
    zones: Vec<Tz>,
    /// Whether the counters of projects and of API keys are kept: once a PROJECT (API_KEY) policy is recorded. Until
    /// then a request's project and API key add nothing to count, so that tenants without such policies pay nothing
    /// for them.
    scoped: [bool; 2],
    /// The longest ROLLING window a folded policy has, or a BILLING_CYCLE's longest cycle, in microseconds (0: none;
    /// see [`timeline_micros`]): while it is not 0 the counters keep their timelines, back that far. A longer one than was kept from the start makes the state missing what the
    /// timelines dropped or never kept, as a new zone does.
    rolling_micros: i64,
}

impl Default for Windows {
    fn default() -> Windows {
        Windows {
            usage: FxHashMap::default(),
            pruned_before: i64::MIN,
            zones: vec![Tz::UTC],
            scoped: [false; 2],
            rolling_micros: 0,
        }
    }
}

impl Windows {
    /// Counters that keep windows in UTC and in each of `zones`.
    pub(super) fn with_zones(zones: impl IntoIterator<Item = Tz>) -> Windows {
        let mut windows = Windows::default();
        for zone in zones {
            if !windows.zones.contains(&zone) {
                windows.zones.push(zone);
            }
        }
        windows
    }

    /// Keeps the counters of the members of `scopes` (PROJECT, API_KEY; others are always kept).
    pub(super) fn count_scopes(&mut self, scopes: impl IntoIterator<Item = Scope>) {
        for scope in scopes {
            match scope {
                Scope::PROJECT => self.scoped[0] = true,
                Scope::API_KEY => self.scoped[1] = true,
                Scope::TENANT | Scope::SUBJECT => {}
            }
        }
    }

    /// Keeps timelines for ROLLING windows as long as the longest of `policies`' (recorded policies).
    pub(super) fn keep_rolling<'p>(&mut self, policies: impl IntoIterator<Item = &'p PolicyEvent>) {
        self.rolling_micros = policies.into_iter().filter_map(timeline_micros).max().unwrap_or(0);
    }

    /// The scopes whose members' counters are kept beside the tenant's and the subjects'.
    pub(super) fn scopes_counted(&self) -> Vec<Scope> {
        let [projects, api_keys] = self.scoped;
        [(projects, Scope::PROJECT), (api_keys, Scope::API_KEY)]
            .into_iter()
            .filter(|(on, _)| *on)
            .map(|(_, s)| s)
            .collect()
    }

    /// The longest timeline kept (microseconds; 0: none).
    pub(super) fn rolling_micros(&self) -> i64 {
        self.rolling_micros
    }

    /// The time zones whose windows are counted: UTC, then those of the policies folded.
    pub(super) fn zones(&self) -> &[Tz] {
        &self.zones
    }

    /// Starts counting what a policy folded needs counted (its zone's windows, a longer timeline, its scope's
    /// members); whether it needed any of it: the consumption folded before it is then in none of those counters.
    pub(super) fn note_policy(&mut self, p: &PolicyEvent) -> bool {
        let mut missing = false;
        let zone = p.zone();
        if !self.zones.contains(&zone) {
            self.zones.push(zone);
            missing = true;
        }
        if let Some(length) = timeline_micros(p).filter(|length| *length > self.rolling_micros) {
            self.rolling_micros = length;
            missing = true;
        }
        // The first policy of a scope whose members were not counted: the consumption folded before it is in none of
        // their counters.
        let index = match p.scope {
            Scope::PROJECT => Some(0),
            Scope::API_KEY => Some(1),
            Scope::TENANT | Scope::SUBJECT => None,
        };
        if let Some(index) = index.filter(|i| !self.scoped[*i]) {
            self.scoped[index] = true;
            missing = true;
        }
        missing
    }

    /// Every window counted that contains `at`, as (start, end) microseconds: its minute, and its hour, day and
    /// month in each zone's calendar, each once.
    pub(super) fn windows_at(&self, at: Timestamp) -> Vec<(i64, i64)> {
        let mut windows = Vec::with_capacity(1 + ZONED_WINDOWS.len() * self.zones.len());
        let (start, end) = window::bounds(Window::MINUTE, at);
        windows.push((start.micros(), end.micros()));
        for zone in &self.zones {
            for kind in ZONED_WINDOWS {
                let (start, end) = window::bounds_in(kind, *zone, at);
                if !windows.contains(&(start.micros(), end.micros())) {
                    windows.push((start.micros(), end.micros()));
                }
            }
        }
        windows
    }

    /// Applies `change` to the counters of a tenant's metric and to its subject's (or to those without one), and to
    /// its project's and API key's when those scopes are counted.
    pub(super) fn update(
        &mut self,
        tenant: &str,
        named: Named<'_>,
        metric: &str,
        mut change: impl FnMut(&mut Counters),
    ) {
        let [projects, api_keys] = self.scoped;
        let TenantUsage { metrics, counted } = entry_of(&mut self.usage, tenant);
        if !metrics.contains_key(metric) {
            *counted += 1;
        }
        let usage = entry_of(metrics, metric);
        change(&mut usage.tenant);
        match named.subject {
            Some(subject) => {
                if !usage.subjects.contains_key(subject) {
                    *counted += 1;
                }
                change(entry_of(&mut usage.subjects, subject))
            }
            None => change(&mut usage.no_subject),
        }
        if projects {
            change(usage.projects.of(named.project, counted));
        }
        if api_keys {
            change(usage.api_keys.of(named.api_key, counted));
        }
    }

    /// How many metrics, and subjects of each metric, `tenant` has counters for.
    pub(super) fn counters_of(&self, tenant: &str) -> usize {
        self.usage.get(tenant).map_or(0, |t| t.counted)
    }

    /// How many counters (a metric's, a subject's, a project's, an API key's) a request of `tenant` for `metric`
    /// naming `named` would add.
    pub(super) fn new_counters(&self, tenant: &str, named: Named<'_>, metric: &str) -> usize {
        let [projects, api_keys] = self.scoped;
        let usage = self.usage.get(tenant).and_then(|t| t.metrics.get(metric));
        let new = |member: Option<&str>, counted: bool, of: fn(&Usage) -> &FxHashMap<String, Counters>| {
            usize::from(counted && member.is_some_and(|m| usage.is_none_or(|u| !of(u).contains_key(m))))
        };
        usize::from(usage.is_none())
            + new(named.subject, true, |u| &u.subjects)
            + new(named.project, projects, |u| &u.projects.named)
            + new(named.api_key, api_keys, |u| &u.api_keys.named)
    }

    /// Whether `amount` more of what `adding` says fits in every sum a request of `tenant` (and `subject`) for
    /// `metric` would change: the tenant's and the subject's (or the subjectless') consumption in each window
    /// still counted that contains the instant, or what they hold. Those sums are recorded as `long`s (the
    /// DecisionEvent's `used_before`, the ledger's totals) and must stay within i64.
    pub(super) fn room(
        &self,
        tenant: &str,
        named: Named<'_>,
        metric: &str,
        adding: Adding,
        amount: i64,
    ) -> Result<(), NoRoom> {
        let amount = i128::from(amount);
        let fits = |sum: i128| sum + amount <= i128::from(i64::MAX);
        // Said only when refused: a request that fits allocates nothing here.
        let of = |whose: Whose<'_>| match whose {
            Whose::Tenant => format!("tenant {tenant:?}"),
            Whose::Subject(Some(subject)) => format!("subject {subject:?} of tenant {tenant:?}"),
            Whose::Subject(None) => format!("what carries no subject of tenant {tenant:?}"),
            Whose::Project(Some(project)) => format!("project {project:?} of tenant {tenant:?}"),
            Whose::Project(None) => format!("what names no project of tenant {tenant:?}"),
            Whose::ApiKey(Some(api_key)) => format!("API key {api_key:?} of tenant {tenant:?}"),
            Whose::ApiKey(None) => format!("what names no API key of tenant {tenant:?}"),
        };
        let windows = match adding {
            Adding::Consumption(at) => Some(self.windows_at(at)),
            Adding::Held => None,
        };
        // Projects' and keys' counters only where they are kept: an empty group's windows cost lookups for nothing.
        let [projects, api_keys] = self.scoped;
        let whose_all = [
            Some(Whose::Tenant),
            Some(Whose::Subject(named.subject)),
            Some(Whose::Project(named.project)).filter(|_| projects),
            Some(Whose::ApiKey(named.api_key)).filter(|_| api_keys),
        ];
        for whose in whose_all.into_iter().flatten() {
            let Some(counters) = self.counters(tenant, whose, metric) else { continue };
            let Some(windows) = &windows else {
                if !fits(counters.held) {
                    let what = format!("what open reservations of {} hold of {metric:?}", of(whose));
                    return Err(NoRoom { what, now: counters.held });
                }
                continue;
            };
            for (start, end) in windows {
                let consumed = counters.consumed.get(&(*start, *end)).copied().unwrap_or(0);
                if !fits(i128::from(consumed)) {
                    let (start, end) = (Timestamp(*start), Timestamp(*end));
                    let what = format!("the consumption of {metric:?} by {} in its window [{start}, {end})", of(whose));
                    return Err(NoRoom { what, now: i128::from(consumed) });
                }
            }
        }
        Ok(())
    }

    /// The counters of a tenant's metric, of one subject, or of what carries no subject, if any.
    pub(super) fn counters(&self, tenant: &str, whose: Whose<'_>, metric: &str) -> Option<&Counters> {
        let usage = self.usage.get(tenant)?.metrics.get(metric)?;
        match whose {
            Whose::Tenant => Some(&usage.tenant),
            Whose::Subject(Some(subject)) => usage.subjects.get(subject),
            Whose::Subject(None) => Some(&usage.no_subject),
            Whose::Project(project) => usage.projects.get(project),
            Whose::ApiKey(api_key) => usage.api_keys.get(api_key),
        }
    }

    /// The windows an event at `at` counts in: of every kind and zone counted, not pruned.
    pub(super) fn counted_windows_at(&self, at: Timestamp) -> Vec<(i64, i64)> {
        let mut windows = self.windows_at(at);
        windows.retain(|(_, end)| *end >= self.pruned_before);
        windows
    }

    /// Adds to each window its own amount (a metered metric's: each window counted by the meter in force at its
    /// start), and `timeline` to the timelines.
    pub(super) fn consume_windows(
        &mut self,
        (tenant, metric): (&str, &str),
        named: Named<'_>,
        at: Timestamp,
        deltas: &[((i64, i64), i64)],
        timeline: i64,
    ) {
        let timeline = (self.rolling_micros > 0
            && at.micros() >= self.pruned_before.saturating_sub(self.rolling_micros))
        .then_some(timeline);
        self.update(tenant, named, metric, |counters| {
            for (key, delta) in deltas {
                let counter = counters.consumed.entry(*key).or_insert(0);
                *counter = counter.saturating_add(*delta);
            }
            if let Some(quantity) = timeline {
                counters.timeline.add(at, quantity);
            }
        });
    }

    pub(super) fn consume_at(&mut self, tenant: &str, named: Named<'_>, metric: &str, at: Timestamp, quantity: i64) {
        let mut windows = self.windows_at(at);
        windows.retain(|(_, end)| *end >= self.pruned_before);
        let timeline = self.rolling_micros > 0 && at.micros() >= self.pruned_before.saturating_sub(self.rolling_micros);
        self.update(tenant, named, metric, |counters| {
            for key in &windows {
                let counter = counters.consumed.entry(*key).or_insert(0);
                // Saturating (see `Counters`): the hook's own requests never get here past i64 (`room`).
                *counter = counter.saturating_add(quantity);
            }
            if timeline {
                counters.timeline.add(at, quantity);
            }
        });
    }

    /// Consumption of the window `[start, end)`: a window of a kind in a zone whose windows are counted (UTC, or a zone
    /// a policy folded names).
    pub(super) fn consumed(
        &self,
        tenant: &str,
        whose: Whose<'_>,
        metric: &str,
        (start, end): (Timestamp, Timestamp),
    ) -> i64 {
        let counters = self.counters(tenant, whose, metric);
        counters.and_then(|c| c.consumed.get(&(start.micros(), end.micros())).copied()).unwrap_or(0)
    }

    /// Consumption of the ROLLING window `[start, end)`, from the timelines (kept once a ROLLING policy is folded).
    pub(super) fn consumed_rolling(
        &self,
        tenant: &str,
        whose: Whose<'_>,
        metric: &str,
        window: (Timestamp, Timestamp),
    ) -> i64 {
        self.counters(tenant, whose, metric).map_or(0, |c| c.consumed_between(window.0, window.1))
    }

    /// The tenants that have consumed or hold anything the counters count.
    pub(super) fn tenants(&self) -> impl Iterator<Item = &str> {
        self.usage.keys().map(String::as_str)
    }

    /// Whether an event at `micros` could still change a counted window: its month, in some zone's calendar, has not
    /// been pruned.
    pub(super) fn counted(&self, micros: i64) -> bool {
        let at = Timestamp(micros);
        self.zones.iter().any(|zone| window::bounds_in(Window::MONTH, *zone, at).1.micros() >= self.pruned_before)
    }

    /// Drops windows that ended before `now` minus a day (at most once a minute): bounded memory. The instant before
    /// which windows are dropped, when they were.
    pub(super) fn prune(&mut self, now: Timestamp) -> Option<i64> {
        let horizon = now.micros() - PRUNE_AFTER_MICROS;
        if horizon < self.pruned_before.saturating_add(PRUNE_EVERY_MICROS) {
            return None;
        }
        Some(self.prune_to(horizon))
    }

    /// Counts windows however long ago they ended, as counters that were never pruned do, until the next prune.
    pub(super) fn unprune(&mut self) {
        self.pruned_before = i64::MIN;
    }

    /// Drops windows that ended before `now` minus a day, however recently they were looked for: a start from a
    /// snapshot prunes as a fold from nothing does. The instant before which windows are dropped, when it moved.
    pub(super) fn prune_at_start(&mut self, now: Timestamp) -> Option<i64> {
        let horizon = now.micros() - PRUNE_AFTER_MICROS;
        (horizon >= self.pruned_before).then(|| self.prune_to(horizon))
    }

    /// Drops windows that ended before `horizon`, and timelines' instants no ROLLING window ending after it holds.
    fn prune_to(&mut self, horizon: i64) -> i64 {
        self.pruned_before = horizon;
        let aged = horizon.saturating_sub(self.rolling_micros);
        let live = |counters: &mut Counters| {
            counters.consumed.retain(|(_, end), _| *end >= horizon);
            // Usage at instants no ROLLING window ending after the horizon holds.
            counters.timeline.forget_before(aged);
            !counters.is_empty()
        };
        self.usage.retain(|_, tenant| {
            tenant.metrics.retain(|_, usage| {
                usage.subjects.retain(|_, counters| live(counters));
                let no_subject = live(&mut usage.no_subject);
                let projects = usage.projects.retain(&live);
                let api_keys = usage.api_keys.retain(&live);
                live(&mut usage.tenant) || no_subject || !usage.subjects.is_empty() || projects || api_keys
            });
            // What aged out no longer counts against the tenant's bound.
            tenant.recount();
            !tenant.metrics.is_empty()
        });
        horizon
    }
}

#[cfg(test)]
impl Windows {
    /// Panics unless each tenant's count of counters is what it keeps.
    pub(super) fn check_bookkeeping(&self) {
        for (tenant, usage) in &self.usage {
            let mut recounted = usage.clone();
            recounted.recount();
            assert_eq!(usage.counted, recounted.counted, "{tenant}'s counters are counted as they are kept");
        }
    }
}
