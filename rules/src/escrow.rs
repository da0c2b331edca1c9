//! Capacity leases (escrow, contract §9.6): the allocator's book of one window of an ESCROW policy, the size of a
//! grant, and when a lease may be used and when it may be taken back, as pure functions.
//!
//! The tenant's owner shard is the allocator: a window's [`Book`] counts what the window consumed and the units out on
//! leases not yet closed, and [`Book::grantable`] is what may still be put out: never more than the window has left,
//! and at most a share of it ([`Settings::outstanding_percent_max`]) at once. A holder decides under its [`Lease`]
//! ([`Lease::take`]) only while its clock is before the expiry minus [`CLOCK_SKEW_MARGIN_MS`]; the allocator expires a
//! lease only once its own clock is past the expiry plus the margin ([`allocator_may_expire`]). With every clock within
//! the margin of true time, a holder's last use of a lease comes before its units can be taken back, so a HARD escrow
//! policy's allowed consumption never passes its limit ([`Overshoot`]). [`steps`] folds a window's recorded lease steps
//! into each lease's state and the window's accounts.
//!
//! ```
//! use rules::escrow::{Book, Lease, Settings};
//! use schemas::Timestamp;
//!
//! let settings = Settings::new(1_000, None, Some(100), None, None).unwrap();
//! let book = Book { limit: 1_000, consumed: 900, outstanding: 0 };
//! // Half of the 100 units left may be out at once, so a holder wanting 100 gets 50.
//! assert_eq!(book.grant_size(&settings, 100), Some(50));
//! let now = Timestamp(0);
//! let lease = Lease::granted(50, now, &settings);
//! let lease = lease.take(20, Timestamp(1_000_000)).unwrap();
//! assert_eq!(lease.used, 20);
//! let book = book.granted(50).unwrap().closed(50, lease.used).unwrap();
//! assert_eq!((book.consumed, book.outstanding), (920, 0));
//! ```

use schemas::Timestamp;

pub mod steps;

/// How far any clock of a cluster may be from true time for the stated overshoot to hold: a holder stops using a lease
/// this long before its expiry, and the allocator takes it back only this long after. NTP keeps a healthy host within
/// tens of milliseconds; one second covers a host whose time source has been unreachable for hours at typical drift
/// (tens of parts per million).
pub const CLOCK_SKEW_MARGIN_MS: i64 = 1_000;

/// The assumption a HARD escrow policy's zero overshoot rests on, in words answered with its quotas.
pub const OVERSHOOT_ASSUMPTION: &str = "every clock of the cluster within 1 s of true time";

/// A lease's lifetime when the policy sets none: long enough that a renewal at half of it is a few requests a minute
/// per holder, short enough that a dead holder's units come back within seconds.
pub const LEASE_SECONDS_DEFAULT: i64 = 10;

/// The shortest lifetime: the two margins (one second each side) must leave most of a lease usable.
pub const LEASE_SECONDS_MIN: i64 = 5;

/// The longest lifetime: a dead holder strands its units until its lease expires, and an operator would not wait longer.
pub const LEASE_SECONDS_MAX: i64 = 3_600;

/// The share of what a window has left that may be out on leases at once, when the policy sets none: half stays with
/// the owner for holders that ask later and for its own requests.
pub const OUTSTANDING_PERCENT_DEFAULT: i64 = 50;

/// A grant's largest size when the policy sets none is the limit divided by this (at least 1): ten holders can each
/// hold one.
pub const UNITS_MAX_DIVISOR_DEFAULT: i64 = 10;

const MICROS_PER_SECOND: i64 = 1_000_000;
const MICROS_PER_MS: i64 = 1_000;

