//! Calendar-aligned windows in UTC (contract §3 `Window`, contract §5).

use chrono::{DateTime, Datelike, TimeZone, Timelike, Utc};
use schemas::{Timestamp, Window};

const MINUTE_MICROS: i64 = 60 * 1_000_000;
const HOUR_MICROS: i64 = 60 * MINUTE_MICROS;
const DAY_MICROS: i64 = 24 * HOUR_MICROS;

fn datetime(t: Timestamp) -> DateTime<Utc> {
    t.to_datetime().expect("validated timestamps lie between 2000 and 2100, within chrono's range")
}

fn month_start(year: i32, month: u32) -> Timestamp {
    let start = Utc.with_ymd_and_hms(year, month, 1, 0, 0, 0).single().expect("the first of a month exists");
    Timestamp::from_datetime(start)
}

/// `[start, end)` of the window of kind `window` that contains `t`.
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
        Window::MONTH => {
            let date = datetime(t);
            let (year, month) = (date.year(), date.month());
            let (next_year, next_month) = if month == 12 { (year + 1, 1) } else { (year, month + 1) };
            debug_assert_eq!(date.nanosecond() % 1_000, 0, "timestamps are whole microseconds");
            (month_start(year, month), month_start(next_year, next_month))
        }
    }
}

/// Whether `[from, until)` overlaps the window `[start, end)`.
pub fn overlaps(from: Timestamp, until: Timestamp, start: Timestamp, end: Timestamp) -> bool {
    from < end && start < until
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        Timestamp::parse_rfc3339(text).unwrap()
    }

    fn window(kind: Window, t: &str) -> (String, String) {
        let (start, end) = bounds(kind, at(t));
        (start.to_string(), end.to_string())
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
