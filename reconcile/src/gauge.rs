//! Gauge quotas over their limit (PolicyEvent v8 `violation`): how long a tenant's level of a gauge
//! metric stood above a gauge quota's effective limit, per window of the quota. A report, not an adjustment: while it
//! lasted the hook refused what the violation covers, and nothing was consumed that a bill or an adjustment would
//! correct.
//!
//! A level is what a tenant's UsageEvents of a gauge metric carry, not consumption to sum: the reading with the
//! latest occurred_at holds (on a tie, the later ledger entry) from its occurred_at until the next reading's, the last
//! one until the run's `as_of`. Only the instants where a gauge quota of the metric is in force for the tenant count
//! ([`PolicyIndex::gauges`]: a level reported before the quota took effect counts from then on), each in the window
//! of that quota containing it, against the quota's limit raised by the tenant's grants of the metric overlapping
//! that window: the effective limit a window of consumption has ([`overshoot::effective_limit`]).

use std::collections::{BTreeMap, HashMap};

use rules::overshoot;
use rules::policy::{Applicable, PolicyIndex};
use rustc_hash::FxHashMap;
use schemas::{Enforcement, GrantEvent, Scope, Timestamp, Violation};
use serde::{Deserialize, Serialize};

use crate::names::Interner;

/// One UsageEvent of a gauge metric: the tenant's level at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Reading {
    /// When the level was read (event time).
    pub occurred_at: Timestamp,
    /// Its ledger sequence number: of two readings at one instant, the later entry holds.
    pub seq: u64,
    /// The level (the event's quantity).
    pub level: i64,
}

/// A window of a gauge quota in which the tenant's level stood above the effective limit for some time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GaugeOverLimit {
    /// The tenant.
    pub tenant: String,
    /// The gauge metric (`storage_bytes`).
    pub metric: String,
    /// The gauge quota (the tenant's own or the plan's).
    pub policy_id: String,
    /// Its version last in force in the window (up to `as_of`, while the tenant had a level).
    pub version: i32,
    /// That version's enforcement: HARD refused, SHADOW only says it would have.
    pub enforcement: Enforcement,
    /// That version's violation policy: what was refused while the level stood above the limit.
    pub violation: Violation,
    /// The window's start, in the quota's time zone's calendar.
    pub window_start: Timestamp,
    /// Its end (exclusive); may be after `as_of`, whose part of the window is all that was judged.
    pub window_end: Timestamp,
    /// The effective limit of `version` in the window: its limit plus the tenant's grants of the metric overlapping
    /// the window. The limit of the version reported, not the smallest or largest the window had when a new version
    /// took effect inside it, so that the row reads as one policy version.
    pub limit: i64,
    /// The highest level held in the window while a version of the quota was in force.
    pub peak: i64,
    /// Milliseconds the level stood above the effective limit in the window, up to `as_of`; rounded up, so that a
    /// window over its limit for less than a millisecond does not read as 0.
    pub over_ms: u64,
}

impl GaugeOverLimit {
    /// The order a run reports them in: by tenant, metric, policy_id, then window.
    pub fn order(&self) -> (&str, &str, &str, Timestamp, Timestamp) {
        (&self.tenant, &self.metric, &self.policy_id, self.window_start, self.window_end)
    }
}

/// What a window of a gauge quota held so far, while its level is walked in time order.
#[derive(Debug, Clone, Copy)]
struct Held {
    version: i32,
    enforcement: Enforcement,
    violation: Violation,
    limit: i64,
    peak: i64,
    over_micros: i64,
}

/// One tenant's gauge metric as the walk reads it.
struct Gauge<'a> {
    index: &'a PolicyIndex,
    grants: &'a [GrantEvent],
    tenant: &'a str,
    metric: &'a str,
    /// The `effective_from` of every version, the tenant's and the plan's, of the metric, sorted: the only instants
    /// between window bounds at which the gauges in force can change.
    changes: Vec<Timestamp>,
}

