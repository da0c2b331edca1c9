//! Consumption by instant, for ROLLING windows (PolicyEvent v10): a rolling window is any interval ending now, so its
//! consumption is summed exactly from the instants it holds, not estimated from calendar buckets.
//!
//! Summing every instant of a day's window on each decision would cost as much as the day has events (millions at
//! thousands of decisions a second). So beside the exact instants the timeline keeps the sums of UTC hours, minutes,
//! seconds, hundredths and ten-thousandths of a second: a window is its whole hours, then, at each edge, the whole
//! buckets of each finer length down to the instants of the partial ten-thousandth of a second at either end. A
//! window costs at most its hours plus 2 x (59 + 59 + 99 + 99) buckets and the instants of 200 µs, whatever the
//! traffic (measured: `bench hook`, "rolling day").

use std::collections::BTreeMap;

use schemas::Timestamp;
use serde::{Deserialize, Serialize};

/// The bucket lengths, longest first, each a whole number of the next: hour, minute, second, 10 ms, 100 µs.
const LENGTHS: [i64; 5] = [3_600_000_000, 60_000_000, 1_000_000, 10_000, 100];

/// Consumption by instant (microseconds), and by bucket of each of [`LENGTHS`] (by their first instant).
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timeline {
    instants: BTreeMap<i64, i64>,
    buckets: [BTreeMap<i64, i64>; LENGTHS.len()],
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
        for (level, length) in LENGTHS.iter().enumerate() {
            add(&mut self.buckets[level], floor(micros, *length), amount);
        }
    }

    /// The consumption at the instants `[start, end)`.
    pub fn sum(&self, start: Timestamp, end: Timestamp) -> i64 {
        self.sum_from(0, start.micros(), end.micros())
    }

    /// The consumption at `[start, end)` from the buckets of `level` and finer: the whole buckets of the level, and
    /// the partial ones at either edge from the next level.
    fn sum_from(&self, level: usize, start: i64, end: i64) -> i64 {
        if start >= end {
            return 0;
        }
        let Some(length) = LENGTHS.get(level) else { return sum(&self.instants, start, end) };
        let (whole_from, whole_to) = (ceil(start, *length), floor(end, *length));
        if whole_from >= whole_to {
            return self.sum_from(level + 1, start, end);
        }
        self.sum_from(level + 1, start, whole_from)
            .saturating_add(sum(&self.buckets[level], whole_from, whole_to))
            .saturating_add(self.sum_from(level + 1, whole_to, end))
    }

    /// The first instant of `[start, end)` by which the consumption from `start` on reaches `amount`: the instant the
    /// usage that must age out of a window starting at `start` for `amount` to leave it happened. None when the
    /// interval holds less. Buckets find where, the instants when (consumption at an instant is never negative: a
    /// consumption taken back cancels its own, at its instant).
    pub fn reaches(&self, start: Timestamp, end: Timestamp, amount: i64) -> Option<Timestamp> {
        let mut reached = 0i64;
        self.reaches_from(0, start.micros(), end.micros(), amount, &mut reached).map(Timestamp)
    }

    fn reaches_from(&self, level: usize, start: i64, end: i64, amount: i64, reached: &mut i64) -> Option<i64> {
        if start >= end {
            return None;
        }
        let Some(length) = LENGTHS.get(level) else {
            for (at, consumed) in self.instants.range(start..end) {
                *reached = reached.saturating_add(*consumed);
                if *reached >= amount {
                    return Some(*at);
                }
            }
            return None;
        };
        let (whole_from, whole_to) = (ceil(start, *length), floor(end, *length));
        if whole_from >= whole_to {
            return self.reaches_from(level + 1, start, end, amount, reached);
        }
        if let Some(at) = self.reaches_from(level + 1, start, whole_from, amount, reached) {
            return Some(at);
        }
        for (bucket, consumed) in self.buckets[level].range(whole_from..whole_to) {
            if reached.saturating_add(*consumed) >= amount {
                return self.reaches_from(level + 1, *bucket, bucket + length, amount, reached);
            }
            *reached = reached.saturating_add(*consumed);
        }
        self.reaches_from(level + 1, whole_to, end, amount, reached)
    }

    /// Drops what happened before `before`.
    pub fn forget_before(&mut self, before: i64) {
        if self.instants.first_key_value().is_some_and(|(at, _)| *at < before) {
            self.instants = self.instants.split_off(&before);
            // A bucket that began before `before` keeps its sum: a window starting after `before` reads its partial
            // bucket from the finer ones, and never reads a bucket that began before its start.
            for (level, length) in LENGTHS.iter().enumerate() {
                self.buckets[level] = self.buckets[level].split_off(&floor(before, *length));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const DAY_MICROS: i64 = 24 * 3_600_000_000;

    // A timeline sums and finds exactly what a naive sum over its instants does, for any window, whatever buckets the
    // window covers in part or in whole, and after what is too old is forgotten.
    proptest! {
        #[test]
        fn sums_and_reaches_as_a_naive_walk_does(
            span in prop_oneof![Just(3 * DAY_MICROS), Just(3_000_000), Just(30_000), Just(300)],
            events in proptest::collection::vec((0..1_000_000i64, 0i64..20), 0..200),
            start in 0..1_000_000i64,
            length in 1..1_000_000i64,
            amount in 1i64..400,
            forget in proptest::option::of(0..1_000_000i64),
        ) {
            // Events, windows and lengths at the scale of `span`: days, seconds, milliseconds or instants, so that
            // every bucket length is crossed whole and in part.
            let scale = |x: i64| x * span / 1_000_000;
            let events: Vec<(i64, i64)> = events.iter().map(|(at, q)| (scale(*at), *q)).collect();
            let (start, length) = (scale(start), scale(length).max(1));
            let forget = forget.map(scale);
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
