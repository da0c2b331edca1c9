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

use std::collections::{BTreeSet, HashMap};

use reconcile::policy::PolicyIndex;
use reconcile::window;
use rustc_hash::FxHashMap;
use schemas::*;

/// The window kinds counted for every (tenant, subject, metric).
const WINDOWS: [Window; 4] = [Window::MINUTE, Window::HOUR, Window::DAY, Window::MONTH];
/// Windows are dropped once they ended a day ago: a decision only asks about windows containing now, the day
/// leaves room for a clock that steps back.
const PRUNE_AFTER_MICROS: i64 = 24 * 3_600 * 1_000_000;
/// Ended windows are looked for at most once a minute (the shortest window): pruning walks every counter, so
/// doing it before every group would make each group cost as much as the state is large.
const PRUNE_EVERY_MICROS: i64 = 60 * 1_000_000;
/// Reservations that expired with no close, kept for a late close, at most this many (about 150 MB): beyond it
/// those that expired first are forgotten, and a late close of one then counts only for reconcile, which reports
/// the overshoot the hook let through.
pub const EXPIRED_MAX: usize = 1_000_000;

/// What one tenant (all its subjects) or one subject has of one metric.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Counters {
    /// Consumption by window kind and window start (microseconds).
    pub consumed: FxHashMap<(Window, i64), i64>,
    /// What open reservations hold now: the sum of their amounts.
    pub held: i64,
}

impl Counters {
    fn is_empty(&self) -> bool {
        self.consumed.is_empty() && self.held == 0
    }
}

/// One tenant's metric: the tenant's counters, each subject's, and those of what carries no subject.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Usage {
    tenant: Counters,
    subjects: FxHashMap<String, Counters>,
    no_subject: Counters,
}

/// Whose counters a policy asks for: a TENANT policy the tenant's (all its subjects and what carries none), a
/// SUBJECT policy one subject's, or, for a request without a subject, those of everything without one: a group
/// of its own, as reconcile judges it (SPEC 3: a SUBJECT policy applies to every subject separately).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Whose<'a> {
    Tenant,
    Subject(Option<&'a str>),
}

impl<'a> Whose<'a> {
    pub fn of(scope: Scope, subject: Option<&'a str>) -> Whose<'a> {
        match scope {
            Scope::TENANT => Whose::Tenant,
            Scope::SUBJECT => Whose::Subject(subject),
        }
    }
}

/// An open reservation: it holds its amount against every limit of its tenant, subject and metric until it is
/// committed, released or expires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub tenant: String,
    pub subject: Option<String>,
    pub metric: String,
    pub amount: i64,
    pub expires_at: Timestamp,
}

/// The fold.
#[derive(Debug)]
pub struct State {
    /// Last ledger sequence number folded.
    pub watermark: u64,
    pub policies: PolicyIndex,
    pub grants: HashMap<(String, String), Vec<GrantEvent>>,
    /// Tenant -> metric -> counters.
    usage: FxHashMap<String, FxHashMap<String, Usage>>,
    /// Open reservations by reservation_id.
    holds: FxHashMap<String, Hold>,
    /// The open reservations by expiry (microseconds), soonest first.
    expiries: BTreeSet<(i64, String)>,
    /// Reservations that expired with no close: a close with an event time at or before `expires_at` that
    /// arrives late (from another enforcer, through ingest) is still valid, and a COMMIT then counts (SPEC 5).
    /// Kept while the month of their expiry is counted, [`EXPIRED_MAX`] at most.
    expired: FxHashMap<String, Hold>,
    /// The same by expiry (microseconds), soonest first: pruning and the cap take from the front.
    expired_order: BTreeSet<(i64, String)>,
    /// The earliest window end still counted: windows ending before it are gone.
    pruned_before: i64,
}

