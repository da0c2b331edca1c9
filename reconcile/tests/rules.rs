//! One test per rule of contract §5, each on a small hand-written history in a real ledger file, with the exact
//! adjustments `reconcile::plan` must compute and `reconcile::apply` records.

use std::collections::BTreeMap;

use ledger::{Batch, Incoming, Ledger, Origin, Period};
use schemas::{
    AdjustmentEvent, AdjustmentKind, Enforcement, Event, GrantEvent, Header, PolicyEvent, ReservationAction,
    ReservationEvent, Scope, UsageEvent, Window,
};
use testkit::fixtures::at;

const TENANT: &str = "org-1";
const METRIC: &str = "tokens";
/// Late enough that every window and reservation of these histories is judged.
const AS_OF: &str = "2026-11-15T00:00:00Z";
const OCT_3: (&str, &str) = ("2026-10-03T00:00:00Z", "2026-10-04T00:00:00Z");

fn header(event_id: &str, tenant: &str, subject: Option<&str>, occurred_at: &str) -> Header {
    Header { subject: subject.map(String::from), ..testkit::fixtures::header(event_id, occurred_at, tenant, METRIC) }
}

/// Usage of org-1, no subject.
fn usage(event_id: &str, occurred_at: &str, quantity: i64) -> Event {
    usage_of(event_id, TENANT, None, occurred_at, quantity)
}

fn usage_of(event_id: &str, tenant: &str, subject: Option<&str>, occurred_at: &str, quantity: i64) -> Event {
    Event::Usage(UsageEvent {
        header: header(event_id, tenant, subject, occurred_at),
        quantity,
        request_id: None,
        attributes: BTreeMap::new(),
    })
}

fn reservation(event_id: &str, id: &str, action: ReservationAction, at_: &str, amount: i64) -> ReservationEvent {
    ReservationEvent {
        header: header(event_id, TENANT, None, at_),
        reservation_id: id.into(),
        action,
        amount,
        expires_at: None,
        fencing_token: None,
    }
}

fn reserve(event_id: &str, id: &str, occurred_at: &str, amount: i64, expires_at: &str) -> Event {
    let event = reservation(event_id, id, ReservationAction::RESERVE, occurred_at, amount);
    Event::Reservation(ReservationEvent { expires_at: Some(at(expires_at)), ..event })
}

fn commit(event_id: &str, id: &str, occurred_at: &str, amount: i64) -> Event {
    Event::Reservation(reservation(event_id, id, ReservationAction::COMMIT, occurred_at, amount))
}

fn release(event_id: &str, id: &str, occurred_at: &str) -> Event {
    Event::Reservation(reservation(event_id, id, ReservationAction::RELEASE, occurred_at, 0))
}

/// Version 1 of an org-1 TENANT-scope HARD DAY policy, effective since September; vary it with `..`.
fn policy(policy_id: &str, limit: i64) -> PolicyEvent {
    PolicyEvent::new(
        header(&format!("{policy_id}-v1"), TENANT, None, "2026-09-01T00:00:00Z"),
        policy_id,
        limit,
        Window::DAY,
        Enforcement::HARD,
        at("2026-09-01T00:00:00Z"),
    )
}

/// `policy` as another version, effective from `effective_from`.
fn version(base: PolicyEvent, version: i32, limit: i64, effective_from: &str) -> PolicyEvent {
    let event_id = format!("{}-v{version}", base.policy_id);
    PolicyEvent {
        header: Header { event_id, occurred_at: at(effective_from), ..base.header.clone() },
        version,
        limit,
        effective_from: at(effective_from),
        ..base
    }
}

/// `policy` owned by another tenant (`*`: the plan default).
fn owned_by(base: PolicyEvent, owner: &str) -> PolicyEvent {
    let event_id = format!("{owner}-{}", base.header.event_id);
    PolicyEvent { header: Header { event_id, tenant: owner.into(), ..base.header.clone() }, ..base }
}

fn grant(event_id: &str, subject: Option<&str>, amount: i64, valid_from: &str, valid_until: &str) -> Event {
    Event::Grant(GrantEvent {
        header: header(event_id, TENANT, subject, valid_from),
        grant_id: event_id.into(),
        amount,
        valid_from: at(valid_from),
        valid_until: at(valid_until),
        reason: "rules".into(),
        actor: None,
    })
}