/// An escrow setting out of its bounds, quoting the value and the bound.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidSetting {
    /// The smallest grant below 1.
    #[error("escrow_lease_units_min {0} is below 1")]
    UnitsMinBelowOne(i64),
    /// The largest grant below the smallest or above the limit.
    #[error("escrow_lease_units_max {max} must be from escrow_lease_units_min {min} to the limit {limit}")]
    UnitsMaxOutOfRange {
        /// The largest grant set.
        max: i64,
        /// The smallest grant in force.
        min: i64,
        /// The policy's limit.
        limit: i64,
    },
    /// A lifetime out of [`LEASE_SECONDS_MIN`] to [`LEASE_SECONDS_MAX`].
    #[error("escrow_lease_seconds {0} must be from {LEASE_SECONDS_MIN} to {LEASE_SECONDS_MAX}")]
    LeaseSecondsOutOfRange(i64),
    /// A share out of 1 to 100.
    #[error("escrow_outstanding_percent_max {0} must be from 1 to 100")]
    OutstandingPercentOutOfRange(i64),
}

/// An ESCROW policy's settings, defaults applied and bounds checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// The smallest grant, in the metric's units (the window's last units are granted below it).
    pub units_min: i64,
    /// The largest grant.
    pub units_max: i64,
    /// A lease's lifetime from its grant or renewal, in microseconds.
    pub lease_micros: i64,
    /// The most, in percent of what the window has left, that may be out on leases at once.
    pub outstanding_percent_max: i64,
}

impl Settings {
    /// The settings of a policy of `limit`, each `None` its default; refused when one is out of its bounds.
    pub fn new(
        limit: i64,
        units_min: Option<i64>,
        units_max: Option<i64>,
        lease_seconds: Option<i64>,
        outstanding_percent_max: Option<i64>,
    ) -> Result<Settings, InvalidSetting> {
        let min = units_min.unwrap_or(1);
        if min < 1 {
            return Err(InvalidSetting::UnitsMinBelowOne(min));
        }
        let max = units_max.unwrap_or_else(|| (limit / UNITS_MAX_DIVISOR_DEFAULT).max(min).min(limit.max(1)));
        if max < min || max > limit {
            return Err(InvalidSetting::UnitsMaxOutOfRange { max, min, limit });
        }
        let seconds = lease_seconds.unwrap_or(LEASE_SECONDS_DEFAULT);
        if !(LEASE_SECONDS_MIN..=LEASE_SECONDS_MAX).contains(&seconds) {
            return Err(InvalidSetting::LeaseSecondsOutOfRange(seconds));
        }
        let percent = outstanding_percent_max.unwrap_or(OUTSTANDING_PERCENT_DEFAULT);
        if !(1..=100).contains(&percent) {
            return Err(InvalidSetting::OutstandingPercentOutOfRange(percent));
        }
        let lease_micros = seconds * MICROS_PER_SECOND; // At most 3,600 s: no overflow.
        Ok(Settings { units_min: min, units_max: max, lease_micros, outstanding_percent_max: percent })
    }
}

/// A step the book refuses: it would break its invariant (a bug of the caller, never an input to answer).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BookRefused {
    /// More units than the window has left (limit minus consumption minus what is out).
    #[error("{units} units asked of a window with {left} left")]
    BeyondLeft {
        /// Units asked.
        units: i64,
        /// Units the window had left.
        left: i64,
    },
    /// A close of more units than are out, or naming more used than the lease held.
    #[error("a lease of {units} units closed having used {used}, with {outstanding} out")]
    BadClose {
        /// The lease's units.
        units: i64,
        /// Units it used.
        used: i64,
        /// Units out on leases before the close.
        outstanding: i64,
    },
}

/// The allocator's book of one window of an ESCROW policy: `consumed + outstanding <= limit` always.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Book {
    /// The window's effective limit (limit plus grants).
    pub limit: i64,
    /// Consumption counted at the owner: its own decisions' and what closed leases used.
    pub consumed: i64,
    /// Units on leases granted and not yet returned or reclaimed, used or not (a lease counts whole while open).
    pub outstanding: i64,
}

impl Book {
    /// What the window has left to decide or lease: limit minus consumption minus what is out (never below 0).
    pub fn left(&self) -> i64 {
        self.limit.saturating_sub(self.consumed).saturating_sub(self.outstanding).max(0)
    }

    /// What may still be put out on leases: the units left, and no more than `outstanding_percent_max` percent (rounded
    /// up, so the window's last unit can be leased) of what the window has left beside the leases, minus what is out.
    pub fn grantable(&self, settings: &Settings) -> i64 {
        let unconsumed = self.limit.saturating_sub(self.consumed).max(0);
        let share_left = percent_up(unconsumed, settings.outstanding_percent_max).saturating_sub(self.outstanding);
        share_left.min(self.left()).max(0)
    }

