use std::collections::BTreeMap;

use proptest::prelude::*;
use rules::reservation;
use rules::window;

use super::*;

const TENANTS: [&str; 2] = ["org-1", "org-2"];
const SUBJECTS: [&str; 2] = ["alice", "bob"];
const METRICS: [&str; 2] = ["tokens", "requests"];

#[derive(Debug, Clone)]
enum Op {
    Reserve { id: u8, subject: Option<usize>, metric: usize, amount: i64, ttl_s: i64 },
    Close { id: u8, commit: bool, amount: i64 },
    Advance { seconds: i64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..8u8, proptest::option::of(0..2usize), 0..2usize, 0..100i64, 1..1_800i64)
            .prop_map(|(id, subject, metric, amount, ttl_s)| Op::Reserve { id, subject, metric, amount, ttl_s }),
        (0..8u8, any::<bool>(), 0..200i64).prop_map(|(id, commit, amount)| Op::Close { id, commit, amount }),
        (0..900i64).prop_map(|seconds| Op::Advance { seconds }),
    ]
}

fn header(tenant: &str, subject: Option<&str>, metric: &str, at: Timestamp, event_id: String) -> Header {
    Header {
        event_id,
        occurred_at: at,
        tenant: tenant.into(),
        subject: subject.map(String::from),
        metric: metric.into(),
        source: "test".into(),
        api_key: None,
        project: None,
    }
}

/// The model: open reservations as a plain map, and committed amounts per (tenant, subject, metric, day).
#[derive(Default)]
struct Model {
    holds: BTreeMap<String, Hold>,
    /// Expired with no close: a late close dated before the expiry still closes them.
    expired: BTreeMap<String, Hold>,
    /// Closed: a RESERVE of them again is a refused transition.
    closed: std::collections::BTreeSet<String>,
    committed: BTreeMap<(String, Option<String>, String, i64), i64>,
}

impl Model {
    fn held(&self, tenant: &str, whose: Whose<'_>, metric: &str, now: Timestamp) -> i128 {
        let matches = |h: &Hold| h.who.tenant == tenant && h.metric == metric && h.expires_at >= now;
        let of_subject = |h: &Hold| match whose {
            Whose::Tenant => true,
            Whose::Subject(subject) => h.who.subject.as_deref() == subject,
            Whose::Project(_) | Whose::ApiKey(_) => unreachable!("the model has no project or API key"),
        };
        self.holds.values().filter(|h| matches(h) && of_subject(h)).map(|h| i128::from(h.amount)).sum()
    }
    fn consumed(&self, tenant: &str, whose: Whose<'_>, metric: &str, day: i64) -> i64 {
        let key = |s: Option<&str>| (tenant.to_string(), s.map(String::from), metric.to_string(), day);
        match whose {
            Whose::Subject(subject) => self.committed.get(&key(subject)).copied().unwrap_or(0),
            Whose::Tenant => SUBJECTS
                .iter()
                .map(|s| Some(*s))
                .chain([None])
                .map(|s| self.committed.get(&key(s)).copied().unwrap_or(0))
                .sum(),
            Whose::Project(_) | Whose::ApiKey(_) => unreachable!("the model has no project or API key"),
        }
    }
}

