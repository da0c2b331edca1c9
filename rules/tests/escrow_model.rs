//! A model test of capacity leases (contract §9.6): an allocator and holders run random sequences of grants, use,
//! renewals, returns, holder deaths, expiries and reclaims while true time advances, each holder's and the
//! allocator's clocks off true time by up to the clock-skew margin. Checked after every step against counts the test
//! keeps itself: allowed units never pass the limit, units out on leases plus consumption never pass it, no unit is
//! granted twice (what the book says is out is what the open leases hold), and no holder uses a lease after the
//! allocator took its units back.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use rules::escrow::steps::{Step as Recorded, Steps};
use rules::escrow::{self, Book, CLOCK_SKEW_MARGIN_MS, Lease, Settings};
use schemas::{CapacityLeaseAction, Timestamp};

const MARGIN_MICROS: i64 = CLOCK_SKEW_MARGIN_MS * 1_000;
const HOLDERS: usize = 3;

#[derive(Debug, Clone)]
enum Step {
    /// True time moves on.
    Advance { micros: i64 },
    /// The owner decides a request itself.
    OwnerAllows { amount: i64 },
    /// A holder without an open lease asks for one.
    Grant { holder: usize, asked: i64 },
    /// A holder decides a request under its lease.
    Use { holder: usize, amount: i64 },
    /// A holder renews its lease, asking for more.
    Renew { holder: usize, asked: i64 },
    /// A holder gives its lease back.
    Return { holder: usize },
    /// A holder dies: it never uses, renews nor returns its lease again.
    Die { holder: usize },
    /// The allocator looks for expired leases and reclaims them.
    Sweep,
}

fn step() -> impl Strategy<Value = Step> {
    let holder = 0..HOLDERS;
    prop_oneof![
        3 => (0..3 * MARGIN_MICROS).prop_map(|micros| Step::Advance { micros }),
        1 => (1..30i64).prop_map(|amount| Step::OwnerAllows { amount }),
        2 => (holder.clone(), 1..60i64).prop_map(|(holder, asked)| Step::Grant { holder, asked }),
        5 => (holder.clone(), 1..20i64).prop_map(|(holder, amount)| Step::Use { holder, amount }),
        1 => (holder.clone(), 1..60i64).prop_map(|(holder, asked)| Step::Renew { holder, asked }),
        1 => holder.clone().prop_map(|holder| Step::Return { holder }),
        1 => holder.prop_map(|holder| Step::Die { holder }),
        2 => Just(Step::Sweep),
    ]
}

/// One holder: its clock's offset from true time, its lease if it holds one, whether it died.
#[derive(Debug, Clone, Default)]
struct Holder {
    skew: i64,
    lease: Option<Lease>,
    /// Units it used under its previous lease (its demand).
    used_previous: Option<i64>,
    /// Leases it was granted, the last its current one's id.
    granted: usize,
    dead: bool,
}

struct World {
    settings: Settings,
    limit: i64,
    now: i64,
    allocator_skew: i64,
    book: Book,
    holders: Vec<Holder>,
    /// Every unit allowed, by the owner or a holder, counted by the test.
    allowed: i64,
    /// Every unit put out on a lease, and every unit that came back, counted by the test.
    granted: i64,
    came_back: i64,
    /// Units the owner allowed itself, and units used under leases that closed, counted by the test.
    owner_allowed: i64,
    used_closed: i64,
    /// The steps the allocator recorded, in order.
    recorded: Vec<Owned>,
}

/// A recorded step, owning its names.
struct Owned {
    lease: String,
    action: CapacityLeaseAction,
    holder: String,
    units: i64,
    used: Option<i64>,
    expires_at: Option<Timestamp>,
}

impl World {
    fn allocator_now(&self) -> Timestamp {
        Timestamp(self.now + self.allocator_skew)
    }

    fn holder_now(&self, holder: usize) -> Timestamp {
        Timestamp(self.now + self.holders[holder].skew)
    }

