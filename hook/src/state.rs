//! What the hook knows when it decides: consumption per window, open reservations, grants and policies,
//! folded from the ledger's entries in ledger order. The writer folds every entry another writer (ingest)
//! appended since its last look before each group of decisions, and applies its own decisions directly, so
//! the state always equals a fold of the whole ledger up to its watermark.
//!
//! A decision asks, per applicable policy, two numbers: the consumption of the window containing now and what
//! open reservations hold. Both are kept as running totals per tenant (and subject) and metric, updated when
//! a reservation opens, closes or expires, so that a decision costs a few hash lookups whatever the number of
//! open reservations or of tenants. Lookups take `&str`: nothing is allocated to ask.
//!
//! Windows that ended are dropped as time passes: the hook only ever asks about the windows containing now.
//!
//! Consumption is counted per window, a window being its instants `[start, end)`: the minute, and the hour, day
//! and month in the calendar of UTC and of every time zone a policy names (PolicyEvent v4), each once when zones
//! agree (New York's minutes are UTC's). A policy naming a zone the counters did not keep leaves them short of the
//! consumption folded before it: the state says so ([`State::is_missing_zones`]) and the writer rebuilds it from
//! the ledger, which a start does knowing every zone first.
//!
//! Reservations are judged as reconcile judges them (`rules::reservation::judge`: by event time, whatever
//! order their events arrive in): the hook keeps what judging needs of each reservation's events while a late
//! event could still change what it holds or consumes, and applies the difference each new event makes to the
//! verdict. So a close that arrives before its RESERVE counts, a second RESERVE of a closed reservation opens
//! nothing, and of two closes the earlier by event time is the one that counts, in the hook as in reconcile.

use std::collections::{BTreeSet, HashMap};

use rules::policy::PolicyIndex;
use rules::reservation::{self, Facts};
use rules::window;
use rustc_hash::FxHashMap;

use crate::timeline::Timeline;
use schemas::*;

/// The window kinds counted in each time zone's calendar, beside the minute (the same in every zone).
const ZONED_WINDOWS: [Window; 3] = [Window::HOUR, Window::DAY, Window::MONTH];
/// Windows are dropped once they ended a day ago: a decision only asks about windows containing now, the day
/// leaves room for a clock that steps back.
const PRUNE_AFTER_MICROS: i64 = 24 * 3_600 * 1_000_000;
/// Ended windows are looked for at most once a minute (the shortest window): pruning walks every counter, so
/// doing it before every group would make each group cost as much as the state is large.
const PRUNE_EVERY_MICROS: i64 = 60 * 1_000_000;
/// Reservations of other enforcers that hold nothing now (closed, expired, or a close whose RESERVE has not
/// arrived), kept for a late event, at most this many (about 600 bytes each: 573 MiB measured for a million
/// with 36-character ids): beyond it those that stopped mattering first are forgotten, and a late event of one
/// then counts only for reconcile (which reports what the hook let through).
pub const RESTING_MAX: usize = 500_000;
/// Sequence numbers of this writer's own events before the ledger numbers them: above every real one, in the
/// order the group decided them ([`State::number_own`] puts the real one in their place).
pub const PROVISIONAL_SEQ: u64 = u64::MAX / 2;

/// What one tenant (all its subjects) or one subject has of one metric.
///
/// Sums cannot stop the writer: what other writers recorded is folded whatever it adds up to (the hook cannot
/// refuse it), and the hook refuses its own requests that would take a sum past i64 ([`State::room`]). Consumption
/// saturates at `i64::MAX` (more than a thousand of the largest events in one window: above every limit either
/// way); what open reservations hold is summed in i128, exactly, since holds come and go and a saturated sum would
/// be wrong once they close.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Counters {
    /// Consumption by window: its start and end (microseconds), whatever kind and zone it is of.
    pub consumed: FxHashMap<(i64, i64), i64>,
    /// What open reservations hold now: the sum of their amounts.
    pub held: i128,
    /// The leases active now, by expiry (microseconds): how many expire at each instant. A lease
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
/// and API key's likewise, kept only once a policy of that scope was recorded ([`State::counting_scopes`]).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Usage {
    tenant: Counters,
    subjects: FxHashMap<String, Counters>,
    no_subject: Counters,
    projects: Members,
    api_keys: Members,
}

/// The counters of one scope's members (projects, or API keys): each one's, and those of what names none.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
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
/// on a tenant's own requests counts ([`State::new_counters`]).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
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

/// An open reservation: it holds its amount against every limit of its tenant, subject and metric until it is
/// committed, released or expires.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)] // The RESERVE's own fields, by their contract §3 names.
pub struct Hold {
    pub tenant: String,
    pub subject: Option<String>,
    pub project: Option<String>,
    pub api_key: Option<String>,
    pub metric: String,
    pub amount: i64,
    pub expires_at: Timestamp,
    /// When the RESERVE was made (its event time): how long it has been open.
    pub reserved_at: Timestamp,
    /// A lease's fencing token: set when the reservation is a lease (a slot of a CONCURRENT policy), whose amount
    /// counts among the leases, not what reservations hold.
    pub fencing_token: Option<i64>,
}

impl Hold {
    /// The members it holds for.
    pub fn named(&self) -> Named<'_> {
        Named { subject: self.subject.as_deref(), project: self.project.as_deref(), api_key: self.api_key.as_deref() }
    }
}

/// Whose a reservation event is: the counters its hold or its COMMIT's consumption go to.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Owner {
    tenant: String,
    subject: Option<String>,
    project: Option<String>,
    api_key: Option<String>,
    metric: String,
}

impl Owner {
    fn of(header: &Header) -> Owner {
        Owner {
            tenant: header.tenant.clone(),
            subject: header.subject.clone(),
            project: header.project.clone(),
            api_key: header.api_key.clone(),
            metric: header.metric.clone(),
        }
    }

    fn is(&self, header: &Header) -> bool {
        self.tenant == header.tenant
            && self.subject == header.subject
            && self.project == header.project
            && self.api_key == header.api_key
            && self.metric == header.metric
    }

    fn named(&self) -> Named<'_> {
        Named { subject: self.subject.as_deref(), project: self.project.as_deref(), api_key: self.api_key.as_deref() }
    }
}

/// What the hook keeps of one reservation event: what judging it needs, and whose it is.
#[derive(Debug, Clone)]
struct Step {
    seq: u64,
    facts: Facts,
    /// Set only when the event's tenant, subject or metric differ from its reservation's first event's.
    owner: Option<Box<Owner>>,
}

/// A reservation: its tenant and its reservation_id. Another tenant's events with the same reservation_id are
/// another reservation, as reconcile judges them: producers of other teams choose their ids, and one tenant's
/// events never change what another's hold or consume.
pub type Key = (String, String);

pub(crate) fn key_of(r: &ReservationEvent) -> Key {
    (r.header.tenant.clone(), r.reservation_id.clone())
}

/// The events of one reservation folded so far, and what their verdict put in the counters.
#[derive(Debug)]
struct Life {
    /// Whose its first event folded is: almost always every event's.
    owner: Owner,
    steps: Vec<Step>,
    /// The RESERVE whose amount the verdict holds (no valid close; held until it expires), by sequence number.
    holding: Option<u64>,
    /// Until when it holds: the RESERVE's expiry, as a lease's valid RENEWs moved it.
    holding_until: Option<Timestamp>,
    /// The valid COMMIT, whose amount is consumption, by sequence number.
    committed: Option<u64>,
    /// Every event is this writer's own: nobody else closes its reservations, so it is forgotten once it holds
    /// nothing.
    own: bool,
    /// When it holds nothing now: the last instant an event of it could matter to (its key in `resting`).
    resting_until: Option<i64>,
}

