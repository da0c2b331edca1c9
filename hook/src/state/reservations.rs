//! Reservation lives: the events of each reservation folded so far, judged as reconcile judges them, what their
//! verdict holds (open reservations, by id and by expiry), and the reservations that hold nothing now kept for a
//! late event. What a verdict holds or commits is counted in the window counters ([`Windows`]) it is given.

use std::collections::BTreeSet;

use rules::reservation::{self, Facts};
use rustc_hash::FxHashMap;
use schemas::*;
use serde::{Deserialize, Serialize};

use super::windows::{Named, Windows};

/// Reservations of other enforcers that hold nothing now (closed, expired, or a close whose RESERVE has not
/// arrived), kept for a late event, at most this many (about 600 bytes each: 573 MiB measured for a million
/// with 36-character ids): beyond it those that stopped mattering first are forgotten, and a late event of one
/// then counts only for reconcile (which reports what the hook let through).
pub const RESTING_MAX: usize = 500_000;
/// Sequence numbers of this writer's own events before the ledger numbers them: above every real one, in the
/// order the group decided them ([`super::State::number_own`] puts the real one in their place).
pub const PROVISIONAL_SEQ: u64 = u64::MAX / 2;

/// committed, released or expires.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)] // The RESERVE's own fields, by their contract §3 names.
pub struct Hold {
    /// Whose the RESERVE is.
    #[serde(with = "super::serial::who")]
    pub who: Who,
    pub metric: String,
    pub amount: i64,
    #[serde(with = "super::serial::micros")]
    pub expires_at: Timestamp,
    /// When the RESERVE was made (its event time): how long it has been open.
    #[serde(with = "super::serial::micros")]
    pub reserved_at: Timestamp,
    /// A lease's fencing token: set when the reservation is a lease (a slot of a CONCURRENT policy), whose amount
    /// counts among the leases, not what reservations hold.
    pub fencing_token: Option<i64>,
}

impl Hold {
    /// The members it holds for.
    pub fn named(&self) -> Named<'_> {
        Named::of_who(&self.who)
    }
}

/// Whose a reservation event is, of which metric: the counters its hold or its COMMIT's consumption go to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Owner {
    #[serde(with = "super::serial::who")]
    who: Who,
    metric: String,
}

impl Owner {
    fn of(header: &Header) -> Owner {
        Owner { who: header.who(), metric: header.metric.clone() }
    }

    fn is(&self, header: &Header) -> bool {
        self.who.is_of(header) && self.metric == header.metric
    }
}

/// What the hook keeps of one reservation event: what judging it needs, and whose it is.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Step {
    seq: u64,
    #[serde(with = "super::serial::FactsDef")]
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
#[derive(Debug, Serialize, Deserialize)]
struct Life {
    /// Whose its first event folded is: almost always every event's.
    owner: Owner,
    steps: Vec<Step>,
    /// The RESERVE whose amount the verdict holds (no valid close; held until it expires), by sequence number.
    holding: Option<u64>,
    /// Until when it holds: the RESERVE's expiry, as a lease's valid RENEWs moved it.
    #[serde(with = "super::serial::micros_option")]
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

/// Every reservation kept: those that hold now, and those that hold nothing kept for a late event.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct Reservations {
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
}

impl Reservations {
    /// Folds a reservation event, `own` when this writer decided it, and counts what its verdict changes.
    pub(super) fn fold(&mut self, windows: &mut Windows, seq: u64, r: &ReservationEvent, own: bool, now: Timestamp) {
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
        let owner = (!life.owner.is(&r.header)).then(|| Box::new(Owner::of(&r.header)));
        // Most reservations have two events: room for exactly those, not the four a first push makes.
        life.steps.reserve_exact(1);
        life.steps.push(Step { seq, facts: Facts::of(r), owner });
        life.own &= own;
        self.settle(windows, &key, life, now);
    }