// A lease counts among the leases of its tenant and subject, never in what reservations hold; a
// RENEW moves its expiry so it outlives its first; a stale holder's RELEASE frees nothing; the greatest token
// granted is kept after the lease is gone.
#[test]
fn leases_count_apart_and_live_as_long_as_their_renewals() {
    let at = |text: &str| Timestamp::parse_rfc3339(text).unwrap();
    let lease = |n: u64, action: ReservationAction, token: i64, time: &str, expires_at: Option<&str>| {
        let header = header("org-1", Some("alice"), "jobs", at(time), format!("e-{n}"));
        let amount = i64::from(action == ReservationAction::RESERVE);
        let expires_at = expires_at.map(at);
        let event = ReservationEvent {
            header,
            reservation_id: "lease-1".into(),
            action,
            amount,
            expires_at,
            fencing_token: Some(token),
        };
        (n, Event::Reservation(event))
    };
    let mut state = State::default();
    let now = at("2026-11-10T10:00:00Z");
    let (seq, acquire) = lease(1, ReservationAction::RESERVE, 7, "2026-11-10T10:00:00Z", Some("2026-11-10T10:01:00Z"));
    state.fold(seq, &acquire, now);
    let leases = |state: &State, whose| state.counters("org-1", whose, "jobs").map_or(0, Counters::active_leases);
    assert_eq!((leases(&state, Whose::Tenant), leases(&state, Whose::Subject(Some("alice")))), (1, 1));
    assert_eq!(state.held("org-1", Whose::Tenant, "jobs", now), 0, "a lease holds no amount");
    assert_eq!(state.fencing_token("org-1", "jobs"), 7);
    let (seq, renew) = lease(2, ReservationAction::RENEW, 7, "2026-11-10T10:00:50Z", Some("2026-11-10T10:05:00Z"));
    state.fold(seq, &renew, now);
    let first = state.counters("org-1", Whose::Tenant, "jobs").and_then(Counters::first_lease_expiry);
    assert_eq!(first, Some(at("2026-11-10T10:05:00Z")));
    state.expire(at("2026-11-10T10:02:00Z"));
    assert_eq!(leases(&state, Whose::Tenant), 1, "renewed past its first expiry");
    let (seq, stale) = lease(3, ReservationAction::RELEASE, 6, "2026-11-10T10:03:00Z", None);
    state.fold(seq, &stale, now);
    assert_eq!(leases(&state, Whose::Tenant), 1, "a stale token frees nothing");
    state.expire(at("2026-11-10T10:06:00Z"));
    assert_eq!(leases(&state, Whose::Tenant), 0, "expired without any call");
    state.check_bookkeeping();
    assert_eq!(state.fencing_token("org-1", "jobs"), 7);
}

// Proves that what other writers record is folded whatever it sums to (consumption saturating at i64::MAX, holds
// exact), where it panicked, and that `room` refuses a request that would take either sum past i64.
#[test]
fn sums_past_i64_are_folded_and_refused_to_new_requests() {
    let at = |text: &str| Timestamp::parse_rfc3339(text).unwrap();
    let now = at("2026-11-10T00:00:00Z");
    let largest = schemas::validate::AMOUNT_MAX;
    let mut state = State::default();
    for n in 0..1_025u64 {
        let usage = UsageEvent {
            header: header("org-1", Some("alice"), "tokens", now, format!("u{n}")),
            quantity: largest,
            request_id: None,
            attributes: Default::default(),
        };
        state.fold(2 * n + 1, &Event::Usage(usage), now);
        let reserve = ReservationEvent {
            header: header("org-1", None, "tokens", now, format!("r{n}")),
            reservation_id: format!("r{n}"),
            action: ReservationAction::RESERVE,
            amount: largest,
            expires_at: Some(at("2026-11-10T01:00:00Z")),
            fencing_token: None,
        };
        state.fold(2 * n + 2, &Event::Reservation(reserve), now);
    }
    assert_eq!(
        state.consumed("org-1", Whose::Subject(Some("alice")), "tokens", window::bounds(Window::DAY, now)),
        i64::MAX
    );
    assert_eq!(state.held("org-1", Whose::Tenant, "tokens", now), 1_025 * i128::from(largest));
    let alice = Named { subject: Some("alice"), ..Named::default() };
    let consumption = state.room("org-1", alice, "tokens", Adding::Consumption(now), 1).unwrap_err();
    assert!(consumption.what.contains("the consumption of \"tokens\" by tenant \"org-1\""), "{consumption:?}");
    let held = state.room("org-1", Named::default(), "tokens", Adding::Held, 0).unwrap_err();
    assert_eq!(held.now, 1_025 * i128::from(largest));
    assert!(state.room("org-1", alice, "requests", Adding::Consumption(now), largest).is_ok());
    assert_eq!(state.counters_of("org-1"), 2, "the metric and alice");
    state.expire(at("2026-11-10T02:00:00Z"));
    assert_eq!(state.held("org-1", Whose::Tenant, "tokens", at("2026-11-10T02:00:00Z")), 0, "every hold expired");
    state.check_bookkeeping();
}

