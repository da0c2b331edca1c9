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
//!
//! Each concern keeps its own fields: the window counters (`windows`), reservation lives (`reservations`), gauge
//! levels (`gauges`), fencing tokens (`fencing`) and alert dedup (`alerts`); the fold composes them.

mod alerts;
mod fencing;
mod gauges;
mod meters;
mod reservations;
mod serial;
mod windows;

use std::collections::HashMap;

use rules::policy::PolicyIndex;
use schemas::*;
use serde::{Deserialize, Serialize};

use alerts::Alerted;
use fencing::FencingTokens;
use gauges::Gauges;
use meters::Meters;
use reservations::Reservations;
pub(crate) use reservations::key_of;
pub use reservations::{Hold, Key, PROVISIONAL_SEQ, RESTING_MAX};
use windows::Windows;
pub(crate) use windows::timeline_micros;
pub use windows::{Adding, Counters, Named, NoRoom, Whose};

/// What a state's counters keep, which the recorded policies decide: the time zones whose windows are counted, the
/// gauge metrics whose levels are kept, the scopes whose members are counted and how far back the timelines reach.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counting {
    /// IANA names, sorted (UTC among them).
    pub zones: Vec<String>,
    /// Sorted.
    pub gauge_metrics: Vec<String>,
    /// PROJECT, API_KEY, those counted.
    pub scopes: Vec<String>,
    /// The longest ROLLING window or billing cycle kept (microseconds; 0: none).
    pub rolling_micros: i64,
}

/// The fold. Serialized whole in a snapshot ([`crate::snapshot`]): a field added here is written there too, and
/// changes the snapshot format ([`crate::snapshot::FORMAT_VERSION`]).
#[derive(Debug, Serialize, Deserialize)]
pub struct State {
    /// Last ledger sequence number folded.
    pub watermark: u64,
    /// Every policy version folded.
    #[serde(with = "serial::policies")]
    pub policies: PolicyIndex,
    /// Every grant folded, by (tenant, metric).
    #[serde(with = "serial::grants")]
    pub grants: HashMap<(String, String), Vec<GrantEvent>>,
    /// The greatest fencing token of a lease's RESERVE, by (tenant, metric): the next lease gets a greater one.
    fencing_tokens: FencingTokens,
    /// The window counters of every tenant, and which zones and scopes they keep.
    windows: Windows,
    /// Open reservations, and those that hold nothing kept for a late event.
    reservations: Reservations,
    /// Whether a policy folded named a zone the counters did not hold: the consumption folded before it is in none of
    /// that zone's windows, so the state must be rebuilt from the ledger. Also set when a policy makes a metric a
    /// gauge that no gauge named before (the levels of that metric folded before it were not kept), asks for a longer
    /// timeline, or is the first of a scope whose members were not counted.
    missing_zones: bool,
    /// The gauge metrics and their levels.
    gauges: Gauges,
    /// The alerts of windows not pruned yet ([`crate::alerts`]), own and folded: what makes each written once.
    alerted: Alerted,
    /// The meters folded, and the members each UNIQUE_COUNT window has seen.
    meters: Meters,
}

impl Default for State {
    fn default() -> State {
        State {
            watermark: 0,
            policies: PolicyIndex::new(Vec::new()),
            grants: HashMap::new(),
            fencing_tokens: FencingTokens::default(),
            windows: Windows::default(),
            reservations: Reservations::default(),
            missing_zones: false,
            gauges: Gauges::default(),
            alerted: Alerted::default(),
            meters: Meters::default(),
        }
    }
}

impl State {
    /// An empty state that counts windows in UTC and in each of `zones` (the zones recorded policies name), and keeps
    /// the levels of `gauge_metrics` (the metrics recorded gauge quotas name).
    pub fn with_zones(zones: impl IntoIterator<Item = Tz>, gauge_metrics: impl IntoIterator<Item = String>) -> State {
        State { windows: Windows::with_zones(zones), gauges: Gauges::of(gauge_metrics), ..State::default() }
    }

    /// The same state, keeping the counters of the members of `scopes` (PROJECT, API_KEY; others are always kept).
    pub fn counting_scopes(mut self, scopes: impl IntoIterator<Item = Scope>) -> State {
        self.windows.count_scopes(scopes);
        self
    }

