//! The hook against callers it must not trust (the "trust" issue), as a library on a real ledger file: sums past
//! i64, bounded fields, a tenant inventing subjects, reused idempotency keys and retried closes, another producer's
//! decision under a key's id, and a writer that dies.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use hook::*;
use ledger::{Batch, Durability, Incoming, Ledger, Origin};
use schemas::validate::AMOUNT_MAX;
use schemas::*;

fn header(event_id: &str, tenant: &str, metric: &str, at: Timestamp) -> Header {
    Header {
        event_id: event_id.into(),
        occurred_at: at,
        tenant: tenant.into(),
        subject: None,
        metric: metric.into(),
        source: "admin".into(),
        api_key: None,
        project: None,
    }
}

fn hard_policy(metric: &str, limit: i64) -> Event {
    let at = Timestamp::parse_rfc3339("2026-01-01T00:00:00Z").unwrap();
    Event::Policy(PolicyEvent::new(
        header(&format!("policy-{metric}"), "org-1", metric, at),
        format!("quota-{metric}"),
        limit,
        Window::MONTH,
        Enforcement::HARD,
        at,
    ))
}

fn append(path: &std::path::Path, events: Vec<Event>) {
    let events =
        events.into_iter().map(|event| Incoming { event, origin: Origin::Local { name: "t".into() }, raw: None });
    Ledger::open(path).unwrap().append(&Batch { events: events.collect(), ..Batch::default() }).unwrap();
}

/// A ledger holding `events`, and a hook on it (durability normal: these tests make a thousand decisions).
fn hook_with(events: Vec<Event>, settings: HookSettings) -> (tempfile::TempDir, Hook) {
    let dir = tempfile::tempdir().unwrap();
    append(&dir.path().join("ledger.db"), events);
    let hook =
        Hook::start(dir.path().join("ledger.db"), HookSettings { durability: Durability::Normal, ..settings }).unwrap();
    (dir, hook)
}

fn ask(metric: &str, subject: Option<&str>, key: &str, amount: i64) -> Request {
    let who = Who { subject: subject.map(String::from), ..Who::tenant("org-1") };
    Request::one(who, metric, amount, key)
}

fn reserve(metric: &str, key: &str, amount: i64) -> Request {
    Request { ttl_ms: Some(600_000), ..Request::one(Who::tenant("org-1"), metric, amount, key) }
}

fn refused_field<T: std::fmt::Debug>(answer: Result<T, HookError>) -> &'static str {
    match answer {
        Err(HookError::BadRequest { field, .. }) => field,
        other => panic!("not a bad request: {other:?}"),
    }
}

// Proves that a check, a reserve or a commit that would take a window's consumption or what is held past i64 is
// refused naming `amount`, nothing decided, and that holds other writers record past i64 are folded without
// stopping the writer (each of the three, and the fold, panicked it).
#[test]
fn sums_past_i64_are_refused_and_others_holds_folded() {
    let (dir, hook) = hook_with(vec![hard_policy("limited", 10)], HookSettings::default());
    for n in 0..1_024 {
        assert!(hook.check(ask("tokens", None, &format!("c-{n}"), AMOUNT_MAX)).unwrap().allowed());
        assert!(hook.reserve(reserve("held", &format!("r-{n}"), AMOUNT_MAX)).unwrap().allowed());
    }
    assert_eq!(refused_field(hook.check(ask("tokens", None, "c-over", AMOUNT_MAX))), "amount");
    assert_eq!(refused_field(hook.reserve(reserve("held", "r-over", AMOUNT_MAX))), "amount");
    // 1,024 of the largest consumed: 1,023 more fit, 1,024 do not.
    let open = hook.reserve(reserve("tokens", "r-0-tokens", 0)).unwrap().reservation_id.unwrap();
    assert_eq!(refused_field(hook.commit(&open, 1_024)), "amount");
    assert_eq!(hook.commit(&open, 1_023).unwrap().unwrap().amount, 1_023);
    // Another enforcer's holds of a limited metric past i64: folded, and a check is denied, its used_before said
    // as i64::MAX.
    let at = Timestamp(Timestamp::now().micros() - 1_000_000);
    let holds = (0..1_025).map(|n| {
        Event::Reservation(ReservationEvent {
            header: header(&format!("other-{n}"), "org-1", "limited", at),
            reservation_id: format!("other-{n}"),
            action: ReservationAction::RESERVE,
            amount: AMOUNT_MAX,
            expires_at: Some(Timestamp(at.micros() + 3_600_000_000)),
            fencing_token: None,
        })
    });
    append(&dir.path().join("ledger.db"), holds.collect());
    let denied = hook.check(ask("limited", None, "l-1", 1)).unwrap();
    assert_eq!((denied.outcome, denied.used_before, denied.remaining), (Outcome::DENIED, Some(i64::MAX), Some(0)));
    assert_eq!(hook.health().recording, "ok");
}