    /// The size of a grant to a holder that wants `want` units: within the size bounds, at most what is grantable;
    /// below the smallest size only when that is all there is; `None` when nothing is grantable.
    pub fn grant_size(&self, settings: &Settings, want: i64) -> Option<i64> {
        let grantable = self.grantable(settings);
        let size = want.clamp(settings.units_min, settings.units_max).min(grantable);
        (size > 0).then_some(size)
    }

    /// The book after `units` more were put out (a grant, or units added at a renewal).
    pub fn granted(self, units: i64) -> Result<Book, BookRefused> {
        let left = self.left();
        if units < 0 || units > left {
            return Err(BookRefused::BeyondLeft { units, left });
        }
        Ok(Book { outstanding: self.outstanding + units, ..self })
    }

    /// The book after a lease of `units` closed (returned, or reclaimed after it expired) having used `used`: its units
    /// come back, what it used stays consumed.
    pub fn closed(self, units: i64, used: i64) -> Result<Book, BookRefused> {
        if used < 0 || used > units || units > self.outstanding {
            return Err(BookRefused::BadClose { units, used, outstanding: self.outstanding });
        }
        Ok(Book { consumed: self.consumed + used, outstanding: self.outstanding - units, ..self })
    }

    /// The book after the owner itself allowed `amount` (a request it decided, not under a lease).
    pub fn consumed_at_owner(self, amount: i64) -> Result<Book, BookRefused> {
        let left = self.left();
        if amount < 0 || amount > left {
            return Err(BookRefused::BeyondLeft { units: amount, left });
        }
        Ok(Book { consumed: self.consumed + amount, ..self })
    }
}

/// What a holder asks for: the larger of the request in hand and twice what it used under its previous lease (room to
/// grow with its traffic; an idle holder asks for little).
pub fn want(asked: i64, used_previous: Option<i64>) -> i64 {
    asked.max(used_previous.unwrap_or(0).saturating_mul(2))
}

/// Whether a holder whose clock reads `now` may still decide under a lease expiring at `expires_at`.
pub fn holder_may_use(expires_at: Timestamp, now: Timestamp) -> bool {
    now.micros() < expires_at.micros().saturating_sub(CLOCK_SKEW_MARGIN_MS * MICROS_PER_MS)
}

/// Whether the allocator, its clock reading `now`, may record a lease expiring at `expires_at` as expired and take its
/// unused units back.
pub fn allocator_may_expire(expires_at: Timestamp, now: Timestamp) -> bool {
    now.micros() > expires_at.micros().saturating_add(CLOCK_SKEW_MARGIN_MS * MICROS_PER_MS)
}

/// Whether a holder should renew a lease granted (or last renewed) at `since` and expiring at `expires_at`: from half
/// its life on.
pub fn renewal_due(since: Timestamp, expires_at: Timestamp, now: Timestamp) -> bool {
    let half = expires_at.micros().saturating_sub(since.micros()) / 2;
    now.micros() >= since.micros().saturating_add(half)
}

/// Why a holder may not decide a request under its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseRefused {
    /// The holder's clock is past the expiry minus the margin.
    #[error("the capacity lease expired for its holder at {0} (its expiry minus the clock-skew margin)")]
    Expired(Timestamp),
    /// Fewer units left on the lease than asked.
    #[error("{asked} units asked of a capacity lease with {left} left")]
    TooFewUnits {
        /// Units asked.
        asked: i64,
        /// Units left on the lease.
        left: i64,
    },
}

/// A capacity lease as its holder sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// Units granted (and added at renewals).
    pub units: i64,
    /// Units the holder allowed under it.
    pub used: i64,
    /// Its expiry, by the allocator's clock.
    pub expires_at: Timestamp,
}

impl Lease {
    /// A lease of `units` granted at `now` (the allocator's clock): it expires a lifetime later.
    pub fn granted(units: i64, now: Timestamp, settings: &Settings) -> Lease {
        Lease { units, used: 0, expires_at: Timestamp(now.micros().saturating_add(settings.lease_micros)) }
    }

