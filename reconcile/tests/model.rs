//! Model test: random ledger histories (policy versions of every scope, HARD quotas with a throttled overage among
//! them, ROLLING and BILLING_CYCLE windows among calendar ones and versions switching between them, billing cycle
//! anchors in four zones changing mid-history, grants naming a subject, a project,
//! an API key or none, usage naming some of each, requests of two metrics, reservations, leases with renewals and
//! stale tokens, gauge quotas and readings of their level, duplicates, out-of-order batches, period closes, runs at
//! rising `--as-of`) reconciled by `reconcile::plan` + `apply` agree with a deliberately naive in-memory model of
//! contract §5 written here, concern by concern, and on the gauges over their limit, after every run; and a run that
//! starts from the last one (`reconcile::plan_incremental`) finds what a full run finds, after every batch appended.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{Datelike, NaiveDate, NaiveDateTime, TimeZone, Utc};
use ledger::{AppendOutcome, Batch, Incoming, Ledger, Origin};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use reconcile::GaugeOverLimit;
use schemas::{
    AdjustmentEvent, AdjustmentKind, Enforcement, Event, GrantEvent, Header, PolicyEvent, ReservationAction,
    ReservationEvent, Scope, Timestamp, Tz, UsageEvent, Violation, Window,
};
use testkit::fixtures::at;

const MINUTE_MICROS: i64 = 60_000_000;
const HOUR_MICROS: i64 = 60 * MINUTE_MICROS;
const DAY_MICROS: i64 = 24 * HOUR_MICROS;

/// Event times are an anchor plus up to 150 minutes: the anchors sit on hour, day and month boundaries
/// (September into October, October into November) so that every window kind and both past periods fill up.
const ANCHORS: [&str; 5] = [
    "2026-09-14T10:00:00Z",
    "2026-09-30T22:30:00Z",
    "2026-10-15T11:00:00Z",
    "2026-10-20T05:00:00Z",
    "2026-10-31T23:00:00Z",
];
/// Before every event: a policy version effective from here governs from the start.
const EARLY: &str = "2026-08-01T00:00:00Z";
/// The `--as-of` of runs during the history (each run takes a later or equal one than the run before).
const AS_OFS: [&str; 7] = [
    "2026-09-20T00:00:00Z",
    "2026-10-01T00:00:00Z",
    "2026-10-01T00:45:00Z",
    "2026-10-15T12:00:00Z",
    "2026-11-01T00:00:00Z",
    "2026-11-01T01:00:00Z",
    "2026-11-15T00:00:00Z",
];
/// The last run: after every window and expiry of the history.
const FINAL_AS_OF: &str = "2026-11-15T00:00:00Z";
const TENANTS: [&str; 2] = ["org-a", "org-b"];
/// Policy owners: `*` is the plan default.
const OWNERS: [&str; 3] = ["*", "org-a", "org-b"];
const METRICS: [&str; 2] = ["requests", "tokens"];
/// The metric of gauge quotas: its usage events are readings of a level.
const GAUGE_METRIC: &str = "storage_bytes";
const SUBJECTS: [Option<&str>; 3] = [None, Some("alice"), Some("bob")];
/// A project may share a subject's name: the windows of the two scopes must still be apart.
const PROJECTS: [Option<&str>; 3] = [None, Some("p-1"), Some("alice")];
const API_KEYS: [Option<&str>; 3] = [None, Some("key-1"), Some("key-2")];
const PERIODS: [&str; 2] = ["2026-09", "2026-10"];
/// The anchors of BILLING_CYCLE versions (PolicyEvent v11): a zone (the version's `time_zone`) and an instant, whose
/// cycles start inside the events drawn after [`ANCHORS`] or end where a run can judge them (by [`FINAL_AS_OF`]), on
/// the hard days: a day clamped to a short month's last, a start a fall-back repeats, one a spring-forward skips, a
/// clock change between two starts, and anchors of other zones or instants with the same starts.
const CYCLE_ANCHORS: [(&str, &str); 11] = [
    // The 14th at 10:40 UTC: a start 40 minutes into the first anchor's events (on the grid of `effective_from`).
    ("UTC", "2026-09-14T10:40:00Z"),
    // The 14th at 16:10 in Kolkata: the same instants in another zone, from an instant of May.
    ("Asia/Kolkata", "2026-05-14T10:40:00Z"),
    // The 31st at 23:30 UTC: September's start is clamped to the 30th, within the second anchor's events, and
    // October's within the last anchor's.
    ("UTC", "2026-08-31T23:30:00Z"),
    // The 31st at 19:40 in New York: clamped to September 30th (23:40 UTC); October's start at 23:40 UTC is on the
    // grid of `effective_from`; November's (the 30th, after the fall-back) at 00:40 UTC.
    ("America/New_York", "2026-10-31T23:40:00Z"),
    // The 1st at 01:30 in New York, anchored at the second 01:30 of the fall-back: November's start is the first one
    // (05:30 UTC), October's 05:30 UTC, December's 06:30 UTC.
    ("America/New_York", "2026-11-01T06:30:00Z"),
    // The same cycles as the one before (the 1st at 01:30 in New York), from an instant in summer.
    ("America/New_York", "2026-10-01T05:30:00Z"),
    // The 14th at 07:20 in New York: September's and October's starts at 11:20 UTC, November's at 12:20 UTC.
    ("America/New_York", "2026-09-14T11:20:00Z"),
    // The 4th at 02:30 in Sydney: October's is skipped by the spring-forward (2026-10-04 02:00 local), so it starts
    // when the clock jumps to 03:00 (October 3rd, 16:00 UTC); September's at 16:30 UTC, November's at 15:30 UTC.
    ("Australia/Sydney", "2026-09-03T16:30:00Z"),
    // The 1st at 05:00 in Kolkata: the instants of the 31st at 23:30 UTC (clamped) in another zone and day.
    ("Asia/Kolkata", "2026-09-30T23:30:00Z"),
    // The 20th at 11:50 in Kolkata: a start at 06:20 UTC within the fourth anchor's events (on the grid).
    ("Asia/Kolkata", "2026-10-20T06:20:00Z"),
    // The 15th at 12:20 UTC: a start within the third anchor's events (on the grid); October's cycle ends after the
    // last run.
    ("UTC", "2026-10-15T12:20:00Z"),
];
/// For each of [`ANCHORS`], the [`CYCLE_ANCHORS`] with a cycle start within the 150 minutes of events after it.
const STARTS_AFTER: [&[usize]; 5] = [&[0, 1, 6], &[2, 3, 7], &[10], &[9], &[2, 3, 7]];

// ---------------------------------------------------------------------------------------------------------------
// Generation
// ---------------------------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
struct Who {
    tenant: usize,
    subject: usize,
    project: usize,
    api_key: usize,
    metric: usize,
}

#[derive(Debug, Clone)]
struct VersionDraw {
    limit: i64,
    /// Its own window kind, mostly the policy's: a version may change it mid-window (contract §5 "Policy in force").
    window: Option<Window>,
    effective_from: i64,
    scope: Scope,
    enforcement: Enforcement,
    /// A throttled overage (rate per window), kept when the version is HARD and not ROLLING.
    overage: Option<(i64, Window)>,
    /// Its `window_seconds` when its window is ROLLING (PolicyEvent v10): a few lengths, short beside the 150 minutes
    /// of events after each anchor, so that usage ages out within a day and versions of one policy_id change length.
    rolling_seconds: i64,
    /// Its anchor (an index into [`CYCLE_ANCHORS`]) when its window is BILLING_CYCLE (PolicyEvent v11).
    cycle_anchor: usize,
}

#[derive(Debug, Clone)]
struct PolicyDraw {
    owner: usize,
    metric: usize,
    window: Window,
    versions: Vec<VersionDraw>,
    /// Usage of its owner (a tenant, for the plan) and metric around its version changes (see [`switching_draw`]).
    usage: Vec<UsageDraw>,
}

/// A version of a gauge quota of [`GAUGE_METRIC`]; without a violation it is a plain quota of the metric, whose windows
/// sum nothing once any version of the tenant or the plan is a gauge.
#[derive(Debug, Clone)]
struct GaugeVersionDraw {
    limit: i64,
    window: Window,
    effective_from: i64,
    enforcement: Enforcement,
    violation: Option<Violation>,
}

#[derive(Debug, Clone)]
struct GaugeDraw {
    owner: usize,
    versions: Vec<GaugeVersionDraw>,
}

/// A tenant's level of [`GAUGE_METRIC`] at an instant.
#[derive(Debug, Clone)]
struct ReadingDraw {
    tenant: usize,
    occurred_at: i64,
    level: i64,
}

#[derive(Debug, Clone)]
struct GrantDraw {
    who: Who,
    /// The one member of `who` the grant names (a grant names at most one): TENANT for none.
    names: Scope,
    amount: i64,
    valid_from: i64,
    hours: i64,
}

#[derive(Debug, Clone)]
struct UsageDraw {
    who: Who,
    occurred_at: i64,
    quantity: i64,
    /// A request of both metrics at once, as the hook records one: a UsageEvent per metric, under
    /// one request_id, the other metric's quantity this.
    other_metric: Option<i64>,
}

#[derive(Debug, Clone)]
struct CloseDraw {
    commit: bool,
    offset_minutes: i64,
    amount: i64,
    /// A lease's close carrying the token before the lease's: a holder that lost its slot.
    stale: bool,
}

/// A RENEW: minutes from the first RESERVE, minutes from the RENEW to its new expiry, and whether its token is stale.
#[derive(Debug, Clone)]
struct RenewDraw {
    offset_minutes: i64,
    ttl: i64,
    stale: bool,
}

#[derive(Debug, Clone)]
struct ReservationDraw {
    who: Who,
    occurred_at: i64,
    /// amount, minutes to expiry
    reserve: Option<(i64, i64)>,
    /// minutes from the first RESERVE, amount, minutes to expiry
    second_reserve: Option<(i64, i64, i64)>,
    /// A lease's fencing token: its RESERVEs carry it, its RENEWs and closes carry it or (stale) the one before.
    fencing_token: Option<i64>,
    renews: Vec<RenewDraw>,
    closes: Vec<CloseDraw>,
}