/// An adjustment as the tests compare it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Adj {
    kind: AdjustmentKind,
    amount: i64,
    refs: Vec<String>,
    window: Option<(String, String)>,
    tenant: String,
    subject: Option<String>,
    metric: String,
    policy_id: Option<String>,
}

impl Adj {
    fn of(a: &AdjustmentEvent) -> Adj {
        Adj {
            kind: a.kind,
            amount: a.amount,
            refs: a.refs.clone(),
            window: a.window_start.zip(a.window_end).map(|(s, e)| (s.to_string(), e.to_string())),
            tenant: a.header.tenant.clone(),
            subject: a.header.subject.clone(),
            metric: a.header.metric.clone(),
            policy_id: a.policy_id.clone(),
        }
    }
}

fn ids(refs: &[&str]) -> Vec<String> {
    refs.iter().map(|r| r.to_string()).collect()
}

/// An OVERSHOOT of an org-1 TENANT window.
fn overshoot(policy_id: &str, window: (&str, &str), amount: i64, refs: &[&str]) -> Adj {
    Adj {
        kind: AdjustmentKind::OVERSHOOT,
        amount,
        refs: ids(refs),
        window: Some((window.0.into(), window.1.into())),
        tenant: TENANT.into(),
        subject: None,
        metric: METRIC.into(),
        policy_id: Some(policy_id.into()),
    }
}

/// An adjustment about one event of org-1 (expiry, refused transition, conflicting copy).
fn about(kind: AdjustmentKind, amount: i64, event_id: &str) -> Adj {
    Adj {
        kind,
        amount,
        refs: ids(&[event_id]),
        window: None,
        tenant: TENANT.into(),
        subject: None,
        metric: METRIC.into(),
        policy_id: None,
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    ledger: Ledger,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(dir.path().join("ledger.db")).unwrap();
        Fixture { _dir: dir, ledger }
    }

    /// Appends one batch, in the order given.
    fn append(&mut self, events: Vec<Event>) {
        let events = events
            .into_iter()
            .map(|event| Incoming { event, origin: Origin::Local { name: "rules".into() }, raw: None })
            .collect();
        self.ledger.append(&Batch { events, ..Batch::default() }).unwrap();
    }

    fn policies(&mut self, policies: Vec<PolicyEvent>) {
        self.append(policies.into_iter().map(Event::Policy).collect());
    }

    fn close(&mut self, period: &str) {
        self.ledger.close_period(period.parse::<Period>().unwrap()).unwrap();
    }

    /// `reconcile --as-of as_of`: plans, applies, and answers what it wrote, sorted.
    fn run(&mut self, as_of: &str) -> Vec<Adj> {
        let plan = reconcile::plan(&self.ledger, at(as_of), &mut |_| {}).unwrap();
        reconcile::apply(&mut self.ledger, &plan).unwrap();
        let mut written: Vec<Adj> = plan.adjustments.iter().map(Adj::of).collect();
        written.sort();
        written
    }

    fn adjustments_recorded(&self) -> usize {
        self.ledger.adjustments().unwrap().len()
    }
}

fn sorted(mut adjustments: Vec<Adj>) -> Vec<Adj> {
    adjustments.sort();
    adjustments
}

// contract §5 "Reservations": a COMMIT at (not after) expires_at is valid though it arrives later, and counts.
#[test]
fn reservation_validity_by_event_time_a_late_but_valid_commit_counts() {
    let mut f = Fixture::new();
    f.policies(vec![policy("p", 50)]);
    f.append(vec![
        reserve("r-reserve", "r", "2026-10-03T10:00:00Z", 100, "2026-10-03T10:10:00Z"),
        usage("after-expiry", "2026-10-03T12:00:00Z", 0),
    ]);
    f.append(vec![commit("r-commit", "r", "2026-10-03T10:10:00Z", 80)]);
    assert_eq!(f.run("2026-10-04T00:00:00Z"), [overshoot("p", OCT_3, 30, &["r-commit"])]);
}

// contract §5 "Reservations": a COMMIT after expires_at is refused (not counted) and the reservation expires.
#[test]
fn commit_after_expiry_is_refused_and_the_reservation_expires() {
    let mut f = Fixture::new();
    f.policies(vec![policy("p", 50)]);
    f.append(vec![
        reserve("r-reserve", "r", "2026-10-03T10:00:00Z", 100, "2026-10-03T10:10:00Z"),
        commit("r-commit", "r", "2026-10-03T10:10:00.000001Z", 80),
    ]);
    let expected = sorted(vec![
        about(AdjustmentKind::REFUSED_TRANSITION, 80, "r-commit"),
        about(AdjustmentKind::RESERVATION_EXPIRED, 100, "r-reserve"),
    ]);
    assert_eq!(f.run(AS_OF), expected);
}