    /// Units the holder may still allow under it.
    pub fn left(&self) -> i64 {
        self.units - self.used
    }

    /// The lease after the holder, its clock reading `now`, allowed `amount` under it; refused when it may not.
    pub fn take(self, amount: i64, now: Timestamp) -> Result<Lease, LeaseRefused> {
        if !holder_may_use(self.expires_at, now) {
            let cutoff = self.expires_at.micros().saturating_sub(CLOCK_SKEW_MARGIN_MS * MICROS_PER_MS);
            return Err(LeaseRefused::Expired(Timestamp(cutoff)));
        }
        if amount < 0 || amount > self.left() {
            return Err(LeaseRefused::TooFewUnits { asked: amount, left: self.left() });
        }
        Ok(Lease { used: self.used + amount, ..self })
    }

    /// The lease renewed at `now` (the allocator's clock) with `added` more units: it expires a lifetime from now.
    pub fn renewed(self, added: i64, now: Timestamp, settings: &Settings) -> Lease {
        Lease {
            units: self.units + added,
            expires_at: Timestamp(now.micros().saturating_add(settings.lease_micros)),
            ..self
        }
    }
}

/// The overshoot an ESCROW policy may reach, as stated with its quotas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overshoot {
    /// Units beyond the limit while [`OVERSHOOT_ASSUMPTION`] holds: 0 for a HARD policy.
    pub units: i64,
    /// Units beyond the limit at most should it fail: what may be out on leases at once.
    pub units_if_assumption_fails: i64,
}

/// The overshoot of a HARD escrow policy of effective limit `limit`.
pub fn overshoot(limit: i64, settings: &Settings) -> Overshoot {
    Overshoot { units: 0, units_if_assumption_fails: percent_up(limit.max(0), settings.outstanding_percent_max) }
}