/// What else arrives with an event.
#[derive(Debug, Clone, Copy)]
enum Copy {
    None,
    /// The same event again: a duplicate.
    Exact,
    /// The same event_id with another payload (quantity or COMMIT amount raised by this much, or another source).
    Conflicting(i64),
    Both(i64),
}

/// What happens after a batch is appended.
#[derive(Debug, Clone)]
struct StepDraw {
    close: Option<usize>,
    run: Option<usize>,
}

#[derive(Debug, Clone)]
struct History {
    batches: Vec<Vec<Event>>,
    steps: Vec<StepDraw>,
}

fn time() -> impl Strategy<Value = i64> {
    (0..ANCHORS.len(), 0i64..150).prop_map(|(a, m)| at(ANCHORS[a]).micros() + m * MINUTE_MICROS)
}

/// Few distinct values, so that versions tie on effective_from and fall mid-window.
fn effective_from() -> impl Strategy<Value = i64> {
    prop_oneof![
        1 => Just(at(EARLY).micros()),
        3 => (0..ANCHORS.len(), 0i64..4).prop_map(|(a, k)| at(ANCHORS[a]).micros() + k * 40 * MINUTE_MICROS),
    ]
}

fn who() -> impl Strategy<Value = Who> {
    let members = (0..SUBJECTS.len(), 0..PROJECTS.len(), 0..API_KEYS.len());
    (0..TENANTS.len(), members, 0..METRICS.len()).prop_map(|(tenant, (subject, project, api_key), metric)| Who {
        tenant,
        subject,
        project,
        api_key,
        metric,
    })
}

fn scope() -> impl Strategy<Value = Scope> {
    prop_oneof![Just(Scope::TENANT), Just(Scope::SUBJECT), Just(Scope::PROJECT), Just(Scope::API_KEY)]
}

fn version_draw() -> impl Strategy<Value = VersionDraw> {
    let scope = scope();
    let enforcement = prop_oneof![Just(Enforcement::HARD), Just(Enforcement::SOFT), Just(Enforcement::SHADOW)];
    let window = prop_oneof![3 => Just(None), 1 => window().prop_map(Some)];
    let overage = prop::option::weighted(0.3, (1i64..10, prop_oneof![Just(Window::MINUTE), Just(Window::HOUR)]));
    let rolling_seconds = prop_oneof![Just(600i64), Just(1_800), Just(3_600), Just(5_400)];
    let lengths = (rolling_seconds, 0..CYCLE_ANCHORS.len());
    (0i64..60, window, effective_from(), scope, enforcement, overage, lengths).prop_map(
        |(limit, window, effective_from, scope, enforcement, overage, (rolling_seconds, cycle_anchor))| VersionDraw {
            limit,
            window,
            effective_from,
            scope,
            enforcement,
            overage: overage.filter(|_| enforcement == Enforcement::HARD),
            rolling_seconds,
            cycle_anchor,
        },
    )
}

/// A window kind of a policy or a version: calendar ones, ROLLING (PolicyEvent v10) and BILLING_CYCLE (v11), so that a
/// policy_id's versions switch between a calendar kind and ROLLING mid-window, DAY and ROLLING on one day among them,
/// and between calendar windows and billing cycles of changing anchors.
fn window() -> impl Strategy<Value = Window> {
    prop_oneof![
        Just(Window::HOUR),
        Just(Window::DAY),
        Just(Window::MONTH),
        Just(Window::ROLLING),
        Just(Window::BILLING_CYCLE),
    ]
}

fn policy_draw() -> impl Strategy<Value = PolicyDraw> {
    let drawn = (0..OWNERS.len(), 0..METRICS.len(), window(), vec(version_draw(), 1..=3))
        .prop_map(|(owner, metric, window, versions)| PolicyDraw { owner, metric, window, versions, usage: vec![] });
    prop_oneof![3 => drawn, 1 => switching_draw(), 1 => cycle_draw()]
}

/// Usage of the drawn `(who, tens, quantity)`, tens of minutes after `ANCHORS[anchor]`, of the policy owner's tenant
/// (any tenant for the plan's) and its metric.
fn usage_near(owner: usize, metric: usize, anchor: usize, usage: Vec<(Who, i64, i64)>) -> Vec<UsageDraw> {
    usage
        .into_iter()
        .map(|(who, tens, quantity)| UsageDraw {
            who: Who { tenant: owner.checked_sub(1).unwrap_or(who.tenant), metric, ..who },
            occurred_at: at(ANCHORS[anchor]).micros() + tens * 10 * MINUTE_MICROS,
            quantity,
            other_metric: None,
        })
        .collect()
}

/// A policy whose versions switch between billing cycles of two anchors and MONTH or DAY windows (contract §5
/// "Billing cycles"): versions effective from the start or around one anchor of [`ANCHORS`] (where a few cycle starts
/// lie, see [`CYCLE_ANCHORS`]), mostly of one scope and HARD or SHADOW, each BILLING_CYCLE one anchored at one of the
/// policy's two anchors, so that an anchor changes and changes back, pending or in force, with usage of the policy's
/// metric after that anchor.
fn cycle_draw() -> impl Strategy<Value = PolicyDraw> {
    let kind = prop_oneof![
        4 => Just(Window::BILLING_CYCLE),
        1 => Just(Window::MONTH),
        1 => Just(Window::DAY),
    ];
    let enforcement = prop_oneof![
        2 => Just(Enforcement::HARD),
        2 => Just(Enforcement::SHADOW),
        1 => Just(Enforcement::SOFT),
    ];
    // Effective on a grid of 20 minutes, where most starts of the anchors' cycles after that anchor lie: a version
    // effective exactly at a boundary (an anchor change taking effect at once; a version in force for the cycle it
    // starts only).
    let version = (version_draw(), kind, prop::option::weighted(0.8, 0i64..8), enforcement, any::<bool>());
    let scope = prop::option::weighted(0.75, scope());
    let usage = vec((who(), 0i64..15, 0i64..20), 0..=4);
    // One of the policy's anchors has a start among the events after its anchor of [`ANCHORS`], the other is any.
    let anchors = (any::<prop::sample::Index>(), 0..CYCLE_ANCHORS.len());
    (0..OWNERS.len(), 0..METRICS.len(), 0..ANCHORS.len(), scope, vec(version, 2..=4), (usage, anchors)).prop_map(
        |(owner, metric, anchor, scope, versions, (usage, anchors))| {
            let usage = usage_near(owner, metric, anchor, usage);
            let versions = versions
                .into_iter()
                .map(|(version, window, k, enforcement, second)| VersionDraw {
                    window: Some(window),
                    enforcement,
                    overage: version.overage.filter(|_| enforcement == Enforcement::HARD),
                    effective_from: k
                        .map_or(at(EARLY).micros(), |k| at(ANCHORS[anchor]).micros() + k * 20 * MINUTE_MICROS),
                    scope: scope.unwrap_or(version.scope),
                    cycle_anchor: match second {
                        true => anchors.1,
                        false => *anchors.0.get(STARTS_AFTER[anchor]),
                    },
                    ..version
                })
                .collect();
            PolicyDraw { owner, metric, window: Window::BILLING_CYCLE, versions, usage }
        },
    )
}

/// A policy whose versions switch between DAY and ROLLING during one day (contract §5 "Rolling windows": a day that
/// is also the policy's UTC DAY window is judged as that window): versions effective from the start or around one
/// anchor (the day before midnight for one of them), mostly of one scope, so that both judge the same members, with
/// usage of the policy's metric after that anchor (the other usage drawn is spread over five anchors, two tenants and
/// two metrics: seldom where a version changes).
fn switching_draw() -> impl Strategy<Value = PolicyDraw> {
    let kind = prop_oneof![Just(Window::DAY), Just(Window::ROLLING)];
    // Mostly HARD or SHADOW on both sides, where the day's two judgements meet.
    let enforcement = prop_oneof![
        2 => Just(Enforcement::HARD),
        2 => Just(Enforcement::SHADOW),
        1 => Just(Enforcement::SOFT),
    ];
    let version = (version_draw(), kind, prop::option::weighted(0.8, 0i64..4), enforcement);
    let scope = prop::option::weighted(0.75, scope());
    // On a grid of 10 minutes: events exactly a length apart (one aged out at the other's instant) and at a version's
    // effective_from.
    let usage = vec((who(), 0i64..15, 0i64..20), 0..=4);
    (0..OWNERS.len(), 0..METRICS.len(), 0..ANCHORS.len(), scope, vec(version, 2..=4), usage).prop_map(
        |(owner, metric, anchor, scope, versions, usage)| {
            let usage = usage_near(owner, metric, anchor, usage);
            let versions = versions
                .into_iter()
                .map(|(version, window, k, enforcement)| VersionDraw {
                    window: Some(window),
                    enforcement,
                    overage: version.overage.filter(|_| enforcement == Enforcement::HARD),
                    effective_from: k
                        .map_or(at(EARLY).micros(), |k| at(ANCHORS[anchor]).micros() + k * 40 * MINUTE_MICROS),
                    scope: scope.unwrap_or(version.scope),
                    ..version
                })
                .collect();
            PolicyDraw { owner, metric, window: Window::DAY, versions, usage }
        },
    )
}

fn gauge_draw() -> impl Strategy<Value = GaugeDraw> {
    let enforcement = prop_oneof![Just(Enforcement::HARD), Just(Enforcement::SHADOW)];
    let window = prop_oneof![Just(Window::HOUR), Just(Window::DAY)];
    let violation = prop_oneof![
        5 => prop_oneof![Just(Violation::NO_INSERTS), Just(Violation::NO_WRITES), Just(Violation::DISABLE)].prop_map(Some),
        1 => Just(None),
    ];
    let version = (0i64..100, window, effective_from(), enforcement, violation).prop_map(
        |(limit, window, effective_from, enforcement, violation)| GaugeVersionDraw {
            limit,
            window,
            effective_from,
            enforcement,
            violation,
        },
    );
    (0..OWNERS.len(), vec(version, 1..=2)).prop_map(|(owner, versions)| GaugeDraw { owner, versions })
}