// Proves that fields past the bounds of contract §9.2 are refused naming the field, before anything is decided.
#[test]
fn fields_past_their_bounds_are_refused_naming_them() {
    let (_dir, hook) = hook_with(vec![hard_policy("tokens", 10)], HookSettings::default());
    let with = |change: &dyn Fn(&mut Request)| {
        let mut request = ask("tokens", Some("alice"), "k", 1);
        change(&mut request);
        hook.check(request)
    };
    assert_eq!(refused_field(with(&|r| r.who.tenant = "t".repeat(129))), "tenant");
    assert_eq!(refused_field(with(&|r| r.who.tenant = "org\u{1b}[31m".into())), "tenant");
    assert_eq!(refused_field(with(&|r| r.who.subject = Some(String::new()))), "subject");
    assert_eq!(refused_field(with(&|r| r.who.subject = Some("a\nb".into()))), "subject");
    assert_eq!(refused_field(with(&|r| r.metric = Some("m".repeat(129)))), "metric");
    assert_eq!(refused_field(with(&|r| r.idempotency_key = "k".repeat(257))), "idempotency_key");
    assert_eq!(refused_field(with(&|r| r.request_id = Some("r".repeat(257)))), "request_id");
    assert_eq!(refused_field(with(&|r| r.request_id = Some(String::new()))), "request_id");
    let at_the_bounds = with(&|r| {
        r.who.tenant = "t".repeat(128);
        r.metric = Some("m".repeat(128));
        r.who.subject = Some("s".repeat(128));
        r.idempotency_key = "k".repeat(256);
        r.request_id = Some("r".repeat(256));
    });
    assert!(at_the_bounds.unwrap().allowed(), "no policy for that tenant");
    assert_eq!(hook.health().failed_groups, 0);
}

// Proves that a request that does not say what its operation needs (one metric or several, held or not) is refused
// naming the field, and decides nothing: the same words `serve` answers a body with.
#[test]
fn a_request_of_the_wrong_shape_for_its_operation_is_refused_naming_the_field() {
    let (_dir, hook) = hook_with(vec![hard_policy("tokens", 10)], HookSettings::default());
    let several = Request::several(Who::tenant("org-1"), [("tokens".to_string(), 1)].into(), "k-s");
    let refused = |answer: Result<Decision, HookError>| match answer {
        Err(e @ HookError::BadRequest { .. }) => e.to_string(),
        other => panic!("not a bad request: {other:?}"),
    };
    let both = Request { metric: Some("tokens".into()), ..several.clone() };
    let words = "amounts: give either `amounts` (several metrics) or `metric` and `amount` (one), not both";
    assert_eq!(refused(hook.check(both)), words);
    let neither = Request { amounts: None, ..several.clone() };
    assert_eq!(refused(hook.check(neither)), "metric: missing (or give `amounts` for several metrics)");
    let no_amount = Request { amount: None, ..ask("tokens", None, "k-a", 1) };
    assert_eq!(refused(hook.check(no_amount)), "amount: missing");
    assert_eq!(refused_field(hook.check(several.clone())), "amounts", "several metrics are check_amounts'");
    assert_eq!(refused_field(hook.check_amounts(ask("tokens", None, "k-1", 1))), "metric");
    assert_eq!(refused_field(hook.check(reserve("tokens", "k-2", 1))), "ttl_ms", "a check holds nothing");
    assert_eq!(refused_field(hook.check_amounts(Request { ttl_ms: Some(1_000), ..several.clone() })), "ttl_ms");
    assert_eq!(refused_field(hook.reserve(ask("tokens", None, "k-3", 1))), "ttl_ms", "a reservation says how long");
    assert_eq!(refused_field(hook.reserve_amounts(several)), "ttl_ms");
    let quotas = hook.quotas(QuotaQuery { who: Who::tenant("org-1"), metric: None }).unwrap();
    assert_eq!((quotas.quotas[0].consumed, quotas.quotas[0].held), (Some(0), Some(0)), "nothing decided");
}