/// The windows of gauge quotas of `tenant`'s `metric` in which its level, as `readings` give it, stood above the
/// effective limit up to `as_of`, sorted by policy_id then window. `grants` are the tenant's grants of the metric.
/// Readings at or after `as_of` are not read.
pub fn over_limit(
    index: &PolicyIndex,
    grants: &[GrantEvent],
    (tenant, metric): (&str, &str),
    readings: &mut [Reading],
    as_of: Timestamp,
) -> Vec<GaugeOverLimit> {
    let mut changes: Vec<Timestamp> = index
        .policies()
        .iter()
        .filter(|p| p.header.metric == metric)
        .filter(|p| p.header.tenant == tenant || p.header.tenant == rules::policy::PLAN_DEFAULT_TENANT)
        .map(|p| p.effective_from)
        .collect();
    changes.sort_unstable();
    changes.dedup();
    let gauge = Gauge { index, grants, tenant, metric, changes };
    readings.sort_unstable();
    let mut windows: BTreeMap<(String, Timestamp, Timestamp), Held> = BTreeMap::new();
    let mut held = readings.iter().take_while(|r| r.occurred_at < as_of).peekable();
    while let Some(reading) = held.next() {
        // A reading followed by another at the same instant holds for no time: the later entry is the level.
        let until = held.peek().map_or(as_of, |next| next.occurred_at);
        gauge.hold(reading.level, reading.occurred_at, until, &mut windows);
    }
    windows
        .into_iter()
        .filter(|(_, held)| held.over_micros > 0)
        .map(|((policy_id, window_start, window_end), held)| GaugeOverLimit {
            tenant: tenant.to_string(),
            metric: metric.to_string(),
            policy_id,
            version: held.version,
            enforcement: held.enforcement,
            violation: held.violation,
            window_start,
            window_end,
            limit: held.limit,
            peak: held.peak,
            over_ms: u64::try_from(held.over_micros).expect("time over a limit is not negative").div_ceil(1_000),
        })
        .collect()
}

impl Gauge<'_> {
    /// Folds `level`, held from `from` until `until`, into the windows of the gauges in force meanwhile: cut at every
    /// window end and version change, so that within each piece the same versions are in force in the same windows.
    fn hold(
        &self,
        level: i64,
        from: Timestamp,
        until: Timestamp,
        windows: &mut BTreeMap<(String, Timestamp, Timestamp), Held>,
    ) {
        let mut t = from;
        while t < until {
            let gauges: Vec<Applicable<'_>> = self
                .index
                .gauges(self.tenant, t)
                .into_iter()
                .filter(|g| g.policy.header.metric == self.metric)
                .collect();
            let next_change = self.changes.get(self.changes.partition_point(|c| *c <= t)).copied();
            // Every bound is after `t` (a window containing `t` ends after it), so the walk moves on.
            let end = gauges.iter().map(|g| g.window_end).chain(next_change).fold(until, Timestamp::min);
            for g in &gauges {
                self.fold(g, level, end.micros() - t.micros(), windows);
            }
            t = end;
        }
    }

    /// Adds `micros` of `level` under gauge `g` to its window.
    fn fold(
        &self,
        g: &Applicable<'_>,
        level: i64,
        micros: i64,
        windows: &mut BTreeMap<(String, Timestamp, Timestamp), Held>,
    ) {
        let p = g.policy;
        let violation = p.violation.expect("PolicyIndex::gauges answers gauges only");
        let limit = overshoot::effective_limit(p.limit, Scope::TENANT, None, self.grants, g.window_start, g.window_end);
        let key = (p.policy_id.clone(), g.window_start, g.window_end);
        let held = windows.entry(key).or_insert(Held {
            version: p.version,
            enforcement: p.enforcement,
            violation,
            limit,
            peak: level,
            over_micros: 0,
        });
        // The walk is in time order: the version seen last is the last in force.
        (held.version, held.enforcement, held.violation, held.limit) = (p.version, p.enforcement, violation, limit);
        held.peak = held.peak.max(level);
        if level > limit {
            held.over_micros += micros;
        }
    }
}

