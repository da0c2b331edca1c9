//! Consumption by instant, for ROLLING windows (PolicyEvent v10): a rolling window is any interval ending now, so its
//! consumption is summed exactly from the instants it holds, not estimated from calendar buckets.
//!
//! Summing every instant of a day's window on each decision would cost as much as the day has events (a million at
//! a few dozen decisions a second). So beside the exact instants the timeline keeps the sum of each UTC minute and
//! hour: a window is its partial first and last minutes, read instant by instant, and the whole minutes and hours
//! between, read bucket by bucket. A day's window costs at most 24 hour buckets, 118 minute buckets and two minutes
//! of instants, whatever the traffic; 31 days' 744 hour buckets.

use std::collections::BTreeMap;

use schemas::Timestamp;

const MINUTE_MICROS: i64 = 60 * 1_000_000;
const HOUR_MICROS: i64 = 60 * MINUTE_MICROS;

/// Consumption by instant (microseconds), and by UTC minute and hour (by their first instant).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Timeline {
    instants: BTreeMap<i64, i64>,
    minutes: BTreeMap<i64, i64>,
    hours: BTreeMap<i64, i64>,
}

fn floor(micros: i64, length: i64) -> i64 {
    micros.div_euclid(length) * length
}

fn ceil(micros: i64, length: i64) -> i64 {
    floor(micros + length - 1, length)
}

/// Adds `amount` under `key`, dropping the entry when it comes back to 0 (a consumption taken back).
fn add(map: &mut BTreeMap<i64, i64>, key: i64, amount: i64) {
    let value = map.entry(key).or_insert(0);
    // Saturating, as the hook's window counters are (see `state::Counters`).
    *value = value.saturating_add(amount);
    if *value == 0 {
        map.remove(&key);
    }
}

fn sum(map: &BTreeMap<i64, i64>, from: i64, to: i64) -> i64 {
    if from >= to {
        return 0;
    }
    map.range(from..to).fold(0i64, |sum, (_, amount)| sum.saturating_add(*amount))
}

impl Timeline {
    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.instants.is_empty()
    }

    /// Counts `amount` consumed at `at`.
    pub fn add(&mut self, at: Timestamp, amount: i64) {
        let micros = at.micros();
        add(&mut self.instants, micros, amount);
        add(&mut self.minutes, floor(micros, MINUTE_MICROS), amount);
        add(&mut self.hours, floor(micros, HOUR_MICROS), amount);
    }

    /// The consumption at the instants `[start, end)`.
    pub fn sum(&self, start: Timestamp, end: Timestamp) -> i64 {
        let (start, end) = (start.micros(), end.micros());
        let (minutes_from, minutes_to) = (ceil(start, MINUTE_MICROS), floor(end, MINUTE_MICROS));
        if minutes_from >= minutes_to {
            return sum(&self.instants, start, end);
        }
        let edges = sum(&self.instants, start, minutes_from).saturating_add(sum(&self.instants, minutes_to, end));
        let (hours_from, hours_to) = (ceil(minutes_from, HOUR_MICROS), floor(minutes_to, HOUR_MICROS));
        let whole = if hours_from >= hours_to {
            sum(&self.minutes, minutes_from, minutes_to)
        } else {
            sum(&self.minutes, minutes_from, hours_from)
                .saturating_add(sum(&self.hours, hours_from, hours_to))
                .saturating_add(sum(&self.minutes, hours_to, minutes_to))
        };
        edges.saturating_add(whole)
    }

    /// The first instant of `[start, end)` by which the consumption from `start` on reaches `amount`: the instant the
    /// usage that must age out of a window starting at `start` for `amount` to leave it happened. None when the
    /// interval holds less. Minute buckets find the minute, its instants the instant (consumption at an instant is
    /// never negative: a consumption taken back cancels its own, at its instant).
    pub fn reaches(&self, start: Timestamp, end: Timestamp, amount: i64) -> Option<Timestamp> {
        let (start, end) = (start.micros(), end.micros());
        let first_minute = ceil(start, MINUTE_MICROS).min(end);
        let mut reached = 0i64;
        let instants = |from: i64, to: i64, reached: &mut i64| {
            for (at, consumed) in self.instants.range(from..to) {
                *reached = reached.saturating_add(*consumed);
                if *reached >= amount {
                    return Some(Timestamp(*at));
                }
            }
            None
        };
        if let Some(at) = instants(start, first_minute, &mut reached) {
            return Some(at);
        }
        for (minute, consumed) in self.minutes.range(first_minute..end) {
            let minute_end = (minute + MINUTE_MICROS).min(end);
            if reached.saturating_add(*consumed) >= amount || minute_end == end {
                return instants(*minute, minute_end, &mut reached);
            }
            reached = reached.saturating_add(*consumed);
        }
        None
    }

    /// Drops what happened before `before`.
    pub fn forget_before(&mut self, before: i64) {
        if self.instants.first_key_value().is_some_and(|(at, _)| *at < before) {
            self.instants = self.instants.split_off(&before);
            // A bucket that began before `before` keeps its sum: a window starting after `before` reads its partial
            // minute from the instants, and never reads a bucket that began before its start.
            self.minutes = self.minutes.split_off(&floor(before, MINUTE_MICROS));
            self.hours = self.hours.split_off(&floor(before, HOUR_MICROS));
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const DAY_MICROS: i64 = 24 * HOUR_MICROS;

    // A timeline sums and finds exactly what a naive sum over its instants does, for any window, whatever buckets the
    // window covers in part or in whole, and after what is too old is forgotten.
    proptest! {
        #[test]
        fn sums_and_reaches_as_a_naive_walk_does(
            events in proptest::collection::vec((0..3 * DAY_MICROS, 0i64..20), 0..200),
            start in 0..3 * DAY_MICROS,
            length in 1..2 * DAY_MICROS,
            amount in 1i64..400,
            forget in proptest::option::of(0..DAY_MICROS),
        ) {
            let mut timeline = Timeline::default();
            let mut naive: BTreeMap<i64, i64> = BTreeMap::new();
            for (at, q) in &events {
                timeline.add(Timestamp(*at), *q);
                *naive.entry(*at).or_insert(0) += q;
            }
            let mut start = start;
            if let Some(before) = forget {
                timeline.forget_before(before);
                naive.retain(|at, _| *at >= before);
                start = start.max(before);
            }
            let end = start + length;
            let expected: i64 = naive.range(start..end).map(|(_, q)| q).sum();
            prop_assert_eq!(timeline.sum(Timestamp(start), Timestamp(end)), expected);
            let mut running = 0;
            let reached = naive.range(start..end).find(|(_, q)| { running += **q; running >= amount }).map(|(at, _)| Timestamp(*at));
            prop_assert_eq!(timeline.reaches(Timestamp(start), Timestamp(end), amount), reached);
        }
    }
}