// Proves the counters keep every zone's windows: 23:30 and 00:30 the next day in New York share a UTC day but
// not a New York one; and a policy naming a zone not counted says the state must be rebuilt.
#[test]
fn consumption_is_counted_in_each_zones_windows() {
    let at = |text: &str| Timestamp::parse_rfc3339(text).unwrap();
    let new_york: Tz = "America/New_York".parse().unwrap();
    let mut state = State::with_zones([new_york, Tz::UTC, new_york], Vec::<String>::new());
    assert_eq!(state.zones(), [Tz::UTC, new_york]);
    for (seq, t) in [(1, "2026-11-17T04:30:00Z"), (2, "2026-11-17T05:30:00Z")] {
        let usage = UsageEvent {
            header: header("org-1", None, "tokens", at(t), format!("u{seq}")),
            quantity: 10,
            request_id: None,
            attributes: Default::default(),
        };
        state.fold(seq, &Event::Usage(usage), at(t));
    }
    let day =
        |zone, t: &str| state.consumed("org-1", Whose::Tenant, "tokens", window::bounds_in(Window::DAY, zone, at(t)));
    assert_eq!(day(Tz::UTC, "2026-11-17T12:00:00Z"), 20);
    assert_eq!(day(new_york, "2026-11-17T04:30:00Z"), 10);
    assert_eq!(day(new_york, "2026-11-17T05:30:00Z"), 10);
    assert!(!state.is_missing_zones());
    let policy = |id: &str, zone: &str| {
        Event::Policy(PolicyEvent {
            time_zone: Some(zone.into()),
            ..PolicyEvent::new(
                header("org-1", None, "tokens", at("2026-11-17T06:00:00Z"), id.into()),
                id,
                100,
                Window::DAY,
                Enforcement::HARD,
                at("2026-11-01T00:00:00Z"),
            )
        })
    };
    state.fold(3, &policy("daily-ny", "America/New_York"), at("2026-11-17T06:00:00Z"));
    assert!(!state.is_missing_zones(), "New York's windows were counted from the start");
    state.fold(4, &policy("daily-in", "Asia/Kolkata"), at("2026-11-17T06:00:00Z"));
    assert!(state.is_missing_zones(), "Kolkata's days hold none of the usage folded before");
}

// Proves that other enforcers' reservations kept for a late close are dropped once the month of their expiry
// is no longer counted, and only then.
#[test]
fn expired_reservations_are_kept_for_their_month_only() {
    let at = |text: &str| Timestamp::parse_rfc3339(text).unwrap();
    let mut state = State::default();
    let reserve = Event::Reservation(ReservationEvent {
        header: header("org-1", None, "tokens", at("2026-10-10T00:00:00Z"), "e1".into()),
        reservation_id: "r1".into(),
        action: ReservationAction::RESERVE,
        amount: 5,
        expires_at: Some(at("2026-10-10T01:00:00Z")),
        fencing_token: None,
    });
    state.fold(1, &reserve, at("2026-10-20T00:00:00Z"));
    assert_eq!((state.holds().count(), state.reservations.kept().0), (0, 1), "expired when folded: kept");
    state.prune(at("2026-11-01T12:00:00Z"));
    assert_eq!(state.reservations.kept().0, 1, "October's windows are counted until a day after its end");
    state.prune(at("2026-11-02T12:00:00Z"));
    assert!(state.reservations.kept() == (0, 0));
}