    /// Puts the ledger's sequence number in place of an own event's provisional one, or, when the ledger did not
    /// record it as an event that counts (a copy of one it holds), takes the event back out of the verdict.
    pub(super) fn number_own(
        &mut self,
        windows: &mut Windows,
        key: &Key,
        provisional: u64,
        recorded: Option<u64>,
        now: Timestamp,
    ) {
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
                self.apply(windows, key, &mut life, Counted::default(), now);
                life.steps.retain(|s| s.seq != provisional);
                if life.steps.is_empty() {
                    return;
                }
            }
        }
        self.settle(windows, key, life, now);
    }

    /// Judges a reservation's events again, applies what the verdict changes, and keeps the reservation while it
    /// matters.
    fn settle(&mut self, windows: &mut Windows, key: &Key, mut life: Box<Life>, now: Timestamp) {
        let events: Vec<(u64, &Facts)> = life.steps.iter().map(|s| (s.seq, &s.facts)).collect();
        let verdict = reservation::judge(&events, now);
        let holding = verdict.reserve.filter(|_| verdict.close.is_none());
        let committed = verdict.close.filter(|(_, action, _)| *action == ReservationAction::COMMIT).map(|c| c.0);
        self.apply(windows, key, &mut life, Counted { holding, until: verdict.expires_at, committed }, now);
        self.keep(windows, key, life);
    }

    /// Moves the counters from what `life` applied to what the verdict `holding` (until `until`), `committed` says.
    fn apply(&mut self, windows: &mut Windows, key: &Key, life: &mut Life, verdict: Counted, now: Timestamp) {
        let Counted { holding, until, committed } = verdict;
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
                windows.consume_at(&owner.who.tenant, Named::of_who(&owner.who), &owner.metric, occurred_at, amount);
            }
            life.committed = committed;
        }
        if (holding, until) != (life.holding, life.holding_until) {
            self.close_hold(windows, key);
            if let Some(seq) = holding {
                let step = life.step(seq);
                let owner = life.owner_of(step);
                let expires_at = until.unwrap_or(step.facts.occurred_at);
                if expires_at >= now {
                    let hold = Hold {
                        who: owner.who.clone(),
                        metric: owner.metric.clone(),
                        amount: step.facts.amount,
                        expires_at,
                        reserved_at: step.facts.occurred_at,
                        fencing_token: step.facts.fencing_token,
                    };
                    self.open_hold(windows, key, hold);
                }
            }
            life.holding = holding;
            life.holding_until = until;
        }
    }

    /// Keeps a reservation: while it holds, always; once it holds nothing, while a late event of it could still
    /// change a counted window, unless it is this writer's own, [`RESTING_MAX`] of those at most.
    fn keep(&mut self, windows: &Windows, key: &Key, mut life: Box<Life>) {
        life.resting_until = None;
        if !self.is_open(key) {
            let until = life.matters_until().micros();
            // Own, once the ledger numbered every event of it (until then an event may still be taken back).
            let numbered = || life.steps.iter().all(|s| s.seq < PROVISIONAL_SEQ);
            if (life.own && numbered()) || !windows.counted(until) {
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

    /// Whether the reservation is kept (open, or resting for a late event).
    pub(super) fn keeps(&self, key: &Key) -> bool {
        self.lives.contains_key(key)
    }

    /// Puts back a reservation that is not kept, from its earlier events (ledger order), as the verdict they make
    /// left it, without counting that verdict again: its consumption is in the counters already, or in windows
    /// gone. What a start from a snapshot does before an event after the snapshot goes on with a reservation the
    /// snapshot no longer kept (or whose events the snapshot's fold did not read), as a fold of the whole ledger
    /// judges them together. Nothing when it is kept, or when those events would hold now (then they were never
    /// counted as holding: the event after them is judged alone, as the writer judges it).
    pub(super) fn restore(&mut self, key: &Key, earlier: &[(u64, ReservationEvent)], now: Timestamp) {
        let Some((_, first)) = earlier.first() else { return };
        if self.lives.contains_key(key) {
            return;
        }
        let owner = Owner::of(&first.header);
        let steps = earlier
            .iter()
            .map(|(seq, r)| Step {
                seq: *seq,
                facts: Facts::of(r),
                owner: (!owner.is(&r.header)).then(|| Box::new(Owner::of(&r.header))),
            })
            .collect::<Vec<_>>();
        let events: Vec<(u64, &Facts)> = steps.iter().map(|s| (s.seq, &s.facts)).collect();
        let verdict = reservation::judge(&events, now);
        let holding = verdict.reserve.filter(|_| verdict.close.is_none());
        let holding_until = holding.and(verdict.expires_at);
        if holding_until.is_some_and(|until| until >= now) {
            return;
        }
        let committed = verdict.close.filter(|(_, action, _)| *action == ReservationAction::COMMIT).map(|c| c.0);
        let life = Life { owner, steps, holding, holding_until, committed, own: false, resting_until: None };
        self.lives.insert(key.clone(), Box::new(life));
    }

    /// Takes a reservation out of those kept, to change it.
    fn take_life(&mut self, key: &Key) -> Option<Box<Life>> {
        let life = self.lives.remove(key)?;
        if let Some(until) = life.resting_until {
            self.resting.remove(&(until, key.clone()));
        }
        Some(life)
    }

    /// The open reservations of id `reservation_id`: one per tenant holding it (almost always one, or none).
    pub(super) fn holds_of(&self, reservation_id: &str) -> &[Hold] {
        self.holds.get(reservation_id).map_or(&[], Vec::as_slice)
    }

    /// Open reservations.
    pub(super) fn holds(&self) -> impl Iterator<Item = &Hold> {
        self.holds.values().flatten()
    }

    /// Whether every event of the reservation is this writer's own (it issued it, and nobody else wrote to it).
    pub(super) fn is_own(&self, tenant: &str, reservation_id: &str) -> bool {
        self.lives.get(&(tenant.to_string(), reservation_id.to_string())).is_some_and(|life| life.own)
    }

    pub(super) fn is_open(&self, (tenant, reservation_id): &Key) -> bool {
        self.holds_of(reservation_id).iter().any(|h| &h.who.tenant == tenant)
    }

    /// When the first open reservation expires (microseconds), if any.
    pub(super) fn first_expiry(&self) -> Option<i64> {
        self.expiries.first().map(|(expires_at, _)| *expires_at)
    }

    /// Opens a reservation: its amount counts against its tenant's and subject's limits until it closes or
    /// expires. An open reservation of the same key is replaced.
    fn open_hold(&mut self, windows: &mut Windows, key: &Key, hold: Hold) {
        debug_assert_eq!(hold.who.tenant, key.0);
        self.close_hold(windows, key);
        let amount = i128::from(hold.amount);
        let (lease, expiry) = (hold.fencing_token.is_some(), hold.expires_at.micros());
        // Exact in i128: 2^127 is more than any number of events of at most 2^63 each.
        windows.update(&hold.who.tenant, hold.named(), &hold.metric, |c| match lease {
            true => *c.leases.entry(expiry).or_insert(0) += 1,
            false => c.held += amount,
        });
        self.expiries.insert((hold.expires_at.micros(), key.clone()));
        self.holds.entry(key.1.clone()).or_default().push(hold);
    }

    /// Closes a reservation (committed, released or expired): its amount stops counting. Returns it, if it was
    /// open.
    fn close_hold(&mut self, windows: &mut Windows, key: &Key) -> Option<Hold> {
        let (tenant, reservation_id) = key;
        let holds = self.holds.get_mut(reservation_id)?;
        let hold = holds.swap_remove(holds.iter().position(|h| &h.who.tenant == tenant)?);
        if holds.is_empty() {
            self.holds.remove(reservation_id);
        }
        let removed = self.expiries.remove(&(hold.expires_at.micros(), key.clone()));
        assert!(removed, "an open reservation is in the expiry order");
        let amount = i128::from(hold.amount);
        let (lease, expiry) = (hold.fencing_token.is_some(), hold.expires_at.micros());
        windows.update(&hold.who.tenant, hold.named(), &hold.metric, |c| {
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
    pub(super) fn expire(&mut self, windows: &mut Windows, now: Timestamp) {
        while self.expiries.first().is_some_and(|(expires_at, _)| *expires_at < now.micros()) {
            let (_, key) = self.expiries.first().cloned().expect("a first entry");
            self.close_hold(windows, &key);
            if let Some(life) = self.take_life(&key) {
                self.keep(windows, &key, life);
            }
        }
    }

    /// Forgets the reservations that hold nothing whose last instant that could matter is in a month no longer
    /// counted.
    pub(super) fn prune(&mut self, windows: &Windows) {
        // Soonest first, and a later instant's month never ends before an earlier one's: only what is dropped is
        // read.
        while self.resting.first().is_some_and(|(until, _)| !windows.counted(*until)) {
            let (_, key) = self.resting.pop_first().expect("a first entry");
            self.lives.remove(&key);
        }
    }
}

/// What a verdict puts in the counters: the RESERVE it holds (until when), and the COMMIT it consumes, by sequence
/// number.
#[derive(Debug, Default, Clone, Copy)]
struct Counted {
    holding: Option<u64>,
    until: Option<Timestamp>,
    committed: Option<u64>,
}

#[cfg(test)]
impl Reservations {
    /// Panics unless the reservation bookkeeping agrees with itself: every hold has its reservation and its place
    /// in the expiry order, and every reservation kept that holds nothing is resting, and only those.
    pub(super) fn check_bookkeeping(&self) {
        let holds: Vec<&Hold> = self.holds().collect();
        assert_eq!(holds.len(), self.expiries.len(), "one expiry per hold");
        for (expires_at, key) in &self.expiries {
            let hold = self.holds_of(&key.1).iter().find(|h| h.who.tenant == key.0).expect("an expiry of a hold");
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
        assert_eq!(self.lives.len(), self.resting.len() + self.expiries.len(), "every other one holds");
    }

    /// How many reservations are kept, and how many of those rest.
    pub(super) fn kept(&self) -> (usize, usize) {
        (self.lives.len(), self.resting.len())
    }
}
