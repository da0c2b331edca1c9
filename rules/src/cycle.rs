//! Billing cycles (Stripe-like), anchored in a tenant's time zone: periods that start on the same day of every month
//! at the same local time, rather than on the 1st at midnight.
//!
//! An [`Anchor`] is an instant and an IANA zone. Shown on the zone's clock, the instant is a day of month D and a
//! local time of day T. The anchor's cycles start every month on day D at local time T, the day clamped to the
//! month's last (an anchor on the 31st starts on Feb 28, or Feb 29 in a leap year, on Apr 30, and on Mar 31 again);
//! a cycle runs from one start to the next, `[start, next start)` in UTC instants, before the anchor as after it.
//! Local starts resolve as [`window`](crate::window)'s do: a local time a spring-forward skips starts when the clock
//! jumps past it, one a fall-back repeats starts at its first occurrence. So the cycles depend on D, T and the zone
//! alone: the anchor's own month starts at `at`, unless `at` is the second occurrence of a local time a fall-back
//! repeats, when it starts at the first one.
//!
//! A [`Schedule`] is a tenant's anchor over time, built from the changes made to it: the instant each was made (a
//! policy version's `effective_from`) and the new anchor. The first anchor governs all time before the second takes
//! effect. A later change whose anchor has the cycles of the schedule in force (the same D, T and zone) changes
//! nothing. Any other takes effect at the next boundary of the schedule in force, the first of its cycle starts at
//! or after the change (a change made at a boundary takes effect at it), so the cycle the change is made in is left
//! whole. From that instant `e` on the new anchor's cycles apply, the first one `[e, first start of the new anchor
//! after e)`: a short cycle, or a regular one when `e` is a start of the new anchor's cycles too. Changes apply in
//! the order they were made (changes made at the same instant: in the order listed), and a change taking effect no
//! later than a pending one replaces it: of several changes made within one cycle the last wins, and one back to
//! the cycles in force cancels the others.
//!
//! A cycle is billed in the export of the month, in the tenant's calendar, that holds its last instant
//! ([`billed_month`]).
//!
//! ```
//! use rules::cycle::{Anchor, Schedule, bounds};
//! use schemas::Timestamp;
//!
//! let at = |text: &str| Timestamp::parse_rfc3339(text).unwrap();
//! // Midnight on the 17th in New York, in winter (EST, 05:00 UTC): the cycle across the spring-forward ends at
//! // midnight EDT.
//! let anchor = Anchor { at: at("2026-01-17T05:00:00Z"), zone: "America/New_York".parse().unwrap() };
//! let (start, end) = bounds(anchor, at("2026-03-08T12:00:00Z"));
//! assert_eq!((start.to_string(), end.to_string()), ("2026-02-17T05:00:00Z".into(), "2026-03-17T04:00:00Z".into()));
//!
//! // Moved to the 1st, in UTC, on March 20th: from the next boundary (April 17th) a short cycle to May 1st.
//! let first = Anchor { at: at("2026-01-01T00:00:00Z"), zone: schemas::Tz::UTC };
//! let schedule = Schedule::new(&[(anchor.at, anchor), (at("2026-03-20T00:00:00Z"), first)]).unwrap();
//! let (start, end) = schedule.bounds(at("2026-04-20T00:00:00Z"));
//! assert_eq!((start.to_string(), end.to_string()), ("2026-04-17T04:00:00Z".into(), "2026-05-01T00:00:00Z".into()));
//! ```

use chrono::{DateTime, Datelike, NaiveDate, NaiveTime, Utc};
use schemas::{Timestamp, Tz};

use crate::window::first_instant;

/// Months [`bounds`] can step past the one the clock shows at an instant: one back when the instant is before that
/// month's start, one forward when it is past the next start (after a fall-back across a start). More never happens
/// (starts are at least 27 days apart); the bound only turns a broken invariant into a panic rather than a loop.
const MONTH_STEPS_MAX: usize = 4;

/// A billing anchor: an instant and the IANA zone whose calendar the cycles follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Anchor {
    /// The instant the cycles are anchored at: shown on `zone`'s clock, its day of month and time of day are those of
    /// every cycle start.
    pub at: Timestamp,
    /// The zone whose clock and calendar the cycle starts follow.
    pub zone: Tz,
}

/// What an anchor's cycles depend on: its day of month and local time of day, in its zone. Two anchors with the same
/// ones have the same cycles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cycles {
    zone: Tz,
    day: u32,
    time: NaiveTime,
}

/// A cycle start month: (year, month 1 to 12).
type Month = (i32, u32);