// contract §5 "Reservations": a COMMIT of more than was reserved is charged in full, so it shows in the overshoot.
#[test]
fn commit_above_the_reserved_amount_is_charged_in_full() {
    let mut f = Fixture::new();
    f.policies(vec![policy("p", 60)]);
    f.append(vec![
        usage("u-1", "2026-10-03T09:00:00Z", 10),
        reserve("r-reserve", "r", "2026-10-03T10:00:00Z", 50, "2026-10-03T10:10:00Z"),
        commit("r-commit", "r", "2026-10-03T10:05:00Z", 80),
    ]);
    assert_eq!(f.run(AS_OF), [overshoot("p", OCT_3, 30, &["r-commit"])]);
}

// contract §5 "Reservations": RELEASE closes a reservation with no consumption and no expiry.
#[test]
fn release_consumes_nothing() {
    let mut f = Fixture::new();
    f.policies(vec![policy("p", 50)]);
    f.append(vec![
        usage("u-1", "2026-10-03T09:00:00Z", 40),
        reserve("r-reserve", "r", "2026-10-03T10:00:00Z", 100, "2026-10-03T10:10:00Z"),
        release("r-release", "r", "2026-10-03T10:05:00Z"),
    ]);
    assert_eq!(f.run(AS_OF), []);
}

// contract §5: a close of a reservation_id with no RESERVE is refused, once all its events happened before --as-of;
// a refused RELEASE (amount 0) is still reported, once.
#[test]
fn close_with_no_reserve_is_refused() {
    let mut f = Fixture::new();
    f.policies(vec![policy("p", 10)]);
    f.append(vec![
        usage("u-1", "2026-10-03T09:00:00Z", 5),
        commit("ghost-commit", "ghost", "2026-10-03T10:05:00Z", 30),
        release("ghost-release", "other-ghost", "2026-10-03T10:06:00Z"),
    ]);
    assert_eq!(f.run("2026-10-03T10:05:30Z"), [about(AdjustmentKind::REFUSED_TRANSITION, 30, "ghost-commit")]);
    assert_eq!(f.run(AS_OF), [about(AdjustmentKind::REFUSED_TRANSITION, 0, "ghost-release")]);
    assert_eq!(f.run(AS_OF), [], "a zero-amount discrepancy is reported once");
}

// contract §5: the first close by event time closes the reservation; a later one is refused, whatever the arrival order.
#[test]
fn double_close_is_refused() {
    let mut f = Fixture::new();
    f.policies(vec![policy("p", 10)]);
    f.append(vec![
        reserve("r-reserve", "r", "2026-10-03T10:00:00Z", 100, "2026-10-03T11:00:00Z"),
        commit("r-commit-1", "r", "2026-10-03T10:05:00Z", 20),
        commit("r-commit-2", "r", "2026-10-03T10:30:00Z", 15),
    ]);
    let expected = sorted(vec![
        overshoot("p", OCT_3, 10, &["r-commit-1"]),
        about(AdjustmentKind::REFUSED_TRANSITION, 15, "r-commit-2"),
    ]);
    assert_eq!(f.run(AS_OF), expected);
    // A RELEASE that happened before the first COMMIT arrives: it is the close, both COMMITs are refused.
    f.append(vec![release("r-release", "r", "2026-10-03T10:03:00Z")]);
    let expected =
        sorted(vec![overshoot("p", OCT_3, -10, &[]), about(AdjustmentKind::REFUSED_TRANSITION, 20, "r-commit-1")]);
    assert_eq!(f.run(AS_OF), expected);
}

// contract §5: a reservation with no valid close is expired once expires_at is before --as-of, for the amount it held.
#[test]
fn expired_reservation() {
    let mut f = Fixture::new();
    f.append(vec![reserve("r-reserve", "r", "2026-10-03T10:00:00Z", 70, "2026-10-03T10:10:00Z")]);
    assert_eq!(f.run("2026-10-03T10:10:00Z"), [], "expires_at is not before --as-of yet");
    assert_eq!(f.run("2026-10-03T10:10:00.000001Z"), [about(AdjustmentKind::RESERVATION_EXPIRED, 70, "r-reserve")]);
    assert_eq!(f.run(AS_OF), []);
}