impl Default for State {
    fn default() -> State {
        State {
            watermark: 0,
            policies: PolicyIndex::new(Vec::new()),
            grants: HashMap::new(),
            usage: FxHashMap::default(),
            holds: FxHashMap::default(),
            expiries: BTreeSet::new(),
            expired: FxHashMap::default(),
            expired_order: BTreeSet::new(),
            pruned_before: i64::MIN,
        }
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
    /// Folds one recorded entry.
    pub fn fold(&mut self, seq: u64, event: &Event, now: Timestamp) {
        debug_assert!(seq > self.watermark, "entries are folded in ledger order");
        self.watermark = seq;
        match event {
            Event::Usage(u) => self.consume(&u.header, u.quantity),
            Event::Reservation(r) => self.fold_reservation(r, now),
            Event::Grant(g) => {
                self.grants.entry((g.header.tenant.clone(), g.header.metric.clone())).or_default().push(g.clone())
            }
            Event::Policy(p) => {
                let mut policies = self.policies.policies().to_vec();
                policies.push(p.clone());
                self.policies = PolicyIndex::new(policies);
            }
            Event::Decision(_) | Event::Adjustment(_) => {}
        }
    }

    fn fold_reservation(&mut self, r: &ReservationEvent, now: Timestamp) {
        match r.action {
            ReservationAction::RESERVE => {
                let expires_at = r.expires_at.unwrap_or(r.header.occurred_at);
                if self.holds.contains_key(&r.reservation_id) || self.expired.contains_key(&r.reservation_id) {
                    return;
                }
                let hold = hold_of(&r.header, r.amount, expires_at);
                if expires_at >= now {
                    self.open_hold(&r.reservation_id, hold);
                } else {
                    self.keep_expired(r.reservation_id.clone(), hold);
                }
            }
            // A close counts when it closes a reservation in time, open or expired since (it arrived late);
            // anything else is a refused transition for reconcile to report, and consumes nothing here.
            ReservationAction::COMMIT | ReservationAction::RELEASE => {
                let in_time = |h: &Hold| r.header.occurred_at <= h.expires_at;
                let valid = if self.holds.get(&r.reservation_id).is_some_and(in_time) {
                    self.close_hold(&r.reservation_id);
                    true
                } else if self.expired.get(&r.reservation_id).is_some_and(in_time) {
                    self.take_expired(&r.reservation_id);
                    true
                } else {
                    false
                };
                if valid && r.action == ReservationAction::COMMIT {
                    self.consume(&r.header, r.amount);
                }
            }
        }
    }

    /// Applies `change` to the counters of a tenant's metric and to its subject's (or to those without one).
    fn update(&mut self, tenant: &str, subject: Option<&str>, metric: &str, mut change: impl FnMut(&mut Counters)) {
        let usage = entry_of(entry_of(&mut self.usage, tenant), metric);
        change(&mut usage.tenant);
        match subject {
            Some(subject) => change(entry_of(&mut usage.subjects, subject)),
            None => change(&mut usage.no_subject),
        }
    }

    /// The counters of a tenant's metric, of one subject, or of what carries no subject, if any.
    pub fn counters(&self, tenant: &str, whose: Whose<'_>, metric: &str) -> Option<&Counters> {
        let usage = self.usage.get(tenant)?.get(metric)?;
        match whose {
            Whose::Tenant => Some(&usage.tenant),
            Whose::Subject(Some(subject)) => usage.subjects.get(subject),
            Whose::Subject(None) => Some(&usage.no_subject),
        }
    }

    /// Adds consumption to the windows of every kind containing its event time, for the tenant and, when it
    /// has one, its subject.
    pub fn consume(&mut self, header: &Header, quantity: i64) {
        let mut windows = [(Window::MINUTE, 0); 4];
        let mut live = 0;
        for window in WINDOWS {
            let (start, end) = window::bounds(window, header.occurred_at);
            if end.micros() >= self.pruned_before {
                windows[live] = (window, start.micros());
                live += 1;
            }
        }
        let windows = &windows[..live];
        self.update(&header.tenant, header.subject.as_deref(), &header.metric, |counters| {
            for key in windows {
                let counter = counters.consumed.entry(*key).or_insert(0);
                *counter = counter.checked_add(quantity).expect("consumption fits in i64");
            }
        });
    }

    /// Consumption of the window `[start, ..)` of kind `window`.
    pub fn consumed(&self, tenant: &str, whose: Whose<'_>, metric: &str, window: Window, start: Timestamp) -> i64 {
        let counters = self.counters(tenant, whose, metric);
        counters.and_then(|c| c.consumed.get(&(window, start.micros())).copied()).unwrap_or(0)
    }

    /// What open reservations hold now against a tenant's, a subject's, or the subjectless' limits. `now` is the
    /// instant of the last [`State::expire`]: holds that expired before it were taken out of the totals then.
    pub fn held(&self, tenant: &str, whose: Whose<'_>, metric: &str, now: Timestamp) -> i64 {
        debug_assert!(
            self.expiries.first().is_none_or(|(expires_at, _)| *expires_at >= now.micros()),
            "expire(now) ran before asking what is held at {now:?}"
        );
        self.counters(tenant, whose, metric).map_or(0, |c| c.held)
    }

    /// The open reservation `reservation_id`, if any.
    pub fn hold(&self, reservation_id: &str) -> Option<&Hold> {
        self.holds.get(reservation_id)
    }

    /// Open reservations.
    pub fn holds(&self) -> impl Iterator<Item = (&String, &Hold)> {
        self.holds.iter()
    }

    /// Opens a reservation: its amount counts against its tenant's and subject's limits until it closes or
    /// expires. An open reservation of the same id is replaced.
    pub fn open_hold(&mut self, reservation_id: &str, hold: Hold) {
        self.close_hold(reservation_id);
        let amount = hold.amount;
        self.update(&hold.tenant, hold.subject.as_deref(), &hold.metric, |c| {
            c.held = c.held.checked_add(amount).expect("held amounts fit in i64");
        });
        self.expiries.insert((hold.expires_at.micros(), reservation_id.to_string()));
        self.holds.insert(reservation_id.to_string(), hold);
    }

    /// Closes a reservation (committed, released or expired): its amount stops counting. Returns it, if it was
    /// open.
    pub fn close_hold(&mut self, reservation_id: &str) -> Option<Hold> {
        let hold = self.holds.remove(reservation_id)?;
        let removed = self.expiries.remove(&(hold.expires_at.micros(), reservation_id.to_string()));
        assert!(removed, "an open reservation is in the expiry order");
        let amount = hold.amount;
        self.update(&hold.tenant, hold.subject.as_deref(), &hold.metric, |c| {
            c.held = c.held.checked_sub(amount).expect("held amounts fit in i64");
        });
        Some(hold)
    }

    /// Closes the reservations that expired before `now`: from now on they hold nothing, and only a late close
    /// with an event time before their expiry can still close them.
    pub fn expire(&mut self, now: Timestamp) {
        while self.expiries.first().is_some_and(|(expires_at, _)| *expires_at < now.micros()) {
            let (_, reservation_id) = self.expiries.pop_first().expect("a first entry");
            let hold = self.holds.remove(&reservation_id).expect("the expiry order lists open reservations only");
            self.update(&hold.tenant, hold.subject.as_deref(), &hold.metric, |c| {
                c.held = c.held.checked_sub(hold.amount).expect("held amounts fit in i64");
            });
            self.keep_expired(reservation_id, hold);
        }
    }

    /// Keeps a reservation that expired with no close, for a late close ([`EXPIRED_MAX`] at most).
    fn keep_expired(&mut self, reservation_id: String, hold: Hold) {
        if !self.counted(hold.expires_at) {
            return;
        }
        self.expired_order.insert((hold.expires_at.micros(), reservation_id.clone()));
        self.expired.insert(reservation_id, hold);
        while self.expired.len() > EXPIRED_MAX {
            let (_, first) = self.expired_order.pop_first().expect("the order lists every kept reservation");
            self.expired.remove(&first);
        }
    }

    /// Takes a reservation that expired out of those kept: a late close closed it.
    fn take_expired(&mut self, reservation_id: &str) -> Option<Hold> {
        let hold = self.expired.remove(reservation_id)?;
        self.expired_order.remove(&(hold.expires_at.micros(), reservation_id.to_string()));
        Some(hold)
    }

    /// Whether a late close at `expires_at` could still change a counted window: its month has not been pruned.
    fn counted(&self, expires_at: Timestamp) -> bool {
        window::bounds(Window::MONTH, expires_at).1.micros() >= self.pruned_before
    }

    /// Drops windows that ended before `now` minus a day (at most once a minute): bounded memory.
    pub fn prune(&mut self, now: Timestamp) {
        let horizon = now.micros() - PRUNE_AFTER_MICROS;
        if horizon < self.pruned_before.saturating_add(PRUNE_EVERY_MICROS) {
            return;
        }
        self.pruned_before = horizon;
        // Soonest first, and a month's end never comes before an earlier expiry's: only what is dropped is read.
        while let Some((expires_at, _)) = self.expired_order.first()
            && window::bounds(Window::MONTH, Timestamp(*expires_at)).1.micros() < horizon
        {
            let (_, reservation_id) = self.expired_order.pop_first().expect("a first entry");
            self.expired.remove(&reservation_id);
        }
        let live = |counters: &mut Counters| {
            counters
                .consumed
                .retain(|(window, start), _| window::bounds(*window, Timestamp(*start)).1.micros() >= horizon);
            !counters.is_empty()
        };
        self.usage.retain(|_, metrics| {
            metrics.retain(|_, usage| {
                usage.subjects.retain(|_, counters| live(counters));
                let no_subject = live(&mut usage.no_subject);
                live(&mut usage.tenant) || no_subject || !usage.subjects.is_empty()
            });
            !metrics.is_empty()
        });
    }
}

pub fn hold_of(header: &Header, amount: i64, expires_at: Timestamp) -> Hold {
    Hold {
        tenant: header.tenant.clone(),
        subject: header.subject.clone(),
        metric: header.metric.clone(),
        amount,
        expires_at,
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
        Reserve { id: u8, tenant: usize, subject: Option<usize>, metric: usize, amount: i64, ttl_s: i64 },
        Close { id: u8, commit: bool, amount: i64 },
        Advance { seconds: i64 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..8u8, 0..2usize, proptest::option::of(0..2usize), 0..2usize, 0..100i64, 1..1_800i64).prop_map(
                |(id, tenant, subject, metric, amount, ttl_s)| Op::Reserve {
                    id,
                    tenant,
                    subject,
                    metric,
                    amount,
                    ttl_s
                }
            ),
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
        }
    }