// Proves that the hook's own reservations are forgotten once they hold nothing (nobody else closes them),
// and that an own event the ledger did not record is taken back out of the counters.
#[test]
fn own_reservations_are_forgotten_once_closed_and_unrecorded_ones_taken_back() {
    let at = |text: &str| Timestamp::parse_rfc3339(text).unwrap();
    let now = at("2026-11-10T00:00:00Z");
    let mut state = State::default();
    let event = |action, amount, id: &str| ReservationEvent {
        header: header("org-1", None, "tokens", now, id.into()),
        reservation_id: "r1".into(),
        action,
        amount,
        expires_at: (action == ReservationAction::RESERVE).then(|| at("2026-11-10T01:00:00Z")),
        fencing_token: None,
    };
    state.fold_own(PROVISIONAL_SEQ, &event(ReservationAction::RESERVE, 5, "e1"), now);
    let key = ("org-1".to_string(), "r1".to_string());
    state.number_own(&key, PROVISIONAL_SEQ, Some(1), now);
    assert_eq!(state.held("org-1", Whose::Tenant, "tokens", now), 5);
    state.fold_own(PROVISIONAL_SEQ, &event(ReservationAction::COMMIT, 7, "e2"), now);
    assert_eq!(state.held("org-1", Whose::Tenant, "tokens", now), 0);
    assert_eq!(state.consumed("org-1", Whose::Tenant, "tokens", window::bounds(Window::DAY, now)), 7);
    state.number_own(&key, PROVISIONAL_SEQ, None, now);
    assert_eq!(state.held("org-1", Whose::Tenant, "tokens", now), 5, "the COMMIT not recorded: held again");
    assert_eq!(state.consumed("org-1", Whose::Tenant, "tokens", window::bounds(Window::DAY, now)), 0);
    state.fold_own(PROVISIONAL_SEQ, &event(ReservationAction::RELEASE, 0, "e3"), now);
    state.number_own(&key, PROVISIONAL_SEQ, Some(2), now);
    assert_eq!(state.held("org-1", Whose::Tenant, "tokens", now), 0);
    assert!(state.reservations.kept() == (0, 0), "closed, and nobody else closes it");
}

/// A reservation event of a generated history: (reservation_id, tenant, action, minutes after the base,
/// amount, TTL in minutes, whether its subject differs from its reservation's).
type Generated = (u8, usize, ReservationAction, i64, i64, i64, bool);

fn generated_event() -> impl Strategy<Value = Generated> {
    let action = prop_oneof![
        Just(ReservationAction::RESERVE),
        Just(ReservationAction::COMMIT),
        Just(ReservationAction::RELEASE)
    ];
    (0..6u8, 0..2usize, action, 0..180i64, 0..50i64, 0..90i64, proptest::bool::weighted(0.2))
}

