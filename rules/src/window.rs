//! Calendar-aligned windows (contract §3 `Window`, contract §5): in UTC, or in the calendar of a policy's IANA time
//! zone (PolicyEvent v4 `time_zone`).
//!
//! A window in a zone runs from the first instant of its local period (a local hour, day or month) to the first
//! instant of the next one, in UTC instants `[start, end)`. So a DAY in America/New_York is 23 hours on the day the
//! clocks spring forward and 25 on the day they fall back, an HOUR in Asia/Kolkata starts at half past a UTC hour,
//! and a MONTH ends at the local midnight that starts the next month. Local times a spring-forward skips resolve to
//! the first instant after the gap (a period whose start is skipped starts when the clock jumps into it; a local
//! HOUR skipped whole is a window with no instants, which contains nothing); local times a fall-back repeats
//! resolve to their first occurrence, so the repeated hour belongs to the period it first began (the fall-back
//! HOUR in America/New_York, 01:00 to 02:00 local, is two hours long). A MINUTE is the UTC minute in every zone:
//! every offset in use is a whole number of minutes, so a local minute is a UTC minute, and the minutes a
//! fall-back repeats stay the separate minutes the clock shows.

use chrono::{
    DateTime, Datelike, LocalResult, NaiveDate, NaiveDateTime, NaiveTime, TimeDelta, TimeZone, Timelike, Utc,
};
use schemas::{Timestamp, Tz, Window};

const MINUTE_MICROS: i64 = 60 * 1_000_000;
const HOUR_MICROS: i64 = 60 * MINUTE_MICROS;
const DAY_MICROS: i64 = 24 * HOUR_MICROS;
/// Further than any zone's offset from UTC, either way (the IANA database's run from -12 to +14 hours): a local
/// time read as UTC, moved this far, is on the other side of the instants that show it.
const OFFSET_BEYOND_MICROS: i64 = 15 * HOUR_MICROS;
/// Periods a window can be moved forward past the one the clock shows (see [`bounds_in`]): one per period a
/// fall-back repeats. Between 2000 and 2100 the largest repeat is 3 hours (Antarctica/Casey, 2010-03-05) and a period
/// is at least an hour; 26 leaves room for a whole day repeated.
const REPEATED_PERIODS_MAX: usize = 26;

fn datetime(t: Timestamp) -> DateTime<Utc> {
    t.to_datetime().expect("validated timestamps lie between 2000 and 2100, within chrono's range")
}

fn month_start(year: i32, month: u32) -> Timestamp {
    let start = Utc.with_ymd_and_hms(year, month, 1, 0, 0, 0).single().expect("the first of a month exists");
    Timestamp::from_datetime(start)
}

/// `[start, end)` of the ROLLING window of `length` microseconds at the instant `t` (PolicyEvent v10): the `length`
/// microseconds that end with `t`, `t` included. Usage at `t - length` has aged out at `t`; a request at `t` counts.
pub fn rolling(length: i64, t: Timestamp) -> (Timestamp, Timestamp) {
    (Timestamp(t.micros() - length + 1), Timestamp(t.micros() + 1))
}

/// `[start, end)` of the window of kind `window` that contains `t`, in UTC. A CONCURRENT policy has no window (its limit
/// is on the leases active at an instant): its "window" is the microsecond `t` is. A ROLLING window is known by its
/// length ([`rolling`]) and a BILLING_CYCLE by its anchor ([`crate::cycle`]): asked by kind alone, each is the
/// microsecond too.
pub fn bounds(window: Window, t: Timestamp) -> (Timestamp, Timestamp) {
    let micros = t.micros();
    let fixed = |length: i64| {
        let start = micros.div_euclid(length) * length;
        (Timestamp(start), Timestamp(start + length))
    };
    match window {
        Window::MINUTE => fixed(MINUTE_MICROS),
        Window::HOUR => fixed(HOUR_MICROS),
        Window::DAY => fixed(DAY_MICROS),
        Window::CONCURRENT | Window::ROLLING | Window::BILLING_CYCLE => fixed(1),
        Window::MONTH => {
            let date = datetime(t);
            let (year, month) = (date.year(), date.month());
            let (next_year, next_month) = if month == 12 { (year + 1, 1) } else { (year, month + 1) };
            debug_assert_eq!(date.nanosecond() % 1_000, 0, "timestamps are whole microseconds");
            (month_start(year, month), month_start(next_year, next_month))
        }
    }
}