fn datetime(t: Timestamp) -> DateTime<Utc> {
    t.to_datetime().expect("validated timestamps lie between 2000 and 2100, within chrono's range")
}

fn next_month((year, month): Month) -> Month {
    if month == 12 { (year + 1, 1) } else { (year, month + 1) }
}

fn previous_month((year, month): Month) -> Month {
    if month == 1 { (year - 1, 12) } else { (year, month - 1) }
}

fn last_day((year, month): Month) -> u32 {
    let (next_year, next) = next_month((year, month));
    let first = NaiveDate::from_ymd_opt(next_year, next, 1).expect("the first of a month exists");
    first.pred_opt().expect("the day before the first of a month exists").day()
}

impl Cycles {
    fn of(anchor: Anchor) -> Cycles {
        let local = datetime(anchor.at).with_timezone(&anchor.zone).naive_local();
        Cycles { zone: anchor.zone, day: local.day(), time: local.time() }
    }

    /// The first instant of the cycle that starts in `month`: day D (clamped) at local time T.
    fn start(self, month: Month) -> Timestamp {
        let day = self.day.min(last_day(month));
        let local = NaiveDate::from_ymd_opt(month.0, month.1, day).expect("a clamped day exists").and_time(self.time);
        first_instant(self.zone, local)
    }

    /// `[start, end)` of the cycle containing `t`: tried from the month the clock shows at `t`, then moved a month
    /// back while it starts after `t`, and forward while the next one starts by `t`.
    fn bounds(self, t: Timestamp) -> (Timestamp, Timestamp) {
        let local = datetime(t).with_timezone(&self.zone).date_naive();
        let mut month = (local.year(), local.month());
        let mut start = self.start(month);
        for _ in 0..MONTH_STEPS_MAX {
            if start <= t {
                break;
            }
            month = previous_month(month);
            start = self.start(month);
        }
        assert!(start <= t, "no cycle of {self:?} starts by {t}");
        for _ in 0..MONTH_STEPS_MAX {
            let next = next_month(month);
            let end = self.start(next);
            if t < end {
                return (start, end);
            }
            (month, start) = (next, end);
        }
        unreachable!("the cycles of {self:?} after {t} start more than {MONTH_STEPS_MAX} months too early")
    }
}

/// `[start, end)` of the cycle of `anchor` that contains `t`, in UTC instants (see the module's words). Cycles tile
/// time: each one's end is the next one's start.
pub fn bounds(anchor: Anchor, t: Timestamp) -> (Timestamp, Timestamp) {
    Cycles::of(anchor).bounds(t)
}

/// The (year, month) in `zone`'s calendar that contains the last instant (`end` less a microsecond) of `cycle`
/// (`[start, end)`): the month whose export bills the cycle.
pub fn billed_month(zone: Tz, cycle: (Timestamp, Timestamp)) -> (i32, u32) {
    let last = datetime(Timestamp(cycle.1.micros() - 1)).with_timezone(&zone);
    (last.year(), last.month())
}

/// One anchor's span in a [`Schedule`]: its cycles apply from `from`, the first one cut short to start there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Segment {
    from: Timestamp,
    cycles: Cycles,
}

/// A tenant's billing cycles over time, as the anchor changes made to it decide (see the module's words).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// Strictly increasing `from`, the first one `i64::MIN` (the first anchor governs all time before the next); each
    /// one after the first is a start of the cycles before it, and its cycles differ from theirs.
    segments: Vec<Segment>,
}

impl Schedule {
    /// The schedule of `changes`: the instant each change was made and the new anchor, in any order (sorted by
    /// instant here, changes made at the same instant in the order listed: a policy's versions come in order of
    /// (`effective_from`, `version`), and the first of them governs all time before, the next taking effect at its
    /// next boundary). `None` when there are none.
    pub fn new(changes: &[(Timestamp, Anchor)]) -> Option<Schedule> {
        let mut sorted = changes.to_vec();
        sorted.sort_by_key(|&(made, _)| made);
        let (&(_, first), rest) = sorted.split_first()?;
        let mut schedule =
            Schedule { segments: vec![Segment { from: Timestamp(i64::MIN), cycles: Cycles::of(first) }] };
        for &(made, anchor) in rest {
            schedule.change(made, Cycles::of(anchor));
        }
        Some(schedule)
    }

