use std::collections::BTreeMap;

use ledger::{Batch, Incoming, Ledger, Origin};
use proptest::prelude::*;
use rules::window;
use schemas::*;

use super::*;
use crate::load::load;
use crate::state::Whose;

const TENANTS: [&str; 2] = ["org-1", "org-2"];
const SUBJECTS: [&str; 2] = ["alice", "bob"];
const PROJECTS: [&str; 2] = ["p-1", "p-2"];
const METRICS: [&str; 2] = ["tokens", "storage"];
const MINUTE_MICROS: i64 = 60_000_000;
const DAY_MINUTES: i64 = 24 * 60;

/// One step of a generated history: an event appended (its event time some minutes before now), a snapshot taken,
/// or the clock moved on.
#[derive(Debug, Clone)]
enum Op {
    Usage { tenant: usize, subject: Option<usize>, project: Option<usize>, metric: usize, ago: i64, quantity: i64 },
    Reserve { id: u8, tenant: usize, metric: usize, ago: i64, amount: i64, ttl_minutes: i64, lease: Option<i64> },
    Close { id: u8, tenant: usize, metric: usize, commit: bool, ago: i64, amount: i64 },
    Policy { kind: u8 },
    Grant { tenant: usize, metric: usize, amount: i64 },
    Alert { tenant: usize, ago: i64 },
    Snapshot,
    Advance { minutes: i64 },
}

/// Minutes before now: mostly the last hours, some the last days, a few beyond the month and a day a start folds.
fn ago() -> impl Strategy<Value = i64> {
    prop_oneof![6 => 0..180i64, 3 => 0..3 * DAY_MINUTES, 1 => 0..40 * DAY_MINUTES]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..2usize, proptest::option::of(0..2usize), proptest::option::of(0..2usize), 0..2usize, ago(), 1..100i64)
            .prop_map(|(tenant, subject, project, metric, ago, quantity)| Op::Usage {
                tenant, subject, project, metric, ago, quantity
            }),
        4 => (0..6u8, 0..2usize, 0..2usize, ago(), 0..50i64, 0..3 * DAY_MINUTES, proptest::option::of(1..20i64))
            .prop_map(|(id, tenant, metric, ago, amount, ttl_minutes, lease)| Op::Reserve {
                id, tenant, metric, ago, amount, ttl_minutes, lease
            }),
        3 => (0..6u8, 0..2usize, 0..2usize, any::<bool>(), ago(), 0..60i64)
            .prop_map(|(id, tenant, metric, commit, ago, amount)| Op::Close { id, tenant, metric, commit, ago, amount }),
        2 => (0..8u8).prop_map(|kind| Op::Policy { kind }),
        1 => (0..2usize, 0..2usize, 1..100i64).prop_map(|(tenant, metric, amount)| Op::Grant { tenant, metric, amount }),
        1 => (0..2usize, ago()).prop_map(|(tenant, ago)| Op::Alert { tenant, ago }),
        2 => Just(Op::Snapshot),
        2 => (0..3 * DAY_MINUTES).prop_map(|minutes| Op::Advance { minutes }),
    ]
}

fn header(n: u64, tenant: &str, metric: &str, at: Timestamp) -> Header {
    Header {
        event_id: format!("e-{n}"),
        occurred_at: at,
        tenant: tenant.into(),
        subject: None,
        metric: metric.into(),
        source: "test".into(),
        api_key: None,
        project: None,
    }
}

/// The policy of `kind`: each asks counted something the others do not (a zone, a gauge, a scope, a timeline).
fn policy(n: u64, kind: u8, at: Timestamp) -> PolicyEvent {
    let mut p = PolicyEvent::new(
        header(n, TENANTS[usize::from(kind) % 2], METRICS[0], at),
        format!("policy-{n}"),
        1_000,
        Window::DAY,
        Enforcement::HARD,
        at,
    );
    match kind {
        1 => p.time_zone = Some("America/New_York".into()),
        2 => (p.time_zone, p.window) = (Some("Asia/Kolkata".into()), Window::MONTH),
        3 => (p.header.metric, p.violation) = (METRICS[1].into(), Some(Violation::NO_INSERTS)),
        4 => p.scope = Scope::PROJECT,
        5 => p.scope = Scope::API_KEY,
        6 => (p.window, p.window_seconds) = (Window::ROLLING, Some(3_600)),
        7 => (p.window, p.window_seconds) = (Window::ROLLING, Some(86_400)),
        _ => {}
    }
    p
}