/// `[start, end)` of the window of kind `window` that contains `t` in the calendar of `zone` (see the module's
/// words), as UTC instants. UTC itself answers as [`bounds`].
///
/// The window starts at the first instant of the local period the clock shows at `t`, and ends at the first instant
/// of the next period. After a fall-back the clock can show a period whose next one already began (a local hour
/// repeated when the hour after it had started once): the window is then moved to the following periods, until
/// the next one's first instant is after `t`. So windows tile time: each window's end is the next one's start.
pub fn bounds_in(window: Window, zone: Tz, t: Timestamp) -> (Timestamp, Timestamp) {
    if zone == Tz::UTC
        || matches!(window, Window::MINUTE | Window::CONCURRENT | Window::ROLLING | Window::BILLING_CYCLE)
    {
        return bounds(window, t);
    }
    let mut period = period_start(window, datetime(t).with_timezone(&zone).naive_local());
    let mut start = first_instant(zone, period);
    debug_assert!(start <= t, "the period the clock shows at {t} began by then");
    for _ in 0..REPEATED_PERIODS_MAX {
        let next = next_period(window, period);
        let end = first_instant(zone, next);
        if t < end {
            return (start, end);
        }
        (period, start) = (next, end);
    }
    unreachable!("a fall-back in {zone} at {t} repeats more than {REPEATED_PERIODS_MAX} periods of {window:?}")
}

/// The local time a period of kind `window` containing `local` starts at.
fn period_start(window: Window, local: NaiveDateTime) -> NaiveDateTime {
    let date = local.date();
    match window {
        Window::MINUTE => date.and_hms_opt(local.hour(), local.minute(), 0).expect("a minute of a day exists"),
        Window::HOUR => date.and_hms_opt(local.hour(), 0, 0).expect("an hour of a day exists"),
        Window::DAY => date.and_time(NaiveTime::MIN),
        Window::MONTH => first_of_month(date.year(), date.month()),
        Window::CONCURRENT | Window::ROLLING | Window::BILLING_CYCLE => local,
    }
}

/// The local time the period after the one starting at `start` starts at.
fn next_period(window: Window, start: NaiveDateTime) -> NaiveDateTime {
    let step = |delta: TimeDelta| start.checked_add_signed(delta).expect("periods between 2000 and 2100 have a next");
    match window {
        Window::CONCURRENT | Window::ROLLING | Window::BILLING_CYCLE => step(TimeDelta::microseconds(1)),
        Window::MINUTE => step(TimeDelta::minutes(1)),
        Window::HOUR => step(TimeDelta::hours(1)),
        Window::DAY => step(TimeDelta::days(1)),
        Window::MONTH if start.month() == 12 => first_of_month(start.year() + 1, 1),
        Window::MONTH => first_of_month(start.year(), start.month() + 1),
    }
}

fn first_of_month(year: i32, month: u32) -> NaiveDateTime {
    NaiveDate::from_ymd_opt(year, month, 1).expect("the first of a month exists").and_time(NaiveTime::MIN)
}

/// The first instant at which the clock of `zone` shows `local` or later: the instant of `local` when it happens
/// once, its first occurrence when a fall-back repeats it, and the end of the gap when a spring-forward skips it.
pub(crate) fn first_instant(zone: Tz, local: NaiveDateTime) -> Timestamp {
    match zone.from_local_datetime(&local) {
        LocalResult::Single(at) => Timestamp::from_datetime(at.with_timezone(&Utc)),
        LocalResult::Ambiguous(first, second) => Timestamp::from_datetime(first.min(second).with_timezone(&Utc)),
        LocalResult::None => end_of_gap(zone, local),
    }
}