static CLOCK_MICROS: AtomicI64 = AtomicI64::new(0);

fn clock() -> Timestamp {
    Timestamp(CLOCK_MICROS.load(Ordering::Relaxed))
}

// Proves that a tenant's bound on counters refuses a new subject or metric (naming it) while its old ones go on,
// and that counters free their place once every window they count ended more than a day ago.
#[test]
fn a_tenants_bound_on_counters_refuses_new_ones_until_old_ones_age_out() {
    CLOCK_MICROS.store(Timestamp::parse_rfc3339("2026-06-10T12:00:00Z").unwrap().micros(), Ordering::Relaxed);
    let settings = HookSettings { clock, counters_per_tenant_max: 3, ..HookSettings::default() };
    let (_dir, hook) = hook_with(vec![hard_policy("tokens", 1_000)], settings);
    assert!(hook.check(ask("tokens", Some("alice"), "k-1", 1)).unwrap().allowed());
    assert!(hook.check(ask("tokens", Some("bob"), "k-2", 1)).unwrap().allowed());
    assert_eq!(refused_field(hook.check(ask("tokens", Some("carol"), "k-3", 1))), "subject");
    assert_eq!(refused_field(hook.check(ask("requests", None, "k-4", 1))), "metric");
    assert!(hook.check(ask("tokens", Some("alice"), "k-5", 1)).unwrap().allowed(), "alice's counters exist");
    // June ended more than a day ago: its windows, and the counters holding only them, are gone.
    CLOCK_MICROS.store(Timestamp::parse_rfc3339("2026-07-02T00:01:00Z").unwrap().micros(), Ordering::Relaxed);
    assert!(hook.check(ask("tokens", Some("carol"), "k-3", 1)).unwrap().allowed());
    assert!(hook.check(ask("tokens", Some("dave"), "k-6", 1)).unwrap().allowed());
    assert_eq!(refused_field(hook.check(ask("tokens", Some("erin"), "k-7", 1))), "subject");
}

fn reused_field<T: std::fmt::Debug>(answer: Result<T, HookError>) -> &'static str {
    match answer {
        Err(HookError::IdempotencyKeyReused { field, .. }) => field,
        other => panic!("not a reused key: {other:?}"),
    }
}

// Proves contract §9.1 for decisions: the same request answers the original, another request under the same key is
// refused naming what differs (a check's key used for a reserve included), and a decision another producer recorded
// under the key's id is never answered; none of them consumes anything.
#[test]
fn a_key_answers_only_its_own_request() {
    let (dir, hook) = hook_with(vec![hard_policy("tokens", 100)], HookSettings::default());
    let first = hook.check(ask("tokens", Some("alice"), "k", 5)).unwrap();
    let again = hook.check(ask("tokens", Some("alice"), "k", 5)).unwrap();
    assert_eq!(Decision { replayed: false, ..again }, first);
    assert_eq!(reused_field(hook.check(ask("tokens", Some("alice"), "k", 6))), "amount");
    assert_eq!(reused_field(hook.check(ask("tokens", Some("bob"), "k", 5))), "subject");
    assert_eq!(reused_field(hook.check(ask("tokens", None, "k", 5))), "subject");
    assert_eq!(reused_field(hook.check(ask("requests", Some("alice"), "k", 5))), "metric");
    let mut as_reserve = reserve("tokens", "k", 5);
    as_reserve.who.subject = Some("alice".into());
    assert_eq!(reused_field(hook.reserve(as_reserve)), "kind");
    let reserved = hook.reserve(reserve("tokens", "r", 5)).unwrap();
    assert_eq!(reused_field(hook.check(ask("tokens", None, "r", 5))), "kind");
    assert_eq!(hook.reserve(reserve("tokens", "r", 5)).unwrap().reservation_id, reserved.reservation_id);
    // Another producer's decision under the id org-1's key "taken" derives to, for another tenant.
    let at = Timestamp(Timestamp::now().micros() - 1_000_000);
    let forged = DecisionEvent {
        header: Header {
            source: "someone-else".into(),
            ..header(&hook::ids::decision_id(&hook::ids::key_hash("org-1", "taken")), "org-2", "tokens", at)
        },
        request_id: "theirs".into(),
        idempotency_key: "taken".into(),
        amount: 5,
        outcome: Outcome::ALLOWED,
        reason: Reason::WITHIN_LIMIT,
        policy_id: None,
        policy_version: None,
        window_start: None,
        window_end: None,
        limit: None,
        used_before: None,
        remaining: None,
        retry_after_ms: None,
        token_name: None,
    };
    append(&dir.path().join("ledger.db"), vec![Event::Decision(forged)]);
    assert_eq!(reused_field(hook.check(ask("tokens", None, "taken", 5))), "idempotency_key");
    let after = hook.check(ask("tokens", None, "fresh", 0)).unwrap();
    assert_eq!(after.used_before, Some(10), "5 consumed by k, 5 held by r, nothing by the refused");
}

