//! What the hook knows when it decides: consumption per window, open reservations, grants and policies,
//! folded from the ledger's entries in ledger order. The writer folds every entry another writer (ingest)
//! appended since its last look before each group of decisions, and applies its own decisions directly, so
//! the state always equals a fold of the whole ledger up to its watermark.
//!
//! Windows that ended are dropped as time passes: the hook only ever asks about the windows containing now.

use std::collections::HashMap;

use reconcile::policy::PolicyIndex;
use reconcile::window;
use schemas::*;

/// The window kinds counted for every (tenant, subject, metric).
const WINDOWS: [Window; 4] = [Window::MINUTE, Window::HOUR, Window::DAY, Window::MONTH];

/// Consumption of one window: of a tenant (subject `None`: all its subjects) or of one subject.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CounterKey {
    pub tenant: String,
    pub subject: Option<String>,
    pub metric: String,
    pub window: Window,
    pub start: i64,
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
    pub consumption: HashMap<CounterKey, i64>,
    /// Open reservations by reservation_id.
    pub holds: HashMap<String, Hold>,
    /// The earliest window end still counted: windows ending before it are gone.
    pruned_before: i64,
}

impl Default for State {
    fn default() -> State {
        State {
            watermark: 0,
            policies: PolicyIndex::new(Vec::new()),
            grants: HashMap::new(),
            consumption: HashMap::new(),
            holds: HashMap::new(),
            pruned_before: i64::MIN,
        }
    }
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
                if expires_at >= now && !self.holds.contains_key(&r.reservation_id) {
                    self.holds.insert(r.reservation_id.clone(), hold_of(&r.header, r.amount, expires_at));
                }
            }
            // A close counts when it closes an open reservation in time; anything else is a refused transition
            // for reconcile to report, and consumes nothing here.
            ReservationAction::COMMIT | ReservationAction::RELEASE => {
                let open = self.holds.get(&r.reservation_id).is_some_and(|h| r.header.occurred_at <= h.expires_at);
                if open {
                    self.holds.remove(&r.reservation_id);
                    if r.action == ReservationAction::COMMIT {
                        self.consume(&r.header, r.amount);
                    }
                }
            }
        }
    }

    /// Adds consumption to the windows of every kind containing its event time, for the tenant and, when it
    /// has one, its subject.
    pub fn consume(&mut self, header: &Header, quantity: i64) {
        for window in WINDOWS {
            let (start, end) = window::bounds(window, header.occurred_at);
            if end.micros() < self.pruned_before {
                continue;
            }
            let subjects = [None, header.subject.clone()];
            let distinct = if header.subject.is_some() { &subjects[..] } else { &subjects[..1] };
            for subject in distinct {
                let key = CounterKey {
                    tenant: header.tenant.clone(),
                    subject: subject.clone(),
                    metric: header.metric.clone(),
                    window,
                    start: start.micros(),
                };
                let counter = self.consumption.entry(key).or_insert(0);
                *counter = counter.checked_add(quantity).expect("consumption fits in i64");
            }
        }
    }

    /// Consumption of the window `[start, ..)` of kind `window`.
    pub fn consumed(&self, tenant: &str, subject: Option<&str>, metric: &str, window: Window, start: Timestamp) -> i64 {
        let key = CounterKey {
            tenant: tenant.to_string(),
            subject: subject.map(String::from),
            metric: metric.to_string(),
            window,
            start: start.micros(),
        };
        self.consumption.get(&key).copied().unwrap_or(0)
    }

    /// What open reservations hold now against a tenant's (or, with `subject`, a subject's) limits.
    pub fn held(&self, tenant: &str, subject: Option<&str>, metric: &str, now: Timestamp) -> i64 {
        self.holds
            .values()
            .filter(|h| h.tenant == tenant && h.metric == metric && h.expires_at >= now)
            .filter(|h| subject.is_none() || h.subject.as_deref() == subject)
            .map(|h| h.amount)
            .sum()
    }

    /// Drops windows that ended before `now` minus a day and reservations that expired: bounded memory.
    pub fn prune(&mut self, now: Timestamp) {
        const DAY_MICROS: i64 = 24 * 3_600 * 1_000_000;
        let horizon = now.micros() - DAY_MICROS;
        if horizon <= self.pruned_before {
            return;
        }
        self.pruned_before = horizon;
        self.consumption.retain(|key, _| window::bounds(key.window, Timestamp(key.start)).1.micros() >= horizon);
        self.holds.retain(|_, h| h.expires_at >= now);
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