proptest! {
    // Proves that the running held totals (and consumption) equal a recomputation from the open reservations
    // after any sequence of reserve, commit, release and expiry, folded as the writer folds the ledger.
    #[test]
    fn held_totals_equal_a_recomputation_from_the_holds(ops in proptest::collection::vec(op(), 1..80)) {
        let mut state = State::default();
        let mut model = Model::default();
        let mut now = Timestamp::parse_rfc3339("2026-11-01T23:00:00Z").unwrap();
        let mut seq = 0;
        for op in ops {
            match op {
                Op::Reserve { id, subject, metric, amount, ttl_s } => {
                    // An id stays with one tenant here (the model keys reservations by id alone); another
                    // tenant's id is another reservation, which the property below covers.
                    let tenant = usize::from(id) % 2;
                    let (tenant, subject, metric) = (TENANTS[tenant], subject.map(|s| SUBJECTS[s]), METRICS[metric]);
                    let reservation_id = format!("r{id}");
                    let expires_at = Timestamp(now.micros() + ttl_s * 1_000_000);
                    seq += 1;
                    let event = Event::Reservation(ReservationEvent {
                        header: header(tenant, subject, metric, now, format!("e{seq}")),
                        reservation_id: reservation_id.clone(),
                        action: ReservationAction::RESERVE,
                        amount,
                        expires_at: Some(expires_at),
                        fencing_token: None,
                    });
                    state.fold(seq, &event, now);
                    // A reservation that expired or closed keeps its id: a RESERVE of it again opens nothing.
                    if model.expired.contains_key(&reservation_id) || model.closed.contains(&reservation_id) {
                        continue;
                    }
                    model.holds.entry(reservation_id).or_insert_with(|| Hold {
                        who: Who { subject: subject.map(String::from), ..Who::tenant(tenant) },
                        metric: metric.into(),
                        amount,
                        expires_at,
                        reserved_at: now,
                        fencing_token: None,
                    });
                }
                Op::Close { id, commit, amount } => {
                    let reservation_id = format!("r{id}");
                    // An open reservation closed now, or an expired one by a close that arrives late, dated at
                    // its expiry (contract §5: valid by event time).
                    let (hold, at) = match model.holds.remove(&reservation_id) {
                        Some(hold) => (hold, now),
                        None => match model.expired.remove(&reservation_id) {
                            Some(hold) => {
                                let at = hold.expires_at;
                                (hold, at)
                            }
                            None => continue,
                        },
                    };
                    model.closed.insert(reservation_id.clone());
                    let action = if commit { ReservationAction::COMMIT } else { ReservationAction::RELEASE };
                    let amount = if commit { amount } else { 0 };
                    seq += 1;
                    let event = Event::Reservation(ReservationEvent {
                        header: header(&hold.who.tenant, hold.who.subject.as_deref(), &hold.metric, at, format!("e{seq}")),
                        reservation_id,
                        action,
                        amount,
                        expires_at: None,
                        fencing_token: None,
                    });
                    state.fold(seq, &event, now);
                    let day = window::bounds(Window::DAY, at).0.micros();
                    *model.committed.entry((hold.who.tenant, hold.who.subject, hold.metric, day)).or_default() += amount;
                }
                Op::Advance { seconds } => {
                    now = Timestamp(now.micros() + seconds * 1_000_000);
                    state.expire(now);
                    state.prune(now);
                    let expired: Vec<String> =
                        model.holds.iter().filter(|(_, h)| h.expires_at < now).map(|(id, _)| id.clone()).collect();
                    for id in expired {
                        let hold = model.holds.remove(&id).expect("listed");
                        model.expired.insert(id, hold);
                    }
                }
            }
            state.check_bookkeeping();
            prop_assert_eq!(state.holds().count(), model.holds.len());
            let day = window::bounds(Window::DAY, now).0;
            for tenant in TENANTS {
                for metric in METRICS {
                    let subjects = SUBJECTS.iter().map(|s| Whose::Subject(Some(*s)));
                    for whose in subjects.chain([Whose::Subject(None), Whose::Tenant]) {
                        prop_assert_eq!(
                            state.held(tenant, whose, metric, now),
                            model.held(tenant, whose, metric, now),
                            "held by {} {:?} {}", tenant, whose, metric
                        );
                        prop_assert_eq!(
                            state.consumed(tenant, whose, metric, window::bounds(Window::DAY, day)),
                            model.consumed(tenant, whose, metric, day.micros()),
                            "consumed by {} {:?} {}", tenant, whose, metric
                        );
                    }
                }
            }
        }
    }

    // Proves that the hook's fold of other enforcers' reservation events, dated in any order and with time
    // passing between arrivals, holds and consumes exactly what reconcile's judgement of all of them says
    // (contract §5: validity by event time, not arrival order): a close that arrives before its RESERVE, a second
    // RESERVE, two closes, a close after the expiry, a COMMIT of another subject, and the same reservation_id
    // in two tenants, two reservations.
    #[test]
    fn reservations_fold_to_reconciles_verdict_whatever_the_arrival_order(
        history in proptest::collection::vec(generated_event(), 1..24),
        advances in proptest::collection::vec(0..40i64, 24),
        unrecorded in proptest::collection::vec(proptest::bool::weighted(0.2), 24),
        group_ends in proptest::collection::vec(proptest::bool::weighted(0.5), 24),
    ) {
        let base = Timestamp::parse_rfc3339("2026-11-10T00:00:00Z").unwrap();
        let minutes = |m: i64| Timestamp(base.micros() + m * 60_000_000);
        let mut events: Vec<(u64, ReservationEvent)> = history
            .iter()
            .enumerate()
            .map(|(n, (id, tenant, action, at, amount, ttl, other_subject))| {
                let subject = if *other_subject { "bob" } else { "alice" };
                let tenant = TENANTS[*tenant];
                let reserve = *action == ReservationAction::RESERVE;
                (n as u64 + 1, ReservationEvent {
                    header: header(tenant, Some(subject), "tokens", minutes(*at), format!("e{n}")),
                    reservation_id: format!("r{id}"),
                    action: *action,
                    amount: if *action == ReservationAction::RELEASE { 0 } else { *amount },
                    expires_at: reserve.then(|| minutes(at + ttl)),
                    fencing_token: None,
                })
            })
            .collect();
        // Reservations r4 and r5 are this writer's own, as its API makes them (nobody else writes to them): a
        // RESERVE now, of an id never issued before; a close now, of one it holds open (a RESERVE of the same
        // group included). Each is applied with a provisional number; at the end of its group the ledger numbers
        // all of the group's events, or records none of them and they are taken back, the last first. Time
        // passes, and other writers' events are folded, between groups only.
        let own = |e: &ReservationEvent| e.reservation_id == "r4" || e.reservation_id == "r5";
        let mut counted = vec![true; events.len()];
        let mut issued = std::collections::BTreeSet::new();
        let mut state = State::default();
        let mut now = base;
        let mut group: Vec<(u64, u64, Event)> = Vec::new();
        let mut group_unrecorded = false;
        fn end_group(state: &mut State, group: &mut Vec<(u64, u64, Event)>, unrecorded: bool, now: Timestamp) {
            if unrecorded {
                for (provisional, _, event) in group.iter().rev() {
                    state.take_back(*provisional, event, now);
                }
            } else {
                for (provisional, seq, event) in group.iter() {
                    let Event::Reservation(r) = event else { unreachable!("the groups here hold reservations") };
                    state.number_own(&key_of(r), *provisional, Some(*seq), now);
                }
            }
            group.clear();
            state.check_bookkeeping();
        }
        for n in 0..events.len() {
            let own_event = own(&events[n].1);
            if !own_event || group.is_empty() {
                end_group(&mut state, &mut group, group_unrecorded, now);
                now = Timestamp(now.micros() + advances[n] * 60_000_000);
                state.expire(now);
                group_unrecorded = unrecorded[n];
            }
            let (seq, event) = &mut events[n];
            if own_event {
                let ttl = event.expires_at.map(|e| e.micros() - event.header.occurred_at.micros());
                event.header.occurred_at = now;
                event.expires_at = ttl.map(|ttl| Timestamp(now.micros() + ttl));
                let key = key_of(event);
                let allowed = match event.action {
                    ReservationAction::RESERVE => issued.insert(key.clone()),
                    _ => state.is_open(&key),
                };
                counted[n] = allowed && !group_unrecorded;
                if allowed {
                    let provisional = PROVISIONAL_SEQ + *seq;
                    state.fold_own(provisional, event, now);
                    group.push((provisional, *seq, Event::Reservation(event.clone())));
                }
            } else {
                state.fold(*seq, &Event::Reservation(event.clone()), now);
            }
            state.check_bookkeeping();
            if group_ends[n] {
                end_group(&mut state, &mut group, group_unrecorded, now);
            }
        }
        end_group(&mut state, &mut group, group_unrecorded, now);
        let recorded = |(seq, _): &&(u64, ReservationEvent)| counted[*seq as usize - 1];
        state.expire(now);
        // What reconcile says of all of them.
        let mut held: BTreeMap<(String, String), i128> = BTreeMap::new();
        let mut consumed: BTreeMap<(String, String, i64), i64> = BTreeMap::new();
        for (id, tenant) in (0..6u8).flat_map(|id| TENANTS.map(|tenant| (id, tenant))) {
            let of_id: Vec<(u64, &ReservationEvent)> = events
                .iter()
                .filter(recorded)
                .filter(|(_, e)| e.reservation_id == format!("r{id}") && e.header.tenant == tenant)
                .map(|(seq, e)| (*seq, e))
                .collect();
            if of_id.is_empty() {
                continue;
            }
            let verdict = reservation::judge(&of_id, now);
            let event = |seq: u64| of_id.iter().find(|(s, _)| *s == seq).expect("judged").1;
            if let (Some(reserve), None) = (verdict.reserve, verdict.close) {
                let reserve = event(reserve);
                if reserve.expires_at.expect("a RESERVE expires") >= now {
                    let h = &reserve.header;
                    *held.entry((h.tenant.clone(), h.subject.clone().unwrap())).or_default() += i128::from(reserve.amount);
                }
            }
            if let Some((seq, ReservationAction::COMMIT, amount)) = verdict.close {
                let h = &event(seq).header;
                let hour = window::bounds(Window::HOUR, h.occurred_at).0.micros();
                *consumed.entry((h.tenant.clone(), h.subject.clone().unwrap(), hour)).or_default() += amount;
            }
        }
        for tenant in TENANTS {
            for subject in SUBJECTS {
                let whose = Whose::Subject(Some(subject));
                let key = (tenant.to_string(), subject.to_string());
                prop_assert_eq!(
                    state.held(tenant, whose, "tokens", now), held.get(&key).copied().unwrap_or(0),
                    "held by {} {}", tenant, subject
                );
                for hour in 0..6 {
                    let start = minutes(hour * 60);
                    prop_assert_eq!(
                        state.consumed(tenant, whose, "tokens", window::bounds(Window::HOUR, start)),
                        consumed.get(&(tenant.to_string(), subject.to_string(), start.micros())).copied().unwrap_or(0),
                        "consumed by {} {} in hour {}", tenant, subject, hour
                    );
                }
            }
        }
    }
}