// Proves contract §9.1 for closes: a retried commit or release with the same body answers the original close, replayed,
// also from a restarted hook (which reads it from the ledger); another amount, or another action, is refused.
#[test]
fn a_retried_close_answers_the_original() {
    let (dir, hook) = hook_with(vec![hard_policy("tokens", 1_000)], HookSettings::default());
    let id = hook.reserve(reserve("tokens", "r-1", 40)).unwrap().reservation_id.unwrap();
    let original = hook.commit(&id, 55).unwrap().unwrap();
    assert!(!original.replayed);
    assert_eq!(hook.commit(&id, 55).unwrap().unwrap(), Closed { replayed: true, ..original.clone() });
    assert!(matches!(hook.commit(&id, 54).unwrap(), Err(Refusal::AlreadyClosed { .. })));
    assert!(matches!(hook.release(&id).unwrap(), Err(Refusal::AlreadyClosed { .. })));
    let released = hook.reserve(reserve("tokens", "r-2", 40)).unwrap().reservation_id.unwrap();
    let release = hook.release(&released).unwrap().unwrap();
    assert_eq!(hook.release(&released).unwrap().unwrap(), Closed { replayed: true, ..release });
    assert!(matches!(hook.commit(&released, 0).unwrap(), Err(Refusal::AlreadyClosed { .. })), "a commit is no release");
    drop(hook);
    let hook = Hook::start(dir.path().join("ledger.db"), HookSettings::default()).unwrap();
    assert_eq!(hook.commit(&id, 55).unwrap().unwrap(), Closed { replayed: true, ..original });
    assert!(matches!(hook.commit(&id, 56).unwrap(), Err(Refusal::AlreadyClosed { .. })));
}

// Proves that a writer that panics (an invariant of the ledger that no longer holds: another connection's trigger
// adds a quarantine row to every entry) says so in health at once, for good, and every request fails after it.
#[test]
fn a_writer_that_panics_says_it_stopped() {
    let (dir, hook) = hook_with(vec![hard_policy("tokens", 1_000)], HookSettings::default());
    assert!(hook.check(ask("tokens", None, "before", 1)).unwrap().allowed());
    rusqlite::Connection::open(dir.path().join("ledger.db"))
        .unwrap()
        .execute_batch(
            "CREATE TRIGGER tamper AFTER INSERT ON entries BEGIN
                 INSERT INTO quarantine (origin, origin_stream, origin_partition, origin_offset, raw, reason_code,
                     reason, quarantined_at)
                 VALUES ('local', 'tamper', NULL, NULL, x'00', 'tamper', 'tamper', 0);
             END",
        )
        .unwrap();
    assert!(matches!(hook.check(ask("tokens", None, "dies", 1)), Err(HookError::Stopped)));
    let health = hook.health();
    assert_eq!(health.recording, "stopped", "said before the caller heard it: {health:?}");
    assert!(hook.stopped().wait(Duration::from_secs(10)), "the writer thread ended");
    let said = hook.health().last_failure.expect("why").message;
    assert!(said.contains("the ledger holds exactly what this batch wrote"), "the panic's message: {said}");
    assert!(matches!(hook.check(ask("tokens", None, "after", 1)), Err(HookError::Stopped)));
}
