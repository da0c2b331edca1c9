use std::collections::HashSet;

use proptest::prelude::*;
use schemas::{Aggregation, Timestamp};

use super::*;

const SECOND: i64 = 1_000_000;

/// The level at second `s` as a person reads a gauge's reports: the last report at or before it (of two at one instant
/// the later in the list), else the level held before the window.
fn level_at(readings: &[(i64, i64, Option<u8>)], before: i64, s: i64) -> i64 {
    readings.iter().rfind(|(at, _, _)| *at <= s).map_or(before, |(_, quantity, _)| *quantity)
}

/// The aggregate computed the slow, obvious way: every second of the window sampled for the integral.
fn naive(aggregation: Aggregation, readings: &[(i64, i64, Option<u8>)], before: i64, start: i64, end: i64) -> i64 {
    let inside: Vec<_> = readings.iter().filter(|(at, _, _)| *at >= start && *at < end).collect();
    let integral: i128 = (start..end).map(|s| i128::from(level_at(readings, before, s)) * i128::from(SECOND)).sum();
    match aggregation {
        Aggregation::SUM => inside.iter().map(|r| r.1).sum(),
        Aggregation::COUNT => inside.len() as i64,
        Aggregation::UNIQUE_COUNT => inside.iter().filter_map(|r| r.2).collect::<HashSet<_>>().len() as i64,
        Aggregation::MAX => inside.iter().map(|r| r.1).max().unwrap_or(0),
        Aggregation::LATEST => inside.last().map_or(0, |r| r.1),
        Aggregation::TIME_WEIGHTED_SUM => (integral / MICROS_PER_HOUR) as i64,
        Aggregation::TIME_WEIGHTED_AVERAGE => (integral / (i128::from(end - start) * i128::from(SECOND))) as i64,
    }
}

proptest! {
    // Proves every aggregation equals the naive model's on random histories of reports at whole seconds, the level
    // before the window held until the first report in it.
    #[test]
    fn aggregate_is_the_naive_models(
        mut raw in proptest::collection::vec((0i64..7_200, 0i64..1_000_000, proptest::option::of(0u8..5)), 0..40),
        before in 0i64..1_000,
        start in 0i64..3_600,
        length in 1i64..3_600,
        which in 0usize..7,
    ) {
        raw.sort_by_key(|r| r.0);
        let aggregation = Aggregation::SYMBOLS.iter().filter_map(|s| Aggregation::from_symbol(s)).nth(which).unwrap();
        let names: Vec<String> = raw.iter().map(|r| r.2.map(|m| format!("m{m}")).unwrap_or_default()).collect();
        let readings: Vec<Reading<'_>> = raw
            .iter()
            .zip(&names)
            .map(|(r, name)| Reading { at: Timestamp(r.0 * SECOND), quantity: r.1, member: r.2.map(|_| name.as_str()) })
            .collect();
        // The level before the window is the last report before its start, else `before`.
        let held = raw.iter().rfind(|r| r.0 < start).map_or(before, |r| r.1);
        let window = (Timestamp(start * SECOND), Timestamp((start + length) * SECOND));
        let got = aggregate(aggregation, &readings, Some(held), window).unwrap();
        prop_assert_eq!(got, naive(aggregation, &raw, before, start, start + length), "{}", aggregation);
    }
}

// Proves the tenant's own meter wins over the plan's, and a version counts only for windows starting at or after its
// effective_from.
#[test]
fn the_meter_in_force_is_the_tenants_then_the_plans_at_the_windows_start() {
    let meter = |tenant: &str, version: i32, aggregation: Aggregation, from: i64| MeterEvent {
        header: testkit::fixtures::header(&format!("m-{tenant}-{version}"), "2026-11-01T00:00:00Z", tenant, "seats"),
        version,
        aggregation,
        field: None,
        effective_from: Timestamp(from),
        actor: "alice".into(),
        reason: "seats".into(),
    };
    let meters = vec![meter("*", 0, Aggregation::COUNT, 0), meter("acme", 0, Aggregation::MAX, 100)];
    let at = |t: &str, micros| in_force(&meters, t, "seats", Timestamp(micros)).map(|m| m.aggregation);
    assert_eq!(at("acme", 50), Some(Aggregation::COUNT), "before acme's own, the plan's");
    assert_eq!(at("acme", 100), Some(Aggregation::MAX));
    assert_eq!(at("globex", 100), Some(Aggregation::COUNT));
    assert_eq!(in_force(&meters, "acme", "tokens", Timestamp(100)), None, "another metric sums");
}