fn reading_draw() -> impl Strategy<Value = ReadingDraw> {
    (0..TENANTS.len(), time(), 0i64..150).prop_map(|(tenant, occurred_at, level)| ReadingDraw {
        tenant,
        occurred_at,
        level,
    })
}

fn grant_draw() -> impl Strategy<Value = GrantDraw> {
    (who(), scope(), 1i64..40, time(), 1i64..=48).prop_map(|(who, names, amount, valid_from, hours)| GrantDraw {
        who,
        names,
        amount,
        valid_from,
        hours,
    })
}

fn usage_draw() -> impl Strategy<Value = UsageDraw> {
    (who(), time(), 0i64..20, prop::option::weighted(0.2, 0i64..20))
        .prop_map(|(who, occurred_at, quantity, other_metric)| UsageDraw { who, occurred_at, quantity, other_metric })
}

fn close_draw() -> impl Strategy<Value = CloseDraw> {
    (prop::bool::weighted(0.6), -20i64..=180, 0i64..50, prop::bool::weighted(0.2))
        .prop_map(|(commit, offset_minutes, amount, stale)| CloseDraw { commit, offset_minutes, amount, stale })
}

fn renew_draw() -> impl Strategy<Value = RenewDraw> {
    (-20i64..=180, 1i64..=120, prop::bool::weighted(0.2)).prop_map(|(offset_minutes, ttl, stale)| RenewDraw {
        offset_minutes,
        ttl,
        stale,
    })
}

fn reservation_draw() -> impl Strategy<Value = ReservationDraw> {
    let reserve = prop::option::weighted(0.85, (0i64..40, 1i64..=120));
    let second = prop::option::weighted(0.15, (-30i64..=30, 0i64..40, 1i64..=120));
    // Mostly leases renew; a RENEW of a reservation of an amount is drawn too, and refused.
    let lease = prop_oneof![
        2 => (2i64..1000, vec(renew_draw(), 0..=3)).prop_map(|(token, renews)| (Some(token), renews)),
        5 => vec(renew_draw(), 0..=1).prop_map(|renews| (None, renews)),
    ];
    (who(), time(), reserve, second, lease, vec(close_draw(), 0..=3)).prop_map(
        |(who, occurred_at, reserve, second_reserve, (fencing_token, renews), closes)| ReservationDraw {
            who,
            occurred_at,
            reserve,
            second_reserve,
            fencing_token,
            renews,
            closes,
        },
    )
}

fn copy() -> impl Strategy<Value = Copy> {
    prop_oneof![
        14 => Just(Copy::None),
        2 => Just(Copy::Exact),
        2 => (1i64..5).prop_map(Copy::Conflicting),
        1 => (1i64..5).prop_map(Copy::Both),
    ]
}

fn step_draw() -> impl Strategy<Value = StepDraw> {
    let close = prop::option::weighted(0.35, prop_oneof![3 => Just(0usize), 1 => Just(1usize)]);
    (close, prop::option::weighted(0.7, 0..AS_OFS.len())).prop_map(|(close, run)| StepDraw { close, run })
}

fn header(event_id: String, who: Who, occurred_at: i64) -> Header {
    Header {
        event_id,
        occurred_at: Timestamp(occurred_at),
        tenant: TENANTS[who.tenant].into(),
        subject: SUBJECTS[who.subject].map(String::from),
        project: PROJECTS[who.project].map(String::from),
        api_key: API_KEYS[who.api_key].map(String::from),
        metric: METRICS[who.metric].into(),
        source: "model".into(),
    }
}

fn policy_events(i: usize, p: &PolicyDraw) -> Vec<Event> {
    let mut events = Vec::new();
    for (v, version) in p.versions.iter().enumerate() {
        let number = v as i32 + 1;
        let window = version.window.unwrap_or(p.window);
        // A ROLLING window is a quota's of consumption: validation quarantines it with a throttled overage. Its
        // intervals hold a few events each, so its limit is a third of the one drawn, for them to go beyond it.
        let rolling = window == Window::ROLLING;
        // So is a BILLING_CYCLE one (no burst, overage nor violation), anchored in its `time_zone` (UTC as none).
        let cycle = (window == Window::BILLING_CYCLE).then(|| CYCLE_ANCHORS[version.cycle_anchor]);
        let overage = version.overage.filter(|_| !rolling && cycle.is_none());
        let limit = if rolling { version.limit / 3 } else { version.limit };
        let header = Header {
            event_id: format!("pol{i}-v{number}"),
            occurred_at: Timestamp(version.effective_from),
            tenant: OWNERS[p.owner].into(),
            subject: None,
            project: None,
            api_key: None,
            metric: METRICS[p.metric].into(),
            source: "model".into(),
        };
        events.push(Event::Policy(PolicyEvent {
            header,
            // Distinct per owner: a plan default and a tenant's own policy never share an id.
            policy_id: format!("pol{i}"),
            version: number,
            scope: version.scope,
            limit,
            window,
            enforcement: version.enforcement,
            effective_from: Timestamp(version.effective_from),
            burst: None,
            actor: None,
            reason: None,
            time_zone: cycle.map(|(zone, _)| zone).filter(|zone| *zone != "UTC").map(String::from),
            on_failure: None,
            overage_rate: overage.map(|o| o.0),
            overage_window: overage.map(|o| o.1),
            violation: None,
            window_seconds: rolling.then_some(version.rolling_seconds),
            cycle_anchor: cycle.map(|(_, anchor)| at(anchor)),
            alert_thresholds: None,
            alert_subject_share: None,
        }));
    }
    events
}

fn gauge_events(i: usize, g: &GaugeDraw) -> Vec<Event> {
    let mut events = Vec::new();
    for (v, version) in g.versions.iter().enumerate() {
        let number = v as i32 + 1;
        let header = Header {
            event_id: format!("gauge{i}-v{number}"),
            occurred_at: Timestamp(version.effective_from),
            tenant: OWNERS[g.owner].into(),
            subject: None,
            project: None,
            api_key: None,
            metric: GAUGE_METRIC.into(),
            source: "model".into(),
        };
        events.push(Event::Policy(PolicyEvent {
            version: number,
            violation: version.violation,
            ..PolicyEvent::new(
                header,
                format!("gauge{i}"),
                version.limit,
                version.window,
                version.enforcement,
                Timestamp(version.effective_from),
            )
        }));
    }
    events
}

fn reading_event(i: usize, r: &ReadingDraw) -> Event {
    Event::Usage(UsageEvent {
        header: Header {
            event_id: format!("level{i}"),
            occurred_at: Timestamp(r.occurred_at),
            tenant: TENANTS[r.tenant].into(),
            subject: None,
            project: None,
            api_key: None,
            metric: GAUGE_METRIC.into(),
            source: "model".into(),
        },
        quantity: r.level,
        request_id: None,
        attributes: Default::default(),
    })
}

/// A grant of [`GAUGE_METRIC`]: raises a gauge's limit when it is the tenant's (naming no member).
fn gauge_grant_event(i: usize, g: &GrantDraw) -> Event {
    let Event::Grant(grant) = grant_event(i, g) else { unreachable!("a grant") };
    let header = Header { event_id: format!("ggrant{i}"), metric: GAUGE_METRIC.into(), ..grant.header };
    Event::Grant(GrantEvent { header, grant_id: format!("ggrant{i}"), ..grant })
}

fn grant_event(i: usize, g: &GrantDraw) -> Event {
    let named = |scope: Scope, index: usize| if g.names == scope { index } else { 0 };
    let who = Who {
        subject: named(Scope::SUBJECT, g.who.subject),
        project: named(Scope::PROJECT, g.who.project),
        api_key: named(Scope::API_KEY, g.who.api_key),
        ..g.who
    };
    Event::Grant(GrantEvent {
        header: header(format!("grant{i}"), who, g.valid_from),
        grant_id: format!("grant{i}"),
        amount: g.amount,
        valid_from: Timestamp(g.valid_from),
        valid_until: Timestamp(g.valid_from + g.hours * HOUR_MICROS),
        reason: "model".into(),
        actor: None,
    })
}

/// The usage of a draw under the event_id `id`: one event, or one per metric under one request_id.
fn usage_events(id: &str, u: &UsageDraw) -> Vec<Event> {
    let request_id = u.other_metric.map(|_| format!("req-{id}"));
    let mut events = vec![Event::Usage(UsageEvent {
        header: header(id.to_string(), u.who, u.occurred_at),
        quantity: u.quantity,
        request_id: request_id.clone(),
        attributes: Default::default(),
    })];
    if let Some(quantity) = u.other_metric {
        let other = Who { metric: 1 - u.who.metric, ..u.who };
        events.push(Event::Usage(UsageEvent {
            header: header(format!("{id}-m"), other, u.occurred_at),
            quantity,
            request_id,
            attributes: Default::default(),
        }));
    }
    events
}