/// `percent` percent of `units` (both >= 0), rounded up; computed wide, so it cannot overflow.
fn percent_up(units: i64, percent: i64) -> i64 {
    let wide = (i128::from(units) * i128::from(percent) + 99) / 100;
    i64::try_from(wide).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(limit: i64) -> Settings {
        Settings::new(limit, Some(5), Some(40), Some(10), Some(50)).unwrap()
    }

    const MARGIN: i64 = CLOCK_SKEW_MARGIN_MS * MICROS_PER_MS;

    // Proves the defaults: a tenth of the limit, 10 s, half out at once; and the smallest limit still gets 1 unit.
    #[test]
    fn defaults_apply() {
        let s = Settings::new(1_000, None, None, None, None).unwrap();
        assert_eq!((s.units_min, s.units_max, s.lease_micros, s.outstanding_percent_max), (1, 100, 10_000_000, 50));
        assert_eq!(Settings::new(3, None, None, None, None).unwrap().units_max, 1);
    }

    // Proves that each bound refuses with the value and the bound in its words.
    #[test]
    fn bad_settings_are_refused_by_name() {
        let said = |r: Result<Settings, InvalidSetting>| r.unwrap_err().to_string();
        assert_eq!(said(Settings::new(10, Some(0), None, None, None)), "escrow_lease_units_min 0 is below 1");
        assert_eq!(
            said(Settings::new(10, Some(5), Some(4), None, None)),
            "escrow_lease_units_max 4 must be from escrow_lease_units_min 5 to the limit 10"
        );
        assert!(said(Settings::new(10, None, Some(11), None, None)).contains("to the limit 10"));
        assert_eq!(said(Settings::new(10, None, None, Some(4), None)), "escrow_lease_seconds 4 must be from 5 to 3600");
        assert!(Settings::new(10, None, None, Some(3_601), None).is_err());
        assert_eq!(
            said(Settings::new(10, None, None, None, Some(101))),
            "escrow_outstanding_percent_max 101 must be from 1 to 100"
        );
        assert!(Settings::new(10, None, None, None, Some(0)).is_err());
    }

    // Proves a grant's size: the want within the bounds, capped by the share out at once and by what is left.
    #[test]
    fn grant_size_follows_want_within_bounds_and_share() {
        let s = settings(1_000);
        let empty = Book { limit: 1_000, consumed: 0, outstanding: 0 };
        assert_eq!(empty.grant_size(&s, 1), Some(5), "raised to the minimum");
        assert_eq!(empty.grant_size(&s, 17), Some(17));
        assert_eq!(empty.grant_size(&s, 500), Some(40), "cut to the maximum");
        let busy = Book { limit: 1_000, consumed: 900, outstanding: 45 };
        assert_eq!(busy.grantable(&s), 5, "half of the 100 unconsumed, minus 45 out");
        assert_eq!(busy.grant_size(&s, 40), Some(5));
        let last = Book { limit: 1_000, consumed: 999, outstanding: 0 };
        assert_eq!(last.grant_size(&s, 40), Some(1), "the last unit is leased below the minimum");
        let full = Book { limit: 1_000, consumed: 999, outstanding: 1 };
        assert_eq!(full.grant_size(&s, 1), None);
    }

    // Proves the book refuses a step that would break consumed + outstanding <= limit, and a close that does not add up.
    #[test]
    fn book_refuses_what_breaks_it() {
        let book = Book { limit: 10, consumed: 4, outstanding: 5 };
        assert_eq!(book.granted(2), Err(BookRefused::BeyondLeft { units: 2, left: 1 }));
        assert_eq!(book.consumed_at_owner(2), Err(BookRefused::BeyondLeft { units: 2, left: 1 }));
        assert!(book.closed(5, 6).is_err(), "used more than the lease held");
        assert!(book.closed(6, 0).is_err(), "more than is out");
        assert_eq!(book.closed(5, 3), Ok(Book { limit: 10, consumed: 7, outstanding: 0 }));
    }

    // Proves the margins on both sides: the holder stops a margin before the expiry, the allocator waits a margin after.
    #[test]
    fn expiry_is_judged_with_the_margin_on_both_sides() {
        let expires = Timestamp(100 * MICROS_PER_SECOND);
        assert!(holder_may_use(expires, Timestamp(expires.micros() - MARGIN - 1)));
        assert!(!holder_may_use(expires, Timestamp(expires.micros() - MARGIN)));
        assert!(!allocator_may_expire(expires, Timestamp(expires.micros() + MARGIN)));
        assert!(allocator_may_expire(expires, Timestamp(expires.micros() + MARGIN + 1)));
        // Clocks off by more than the margin each way: the holder still uses what the allocator takes back, the case
        // the stated assumption excludes.
        let true_time = expires.micros();
        assert!(holder_may_use(expires, Timestamp(true_time - MARGIN - 2)));
        assert!(allocator_may_expire(expires, Timestamp(true_time + MARGIN + 2)));
    }

    // Proves a lease refuses use past its holder's cutoff and beyond its units, and renewal moves the expiry.
    #[test]
    fn a_lease_is_used_within_its_units_and_life() {
        let s = settings(1_000);
        let lease = Lease::granted(10, Timestamp(0), &s);
        let lease = lease.take(10, Timestamp(1)).unwrap();
        assert_eq!(lease.take(1, Timestamp(2)), Err(LeaseRefused::TooFewUnits { asked: 1, left: 0 }));
        let cutoff = s.lease_micros - MARGIN;
        assert_eq!(lease.take(0, Timestamp(cutoff)), Err(LeaseRefused::Expired(Timestamp(cutoff))));
        let renewed = lease.renewed(5, Timestamp(cutoff), &s);
        assert_eq!(renewed.take(5, Timestamp(cutoff)).unwrap().used, 15);
        assert!(renewal_due(Timestamp(0), Timestamp(10), Timestamp(5)));
        assert!(!renewal_due(Timestamp(0), Timestamp(10), Timestamp(4)));
    }

    // Proves the stated overshoot: none under the assumption, else at most the share of the limit out at once.
    #[test]
    fn overshoot_is_stated() {
        assert_eq!(overshoot(1_000, &settings(1_000)), Overshoot { units: 0, units_if_assumption_fails: 500 });
        let small = Settings::new(3, None, None, None, None).unwrap();
        assert_eq!(overshoot(3, &small).units_if_assumption_fails, 2, "half of 3, rounded up");
    }
}
