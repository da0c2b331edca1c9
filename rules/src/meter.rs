//! Meters: how a metric's usage events aggregate into the quantity a window counts and a bill charges (MeterEvent,
//! after OpenMeter's meter aggregations and Lago's billable metrics). A metric without a meter sums its usage, as every
//! metric did before meters. The hook, the billing export and `audit why` aggregate with these functions.
//!
//! ```
//! use rules::meter::{Reading, aggregate};
//! use schemas::{Aggregation, Timestamp};
//!
//! let hour = 3_600_000_000;
//! // 10 GB from the window's start, 40 GB from its second hour: 10 + 40 GB-hours over two hours.
//! let readings = [Reading { at: Timestamp(0), quantity: 10, member: None }, Reading {
//!     at: Timestamp(hour),
//!     quantity: 40,
//!     member: None,
//! }];
//! let window = (Timestamp(0), Timestamp(2 * hour));
//! assert_eq!(aggregate(Aggregation::TIME_WEIGHTED_SUM, &readings, None, window), Ok(50));
//! assert_eq!(aggregate(Aggregation::TIME_WEIGHTED_AVERAGE, &readings, None, window), Ok(25));
//! assert_eq!(aggregate(Aggregation::MAX, &readings, None, window), Ok(40));
//! ```

use std::collections::BTreeSet;

use schemas::{Aggregation, Header, MeterEvent, MeterField, Timestamp};

use crate::policy::PLAN_DEFAULT_TENANT;

/// Microseconds in an hour: a TIME_WEIGHTED_SUM is in unit-hours (GB-hours), as space is billed.
pub const MICROS_PER_HOUR: i128 = 3_600_000_000;

/// One usage event of a window as a meter reads it: its event time, what it counts (after its corrections) and the
/// value of the meter's field it names (UNIQUE_COUNT).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading<'a> {
    /// Its event time.
    pub at: Timestamp,
    /// What it counts: an amount, or a gauge's level.
    pub quantity: i64,
    /// The value of the meter's field it names (UNIQUE_COUNT), if any.
    pub member: Option<&'a str>,
}

/// An aggregate that does not fit in the `long` a window's quantity is recorded as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the {aggregation} of the window is beyond 2^63 - 1")]
pub struct TooLarge {
    /// The aggregation that overflowed.
    pub aggregation: Aggregation,
}

/// The meter of `tenant`'s `metric` that aggregates the window starting at `window_start`: the tenant's own version in
/// force then (the greatest (`effective_from`, `version`) at or before it), else the plan default's (`*`); none: SUM.
/// A window is aggregated one way from its start to its end, whatever a version made during it says.
pub fn in_force<'a>(
    meters: &'a [MeterEvent],
    tenant: &str,
    metric: &str,
    window_start: Timestamp,
) -> Option<&'a MeterEvent> {
    let of = |owner: &str| {
        meters
            .iter()
            .filter(|m| m.header.tenant == owner && m.header.metric == metric && m.effective_from <= window_start)
            .max_by_key(|m| (m.effective_from, m.version))
    };
    of(tenant).or_else(|| of(PLAN_DEFAULT_TENANT))
}

/// The aggregation a meter (or its absence) says.
pub fn aggregation_of(meter: Option<&MeterEvent>) -> Aggregation {
    meter.map_or(Aggregation::SUM, |m| m.aggregation)
}

/// The value of `field` an event's header names.
pub fn member_of(field: Option<MeterField>, header: &Header) -> Option<&str> {
    match field? {
        MeterField::SUBJECT => header.subject.as_deref(),
        MeterField::PROJECT => header.project.as_deref(),
        MeterField::API_KEY => header.api_key.as_deref(),
    }
}

/// Whether an aggregation reads a gauge's levels (the level held at the window's start counts for the time-weighted
/// ones) rather than amounts consumed.
pub fn is_level(aggregation: Aggregation) -> bool {
    matches!(
        aggregation,
        Aggregation::MAX | Aggregation::LATEST | Aggregation::TIME_WEIGHTED_SUM | Aggregation::TIME_WEIGHTED_AVERAGE
    )
}

/// The quantity of the window `[start, end)` under `aggregation`, from its `readings` (in event time, then ledger
/// order; those outside the window are ignored) and, for the time-weighted aggregations, the level held when it starts
/// (`before`: the latest reading before it; none: 0).
///
/// - SUM: the quantities added; COUNT: the events; UNIQUE_COUNT: the distinct members named (an event naming none
///   adds none).
/// - MAX: the greatest level reported in the window; LATEST: the last one (by event time, of two at one instant the
///   later entry); 0 for a window without a report (OpenMeter and Lago read only the window's events).
/// - TIME_WEIGHTED_SUM: each level held from its instant until the next reading's (the window's end for the last),
///   integrated over the window in real elapsed time, in unit-hours rounded down; TIME_WEIGHTED_AVERAGE: the same
///   integral divided by the window's length, rounded down.
pub fn aggregate(
    aggregation: Aggregation,
    readings: &[Reading<'_>],
    before: Option<i64>,
    (start, end): (Timestamp, Timestamp),
) -> Result<i64, TooLarge> {
    let inside = || readings.iter().filter(move |r| r.at >= start && r.at < end);
    let too_large = TooLarge { aggregation };
    match aggregation {
        Aggregation::SUM => inside().try_fold(0i64, |sum, r| sum.checked_add(r.quantity)).ok_or(too_large),
        Aggregation::COUNT => i64::try_from(inside().count()).map_err(|_| too_large),
        Aggregation::UNIQUE_COUNT => {
            let members: BTreeSet<&str> = inside().filter_map(|r| r.member).collect();
            i64::try_from(members.len()).map_err(|_| too_large)
        }
        Aggregation::MAX => Ok(inside().map(|r| r.quantity).max().unwrap_or(0)),
        Aggregation::LATEST => Ok(inside().next_back().map_or(0, |r| r.quantity)),
        Aggregation::TIME_WEIGHTED_SUM => {
            let integral = integral_micros(readings, before, (start, end));
            i64::try_from(integral / MICROS_PER_HOUR).map_err(|_| too_large)
        }
        Aggregation::TIME_WEIGHTED_AVERAGE => {
            let length = i128::from(end.micros() - start.micros()).max(1);
            let integral = integral_micros(readings, before, (start, end));
            i64::try_from(integral / length).map_err(|_| too_large)
        }
    }
}

/// The integral of the level over `[start, end)` in unit-microseconds, exactly (i128: a level of 2^63 held for a month
/// is far below 2^127): the level `before` from the start, then each reading's from its instant to the next's.
pub fn integral_micros(readings: &[Reading<'_>], before: Option<i64>, (start, end): (Timestamp, Timestamp)) -> i128 {
    let mut level = i128::from(before.unwrap_or(0));
    let mut since = start.micros();
    let mut integral: i128 = 0;
    for r in readings.iter().filter(|r| r.at >= start && r.at < end) {
        integral += level * i128::from(r.at.micros() - since);
        level = i128::from(r.quantity);
        since = r.at.micros();
    }
    integral + level * i128::from(end.micros().saturating_sub(since).max(0))
}

/// What one more event naming `member` adds to a window's UNIQUE_COUNT whose members are `seen`: 1 when it is new,
/// nothing when it was counted already or names none. The hook charges a request this, not its amount.
pub fn unique_cost(seen: impl FnOnce(&str) -> bool, member: Option<&str>) -> i64 {
    match member {
        Some(member) if !seen(member) => 1,
        _ => 0,
    }
}

#[cfg(test)]
mod tests;