    /// The model: open reservations as a plain map, and committed amounts per (tenant, subject, metric, day).
    #[derive(Default)]
    struct Model {
        holds: BTreeMap<String, Hold>,
        /// Expired with no close: a late close dated before the expiry still closes them.
        expired: BTreeMap<String, Hold>,
        committed: BTreeMap<(String, Option<String>, String, i64), i64>,
    }

    impl Model {
        fn held(&self, tenant: &str, whose: Whose<'_>, metric: &str, now: Timestamp) -> i64 {
            let matches = |h: &Hold| h.tenant == tenant && h.metric == metric && h.expires_at >= now;
            let of_subject = |h: &Hold| match whose {
                Whose::Tenant => true,
                Whose::Subject(subject) => h.subject.as_deref() == subject,
            };
            self.holds.values().filter(|h| matches(h) && of_subject(h)).map(|h| h.amount).sum()
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
            }
        }
    }

    // Proves that reservations kept for a late close are dropped once the month of their expiry is no longer
    // counted, and only then.
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
        });
        state.fold(1, &reserve, at("2026-10-20T00:00:00Z"));
        assert_eq!((state.holds().count(), state.expired.len()), (0, 1), "expired when folded: kept");
        state.prune(at("2026-11-01T12:00:00Z"));
        assert_eq!(state.expired.len(), 1, "October's windows are counted until a day after its end");
        state.prune(at("2026-11-02T12:00:00Z"));
        assert!(state.expired.is_empty() && state.expired_order.is_empty());
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
                    Op::Reserve { id, tenant, subject, metric, amount, ttl_s } => {
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
                        });
                        state.fold(seq, &event, now);
                        // A reservation that expired keeps its id: a RESERVE of it again opens nothing.
                        if model.expired.contains_key(&reservation_id) {
                            continue;
                        }
                        model.holds.entry(reservation_id).or_insert_with(|| Hold {
                            tenant: tenant.into(),
                            subject: subject.map(String::from),
                            metric: metric.into(),
                            amount,
                            expires_at,
                        });
                    }
                    Op::Close { id, commit, amount } => {
                        let reservation_id = format!("r{id}");
                        // An open reservation closed now, or an expired one by a close that arrives late, dated at
                        // its expiry (SPEC 5: valid by event time).
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
                        let action = if commit { ReservationAction::COMMIT } else { ReservationAction::RELEASE };
                        let amount = if commit { amount } else { 0 };
                        seq += 1;
                        let event = Event::Reservation(ReservationEvent {
                            header: header(&hold.tenant, hold.subject.as_deref(), &hold.metric, at, format!("e{seq}")),
                            reservation_id,
                            action,
                            amount,
                            expires_at: None,
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
                                state.consumed(tenant, whose, metric, Window::DAY, day),
                                model.consumed(tenant, whose, metric, day.micros()),
                                "consumed by {} {:?} {}", tenant, whose, metric
                            );
                        }
                    }
                }
            }
        }
    }
}