/// The events of the i-th reservation drawn, under `id` (event_ids stay per draw, so shared ids never collide).
fn reservation_events(i: usize, r: &ReservationDraw, id: &str) -> Vec<Event> {
    let token = |stale: bool| r.fencing_token.map(|t| if stale { t - 1 } else { t });
    // A lease's RESERVE holds one slot (the schema's rule); a COMMIT carries no token (it refuses one), so a COMMIT of a
    // lease's id is judged by the lease's kind alone.
    let held = |amount: i64| if r.fencing_token.is_some() { 1 } else { amount };
    let event = |suffix: &str, action, occurred_at: i64, amount, expires_at: Option<i64>, fencing_token| {
        Event::Reservation(ReservationEvent {
            header: header(format!("r{i}-{suffix}"), r.who, occurred_at),
            reservation_id: id.to_string(),
            action,
            amount,
            expires_at: expires_at.map(Timestamp),
            fencing_token,
        })
    };
    let mut events = Vec::new();
    if let Some((amount, ttl)) = r.reserve {
        let expires_at = r.occurred_at + ttl * MINUTE_MICROS;
        events.push(event(
            "reserve",
            ReservationAction::RESERVE,
            r.occurred_at,
            held(amount),
            Some(expires_at),
            token(false),
        ));
    }
    if let Some((offset, amount, ttl)) = r.second_reserve {
        let occurred_at = r.occurred_at + offset * MINUTE_MICROS;
        let expires_at = occurred_at + ttl * MINUTE_MICROS;
        events.push(event(
            "reserve2",
            ReservationAction::RESERVE,
            occurred_at,
            held(amount),
            Some(expires_at),
            token(false),
        ));
    }
    for (j, renew) in r.renews.iter().enumerate() {
        let occurred_at = r.occurred_at + renew.offset_minutes * MINUTE_MICROS;
        let expires_at = occurred_at + renew.ttl * MINUTE_MICROS;
        // A RENEW of a reservation of an amount carries a token all the same: the kind decides, not the field.
        let fencing_token = token(renew.stale).or(Some(1));
        events.push(event(&format!("n{j}"), ReservationAction::RENEW, occurred_at, 0, Some(expires_at), fencing_token));
    }
    for (j, c) in r.closes.iter().enumerate() {
        let occurred_at = r.occurred_at + c.offset_minutes * MINUTE_MICROS;
        events.push(match c.commit {
            true => event(&format!("c{j}"), ReservationAction::COMMIT, occurred_at, c.amount, None, None),
            false => event(&format!("c{j}"), ReservationAction::RELEASE, occurred_at, 0, None, token(c.stale)),
        });
    }
    events
}

/// Another payload under the same event_id.
fn conflicting(event: &Event, raise: i64) -> Event {
    let mut copy = event.clone();
    match &mut copy {
        Event::Usage(u) => u.quantity += raise,
        Event::Reservation(r) if r.action == ReservationAction::COMMIT => r.amount += raise,
        Event::Reservation(r) => r.header.source = format!("retry-{raise}"),
        Event::Grant(g) => g.header.source = format!("retry-{raise}"),
        Event::Policy(p) => p.header.source = format!("retry-{raise}"),
        other => panic!("not generated: {other:?}"),
    }
    copy
}

fn with_copies(base: Vec<Event>, copies: &[Copy]) -> Vec<Event> {
    let mut all = Vec::new();
    for (event, copy) in base.into_iter().zip(copies) {
        match *copy {
            Copy::None => {}
            Copy::Exact => all.push(event.clone()),
            Copy::Conflicting(raise) => all.push(conflicting(&event, raise)),
            Copy::Both(raise) => {
                all.push(event.clone());
                all.push(conflicting(&event, raise));
            }
        }
        all.push(event);
    }
    all
}

fn history() -> impl Strategy<Value = History> {
    let parts = (
        vec(policy_draw(), 1..=4),
        vec(grant_draw(), 0..=3),
        vec(usage_draw(), 0..=24),
        vec(reservation_draw(), 0..=6),
        vec(step_draw(), 1..=5),
        (vec(gauge_draw(), 0..=2), vec(reading_draw(), 0..=8), vec(grant_draw(), 0..=1)),
    );
    parts
        .prop_flat_map(|(policies, grants, usage, reservations, steps, (gauges, readings, gauge_grants))| {
            let mut base = Vec::new();
            for (i, p) in policies.iter().enumerate() {
                base.extend(policy_events(i, p));
                for (j, u) in p.usage.iter().enumerate() {
                    base.extend(usage_events(&format!("pol{i}-u{j}"), u));
                }
            }
            for (i, g) in gauges.iter().enumerate() {
                base.extend(gauge_events(i, g));
            }
            base.extend(readings.iter().enumerate().map(|(i, r)| reading_event(i, r)));
            base.extend(gauge_grants.iter().enumerate().map(|(i, g)| gauge_grant_event(i, g)));
            base.extend(grants.iter().enumerate().map(|(i, g)| grant_event(i, g)));
            base.extend(usage.iter().enumerate().flat_map(|(i, u)| usage_events(&format!("u{i}"), u)));
            for (i, r) in reservations.iter().enumerate() {
                // An odd draw takes the reservation_id of the draw before when their tenants differ: producers
                // choose their own ids, and another tenant's reservation under the same id is another one.
                let shares = i % 2 == 1 && reservations[i - 1].who.tenant != r.who.tenant;
                base.extend(reservation_events(i, r, &format!("r{}", if shares { i - 1 } else { i })));
            }
            let n = base.len();
            (Just(base), vec(copy(), n), Just(steps))
        })
        .prop_flat_map(|(base, copies, steps)| {
            let all = with_copies(base, &copies);
            let n = all.len();
            let cuts = vec(0..=n, steps.len() - 1);
            (Just(all).prop_shuffle(), cuts, Just(steps))
        })
        .prop_map(|(events, mut cuts, mut steps)| {
            cuts.sort_unstable();
            cuts.push(events.len());
            let mut batches = Vec::new();
            let mut from = 0;
            for cut in cuts {
                batches.push(events[from..cut].to_vec());
                from = cut;
            }
            // Runs go forward in time: the k-th run takes the k-th smallest as_of drawn.
            let mut as_ofs: Vec<usize> = steps.iter().filter_map(|s| s.run).collect();
            as_ofs.sort_unstable();
            let mut next = as_ofs.into_iter();
            for step in &mut steps {
                if step.run.is_some() {
                    step.run = next.next();
                }
            }
            History { batches, steps }
        })
}

// ---------------------------------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------------------------------

/// What one adjustment is about (the model's own naming of contract §5's "thing an adjustment is about").
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Window {
        kind: AdjustmentKind,
        policy_id: String,
        /// A policy_id's versions may change scope: a TENANT and a SUBJECT window of it are two things, even for
        /// requests without a subject.
        scope: Scope,
        tenant: String,
        /// The subject, project or API key of the window, by its scope (none for what names none, and for TENANT).
        member: Option<String>,
        metric: String,
        start: Timestamp,
        end: Timestamp,
    },
    Late {
        tenant: String,
        metric: String,
        start: Timestamp,
        end: Timestamp,
    },
    Expiry(String),
    Refused(String),
    /// The n-th conflicting copy of an event_id, in ledger order.
    Conflict(String, u32),
}

/// The key of each recorded adjustment, in ledger order.
fn keys_of(adjustments: &[AdjustmentEvent]) -> Vec<Key> {
    let mut ordinals: BTreeMap<String, u32> = BTreeMap::new();
    adjustments
        .iter()
        .map(|a| {
            let only_ref = || {
                assert_eq!(a.refs.len(), 1, "an adjustment about one event names it: {a:?}");
                a.refs[0].clone()
            };
            let h = &a.header;
            match a.kind {
                AdjustmentKind::OVERSHOOT | AdjustmentKind::SHADOW_OVER_LIMIT => Key::Window {
                    kind: a.kind,
                    policy_id: a.policy_id.clone().expect("a window adjustment names its policy"),
                    scope: a.scope.expect("a window adjustment names its scope"),
                    tenant: h.tenant.clone(),
                    member: window_member(a),
                    metric: h.metric.clone(),
                    start: a.window_start.expect("window start"),
                    end: a.window_end.expect("window end"),
                },
                AdjustmentKind::LATE_USAGE => Key::Late {
                    tenant: h.tenant.clone(),
                    metric: h.metric.clone(),
                    start: a.window_start.expect("period start"),
                    end: a.window_end.expect("period end"),
                },
                AdjustmentKind::RESERVATION_EXPIRED => Key::Expiry(only_ref()),
                AdjustmentKind::REFUSED_TRANSITION => Key::Refused(only_ref()),
                AdjustmentKind::CONFLICTING_DUPLICATE => {
                    let id = only_ref();
                    let ordinal = ordinals.entry(id.clone()).or_insert(0);
                    *ordinal += 1;
                    Key::Conflict(id, *ordinal)
                }
            }
        })
        .collect()
}

/// The member a window adjustment is written under: the header field of its scope, the others empty.
fn window_member(a: &AdjustmentEvent) -> Option<String> {
    let h = &a.header;
    let (member, others) = match a.scope.expect("a window adjustment names its scope") {
        Scope::TENANT => (None, [&h.subject, &h.project, &h.api_key]),
        Scope::SUBJECT => (h.subject.clone(), [&None, &h.project, &h.api_key]),
        Scope::PROJECT => (h.project.clone(), [&h.subject, &None, &h.api_key]),
        Scope::API_KEY => (h.api_key.clone(), [&h.subject, &h.project, &None]),
    };
    assert!(others.iter().all(|o| o.is_none()), "a window adjustment names its member only: {a:?}");
    member
}

#[derive(Debug, Clone)]
struct Entry {
    seq: u64,
    event: Event,
    conflicting: bool,
}

/// One unit of consumption: a counted UsageEvent or a valid COMMIT.
#[derive(Debug, Clone)]
struct Item {
    tenant: String,
    subject: Option<String>,
    project: Option<String>,
    api_key: Option<String>,
    metric: String,
    at: Timestamp,
    seq: u64,
    quantity: i64,
    event_id: String,
}

/// What the model says is true at one `--as-of`.
#[derive(Debug, Default)]
struct Truths {
    /// Every concern the run judges, with the amount its adjustments must add up to.
    amounts: BTreeMap<Key, i64>,
    /// Concerns that are a discrepancy now: reported at least once.
    present: BTreeSet<Key>,
    /// The refs a window or late-usage adjustment written now must carry.
    refs: BTreeMap<Key, Vec<String>>,
    /// Leases expired unreleased by the run's `as_of`, per tenant.
    leases_expired: BTreeMap<String, u64>,
}

/// A closed period's late consumption for one (tenant, metric): the amount, and the events counted now but not
/// at the close or the other way round, as (occurred_at, seq, event_id).
type LateSum = (i64, Vec<(Timestamp, u64, String)>);

#[derive(Debug, Default)]
struct Model {
    entries: Vec<Entry>,
    watermark: u64,
    /// (start, end, watermark) of each closed period.
    closes: Vec<(Timestamp, Timestamp, u64)>,
    /// What the recorded adjustments of each concern must add up to after the last run.
    expected: BTreeMap<Key, i64>,
    /// The concerns with an adjustment recorded by the last run or before.
    reported: BTreeSet<Key>,
}