    /// The same state, keeping timelines for ROLLING windows as long as the longest of `policies`' (recorded policies).
    pub fn keeping_rolling<'p>(mut self, policies: impl IntoIterator<Item = &'p PolicyEvent>) -> State {
        self.windows.keep_rolling(policies);
        self
    }

    /// The same state, knowing `meters` (every recorded meter version) before it folds usage: read first, as policies
    /// are, so that usage folded before a meter's entry counts by it too.
    pub fn knowing_meters(mut self, meters: Vec<MeterEvent>) -> State {
        self.meters = Meters::of(meters);
        self
    }

    /// Every meter version the state knows.
    pub fn meters(&self) -> &[MeterEvent] {
        self.meters.versions()
    }

    /// What a request of `amount` naming `named` adds to the window `[start, end)` of `tenant`'s `metric`, by the meter
    /// in force at its start: its amount (no meter, SUM), 1 (COUNT), 1 for a member the window has not seen and
    /// nothing for one it has (UNIQUE_COUNT), nothing for a gauge's aggregation.
    pub fn cost(
        &self,
        (tenant, metric): (&str, &str),
        named: Named<'_>,
        amount: i64,
        window: (Timestamp, Timestamp),
    ) -> i64 {
        self.meters.cost((tenant, metric), named, amount, (window.0.micros(), window.1.micros()))
    }

    /// The scopes whose members' counters are kept beside the tenant's and the subjects'.
    pub fn scopes_counted(&self) -> Vec<Scope> {
        self.windows.scopes_counted()
    }

    /// The time zones whose windows are counted: UTC, then those of the policies folded.
    pub fn zones(&self) -> &[Tz] {
        self.windows.zones()
    }

    /// What the counters keep, whatever order the policies that asked for it came in: what a snapshot was built for.
    pub fn counting(&self) -> Counting {
        let mut zones: Vec<String> = self.zones().iter().map(|zone| zone.name().to_string()).collect();
        zones.sort();
        Counting {
            zones,
            gauge_metrics: self.gauge_metrics().cloned().collect(),
            scopes: self.scopes_counted().iter().map(|scope| scope.symbol().to_string()).collect(),
            rolling_micros: self.windows.rolling_micros(),
        }
    }

    /// Whether a policy folded names a zone whose windows were not counted from the start: the state's counters lack
    /// the consumption folded before it, and it must be rebuilt ([`State::with_zones`], then the fold again).
    pub fn is_missing_zones(&self) -> bool {
        self.missing_zones
    }

    /// Folds one recorded entry.
    pub fn fold(&mut self, seq: u64, event: &Event, now: Timestamp) {
        debug_assert!(seq > self.watermark, "entries are folded in ledger order");
        self.watermark = seq;
        match event {
            Event::Usage(u) if self.gauges.is_level(&self.policies, &u.header) => {
                self.note_level(&u.header.tenant, &u.header.metric, u.header.occurred_at, u.quantity)
            }
            Event::Usage(u) => self.consume(&u.header, u.quantity),
            Event::Reservation(r) => self.fold_reservation(seq, r, false, now),
            Event::Grant(g) => {
                self.grants.entry((g.header.tenant.clone(), g.header.metric.clone())).or_default().push(g.clone())
            }
            Event::Policy(p) => {
                // Each concern starts counting what the policy needs; any that did misses what was folded before.
                let counted_anew = self.windows.note_policy(p);
                let gauge_anew = self.gauges.note_policy(p);
                if counted_anew || gauge_anew {
                    self.missing_zones = true;
                }
                let mut policies = self.policies.policies().to_vec();
                policies.push(p.clone());
                self.policies = PolicyIndex::new(policies).with_assignments(self.policies.assignments());
            }
            Event::PlanAssignment(a) => {
                let mut assignments = self.policies.assignments().to_vec();
                assignments.push(a.clone());
                let policies = self.policies.policies().to_vec();
                self.policies = PolicyIndex::new(policies).with_assignments(&assignments);
            }
            Event::Alert(a) => self.note_alert(a),
            // Usage folded before a meter it did not know may count otherwise by it: rebuilt, knowing it.
            Event::Meter(m) => {
                if self.meters.note(m) {
                    self.missing_zones = true;
                }
            }
            // A correction changes what is billed and audited, not what was enforced: the hook's counters stay as the
            // requests found them (docs/decisions.md, "A correction gives no capacity back"). A capacity lease's step is
            // the allocator's book of a window; what holders allowed under it counts through their decisions' usage.
            Event::Decision(_) | Event::Adjustment(_) | Event::Correction(_) | Event::CapacityLease(_) => {}
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
        self.reservations.number_own(&mut self.windows, key, provisional, recorded, now);
    }

    /// Takes an own event the ledger did not record back out of the state: its consumption, or its step of a
    /// reservation (applied as `provisional`, judged again without it), in any order.
    pub fn take_back(&mut self, provisional: u64, event: &Event, now: Timestamp) {
        match event {
            Event::Usage(u) => self.take_back_usage(&u.header, u.quantity),
            Event::Reservation(r) => self.number_own(&key_of(r), provisional, None, now),
            Event::Alert(a) => self.alerted.forget(&a.alert_id),
            Event::Decision(_)
            | Event::Grant(_)
            | Event::Policy(_)
            | Event::Adjustment(_)
            | Event::Correction(_)
            | Event::CapacityLease(_)
            | Event::PlanAssignment(_)
            | Event::Meter(_) => {}
        }
    }

    /// Remembers an alert, own or folded, until its window is pruned.
    pub fn note_alert(&mut self, alert: &AlertEvent) {
        self.alerted.note(alert);
    }

    /// Whether the alert of this id was written (by this hook or another writer whose entries it folded).
    pub fn is_alerted(&self, alert_id: &str) -> bool {
        self.alerted.contains(alert_id)
    }

    /// Whether the reservation of `key` is kept (open, or resting for a late event).
    pub fn keeps_reservation(&self, key: &Key) -> bool {
        self.reservations.keeps(key)
    }

    /// Puts back a reservation not kept, from its `earlier` events (before the watermark, in ledger order), as
    /// their verdict left it without counting it again: a start from a snapshot does so before it folds an event
    /// after the snapshot that goes on with it ([`reservations`]: `restore`).
    pub fn restore_reservation(&mut self, key: &Key, earlier: &[(u64, ReservationEvent)], now: Timestamp) {
        self.reservations.restore(key, earlier, now);
    }

    fn fold_reservation(&mut self, seq: u64, r: &ReservationEvent, own: bool, now: Timestamp) {
        if let (ReservationAction::RESERVE, Some(token)) = (r.action, r.fencing_token) {
            self.note_fencing_token(&r.header.tenant, &r.header.metric, token);
        }
        self.reservations.fold(&mut self.windows, seq, r, own, now);
    }

    /// How many metrics, and subjects of each metric, `tenant` has counters for.
    pub fn counters_of(&self, tenant: &str) -> usize {
        self.windows.counters_of(tenant)
    }

    /// How many counters (a metric's, a subject's, a project's, an API key's) a request of `tenant` for `metric`
    /// naming `named` would add.
    pub fn new_counters(&self, tenant: &str, named: Named<'_>, metric: &str) -> usize {
        self.windows.new_counters(tenant, named, metric)
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
        self.windows.room(tenant, named, metric, adding, amount)
    }

    /// The counters of a tenant's metric, of one subject, or of what carries no subject, if any.
    pub fn counters(&self, tenant: &str, whose: Whose<'_>, metric: &str) -> Option<&Counters> {
        self.windows.counters(tenant, whose, metric)
    }

    /// Adds consumption to the windows of every kind containing its event time, for the tenant and, when it
    /// has one, its subject.
    pub fn consume(&mut self, header: &Header, quantity: i64) {
        self.count_usage(header, quantity, false);
    }

    /// Takes back what [`State::consume`] added for a usage event the ledger did not record.
    pub fn take_back_usage(&mut self, header: &Header, quantity: i64) {
        self.count_usage(header, quantity, true);
    }

    /// A metric without a meter adds its quantity to every window; a metered one what its meter counts in each.
    fn count_usage(&mut self, header: &Header, quantity: i64, back: bool) {
        let (tenant, metric, at) = (&header.tenant, &header.metric, header.occurred_at);
        if !self.meters.is_metered(tenant, metric) {
            let signed = if back { -quantity } else { quantity };
            self.windows.consume_at(tenant, Named::of(header), metric, at, signed);
            return;
        }
        let windows = self.windows.counted_windows_at(at);
        let deltas: Vec<((i64, i64), i64)> =
            windows.into_iter().map(|w| (w, self.meters.delta(header, quantity, back, w))).collect();
        // The timelines (ROLLING windows, billing cycles) count a metered metric's events by the meter in force at the
        // event: its quantity, 1 for a COUNT, and nothing for a UNIQUE_COUNT or a gauge (a timeline sums; it cannot
        // tell a member seen already, docs/decisions.md).
        let sign = if back { -1 } else { 1 };
        let timeline = match self.meters.in_force(tenant, metric, at.micros()).map(|m| m.aggregation) {
            None | Some(Aggregation::SUM) => sign * quantity,
            Some(Aggregation::COUNT) => sign,
            Some(_) => 0,
        };
        self.windows.consume_windows((tenant, metric), Named::of(header), at, &deltas, timeline);
    }

    /// Consumption of the window `[start, end)`: a window of a kind in a zone whose windows are counted (UTC, or a zone
    /// a policy folded names).
    pub fn consumed(&self, tenant: &str, whose: Whose<'_>, metric: &str, window: (Timestamp, Timestamp)) -> i64 {
        self.windows.consumed(tenant, whose, metric, window)
    }

    /// Consumption of the ROLLING window `[start, end)`, from the timelines (kept once a ROLLING policy is folded).
    pub fn consumed_rolling(
        &self,
        tenant: &str,
        whose: Whose<'_>,
        metric: &str,
        window: (Timestamp, Timestamp),
    ) -> i64 {
        self.windows.consumed_rolling(tenant, whose, metric, window)
    }

    /// What open reservations hold now against a tenant's, a subject's, or the subjectless' limits. `now` is the
    /// instant of the last [`State::expire`]: holds that expired before it were taken out of the totals then.
    pub fn held(&self, tenant: &str, whose: Whose<'_>, metric: &str, now: Timestamp) -> i128 {
        debug_assert!(
            self.reservations.first_expiry().is_none_or(|expires_at| expires_at >= now.micros()),
            "expire(now) ran before asking what is held at {now:?}"
        );
        self.counters(tenant, whose, metric).map_or(0, |c| c.held)
    }

    /// The metrics whose usage events are levels (a gauge quota names them), whose levels are kept.
    pub fn gauge_metrics(&self) -> impl Iterator<Item = &String> {
        self.gauges.gauge_metrics()
    }

    /// Notes a report of `tenant`'s level of the gauge `metric` at `at`: it is the level unless a later one is known.
    pub fn note_level(&mut self, tenant: &str, metric: &str, at: Timestamp, level: i64) {
        self.gauges.note_level(tenant, metric, at, level);
    }

    /// `tenant`'s level of the gauge `metric`, and when it was reported: none before any report.
    pub fn level(&self, tenant: &str, metric: &str) -> Option<(Timestamp, i64)> {
        self.gauges.level(tenant, metric)
    }

    /// The greatest fencing token a lease of `tenant`'s `metric` was granted with (0 when none was).
    pub fn fencing_token(&self, tenant: &str, metric: &str) -> i64 {
        self.fencing_tokens.greatest(tenant, metric)
    }

    /// Notes that a lease of `tenant`'s `metric` was granted `token`: the next one gets a greater one. The fold notes
    /// every lease it reads; a start notes the greatest the ledger holds, of leases too old to be folded.
    pub fn note_fencing_token(&mut self, tenant: &str, metric: &str, token: i64) {
        self.fencing_tokens.note(tenant, metric, token);
    }

    /// The open reservations of id `reservation_id`: one per tenant holding it (almost always one, or none).
    pub fn holds_of(&self, reservation_id: &str) -> &[Hold] {
        self.reservations.holds_of(reservation_id)
    }

    /// Open reservations.
    pub fn holds(&self) -> impl Iterator<Item = &Hold> {
        self.reservations.holds()
    }

    /// The tenants that have consumed or hold anything the state counts.
    pub fn tenants(&self) -> impl Iterator<Item = &str> {
        self.windows.tenants()
    }

    /// Whether every event of the reservation is this writer's own (it issued it, and nobody else wrote to it).
    pub fn is_own(&self, tenant: &str, reservation_id: &str) -> bool {
        self.reservations.is_own(tenant, reservation_id)
    }

    /// Closes the reservations that expired before `now`: from now on they hold nothing, and only a late close
    /// with an event time before their expiry can still close them.
    pub fn expire(&mut self, now: Timestamp) {
        self.reservations.expire(&mut self.windows, now);
    }

    /// Drops windows that ended before `now` minus a day (at most once a minute): bounded memory.
    pub fn prune(&mut self, now: Timestamp) {
        let Some(horizon) = self.windows.prune(now) else { return };
        self.reservations.prune(&self.windows);
        self.alerted.prune(horizon);
        self.meters.prune(horizon);
    }

    /// Counts windows, and keeps reservations that hold nothing, however long ago they ended, until the next prune:
    /// a start folds a snapshot's tail as a fold from nothing folds every entry (pruning only after the last), so
    /// that an entry of the tail is counted and judged with what a fold from nothing would still hold then.
    pub fn unprune(&mut self) {
        self.windows.unprune();
    }

    /// Drops windows that ended before `now` minus a day, however recently it was done: a start prunes a snapshot's
    /// state as it prunes a fold from nothing.
    pub fn prune_at_start(&mut self, now: Timestamp) {
        let Some(horizon) = self.windows.prune_at_start(now) else { return };
        self.reservations.prune(&self.windows);
        self.alerted.prune(horizon);
        self.meters.prune(horizon);
    }
}

#[cfg(test)]
impl State {
    /// Panics unless the reservation bookkeeping agrees with itself: every hold has its reservation and its place
    /// in the expiry order, and every reservation kept that holds nothing is resting, and only those; and each
    /// tenant's count of counters is what it keeps.
    fn check_bookkeeping(&self) {
        self.reservations.check_bookkeeping();
        self.windows.check_bookkeeping();
    }

    fn is_open(&self, key: &Key) -> bool {
        self.reservations.is_open(key)
    }
}

#[cfg(test)]
mod tests;