/// The windows of gauge quotas each level of `readings` (by interned tenant and metric) stood above the effective
/// limit in ([`over_limit`]), in report order. `grants` are every tenant's, by (tenant, metric).
pub(crate) fn judge(
    readings: FxHashMap<(u32, u32), Vec<Reading>>,
    names: &Interner,
    index: &PolicyIndex,
    grants: &HashMap<(String, String), Vec<GrantEvent>>,
    as_of: Timestamp,
) -> Vec<GaugeOverLimit> {
    let mut over = Vec::new();
    for ((tenant, metric), mut readings) in readings {
        let (tenant, metric) = (names.name(tenant), names.name(metric));
        let key = (tenant.to_string(), metric.to_string());
        let grants = grants.get(&key).map_or(&[][..], Vec::as_slice);
        over.extend(over_limit(index, grants, (tenant, metric), &mut readings, as_of));
    }
    over.sort_by(|a, b| a.order().cmp(&b.order()));
    over
}

#[cfg(test)]
mod tests {
    use schemas::{Header, PolicyEvent, Window};

    use super::*;
    use testkit::fixtures::at;

    const TENANT: &str = "org-1";
    const METRIC: &str = "storage_bytes";

    fn header(tenant: &str, event_id: &str, occurred_at: &str) -> Header {
        testkit::fixtures::header(event_id, occurred_at, tenant, METRIC)
    }

    /// A HARD DAY gauge of `METRIC` refusing inserts over `limit`.
    fn gauge(tenant: &str, id: &str, version: i32, limit: i64, effective_from: &str) -> PolicyEvent {
        PolicyEvent {
            version,
            violation: Some(Violation::NO_INSERTS),
            ..PolicyEvent::new(
                header(tenant, &format!("{id}-v{version}"), effective_from),
                id,
                limit,
                Window::DAY,
                Enforcement::HARD,
                at(effective_from),
            )
        }
    }

    fn reading(seq: u64, occurred_at: &str, level: i64) -> Reading {
        Reading { occurred_at: at(occurred_at), seq, level }
    }

    /// (policy_id, version, window_start, limit, peak, over in minutes).
    fn rows(found: &[GaugeOverLimit]) -> Vec<(String, i32, Timestamp, i64, i64, u64)> {
        found
            .iter()
            .map(|g| (g.policy_id.clone(), g.version, g.window_start, g.limit, g.peak, g.over_ms / 60_000))
            .collect()
    }

    fn over(
        policies: Vec<PolicyEvent>,
        grants: &[GrantEvent],
        readings: &mut [Reading],
        as_of: &str,
    ) -> Vec<GaugeOverLimit> {
        over_limit(&PolicyIndex::new(policies), grants, (TENANT, METRIC), readings, at(as_of))
    }

    // A level crossing the limit mid-window counts from the reading above it to the reading back under it, and the
    // level it reached is the peak; a day whose level stayed under the limit is no row.
    #[test]
    fn a_level_crossing_the_limit_mid_window_counts_from_the_crossing() {
        let mut readings = [
            reading(1, "2026-11-02T00:00:00Z", 80),
            reading(2, "2026-11-02T06:00:00Z", 120),
            reading(3, "2026-11-02T07:30:00Z", 150),
            reading(4, "2026-11-02T09:00:00Z", 90),
        ];
        let found = over(
            vec![gauge(TENANT, "storage", 1, 100, "2026-11-01T00:00:00Z")],
            &[],
            &mut readings,
            "2026-11-05T00:00:00Z",
        );
        assert_eq!(rows(&found), [("storage".into(), 1, at("2026-11-02T00:00:00Z"), 100, 150, 180)]);
        assert_eq!((found[0].window_end, found[0].over_ms), (at("2026-11-03T00:00:00Z"), 3 * 3_600_000));
        assert_eq!((found[0].enforcement, found[0].violation), (Enforcement::HARD, Violation::NO_INSERTS));
    }

    // A level read before the gauge took effect holds into it: it counts from the instant the gauge is in force, not
    // from the reading; and a level held across midnight counts in each day's window, up to the next reading.
    #[test]
    fn a_reading_before_the_gauge_took_effect_counts_from_its_effective_from() {
        let mut readings = [reading(1, "2026-11-01T20:00:00Z", 500), reading(2, "2026-11-03T01:00:00Z", 10)];
        let found = over(
            vec![gauge(TENANT, "storage", 1, 100, "2026-11-02T12:00:00Z")],
            &[],
            &mut readings,
            "2026-11-05T00:00:00Z",
        );
        assert_eq!(
            rows(&found),
            [
                ("storage".into(), 1, at("2026-11-02T00:00:00Z"), 100, 500, 12 * 60),
                ("storage".into(), 1, at("2026-11-03T00:00:00Z"), 100, 500, 60),
            ]
        );
    }