/// Whether an event names no member of any scope (a grant of the TENANT windows).
fn names_none(h: &Header) -> bool {
    h.subject.is_none() && h.project.is_none() && h.api_key.is_none()
}

/// The member of `scope` an item counts under: each member apart, what names none together as one more.
fn member_of(item: &Item, scope: Scope) -> Option<String> {
    match scope {
        Scope::TENANT => None,
        Scope::SUBJECT => item.subject.clone(),
        Scope::PROJECT => item.project.clone(),
        Scope::API_KEY => item.api_key.clone(),
    }
}

/// The adjustment a window of this enforcement reports its excess as: none for SOFT (billed).
fn excess_kind(enforcement: Enforcement) -> Option<AdjustmentKind> {
    match enforcement {
        Enforcement::HARD => Some(AdjustmentKind::OVERSHOOT),
        Enforcement::SHADOW => Some(AdjustmentKind::SHADOW_OVER_LIMIT),
        Enforcement::SOFT => None,
    }
}

fn window_bounds(kind: Window, t: Timestamp) -> (Timestamp, Timestamp) {
    let fixed = |length: i64| {
        let start = t.micros().div_euclid(length) * length;
        (Timestamp(start), Timestamp(start + length))
    };
    match kind {
        Window::MINUTE => fixed(MINUTE_MICROS),
        Window::HOUR => fixed(HOUR_MICROS),
        Window::DAY => fixed(DAY_MICROS),
        Window::CONCURRENT => unreachable!("the model draws no CONCURRENT policy: it judges windows"),
        Window::ROLLING => unreachable!("a ROLLING window is the instant's, by its length: see `rolling_in_force`"),
        Window::BILLING_CYCLE => unreachable!("a BILLING_CYCLE window is its policy_id's: see `cycle_bounds`"),
        Window::MONTH => {
            let d = Utc.timestamp_micros(t.micros()).unwrap();
            let first = |y: i32, m: u32| Timestamp(Utc.with_ymd_and_hms(y, m, 1, 0, 0, 0).unwrap().timestamp_micros());
            let next = if d.month() == 12 { first(d.year() + 1, 1) } else { first(d.year(), d.month() + 1) };
            (first(d.year(), d.month()), next)
        }
    }
}

/// The first instant `zone`'s clock shows `local` (its first occurrence when a fall-back repeats it), or, for a local
/// time a spring-forward skips, the first instant after the gap: stepped forward a minute at a time (the anchors are
/// whole minutes, and so are the clock changes).
fn local_instant(zone: Tz, local: NaiveDateTime) -> Timestamp {
    let mut local = local;
    loop {
        if let Some(at) = zone.from_local_datetime(&local).earliest() {
            return Timestamp(at.timestamp_micros());
        }
        local += chrono::Duration::minutes(1);
    }
}

/// Every start of the cycles of a BILLING_CYCLE version's anchor from May 2026 to March 2027 (around every instant
/// of the model), in order (contract §5 "Billing cycles"): each month on the anchor's day of month on `zone`'s clock
/// (the month's last day when it is shorter) at the anchor's local time of day.
fn cycle_starts(policy: &PolicyEvent) -> Vec<Timestamp> {
    let zone: Tz = policy.time_zone.as_deref().unwrap_or("UTC").parse().unwrap();
    let anchor = policy.cycle_anchor.expect("a BILLING_CYCLE version has its anchor");
    let local = Utc.timestamp_micros(anchor.micros()).unwrap().with_timezone(&zone).naive_local();
    let mut starts = Vec::new();
    for (year, month) in (5..=12).map(|m| (2026, m)).chain((1..=3).map(|m| (2027, m))) {
        let last_day = (28..=31).filter(|d| NaiveDate::from_ymd_opt(year, month, *d).is_some()).max().unwrap();
        let day = NaiveDate::from_ymd_opt(year, month, local.day().min(last_day)).unwrap();
        starts.push(local_instant(zone, day.and_time(local.time())));
    }
    starts
}

/// The cycle boundaries of one policy_id (contract §5 "Billing cycles"), naively: walking its BILLING_CYCLE versions
/// in order of (effective_from, version), the first one's starts (running back before the model's instants), then
/// each later one keeps the boundaries before the next boundary at or after its effective_from, that boundary, and
/// its own starts after it (a version with the cycles in force changes nothing). Versions effective at one instant
/// apply in order of version, as the contract orders them, whatever order the ledger recorded them in: the first
/// one's cycles run back, and a later one with another anchor takes effect at the next boundary of the cycles in force.
fn cycle_boundaries(versions: &[&PolicyEvent]) -> Vec<Timestamp> {
    let mut cycles: Vec<&PolicyEvent> =
        versions.iter().copied().filter(|p| p.window == Window::BILLING_CYCLE).collect();
    cycles.sort_by_key(|p| (p.effective_from, p.version));
    let mut boundaries: Vec<Timestamp> = Vec::new();
    for (n, p) in cycles.into_iter().enumerate() {
        if n == 0 {
            boundaries = cycle_starts(p);
            continue;
        }
        let next = *boundaries.iter().find(|b| **b >= p.effective_from).expect("the boundaries run past the model");
        boundaries.retain(|b| *b < next);
        boundaries.push(next);
        boundaries.extend(cycle_starts(p).into_iter().filter(|s| *s > next));
    }
    boundaries
}

/// `[start, end)` of the cycle of a policy_id containing `t`, from its boundaries ([`cycle_boundaries`]).
fn cycle_bounds(boundaries: &[Timestamp], t: Timestamp) -> (Timestamp, Timestamp) {
    let start = boundaries.iter().copied().filter(|b| *b <= t).max().expect("a boundary before every instant");
    let end = boundaries.iter().copied().filter(|b| *b > t).min().expect("a boundary after every instant");
    (start, end)
}

/// The reservation state machine, naively.
struct Judged {
    /// The index of THE reserve.
    reserve: Option<usize>,
    /// The index of the valid close.
    close: Option<usize>,
    refused: Vec<bool>,
    /// The RESERVE's expiry as the valid RENEWs of a lease moved it.
    expiry: Option<Timestamp>,
    /// The lease's token, when it is a lease.
    token: Option<i64>,
}

fn judge(group: &[(u64, &ReservationEvent)]) -> Judged {
    let mut order: Vec<usize> = (0..group.len()).collect();
    order.sort_by_key(|&i| (group[i].1.header.occurred_at, group[i].0));
    let reserve = order.iter().copied().find(|&i| group[i].1.action == ReservationAction::RESERVE);
    let token = reserve.and_then(|r| group[r].1.fencing_token);
    let mut expiry = reserve.map(|r| group[r].1.expires_at.unwrap());
    let mut close = None;
    let mut refused = vec![false; group.len()];
    for &i in &order {
        let event = group[i].1;
        if event.action == ReservationAction::RESERVE {
            refused[i] = Some(i) != reserve;
            continue;
        }
        let lease = token.is_some();
        refused[i] = match expiry {
            None => true,
            Some(e) if event.header.occurred_at > e || close.is_some() => true,
            Some(_) => match event.action {
                ReservationAction::COMMIT => lease,
                ReservationAction::RENEW => !lease || event.fencing_token != token,
                _ => lease && event.fencing_token != token,
            },
        };
        match (refused[i], event.action) {
            (true, _) => {}
            (false, ReservationAction::RENEW) => expiry = event.expires_at,
            (false, _) => close = Some(i),
        }
    }
    Judged { reserve, close, refused, expiry, token }
}

impl Model {
    fn append(&mut self, events: &[Event]) -> Vec<AppendOutcome> {
        let mut outcomes = Vec::new();
        for event in events {
            let same_id: Vec<&Entry> = self.entries.iter().filter(|e| e.event.event_id() == event.event_id()).collect();
            if let Some(equal) = same_id.iter().find(|e| e.event == *event) {
                outcomes.push(AppendOutcome::Duplicate { of: equal.seq });
                continue;
            }
            self.watermark += 1;
            let seq = self.watermark;
            outcomes.push(match same_id.first() {
                None => AppendOutcome::Recorded { seq },
                Some(first) => AppendOutcome::ConflictingDuplicate { seq, of: first.seq },
            });
            let conflicting = !same_id.is_empty();
            self.entries.push(Entry { seq, event: event.clone(), conflicting });
        }
        outcomes
    }