/// The first instant whose local time in `zone` is `local` or later, for a `local` that a spring-forward skips: the
/// instant the clock jumps. chrono-tz does not name its transitions, so it is searched for, to the microsecond,
/// between two instants that lie before and after every instant showing `local` in any zone; around a gap the
/// local time only grows (no zone falls back within a day of springing forward).
fn end_of_gap(zone: Tz, local: NaiveDateTime) -> Timestamp {
    let as_utc = local.and_utc().timestamp_micros();
    let shows_at_least = |micros: i64| {
        let at = DateTime::from_timestamp_micros(micros).expect("within chrono's range");
        at.with_timezone(&zone).naive_local() >= local
    };
    // Invariant: the clock shows less than `local` at `before`, `local` or more at `after`.
    let (mut before, mut after) = (as_utc - OFFSET_BEYOND_MICROS, as_utc + OFFSET_BEYOND_MICROS);
    while after - before > 1 {
        let middle = before + (after - before) / 2;
        if shows_at_least(middle) {
            after = middle;
        } else {
            before = middle;
        }
    }
    Timestamp(after)
}

/// Whether `[from, until)` overlaps the window `[start, end)`.
pub fn overlaps(from: Timestamp, until: Timestamp, start: Timestamp, end: Timestamp) -> bool {
    from < end && start < until
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use testkit::fixtures::at;

    fn window(kind: Window, t: &str) -> (String, String) {
        let (start, end) = bounds(kind, at(t));
        (start.to_string(), end.to_string())
    }

    fn zone(name: &str) -> Tz {
        name.parse().unwrap()
    }

    fn window_in(kind: Window, name: &str, t: &str) -> (String, String) {
        let (start, end) = bounds_in(kind, zone(name), at(t));
        (start.to_string(), end.to_string())
    }

    fn pair(start: &str, end: &str) -> (String, String) {
        (start.into(), end.into())
    }

    fn hours(kind: Window, name: &str, t: &str) -> i64 {
        let (start, end) = bounds_in(kind, zone(name), at(t));
        (end.micros() - start.micros()) / HOUR_MICROS
    }

    const NEW_YORK: &str = "America/New_York";
    const BERLIN: &str = "Europe/Berlin";
    const KOLKATA: &str = "Asia/Kolkata";

    // Proves a DAY in New York runs from local midnight to local midnight: 23 hours on the spring-forward day
    // (2026-03-08), 25 on the fall-back day (2026-11-01), 24 around them.
    #[test]
    fn new_york_days_around_the_clock_changes() {
        let day = |t: &str| window_in(Window::DAY, NEW_YORK, t);
        assert_eq!(day("2026-03-07T12:00:00Z"), pair("2026-03-07T05:00:00Z", "2026-03-08T05:00:00Z"));
        assert_eq!(day("2026-03-08T12:00:00Z"), pair("2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z"));
        assert_eq!(day("2026-03-09T03:59:59.999999Z"), pair("2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z"));
        assert_eq!(day("2026-03-09T04:00:00Z"), pair("2026-03-09T04:00:00Z", "2026-03-10T04:00:00Z"));
        assert_eq!(day("2026-11-01T04:00:00Z"), pair("2026-11-01T04:00:00Z", "2026-11-02T05:00:00Z"));
        assert_eq!(day("2026-11-01T05:30:00Z"), pair("2026-11-01T04:00:00Z", "2026-11-02T05:00:00Z"));
        assert_eq!(day("2026-11-01T06:30:00Z"), pair("2026-11-01T04:00:00Z", "2026-11-02T05:00:00Z"));
        assert_eq!(day("2026-11-02T05:00:00Z"), pair("2026-11-02T05:00:00Z", "2026-11-03T05:00:00Z"));
        assert_eq!(hours(Window::DAY, NEW_YORK, "2026-03-08T12:00:00Z"), 23);
        assert_eq!(hours(Window::DAY, NEW_YORK, "2026-11-01T12:00:00Z"), 25);
        assert_eq!(hours(Window::DAY, NEW_YORK, "2026-07-04T12:00:00Z"), 24);
        // 23:30 local and 00:30 local the next day: the same UTC day, two local days.
        let (evening, night) = (at("2026-11-17T04:30:00Z"), at("2026-11-17T05:30:00Z"));
        assert_eq!(bounds(Window::DAY, evening), bounds(Window::DAY, night));
        assert_ne!(bounds_in(Window::DAY, zone(NEW_YORK), evening), bounds_in(Window::DAY, zone(NEW_YORK), night));
    }

    // Proves HOUR windows in New York on those days: the skipped 02:00 hour contains no instant (01:00 EST is
    // followed by 03:00 EDT), and the repeated 01:00 hour is one window of two hours from its first occurrence.
    #[test]
    fn new_york_hours_around_the_clock_changes() {
        let hour = |t: &str| window_in(Window::HOUR, NEW_YORK, t);
        assert_eq!(hour("2026-03-08T06:59:59Z"), pair("2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z"));
        assert_eq!(hour("2026-03-08T07:00:00Z"), pair("2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"));
        assert_eq!(hour("2026-11-01T04:59:59Z"), pair("2026-11-01T04:00:00Z", "2026-11-01T05:00:00Z"));
        assert_eq!(hour("2026-11-01T05:30:00Z"), pair("2026-11-01T05:00:00Z", "2026-11-01T07:00:00Z"));
        assert_eq!(hour("2026-11-01T06:30:00Z"), pair("2026-11-01T05:00:00Z", "2026-11-01T07:00:00Z"));
        assert_eq!(hour("2026-11-01T07:00:00Z"), pair("2026-11-01T07:00:00Z", "2026-11-01T08:00:00Z"));
        // A MINUTE stays the UTC minute, also in the repeated hour.
        for t in ["2026-11-01T05:30:10Z", "2026-11-01T06:30:10Z", "2026-03-08T07:00:30Z"] {
            assert_eq!(window_in(Window::MINUTE, NEW_YORK, t), window(Window::MINUTE, t), "{t}");
        }
    }

    // Proves Berlin's days and hours on its 2026 clock changes (2026-03-29 at 01:00 UTC, 2026-10-25 at 01:00 UTC).
    #[test]
    fn berlin_days_and_hours_around_the_clock_changes() {
        let day = |t: &str| window_in(Window::DAY, BERLIN, t);
        assert_eq!(day("2026-03-29T12:00:00Z"), pair("2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z"));
        assert_eq!(day("2026-10-25T12:00:00Z"), pair("2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z"));
        assert_eq!(day("2026-10-24T21:59:59Z"), pair("2026-10-23T22:00:00Z", "2026-10-24T22:00:00Z"));
        assert_eq!(hours(Window::DAY, BERLIN, "2026-03-29T12:00:00Z"), 23);
        assert_eq!(hours(Window::DAY, BERLIN, "2026-10-25T12:00:00Z"), 25);
        let hour = |t: &str| window_in(Window::HOUR, BERLIN, t);
        // 02:00 CET is skipped: 01:00 CET is followed by 03:00 CEST.
        assert_eq!(hour("2026-03-29T00:59:59Z"), pair("2026-03-29T00:00:00Z", "2026-03-29T01:00:00Z"));
        assert_eq!(hour("2026-03-29T01:00:00Z"), pair("2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z"));
        // 02:00 to 03:00 local happens twice: one window from 02:00 CEST to 03:00 CET.
        assert_eq!(hour("2026-10-25T00:30:00Z"), pair("2026-10-25T00:00:00Z", "2026-10-25T02:00:00Z"));
        assert_eq!(hour("2026-10-25T01:30:00Z"), pair("2026-10-25T00:00:00Z", "2026-10-25T02:00:00Z"));
        assert_eq!(hour("2026-10-25T02:00:00Z"), pair("2026-10-25T02:00:00Z", "2026-10-25T03:00:00Z"));
    }

    // Proves months in a zone end at the local midnight that starts the next month, across the clock changes, the
    // turn of the year and the leap day 2028-02-29.
    #[test]
    fn months_and_the_leap_day_in_a_zone() {
        let month = |name: &str, t: &str| window_in(Window::MONTH, name, t);
        assert_eq!(month(NEW_YORK, "2026-03-15T00:00:00Z"), pair("2026-03-01T05:00:00Z", "2026-04-01T04:00:00Z"));
        assert_eq!(month(NEW_YORK, "2026-11-15T00:00:00Z"), pair("2026-11-01T04:00:00Z", "2026-12-01T05:00:00Z"));
        // 23:00 on New Year's Eve in New York is 04:00 UTC on January 1st: still December.
        assert_eq!(month(NEW_YORK, "2027-01-01T04:00:00Z"), pair("2026-12-01T05:00:00Z", "2027-01-01T05:00:00Z"));
        assert_eq!(month(NEW_YORK, "2027-01-01T05:00:00Z"), pair("2027-01-01T05:00:00Z", "2027-02-01T05:00:00Z"));
        assert_eq!(month(BERLIN, "2026-10-31T23:30:00Z"), pair("2026-10-31T23:00:00Z", "2026-11-30T23:00:00Z"));
        assert_eq!(month(KOLKATA, "2026-11-30T18:29:59Z"), pair("2026-10-31T18:30:00Z", "2026-11-30T18:30:00Z"));
        assert_eq!(month(NEW_YORK, "2028-02-29T12:00:00Z"), pair("2028-02-01T05:00:00Z", "2028-03-01T05:00:00Z"));
        assert_eq!(
            window_in(Window::DAY, NEW_YORK, "2028-02-29T12:00:00Z"),
            pair("2028-02-29T05:00:00Z", "2028-03-01T05:00:00Z")
        );
        assert_eq!(
            window_in(Window::DAY, BERLIN, "2028-02-29T23:00:00Z"),
            pair("2028-02-29T23:00:00Z", "2028-03-01T23:00:00Z")
        );
    }

    // Proves Kolkata's hours start at half past the UTC hour, and its days at 18:30 UTC.
    #[test]
    fn kolkata_hours_start_at_half_past() {
        let t = "2026-11-17T13:45:10Z";
        assert_eq!(window_in(Window::HOUR, KOLKATA, t), pair("2026-11-17T13:30:00Z", "2026-11-17T14:30:00Z"));
        assert_eq!(window_in(Window::HOUR, KOLKATA, "2026-11-17T13:29:59Z").0, "2026-11-17T12:30:00Z");
        assert_eq!(window_in(Window::DAY, KOLKATA, t), pair("2026-11-16T18:30:00Z", "2026-11-17T18:30:00Z"));
        assert_eq!(window_in(Window::MINUTE, KOLKATA, t), window(Window::MINUTE, t));
    }

    // Proves local midnights that do not exist or happen twice: Havana springs forward at midnight (2026-03-08) and
    // falls back from 01:00 to midnight (2026-11-01); Santiago springs forward at midnight (2026-09-06); Beirut
    // falls back from midnight to 23:00 of the day before (2026-10-25). A day whose midnight is skipped starts
    // when the clock jumps; one whose midnight happens twice starts at the first.
    #[test]
    fn midnights_skipped_or_repeated() {
        let day = |name: &str, t: &str| window_in(Window::DAY, name, t);
        let havana = "America/Havana";
        assert_eq!(day(havana, "2026-03-08T12:00:00Z"), pair("2026-03-08T05:00:00Z", "2026-03-09T04:00:00Z"));
        assert_eq!(day(havana, "2026-03-08T04:59:59Z"), pair("2026-03-07T05:00:00Z", "2026-03-08T05:00:00Z"));
        assert_eq!(day(havana, "2026-11-01T04:30:00Z"), pair("2026-11-01T04:00:00Z", "2026-11-02T05:00:00Z"));
        assert_eq!(day(havana, "2026-11-01T05:30:00Z"), pair("2026-11-01T04:00:00Z", "2026-11-02T05:00:00Z"));
        assert_eq!(day(havana, "2026-10-31T12:00:00Z"), pair("2026-10-31T04:00:00Z", "2026-11-01T04:00:00Z"));
        let santiago = "America/Santiago";
        assert_eq!(day(santiago, "2026-09-06T12:00:00Z"), pair("2026-09-06T04:00:00Z", "2026-09-07T03:00:00Z"));
        assert_eq!(day(santiago, "2026-09-05T12:00:00Z"), pair("2026-09-05T04:00:00Z", "2026-09-06T04:00:00Z"));
        let beirut = "Asia/Beirut";
        assert_eq!(day(beirut, "2026-10-24T20:30:00Z"), pair("2026-10-23T21:00:00Z", "2026-10-24T22:00:00Z"));
        assert_eq!(day(beirut, "2026-10-24T21:30:00Z"), pair("2026-10-23T21:00:00Z", "2026-10-24T22:00:00Z"));
        assert_eq!(day(beirut, "2026-10-24T22:00:00Z"), pair("2026-10-24T22:00:00Z", "2026-10-25T22:00:00Z"));
        assert_eq!(day(beirut, "2026-03-28T22:30:00Z"), pair("2026-03-28T22:00:00Z", "2026-03-29T21:00:00Z"));
    }

    /// Walks the windows of `kind` in `zone` from the one containing `from` up to `until`: each contains the
    /// instants it is asked about, is not empty, and ends where the next starts. Answers how many ended by `until`.
    fn walk(kind: Window, zone: Tz, from: Timestamp, until: Timestamp) -> usize {
        let mut window = bounds_in(kind, zone, from);
        let mut windows = 0;
        while window.1 <= until {
            let (start, end) = window;
            assert!(start < end, "{kind:?} in {zone} is empty: [{start}, {end})");
            for t in
                [start, Timestamp(end.micros() - 1), Timestamp(start.micros() + (end.micros() - start.micros()) / 2)]
            {
                assert_eq!(bounds_in(kind, zone, t), window, "{kind:?} in {zone} at {t}");
            }
            let next = bounds_in(kind, zone, end);
            assert_eq!(next.0, end, "{kind:?} in {zone}: the window after [{start}, {end}) starts at its end");
            window = next;
            windows += 1;
        }
        windows
    }

    // Proves windows are contiguous (each one's end is the next one's start) and contain what they are asked about,
    // minute by minute across every hard day above.
    #[test]
    fn windows_are_contiguous_across_the_hard_days() {
        let days = [
            (NEW_YORK, "2026-03-08"),
            (NEW_YORK, "2026-11-01"),
            (BERLIN, "2026-03-29"),
            (BERLIN, "2026-10-25"),
            (KOLKATA, "2026-11-17"),
            (NEW_YORK, "2028-02-29"),
            ("America/Havana", "2026-03-08"),
            ("America/Havana", "2026-11-01"),
            ("America/Santiago", "2026-09-06"),
            ("Asia/Beirut", "2026-10-25"),
            ("Australia/Lord_Howe", "2026-04-05"),
        ];
        for (name, day) in days {
            let zone = zone(name);
            let from = Timestamp(at(&format!("{day}T00:00:00Z")).micros() - 2 * DAY_MICROS);
            let until = Timestamp(from.micros() + 4 * DAY_MICROS);
            for kind in [Window::MINUTE, Window::HOUR, Window::DAY, Window::MONTH] {
                walk(kind, zone, from, until);
            }
            let mut t = from;
            while t < until {
                for kind in [Window::MINUTE, Window::HOUR, Window::DAY, Window::MONTH] {
                    let (start, end) = bounds_in(kind, zone, t);
                    assert!(start <= t && t < end, "{kind:?} in {name} at {t}: [{start}, {end})");
                }
                t = Timestamp(t.micros() + MINUTE_MICROS);
            }
        }
        // A year of New York's local hours: 365 times 24, less the skipped 02:00 of 2026-03-08 (the repeated 01:00
        // of 2026-11-01 is one window of two hours).
        let year = (at("2026-01-01T05:00:00Z"), at("2027-01-01T05:00:00Z"));
        assert_eq!(walk(Window::HOUR, zone(NEW_YORK), year.0, year.1), 365 * 24 - 1);
        assert_eq!(walk(Window::DAY, zone(NEW_YORK), year.0, year.1), 365);
        assert_eq!(walk(Window::MONTH, zone(NEW_YORK), year.0, year.1), 12);
    }

    // Proves that UTC in any spelling answers the UTC windows.
    #[test]
    fn utc_is_the_default_calendar() {
        for t in ["2026-11-17T13:45:10.5Z", "2028-02-29T23:59:59Z", "2026-03-08T07:00:00Z"] {
            for kind in [Window::MINUTE, Window::HOUR, Window::DAY, Window::MONTH] {
                for name in ["UTC", "Etc/UTC", "Etc/GMT", "Europe/London"] {
                    if name == "Europe/London" && t.starts_with("2026-03") {
                        continue;
                    }
                    assert_eq!(window_in(kind, name, t), window(kind, t), "{kind:?} in {name} at {t}");
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        // Proves for random instants of 2000 to 2100 in random zones of the IANA database: the instant lies in its
        // window, the window is not empty, every instant of it has the same window, and the next window starts where
        // it ends (windows tile time).
        #[test]
        fn windows_tile_time(
            micros in schemas::validate::TIMESTAMP_MIN.micros()..schemas::validate::TIMESTAMP_MAX.micros() - 40 * DAY_MICROS,
            zone in proptest::sample::select(chrono_tz::TZ_VARIANTS.to_vec()),
            kind in proptest::sample::select(vec![Window::MINUTE, Window::HOUR, Window::DAY, Window::MONTH]),
            fraction in 0.0..1.0f64,
        ) {
            let t = Timestamp(micros);
            let (start, end) = bounds_in(kind, zone, t);
            prop_assert!(start <= t && t < end, "{:?} in {} at {}: [{}, {})", kind, zone, t, start, end);
            let inside = Timestamp(start.micros() + ((end.micros() - start.micros()) as f64 * fraction) as i64);
            let inside = Timestamp(inside.micros().min(end.micros() - 1));
            prop_assert_eq!(bounds_in(kind, zone, inside), (start, end));
            prop_assert_eq!(bounds_in(kind, zone, Timestamp(end.micros() - 1)), (start, end));
            prop_assert_eq!(bounds_in(kind, zone, end).0, end);
            prop_assert_eq!(bounds_in(kind, zone, Timestamp(start.micros() - 1)).1, start);
        }
    }

    // Proves each window kind is aligned to the calendar in UTC, its end exclusive.
    #[test]
    fn windows_are_calendar_aligned_in_utc() {
        let t = "2026-11-17T13:45:10.5Z";
        assert_eq!(window(Window::MINUTE, t), ("2026-11-17T13:45:00Z".into(), "2026-11-17T13:46:00Z".into()));
        assert_eq!(window(Window::HOUR, t), ("2026-11-17T13:00:00Z".into(), "2026-11-17T14:00:00Z".into()));
        assert_eq!(window(Window::DAY, t), ("2026-11-17T00:00:00Z".into(), "2026-11-18T00:00:00Z".into()));
        assert_eq!(window(Window::MONTH, t), ("2026-11-01T00:00:00Z".into(), "2026-12-01T00:00:00Z".into()));
        // An instant on a boundary belongs to the window it starts.
        assert_eq!(window(Window::DAY, "2026-11-18T00:00:00Z").0, "2026-11-18T00:00:00Z");
    }

    // Proves months of every length and the turn of the year, including a leap February.
    #[test]
    fn months_have_their_calendar_lengths() {
        assert_eq!(window(Window::MONTH, "2026-12-31T23:59:59Z").1, "2027-01-01T00:00:00Z");
        assert_eq!(
            window(Window::MONTH, "2028-02-29T12:00:00Z"),
            ("2028-02-01T00:00:00Z".into(), "2028-03-01T00:00:00Z".into())
        );
        assert_eq!(window(Window::MONTH, "2027-02-10T00:00:00Z").1, "2027-03-01T00:00:00Z");
    }

    // Proves a grant's [valid_from, valid_until) overlaps a window exactly when they share an instant.
    #[test]
    fn overlap_is_half_open() {
        let (start, end) = (at("2026-11-01T00:00:00Z"), at("2026-12-01T00:00:00Z"));
        assert!(overlaps(at("2026-10-15T00:00:00Z"), at("2026-11-01T00:00:01Z"), start, end));
        assert!(!overlaps(at("2026-10-15T00:00:00Z"), at("2026-11-01T00:00:00Z"), start, end));
        assert!(!overlaps(at("2026-12-01T00:00:00Z"), at("2026-12-02T00:00:00Z"), start, end));
    }
}