    fn record(&mut self, holder: usize, action: CapacityLeaseAction, units: i64, used: Option<i64>) {
        let lease = format!("h{holder}-{}", self.holders[holder].granted);
        let expires_at = self.holders[holder].lease.and_then(|l| {
            matches!(action, CapacityLeaseAction::GRANT | CapacityLeaseAction::RENEW).then_some(l.expires_at)
        });
        self.recorded.push(Owned { lease, action, holder: format!("shard-{holder}"), units, used, expires_at });
    }

    fn apply(&mut self, step: &Step) {
        match *step {
            Step::Advance { micros } => self.now += micros,
            Step::OwnerAllows { amount } => {
                if let Ok(book) = self.book.consumed_at_owner(amount) {
                    self.book = book;
                    self.allowed += amount;
                    self.owner_allowed += amount;
                }
            }
            Step::Grant { holder, asked } => self.grant(holder, asked),
            Step::Use { holder, amount } => self.use_lease(holder, amount),
            Step::Renew { holder, asked } => self.renew(holder, asked),
            Step::Return { holder } => {
                if !self.holders[holder].dead {
                    self.close(holder, CapacityLeaseAction::RETURN);
                }
            }
            Step::Die { holder } => self.holders[holder].dead = true,
            Step::Sweep => self.sweep(),
        }
    }

    fn grant(&mut self, holder: usize, asked: i64) {
        let h = &self.holders[holder];
        if h.dead || h.lease.is_some() {
            return;
        }
        let want = escrow::want(asked, h.used_previous);
        let Some(units) = self.book.grant_size(&self.settings, want) else { return };
        self.book = self.book.granted(units).expect("a grant of grant_size fits the book");
        self.granted += units;
        let lease = Lease::granted(units, self.allocator_now(), &self.settings);
        self.holders[holder].lease = Some(lease);
        self.holders[holder].granted += 1;
        self.record(holder, CapacityLeaseAction::GRANT, units, None);
    }

    fn use_lease(&mut self, holder: usize, amount: i64) {
        let now = self.holder_now(holder);
        let h = &mut self.holders[holder];
        let Some(lease) = h.lease.filter(|_| !h.dead) else { return };
        if let Ok(lease) = lease.take(amount, now) {
            h.lease = Some(lease);
            self.allowed += amount;
        }
    }

    fn renew(&mut self, holder: usize, asked: i64) {
        let holder_now = self.holder_now(holder);
        let allocator_now = self.allocator_now();
        let h = &self.holders[holder];
        let Some(lease) = h.lease.filter(|_| !h.dead) else { return };
        // The holder asks only while it may use the lease; the allocator renews only what it has not expired.
        if !escrow::holder_may_use(lease.expires_at, holder_now)
            || escrow::allocator_may_expire(lease.expires_at, allocator_now)
        {
            return;
        }
        let want = escrow::want(asked, Some(lease.used)).saturating_sub(lease.left()).max(0);
        let added = if want == 0 { 0 } else { self.book.grant_size(&self.settings, want).unwrap_or(0) };
        self.book = self.book.granted(added).expect("units added of grant_size fit the book");
        self.granted += added;
        self.holders[holder].lease = Some(lease.renewed(added, allocator_now, &self.settings));
        self.record(holder, CapacityLeaseAction::RENEW, added, Some(lease.used));
    }

    /// The holder's lease closes (returned, or reclaimed once expired): its unused units come back.
    fn close(&mut self, holder: usize, action: CapacityLeaseAction) {
        let Some(lease) = self.holders[holder].lease else { return };
        self.record(holder, action, lease.left(), Some(lease.used));
        self.holders[holder].lease = None;
        self.book = self.book.closed(lease.units, lease.used).expect("an open lease closes into the book");
        self.came_back += lease.left();
        self.used_closed += lease.used;
        self.holders[holder].used_previous = Some(lease.used);
    }

    fn sweep(&mut self) {
        let now = self.allocator_now();
        for holder in 0..HOLDERS {
            let Some(lease) = self.holders[holder].lease else { continue };
            if !escrow::allocator_may_expire(lease.expires_at, now) {
                continue;
            }
            // Reclaimed: from this true instant on, no clock within the margin lets its holder use it.
            let holder_now = self.holder_now(holder);
            assert!(
                !escrow::holder_may_use(lease.expires_at, holder_now),
                "holder {holder} may still use a lease the allocator reclaims: true time {}, {lease:?}",
                self.now
            );
            self.record(holder, CapacityLeaseAction::EXPIRE, 0, None);
            self.close(holder, CapacityLeaseAction::RECLAIM);
        }
    }