    fn recorded(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| !e.conflicting)
    }

    fn policies(&self) -> Vec<&PolicyEvent> {
        self.recorded().filter_map(|e| if let Event::Policy(p) = &e.event { Some(p) } else { None }).collect()
    }

    fn grants(&self) -> Vec<&GrantEvent> {
        self.recorded().filter_map(|e| if let Event::Grant(g) = &e.event { Some(g) } else { None }).collect()
    }

    /// Recorded reservation events with seq <= `up_to`, by reservation: (tenant, reservation_id).
    fn reservation_groups(&self, up_to: u64) -> BTreeMap<(String, String), Vec<(u64, &ReservationEvent)>> {
        let mut groups: BTreeMap<(String, String), Vec<(u64, &ReservationEvent)>> = BTreeMap::new();
        for e in self.recorded().filter(|e| e.seq <= up_to) {
            if let Event::Reservation(r) = &e.event {
                let key = (r.header.tenant.clone(), r.reservation_id.clone());
                groups.entry(key).or_default().push((e.seq, r));
            }
        }
        groups
    }

    /// Consumption as the ledger held it up to `up_to`: counted usage plus the COMMITs valid then.
    fn items(&self, up_to: u64) -> Vec<Item> {
        let item = |seq: u64, h: &Header, quantity: i64| Item {
            tenant: h.tenant.clone(),
            subject: h.subject.clone(),
            project: h.project.clone(),
            api_key: h.api_key.clone(),
            metric: h.metric.clone(),
            at: h.occurred_at,
            seq,
            quantity,
            event_id: h.event_id.clone(),
        };
        let mut items = Vec::new();
        for e in self.recorded().filter(|e| e.seq <= up_to) {
            if let Event::Usage(u) = &e.event {
                items.push(item(e.seq, &u.header, u.quantity));
            }
        }
        for group in self.reservation_groups(up_to).values() {
            if let Some(close) = judge(group).close {
                let (seq, event) = group[close];
                if event.action == ReservationAction::COMMIT {
                    items.push(item(seq, &event.header, event.amount));
                }
            }
        }
        // A metric a gauge quota names (the tenant's or the plan's, any version recorded now) is a level: none of it is
        // consumption, now or at a close.
        items.retain(|i| !self.is_gauge_metric(&i.tenant, &i.metric));
        items
    }

    fn is_gauge_metric(&self, tenant: &str, metric: &str) -> bool {
        self.policies().iter().any(|p| {
            p.violation.is_some() && p.header.metric == metric && (p.header.tenant == tenant || p.header.tenant == "*")
        })
    }

    /// The gauge versions in force for `tenant` at `t`, each with its window containing `t`: of each policy_id of the
    /// tenant's or the plan's, the greatest (effective_from, version) effective by `t`, when it has a violation; a
    /// plan gauge only where the tenant has no gauge of its own of the same window kind in force.
    fn gauges_in_force(
        policies: &[&PolicyEvent],
        tenant: &str,
        t: Timestamp,
    ) -> Vec<(PolicyEvent, Timestamp, Timestamp)> {
        let in_force = |owner: &str| {
            let of_owner: Vec<&PolicyEvent> = policies
                .iter()
                .copied()
                .filter(|p| p.header.tenant == owner && p.header.metric == GAUGE_METRIC)
                .collect();
            let ids: BTreeSet<&str> = of_owner.iter().map(|p| p.policy_id.as_str()).collect();
            let mut found = Vec::new();
            for id in ids {
                let latest = of_owner
                    .iter()
                    .filter(|p| p.policy_id == id && p.effective_from <= t)
                    .max_by_key(|p| (p.effective_from, p.version));
                if let Some(p) = latest.filter(|p| p.violation.is_some()) {
                    let (start, end) = window_bounds(p.window, t);
                    found.push(((*p).clone(), start, end));
                }
            }
            found
        };
        let own = in_force(tenant);
        let mut all = own.clone();
        all.extend(in_force("*").into_iter().filter(|(d, _, _)| !own.iter().any(|(o, _, _)| o.window == d.window)));
        all
    }

    /// The windows of gauges in which each tenant's level stood above the effective limit up to `as_of`, walked on
    /// a grid of every hour (the model's windows are hours and UTC days), every reading, every version's
    /// effective_from and `as_of`: between two neighbours the level, the gauges in force and their windows are one.
    fn gauges_over_limit(&self, as_of: Timestamp) -> Vec<GaugeOverLimit> {
        let policies = self.policies();
        let mut found = Vec::new();
        for tenant in TENANTS {
            let mut readings: Vec<(Timestamp, u64, i64)> = self
                .recorded()
                .filter_map(|e| match &e.event {
                    Event::Usage(u) if u.header.tenant == tenant && u.header.metric == GAUGE_METRIC => {
                        Some((u.header.occurred_at, e.seq, u.quantity))
                    }
                    _ => None,
                })
                .filter(|r| r.0 < as_of)
                .collect();
            readings.sort();
            let Some(first) = readings.first().map(|r| r.0) else { continue };
            let mut grid: BTreeSet<Timestamp> = readings.iter().map(|r| r.0).collect();
            grid.extend(policies.iter().map(|p| p.effective_from).filter(|t| first < *t && *t < as_of));
            let mut hour = window_bounds(Window::HOUR, first).1;
            while hour < as_of {
                grid.insert(hour);
                hour = Timestamp(hour.micros() + HOUR_MICROS);
            }
            grid.insert(as_of);
            let grid: Vec<Timestamp> = grid.into_iter().collect();
            // (policy_id, window start, window end) -> the row so far, its over time in micros.
            let mut windows: BTreeMap<(String, Timestamp, Timestamp), (GaugeOverLimit, i64)> = BTreeMap::new();
            for pair in grid.windows(2) {
                let (from, until) = (pair[0], pair[1]);
                let level = readings.iter().rev().find(|r| r.0 <= from).expect("the grid starts at a reading").2;
                for (p, start, end) in Self::gauges_in_force(&policies, tenant, from) {
                    let grants: i64 = self
                        .grants()
                        .iter()
                        .filter(|g| g.header.tenant == tenant && g.header.metric == GAUGE_METRIC)
                        .filter(|g| names_none(&g.header) && g.valid_from < end && start < g.valid_until)
                        .map(|g| g.amount)
                        .sum();
                    let limit = p.limit + grants;
                    let (row, over) = windows.entry((p.policy_id.clone(), start, end)).or_insert_with(|| {
                        let row = GaugeOverLimit {
                            tenant: tenant.into(),
                            metric: GAUGE_METRIC.into(),
                            policy_id: p.policy_id.clone(),
                            version: 0,
                            enforcement: p.enforcement,
                            violation: p.violation.unwrap(),
                            window_start: start,
                            window_end: end,
                            limit,
                            peak: level,
                            over_ms: 0,
                        };
                        (row, 0)
                    });
                    (row.version, row.enforcement, row.violation, row.limit) =
                        (p.version, p.enforcement, p.violation.unwrap(), limit);
                    row.peak = row.peak.max(level);
                    if level > limit {
                        *over += until.micros() - from.micros();
                    }
                }
            }
            for (_, (mut row, over)) in windows {
                if over > 0 {
                    row.over_ms = (over as u64).div_ceil(1_000);
                    found.push(row);
                }
            }
        }
        found
    }

    /// The policy versions (with their window) that apply to consumption of `tenant`/`metric` at `t`.
    fn applicable(&self, tenant: &str, metric: &str, t: Timestamp) -> Vec<(PolicyEvent, Timestamp, Timestamp)> {
        let policies = self.policies();
        let in_force = |owner: &str| {
            let ids: BTreeSet<&str> = policies
                .iter()
                .filter(|p| p.header.tenant == owner && p.header.metric == metric)
                .map(|p| p.policy_id.as_str())
                .collect();
            // contract §5, per window: each window kind of the id's versions, the window of that kind containing `t` is the
            // policy's when the version in force for it (greatest (effective_from, version) effective before its
            // end) has that kind.
            let mut found = Vec::new();
            for id in ids {
                let versions: Vec<&PolicyEvent> = policies
                    .iter()
                    .copied()
                    .filter(|p| p.header.tenant == owner && p.header.metric == metric && p.policy_id == id)
                    .collect();
                for kind in [Window::MINUTE, Window::HOUR, Window::DAY, Window::MONTH] {
                    if !versions.iter().any(|p| p.window == kind) {
                        continue;
                    }
                    let (start, end) = window_bounds(kind, t);
                    let mut best: Option<&PolicyEvent> = None;
                    for p in versions.iter().filter(|p| p.effective_from < end) {
                        if best.is_none_or(|b| (p.effective_from, p.version) > (b.effective_from, b.version)) {
                            best = Some(p);
                        }
                    }
                    found.extend(best.filter(|p| p.window == kind).map(|p| (p.clone(), start, end)));
                }
                // contract §5 "Billing cycles": the cycle containing `t` of the schedule the id's BILLING_CYCLE
                // versions make is the policy's when the version in force for it (effective before its end) is one.
                if versions.iter().any(|p| p.window == Window::BILLING_CYCLE) {
                    let (start, end) = cycle_bounds(&cycle_boundaries(&versions), t);
                    let mut best: Option<&PolicyEvent> = None;
                    for p in versions.iter().filter(|p| p.effective_from < end) {
                        if best.is_none_or(|b| (p.effective_from, p.version) > (b.effective_from, b.version)) {
                            best = Some(p);
                        }
                    }
                    found.extend(best.filter(|p| p.window == Window::BILLING_CYCLE).map(|p| (p.clone(), start, end)));
                }
            }
            found
        };
        let own = in_force(tenant);
        let mut all = own.clone();
        for default in in_force("*") {
            if !own.iter().any(|(p, _, _)| p.scope == default.0.scope && p.window == default.0.window) {
                all.push(default);
            }
        }
        all
    }

    /// The ROLLING versions that apply to consumption of `tenant`/`metric` at the instant `t` (contract §5 "Rolling
    /// windows"): of each policy_id, the version with the greatest (effective_from, version) effective by `t` (the
    /// window ending at `t` + 1µs), when it is ROLLING; a plan default only where the tenant has no ROLLING policy
    /// of its own of the same scope in force at `t`.
    fn rolling_in_force(&self, tenant: &str, metric: &str, t: Timestamp) -> Vec<PolicyEvent> {
        let policies = self.policies();
        let in_force = |owner: &str| {
            let of_owner: Vec<&PolicyEvent> =
                policies.iter().copied().filter(|p| p.header.tenant == owner && p.header.metric == metric).collect();
            let ids: BTreeSet<&str> = of_owner.iter().map(|p| p.policy_id.as_str()).collect();
            let mut found = Vec::new();
            for id in ids {
                let mut best: Option<&PolicyEvent> = None;
                for p in of_owner.iter().copied().filter(|p| p.policy_id == id && p.effective_from <= t) {
                    if best.is_none_or(|b| (p.effective_from, p.version) > (b.effective_from, b.version)) {
                        best = Some(p);
                    }
                }
                found.extend(best.filter(|p| p.window == Window::ROLLING).cloned());
            }
            found
        };
        let own = in_force(tenant);
        let mut all = own.clone();
        all.extend(in_force("*").into_iter().filter(|d| !own.iter().any(|o| o.scope == d.scope)));
        all
    }

    fn effective_limit(&self, policy: &PolicyEvent, key: &Key) -> i64 {
        let Key::Window { tenant, member, metric, start, end, .. } = key else { unreachable!() };
        self.limit_over(policy, tenant, member, metric, *start, *end)
    }

    /// The version's limit plus the grants of the member that overlap `[start, end)`.
    fn limit_over(
        &self,
        policy: &PolicyEvent,
        tenant: &str,
        member: &Option<String>,
        metric: &str,
        start: Timestamp,
        end: Timestamp,
    ) -> i64 {
        let mut limit = policy.limit;
        for g in self.grants() {
            let h = &g.header;
            // A grant names at most one member: it raises that member's windows of that scope, one naming none the
            // TENANT windows.
            let raises = match policy.scope {
                Scope::TENANT => names_none(h),
                Scope::SUBJECT => h.subject.is_some() && h.subject == *member,
                Scope::PROJECT => h.project.is_some() && h.project == *member,
                Scope::API_KEY => h.api_key.is_some() && h.api_key == *member,
            };
            let overlaps = g.valid_from < end && start < g.valid_until;
            if g.header.tenant == tenant && g.header.metric == metric && raises && overlaps {
                limit += g.amount;
            }
        }
        limit
    }

    fn truths(&self, as_of: Timestamp) -> Truths {
        let mut truths = Truths::default();
        self.judge_windows(as_of, &mut truths);
        self.judge_late_usage(as_of, &mut truths);
        self.judge_reservations(as_of, &mut truths);
        let mut ordinals: BTreeMap<&str, u32> = BTreeMap::new();
        for e in self.entries.iter().filter(|e| e.conflicting) {
            let ordinal = ordinals.entry(e.event.event_id()).or_insert(0);
            *ordinal += 1;
            let amount = if let Event::Usage(u) = &e.event { u.quantity } else { 0 };
            let key = Key::Conflict(e.event.event_id().to_string(), *ordinal);
            truths.amounts.insert(key.clone(), amount);
            truths.present.insert(key);
        }
        truths
    }

    fn judge_windows(&self, as_of: Timestamp, truths: &mut Truths) {
        let mut windows: BTreeMap<Key, (PolicyEvent, Vec<Item>)> = BTreeMap::new();
        for item in self.items(u64::MAX).into_iter().filter(|i| i.at < as_of) {
            for (policy, start, end) in self.applicable(&item.tenant, &item.metric, item.at) {
                let Some(kind) = excess_kind(policy.enforcement) else { continue };
                if end > as_of {
                    continue;
                }
                let key = Key::Window {
                    kind,
                    policy_id: policy.policy_id.clone(),
                    scope: policy.scope,
                    tenant: item.tenant.clone(),
                    member: member_of(&item, policy.scope),
                    metric: item.metric.clone(),
                    start,
                    end,
                };
                let window = windows.entry(key).or_insert_with(|| (policy.clone(), Vec::new()));
                assert_eq!(window.0, policy, "one version governs a whole window");
                window.1.push(item.clone());
            }
        }
        self.judge_rolling(as_of, &windows, truths);
        for (key, (policy, mut items)) in windows {
            let mut limit = self.effective_limit(&policy, &key);
            items.sort_by_key(|i| (i.at, i.seq));
            // A throttled overage: beyond the limit, one bucket of `rate` plus `rate` per window length (a minute or
            // an hour here) from the first item beyond the limit to the window's end, rounded up, went through on
            // purpose; the overshoot is what passed that.
            if let (Some(rate), Some(per), Key::Window { end, .. }) = (policy.overage_rate, policy.overage_window, &key)
            {
                let mut running = 0;
                let first_beyond = items.iter().find(|i| {
                    running += i.quantity;
                    i.quantity > 0 && running > limit
                });
                if let Some(first) = first_beyond {
                    let length = if per == Window::MINUTE { MINUTE_MICROS } else { HOUR_MICROS };
                    let elapsed = end.micros() - first.at.micros();
                    limit += rate + (rate * elapsed + length - 1) / length;
                }
            }
            let mut running = 0;
            let mut crossers = Vec::new();
            for i in &items {
                running += i.quantity;
                if i.quantity > 0 && running > limit {
                    crossers.push(i.event_id.clone());
                }
            }
            let excess = (running - limit).max(0);
            if excess > 0 {
                truths.present.insert(key.clone());
            }
            truths.amounts.insert(key.clone(), excess);
            truths.refs.insert(key, crossers);
        }
        // A judged window with no consumption left is 0.
        for key in self.expected.keys() {
            if let Key::Window { end, .. } = key
                && *end <= as_of
            {
                truths.amounts.entry(key.clone()).or_insert(0);
            }
        }
    }

    /// ROLLING policies (contract §5 "Rolling windows"), per UTC day ended by `as_of`: at each instant of the day at
    /// which the member counted an event and a ROLLING version is in force, the consumption of the L µs up to and
    /// including the instant against the version's limit plus the member's grants overlapping them; the day's truth is
    /// the greatest excess, its refs the crossers of the first interval with it. A day that is also the policy's DAY
    /// window of the member (judged in `calendar`, HARD or SHADOW) is judged as that window only.
    fn judge_rolling(&self, as_of: Timestamp, calendar: &BTreeMap<Key, (PolicyEvent, Vec<Item>)>, truths: &mut Truths) {
        let items = self.items(u64::MAX);
        // The instants of each day key: the item there and the version in force then.
        let mut days: BTreeMap<Key, Vec<(&Item, PolicyEvent)>> = BTreeMap::new();
        for item in &items {
            let (start, end) = window_bounds(Window::DAY, item.at);
            if end > as_of {
                continue;
            }
            for policy in self.rolling_in_force(&item.tenant, &item.metric, item.at) {
                let Some(kind) = excess_kind(policy.enforcement) else { continue };
                let key = |kind| Key::Window {
                    kind,
                    policy_id: policy.policy_id.clone(),
                    scope: policy.scope,
                    tenant: item.tenant.clone(),
                    member: member_of(item, policy.scope),
                    metric: item.metric.clone(),
                    start,
                    end,
                };
                // The policy's DAY window of the member that day, judged whichever its enforcement: the day is that
                // window's.
                let judged_as_day = [AdjustmentKind::OVERSHOOT, AdjustmentKind::SHADOW_OVER_LIMIT]
                    .into_iter()
                    .any(|kind| calendar.contains_key(&key(kind)));
                if !judged_as_day {
                    days.entry(key(kind)).or_default().push((item, policy));
                }
            }
        }
        for (key, mut instants) in days {
            let Key::Window { scope, tenant, member, metric, .. } = &key else { unreachable!() };
            instants.sort_by_key(|(i, _)| (i.at, i.seq));
            // (excess, limit, the interval's items) of the first instant with the greatest excess.
            let mut worst: Option<(i64, i64, Vec<&Item>)> = None;
            for (instant, policy) in &instants {
                let length = policy.window_seconds.expect("a ROLLING version has its length") * 1_000_000;
                let (start, end) = (Timestamp(instant.at.micros() - length + 1), Timestamp(instant.at.micros() + 1));
                let mut interval: Vec<&Item> = items
                    .iter()
                    .filter(|i| i.tenant == *tenant && i.metric == *metric && member_of(i, *scope) == *member)
                    .filter(|i| start <= i.at && i.at < end)
                    .collect();
                interval.sort_by_key(|i| (i.at, i.seq));
                let consumption: i64 = interval.iter().map(|i| i.quantity).sum();
                let limit = self.limit_over(policy, tenant, member, metric, start, end);
                let excess = consumption - limit;
                if worst.as_ref().is_none_or(|w| excess > w.0) {
                    worst = Some((excess, limit, interval));
                }
            }
            let (excess, limit, interval) = worst.expect("a day key has an instant");
            let mut crossers = Vec::new();
            if excess > 0 {
                truths.present.insert(key.clone());
                let mut running = 0;
                for i in interval {
                    running += i.quantity;
                    if i.quantity > 0 && running > limit {
                        crossers.push(i.event_id.clone());
                    }
                }
            }
            truths.amounts.insert(key.clone(), excess.max(0));
            truths.refs.insert(key, crossers);
        }
    }

    fn judge_late_usage(&self, as_of: Timestamp, truths: &mut Truths) {
        let now = self.items(u64::MAX);
        // Months before the first month closed are closed with it (`ledger::covering_close`), at its watermark.
        let mut closes = self.closes.clone();
        if let Some(&(first, _, watermark)) = self.closes.iter().min_by_key(|c| c.0) {
            let months: BTreeSet<(Timestamp, Timestamp)> = now
                .iter()
                .chain(self.items(watermark).iter())
                .map(|i| window_bounds(Window::MONTH, i.at))
                // A month reported late usage of before, all of it since made a level (a gauge metric's), is judged
                // again: what it reported is taken back.
                .chain(self.expected.keys().filter_map(|key| match key {
                    Key::Late { start, end, .. } => Some((*start, *end)),
                    _ => None,
                }))
                .filter(|(start, _)| *start < first)
                .collect();
            closes.extend(months.into_iter().map(|(start, end)| (start, end, watermark)));
        }
        for &(start, end, watermark) in closes.iter().filter(|c| c.1 <= as_of) {
            let then = self.items(watermark);
            let mut late: BTreeMap<(String, String), LateSum> = BTreeMap::new();
            let in_period = |i: &&Item| start <= i.at && i.at < end;
            for i in now.iter().filter(in_period) {
                let entry = late.entry((i.tenant.clone(), i.metric.clone())).or_default();
                entry.0 += i.quantity;
                if !then.iter().any(|t| t.seq == i.seq) {
                    entry.1.push((i.at, i.seq, i.event_id.clone()));
                }
            }
            for t in then.iter().filter(in_period) {
                let entry = late.entry((t.tenant.clone(), t.metric.clone())).or_default();
                entry.0 -= t.quantity;
                if !now.iter().any(|i| i.seq == t.seq) {
                    entry.1.push((t.at, t.seq, t.event_id.clone()));
                }
            }
            for ((tenant, metric), (amount, mut refs)) in late {
                let key = Key::Late { tenant, metric, start, end };
                if amount != 0 {
                    truths.present.insert(key.clone());
                }
                refs.sort();
                truths.amounts.insert(key.clone(), amount);
                truths.refs.insert(key, refs.into_iter().map(|r| r.2).collect());
            }
            for key in self.expected.keys() {
                if let Key::Late { start: s, end: e, .. } = key
                    && (*s, *e) == (start, end)
                {
                    truths.amounts.entry(key.clone()).or_insert(0);
                }
            }
        }
    }

    fn judge_reservations(&self, as_of: Timestamp, truths: &mut Truths) {
        for group in self.reservation_groups(u64::MAX).values() {
            let Judged { reserve, close, refused, expiry, token } = judge(group);
            let judged = match expiry {
                Some(expiry) => expiry < as_of,
                None => group.iter().all(|(_, e)| e.header.occurred_at < as_of),
            };
            if judged && token.is_some() && reserve.is_some() && close.is_none() {
                *truths.leases_expired.entry(group[0].1.header.tenant.clone()).or_default() += 1;
            }
            // A reservation not judged yet reports nothing new, but what earlier runs reported of its events follows
            // the current verdict: a late RESERVE takes back the refusal of the COMMIT it makes valid at once.
            let mut follow = |key: Key, amount: i64, present: bool| {
                if judged || self.reported.contains(&key) {
                    truths.amounts.insert(key.clone(), amount);
                    if present {
                        truths.present.insert(key);
                    }
                }
            };
            for (i, (_, event)) in group.iter().enumerate() {
                let id = event.header.event_id.clone();
                if event.action == ReservationAction::RESERVE {
                    // A RENEW that arrives late but happened before the expiry moves it past `as_of`: what an
                    // earlier run reported expired is taken back until the new expiry passes.
                    let expired = Some(i) == reserve && close.is_none() && expiry.is_some_and(|e| e < as_of);
                    follow(Key::Expiry(id.clone()), if expired { event.amount } else { 0 }, expired);
                }
                follow(Key::Refused(id), if refused[i] { event.amount } else { 0 }, refused[i]);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// The test
// ---------------------------------------------------------------------------------------------------------------

/// Runs `reconcile --as-of as_of` and checks the ledger against the model.
/// An incremental run as of `as_of` (from the last run that recorded its plan, when it can) finds what a full one
/// finds: the same adjustments, alerts and outcome, and the same per-tenant reports. Answers the full run's plan.
fn incremental_is_full(ledger: &Ledger, as_of: Timestamp) -> reconcile::Plan {
    let settings = reconcile::AlertSettings::default();
    // Every tenant touched read apart, however many: the model has two.
    let apart = reconcile::Reading::Since { tenants_apart_percent: 100 };
    let incremental = reconcile::plan_incremental(ledger, as_of, settings, apart, &mut |_| {}).unwrap();
    let full = reconcile::plan_incremental(ledger, as_of, settings, reconcile::Reading::Full, &mut |_| {}).unwrap();
    assert_eq!(full.coverage, reconcile::Coverage::Full { reason: reconcile::FullReason::Asked });
    let how = &incremental.coverage;
    assert_eq!(incremental.adjustments, full.adjustments, "as of {as_of}, read {how:?}: the adjustments");
    assert_eq!(incremental.alerts, full.alerts, "as of {as_of}, read {how:?}: the alerts");
    assert_eq!(incremental.is_clean(), full.is_clean(), "as of {as_of}, read {how:?}: the outcome");
    assert_eq!(incremental.run_id, full.run_id, "as of {as_of}, read {how:?}: the run");
    let (i, f) = (&incremental.counts, &full.counts);
    assert_eq!(i.leases_expired, f.leases_expired, "as of {as_of}, read {how:?}: leases expired");
    assert_eq!(i.gauges_over_limit, f.gauges_over_limit, "as of {as_of}, read {how:?}: gauges over their limit");
    assert_eq!(i.alerts, f.alerts, "as of {as_of}, read {how:?}: the alerts reported");
    assert_eq!(i.adjustments_before, f.adjustments_before, "as of {as_of}, read {how:?}: adjustments before");
    assert_eq!(incremental.after_close, full.after_close, "as of {as_of}, read {how:?}: after a close");
    full
}

fn run_and_check(ledger: &mut Ledger, model: &mut Model, as_of: Timestamp) {
    let before = ledger.adjustments().unwrap();
    let plan = incremental_is_full(ledger, as_of);
    // What a close records of the months closed before: the run's LATE_USAGE adjustments, judged alone.
    let late = reconcile::late_usage(ledger, as_of).unwrap();
    let late_of_run: Vec<&AdjustmentEvent> =
        plan.adjustments.iter().filter(|a| a.kind == AdjustmentKind::LATE_USAGE).collect();
    assert_eq!(late.adjustments.iter().collect::<Vec<_>>(), late_of_run, "as of {as_of}: late usage judged alone");
    assert!(late.alerts.is_empty(), "a close's judgement of late usage alerts nothing");
    let report = reconcile::apply(ledger, &plan).unwrap();
    reconcile::remember(ledger, &plan, reconcile::AlertSettings::default()).unwrap();
    // The run's alerts are entries too; the model judges adjustments, and that none is written twice.
    model.watermark += (plan.adjustments.len() + plan.alerts.len()) as u64;
    assert_eq!(report.watermark, model.watermark, "adjustments and alerts are entries of the ledger");

    let truths = model.truths(as_of);
    assert_eq!(plan.counts.leases_expired, truths.leases_expired, "as of {as_of}: leases expired unreleased");
    assert_eq!(plan.counts.gauges_over_limit, model.gauges_over_limit(as_of), "as of {as_of}: gauges over their limit");
    for (key, amount) in &truths.amounts {
        model.expected.insert(key.clone(), *amount);
    }
    let adjustments = ledger.adjustments().unwrap();
    assert_eq!(adjustments.len(), before.len() + plan.adjustments.len());
    assert_eq!(&adjustments[before.len()..], &plan.adjustments[..], "the ledger holds the plan as planned");
    let keys = keys_of(&adjustments);
    let mut sums: BTreeMap<Key, (i64, u64)> = BTreeMap::new();
    for (key, a) in keys.iter().zip(&adjustments) {
        let sum = sums.entry(key.clone()).or_default();
        assert!(a.amount != 0 || sum.1 == 0, "only the first adjustment of a concern has amount 0: {key:?}");
        sum.0 += a.amount;
        sum.1 += 1;
    }

    // Each concern's adjustments add up to the model's truth (concerns not judged now keep their last truth).
    let all: BTreeSet<&Key> = sums.keys().chain(model.expected.keys()).collect();
    for key in all {
        let recorded = sums.get(key).map_or(0, |s| s.0);
        let expected = model.expected.get(key).copied().unwrap_or(0);
        let of_key: Vec<(i64, &str)> = keys
            .iter()
            .zip(&adjustments)
            .filter(|(k, _)| *k == key)
            .map(|(_, a)| (a.amount, a.run_id.as_str()))
            .collect();
        assert_eq!(recorded, expected, "as of {as_of}: sum of the adjustments of {key:?}: {of_key:?}");
    }
    for key in &truths.present {
        assert!(sums.contains_key(key), "as of {as_of}: discrepancy {key:?} never reported");
    }
    // A level is no consumption: whatever a gauge metric's windows or late usage held before a version made it a
    // gauge metric is taken back, and nothing new is reported of it.
    for (key, (sum, _)) in &sums {
        if let Key::Window { tenant, metric, end, .. } | Key::Late { tenant, metric, end, .. } = key
            && *end <= as_of
            && model.is_gauge_metric(tenant, metric)
        {
            assert_eq!(*sum, 0, "as of {as_of}: a gauge metric's readings are not consumption: {key:?}");
        }
    }
    model.reported = sums.keys().cloned().collect();

    // What this run wrote names the right events.
    for (key, a) in keys[before.len()..].iter().zip(&plan.adjustments) {
        if matches!(key, Key::Window { .. } | Key::Late { .. }) {
            let refs = truths.refs.get(key).cloned().unwrap_or_default();
            assert_eq!(a.refs, refs, "as of {as_of}: refs of {key:?}");
        }
    }

    let rerun = incremental_is_full(ledger, as_of);
    assert!(rerun.is_clean(), "a rerun with the same --as-of {as_of} writes nothing: {:#?}", rerun.adjustments);
    assert!(rerun.alerts.is_empty(), "nor an alert again: {:#?}", rerun.alerts);
    // And knows it without reading any tenant again: the run's own adjustments and alerts touch none.
    let settings = reconcile::AlertSettings::default();
    let rerun =
        reconcile::plan_incremental(ledger, as_of, settings, reconcile::Reading::default(), &mut |_| {}).unwrap();
    let nothing_new = reconcile::Coverage::Incremental { since: plan.watermark, tenants: Vec::new() };
    assert_eq!(rerun.coverage, nothing_new, "a rerun with the same --as-of {as_of} reads nothing again");
}

fn check(history: &History) {
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = Ledger::open(dir.path().join("ledger.db")).unwrap();
    let mut model = Model::default();
    let mut last_run = None;
    for (batch, step) in history.batches.iter().zip(&history.steps) {
        if !batch.is_empty() {
            let events = batch
                .iter()
                .map(|event| Incoming {
                    event: event.clone(),
                    origin: Origin::Local { name: "model".into() },
                    raw: None,
                })
                .collect();
            let report = ledger.append(&Batch { events, ..Batch::default() }).unwrap();
            assert_eq!(report.outcomes, model.append(batch), "deduplication as the model sees it");
        }
        if let Some(period) = step.close {
            let close = ledger.close_period(PERIODS[period].parse().unwrap()).unwrap();
            if !model.closes.iter().any(|c| c.0 == close.period.start()) {
                assert_eq!(close.watermark, model.watermark);
                model.closes.push((close.period.start(), close.period.end(), close.watermark));
            }
        }
        // Whatever the batch and close brought, a run as of the last run's instant finds what a full one finds.
        if let Some(as_of) = last_run {
            incremental_is_full(&ledger, at(AS_OFS[as_of]));
        }
        if let Some(as_of) = step.run {
            run_and_check(&mut ledger, &mut model, at(AS_OFS[as_of]));
            last_run = Some(as_of);
        }
    }
    run_and_check(&mut ledger, &mut model, at(FINAL_AS_OF));
}

proptest! {
    // The default persistence looks for lib.rs beside tests/ and finds none; this keeps failures where proptest
    // keeps them for src/ (`reconcile/proptest-regressions/`), relative to the package root cargo runs tests in.
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct("proptest-regressions/model.txt"))),
        ..ProptestConfig::default()
    })]

    // Proves plan + apply agree with the naive model of contract §5 for every concern after every run.
    #[test]
    fn reconcile_agrees_with_the_model(history in history()) {
        check(&history);
    }
}