// contract §5 "Adjustments are deltas": a late but valid close of an expired reservation takes the expiry back.
#[test]
fn late_valid_close_takes_the_expiry_back() {
    let mut f = Fixture::new();
    f.policies(vec![policy("p", 10)]);
    f.append(vec![reserve("r-reserve", "r", "2026-10-03T10:00:00Z", 70, "2026-10-03T10:10:00Z")]);
    assert_eq!(f.run(AS_OF), [about(AdjustmentKind::RESERVATION_EXPIRED, 70, "r-reserve")]);
    f.append(vec![commit("r-commit", "r", "2026-10-03T10:05:00Z", 30)]);
    let expected = sorted(vec![
        about(AdjustmentKind::RESERVATION_EXPIRED, -70, "r-reserve"),
        overshoot("p", OCT_3, 20, &["r-commit"]),
    ]);
    assert_eq!(f.run(AS_OF), expected);
    assert_eq!(f.run(AS_OF), []);
}

// contract §5 "Reservations" (leases): a RENEW that happened before the lease's expiry but arrives after a run
// reported it expired moves the expiry; the expiry is taken back until the new one passes, then reported again.
#[test]
fn a_late_renew_takes_a_leases_expiry_back_until_the_new_expiry_passes() {
    let mut f = Fixture::new();
    let leased = |event: Event| match event {
        Event::Reservation(r) => Event::Reservation(ReservationEvent { fencing_token: Some(7), ..r }),
        other => other,
    };
    f.append(vec![leased(reserve("l-reserve", "l", "2026-10-03T10:00:00Z", 1, "2026-10-03T10:10:00Z"))]);
    assert_eq!(f.run("2026-10-03T10:30:00Z"), [about(AdjustmentKind::RESERVATION_EXPIRED, 1, "l-reserve")]);
    let renew = reservation("l-renew", "l", ReservationAction::RENEW, "2026-10-03T10:09:00Z", 0);
    let renew = ReservationEvent { expires_at: Some(at("2026-10-03T11:00:00Z")), ..renew };
    f.append(vec![leased(Event::Reservation(renew))]);
    assert_eq!(f.run("2026-10-03T10:45:00Z"), [about(AdjustmentKind::RESERVATION_EXPIRED, -1, "l-reserve")]);
    assert_eq!(f.run("2026-10-03T10:50:00Z"), []);
    assert_eq!(f.run("2026-10-03T11:00:00.000001Z"), [about(AdjustmentKind::RESERVATION_EXPIRED, 1, "l-reserve")]);
}

/// `event` (a reservation event) recorded by another tenant.
fn of_tenant(tenant: &str, event: Event) -> Event {
    let Event::Reservation(r) = event else { panic!("a reservation event") };
    Event::Reservation(ReservationEvent { header: Header { tenant: tenant.into(), ..r.header }, ..r })
}

// README "Reconciliation" (choice where contract §3 is silent): a reservation is (tenant, reservation_id), so two
// tenants whose producers both chose `r-1` hold two reservations; neither refuses nor expires the other's.
#[test]
fn a_reservation_id_shared_by_two_tenants_is_two_reservations() {
    let mut f = Fixture::new();
    f.policies(vec![owned_by(policy("p-a", 50), "org-a"), owned_by(policy("p-b", 10), "org-b")]);
    f.append(vec![
        of_tenant("org-a", reserve("a-reserve", "r-1", "2026-11-10T10:00:00Z", 100, "2026-11-10T10:10:00Z")),
        of_tenant("org-b", reserve("b-reserve", "r-1", "2026-11-10T10:01:00Z", 50, "2026-11-10T10:11:00Z")),
        of_tenant("org-b", commit("b-commit", "r-1", "2026-11-10T10:02:00Z", 40)),
        of_tenant("org-a", commit("a-commit", "r-1", "2026-11-10T10:03:00Z", 90)),
    ]);
    let nov_10 = ("2026-11-10T00:00:00Z", "2026-11-11T00:00:00Z");
    // Each valid COMMIT counts for its own tenant: the HARD day limits show both in full.
    let expected = sorted(vec![
        Adj { tenant: "org-a".into(), ..overshoot("p-a", nov_10, 40, &["a-commit"]) },
        Adj { tenant: "org-b".into(), ..overshoot("p-b", nov_10, 30, &["b-commit"]) },
    ]);
    assert_eq!(f.run("2026-12-01T00:00:00Z"), expected);
    assert_eq!(f.run("2026-12-01T00:00:00Z"), [], "a rerun writes nothing");
}