    fn check(&self) {
        let open: Vec<&Lease> = self.holders.iter().filter_map(|h| h.lease.as_ref()).collect();
        let out: i64 = open.iter().map(|l| l.units).sum();
        let used_open: i64 = open.iter().map(|l| l.used).sum();
        assert!(self.allowed <= self.limit, "allowed {} past the limit {}", self.allowed, self.limit);
        assert!(self.book.consumed + self.book.outstanding <= self.limit, "book past the limit: {:?}", self.book);
        assert_eq!(self.book.outstanding, out, "the book's units out are the open leases'");
        assert_eq!(self.granted - self.came_back, out + self.used_closed, "no unit granted twice nor lost");
        assert_eq!(self.book.consumed, self.owner_allowed + self.used_closed, "the book's consumption");
        assert_eq!(
            self.allowed,
            self.owner_allowed + self.used_closed + used_open,
            "every allowed unit is counted once"
        );
        for lease in open {
            assert!(0 <= lease.used && lease.used <= lease.units, "{lease:?}");
        }
        // The recorded steps, folded, say what the test counted: the allocator's book can be rebuilt from its ledger.
        let mut steps = Steps::default();
        for r in &self.recorded {
            let (lease, holder) = (r.lease.as_str(), r.holder.as_str());
            let step =
                Recorded { lease, action: r.action, holder, units: r.units, used: r.used, expires_at: r.expires_at };
            steps.apply(&step).unwrap_or_else(|refused| panic!("the allocator recorded a step it refuses: {refused}"));
        }
        let accounts = steps.accounts();
        assert_eq!(accounts.out, self.book.outstanding, "units out, from the steps");
        assert_eq!(accounts.granted, self.granted, "units granted, from the steps");
        assert_eq!(accounts.used, self.used_closed, "units used under closed leases, from the steps");
        assert_eq!(accounts.returned + accounts.reclaimed, self.came_back, "units back, from the steps");
    }
}

fn run(limit: i64, skews: &[i64], steps: &[Step]) {
    let settings = Settings::new(limit, Some(2), Some(limit.max(2) / 2), Some(5), Some(60)).unwrap();
    let mut holders: Vec<Holder> = vec![Holder::default(); HOLDERS];
    for (holder, skew) in holders.iter_mut().zip(skews) {
        holder.skew = *skew;
    }
    let book = Book { limit, consumed: 0, outstanding: 0 };
    let mut world = World {
        settings,
        limit,
        now: 1_000_000_000,
        allocator_skew: skews[HOLDERS],
        book,
        holders,
        allowed: 0,
        granted: 0,
        came_back: 0,
        owner_allowed: 0,
        used_closed: 0,
        recorded: Vec::new(),
    };
    for step in steps {
        world.apply(step);
        world.check();
    }
    // In the end every lease expires and comes back: nothing stays out for good, nothing was granted twice.
    world.apply(&Step::Advance { micros: settings.lease_micros + 3 * MARGIN_MICROS });
    world.sweep();
    world.check();
    assert_eq!(world.book.outstanding, 0);
    assert_eq!(world.book.consumed, world.allowed, "what the book consumed is what was allowed");
}

proptest! {
    // Failures are kept where proptest keeps them for src/ (`rules/proptest-regressions/`): the default persistence
    // looks for lib.rs beside tests/ and finds none.
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct("proptest-regressions/escrow_model.txt"))),
        ..ProptestConfig::default()
    })]

    // Proves that no sequence of grants, use, renewals, returns, deaths and reclaims with every clock within the margin
    // of true time lets allowed units or units out plus consumed pass the limit, or a holder use a reclaimed lease.
    #[test]
    fn leases_never_overshoot_a_hard_limit(
        limit in 4..400i64,
        skews in vec(-MARGIN_MICROS..=MARGIN_MICROS, HOLDERS + 1),
        steps in vec(step(), 1..120),
    ) {
        run(limit, &skews, &steps);
    }
}