    /// Applies a change to `cycles` made at `made`, no earlier than the changes applied before.
    fn change(&mut self, made: Timestamp, cycles: Cycles) {
        let (start, end) = self.bounds(made);
        let effect = if start == made { made } else { end };
        // Pending changes taking effect no earlier are replaced; the one in force then is the last left.
        self.segments.retain(|segment| segment.from < effect);
        let in_force = self.segments.last().expect("the first segment starts before every instant");
        if in_force.cycles != cycles {
            self.segments.push(Segment { from: effect, cycles });
        }
    }

    /// `[start, end)` of the cycle that contains `t`, in UTC instants. Cycles tile time.
    pub fn bounds(&self, t: Timestamp) -> (Timestamp, Timestamp) {
        let index = self.segments.partition_point(|segment| segment.from <= t) - 1;
        let segment = self.segments[index];
        let (start, end) = segment.cycles.bounds(t);
        let end = match self.segments.get(index + 1) {
            Some(next) => end.min(next.from),
            None => end,
        };
        (start.max(segment.from), end)
    }

    /// Every cycle whose last instant (`end` less a microsecond) lies in `[from, until)`, in order: the cycles that
    /// end after `from` and by `until`.
    pub fn ending_within(&self, from: Timestamp, until: Timestamp) -> Vec<(Timestamp, Timestamp)> {
        let mut cycles = Vec::new();
        if from >= until {
            return cycles;
        }
        let mut cycle = self.bounds(from);
        while cycle.1 <= until {
            cycles.push(cycle);
            cycle = self.bounds(cycle.1);
        }
        cycles
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use testkit::fixtures::at;

    const DAY_MICROS: i64 = 24 * 60 * 60 * 1_000_000;

    fn zone(name: &str) -> Tz {
        name.parse().unwrap()
    }

    fn anchor(name: &str, text: &str) -> Anchor {
        Anchor { at: at(text), zone: zone(name) }
    }

    fn pair(start: &str, end: &str) -> (String, String) {
        (start.into(), end.into())
    }

    fn text((start, end): (Timestamp, Timestamp)) -> (String, String) {
        (start.to_string(), end.to_string())
    }

    fn cycle(anchor: Anchor, t: &str) -> (String, String) {
        text(bounds(anchor, at(t)))
    }

    /// The cycles of `schedule` from the one containing `from` to the one containing `until`, as text.
    fn cycles(schedule: &Schedule, from: &str, until: &str) -> Vec<(String, String)> {
        let (mut cycle, last) = (schedule.bounds(at(from)), schedule.bounds(at(until)));
        let mut cycles = vec![text(cycle)];
        while cycle != last {
            cycle = schedule.bounds(cycle.1);
            cycles.push(text(cycle));
        }
        cycles
    }

    const NEW_YORK: &str = "America/New_York";
    const BERLIN: &str = "Europe/Berlin";

    // Proves an anchor at midnight on the 17th in New York: the cycle across the spring-forward (2026-03-08) runs
    // from midnight EST to midnight EDT, the one across the fall-back (2026-11-01) the other way, and cycles extend
    // before the anchor as after it, the anchor's own starting at it.
    #[test]
    fn new_york_cycles_across_the_clock_changes() {
        let seventeenth = anchor(NEW_YORK, "2026-05-17T04:00:00Z");
        let spring = pair("2026-02-17T05:00:00Z", "2026-03-17T04:00:00Z");
        for t in ["2026-02-17T05:00:00Z", "2026-03-08T12:00:00Z", "2026-03-17T03:59:59.999999Z"] {
            assert_eq!(cycle(seventeenth, t), spring, "{t}");
        }
        let fall = pair("2026-10-17T04:00:00Z", "2026-11-17T05:00:00Z");
        for t in ["2026-10-17T04:00:00Z", "2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z", "2026-11-17T04:59:59Z"] {
            assert_eq!(cycle(seventeenth, t), fall, "{t}");
        }
        assert_eq!(cycle(seventeenth, "2026-11-17T05:00:00Z"), pair("2026-11-17T05:00:00Z", "2026-12-17T05:00:00Z"));
        assert_eq!(cycle(seventeenth, "2026-05-17T04:00:00Z"), pair("2026-05-17T04:00:00Z", "2026-06-17T04:00:00Z"));
        // 23:59 local on the 16th is still the cycle before.
        assert_eq!(cycle(seventeenth, "2026-05-17T03:59:00Z"), pair("2026-04-17T04:00:00Z", "2026-05-17T04:00:00Z"));
    }

    // Proves Berlin's anchors on its 2026 clock changes (2026-03-29 and 2026-10-25, both at 01:00 UTC): an anchor at
    // 02:30 on the 29th starts March's cycle at 03:00 CEST (02:30 is skipped), and one at 02:30 on the 25th starts
    // October's at the first 02:30 (CEST), also when the anchor is the second 02:30.
    #[test]
    fn berlin_cycles_on_skipped_and_repeated_local_times() {
        let twenty_ninth = anchor(BERLIN, "2026-01-29T01:30:00Z");
        assert_eq!(cycle(twenty_ninth, "2026-03-29T00:59:59Z"), pair("2026-02-28T01:30:00Z", "2026-03-29T01:00:00Z"));
        assert_eq!(cycle(twenty_ninth, "2026-03-29T01:00:00Z"), pair("2026-03-29T01:00:00Z", "2026-04-29T00:30:00Z"));
        assert_eq!(cycle(twenty_ninth, "2026-10-29T12:00:00Z"), pair("2026-10-29T01:30:00Z", "2026-11-29T01:30:00Z"));
        assert_eq!(cycle(twenty_ninth, "2026-10-25T12:00:00Z"), pair("2026-09-29T00:30:00Z", "2026-10-29T01:30:00Z"));

        let twenty_fifth = anchor(BERLIN, "2026-01-25T01:30:00Z");
        let october = pair("2026-10-25T00:30:00Z", "2026-11-25T01:30:00Z");
        // 02:15 CEST, before the first 02:30: the cycle before.
        assert_eq!(cycle(twenty_fifth, "2026-10-25T00:15:00Z"), pair("2026-09-25T00:30:00Z", "2026-10-25T00:30:00Z"));
        // The first 02:30, then 02:15 CET and the second 02:30 (the clock shows an earlier time than at the start).
        for t in ["2026-10-25T00:30:00Z", "2026-10-25T01:15:00Z", "2026-10-25T01:30:00Z", "2026-11-25T01:29:59Z"] {
            assert_eq!(cycle(twenty_fifth, t), october, "{t}");
        }
        assert_eq!(cycle(twenty_fifth, "2026-03-29T01:00:00Z"), pair("2026-03-25T01:30:00Z", "2026-04-25T00:30:00Z"));
        // Anchored at the second 02:30 of 2026-10-25: the same cycles, October's from the first 02:30.
        let repeated = anchor(BERLIN, "2026-10-25T01:30:00Z");
        assert_eq!(cycle(repeated, "2026-10-25T01:30:00Z"), october);
        assert_eq!(Cycles::of(repeated), Cycles::of(twenty_fifth));
    }

    // Proves anchors on the 29th, 30th and 31st through February of a common year (2026) and a leap year (2028):
    // clamped to the month's last day, and back on their day in March.
    #[test]
    fn month_ends_clamp_to_the_last_day() {
        let months = |day: &str, year: &str| {
            let anchor = anchor("UTC", &format!("2026-01-{day}T10:00:00Z"));
            cycles(
                &Schedule::new(&[(anchor.at, anchor)]).unwrap(),
                &format!("{year}-01-31T12:00:00Z"),
                &format!("{year}-04-15T00:00:00Z"),
            )
        };
        let expect = |starts: &[&str]| -> Vec<(String, String)> {
            starts.windows(2).map(|pair| (format!("{}T10:00:00Z", pair[0]), format!("{}T10:00:00Z", pair[1]))).collect()
        };
        assert_eq!(months("29", "2026"), expect(&["2026-01-29", "2026-02-28", "2026-03-29", "2026-04-29"]));
        assert_eq!(months("30", "2026"), expect(&["2026-01-30", "2026-02-28", "2026-03-30", "2026-04-30"]));
        assert_eq!(months("31", "2026"), expect(&["2026-01-31", "2026-02-28", "2026-03-31", "2026-04-30"]));
        assert_eq!(months("29", "2028"), expect(&["2028-01-29", "2028-02-29", "2028-03-29", "2028-04-29"]));
        assert_eq!(months("30", "2028"), expect(&["2028-01-30", "2028-02-29", "2028-03-30", "2028-04-30"]));
        assert_eq!(months("31", "2028"), expect(&["2028-01-31", "2028-02-29", "2028-03-31", "2028-04-30"]));
        // And in a zone: the 31st at midnight in New York.
        let new_york = anchor(NEW_YORK, "2026-01-31T05:00:00Z");
        assert_eq!(cycle(new_york, "2026-03-01T00:00:00Z"), pair("2026-02-28T05:00:00Z", "2026-03-31T04:00:00Z"));
        assert_eq!(cycle(new_york, "2026-04-30T03:59:59Z"), pair("2026-03-31T04:00:00Z", "2026-04-30T04:00:00Z"));
    }

    // Proves an anchor on the leap day 2028-02-29: it starts on the 29th wherever there is one, on Feb 28 in 2029.
    #[test]
    fn leap_day_anchor() {
        let leap_day = anchor("UTC", "2028-02-29T10:00:00Z");
        assert_eq!(cycle(leap_day, "2028-03-01T00:00:00Z"), pair("2028-02-29T10:00:00Z", "2028-03-29T10:00:00Z"));
        assert_eq!(cycle(leap_day, "2029-02-15T00:00:00Z"), pair("2029-01-29T10:00:00Z", "2029-02-28T10:00:00Z"));
        assert_eq!(cycle(leap_day, "2029-03-01T00:00:00Z"), pair("2029-02-28T10:00:00Z", "2029-03-29T10:00:00Z"));
        assert_eq!(cycle(leap_day, "2028-02-28T00:00:00Z"), pair("2028-01-29T10:00:00Z", "2028-02-29T10:00:00Z"));
    }

    const FIRST: &str = "2026-01-01T00:00:00Z";

    fn schedule(changes: &[(&str, Anchor)]) -> Schedule {
        let changes: Vec<_> = changes.iter().map(|&(made, anchor)| (at(made), anchor)).collect();
        Schedule::new(&changes).unwrap()
    }

    // Proves a change made mid-cycle leaves that cycle whole and takes effect at its end, with a short cycle up to
    // the new anchor's first start; the first anchor governs all time before.
    #[test]
    fn a_change_mid_cycle_takes_effect_at_the_next_boundary() {
        let first = anchor("UTC", FIRST);
        let fifteenth = anchor("UTC", "2026-03-15T00:00:00Z");
        let schedule = schedule(&[(FIRST, first), ("2026-03-10T12:00:00Z", fifteenth)]);
        assert_eq!(
            cycles(&schedule, "2025-12-10T00:00:00Z", "2026-05-20T00:00:00Z"),
            vec![
                pair("2025-12-01T00:00:00Z", "2026-01-01T00:00:00Z"),
                pair("2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"),
                pair("2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"),
                pair("2026-03-01T00:00:00Z", "2026-04-01T00:00:00Z"),
                pair("2026-04-01T00:00:00Z", "2026-04-15T00:00:00Z"),
                pair("2026-04-15T00:00:00Z", "2026-05-15T00:00:00Z"),
                pair("2026-05-15T00:00:00Z", "2026-06-15T00:00:00Z"),
            ]
        );
        // Back to the 1st once the 15th is in force: from its next boundary, May 15th, a short cycle to June 1st.
        let schedule = self::schedule(&[
            (FIRST, first),
            ("2026-03-10T12:00:00Z", fifteenth),
            ("2026-04-20T00:00:00Z", anchor("UTC", "2026-06-01T00:00:00Z")),
        ]);
        assert_eq!(
            cycles(&schedule, "2026-04-01T00:00:00Z", "2026-06-01T00:00:00Z"),
            vec![
                pair("2026-04-01T00:00:00Z", "2026-04-15T00:00:00Z"),
                pair("2026-04-15T00:00:00Z", "2026-05-15T00:00:00Z"),
                pair("2026-05-15T00:00:00Z", "2026-06-01T00:00:00Z"),
                pair("2026-06-01T00:00:00Z", "2026-07-01T00:00:00Z"),
            ]
        );
    }

    // Proves a change made exactly at a boundary takes effect at it (the cycle it starts is already the new
    // anchor's, short), and one made a microsecond after waits a whole cycle.
    #[test]
    fn a_change_at_a_boundary_takes_effect_at_it() {
        let first = anchor("UTC", FIRST);
        let fifteenth = anchor("UTC", "2026-03-15T00:00:00Z");
        let schedule = schedule(&[(FIRST, first), ("2026-04-01T00:00:00Z", fifteenth)]);
        assert_eq!(
            cycles(&schedule, "2026-03-10T00:00:00Z", "2026-04-20T00:00:00Z"),
            vec![
                pair("2026-03-01T00:00:00Z", "2026-04-01T00:00:00Z"),
                pair("2026-04-01T00:00:00Z", "2026-04-15T00:00:00Z"),
                pair("2026-04-15T00:00:00Z", "2026-05-15T00:00:00Z"),
            ]
        );
        let schedule = self::schedule(&[(FIRST, first), ("2026-04-01T00:00:00.000001Z", fifteenth)]);
        assert_eq!(
            schedule.bounds(at("2026-04-20T00:00:00Z")),
            (at("2026-04-01T00:00:00Z"), at("2026-05-01T00:00:00Z"))
        );
        assert_eq!(
            schedule.bounds(at("2026-05-01T00:00:00Z")),
            (at("2026-05-01T00:00:00Z"), at("2026-05-15T00:00:00Z"))
        );
    }

    // Proves of two changes made within one cycle the last wins, whatever order they are listed in; a change back to
    // the cycles in force cancels a pending one; and changes made at the same instant count in the order listed: of
    // two pending ones the last, and of two first ones the first runs back, the second from its next boundary.
    #[test]
    fn the_last_change_within_a_cycle_wins() {
        let first = anchor("UTC", FIRST);
        let fifteenth = anchor("UTC", "2026-03-15T00:00:00Z");
        let twentieth = anchor("UTC", "2026-03-20T00:00:00Z");
        let expected = vec![
            pair("2026-03-01T00:00:00Z", "2026-04-01T00:00:00Z"),
            pair("2026-04-01T00:00:00Z", "2026-04-20T00:00:00Z"),
            pair("2026-04-20T00:00:00Z", "2026-05-20T00:00:00Z"),
        ];
        let changes = [(FIRST, first), ("2026-03-05T00:00:00Z", fifteenth), ("2026-03-20T00:00:00Z", twentieth)];
        assert_eq!(cycles(&schedule(&changes), "2026-03-10T00:00:00Z", "2026-05-01T00:00:00Z"), expected);
        let listed = [changes[2], changes[0], changes[1]];
        assert_eq!(schedule(&listed), schedule(&changes));
        // A second change at the very instant the first takes effect replaces it too.
        let at_effect = [(FIRST, first), ("2026-03-05T00:00:00Z", fifteenth), ("2026-04-01T00:00:00Z", twentieth)];
        assert_eq!(schedule(&at_effect), schedule(&changes));
        // Back to the 1st (another instant, the same day and time) before April: nothing changes.
        let back = anchor("UTC", "2025-06-01T00:00:00Z");
        let reverted = schedule(&[(FIRST, first), ("2026-03-05T00:00:00Z", fifteenth), ("2026-03-25T00:00:00Z", back)]);
        assert_eq!(reverted, schedule(&[(FIRST, first)]));
        assert_eq!(
            text(reverted.bounds(at("2026-04-10T00:00:00Z"))),
            pair("2026-04-01T00:00:00Z", "2026-05-01T00:00:00Z")
        );
        // Made at the same instant: the last listed is the change.
        let tied =
            schedule(&[(FIRST, first), ("2026-03-05T00:00:00Z", twentieth), ("2026-03-05T00:00:00Z", fifteenth)]);
        assert_eq!(text(tied.bounds(at("2026-04-10T00:00:00Z"))), pair("2026-04-01T00:00:00Z", "2026-04-15T00:00:00Z"));
        let tied_first = schedule(&[(FIRST, fifteenth), (FIRST, first)]);
        assert_eq!(
            text(tied_first.bounds(at("2025-12-20T00:00:00Z"))),
            pair("2025-12-15T00:00:00Z", "2026-01-15T00:00:00Z")
        );
        assert_eq!(
            text(tied_first.bounds(at("2026-01-20T00:00:00Z"))),
            pair("2026-01-15T00:00:00Z", "2026-02-01T00:00:00Z")
        );
    }

    // Proves a change to the same day and local time in another zone is a change: it takes effect at the next
    // boundary, and as Lisbon's winter clock is UTC's, the cycle starting there is a regular one; in summer Lisbon's
    // midnight is 23:00 UTC. A change to the same cycles (another instant of the same day, time and zone) is none.
    #[test]
    fn a_change_to_the_same_day_in_another_zone() {
        let first = anchor("UTC", FIRST);
        let lisbon = anchor("Europe/Lisbon", "2026-01-01T00:00:00Z");
        let schedule = schedule(&[(FIRST, first), ("2026-01-10T00:00:00Z", lisbon)]);
        assert_eq!(
            cycles(&schedule, "2026-01-10T00:00:00Z", "2026-04-10T00:00:00Z"),
            vec![
                pair("2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z"),
                pair("2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"),
                pair("2026-03-01T00:00:00Z", "2026-03-31T23:00:00Z"),
                pair("2026-03-31T23:00:00Z", "2026-04-30T23:00:00Z"),
            ]
        );
        assert_eq!(schedule.segments.len(), 2);
        assert_eq!(schedule.segments[1].from, at("2026-02-01T00:00:00Z"));
        // New York's midnight on the 1st: from February 1st UTC, a short cycle of five hours.
        let new_york = anchor(NEW_YORK, "2026-01-01T05:00:00Z");
        let schedule = self::schedule(&[(FIRST, first), ("2026-01-10T00:00:00Z", new_york)]);
        assert_eq!(
            text(schedule.bounds(at("2026-02-01T01:00:00Z"))),
            pair("2026-02-01T00:00:00Z", "2026-02-01T05:00:00Z")
        );
        // Another instant of the 1st at midnight UTC: no change.
        let same = self::schedule(&[(FIRST, first), ("2026-01-10T00:00:00Z", anchor("UTC", "2027-08-01T00:00:00Z"))]);
        assert_eq!(same.segments.len(), 1);
    }

    // Proves `ending_within` answers the cycles whose last instant lies in the range, a cycle ending exactly at its
    // end included, and `billed_month` the month of a cycle's last instant in the zone's calendar.
    #[test]
    fn cycles_ending_within_and_their_billed_month() {
        let seventeenth = anchor(NEW_YORK, "2026-05-17T04:00:00Z");
        let schedule = schedule(&[(FIRST, seventeenth)]);
        let november = (at("2026-11-01T04:00:00Z"), at("2026-12-01T05:00:00Z"));
        let ending = schedule.ending_within(november.0, november.1);
        assert_eq!(ending, vec![(at("2026-10-17T04:00:00Z"), at("2026-11-17T05:00:00Z"))]);
        assert_eq!(billed_month(zone(NEW_YORK), ending[0]), (2026, 11));
        assert_eq!(schedule.ending_within(november.1, november.0), vec![]);
        assert_eq!(schedule.ending_within(at("2026-11-17T05:00:00Z"), at("2026-12-17T05:00:00Z")).len(), 1);
        assert_eq!(schedule.ending_within(at("2026-11-17T04:59:59.999999Z"), at("2026-12-17T05:00:00Z")).len(), 2);
        // A cycle ending at local midnight on the 1st is billed in the month before: its last instant is 23:59.
        let first = anchor(NEW_YORK, "2026-01-01T05:00:00Z");
        let december = bounds(first, at("2026-12-15T00:00:00Z"));
        assert_eq!(text(december), pair("2026-12-01T05:00:00Z", "2027-01-01T05:00:00Z"));
        assert_eq!(billed_month(zone(NEW_YORK), december), (2026, 12));
        assert_eq!(billed_month(Tz::UTC, december), (2027, 1));
    }

    // Proves anchors every 20 minutes of the hard days (clock changes at and around midnight, a half-hour one, a day
    // skipped whole in Apia) have cycles that tile time and last 26 to 33 days, every 10 minutes from two days
    // before the day to three after (the cycle starts of those anchors on and around it).
    #[test]
    fn anchors_on_the_hard_days_tile_time() {
        let days = [
            (NEW_YORK, "2026-03-08"),
            (NEW_YORK, "2026-11-01"),
            (BERLIN, "2026-03-29"),
            (BERLIN, "2026-10-25"),
            ("America/Havana", "2026-03-08"),
            ("America/Havana", "2026-11-01"),
            ("America/Santiago", "2026-09-06"),
            ("Asia/Beirut", "2026-10-25"),
            ("Australia/Lord_Howe", "2026-04-05"),
            ("Pacific/Apia", "2011-12-30"),
        ];
        for (name, day) in days {
            let zone = zone(name);
            let midnight = at(&format!("{day}T00:00:00Z")).micros();
            for step in 0..3 * 72 {
                let anchor = Anchor { at: Timestamp(midnight - DAY_MICROS + step * DAY_MICROS / 72), zone };
                let schedule = Schedule::new(&[(anchor.at, anchor)]).unwrap();
                let mut t = Timestamp(midnight - 2 * DAY_MICROS);
                while t.micros() < midnight + 3 * DAY_MICROS {
                    let (start, end) = bounds(anchor, t);
                    assert!(start <= t && t < end, "{name} {anchor:?} at {t}: [{start}, {end})");
                    assert_eq!(bounds(anchor, end).0, end, "{name} {anchor:?} after [{start}, {end})");
                    assert_eq!(
                        bounds(anchor, Timestamp(start.micros() - 1)).1,
                        start,
                        "{name} {anchor:?} before {start}"
                    );
                    let length = end.micros() - start.micros();
                    assert!(
                        26 * DAY_MICROS < length && length < 33 * DAY_MICROS,
                        "{name} {anchor:?}: [{start}, {end})"
                    );
                    assert_eq!(schedule.bounds(t), (start, end));
                    t = Timestamp(t.micros() + 10 * 60 * 1_000_000);
                }
            }
        }
    }

    /// Checks the cycle of `schedule` containing `t` contains it and tiles with its neighbours.
    fn tiles(schedule: &Schedule, t: Timestamp) -> Result<(Timestamp, Timestamp), TestCaseError> {
        let (start, end) = schedule.bounds(t);
        prop_assert!(start <= t && t < end, "at {}: [{}, {})", t, start, end);
        prop_assert_eq!(schedule.bounds(Timestamp(end.micros() - 1)), (start, end));
        prop_assert_eq!(schedule.bounds(end).0, end);
        prop_assert_eq!(schedule.bounds(Timestamp(start.micros() - 1)).1, start);
        Ok((start, end))
    }

    fn zones() -> impl Strategy<Value = Tz> {
        proptest::sample::select(chrono_tz::TZ_VARIANTS.to_vec())
    }

    const YEAR_2001: i64 = 978_307_200_000_000;
    const YEAR_2099: i64 = 4_070_908_800_000_000;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1_000))]

        // Proves for random anchors in random zones of the IANA database and random instants of 2001 to 2099: the
        // cycle containing an instant contains it, ends where the next starts and starts where the one before ends,
        // and lasts more than 26 days and less than 33 (a month of 28 to 31 days, give or take the clock changes).
        #[test]
        fn an_anchors_cycles_tile_time(
            anchored in YEAR_2001..YEAR_2099,
            micros in YEAR_2001..YEAR_2099,
            zone in zones(),
        ) {
            let anchor = Anchor { at: Timestamp(anchored), zone };
            let schedule = Schedule::new(&[(anchor.at, anchor)]).unwrap();
            let (start, end) = tiles(&schedule, Timestamp(micros))?;
            prop_assert_eq!(bounds(anchor, Timestamp(micros)), (start, end));
            let length = end.micros() - start.micros();
            prop_assert!(26 * DAY_MICROS < length && length < 33 * DAY_MICROS, "[{}, {}) in {}", start, end, zone);
            // The anchor's own cycle starts at the first instant showing its local time: itself, unless a fall-back
            // repeats that time and the anchor is a repeat.
            let own = bounds(anchor, anchor.at).0;
            prop_assert_eq!(own, first_instant(zone, datetime(anchor.at).with_timezone(&zone).naive_local()));
            prop_assert!(own <= anchor.at && anchor.at.micros() - own.micros() < DAY_MICROS);
        }

        // Proves for random schedules of up to five changes (random anchors in random zones, made within a year and a
        // half): cycles tile time, each starts at a change's effect or at a start of one of the anchors' cycles, and
        // `ending_within` answers exactly the cycles a walk finds ending in its range.
        #[test]
        fn schedules_tile_time(
            base in YEAR_2001..YEAR_2099 - 800 * DAY_MICROS,
            changes in proptest::collection::vec((0..500 * DAY_MICROS, 0..500 * DAY_MICROS, zones()), 1..=5),
            offset in 0..700 * DAY_MICROS,
            range in (0..700 * DAY_MICROS, 0..200 * DAY_MICROS),
        ) {
            let changes: Vec<(Timestamp, Anchor)> = changes
                .iter()
                .map(|&(made, anchored, zone)| (Timestamp(base + made), Anchor { at: Timestamp(base + anchored), zone }))
                .collect();
            let schedule = Schedule::new(&changes).unwrap();
            let froms: Vec<Timestamp> = schedule.segments.iter().map(|segment| segment.from).collect();
            prop_assert!(froms.windows(2).all(|pair| pair[0] < pair[1]));
            let mut cycle = tiles(&schedule, Timestamp(base + offset))?;
            for _ in 0..3 {
                let (start, _) = cycle;
                let anchors_start = changes.iter().any(|&(_, anchor)| bounds(anchor, start).0 == start);
                prop_assert!(froms.contains(&start) || anchors_start, "{} starts no cycle", start);
                cycle = tiles(&schedule, cycle.1)?;
            }
            let (from, until) = (Timestamp(base + range.0), Timestamp(base + range.0 + range.1));
            // Walked from two months before the range, keeping the cycles whose last instant lies in it.
            let mut walked = Vec::new();
            let mut cycle = schedule.bounds(Timestamp(from.micros() - 60 * DAY_MICROS));
            loop {
                let last = Timestamp(cycle.1.micros() - 1);
                if last >= until {
                    break;
                }
                if from <= last {
                    walked.push(cycle);
                }
                cycle = schedule.bounds(cycle.1);
            }
            prop_assert_eq!(schedule.ending_within(from, until), walked);
        }
    }
}