/// The event an op appends, numbered `n`, at `now`.
fn event_of(op: &Op, n: u64, now: Timestamp) -> Option<Event> {
    let before = |minutes: i64| Timestamp(now.micros() - minutes * MINUTE_MICROS);
    Some(match *op {
        Op::Usage { tenant, subject, project, metric, ago, quantity } => Event::Usage(UsageEvent {
            header: Header {
                subject: subject.map(|s| SUBJECTS[s].to_string()),
                project: project.map(|p| PROJECTS[p].to_string()),
                ..header(n, TENANTS[tenant], METRICS[metric], before(ago))
            },
            quantity,
            request_id: None,
            attributes: Default::default(),
        }),
        Op::Reserve { id, tenant, metric, ago, amount, ttl_minutes, lease } => Event::Reservation(ReservationEvent {
            header: header(n, TENANTS[tenant], METRICS[metric], before(ago)),
            reservation_id: format!("r-{id}"),
            action: ReservationAction::RESERVE,
            // A lease holds one slot.
            amount: if lease.is_some() { 1 } else { amount },
            expires_at: Some(Timestamp(before(ago).micros() + ttl_minutes * MINUTE_MICROS)),
            fencing_token: lease,
        }),
        Op::Close { id, tenant, metric, commit, ago, amount } => Event::Reservation(ReservationEvent {
            header: header(n, TENANTS[tenant], METRICS[metric], before(ago)),
            reservation_id: format!("r-{id}"),
            action: if commit { ReservationAction::COMMIT } else { ReservationAction::RELEASE },
            amount: if commit { amount } else { 0 },
            expires_at: None,
            fencing_token: None,
        }),
        Op::Policy { kind } => Event::Policy(policy(n, kind, before(DAY_MINUTES))),
        Op::Grant { tenant, metric, amount } => Event::Grant(GrantEvent {
            header: header(n, TENANTS[tenant], METRICS[metric], now),
            grant_id: format!("grant-{n}"),
            amount,
            valid_from: before(DAY_MINUTES),
            valid_until: Timestamp(now.micros() + 30 * DAY_MINUTES * MINUTE_MICROS),
            reason: "a test".into(),
            actor: None,
        }),
        Op::Alert { tenant, ago } => {
            let (start, end) = window::bounds(Window::DAY, before(ago));
            Event::Alert(AlertEvent {
                header: header(n, TENANTS[tenant], METRICS[0], before(ago)),
                alert_id: format!("e-{n}"),
                kind: AlertKind::THRESHOLD,
                policy_id: Some("policy-0".into()),
                policy_version: Some(1),
                scope: Some(Scope::TENANT),
                window_start: Some(start),
                window_end: Some(end),
                threshold_percent: 80,
                limit: Some(100),
                observed: 80,
                request_id: None,
            })
        }
        Op::Snapshot | Op::Advance { .. } => return None,
    })
}

/// Everything a decision or a quota read can ask of a state at `now`: the consumption of every window still to
/// come to an end, what is held and leased, the rolling sums ending now, the holds, the fencing tokens, the alerts
/// written, the gauge levels, the policies and grants, what the counters keep and the watermark.
fn observe(state: &State, now: Timestamp, alert_ids: &[String]) -> BTreeMap<String, String> {
    let mut seen = BTreeMap::new();
    let mut whose = vec![Whose::Tenant, Whose::Subject(None), Whose::Project(None), Whose::ApiKey(None)];
    whose.extend(SUBJECTS.iter().map(|s| Whose::Subject(Some(s))));
    whose.extend(PROJECTS.iter().map(|p| Whose::Project(Some(p))));
    for (tenant, metric) in TENANTS.iter().flat_map(|t| METRICS.iter().map(move |m| (*t, *m))) {
        for whose in &whose {
            let Some(counters) = state.counters(tenant, *whose, metric) else { continue };
            let mut windows: Vec<_> = counters.consumed.iter().filter(|((_, end), _)| *end > now.micros()).collect();
            windows.sort();
            let leases: Vec<_> = counters.leases.range(now.micros()..).collect();
            let rolling: Vec<i64> = [3_600, 86_400]
                .iter()
                .map(|s| counters.consumed_between(Timestamp(now.micros() - s * 1_000_000), now))
                .collect();
            let key = format!("counters {tenant} {whose:?} {metric}");
            seen.insert(key, format!("{windows:?} held {} leases {leases:?} rolling {rolling:?}", counters.held));
        }
        seen.insert(format!("token {tenant} {metric}"), state.fencing_token(tenant, metric).to_string());
        seen.insert(format!("level {tenant} {metric}"), format!("{:?}", state.level(tenant, metric)));
        let grants = state.grants.get(&(tenant.to_string(), metric.to_string()));
        let grants: Vec<&str> = grants.iter().flat_map(|g| g.iter().map(|g| g.grant_id.as_str())).collect();
        seen.insert(format!("grants {tenant} {metric}"), format!("{grants:?}"));
    }
    let mut holds: Vec<String> = state.holds().map(|h| format!("{h:?}")).collect();
    holds.sort();
    seen.insert("holds".into(), format!("{holds:?}"));
    let alerted: Vec<bool> = alert_ids.iter().map(|id| state.is_alerted(id)).collect();
    seen.insert("alerted".into(), format!("{alerted:?}"));
    seen.insert("policies".into(), format!("{:?}", state.policies.policies()));
    seen.insert("counting".into(), format!("{:?}", state.counting()));
    seen.insert("watermark".into(), state.watermark.to_string());
    seen
}