// contract §5 "Policy in force": the version with the greatest (effective_from, version) effective before the window's
// end governs the whole window, whatever the arrival order of the versions.
#[test]
fn policy_version_in_force_mid_window() {
    let mut f = Fixture::new();
    let v1 = policy("p", 100);
    f.policies(vec![
        version(v1.clone(), 3, 25, "2026-10-05T12:00:00Z"),
        version(v1.clone(), 2, 10, "2026-10-05T12:00:00Z"),
        version(v1.clone(), 4, 0, "2026-10-06T00:00:00Z"),
        v1,
    ]);
    f.append(vec![
        usage("oct-4", "2026-10-04T10:00:00Z", 30),
        usage("oct-5-before-v3", "2026-10-05T08:00:00Z", 30),
        usage("oct-6", "2026-10-06T08:00:00Z", 5),
    ]);
    let expected = sorted(vec![
        overshoot("p", ("2026-10-05T00:00:00Z", "2026-10-06T00:00:00Z"), 5, &["oct-5-before-v3"]),
        overshoot("p", ("2026-10-06T00:00:00Z", "2026-10-07T00:00:00Z"), 5, &["oct-6"]),
    ]);
    assert_eq!(f.run(AS_OF), expected);
}

// contract §3/5: a `*` policy applies to a tenant with no policy of its own in force for the same scope and window.
#[test]
fn plan_defaults_apply_where_a_tenant_has_no_own_policy() {
    let mut f = Fixture::new();
    let month = PolicyEvent { window: Window::MONTH, ..policy("plan-month", 50) };
    let own_later = version(policy("org-2-day", 1_000), 1, 1_000, "2026-11-01T00:00:00Z");
    f.policies(vec![
        owned_by(month.clone(), "*"),
        owned_by(policy("plan-day", 20), "*"),
        PolicyEvent { window: Window::MONTH, ..policy("org-1-month", 1_000) },
        owned_by(own_later, "org-2"),
    ]);
    f.append(vec![
        usage_of("org-1-u", "org-1", None, "2026-10-03T10:00:00Z", 40),
        usage_of("org-2-u", "org-2", None, "2026-10-03T10:00:00Z", 60),
    ]);
    let for_tenant = |tenant: &str, adj: Adj| Adj { tenant: tenant.into(), ..adj };
    let expected = sorted(vec![
        for_tenant("org-1", overshoot("plan-day", OCT_3, 20, &["org-1-u"])),
        for_tenant("org-2", overshoot("plan-day", OCT_3, 40, &["org-2-u"])),
        for_tenant(
            "org-2",
            overshoot("plan-month", ("2026-10-01T00:00:00Z", "2026-11-01T00:00:00Z"), 10, &["org-2-u"]),
        ),
    ]);
    assert_eq!(f.run(AS_OF), expected);
}

// contract §5: a SUBJECT policy judges each subject's consumption on its own; events without subject form one group.
#[test]
fn subject_policies_judge_each_subject() {
    let mut f = Fixture::new();
    f.policies(vec![PolicyEvent { scope: Scope::SUBJECT, ..policy("per-user", 10) }]);
    f.append(vec![
        usage_of("alice-1", TENANT, Some("alice"), "2026-10-03T10:00:00Z", 8),
        usage_of("alice-2", TENANT, Some("alice"), "2026-10-03T11:00:00Z", 5),
        usage_of("bob-1", TENANT, Some("bob"), "2026-10-03T10:00:00Z", 9),
        usage_of("nobody-1", TENANT, None, "2026-10-03T10:00:00Z", 12),
    ]);
    let expected = sorted(vec![
        Adj { subject: Some("alice".into()), ..overshoot("per-user", OCT_3, 3, &["alice-2"]) },
        overshoot("per-user", OCT_3, 2, &["nobody-1"]),
    ]);
    assert_eq!(f.run(AS_OF), expected);
}

// contract §5 "Effective limit": a grant without subject raises the TENANT windows its [valid_from, valid_until) overlaps.
#[test]
fn grants_without_subject_raise_tenant_windows() {
    let mut f = Fixture::new();
    f.policies(vec![policy("p", 10)]);
    f.append(vec![
        grant("overlapping", None, 15, "2026-10-03T12:00:00Z", "2026-10-04T12:00:00Z"),
        grant("ends-at-window-start", None, 100, "2026-10-02T00:00:00Z", "2026-10-03T00:00:00Z"),
        grant("alice-only", Some("alice"), 100, "2026-10-03T00:00:00Z", "2026-10-04T00:00:00Z"),
        usage_of("u-1", TENANT, Some("alice"), "2026-10-03T10:00:00Z", 30),
    ]);
    assert_eq!(f.run(AS_OF), [overshoot("p", OCT_3, 5, &["u-1"])]);
}