    // A tenant grant of the metric overlapping the window raises its limit, as for windows of consumption; a grant to
    // a subject does not (a gauge is TENANT scope), nor one of another day.
    #[test]
    fn a_grant_overlapping_the_window_raises_the_limit() {
        let grant = |id: &str, subject: Option<&str>, from: &str, until: &str| GrantEvent {
            header: Header { subject: subject.map(String::from), ..header(TENANT, id, from) },
            grant_id: id.into(),
            amount: 50,
            valid_from: at(from),
            valid_until: at(until),
            reason: "migration".into(),
            actor: None,
        };
        let grants = [
            grant("g-1", None, "2026-11-02T23:00:00Z", "2026-11-03T01:00:00Z"),
            grant("g-2", Some("alice"), "2026-11-02T00:00:00Z", "2026-11-05T00:00:00Z"),
        ];
        let mut readings = [reading(1, "2026-11-02T12:00:00Z", 130), reading(2, "2026-11-03T12:00:00Z", 160)];
        let found = over(
            vec![gauge(TENANT, "storage", 1, 100, "2026-11-01T00:00:00Z")],
            &grants,
            &mut readings,
            "2026-11-04T00:00:00Z",
        );
        // The 2nd and the 3rd are 150 with the grant: 130 is under it, 160 over it for the 12 hours up to `as_of`.
        assert_eq!(rows(&found), [("storage".into(), 1, at("2026-11-03T00:00:00Z"), 150, 160, 12 * 60)]);
    }

    // `as_of` cuts the current window: only the time up to it counts, readings at or after it are not read, and the
    // window keeps its own end. A new version mid-window is the one reported, with its limit.
    #[test]
    fn as_of_cuts_the_current_window() {
        let policies = vec![
            gauge(TENANT, "storage", 1, 100, "2026-11-01T00:00:00Z"),
            PolicyEvent {
                enforcement: Enforcement::SHADOW,
                ..gauge(TENANT, "storage", 2, 120, "2026-11-04T10:00:00Z")
            },
        ];
        let mut readings = [
            reading(1, "2026-11-04T08:00:00Z", 130),
            reading(2, "2026-11-04T12:00:00Z", 110),
            reading(3, "2026-11-04T16:00:00Z", 1_000),
        ];
        let found = over(policies, &[], &mut readings, "2026-11-04T14:00:00Z");
        // 130 over 100 from 08:00 to 10:00, over 120 from 10:00 to 12:00; 110 is under 120; 1,000 comes after `as_of`.
        assert_eq!(rows(&found), [("storage".into(), 2, at("2026-11-04T00:00:00Z"), 120, 130, 4 * 60)]);
        assert_eq!((found[0].window_end, found[0].enforcement), (at("2026-11-05T00:00:00Z"), Enforcement::SHADOW));
    }

    // Two readings at one instant: the later ledger entry is the level, the other holds for no time.
    #[test]
    fn of_two_readings_at_one_instant_the_later_entry_holds() {
        let mut readings = [reading(2, "2026-11-02T00:00:00Z", 10), reading(1, "2026-11-02T00:00:00Z", 900)];
        let found = over(
            vec![gauge(TENANT, "storage", 1, 100, "2026-11-01T00:00:00Z")],
            &[],
            &mut readings,
            "2026-11-05T00:00:00Z",
        );
        assert!(found.is_empty(), "{found:?}");
    }

    // A plan gauge counts for a tenant with none of its own; a version that is no gauge ends it.
    #[test]
    fn a_plan_gauge_counts_until_a_version_that_is_no_gauge() {
        let policies = vec![
            gauge("*", "plan-storage", 1, 100, "2026-11-01T00:00:00Z"),
            PolicyEvent { violation: None, ..gauge("*", "plan-storage", 2, 100, "2026-11-02T06:00:00Z") },
        ];
        let mut readings = [reading(1, "2026-11-02T00:00:00Z", 200)];
        let found = over(policies, &[], &mut readings, "2026-11-05T00:00:00Z");
        assert_eq!(rows(&found), [("plan-storage".into(), 1, at("2026-11-02T00:00:00Z"), 100, 200, 6 * 60)]);
    }
}