/// Plays `ops` into a fresh ledger, taking snapshots where they say; the ledger, the instant it ends at, the ids of
/// the alerts whose window has not ended, and how many snapshots were taken.
fn play(dir: &tempfile::TempDir, ops: &[Op]) -> (Ledger, Timestamp, Vec<String>, usize) {
    let mut ledger = Ledger::open(dir.path().join("ledger.db")).unwrap();
    let mut now = Timestamp::parse_rfc3339("2026-11-20T10:00:00Z").unwrap();
    let (mut alert_ids, mut snapshots) = (Vec::new(), 0);
    for (n, op) in ops.iter().enumerate() {
        match op {
            Op::Snapshot => {
                take_in(&mut ledger, now).unwrap();
                snapshots += 1;
            }
            Op::Advance { minutes } => now = Timestamp(now.micros() + minutes * MINUTE_MICROS),
            _ => {
                let event = event_of(op, n as u64, now).expect("an event");
                if let Event::Alert(a) = &event {
                    alert_ids.push(a.alert_id.clone());
                }
                let incoming = Incoming { event, origin: Origin::Local { name: "test".into() }, raw: None };
                ledger.append(&Batch { events: vec![incoming], ..Batch::default() }).unwrap();
            }
        }
    }
    (ledger, now, alert_ids, snapshots)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    // Proves that a start from the last snapshot and the entries after it answers what a fold of the whole ledger
    // answers, whatever the entries, policies and snapshot points in between (contract §6).
    #[test]
    fn a_snapshot_and_its_tail_fold_to_what_the_ledger_folds_to(ops in proptest::collection::vec(op(), 1..60)) {
        let dir = tempfile::tempdir().unwrap();
        let (ledger, now, alert_ids, _) = play(&dir, &ops);
        let from_snapshot = load(&ledger, now, true).unwrap();
        let folded = load(&ledger, now, false).unwrap();
        prop_assert_eq!(observe(&from_snapshot, now, &alert_ids), observe(&folded, now, &alert_ids));
    }
}

/// A ledger of some usage and a reservation with a snapshot taken, and the instant it was taken at.
fn snapshotted() -> (tempfile::TempDir, Ledger, Timestamp) {
    let dir = tempfile::tempdir().unwrap();
    let ops = [
        Op::Policy { kind: 1 },
        Op::Usage { tenant: 0, subject: Some(0), project: None, metric: 0, ago: 5, quantity: 7 },
        Op::Reserve { id: 1, tenant: 0, metric: 0, ago: 1, amount: 3, ttl_minutes: 60, lease: None },
        Op::Snapshot,
        Op::Usage { tenant: 0, subject: None, project: None, metric: 0, ago: 1, quantity: 2 },
    ];
    let (ledger, now, _, _) = play(&dir, &ops);
    (dir, ledger, now)
}

// Proves that a valid snapshot is used, holding the state up to its watermark.
#[test]
fn a_valid_snapshot_is_restored() {
    let (_dir, ledger, now) = snapshotted();
    let needed = load(&ledger, now, false).unwrap().counting();
    let restored = restore(&ledger, &needed, now).unwrap().expect("the snapshot is valid");
    assert_eq!(restored.watermark, 3);
    assert_eq!(restored.holds().count(), 1);
}

// Proves that a snapshot taken after now (a clock gone back), one whose policies are not the ledger's now, and one
// whose body was changed are each refused, saying why.
#[test]
fn an_invalid_snapshot_is_refused_and_says_why() {
    let (_dir, mut ledger, now) = snapshotted();
    let needed = load(&ledger, now, false).unwrap().counting();
    let earlier = Timestamp(now.micros() - MINUTE_MICROS);
    assert!(matches!(restore(&ledger, &needed, earlier).unwrap(), Err(Unused::Future { .. })));
    let more = Counting { rolling_micros: 1, ..needed.clone() };
    assert!(matches!(restore(&ledger, &more, now).unwrap(), Err(Unused::Policies { .. })));
    let mut snapshot = ledger.hook_snapshot().unwrap().unwrap();
    let last = snapshot.body.len() - 1;
    snapshot.body[last] ^= 1;
    ledger.record_hook_snapshot(&snapshot).unwrap();
    assert!(matches!(restore(&ledger, &needed, now).unwrap(), Err(Unused::Checksum)));
    snapshot.format_version += 1;
    ledger.record_hook_snapshot(&snapshot).unwrap();
    assert!(matches!(restore(&ledger, &needed, now).unwrap(), Err(Unused::Format { .. })));
}