// contract §5 "Effective limit": a grant with a subject raises only that subject's SUBJECT-policy windows.
#[test]
fn grants_with_subject_raise_that_subjects_windows() {
    let mut f = Fixture::new();
    f.policies(vec![PolicyEvent { scope: Scope::SUBJECT, ..policy("per-user", 10) }]);
    f.append(vec![
        grant("alice-grant", Some("alice"), 100, "2026-10-03T00:00:00Z", "2026-10-04T00:00:00Z"),
        grant("tenant-grant", None, 100, "2026-10-03T00:00:00Z", "2026-10-04T00:00:00Z"),
        usage_of("alice-1", TENANT, Some("alice"), "2026-10-03T10:00:00Z", 30),
        usage_of("bob-1", TENANT, Some("bob"), "2026-10-03T10:00:00Z", 30),
    ]);
    let expected = [Adj { subject: Some("bob".into()), ..overshoot("per-user", OCT_3, 20, &["bob-1"]) }];
    assert_eq!(f.run(AS_OF), expected);
}

// contract §5 "Overshoot": OVERSHOOT names the events (usage and valid COMMITs) that crossed the limit, in event time.
#[test]
fn hard_overshoot_names_the_crossing_events() {
    let mut f = Fixture::new();
    f.policies(vec![policy("p", 50)]);
    f.append(vec![
        usage("u-5", "2026-10-03T10:30:00Z", 10),
        usage("u-4", "2026-10-03T10:20:00Z", 20),
        commit("r-commit", "r", "2026-10-03T10:25:00Z", 10),
        usage("u-1", "2026-10-03T10:00:00Z", 30),
    ]);
    f.append(vec![
        reserve("r-reserve", "r", "2026-10-03T10:24:00Z", 10, "2026-10-03T11:00:00Z"),
        usage("u-3-zero", "2026-10-03T10:15:00Z", 0),
        usage("u-2", "2026-10-03T10:10:00Z", 15),
    ]);
    assert_eq!(f.run(AS_OF), [overshoot("p", OCT_3, 35, &["u-4", "r-commit", "u-5"])]);
}

// contract §5 "Overshoot": a SHADOW policy reports the same difference as SHADOW_OVER_LIMIT.
#[test]
fn shadow_policies_report_shadow_over_limit() {
    let mut f = Fixture::new();
    f.policies(vec![PolicyEvent { enforcement: Enforcement::SHADOW, ..policy("shadow", 10) }]);
    f.append(vec![usage("u-1", "2026-10-03T10:00:00Z", 8), usage("u-2", "2026-10-03T11:00:00Z", 17)]);
    let expected = Adj { kind: AdjustmentKind::SHADOW_OVER_LIMIT, ..overshoot("shadow", OCT_3, 15, &["u-2"]) };
    assert_eq!(f.run(AS_OF), [expected]);
}

// A throttle (a policy with a burst) limits a rate, not an allowance: its bucket lets burst plus limit through in
// a window by design, so reconcile judges none of its windows (it reported OVERSHOOT for what the hook allowed).
#[test]
fn throttles_are_not_judged_as_quotas() {
    let mut f = Fixture::new();
    f.policies(vec![PolicyEvent { burst: Some(20), ..policy("throttle", 10) }]);
    f.append(vec![usage("u-1", "2026-10-03T10:00:00Z", 25)]);
    assert_eq!(f.run(AS_OF), []);
}

// Contract §3 "no policy of its own for the same metric, scope and window", for quotas: a tenant's own throttle is
// no quota, so the plan's HARD quota of the same scope and window still judges its windows (were the throttle to
// cover it, the plan's quota would vanish, for reconcile and the hook alike).
#[test]
fn an_own_throttle_leaves_the_plan_quota_in_force() {
    let mut f = Fixture::new();
    f.policies(vec![
        owned_by(policy("plan-day", 20), "*"),
        PolicyEvent { burst: Some(50), ..policy("own-rate", 1_000) },
    ]);
    f.append(vec![usage("u-1", "2026-10-03T10:00:00Z", 30)]);
    assert_eq!(f.run(AS_OF), [overshoot("plan-day", OCT_3, 10, &["u-1"])]);
}