impl Life {
    fn step(&self, seq: u64) -> &Step {
        self.steps.iter().find(|s| s.seq == seq).expect("a verdict names one of the events judged")
    }

    fn owner_of<'l>(&'l self, step: &'l Step) -> &'l Owner {
        step.owner.as_deref().unwrap_or(&self.owner)
    }

    /// The last instant an event of it could matter to: a valid close happens by its RESERVE's expiry.
    fn matters_until(&self) -> Timestamp {
        let instant = |s: &Step| match s.facts.action {
            ReservationAction::RESERVE => s.facts.expires_at.unwrap_or(s.facts.occurred_at),
            _ => s.facts.occurred_at,
        };
        self.steps.iter().map(instant).max().expect("a life has an event")
    }
}

/// The fold.
#[derive(Debug)]
pub struct State {
    /// Last ledger sequence number folded.
    pub watermark: u64,
    /// Every policy version folded.
    pub policies: PolicyIndex,
    /// Every grant folded, by (tenant, metric).
    pub grants: HashMap<(String, String), Vec<GrantEvent>>,
    /// The greatest fencing token of a lease's RESERVE, by (tenant, metric): the next lease gets a greater one.
    fencing_tokens: HashMap<(String, String), i64>,
    /// Tenant -> metric -> counters.
    usage: FxHashMap<String, TenantUsage>,
    /// Open reservations by reservation_id: one per tenant holding that id (almost always one).
    holds: FxHashMap<String, Vec<Hold>>,
    /// The open reservations by expiry (microseconds), soonest first.
    expiries: BTreeSet<(i64, Key)>,
    /// The events of every reservation that holds now, and of other enforcers' reservations that hold nothing
    /// now while a late event of theirs could still change a counted window (a close dated at or before the
    /// expiry is valid whenever it arrives, contract §5), [`RESTING_MAX`] of those at most.
    lives: FxHashMap<Key, Box<Life>>,
    /// Those that hold nothing now, by the last instant an event of theirs could matter to, soonest first:
    /// pruning (once that instant's month is no longer counted) and the cap take from the front.
    resting: BTreeSet<(i64, Key)>,
    /// The earliest window end still counted: windows ending before it are gone.
    pruned_before: i64,
    /// The time zones whose calendars the counters keep windows of: UTC first, then every zone a policy named.
    zones: Vec<Tz>,
    /// Whether a policy folded named a zone `zones` did not hold: the consumption folded before it is in none of
    /// that zone's windows, so the state must be rebuilt from the ledger. Also set when a policy makes a metric a
    /// gauge that no gauge named before: the levels of that metric folded before it were not kept.
    missing_zones: bool,
    /// Whether the counters of projects and of API keys are kept: once a PROJECT (API_KEY) policy is recorded. Until
    /// then a request's project and API key add nothing to count, so that tenants without such policies pay nothing
    /// for them.
    scoped: [bool; 2],
    /// The metrics a gauge quota names (of any tenant): their usage events are levels, kept in `levels`.
    gauge_metrics: BTreeSet<String>,
    /// The longest ROLLING window a folded policy has, or a BILLING_CYCLE's longest cycle, in microseconds (0: none;
    /// see [`timeline_micros`]): while it is not 0 the counters keep their timelines, back that far. A longer one than was kept from the start makes the state missing what the
    /// timelines dropped or never kept, as a new zone does.
    rolling_micros: i64,
    /// The level of each gauge metric per (tenant, metric): the quantity of its latest usage event by event time, and
    /// that time. Of two at the same instant, the one folded later.
    levels: HashMap<(String, String), (Timestamp, i64)>,
    /// The alerts of windows not pruned yet ([`crate::alerts`]), own and folded, by alert_id, with their window's end:
    /// what makes each written once.
    alerted: HashMap<String, i64>,
}

impl Default for State {
    fn default() -> State {
        State {
            watermark: 0,
            policies: PolicyIndex::new(Vec::new()),
            grants: HashMap::new(),
            fencing_tokens: HashMap::new(),
            usage: FxHashMap::default(),
            holds: FxHashMap::default(),
            expiries: BTreeSet::new(),
            lives: FxHashMap::default(),
            resting: BTreeSet::new(),
            pruned_before: i64::MIN,
            zones: vec![Tz::UTC],
            missing_zones: false,
            scoped: [false; 2],
            gauge_metrics: BTreeSet::new(),
            rolling_micros: 0,
            levels: HashMap::new(),
            alerted: HashMap::new(),
        }
    }
}

/// The longest cycle of a BILLING_CYCLE window: 31 days and the hour a fall-back adds, within the month and a day a
/// starting hook folds.
const CYCLE_LONGEST_MICROS: i64 = (31 * 24 + 1) * 3_600 * 1_000_000;