/// A UsageEvent of `metric` for `subject` of org-1, at `at`.
fn usage_at(n: u32, subject: Option<&str>, metric: &str, at: Timestamp, quantity: i64) -> Event {
    let header = header("org-1", subject, metric, at, format!("u-{n}"));
    Event::Usage(UsageEvent { header, quantity, request_id: None, attributes: Default::default() })
}

/// A meter of org-1's `metric`, effective since 2026.
fn meter_of(metric: &str, aggregation: Aggregation, field: Option<MeterField>) -> MeterEvent {
    let from = Timestamp::parse_rfc3339("2026-01-01T00:00:00Z").unwrap();
    MeterEvent {
        header: header("org-1", None, metric, from, format!("meter-{metric}")),
        version: 1,
        aggregation,
        field,
        effective_from: from,
        actor: "carol".into(),
        reason: "billed so".into(),
    }
}

// Proves a UNIQUE_COUNT window counts each subject once (the next events of a subject cost nothing, an event naming
// none adds none), a COUNT window counts events whatever their amounts, and taking back an own event takes back its
// member only when it was the member's last event in the window.
#[test]
fn metered_windows_count_members_and_events_and_take_them_back() {
    let at = Timestamp::parse_rfc3339("2026-11-17T10:00:00Z").unwrap();
    let month = window::bounds(Window::MONTH, at);
    let mut state = State::default().knowing_meters(vec![
        meter_of("seats", Aggregation::UNIQUE_COUNT, Some(MeterField::SUBJECT)),
        meter_of("calls", Aggregation::COUNT, None),
    ]);
    let events = [
        usage_at(1, Some("alice"), "seats", at, 5),
        usage_at(2, Some("alice"), "seats", at, 7),
        usage_at(3, Some("bob"), "seats", at, 1),
        usage_at(4, None, "seats", at, 9),
        usage_at(5, Some("alice"), "calls", at, 40),
        usage_at(6, None, "calls", at, 0),
    ];
    for (seq, event) in events.iter().enumerate() {
        state.fold(seq as u64 + 1, event, at);
    }
    assert!(!state.is_missing_zones(), "the meters were known before the usage");
    assert_eq!(state.consumed("org-1", Whose::Tenant, "seats", month), 2, "alice and bob");
    assert_eq!(state.consumed("org-1", Whose::Tenant, "calls", month), 2, "two events");
    let named = |subject| Named { subject, project: None, api_key: None };
    assert_eq!(state.cost(("org-1", "seats"), named(Some("alice")), 50, month), 0, "alice is counted");
    assert_eq!(state.cost(("org-1", "seats"), named(Some("carol")), 50, month), 1, "carol would be new");
    assert_eq!(state.cost(("org-1", "calls"), named(None), 50, month), 1);
    assert_eq!(state.cost(("org-1", "tokens"), named(None), 50, month), 50, "a metric without a meter sums");
    let Event::Usage(second_alice) = &events[1] else { unreachable!() };
    state.take_back_usage(&second_alice.header, second_alice.quantity);
    assert_eq!(state.consumed("org-1", Whose::Tenant, "seats", month), 2, "alice's first event still counts her");
    let Event::Usage(bob) = &events[2] else { unreachable!() };
    state.take_back_usage(&bob.header, bob.quantity);
    assert_eq!(state.consumed("org-1", Whose::Tenant, "seats", month), 1, "bob's only event taken back");
    let later = meter_of("tokens", Aggregation::COUNT, None);
    state.fold(7, &Event::Meter(later), at);
    assert!(state.is_missing_zones(), "a meter folded after usage it may count otherwise rebuilds the state");
}