// contract §5 "Overshoot": a SOFT policy's excess is billed, never adjusted.
#[test]
fn soft_policies_produce_nothing() {
    let mut f = Fixture::new();
    f.policies(vec![PolicyEvent { enforcement: Enforcement::SOFT, ..policy("soft", 10) }]);
    f.append(vec![usage("u-1", "2026-10-03T10:00:00Z", 25)]);
    assert_eq!(f.run(AS_OF), []);
}

// contract §5 "Reported once each": every conflicting copy once (its quantity, or 0), never counted; exact
// duplicates are neither reported nor counted.
#[test]
fn conflicting_duplicates_are_reported_once_and_not_counted() {
    let mut f = Fixture::new();
    f.policies(vec![policy("p", 5)]);
    f.append(vec![
        usage("u-1", "2026-10-03T10:00:00Z", 10),
        usage("u-1", "2026-10-03T10:00:00Z", 12),
        reserve("r-reserve", "r", "2026-10-03T10:20:00Z", 10, "2026-10-03T11:00:00Z"),
        commit("r-commit", "r", "2026-10-03T10:30:00Z", 5),
    ]);
    f.append(vec![
        usage("u-1", "2026-10-03T10:00:00Z", 13),
        usage("u-1", "2026-10-03T10:00:00Z", 10),
        commit("r-commit", "r", "2026-10-03T10:30:00Z", 6),
        commit("r-commit", "r", "2026-10-03T10:30:00Z", 5),
    ]);
    let expected = sorted(vec![
        about(AdjustmentKind::CONFLICTING_DUPLICATE, 12, "u-1"),
        about(AdjustmentKind::CONFLICTING_DUPLICATE, 13, "u-1"),
        about(AdjustmentKind::CONFLICTING_DUPLICATE, 0, "r-commit"),
        overshoot("p", OCT_3, 10, &["u-1", "r-commit"]),
    ]);
    assert_eq!(f.run(AS_OF), expected);
    assert_eq!(f.run(AS_OF), []);
}

// contract §5 "Late usage": consumption of a closed period recorded after its close is LATE_USAGE of that period.
#[test]
fn late_usage_after_a_close() {
    let mut f = Fixture::new();
    f.append(vec![usage("sep-1", "2026-09-14T10:00:00Z", 10)]);
    f.close("2026-09");
    f.append(vec![
        usage_of("sep-late", TENANT, Some("alice"), "2026-09-20T10:00:00Z", 7),
        usage("oct-1", "2026-10-03T10:00:00Z", 5),
    ]);
    let expected = Adj {
        kind: AdjustmentKind::LATE_USAGE,
        amount: 7,
        refs: ids(&["sep-late"]),
        window: Some(("2026-09-01T00:00:00Z".into(), "2026-10-01T00:00:00Z".into())),
        tenant: TENANT.into(),
        subject: None,
        metric: METRIC.into(),
        policy_id: None,
    };
    assert_eq!(f.run(AS_OF), [expected]);
    assert_eq!(f.run(AS_OF), []);
}

// contract §5 "Adjustments are deltas": reruns with the same --as-of write nothing; one late event adds one delta.
#[test]
fn idempotence_reruns_write_nothing_and_a_late_event_adds_one_delta() {
    let mut f = Fixture::new();
    f.policies(vec![policy("p", 10)]);
    f.append(vec![usage("u-1", "2026-10-03T10:00:00Z", 25)]);
    assert_eq!(f.run(AS_OF), [overshoot("p", OCT_3, 15, &["u-1"])]);
    for rerun in 1..=3 {
        assert_eq!(f.run(AS_OF), [], "rerun {rerun}");
        assert_eq!(f.adjustments_recorded(), 1, "rerun {rerun}");
    }
    f.append(vec![usage("u-2", "2026-10-03T11:00:00Z", 4)]);
    assert_eq!(f.run(AS_OF), [overshoot("p", OCT_3, 4, &["u-1", "u-2"])]);
    assert_eq!(f.adjustments_recorded(), 2);
}