/// How far back the timelines must reach for `p`'s windows, when its windows are not ones the counters keep: a ROLLING
/// window's length, a BILLING_CYCLE's longest cycle. None for calendar windows.
pub(crate) fn timeline_micros(p: &PolicyEvent) -> Option<i64> {
    match p.window {
        Window::BILLING_CYCLE => Some(CYCLE_LONGEST_MICROS),
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

impl State {
    /// An empty state that counts windows in UTC and in each of `zones` (the zones recorded policies name), and keeps
    /// the levels of `gauge_metrics` (the metrics recorded gauge quotas name).
    pub fn with_zones(zones: impl IntoIterator<Item = Tz>, gauge_metrics: impl IntoIterator<Item = String>) -> State {
        let mut state = State { gauge_metrics: gauge_metrics.into_iter().collect(), ..State::default() };
        for zone in zones {
            if !state.zones.contains(&zone) {
                state.zones.push(zone);
            }
        }
        state
    }

    /// The same state, keeping the counters of the members of `scopes` (PROJECT, API_KEY; others are always kept).
    pub fn counting_scopes(mut self, scopes: impl IntoIterator<Item = Scope>) -> State {
        for scope in scopes {
            match scope {
                Scope::PROJECT => self.scoped[0] = true,
                Scope::API_KEY => self.scoped[1] = true,
                Scope::TENANT | Scope::SUBJECT => {}
            }
        }
        self
    }

    /// The same state, keeping timelines for ROLLING windows as long as the longest of `policies`' (recorded policies).
    pub fn keeping_rolling<'p>(mut self, policies: impl IntoIterator<Item = &'p PolicyEvent>) -> State {
        self.rolling_micros = policies.into_iter().filter_map(timeline_micros).max().unwrap_or(0);
        self
    }

    /// The scopes whose members' counters are kept beside the tenant's and the subjects'.
    pub fn scopes_counted(&self) -> Vec<Scope> {
        let [projects, api_keys] = self.scoped;
        [(projects, Scope::PROJECT), (api_keys, Scope::API_KEY)]
            .into_iter()
            .filter(|(on, _)| *on)
            .map(|(_, s)| s)
            .collect()
    }

    /// The time zones whose windows are counted: UTC, then those of the policies folded.
    pub fn zones(&self) -> &[Tz] {
        &self.zones
    }

    /// Whether a policy folded names a zone whose windows were not counted from the start: the state's counters lack
    /// the consumption folded before it, and it must be rebuilt ([`State::with_zones`], then the fold again).
    pub fn is_missing_zones(&self) -> bool {
        self.missing_zones
    }

    /// Every window counted that contains `at`, as (start, end) microseconds: its minute, and its hour, day and
    /// month in each zone's calendar, each once.
    fn windows_at(&self, at: Timestamp) -> Vec<(i64, i64)> {
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

    /// Folds one recorded entry.
    pub fn fold(&mut self, seq: u64, event: &Event, now: Timestamp) {
        debug_assert!(seq > self.watermark, "entries are folded in ledger order");
        self.watermark = seq;
        match event {
            // A level for a tenant whose own gauge or its plan's names the metric (in any version, as reconcile and
            // billing read it); another tenant's usage of the same metric is consumption.
            Event::Usage(u)
                if self.gauge_metrics.contains(&u.header.metric)
                    && self.policies.gauge_metrics(&u.header.tenant).contains(u.header.metric.as_str()) =>
            {
                self.note_level(&u.header.tenant, &u.header.metric, u.header.occurred_at, u.quantity)
            }
            Event::Usage(u) => self.consume(&u.header, u.quantity),
            Event::Reservation(r) => self.fold_reservation(seq, r, false, now),
            Event::Grant(g) => {
                self.grants.entry((g.header.tenant.clone(), g.header.metric.clone())).or_default().push(g.clone())
            }
            Event::Policy(p) => {
                let zone = p.zone();
                if !self.zones.contains(&zone) {
                    self.zones.push(zone);
                    self.missing_zones = true;
                }
                if p.is_gauge() && self.gauge_metrics.insert(p.header.metric.clone()) {
                    self.missing_zones = true;
                }
                if let Some(length) = timeline_micros(p).filter(|length| *length > self.rolling_micros) {
                    self.rolling_micros = length;
                    self.missing_zones = true;
                }
                // The first policy of a scope whose members were not counted: the consumption folded before it is in
                // none of their counters.
                let index = match p.scope {
                    Scope::PROJECT => Some(0),
                    Scope::API_KEY => Some(1),
                    Scope::TENANT | Scope::SUBJECT => None,
                };
                if let Some(index) = index.filter(|i| !self.scoped[*i]) {
                    self.scoped[index] = true;
                    self.missing_zones = true;
                }
                let mut policies = self.policies.policies().to_vec();
                policies.push(p.clone());
                self.policies = PolicyIndex::new(policies);
            }
            Event::Alert(a) => self.note_alert(a),
            Event::Decision(_) | Event::Adjustment(_) => {}
        }
    }

    /// Applies a reservation event this writer decided, numbered `PROVISIONAL_SEQ + n` (its place in the group's
    /// events) until the ledger numbers it.
    pub fn fold_own(&mut self, provisional: u64, r: &ReservationEvent, now: Timestamp) {
        debug_assert!(provisional >= PROVISIONAL_SEQ);
        self.fold_reservation(provisional, r, true, now);
    }

    /// Puts the ledger's sequence number in place of an own event's provisional one, or, when the ledger did not
    /// record it as an event that counts (a copy of one it holds), takes the event back out of the verdict.
    pub fn number_own(&mut self, key: &Key, provisional: u64, recorded: Option<u64>, now: Timestamp) {
        let Some(mut life) = self.take_life(key) else { return };
        match recorded {
            Some(seq) => {
                let renumber = |s: &mut Option<u64>| {
                    if *s == Some(provisional) {
                        *s = Some(seq);
                    }
                };
                life.steps.iter_mut().filter(|s| s.seq == provisional).for_each(|s| s.seq = seq);
                renumber(&mut life.holding);
                renumber(&mut life.committed);
            }
            None => {
                // Taken out of the counters as the verdict had it, then judged again without it.
                self.apply(key, &mut life, None, None, None, now);
                life.steps.retain(|s| s.seq != provisional);
                if life.steps.is_empty() {
                    return;
                }
            }
        }
        self.settle(key, life, now);
    }

    /// Takes an own event the ledger did not record back out of the state: its consumption, or its step of a
    /// reservation (applied as `provisional`, judged again without it), in any order.
    pub fn take_back(&mut self, provisional: u64, event: &Event, now: Timestamp) {
        match event {
            Event::Usage(u) => self.consume(&u.header, -u.quantity),
            Event::Reservation(r) => self.number_own(&key_of(r), provisional, None, now),
            Event::Alert(a) => {
                self.alerted.remove(&a.alert_id);
            }
            Event::Decision(_) | Event::Grant(_) | Event::Policy(_) | Event::Adjustment(_) => {}
        }
    }

    /// Remembers an alert, own or folded, until its window is pruned.
    pub fn note_alert(&mut self, alert: &AlertEvent) {
        let end = alert.window_end.map_or(i64::MAX, Timestamp::micros);
        self.alerted.insert(alert.alert_id.clone(), end);
    }

    /// Whether the alert of this id was written (by this hook or another writer whose entries it folded).
    pub fn is_alerted(&self, alert_id: &str) -> bool {
        self.alerted.contains_key(alert_id)
    }

    fn fold_reservation(&mut self, seq: u64, r: &ReservationEvent, own: bool, now: Timestamp) {
        let key = key_of(r);
        let mut life = self.take_life(&key).unwrap_or_else(|| {
            Box::new(Life {
                owner: Owner::of(&r.header),
                steps: Vec::new(),
                holding: None,
                holding_until: None,
                committed: None,
                own,
                resting_until: None,
            })
        });
        if let (ReservationAction::RESERVE, Some(token)) = (r.action, r.fencing_token) {
            self.note_fencing_token(&r.header.tenant, &r.header.metric, token);
        }
        let owner = (!life.owner.is(&r.header)).then(|| Box::new(Owner::of(&r.header)));
        // Most reservations have two events: room for exactly those, not the four a first push makes.
        life.steps.reserve_exact(1);
        life.steps.push(Step { seq, facts: Facts::of(r), owner });
        life.own &= own;
        self.settle(&key, life, now);
    }

    /// Judges a reservation's events again, applies what the verdict changes, and keeps the reservation while it
    /// matters.
    fn settle(&mut self, key: &Key, mut life: Box<Life>, now: Timestamp) {
        let events: Vec<(u64, &Facts)> = life.steps.iter().map(|s| (s.seq, &s.facts)).collect();
        let verdict = reservation::judge(&events, now);
        let holding = verdict.reserve.filter(|_| verdict.close.is_none());
        let committed = verdict.close.filter(|(_, action, _)| *action == ReservationAction::COMMIT).map(|c| c.0);
        self.apply(key, &mut life, holding, verdict.expires_at, committed, now);
        self.keep(key, life);
    }

    /// Moves the counters from what `life` applied to what the verdict `holding` (until `until`), `committed` says.
    fn apply(
        &mut self,
        key: &Key,
        life: &mut Life,
        holding: Option<u64>,
        until: Option<Timestamp>,
        committed: Option<u64>,
        now: Timestamp,
    ) {
        let until = holding.and(until);
        if committed != life.committed {
            let change = |seq: Option<u64>, sign: i64| {
                seq.map(|seq| {
                    let step = life.step(seq);
                    (life.owner_of(step).clone(), step.facts.occurred_at, sign * step.facts.amount)
                })
            };
            for (owner, occurred_at, amount) in [change(life.committed, -1), change(committed, 1)].into_iter().flatten()
            {
                self.consume_by(&owner, occurred_at, amount);
            }
            life.committed = committed;
        }
        if (holding, until) != (life.holding, life.holding_until) {
            self.close_hold(key);
            if let Some(seq) = holding {
                let step = life.step(seq);
                let owner = life.owner_of(step);
                let expires_at = until.unwrap_or(step.facts.occurred_at);
                if expires_at >= now {
                    let hold = Hold {
                        tenant: owner.tenant.clone(),
                        subject: owner.subject.clone(),
                        project: owner.project.clone(),
                        api_key: owner.api_key.clone(),
                        metric: owner.metric.clone(),
                        amount: step.facts.amount,
                        expires_at,
                        reserved_at: step.facts.occurred_at,
                        fencing_token: step.facts.fencing_token,
                    };
                    self.open_hold(key, hold);
                }
            }
            life.holding = holding;
            life.holding_until = until;
        }
    }

    /// Keeps a reservation: while it holds, always; once it holds nothing, while a late event of it could still
    /// change a counted window, unless it is this writer's own, [`RESTING_MAX`] of those at most.
    fn keep(&mut self, key: &Key, mut life: Box<Life>) {
        life.resting_until = None;
        if !self.is_open(key) {
            let until = life.matters_until().micros();
            // Own, once the ledger numbered every event of it (until then an event may still be taken back).
            let numbered = || life.steps.iter().all(|s| s.seq < PROVISIONAL_SEQ);
            if (life.own && numbered()) || !self.counted(until) {
                return;
            }
            life.resting_until = Some(until);
            self.resting.insert((until, key.clone()));
        }
        self.lives.insert(key.clone(), life);
        while self.resting.len() > RESTING_MAX {
            let (_, first) = self.resting.pop_first().expect("more than none");
            self.lives.remove(&first);
        }
    }

    /// Takes a reservation out of those kept, to change it.
    fn take_life(&mut self, key: &Key) -> Option<Box<Life>> {
        let life = self.lives.remove(key)?;
        if let Some(until) = life.resting_until {
            self.resting.remove(&(until, key.clone()));
        }
        Some(life)
    }

    /// Applies `change` to the counters of a tenant's metric and to its subject's (or to those without one), and to
    /// its project's and API key's when those scopes are counted.
    fn update(&mut self, tenant: &str, named: Named<'_>, metric: &str, mut change: impl FnMut(&mut Counters)) {
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
    pub fn counters_of(&self, tenant: &str) -> usize {
        self.usage.get(tenant).map_or(0, |t| t.counted)
    }

    /// How many counters (a metric's, a subject's, a project's, an API key's) a request of `tenant` for `metric`
    /// naming `named` would add.
    pub fn new_counters(&self, tenant: &str, named: Named<'_>, metric: &str) -> usize {
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
    pub fn room(
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
    pub fn counters(&self, tenant: &str, whose: Whose<'_>, metric: &str) -> Option<&Counters> {
        let usage = self.usage.get(tenant)?.metrics.get(metric)?;
        match whose {
            Whose::Tenant => Some(&usage.tenant),
            Whose::Subject(Some(subject)) => usage.subjects.get(subject),
            Whose::Subject(None) => Some(&usage.no_subject),
            Whose::Project(project) => usage.projects.get(project),
            Whose::ApiKey(api_key) => usage.api_keys.get(api_key),
        }
    }

    /// Adds consumption to the windows of every kind containing its event time, for the tenant and, when it
    /// has one, its subject.
    pub fn consume(&mut self, header: &Header, quantity: i64) {
        self.consume_at(&header.tenant, Named::of(header), &header.metric, header.occurred_at, quantity);
    }

    fn consume_by(&mut self, owner: &Owner, occurred_at: Timestamp, quantity: i64) {
        self.consume_at(&owner.tenant, owner.named(), &owner.metric, occurred_at, quantity);
    }

    fn consume_at(&mut self, tenant: &str, named: Named<'_>, metric: &str, at: Timestamp, quantity: i64) {
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
    pub fn consumed(&self, tenant: &str, whose: Whose<'_>, metric: &str, (start, end): (Timestamp, Timestamp)) -> i64 {
        let counters = self.counters(tenant, whose, metric);
        counters.and_then(|c| c.consumed.get(&(start.micros(), end.micros())).copied()).unwrap_or(0)
    }

    /// Consumption of the ROLLING window `[start, end)`, from the timelines (kept once a ROLLING policy is folded).
    pub fn consumed_rolling(
        &self,
        tenant: &str,
        whose: Whose<'_>,
        metric: &str,
        window: (Timestamp, Timestamp),
    ) -> i64 {
        self.counters(tenant, whose, metric).map_or(0, |c| c.consumed_between(window.0, window.1))
    }

    /// What open reservations hold now against a tenant's, a subject's, or the subjectless' limits. `now` is the
    /// instant of the last [`State::expire`]: holds that expired before it were taken out of the totals then.
    pub fn held(&self, tenant: &str, whose: Whose<'_>, metric: &str, now: Timestamp) -> i128 {
        debug_assert!(
            self.expiries.first().is_none_or(|(expires_at, _)| *expires_at >= now.micros()),
            "expire(now) ran before asking what is held at {now:?}"
        );
        self.counters(tenant, whose, metric).map_or(0, |c| c.held)
    }

    /// The metrics whose usage events are levels (a gauge quota names them), whose levels are kept.
    pub fn gauge_metrics(&self) -> impl Iterator<Item = &String> {
        self.gauge_metrics.iter()
    }

    /// Notes a report of `tenant`'s level of the gauge `metric` at `at`: it is the level unless a later one is known.
    pub fn note_level(&mut self, tenant: &str, metric: &str, at: Timestamp, level: i64) {
        let known = self.levels.entry((tenant.to_string(), metric.to_string())).or_insert((at, level));
        if at >= known.0 {
            *known = (at, level);
        }
    }

    /// `tenant`'s level of the gauge `metric`, and when it was reported: none before any report.
    pub fn level(&self, tenant: &str, metric: &str) -> Option<(Timestamp, i64)> {
        self.levels.get(&(tenant.to_string(), metric.to_string())).copied()
    }

    /// The greatest fencing token a lease of `tenant`'s `metric` was granted with (0 when none was).
    pub fn fencing_token(&self, tenant: &str, metric: &str) -> i64 {
        self.fencing_tokens.get(&(tenant.to_string(), metric.to_string())).copied().unwrap_or(0)
    }

    /// Notes that a lease of `tenant`'s `metric` was granted `token`: the next one gets a greater one. The fold notes
    /// every lease it reads; a start notes the greatest the ledger holds, of leases too old to be folded.
    pub fn note_fencing_token(&mut self, tenant: &str, metric: &str, token: i64) {
        let greatest = self.fencing_tokens.entry((tenant.to_string(), metric.to_string())).or_insert(0);
        *greatest = (*greatest).max(token);
    }

    /// The open reservations of id `reservation_id`: one per tenant holding it (almost always one, or none).
    pub fn holds_of(&self, reservation_id: &str) -> &[Hold] {
        self.holds.get(reservation_id).map_or(&[], Vec::as_slice)
    }

    /// Open reservations.
    pub fn holds(&self) -> impl Iterator<Item = &Hold> {
        self.holds.values().flatten()
    }

    /// The tenants that have consumed or hold anything the state counts.
    pub fn tenants(&self) -> impl Iterator<Item = &str> {
        self.usage.keys().map(String::as_str)
    }

    /// Whether every event of the reservation is this writer's own (it issued it, and nobody else wrote to it).
    pub fn is_own(&self, tenant: &str, reservation_id: &str) -> bool {
        self.lives.get(&(tenant.to_string(), reservation_id.to_string())).is_some_and(|life| life.own)
    }

    fn is_open(&self, (tenant, reservation_id): &Key) -> bool {
        self.holds_of(reservation_id).iter().any(|h| &h.tenant == tenant)
    }

    /// Opens a reservation: its amount counts against its tenant's and subject's limits until it closes or
    /// expires. An open reservation of the same key is replaced.
    fn open_hold(&mut self, key: &Key, hold: Hold) {
        debug_assert_eq!(hold.tenant, key.0);
        self.close_hold(key);
        let amount = i128::from(hold.amount);
        let (lease, expiry) = (hold.fencing_token.is_some(), hold.expires_at.micros());
        // Exact in i128: 2^127 is more than any number of events of at most 2^63 each.
        self.update(&hold.tenant, hold.named(), &hold.metric, |c| match lease {
            true => *c.leases.entry(expiry).or_insert(0) += 1,
            false => c.held += amount,
        });
        self.expiries.insert((hold.expires_at.micros(), key.clone()));
        self.holds.entry(key.1.clone()).or_default().push(hold);
    }

    /// Closes a reservation (committed, released or expired): its amount stops counting. Returns it, if it was
    /// open.
    fn close_hold(&mut self, key: &Key) -> Option<Hold> {
        let (tenant, reservation_id) = key;
        let holds = self.holds.get_mut(reservation_id)?;
        let hold = holds.swap_remove(holds.iter().position(|h| &h.tenant == tenant)?);
        if holds.is_empty() {
            self.holds.remove(reservation_id);
        }
        let removed = self.expiries.remove(&(hold.expires_at.micros(), key.clone()));
        assert!(removed, "an open reservation is in the expiry order");
        let amount = i128::from(hold.amount);
        let (lease, expiry) = (hold.fencing_token.is_some(), hold.expires_at.micros());
        self.update(&hold.tenant, hold.named(), &hold.metric, |c| {
            if !lease {
                c.held -= amount;
            } else if let Some(n) = c.leases.get_mut(&expiry) {
                *n -= 1;
                if *n == 0 {
                    c.leases.remove(&expiry);
                }
            }
        });
        Some(hold)
    }

    /// Closes the reservations that expired before `now`: from now on they hold nothing, and only a late close
    /// with an event time before their expiry can still close them.
    pub fn expire(&mut self, now: Timestamp) {
        while self.expiries.first().is_some_and(|(expires_at, _)| *expires_at < now.micros()) {
            let (_, key) = self.expiries.first().cloned().expect("a first entry");
            self.close_hold(&key);
            if let Some(life) = self.take_life(&key) {
                self.keep(&key, life);
            }
        }
    }

    /// Whether an event at `micros` could still change a counted window: its month, in some zone's calendar, has not
    /// been pruned.
    fn counted(&self, micros: i64) -> bool {
        let at = Timestamp(micros);
        self.zones.iter().any(|zone| window::bounds_in(Window::MONTH, *zone, at).1.micros() >= self.pruned_before)
    }

    /// Drops windows that ended before `now` minus a day (at most once a minute): bounded memory.
    pub fn prune(&mut self, now: Timestamp) {
        let horizon = now.micros() - PRUNE_AFTER_MICROS;
        if horizon < self.pruned_before.saturating_add(PRUNE_EVERY_MICROS) {
            return;
        }
        self.pruned_before = horizon;
        // Soonest first, and a later instant's month never ends before an earlier one's: only what is dropped is
        // read.
        while self.resting.first().is_some_and(|(until, _)| !self.counted(*until)) {
            let (_, key) = self.resting.pop_first().expect("a first entry");
            self.lives.remove(&key);
        }
        self.alerted.retain(|_, end| *end >= horizon);
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
    }
}

#[cfg(test)]
impl State {
    /// Panics unless the reservation bookkeeping agrees with itself: every hold has its reservation and its place
    /// in the expiry order, and every reservation kept that holds nothing is resting, and only those; and each
    /// tenant's count of counters is what it keeps.
    fn check_bookkeeping(&self) {
        let holds: Vec<&Hold> = self.holds().collect();
        assert_eq!(holds.len(), self.expiries.len(), "one expiry per hold");
        for (expires_at, key) in &self.expiries {
            let hold = self.holds_of(&key.1).iter().find(|h| h.tenant == key.0).expect("an expiry of a hold");
            assert_eq!(hold.expires_at.micros(), *expires_at);
            let life = self.lives.get(key).expect("a hold's reservation is kept");
            assert!(life.holding.is_some() && life.resting_until.is_none(), "{key:?} holds");
        }
        for (until, key) in &self.resting {
            let life = self.lives.get(key).expect("a resting key's reservation is kept");
            assert_eq!(life.resting_until, Some(*until), "{key:?}");
            assert!(!self.is_open(key), "{key:?} rests while it holds");
        }
        let resting = self.lives.values().filter(|life| life.resting_until.is_some()).count();
        assert_eq!(resting, self.resting.len(), "every reservation that holds nothing rests");
        for (tenant, usage) in &self.usage {
            let mut recounted = usage.clone();
            recounted.recount();
            assert_eq!(usage.counted, recounted.counted, "{tenant}'s counters are counted as they are kept");
        }
        assert_eq!(self.lives.len(), self.resting.len() + self.expiries.len(), "every other one holds");
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    const TENANTS: [&str; 2] = ["org-1", "org-2"];
    const SUBJECTS: [&str; 2] = ["alice", "bob"];
    const METRICS: [&str; 2] = ["tokens", "requests"];

    #[derive(Debug, Clone)]
    enum Op {
        Reserve { id: u8, subject: Option<usize>, metric: usize, amount: i64, ttl_s: i64 },
        Close { id: u8, commit: bool, amount: i64 },
        Advance { seconds: i64 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..8u8, proptest::option::of(0..2usize), 0..2usize, 0..100i64, 1..1_800i64)
                .prop_map(|(id, subject, metric, amount, ttl_s)| Op::Reserve { id, subject, metric, amount, ttl_s }),
            (0..8u8, any::<bool>(), 0..200i64).prop_map(|(id, commit, amount)| Op::Close { id, commit, amount }),
            (0..900i64).prop_map(|seconds| Op::Advance { seconds }),
        ]
    }

    fn header(tenant: &str, subject: Option<&str>, metric: &str, at: Timestamp, event_id: String) -> Header {
        Header {
            event_id,
            occurred_at: at,
            tenant: tenant.into(),
            subject: subject.map(String::from),
            metric: metric.into(),
            source: "test".into(),
            api_key: None,
            project: None,
        }
    }

    /// The model: open reservations as a plain map, and committed amounts per (tenant, subject, metric, day).
    #[derive(Default)]
    struct Model {
        holds: BTreeMap<String, Hold>,
        /// Expired with no close: a late close dated before the expiry still closes them.
        expired: BTreeMap<String, Hold>,
        /// Closed: a RESERVE of them again is a refused transition.
        closed: std::collections::BTreeSet<String>,
        committed: BTreeMap<(String, Option<String>, String, i64), i64>,
    }

    impl Model {
        fn held(&self, tenant: &str, whose: Whose<'_>, metric: &str, now: Timestamp) -> i128 {
            let matches = |h: &Hold| h.tenant == tenant && h.metric == metric && h.expires_at >= now;
            let of_subject = |h: &Hold| match whose {
                Whose::Tenant => true,
                Whose::Subject(subject) => h.subject.as_deref() == subject,
                Whose::Project(_) | Whose::ApiKey(_) => unreachable!("the model has no project or API key"),
            };
            self.holds.values().filter(|h| matches(h) && of_subject(h)).map(|h| i128::from(h.amount)).sum()
        }
        fn consumed(&self, tenant: &str, whose: Whose<'_>, metric: &str, day: i64) -> i64 {
            let key = |s: Option<&str>| (tenant.to_string(), s.map(String::from), metric.to_string(), day);
            match whose {
                Whose::Subject(subject) => self.committed.get(&key(subject)).copied().unwrap_or(0),
                Whose::Tenant => SUBJECTS
                    .iter()
                    .map(|s| Some(*s))
                    .chain([None])
                    .map(|s| self.committed.get(&key(s)).copied().unwrap_or(0))
                    .sum(),
                Whose::Project(_) | Whose::ApiKey(_) => unreachable!("the model has no project or API key"),
            }
        }
    }

    // A lease counts among the leases of its tenant and subject, never in what reservations hold; a
    // RENEW moves its expiry so it outlives its first; a stale holder's RELEASE frees nothing; the greatest token
    // granted is kept after the lease is gone.
    #[test]
    fn leases_count_apart_and_live_as_long_as_their_renewals() {
        let at = |text: &str| Timestamp::parse_rfc3339(text).unwrap();
        let lease = |n: u64, action: ReservationAction, token: i64, time: &str, expires_at: Option<&str>| {
            let header = header("org-1", Some("alice"), "jobs", at(time), format!("e-{n}"));
            let amount = i64::from(action == ReservationAction::RESERVE);
            let expires_at = expires_at.map(at);
            let event = ReservationEvent {
                header,
                reservation_id: "lease-1".into(),
                action,
                amount,
                expires_at,
                fencing_token: Some(token),
            };
            (n, Event::Reservation(event))
        };
        let mut state = State::default();
        let now = at("2026-11-10T10:00:00Z");
        let (seq, acquire) =
            lease(1, ReservationAction::RESERVE, 7, "2026-11-10T10:00:00Z", Some("2026-11-10T10:01:00Z"));
        state.fold(seq, &acquire, now);
        let leases = |state: &State, whose| state.counters("org-1", whose, "jobs").map_or(0, Counters::active_leases);
        assert_eq!((leases(&state, Whose::Tenant), leases(&state, Whose::Subject(Some("alice")))), (1, 1));
        assert_eq!(state.held("org-1", Whose::Tenant, "jobs", now), 0, "a lease holds no amount");
        assert_eq!(state.fencing_token("org-1", "jobs"), 7);
        let (seq, renew) = lease(2, ReservationAction::RENEW, 7, "2026-11-10T10:00:50Z", Some("2026-11-10T10:05:00Z"));
        state.fold(seq, &renew, now);
        let first = state.counters("org-1", Whose::Tenant, "jobs").and_then(Counters::first_lease_expiry);
        assert_eq!(first, Some(at("2026-11-10T10:05:00Z")));
        state.expire(at("2026-11-10T10:02:00Z"));
        assert_eq!(leases(&state, Whose::Tenant), 1, "renewed past its first expiry");
        let (seq, stale) = lease(3, ReservationAction::RELEASE, 6, "2026-11-10T10:03:00Z", None);
        state.fold(seq, &stale, now);
        assert_eq!(leases(&state, Whose::Tenant), 1, "a stale token frees nothing");
        state.expire(at("2026-11-10T10:06:00Z"));
        assert_eq!(leases(&state, Whose::Tenant), 0, "expired without any call");
        state.check_bookkeeping();
        assert_eq!(state.fencing_token("org-1", "jobs"), 7);
    }

    // Proves that what other writers record is folded whatever it sums to (consumption saturating at i64::MAX, holds
    // exact), where it panicked, and that `room` refuses a request that would take either sum past i64.
    #[test]
    fn sums_past_i64_are_folded_and_refused_to_new_requests() {
        let at = |text: &str| Timestamp::parse_rfc3339(text).unwrap();
        let now = at("2026-11-10T00:00:00Z");
        let largest = schemas::validate::AMOUNT_MAX;
        let mut state = State::default();
        for n in 0..1_025u64 {
            let usage = UsageEvent {
                header: header("org-1", Some("alice"), "tokens", now, format!("u{n}")),
                quantity: largest,
                request_id: None,
                attributes: Default::default(),
            };
            state.fold(2 * n + 1, &Event::Usage(usage), now);
            let reserve = ReservationEvent {
                header: header("org-1", None, "tokens", now, format!("r{n}")),
                reservation_id: format!("r{n}"),
                action: ReservationAction::RESERVE,
                amount: largest,
                expires_at: Some(at("2026-11-10T01:00:00Z")),
                fencing_token: None,
            };
            state.fold(2 * n + 2, &Event::Reservation(reserve), now);
        }
        assert_eq!(
            state.consumed("org-1", Whose::Subject(Some("alice")), "tokens", window::bounds(Window::DAY, now)),
            i64::MAX
        );
        assert_eq!(state.held("org-1", Whose::Tenant, "tokens", now), 1_025 * i128::from(largest));
        let alice = Named { subject: Some("alice"), ..Named::default() };
        let consumption = state.room("org-1", alice, "tokens", Adding::Consumption(now), 1).unwrap_err();
        assert!(consumption.what.contains("the consumption of \"tokens\" by tenant \"org-1\""), "{consumption:?}");
        let held = state.room("org-1", Named::default(), "tokens", Adding::Held, 0).unwrap_err();
        assert_eq!(held.now, 1_025 * i128::from(largest));
        assert!(state.room("org-1", alice, "requests", Adding::Consumption(now), largest).is_ok());
        assert_eq!(state.counters_of("org-1"), 2, "the metric and alice");
        state.expire(at("2026-11-10T02:00:00Z"));
        assert_eq!(state.held("org-1", Whose::Tenant, "tokens", at("2026-11-10T02:00:00Z")), 0, "every hold expired");
        state.check_bookkeeping();
    }

    // Proves the counters keep every zone's windows: 23:30 and 00:30 the next day in New York share a UTC day but
    // not a New York one; and a policy naming a zone not counted says the state must be rebuilt.
    #[test]
    fn consumption_is_counted_in_each_zones_windows() {
        let at = |text: &str| Timestamp::parse_rfc3339(text).unwrap();
        let new_york: Tz = "America/New_York".parse().unwrap();
        let mut state = State::with_zones([new_york, Tz::UTC, new_york], Vec::<String>::new());
        assert_eq!(state.zones(), [Tz::UTC, new_york]);
        for (seq, t) in [(1, "2026-11-17T04:30:00Z"), (2, "2026-11-17T05:30:00Z")] {
            let usage = UsageEvent {
                header: header("org-1", None, "tokens", at(t), format!("u{seq}")),
                quantity: 10,
                request_id: None,
                attributes: Default::default(),
            };
            state.fold(seq, &Event::Usage(usage), at(t));
        }
        let day = |zone, t: &str| {
            state.consumed("org-1", Whose::Tenant, "tokens", window::bounds_in(Window::DAY, zone, at(t)))
        };
        assert_eq!(day(Tz::UTC, "2026-11-17T12:00:00Z"), 20);
        assert_eq!(day(new_york, "2026-11-17T04:30:00Z"), 10);
        assert_eq!(day(new_york, "2026-11-17T05:30:00Z"), 10);
        assert!(!state.is_missing_zones());
        let policy = |id: &str, zone: &str| {
            Event::Policy(PolicyEvent {
                header: header("org-1", None, "tokens", at("2026-11-17T06:00:00Z"), id.into()),
                policy_id: id.into(),
                version: 1,
                scope: Scope::TENANT,
                limit: 100,
                window: Window::DAY,
                enforcement: Enforcement::HARD,
                effective_from: at("2026-11-01T00:00:00Z"),
                burst: None,
                actor: None,
                reason: None,
                time_zone: Some(zone.into()),
                on_failure: None,
                overage_rate: None,
                overage_window: None,
                violation: None,
                window_seconds: None,
                cycle_anchor: None,
                alert_thresholds: None,
                alert_subject_share: None,
            })
        };
        state.fold(3, &policy("daily-ny", "America/New_York"), at("2026-11-17T06:00:00Z"));
        assert!(!state.is_missing_zones(), "New York's windows were counted from the start");
        state.fold(4, &policy("daily-in", "Asia/Kolkata"), at("2026-11-17T06:00:00Z"));
        assert!(state.is_missing_zones(), "Kolkata's days hold none of the usage folded before");
    }

    // Proves that other enforcers' reservations kept for a late close are dropped once the month of their expiry
    // is no longer counted, and only then.
    #[test]
    fn expired_reservations_are_kept_for_their_month_only() {
        let at = |text: &str| Timestamp::parse_rfc3339(text).unwrap();
        let mut state = State::default();
        let reserve = Event::Reservation(ReservationEvent {
            header: header("org-1", None, "tokens", at("2026-10-10T00:00:00Z"), "e1".into()),
            reservation_id: "r1".into(),
            action: ReservationAction::RESERVE,
            amount: 5,
            expires_at: Some(at("2026-10-10T01:00:00Z")),
            fencing_token: None,
        });
        state.fold(1, &reserve, at("2026-10-20T00:00:00Z"));
        assert_eq!((state.holds().count(), state.lives.len()), (0, 1), "expired when folded: kept");
        state.prune(at("2026-11-01T12:00:00Z"));
        assert_eq!(state.lives.len(), 1, "October's windows are counted until a day after its end");
        state.prune(at("2026-11-02T12:00:00Z"));
        assert!(state.lives.is_empty() && state.resting.is_empty());
    }

    // Proves that the hook's own reservations are forgotten once they hold nothing (nobody else closes them),
    // and that an own event the ledger did not record is taken back out of the counters.
    #[test]
    fn own_reservations_are_forgotten_once_closed_and_unrecorded_ones_taken_back() {
        let at = |text: &str| Timestamp::parse_rfc3339(text).unwrap();
        let now = at("2026-11-10T00:00:00Z");
        let mut state = State::default();
        let event = |action, amount, id: &str| ReservationEvent {
            header: header("org-1", None, "tokens", now, id.into()),
            reservation_id: "r1".into(),
            action,
            amount,
            expires_at: (action == ReservationAction::RESERVE).then(|| at("2026-11-10T01:00:00Z")),
            fencing_token: None,
        };
        state.fold_own(PROVISIONAL_SEQ, &event(ReservationAction::RESERVE, 5, "e1"), now);
        let key = ("org-1".to_string(), "r1".to_string());
        state.number_own(&key, PROVISIONAL_SEQ, Some(1), now);
        assert_eq!(state.held("org-1", Whose::Tenant, "tokens", now), 5);
        state.fold_own(PROVISIONAL_SEQ, &event(ReservationAction::COMMIT, 7, "e2"), now);
        assert_eq!(state.held("org-1", Whose::Tenant, "tokens", now), 0);
        assert_eq!(state.consumed("org-1", Whose::Tenant, "tokens", window::bounds(Window::DAY, now)), 7);
        state.number_own(&key, PROVISIONAL_SEQ, None, now);
        assert_eq!(state.held("org-1", Whose::Tenant, "tokens", now), 5, "the COMMIT not recorded: held again");
        assert_eq!(state.consumed("org-1", Whose::Tenant, "tokens", window::bounds(Window::DAY, now)), 0);
        state.fold_own(PROVISIONAL_SEQ, &event(ReservationAction::RELEASE, 0, "e3"), now);
        state.number_own(&key, PROVISIONAL_SEQ, Some(2), now);
        assert_eq!(state.held("org-1", Whose::Tenant, "tokens", now), 0);
        assert!(state.lives.is_empty() && state.resting.is_empty(), "closed, and nobody else closes it");
    }

    /// A reservation event of a generated history: (reservation_id, tenant, action, minutes after the base,
    /// amount, TTL in minutes, whether its subject differs from its reservation's).
    type Generated = (u8, usize, ReservationAction, i64, i64, i64, bool);

    fn generated_event() -> impl Strategy<Value = Generated> {
        let action = prop_oneof![
            Just(ReservationAction::RESERVE),
            Just(ReservationAction::COMMIT),
            Just(ReservationAction::RELEASE)
        ];
        (0..6u8, 0..2usize, action, 0..180i64, 0..50i64, 0..90i64, proptest::bool::weighted(0.2))
    }

    proptest! {
        // Proves that the running held totals (and consumption) equal a recomputation from the open reservations
        // after any sequence of reserve, commit, release and expiry, folded as the writer folds the ledger.
        #[test]
        fn held_totals_equal_a_recomputation_from_the_holds(ops in proptest::collection::vec(op(), 1..80)) {
            let mut state = State::default();
            let mut model = Model::default();
            let mut now = Timestamp::parse_rfc3339("2026-11-01T23:00:00Z").unwrap();
            let mut seq = 0;
            for op in ops {
                match op {
                    Op::Reserve { id, subject, metric, amount, ttl_s } => {
                        // An id stays with one tenant here (the model keys reservations by id alone); another
                        // tenant's id is another reservation, which the property below covers.
                        let tenant = usize::from(id) % 2;
                        let (tenant, subject, metric) = (TENANTS[tenant], subject.map(|s| SUBJECTS[s]), METRICS[metric]);
                        let reservation_id = format!("r{id}");
                        let expires_at = Timestamp(now.micros() + ttl_s * 1_000_000);
                        seq += 1;
                        let event = Event::Reservation(ReservationEvent {
                            header: header(tenant, subject, metric, now, format!("e{seq}")),
                            reservation_id: reservation_id.clone(),
                            action: ReservationAction::RESERVE,
                            amount,
                            expires_at: Some(expires_at),
                            fencing_token: None,
                        });
                        state.fold(seq, &event, now);
                        // A reservation that expired or closed keeps its id: a RESERVE of it again opens nothing.
                        if model.expired.contains_key(&reservation_id) || model.closed.contains(&reservation_id) {
                            continue;
                        }
                        model.holds.entry(reservation_id).or_insert_with(|| Hold {
                            tenant: tenant.into(),
                            subject: subject.map(String::from),
                            metric: metric.into(),
                            amount,
                            expires_at,
                            reserved_at: now,
                            fencing_token: None,
                            api_key: None,
                            project: None,
                        });
                    }
                    Op::Close { id, commit, amount } => {
                        let reservation_id = format!("r{id}");
                        // An open reservation closed now, or an expired one by a close that arrives late, dated at
                        // its expiry (contract §5: valid by event time).
                        let (hold, at) = match model.holds.remove(&reservation_id) {
                            Some(hold) => (hold, now),
                            None => match model.expired.remove(&reservation_id) {
                                Some(hold) => {
                                    let at = hold.expires_at;
                                    (hold, at)
                                }
                                None => continue,
                            },
                        };
                        model.closed.insert(reservation_id.clone());
                        let action = if commit { ReservationAction::COMMIT } else { ReservationAction::RELEASE };
                        let amount = if commit { amount } else { 0 };
                        seq += 1;
                        let event = Event::Reservation(ReservationEvent {
                            header: header(&hold.tenant, hold.subject.as_deref(), &hold.metric, at, format!("e{seq}")),
                            reservation_id,
                            action,
                            amount,
                            expires_at: None,
                            fencing_token: None,
                        });
                        state.fold(seq, &event, now);
                        let day = window::bounds(Window::DAY, at).0.micros();
                        *model.committed.entry((hold.tenant, hold.subject, hold.metric, day)).or_default() += amount;
                    }
                    Op::Advance { seconds } => {
                        now = Timestamp(now.micros() + seconds * 1_000_000);
                        state.expire(now);
                        state.prune(now);
                        let expired: Vec<String> =
                            model.holds.iter().filter(|(_, h)| h.expires_at < now).map(|(id, _)| id.clone()).collect();
                        for id in expired {
                            let hold = model.holds.remove(&id).expect("listed");
                            model.expired.insert(id, hold);
                        }
                    }
                }
                state.check_bookkeeping();
                prop_assert_eq!(state.holds().count(), model.holds.len());
                let day = window::bounds(Window::DAY, now).0;
                for tenant in TENANTS {
                    for metric in METRICS {
                        let subjects = SUBJECTS.iter().map(|s| Whose::Subject(Some(*s)));
                        for whose in subjects.chain([Whose::Subject(None), Whose::Tenant]) {
                            prop_assert_eq!(
                                state.held(tenant, whose, metric, now),
                                model.held(tenant, whose, metric, now),
                                "held by {} {:?} {}", tenant, whose, metric
                            );
                            prop_assert_eq!(
                                state.consumed(tenant, whose, metric, window::bounds(Window::DAY, day)),
                                model.consumed(tenant, whose, metric, day.micros()),
                                "consumed by {} {:?} {}", tenant, whose, metric
                            );
                        }
                    }
                }
            }
        }

        // Proves that the hook's fold of other enforcers' reservation events, dated in any order and with time
        // passing between arrivals, holds and consumes exactly what reconcile's judgement of all of them says
        // (contract §5: validity by event time, not arrival order): a close that arrives before its RESERVE, a second
        // RESERVE, two closes, a close after the expiry, a COMMIT of another subject, and the same reservation_id
        // in two tenants, two reservations.
        #[test]
        fn reservations_fold_to_reconciles_verdict_whatever_the_arrival_order(
            history in proptest::collection::vec(generated_event(), 1..24),
            advances in proptest::collection::vec(0..40i64, 24),
            unrecorded in proptest::collection::vec(proptest::bool::weighted(0.2), 24),
            group_ends in proptest::collection::vec(proptest::bool::weighted(0.5), 24),
        ) {
            let base = Timestamp::parse_rfc3339("2026-11-10T00:00:00Z").unwrap();
            let minutes = |m: i64| Timestamp(base.micros() + m * 60_000_000);
            let mut events: Vec<(u64, ReservationEvent)> = history
                .iter()
                .enumerate()
                .map(|(n, (id, tenant, action, at, amount, ttl, other_subject))| {
                    let subject = if *other_subject { "bob" } else { "alice" };
                    let tenant = TENANTS[*tenant];
                    let reserve = *action == ReservationAction::RESERVE;
                    (n as u64 + 1, ReservationEvent {
                        header: header(tenant, Some(subject), "tokens", minutes(*at), format!("e{n}")),
                        reservation_id: format!("r{id}"),
                        action: *action,
                        amount: if *action == ReservationAction::RELEASE { 0 } else { *amount },
                        expires_at: reserve.then(|| minutes(at + ttl)),
                        fencing_token: None,
                    })
                })
                .collect();
            // Reservations r4 and r5 are this writer's own, as its API makes them (nobody else writes to them): a
            // RESERVE now, of an id never issued before; a close now, of one it holds open (a RESERVE of the same
            // group included). Each is applied with a provisional number; at the end of its group the ledger numbers
            // all of the group's events, or records none of them and they are taken back, the last first. Time
            // passes, and other writers' events are folded, between groups only.
            let own = |e: &ReservationEvent| e.reservation_id == "r4" || e.reservation_id == "r5";
            let mut counted = vec![true; events.len()];
            let mut issued = std::collections::BTreeSet::new();
            let mut state = State::default();
            let mut now = base;
            let mut group: Vec<(u64, u64, Event)> = Vec::new();
            let mut group_unrecorded = false;
            fn end_group(state: &mut State, group: &mut Vec<(u64, u64, Event)>, unrecorded: bool, now: Timestamp) {
                if unrecorded {
                    for (provisional, _, event) in group.iter().rev() {
                        state.take_back(*provisional, event, now);
                    }
                } else {
                    for (provisional, seq, event) in group.iter() {
                        let Event::Reservation(r) = event else { unreachable!("the groups here hold reservations") };
                        state.number_own(&key_of(r), *provisional, Some(*seq), now);
                    }
                }
                group.clear();
                state.check_bookkeeping();
            }
            for n in 0..events.len() {
                let own_event = own(&events[n].1);
                if !own_event || group.is_empty() {
                    end_group(&mut state, &mut group, group_unrecorded, now);
                    now = Timestamp(now.micros() + advances[n] * 60_000_000);
                    state.expire(now);
                    group_unrecorded = unrecorded[n];
                }
                let (seq, event) = &mut events[n];
                if own_event {
                    let ttl = event.expires_at.map(|e| e.micros() - event.header.occurred_at.micros());
                    event.header.occurred_at = now;
                    event.expires_at = ttl.map(|ttl| Timestamp(now.micros() + ttl));
                    let key = key_of(event);
                    let allowed = match event.action {
                        ReservationAction::RESERVE => issued.insert(key.clone()),
                        _ => state.is_open(&key),
                    };
                    counted[n] = allowed && !group_unrecorded;
                    if allowed {
                        let provisional = PROVISIONAL_SEQ + *seq;
                        state.fold_own(provisional, event, now);
                        group.push((provisional, *seq, Event::Reservation(event.clone())));
                    }
                } else {
                    state.fold(*seq, &Event::Reservation(event.clone()), now);
                }
                state.check_bookkeeping();
                if group_ends[n] {
                    end_group(&mut state, &mut group, group_unrecorded, now);
                }
            }
            end_group(&mut state, &mut group, group_unrecorded, now);
            let recorded = |(seq, _): &&(u64, ReservationEvent)| counted[*seq as usize - 1];
            state.expire(now);
            // What reconcile says of all of them.
            let mut held: BTreeMap<(String, String), i128> = BTreeMap::new();
            let mut consumed: BTreeMap<(String, String, i64), i64> = BTreeMap::new();
            for (id, tenant) in (0..6u8).flat_map(|id| TENANTS.map(|tenant| (id, tenant))) {
                let of_id: Vec<(u64, &ReservationEvent)> = events
                    .iter()
                    .filter(recorded)
                    .filter(|(_, e)| e.reservation_id == format!("r{id}") && e.header.tenant == tenant)
                    .map(|(seq, e)| (*seq, e))
                    .collect();
                if of_id.is_empty() {
                    continue;
                }
                let verdict = reservation::judge(&of_id, now);
                let event = |seq: u64| of_id.iter().find(|(s, _)| *s == seq).expect("judged").1;
                if let (Some(reserve), None) = (verdict.reserve, verdict.close) {
                    let reserve = event(reserve);
                    if reserve.expires_at.expect("a RESERVE expires") >= now {
                        let h = &reserve.header;
                        *held.entry((h.tenant.clone(), h.subject.clone().unwrap())).or_default() += i128::from(reserve.amount);
                    }
                }
                if let Some((seq, ReservationAction::COMMIT, amount)) = verdict.close {
                    let h = &event(seq).header;
                    let hour = window::bounds(Window::HOUR, h.occurred_at).0.micros();
                    *consumed.entry((h.tenant.clone(), h.subject.clone().unwrap(), hour)).or_default() += amount;
                }
            }
            for tenant in TENANTS {
                for subject in SUBJECTS {
                    let whose = Whose::Subject(Some(subject));
                    let key = (tenant.to_string(), subject.to_string());
                    prop_assert_eq!(
                        state.held(tenant, whose, "tokens", now), held.get(&key).copied().unwrap_or(0),
                        "held by {} {}", tenant, subject
                    );
                    for hour in 0..6 {
                        let start = minutes(hour * 60);
                        prop_assert_eq!(
                            state.consumed(tenant, whose, "tokens", window::bounds(Window::HOUR, start)),
                            consumed.get(&(tenant.to_string(), subject.to_string(), start.micros())).copied().unwrap_or(0),
                            "consumed by {} {} in hour {}", tenant, subject, hour
                        );
                    }
                }
            }
        }
    }
}