// A large run goes in transactions of 10,000 adjustments (the hook waits for one, not for the run), and a run
// stopped between two of them leaves right adjustments: the next run with the same --as-of records exactly the rest,
// under the ids they had in the whole plan, and then nothing more.
#[test]
fn a_run_records_in_bounded_transactions_and_a_stopped_one_is_finished_by_the_next() {
    let mut f = Fixture::new();
    let planned = reconcile::ADJUSTMENTS_PER_TRANSACTION + 5;
    // COMMITs of reservations that never had a RESERVE: one REFUSED_TRANSITION each.
    f.append((0..planned).map(|i| commit(&format!("c-{i}"), &format!("r-{i}"), "2026-10-03T10:00:00Z", 1)).collect());
    let whole = reconcile::plan(&f.ledger, at(AS_OF), &mut |_| {}).unwrap();
    assert_eq!(whole.adjustments.len(), planned);

    // Stopped after its first transaction: as if only the first 10,000 had been planned.
    let mut first = whole.clone();
    first.adjustments.truncate(reconcile::ADJUSTMENTS_PER_TRANSACTION);
    let batches = |f: &Fixture| f.ledger.status().unwrap().batches;
    let before = batches(&f);
    reconcile::apply(&mut f.ledger, &first).unwrap();
    assert_eq!(batches(&f), before + 1, "one transaction for 10,000");

    let rest = reconcile::plan(&f.ledger, at(AS_OF), &mut |_| {}).unwrap();
    let ids = |plan: &reconcile::Plan| plan.adjustments.iter().map(|a| a.adjustment_id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&rest), ids(&whole)[reconcile::ADJUSTMENTS_PER_TRANSACTION..], "exactly the rest, same ids");
    reconcile::apply(&mut f.ledger, &rest).unwrap();
    assert_eq!(f.adjustments_recorded(), planned);
    assert!(reconcile::plan(&f.ledger, at(AS_OF), &mut |_| {}).unwrap().is_clean(), "then nothing more");

    // A whole plan of more than 10,000 on another ledger: two transactions.
    let mut g = Fixture::new();
    g.append((0..planned).map(|i| commit(&format!("c-{i}"), &format!("r-{i}"), "2026-10-03T10:00:00Z", 1)).collect());
    let plan = reconcile::plan(&g.ledger, at(AS_OF), &mut |_| {}).unwrap();
    let before = batches(&g);
    let report = reconcile::apply(&mut g.ledger, &plan).unwrap();
    assert_eq!((report.recorded(), batches(&g)), (planned, before + 2));
    assert_eq!(g.adjustments_recorded(), planned);
    assert!(reconcile::plan(&g.ledger, at(AS_OF), &mut |_| {}).unwrap().is_clean(), "a rerun writes nothing");
}

// contract §5 "Reported once each" + "Adjustments are deltas": when a RESERVE that happened first arrives late, it
// becomes the reservation's RESERVE, and the expiry reported under the other one is taken back (found by the
// model test: the reservation ended up expired for both amounts).
#[test]
fn a_reserve_that_happened_first_but_arrives_late_takes_over_the_expiry() {
    let mut f = Fixture::new();
    f.append(vec![reserve("second", "r", "2026-10-03T10:30:00Z", 40, "2026-10-03T10:40:00Z")]);
    assert_eq!(f.run(AS_OF), [about(AdjustmentKind::RESERVATION_EXPIRED, 40, "second")]);
    f.append(vec![reserve("first", "r", "2026-10-03T10:00:00Z", 70, "2026-10-03T10:10:00Z")]);
    let expected = sorted(vec![
        about(AdjustmentKind::RESERVATION_EXPIRED, 70, "first"),
        about(AdjustmentKind::RESERVATION_EXPIRED, -40, "second"),
        about(AdjustmentKind::REFUSED_TRANSITION, 40, "second"),
    ]);
    assert_eq!(f.run(AS_OF), expected);
}

// contract §5 "What a run covers": a reservation is judged by the expires_at of its RESERVE (the first by event time),
// not by whichever RESERVE the ledger recorded first (found by the model test).
#[test]
fn a_reservation_is_judged_by_the_expiry_of_its_first_reserve_in_event_time() {
    let mut f = Fixture::new();
    f.append(vec![reserve("second", "r", "2026-10-03T10:30:00Z", 40, "2026-11-20T00:00:00Z")]);
    f.append(vec![reserve("first", "r", "2026-10-03T10:00:00Z", 70, "2026-10-03T10:10:00Z")]);
    let expected = sorted(vec![
        about(AdjustmentKind::RESERVATION_EXPIRED, 70, "first"),
        about(AdjustmentKind::REFUSED_TRANSITION, 40, "second"),
    ]);
    assert_eq!(f.run(AS_OF), expected);
}
