//! The hook as a library, on a real ledger file: contention, idempotency under retries, the reservation
//! lifecycle, throttles, SHADOW policies and a restart.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use hook::*;
use ledger::{Batch, Incoming, Ledger, Origin};
use schemas::*;

fn policy(id: &str, limit: i64, window: Window, enforcement: Enforcement, burst: Option<i64>) -> Event {
    Event::Policy(PolicyEvent {
        burst,
        ..PolicyEvent::new(
            Header {
                event_id: format!("policy-{id}"),
                occurred_at: Timestamp::parse_rfc3339("2026-01-01T00:00:00Z").unwrap(),
                tenant: "org-1".into(),
                subject: None,
                metric: "tokens".into(),
                source: "admin".into(),
                api_key: None,
                project: None,
            },
            id,
            limit,
            window,
            enforcement,
            Timestamp::parse_rfc3339("2026-01-01T00:00:00Z").unwrap(),
        )
    })
}

/// `policy` as the plan default (tenant `*`).
fn plan_default(policy: Event) -> Event {
    let Event::Policy(mut policy) = policy else { unreachable!("`policy` builds a PolicyEvent") };
    policy.header.tenant = rules::policy::PLAN_DEFAULT_TENANT.into();
    policy.header.event_id = format!("plan-{}", policy.header.event_id);
    Event::Policy(policy)
}

/// A ledger holding these policies, and a hook on it.
fn hook_with(policies: Vec<Event>) -> (tempfile::TempDir, Hook) {
    hook_with_settings(policies, HookSettings::default())
}

fn hook_with_settings(policies: Vec<Event>, settings: HookSettings) -> (tempfile::TempDir, Hook) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let events =
        policies.into_iter().map(|event| Incoming { event, origin: Origin::Local { name: "t".into() }, raw: None });
    Ledger::open(&path).unwrap().append(&Batch { events: events.collect(), ..Batch::default() }).unwrap();
    let hook = Hook::start(&path, settings).unwrap();
    (dir, hook)
}

fn ask(key: &str, amount: i64) -> Request {
    Request { request_id: Some(format!("req-{key}")), ..Request::one(Who::tenant("org-1"), "tokens", amount, key) }
}

/// A reservation of `amount` tokens for `ttl_ms`.
fn reservation(key: &str, amount: i64, ttl_ms: i64) -> Request {
    Request { ttl_ms: Some(ttl_ms), ..Request::one(Who::tenant("org-1"), "tokens", amount, key) }
}

/// A ReservationEvent of org-1's tokens from another enforcer (it reaches the ledger through ingest).
fn foreign_reservation(
    event_id: &str,
    reservation_id: &str,
    action: ReservationAction,
    occurred_at: Timestamp,
    amount: i64,
    expires_at: Option<Timestamp>,
) -> Event {
    Event::Reservation(ReservationEvent {
        header: Header {
            event_id: event_id.into(),
            occurred_at,
            tenant: "org-1".into(),
            subject: None,
            metric: "tokens".into(),
            source: "other-enforcer".into(),
            api_key: None,
            project: None,
        },
        reservation_id: reservation_id.into(),
        action,
        amount,
        expires_at,
        fencing_token: None,
    })
}

/// The same event, of org-2.
fn of_org_2(mut event: Event) -> Event {
    if let Event::Reservation(r) = &mut event {
        r.header.tenant = "org-2".into();
    }
    event
}

/// Appends `events` to the ledger in `dir` as another writer (ingest) does.
fn append_as_ingest(dir: &tempfile::TempDir, events: Vec<Event>) {
    let incoming =
        events.into_iter().map(|event| Incoming { event, origin: Origin::Local { name: "ingest".into() }, raw: None });
    Ledger::open(dir.path().join("ledger.db"))
        .unwrap()
        .append(&Batch { events: incoming.collect(), ..Batch::default() })
        .unwrap();
}

/// A number the test reads from the ledger in `dir` through a read-only connection of its own.
fn sql_i64(dir: &tempfile::TempDir, sql: &str) -> i64 {
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY;
    let conn = rusqlite::Connection::open_with_flags(dir.path().join("ledger.db"), flags).unwrap();
    conn.busy_timeout(Duration::from_millis(ledger::BUSY_TIMEOUT_MS)).unwrap();
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

fn usage_recorded(dir: &tempfile::TempDir) -> i64 {
    sql_i64(dir, "SELECT COALESCE(SUM(quantity), 0) FROM usage_events")
}

// contract §6: 64 threads with random amounts against one HARD limit: never more than fits, no denial that would have fit, and the ledger agrees.
#[test]
fn concurrent_checks_never_consume_more_than_fits() {
    const LIMIT: i64 = 10_000;
    let (dir, hook) = hook_with(vec![policy("daily", LIMIT, Window::DAY, Enforcement::HARD, None)]);
    let hook = Arc::new(hook);
    let threads: Vec<_> = (0..64u64)
        .map(|t| {
            let hook = Arc::clone(&hook);
            std::thread::spawn(move || {
                let mut seed = t.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                (0..40)
                    .map(|i| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        let amount = (seed % 97) as i64 + 1;
                        hook.check(ask(&format!("t{t}-{i}"), amount)).unwrap()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let decisions: Vec<Decision> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
    let allowed: i64 = decisions.iter().filter(|d| d.allowed()).map(|d| d.amount).sum();
    assert!(allowed <= LIMIT, "allowed {allowed} over the limit {LIMIT}");
    for denied in decisions.iter().filter(|d| !d.allowed()) {
        assert_eq!(denied.reason, Reason::QUOTA_EXCEEDED);
        assert!(denied.amount > LIMIT - allowed, "{denied:?} would have fit: only {allowed} was ever allowed");
    }
    assert!(decisions.iter().any(|d| !d.allowed()), "2,560 requests of about 49 exceed 10,000");
    assert_eq!(usage_recorded(&dir), allowed, "the ledger holds exactly the allowed consumption");
}

// contract §6: the same idempotency key sent concurrently yields one consumption and identical decisions.
#[test]
fn one_key_sent_concurrently_consumes_once() {
    let (dir, hook) = hook_with(vec![policy("daily", 1_000, Window::DAY, Enforcement::HARD, None)]);
    let hook = Arc::new(hook);
    let threads: Vec<_> = (0..16)
        .map(|_| {
            let hook = Arc::clone(&hook);
            std::thread::spawn(move || hook.check(ask("same-key", 7)).unwrap())
        })
        .collect();
    let decisions: Vec<Decision> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let original = decisions.iter().find(|d| !d.replayed).expect("one original decision");
    assert_eq!(decisions.iter().filter(|d| !d.replayed).count(), 1);
    for d in &decisions {
        assert_eq!(Decision { replayed: false, ..d.clone() }, *original);
    }
    assert_eq!(usage_recorded(&dir), 7);
}

/// The reservation lifecycle test's clock, moved by the test only (as the throttle test's): a reservation expires
/// when the test says its time-to-live has passed, not after a sleep a slow machine might not have slept long enough.
static LIFECYCLE_CLOCK_MICROS: AtomicI64 = AtomicI64::new(0);

fn lifecycle_clock() -> Timestamp {
    Timestamp(LIFECYCLE_CLOCK_MICROS.load(Ordering::Relaxed))
}

// contract §5-6: reserve, commit more than reserved (charged), release, double commit and commit after expiry refused.
#[test]
fn the_reservation_lifecycle() {
    let start = Timestamp::parse_rfc3339("2026-06-01T12:00:00Z").unwrap();
    LIFECYCLE_CLOCK_MICROS.store(start.micros(), Ordering::Relaxed);
    let settings = HookSettings { clock: lifecycle_clock, ..HookSettings::default() };
    let (dir, hook) = hook_with_settings(vec![policy("daily", 150, Window::DAY, Enforcement::HARD, None)], settings);
    let reserve = |key: &str, amount: i64, ttl_ms: i64| hook.reserve(reservation(key, amount, ttl_ms)).unwrap();
    let held = reserve("r-1", 100, 60_000);
    let id = held.reservation_id.clone().expect("an allowed RESERVE names its reservation");
    assert!(!hook.check(ask("c-1", 60)).unwrap().allowed(), "the open reservation holds 100 of 150");
    let closed = hook.commit(&id, 130).unwrap().expect("a valid commit");
    assert_eq!((closed.amount, closed.reserved, closed.charged_above_reserved), (130, 100, 30));
    assert!(!hook.check(ask("c-2", 30)).unwrap().allowed(), "130 consumed: 30 more would pass 150");
    assert!(hook.check(ask("c-3", 20)).unwrap().allowed());
    assert!(matches!(hook.commit(&id, 1).unwrap(), Err(Refusal::AlreadyClosed { .. })), "double commit refused");
    let released = reserve("r-2", 0, 60_000).reservation_id.unwrap();
    assert_eq!(hook.release(&released).unwrap().unwrap().amount, 0);
    let short = reserve("r-3", 0, 50).reservation_id.unwrap();
    LIFECYCLE_CLOCK_MICROS.fetch_add(51_000, Ordering::Relaxed);
    assert!(matches!(hook.commit(&short, 0).unwrap(), Err(Refusal::Expired { .. })), "commit after expiry");
    assert!(matches!(hook.commit("rsv-unknown", 1).unwrap(), Err(Refusal::NotFound { .. })));
    assert_eq!(usage_recorded(&dir), 20, "usage rows: only c-3; the commit is a ReservationEvent");
}

/// The throttle test's clock: it moves only when the test moves it, so a slow machine (a CI runner syncing the
/// ledger on every commit) cannot refill a token between two checks.
static THROTTLE_CLOCK_MICROS: AtomicI64 = AtomicI64::new(0);

fn throttle_clock() -> Timestamp {
    Timestamp(THROTTLE_CLOCK_MICROS.load(Ordering::Relaxed))
}

// Throttles: a bucket of 5 refilling 60 per minute allows 5 at once, then RATE_LIMITED with the wait for one token,
// and a retry after exactly that wait is allowed.
#[test]
fn a_throttle_limits_the_rate_not_the_quota() {
    let start = Timestamp::parse_rfc3339("2026-06-01T12:00:30Z").unwrap();
    THROTTLE_CLOCK_MICROS.store(start.micros(), Ordering::Relaxed);
    let settings = HookSettings { clock: throttle_clock, ..HookSettings::default() };
    let (_dir, hook) =
        hook_with_settings(vec![policy("rate", 60, Window::MINUTE, Enforcement::HARD, Some(5))], settings);
    for i in 0..5 {
        assert!(hook.check(ask(&format!("b{i}"), 1)).unwrap().allowed(), "burst {i}");
    }
    let limited = hook.check(ask("b5", 1)).unwrap();
    assert_eq!((limited.reason, limited.code), (Reason::RATE_LIMITED, Code::RATE_LIMITED));
    let wait = limited.retry_after_ms.expect("a retry-after");
    assert!((1_000..=1_001).contains(&wait), "one token refills in a second at 60 a minute: {wait}");
    let room_at = Timestamp(limited.decided_at.micros() + wait * 1_000);
    assert_eq!(limited.resets_at, Some(room_at), "when the bucket has room, not the calendar minute's end");
    THROTTLE_CLOCK_MICROS.fetch_add((wait - 1) * 1_000, Ordering::Relaxed);
    assert!(!hook.check(ask("b6", 1)).unwrap().allowed(), "a millisecond early");
    THROTTLE_CLOCK_MICROS.fetch_add(1_000, Ordering::Relaxed);
    assert!(hook.check(ask("b7", 1)).unwrap().allowed(), "a token refilled after the wait it named");
}

// contract §6: a SHADOW policy records SHADOW_DENIED and allows; a HARD quota denies QUOTA_EXCEEDED until its window resets.
#[test]
fn shadow_policies_allow_and_hard_quotas_deny_until_reset() {
    let (_dir, hook) = hook_with(vec![
        policy("shadow", 10, Window::DAY, Enforcement::SHADOW, None),
        policy("monthly", 30, Window::MONTH, Enforcement::HARD, None),
    ]);
    let shadowed = hook.check(ask("s-1", 20)).unwrap();
    assert_eq!((shadowed.outcome, shadowed.reason), (Outcome::ALLOWED, Reason::SHADOW_DENIED));
    let denied = hook.check(ask("s-2", 20)).unwrap();
    assert_eq!(
        (denied.outcome, denied.reason, denied.code),
        (Outcome::DENIED, Reason::QUOTA_EXCEEDED, Code::QUOTA_EXCEEDED)
    );
    assert_eq!((denied.policy_id.as_deref(), denied.limit, denied.remaining), (Some("monthly"), Some(30), Some(10)));
    let resets_at = denied.resets_at.expect("the month's end");
    let wait = denied.retry_after_ms.unwrap();
    assert!((resets_at.micros() - denied.decided_at.micros()) / 1_000 - wait <= 1, "retry after the reset");
}

// A restarted hook rebuilds its counters from the ledger and answers an old idempotency key with the original decision.
#[test]
fn a_restart_keeps_counters_and_idempotency() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let policies = vec![Incoming {
        event: policy("daily", 100, Window::DAY, Enforcement::HARD, None),
        origin: Origin::Local { name: "t".into() },
        raw: None,
    }];
    Ledger::open(&path).unwrap().append(&Batch { events: policies, ..Batch::default() }).unwrap();
    let first = {
        let hook = Hook::start(&path, HookSettings::default()).unwrap();
        hook.check(ask("k-1", 80)).unwrap()
    };
    let hook = Hook::start(&path, HookSettings::default()).unwrap();
    let again = hook.check(ask("k-1", 80)).unwrap();
    assert!(again.replayed);
    assert_eq!(Decision { replayed: false, ..again }, first);
    assert!(!hook.check(ask("k-2", 30)).unwrap().allowed(), "80 of 100 consumed before the restart");
}

// Another process holding the ledger's write lock past the busy timeout (10 s; a long transaction of an older
// reconcile or export) delays the decisions it holds up instead of failing them (their callers would get an error
// for what a moment's wait records). Here the lock is held until the hook's first try to record the check gave up on
// it: the check waits and is recorded.
#[test]
fn a_write_lock_held_past_the_busy_timeout_delays_decisions_without_failing_them() {
    // Each try of a group's transaction, as the writer times it: the first ends when the busy timeout has passed.
    let (tried, tries) = std::sync::mpsc::sync_channel(8);
    let stages = StageTimer::new(move |stage, _| {
        if stage == Stage::GroupCommit {
            let _ = tried.try_send(());
        }
    });
    let settings = HookSettings { stages: Some(stages), ..HookSettings::default() };
    let (dir, hook) = hook_with_settings(vec![policy("daily", 100, Window::DAY, Enforcement::HARD, None)], settings);
    let other = rusqlite::Connection::open(dir.path().join("ledger.db")).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    // Only tries made while the lock is held count.
    while tries.try_recv().is_ok() {}
    // The lock is let go only once a try has met the busy timeout (said by the writer, not guessed by a sleep); the
    // flag says when, so that the check's return is ordered after it by what happened, not by a clock.
    let released = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let releases = std::thread::spawn({
        let released = released.clone();
        move || {
            let limit = Duration::from_millis(6 * ledger::BUSY_TIMEOUT_MS);
            tries.recv_timeout(limit).expect("the hook tried to record the check, and met the busy timeout");
            released.store(true, std::sync::atomic::Ordering::SeqCst);
            other.execute_batch("ROLLBACK").unwrap();
        }
    });
    let decision = hook.check(ask("held-up", 30)).unwrap();
    assert!(decision.allowed(), "{decision:?}");
    assert!(released.load(std::sync::atomic::Ordering::SeqCst), "recorded while another held the write lock");
    releases.join().unwrap();
    assert!(!hook.check(ask("after", 71)).unwrap().allowed(), "the 30 are counted: 30 + 71 > 100");
    assert_eq!(sql_i64(&dir, "SELECT COUNT(*) FROM entries WHERE event_type = 'UsageEvent'"), 1);
}

// A group the ledger refuses (here a trigger another process adds makes every insert fail, as a full disk would)
// counts for nothing: its consumption, its reservations and closes, its throttle tokens and its idempotency keys are
// taken back, and once the ledger takes writes again a retry of the same key decides afresh.
#[test]
fn a_group_the_ledger_refuses_is_taken_back() {
    let (dir, hook) = hook_with(vec![
        policy("daily", 100, Window::DAY, Enforcement::HARD, None),
        // A throttle of 100 tokens that refills one a day: what the failed requests took would still be missing.
        policy("rate", 1, Window::DAY, Enforcement::HARD, Some(100)),
    ]);
    let reserve = |key: &str, amount: i64| hook.reserve(reservation(key, amount, 600_000));
    assert!(hook.check(ask("k-1", 30)).unwrap().allowed());
    let held = reserve("r-1", 20).unwrap().reservation_id.expect("an allowed RESERVE names its reservation");
    let other = rusqlite::Connection::open(dir.path().join("ledger.db")).unwrap();
    other
        .execute_batch(
            "CREATE TRIGGER injected BEFORE INSERT ON entries BEGIN SELECT RAISE(ABORT, 'injected failure'); END",
        )
        .unwrap();
    let refused = |result: Result<String, HookError>| match result {
        Err(HookError::Ledger(message)) => assert!(message.contains("injected failure"), "{message}"),
        other => panic!("the ledger refuses every group: {other:?}"),
    };
    refused(hook.check(ask("k-2", 40)).map(|d| format!("{d:?}")));
    refused(reserve("r-2", 10).map(|d| format!("{d:?}")));
    refused(hook.commit(&held, 20).map(|c| format!("{c:?}")));
    let failing = hook.health();
    assert_eq!((failing.recording, failing.failed_groups), ("failing", 3), "{failing:?}");
    let last = failing.last_failure.expect("the last failure");
    assert!(last.message.contains("injected failure") && last.requests == 1, "{last:?}");
    other.execute_batch("DROP TRIGGER injected").unwrap();

    let retried = hook.check(ask("k-2", 40)).unwrap();
    assert!(retried.allowed() && !retried.replayed, "decided afresh, with the 40 and the 10 given back: {retried:?}");
    assert_eq!(retried.remaining, Some(10), "30 consumed, 20 held, 40 now");
    assert!(hook.commit(&held, 20).unwrap().is_ok(), "the reservation is still open");
    assert!(hook.check(ask("k-3", 10)).unwrap().allowed(), "the bucket has the 10 the failed reserve took back");
    let denied = hook.check(ask("k-4", 1)).unwrap();
    assert!(!denied.allowed(), "30 + 40 + 20 committed + 10 = 100: {denied:?}");
    assert_eq!(usage_recorded(&dir), 80, "k-1, k-2 and k-3; the commit is a ReservationEvent");
    let recovered = hook.health();
    assert_eq!((recovered.recording, recovered.failed_groups), ("ok", 3), "{recovered:?}");
}

// A replay of a decision recorded before is an answer of the ledger's, whatever the group it shares: when new
// requests of its group make the ledger refuse the group, the replay still answers the recorded decision, not a 500
// saying "nothing of it was recorded", which would be false. The restarted hook's writer waits for groups of eight,
// so the eight calls share one.
#[test]
fn a_replay_in_a_refused_group_answers_the_recorded_decision() {
    let (dir, hook) = hook_with(vec![policy("daily", 1_000, Window::DAY, Enforcement::HARD, None)]);
    let first = hook.check(ask("k-1", 10)).unwrap();
    drop(hook);
    let settings = HookSettings { group_wait_us: 10_000_000, group_max_requests: 8, ..HookSettings::default() };
    let hook = Hook::start(dir.path().join("ledger.db"), settings).unwrap();
    let other = rusqlite::Connection::open(dir.path().join("ledger.db")).unwrap();
    other
        .execute_batch(
            "CREATE TRIGGER injected BEFORE INSERT ON entries BEGIN SELECT RAISE(ABORT, 'injected failure'); END",
        )
        .unwrap();
    let hook = Arc::new(hook);
    let calls: Vec<_> = (0..8)
        .map(|n| {
            let hook = Arc::clone(&hook);
            let key = if n % 2 == 0 { "k-1".to_string() } else { format!("new-{n}") };
            std::thread::spawn(move || (key.clone(), hook.check(ask(&key, 10))))
        })
        .collect();
    for call in calls {
        match call.join().unwrap() {
            (key, Ok(replay)) if key == "k-1" => {
                assert!(replay.replayed && replay.decision_id == first.decision_id, "{replay:?}")
            }
            (key, Err(HookError::Ledger(_))) if key != "k-1" => {}
            (key, answer) => panic!("{key}: {answer:?}"),
        }
    }
    assert_eq!(hook.health().failed_groups, 1, "the eight calls shared one group");
    other.execute_batch("DROP TRIGGER injected").unwrap();
}

// One hook per ledger file: a second one, in this process or another, would decide against a state that misses the
// first one's decisions. It is refused while any handle of the first lives, and starts once the last is dropped.
#[test]
fn a_second_hook_on_the_same_ledger_is_refused() {
    let (dir, hook) = hook_with(vec![policy("daily", 100, Window::DAY, Enforcement::HARD, None)]);
    let path = dir.path().join("ledger.db");
    let handle = hook.clone();
    drop(hook);
    let refused = Hook::start(&path, HookSettings::default()).err().expect("a second hook is refused");
    assert!(
        matches!(&refused, StartError::Lock(ledger::LockError::Held { role, .. }) if role == "hook"),
        "{refused:?}"
    );
    assert!(handle.check(ask("k-1", 80)).unwrap().allowed(), "the first goes on deciding");
    drop(handle);
    let next = Hook::start(&path, HookSettings::default()).unwrap();
    assert!(!next.check(ask("k-2", 30)).unwrap().allowed(), "80 of 100 consumed by the first");
}

// Usage that another writer (ingest) records while the hook runs counts against the hook's limits at its next decision.
#[test]
fn usage_recorded_by_ingest_counts_at_the_next_decision() {
    let (dir, hook) = hook_with(vec![policy("daily", 100, Window::DAY, Enforcement::HARD, None)]);
    assert!(hook.check(ask("h-1", 10)).unwrap().allowed());
    let usage = Event::Usage(UsageEvent {
        header: Header {
            event_id: "from-kafka-1".into(),
            occurred_at: Timestamp::now(),
            tenant: "org-1".into(),
            subject: Some("batch-job".into()),
            metric: "tokens".into(),
            source: "billing-pipeline".into(),
            api_key: None,
            project: None,
        },
        quantity: 85,
        request_id: None,
        attributes: Default::default(),
    });
    let incoming = Incoming { event: usage, origin: Origin::Local { name: "ingest".into() }, raw: None };
    Ledger::open(dir.path().join("ledger.db"))
        .unwrap()
        .append(&Batch { events: vec![incoming], ..Batch::default() })
        .unwrap();
    let denied = hook.check(ask("h-2", 10)).unwrap();
    assert_eq!((denied.outcome, denied.used_before, denied.remaining), (Outcome::DENIED, Some(95), Some(5)));
    assert!(hook.check(ask("h-3", 5)).unwrap().allowed());
}

// Serve's outbox: the decisions and usage the hook recorded are pending; acknowledgements recorded through the
// hook's writer take them out, and one of no outbox entry is refused with nothing recorded.
#[test]
fn acknowledgements_recorded_through_the_writer_leave_the_outbox() {
    let (dir, hook) = hook_with(vec![policy("daily", 100, Window::DAY, Enforcement::HARD, None)]);
    for i in 0..3 {
        assert!(hook.check(ask(&format!("o-{i}"), 1)).unwrap().allowed());
    }
    let reader = Ledger::open_read_only(dir.path().join("ledger.db")).unwrap();
    let pending = reader.outbox_pending(100).unwrap();
    assert_eq!(pending.len(), 6, "a DecisionEvent and a UsageEvent per check");
    let acknowledged: Vec<(u64, String)> = pending.iter().map(|e| (e.seq, "quota.decisions".to_string())).collect();
    let refused = hook.record_published(vec![(acknowledged[0].0, "x".into()), (1, "quota.decisions".into())]);
    assert!(
        matches!(refused, Err(HookError::Ledger(ref message)) if message.contains("not in the outbox")),
        "{refused:?}"
    );
    assert_eq!(reader.outbox_pending_count().unwrap(), 6, "the refused acknowledgements recorded nothing");
    hook.record_published(acknowledged[..4].to_vec()).unwrap();
    assert_eq!(
        reader.outbox_pending(100).unwrap().iter().map(|e| e.seq).collect::<Vec<_>>(),
        [pending[4].seq, pending[5].seq]
    );
    hook.record_published(acknowledged[4..].to_vec()).unwrap();
    assert_eq!(reader.outbox_pending_count().unwrap(), 0);
    assert!(hook.check(ask("o-after", 1)).unwrap().allowed(), "the writer goes on deciding");
}

// contract §3: a SUBJECT policy applies to every subject separately; requests without a subject are a group of their own
// (as reconcile judges them), not the tenant's sum.
#[test]
fn a_subject_policy_counts_requests_without_a_subject_apart() {
    let Event::Policy(mut per_subject) = policy("per-subject", 5, Window::DAY, Enforcement::HARD, None) else {
        unreachable!()
    };
    per_subject.scope = Scope::SUBJECT;
    let (_dir, hook) = hook_with(vec![Event::Policy(per_subject)]);
    let of = |subject: Option<&str>, key: &str, amount: i64| {
        let mut request = ask(key, amount);
        request.who.subject = subject.map(String::from);
        hook.check(request).unwrap()
    };
    assert!(of(Some("alice"), "a-1", 5).allowed(), "alice's whole limit");
    assert!(!of(Some("alice"), "a-2", 1).allowed(), "alice is out");
    let without = of(None, "n-1", 1);
    assert!(without.allowed(), "alice's use is not charged to requests without a subject: {without:?}");
    assert_eq!(without.remaining, Some(4));
    assert!(of(None, "n-2", 4).allowed());
    assert!(!of(None, "n-3", 1).allowed(), "requests without a subject share one limit of their own");
    assert_eq!(of(Some("bob"), "b-1", 1).remaining, Some(4), "bob is charged for none of it");
}

// Of two exhausted HARD quotas, the denial names the one that resets last: told to wait for the minute's end, a
// client would find the month still exhausted then.
#[test]
fn a_denial_names_the_quota_that_resets_last() {
    let (_dir, hook) = hook_with(vec![
        policy("minute-cap", 2, Window::MINUTE, Enforcement::HARD, None),
        policy("month-cap", 2, Window::MONTH, Enforcement::HARD, None),
    ]);
    assert!(hook.check(ask("m-1", 2)).unwrap().allowed());
    let denied = hook.check(ask("m-2", 1)).unwrap();
    assert_eq!((denied.reason, denied.policy_id.as_deref()), (Reason::QUOTA_EXCEEDED, Some("month-cap")));
    let month_end = rules::window::bounds(Window::MONTH, denied.decided_at).1;
    assert_eq!(denied.resets_at, Some(month_end));
}

/// The time zone test's clock: set by the test to the local times it asks about.
static ZONE_CLOCK_MICROS: AtomicI64 = AtomicI64::new(0);

fn zone_clock() -> Timestamp {
    Timestamp(ZONE_CLOCK_MICROS.load(Ordering::Relaxed))
}

// A HARD DAY policy in New York (PolicyEvent v4 `time_zone`): 23:30 and 00:30 the next day are one UTC day but two New
// York days, so a denial at 23:30 resets at the local midnight thirty minutes later and 00:30 starts afresh; and a
// policy of another zone recorded while the hook runs counts, in its own days, the consumption recorded before it.
#[test]
fn a_new_york_day_resets_at_local_midnight() {
    let at = |text: &str| Timestamp::parse_rfc3339(text).unwrap();
    let zoned = |id: &str, limit: i64, zone: &str| {
        let Event::Policy(p) = policy(id, limit, Window::DAY, Enforcement::HARD, None) else { unreachable!() };
        Event::Policy(PolicyEvent { time_zone: Some(zone.into()), ..p })
    };
    // 23:30 EST on Nov 16 in New York.
    ZONE_CLOCK_MICROS.store(at("2026-11-17T04:30:00Z").micros(), Ordering::Relaxed);
    let settings = HookSettings { clock: zone_clock, ..HookSettings::default() };
    let (dir, hook) = hook_with_settings(vec![zoned("daily-ny", 10, "America/New_York")], settings);
    assert!(hook.check(ask("z-1", 8)).unwrap().allowed());
    let denied = hook.check(ask("z-2", 8)).unwrap();
    assert_eq!((denied.reason, denied.remaining), (Reason::QUOTA_EXCEEDED, Some(2)), "{denied:?}");
    let midnight = at("2026-11-17T05:00:00Z");
    assert_eq!((denied.window_start, denied.resets_at), (Some(at("2026-11-16T05:00:00Z")), Some(midnight)));
    assert_eq!(denied.retry_after_ms, Some(30 * 60 * 1_000), "until the local midnight");
    // 00:30 on Nov 17 in New York: the same UTC day, a new New York day.
    ZONE_CLOCK_MICROS.store(at("2026-11-17T05:30:00Z").micros(), Ordering::Relaxed);
    let allowed = hook.check(ask("z-3", 8)).unwrap();
    assert!(allowed.allowed(), "{allowed:?}");
    assert_eq!((allowed.window_start, allowed.remaining), (Some(midnight), Some(2)));
    // Kolkata's day (from 18:30 UTC) holds both 8s: a policy in that zone, recorded now, is decided against 16.
    append_as_ingest(&dir, vec![zoned("daily-in", 17, "Asia/Kolkata")]);
    let denied = hook.check(ask("z-4", 2)).unwrap();
    assert_eq!(
        (denied.reason, denied.policy_id.as_deref(), denied.used_before),
        (Reason::QUOTA_EXCEEDED, Some("daily-in"), Some(16)),
        "{denied:?}"
    );
    assert_eq!(denied.resets_at, Some(at("2026-11-17T18:30:00Z")));
}

static SHADOW_CLOCK_MICROS: AtomicI64 = AtomicI64::new(0);

fn shadow_clock() -> Timestamp {
    Timestamp(SHADOW_CLOCK_MICROS.load(Ordering::Relaxed))
}

// A SHADOW throttle says what a HARD one would have done: a request it would have denied takes no tokens, so after
// the bucket's refill time it has room again, as a HARD bucket would.
#[test]
fn a_shadow_throttle_refills_as_a_hard_one_would() {
    let start = Timestamp::parse_rfc3339("2026-06-01T12:00:30Z").unwrap();
    SHADOW_CLOCK_MICROS.store(start.micros(), Ordering::Relaxed);
    let settings = HookSettings { clock: shadow_clock, ..HookSettings::default() };
    let (_dir, hook) =
        hook_with_settings(vec![policy("shadow-rate", 60, Window::MINUTE, Enforcement::SHADOW, Some(2))], settings);
    let reasons: Vec<Reason> = (0..20).map(|i| hook.check(ask(&format!("s{i}"), 1)).unwrap().reason).collect();
    assert_eq!(reasons.iter().filter(|r| **r == Reason::WITHIN_LIMIT).count(), 2, "{reasons:?}");
    assert_eq!(reasons.iter().filter(|r| **r == Reason::SHADOW_DENIED).count(), 18, "{reasons:?}");
    SHADOW_CLOCK_MICROS.fetch_add(2_000_000, Ordering::Relaxed);
    let refilled = hook.check(ask("s-later", 2)).unwrap();
    assert_eq!(refilled.reason, Reason::WITHIN_LIMIT, "two tokens refill in two seconds: {refilled:?}");
}

// Closes of one reservation decided in the same group: the first closes it, every other (the same release, retried)
// answers it again (contract §9.1), none is refused as expired (the ledger, which holds no close yet, said so for a live
// reservation), and a commit after them is refused as already closed.
#[test]
fn closes_in_one_group_after_the_first_answer_it_again() {
    let settings = HookSettings { group_wait_us: 20_000, ..HookSettings::default() };
    let (_dir, hook) = hook_with_settings(vec![policy("daily", 1_000, Window::DAY, Enforcement::HARD, None)], settings);
    let hook = Arc::new(hook);
    for round in 0..5 {
        let reserved = hook.reserve(reservation(&format!("r-{round}"), 1, 600_000)).unwrap();
        let id = reserved.reservation_id.unwrap();
        let barrier = Arc::new(std::sync::Barrier::new(4));
        let closes: Vec<_> = (0..4)
            .map(|_| {
                let (hook, id, barrier) = (hook.clone(), id.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    hook.release(&id).unwrap()
                })
            })
            .collect();
        let answers: Vec<_> = closes.into_iter().map(|t| t.join().unwrap()).collect();
        let original = answers.iter().find(|a| matches!(a, Ok(c) if !c.replayed)).expect("one close").clone();
        assert_eq!(
            answers.iter().filter(|a| matches!(a, Ok(c) if !c.replayed)).count(),
            1,
            "round {round}: {answers:?}"
        );
        let again = |a: &Result<Closed, Refusal>| match (a, &original) {
            (Ok(a), Ok(o)) => a.replayed && Closed { replayed: false, ..a.clone() } == *o,
            _ => false,
        };
        assert_eq!(answers.iter().filter(|a| again(a)).count(), 3, "round {round}: {answers:?}");
        assert!(matches!(hook.commit(&id, 1).unwrap(), Err(Refusal::AlreadyClosed { .. })), "round {round}");
    }
}

// contract §5: a COMMIT dated at or before its reservation's expiry is valid even when it arrives after the expiry (from
// another enforcer, through ingest), and its amount is consumption the next decision counts; one dated after the
// expiry is refused and counts nothing.
#[test]
fn a_late_but_valid_commit_from_ingest_counts() {
    let (dir, hook) = hook_with(vec![policy("daily", 10, Window::DAY, Enforcement::HARD, None)]);
    assert_eq!(hook.check(ask("before", 0)).unwrap().remaining, Some(10));
    let now = Timestamp::now().micros();
    let at = |seconds_ago: i64| Timestamp(now - seconds_ago * 1_000_000);
    let reservation = foreign_reservation;
    append_as_ingest(
        &dir,
        vec![
            // Expired a second ago; its COMMIT is dated before that.
            reservation("r1-reserve", "r1", ReservationAction::RESERVE, at(3), 6, Some(at(1))),
            reservation("r1-commit", "r1", ReservationAction::COMMIT, at(2), 6, None),
            // Expired a second ago; its COMMIT is dated after that: refused.
            reservation("r2-reserve", "r2", ReservationAction::RESERVE, at(3), 3, Some(at(1))),
            reservation("r2-commit", "r2", ReservationAction::COMMIT, at(0), 3, None),
        ],
    );
    let after = hook.check(ask("after", 0)).unwrap();
    assert_eq!((after.used_before, after.remaining), (Some(6), Some(4)), "r1's commit counts, r2's does not");
    drop(hook);
    let restarted = Hook::start(dir.path().join("ledger.db"), HookSettings::default()).unwrap();
    let again = restarted.check(ask("after-restart", 0)).unwrap();
    assert_eq!(again.used_before, Some(6), "the same from a fold of the ledger at start");
}

// A throttle that never refills (limit 0) names the longest wait, a month, and the hook goes on deciding: the
// retry's instant overflowed and stopped the writer thread.
#[test]
fn a_throttle_that_never_refills_names_a_month() {
    let (_dir, hook) = hook_with(vec![policy("zero-rate", 0, Window::MINUTE, Enforcement::HARD, Some(2))]);
    assert!(hook.check(ask("z-1", 2)).unwrap().allowed());
    let limited = hook.check(ask("z-2", 1)).unwrap();
    assert_eq!(
        (limited.reason, limited.retry_after_ms),
        (Reason::RATE_LIMITED, Some(hook::buckets::RETRY_AFTER_MAX_MS))
    );
    assert!(hook.check(ask("z-2", 1)).unwrap().replayed, "the writer still answers");
}

// A reservation from another enforcer may hold for longer than the month and a day of usage the hook folds at
// start, and a close of it dated that long ago is still valid when it came in time (contract §5): a restarted hook
// counts the open one and not the closed one, and a late release of the open one, dated 39 days ago, frees it.
// The fold at start skipped every reservation event older than 32 days, and the fold while running skipped such
// closes.
#[test]
fn reservations_older_than_a_month_hold_until_they_close() {
    let (dir, hook) = hook_with(vec![policy("daily", 10, Window::DAY, Enforcement::HARD, None)]);
    drop(hook);
    let now = Timestamp::now().micros();
    let days_ago = |days: i64| Timestamp(now - days * 24 * 3_600 * 1_000_000);
    let reservation = foreign_reservation;
    let append = |events| append_as_ingest(&dir, events);
    append(vec![
        reservation("open-reserve", "open", ReservationAction::RESERVE, days_ago(40), 7, Some(days_ago(-10))),
        reservation("closed-reserve", "closed", ReservationAction::RESERVE, days_ago(40), 3, Some(days_ago(-10))),
        reservation("closed-commit", "closed", ReservationAction::COMMIT, days_ago(35), 3, None),
    ]);
    let hook = Hook::start(dir.path().join("ledger.db"), HookSettings::default()).unwrap();
    let started = hook.check(ask("started", 0)).unwrap();
    assert_eq!((started.used_before, started.remaining), (Some(7), Some(3)), "the open reservation holds 7");
    append(vec![reservation("open-release", "open", ReservationAction::RELEASE, days_ago(39), 0, None)]);
    let released = hook.check(ask("released", 0)).unwrap();
    assert_eq!((released.used_before, released.remaining), (Some(0), Some(10)), "the late release freed it");
}

// contract §5: reservations are judged by event time, not arrival order, in the hook as in reconcile. Through ingest: a
// COMMIT that arrives before its RESERVE counts and the RESERVE then holds nothing; a second RESERVE of a closed
// reservation holds nothing; of two closes the earlier by event time counts, though it arrives second. The hook
// judged in ledger order: it held 5 + 4 and counted 2 instead of counting 3 + 9, so it denied what fit and would
// have allowed what did not.
#[test]
fn reservations_from_ingest_are_judged_by_event_time() {
    let (dir, hook) = hook_with(vec![policy("daily", 20, Window::DAY, Enforcement::HARD, None)]);
    let now = Timestamp::now().micros();
    let at = |seconds_ago: i64| Timestamp(now - seconds_ago * 1_000_000);
    let in_an_hour = Some(at(-3_600));
    let reservation = foreign_reservation;
    append_as_ingest(
        &dir,
        vec![
            reservation("a-commit", "a", ReservationAction::COMMIT, at(5), 3, None),
            reservation("b-reserve", "b", ReservationAction::RESERVE, at(9), 4, in_an_hour),
            reservation("b-release", "b", ReservationAction::RELEASE, at(8), 0, None),
            reservation("c-reserve", "c", ReservationAction::RESERVE, at(9), 6, in_an_hour),
            reservation("c-commit-late", "c", ReservationAction::COMMIT, at(4), 2, None),
            reservation("d-reserve", "d", ReservationAction::RESERVE, at(9), 1, in_an_hour),
            reservation("d-release", "d", ReservationAction::RELEASE, at(3), 0, None),
        ],
    );
    assert_eq!(hook.check(ask("first", 0)).unwrap().used_before, Some(2), "c's late-dated commit, for now");
    append_as_ingest(
        &dir,
        vec![
            reservation("a-reserve", "a", ReservationAction::RESERVE, at(9), 5, in_an_hour),
            reservation("b-reserve-again", "b", ReservationAction::RESERVE, at(7), 4, in_an_hour),
            reservation("c-commit-early", "c", ReservationAction::COMMIT, at(6), 9, None),
            reservation("d-commit-early", "d", ReservationAction::COMMIT, at(4), 0, None),
        ],
    );
    let expected = Some(3 + 9);
    assert_eq!(hook.check(ask("running", 0)).unwrap().used_before, expected, "a's 3 and c's earlier 9, nothing held");
    let ledger = Ledger::open_read_only(dir.path().join("ledger.db")).unwrap();
    // As of when every reservation expired: reconcile judges them then.
    let plan = reconcile::plan(&ledger, at(-7_200), &mut |_| {}).unwrap();
    drop(hook);
    let restarted = Hook::start(dir.path().join("ledger.db"), HookSettings::default()).unwrap();
    assert_eq!(restarted.check(ask("restarted", 0)).unwrap().used_before, expected, "the same folded at start");
    let refusal = restarted.release("d").unwrap().unwrap_err();
    assert_eq!(refusal, Refusal::AlreadyClosed { reservation_id: "d".into(), by: "COMMIT".into() }, "by event time");
    let mut refused: Vec<&str> = plan
        .adjustments
        .iter()
        .filter(|a| a.kind == AdjustmentKind::REFUSED_TRANSITION)
        .flat_map(|a| a.refs.iter().map(String::as_str))
        .collect();
    refused.sort();
    assert_eq!(refused, ["b-reserve-again", "c-commit-late", "d-release"], "reconcile refuses the same");
}

// A reservation is a tenant's: another tenant's events with the same reservation_id (producers of other teams
// choose their ids) are another reservation, as reconcile judges them. org-2's RESERVE and COMMIT of `r-1` leave
// org-1's `r-1` alone: org-1's own COMMIT of 90 counts. The hook judged them as one reservation: org-2's COMMIT
// closed org-1's, and org-1's was refused, so the hook counted nothing for org-1.
#[test]
fn another_tenants_reservation_of_the_same_id_is_another_reservation() {
    let (dir, hook) = hook_with(vec![policy("daily", 100, Window::DAY, Enforcement::HARD, None)]);
    let now = Timestamp::now().micros();
    let at = |seconds_ago: i64| Timestamp(now - seconds_ago * 1_000_000);
    let in_an_hour = Some(at(-3_600));
    let reservation = foreign_reservation;
    append_as_ingest(
        &dir,
        vec![
            reservation("a-reserve", "r-1", ReservationAction::RESERVE, at(10), 100, in_an_hour),
            of_org_2(reservation("b-reserve", "r-1", ReservationAction::RESERVE, at(9), 50, in_an_hour)),
            of_org_2(reservation("b-commit", "r-1", ReservationAction::COMMIT, at(8), 40, None)),
            reservation("a-commit", "r-1", ReservationAction::COMMIT, at(7), 90, None),
        ],
    );
    let running = hook.check(ask("running", 0)).unwrap();
    assert_eq!((running.used_before, running.remaining), (Some(90), Some(10)), "org-1's commit, nothing held");
    drop(hook);
    let restarted = Hook::start(dir.path().join("ledger.db"), HookSettings::default()).unwrap();
    assert_eq!(restarted.check(ask("restarted", 0)).unwrap().used_before, Some(90), "the same folded at start");
}

// Contract §3 "no policy of its own for the same metric, scope and window", for quotas: the tenant's own MONTH
// throttle is no quota, so the plan's HARD MONTH quota still denies once exhausted (were the throttle to cover it,
// the tenant's only limit would be the throttle's burst).
#[test]
fn an_own_throttle_leaves_the_plan_quota_enforced() {
    let (_dir, hook) = hook_with(vec![
        plan_default(policy("plan-monthly", 5, Window::MONTH, Enforcement::HARD, None)),
        policy("own-rate", 1_000, Window::MONTH, Enforcement::HARD, Some(100)),
    ]);
    assert!(hook.check(ask("p-1", 5)).unwrap().allowed(), "the plan's whole quota, within the bucket");
    let denied = hook.check(ask("p-2", 1)).unwrap();
    assert_eq!(
        (denied.reason, denied.policy_id.as_deref(), denied.limit, denied.remaining),
        (Reason::QUOTA_EXCEEDED, Some("plan-monthly"), Some(5), Some(0))
    );
}

// The same rule for throttles: the tenant's own quota is no throttle, so the plan's throttle of the same scope and
// window still limits its rate.
#[test]
fn an_own_quota_leaves_the_plan_throttle_enforced() {
    let (_dir, hook) = hook_with(vec![
        plan_default(policy("plan-rate", 0, Window::MONTH, Enforcement::HARD, Some(2))),
        policy("own-monthly", 1_000, Window::MONTH, Enforcement::HARD, None),
    ]);
    assert!(hook.check(ask("r-1", 2)).unwrap().allowed(), "the plan's burst, within the own quota");
    let limited = hook.check(ask("r-2", 1)).unwrap();
    assert_eq!((limited.reason, limited.policy_id.as_deref()), (Reason::RATE_LIMITED, Some("plan-rate")));
}

// A close names no tenant: when other enforcers' open reservations of two tenants share the id and the caller may
// close either (the library, a `*` token), the hook refuses to guess (it closed the first by tenant name, charging
// one tenant another's commit) and closes nothing; a caller of one tenant closes that tenant's.
#[test]
fn a_close_of_an_id_two_tenants_hold_open_is_not_a_guess() {
    let (dir, hook) = hook_with(vec![policy("daily", 100, Window::DAY, Enforcement::HARD, None)]);
    let now = Timestamp::now().micros();
    let at = |seconds_ago: i64| Timestamp(now - seconds_ago * 1_000_000);
    let org_2 =
        of_org_2(foreign_reservation("b-reserve", "r-1", ReservationAction::RESERVE, at(5), 50, Some(at(-3_600))));
    let org_1 = foreign_reservation("a-reserve", "r-1", ReservationAction::RESERVE, at(5), 30, Some(at(-3_600)));
    append_as_ingest(&dir, vec![org_1, org_2]);
    assert_eq!(hook.check(ask("before", 0)).unwrap().used_before, Some(30), "org-1's hold");
    match hook.commit("r-1", 7) {
        Err(HookError::BadRequest { field: "reservation_id", message }) => {
            assert!(message.contains("2 tenants (org-1, org-2)"), "{message}")
        }
        other => panic!("a guess: {other:?}"),
    }
    assert_eq!(hook.check(ask("after", 0)).unwrap().used_before, Some(30), "nothing closed");
}

/// `policy` of another metric.
fn of_metric(policy: Event, metric: &str) -> Event {
    let Event::Policy(mut policy) = policy else { unreachable!("`policy` builds a PolicyEvent") };
    policy.header.metric = metric.into();
    policy.header.event_id = format!("{}-{metric}", policy.header.event_id);
    Event::Policy(policy)
}

fn amounts(key: &str, requests: i64, tokens: i64) -> Request {
    let amounts = [("requests".to_string(), requests), ("tokens".to_string(), tokens)].into();
    Request { request_id: Some(format!("req-{key}")), ..Request::several(Who::tenant("org-1"), amounts, key) }
}

/// The query of org-1's quotas of `metric`.
fn quotas_of(metric: &str) -> QuotaQuery {
    QuotaQuery { who: Who::tenant("org-1"), metric: Some(metric.into()) }
}

/// What the hook counts as consumed of org-1's `metric` under its one policy, read without consuming.
fn consumed(hook: &Hook, metric: &str) -> i64 {
    hook.quotas(quotas_of(metric)).unwrap().quotas[0].consumed.unwrap()
}

// One request of several metrics is allowed on all of them or on none. Every policy of every metric
// is evaluated first; a denial names the metric and policy that denied, the metric that had room says DENIED
// WITHIN_LIMIT, and nothing is consumed on either. An allowed one writes the alerts of each metric's windows.
#[test]
fn several_metrics_in_one_request_are_all_or_nothing() {
    let (dir, hook) = hook_with(vec![
        policy("tokens-month", 1_000, Window::MONTH, Enforcement::HARD, None),
        of_metric(policy("requests-month", 3, Window::MONTH, Enforcement::HARD, None), "requests"),
    ]);
    let first = hook.check_amounts(amounts("k-1", 1, 600)).unwrap();
    assert!(first.allowed() && !first.replayed());
    let metrics: Vec<&str> = first.decisions.iter().map(|d| d.metric.as_str()).collect();
    assert_eq!(metrics, ["requests", "tokens"]);
    assert_eq!(first.deciding().metric, "tokens", "600 of 1,000 is nearer its limit than 1 of 3");
    assert_ne!(first.decisions[0].decision_id, first.decisions[1].decision_id);
    assert!(first.decisions.iter().all(|d| d.request_id == "req-k-1"));

    let denied = hook.check_amounts(amounts("k-2", 1, 500)).unwrap();
    assert!(!denied.allowed());
    let by = denied.deciding();
    assert_eq!(
        (by.metric.as_str(), by.policy_id.as_deref(), by.reason, by.remaining),
        ("tokens", Some("tokens-month"), Reason::QUOTA_EXCEEDED, Some(400))
    );
    let other = &denied.decisions[0];
    assert_eq!(
        (other.metric.as_str(), other.outcome, other.reason),
        ("requests", Outcome::DENIED, Reason::WITHIN_LIMIT)
    );
    assert_eq!((consumed(&hook, "requests"), consumed(&hook, "tokens")), (1, 600), "a denial consumes nothing");

    assert_eq!(alerts_recorded(&dir), [], "60% at most, and a denial alerts nothing");

    // The other way round: requests run out first. The request that fills both windows alerts each of them at
    // every threshold, as a request of one metric would.
    assert!(hook.check_amounts(amounts("k-3", 2, 400)).unwrap().allowed());
    let thresholds: Vec<i64> = alerts_recorded(&dir).iter().map(|(threshold, ..)| *threshold).collect();
    assert_eq!(thresholds, [80, 90, 100, 80, 90, 100]);
    let denied = hook.check_amounts(amounts("k-4", 1, 0)).unwrap();
    assert_eq!((denied.deciding().metric.as_str(), denied.deciding().reason), ("requests", Reason::QUOTA_EXCEEDED));
    assert_eq!((consumed(&hook, "requests"), consumed(&hook, "tokens")), (3, 1_000));
}

fn reserve_amounts(key: &str, requests: i64, tokens: i64) -> Request {
    Request { ttl_ms: Some(60_000), ..amounts(key, requests, tokens) }
}

/// What the hook counts as held by open reservations of org-1's `metric` under its one policy.
fn held(hook: &Hook, metric: &str) -> i64 {
    hook.quotas(quotas_of(metric)).unwrap().quotas[0].held.unwrap()
}

// Reservations of several metrics: a reserve of several metrics holds each under a reservation of its own, or holds
// none; each is committed or released on its own; the key replays the same reservations, before and after a restart,
// and a check with that key is refused as another kind of request.
#[test]
fn several_metrics_reserved_at_once_are_all_or_nothing() {
    let (dir, hook) = hook_with(vec![
        policy("tokens-month", 1_000, Window::MONTH, Enforcement::HARD, None),
        of_metric(policy("requests-month", 3, Window::MONTH, Enforcement::HARD, None), "requests"),
    ]);
    let first = hook.reserve_amounts(reserve_amounts("r-1", 1, 850)).unwrap();
    assert!(first.allowed());
    let ids: Vec<String> = first.decisions.iter().map(|d| d.reservation_id.clone().unwrap()).collect();
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1], "a reservation per metric");
    assert_eq!((held(&hook, "requests"), held(&hook, "tokens")), (1, 850));

    // 850 more tokens do not fit beside the 850 held: neither metric is held.
    let denied = hook.reserve_amounts(reserve_amounts("r-2", 1, 850)).unwrap();
    assert!(!denied.allowed());
    assert_eq!((denied.deciding().metric.as_str(), denied.deciding().reason), ("tokens", Reason::QUOTA_EXCEEDED));
    assert!(denied.decisions.iter().all(|d| d.reservation_id.is_none()));
    assert_eq!((held(&hook, "requests"), held(&hook, "tokens")), (1, 850), "a denial holds nothing");

    // Each closes on its own: the tokens committed at what was used, the request released.
    let tokens = hook.commit(&ids[1], 700).unwrap().unwrap();
    assert_eq!((tokens.amount, tokens.reserved), (700, 850));
    hook.release(&ids[0]).unwrap().unwrap();
    assert_eq!((held(&hook, "requests"), held(&hook, "tokens")), (0, 0));
    assert_eq!((consumed(&hook, "requests"), consumed(&hook, "tokens")), (0, 700));

    let again = hook.reserve_amounts(reserve_amounts("r-1", 1, 850)).unwrap();
    assert!(again.replayed());
    let replayed: Vec<String> = again.decisions.iter().map(|d| d.reservation_id.clone().unwrap()).collect();
    assert_eq!(replayed, ids, "the same reservations, nothing held again");
    assert_eq!(held(&hook, "tokens"), 0);
    match hook.check_amounts(amounts("r-1", 1, 850)) {
        Err(HookError::IdempotencyKeyReused { field: "kind", .. }) => {}
        other => panic!("a check with a reserve's key: {other:?}"),
    }
    let ttl = Request { ttl_ms: Some(0), ..reserve_amounts("r-3", 1, 1) };
    assert!(matches!(hook.reserve_amounts(ttl), Err(HookError::BadRequest { field: "ttl_ms", .. })));

    drop(hook);
    let hook = Hook::start(dir.path().join("ledger.db"), HookSettings::default()).unwrap();
    let after = hook.reserve_amounts(reserve_amounts("r-1", 1, 850)).unwrap();
    assert!(after.replayed());
    let after: Vec<String> = after.decisions.iter().map(|d| d.reservation_id.clone().unwrap()).collect();
    assert_eq!(after, ids, "after a restart too");
}

// Contract §9.1 for several metrics: the same key and amounts answer the original decisions (replayed, nothing
// consumed), before and after a restart; other amounts, or a check of one metric with that key, answer 409 naming
// `amounts`. A request of one metric in `amounts` is the check of that metric and amount.
#[test]
fn several_metrics_replay_under_one_key() {
    let (dir, hook) = hook_with(vec![policy("tokens-month", 1_000, Window::MONTH, Enforcement::HARD, None)]);
    let first = hook.check_amounts(amounts("k-1", 1, 600)).unwrap();
    let again = hook.check_amounts(amounts("k-1", 1, 600)).unwrap();
    assert!(again.replayed());
    let ids = |d: &Decisions| d.decisions.iter().map(|d| d.decision_id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&again), ids(&first));
    let reused = |result: Result<Decisions, HookError>| match result {
        Err(HookError::IdempotencyKeyReused { field, .. }) => field,
        other => panic!("not refused as reused: {other:?}"),
    };
    assert_eq!(reused(hook.check_amounts(amounts("k-1", 1, 601))), "amounts");
    match hook.check(Request { metric: Some("requests".into()), ..ask("k-1", 1) }) {
        Err(HookError::IdempotencyKeyReused { field: "amounts", .. }) => {}
        other => panic!("a check of one of its metrics is not the request: {other:?}"),
    }
    let one = Request { amounts: Some([("tokens".to_string(), 5)].into()), ..amounts("k-2", 0, 0) };
    let single = hook.check(ask("k-2", 5)).unwrap();
    let as_amounts = hook.check_amounts(one).unwrap();
    assert!(as_amounts.replayed());
    assert_eq!(as_amounts.decisions[0].decision_id, single.decision_id);
    assert_eq!(consumed(&hook, "tokens"), 605);

    drop(hook);
    let hook = Hook::start(dir.path().join("ledger.db"), HookSettings::default()).unwrap();
    let after = hook.check_amounts(amounts("k-1", 1, 600)).unwrap();
    assert!(after.replayed());
    assert_eq!(ids(&after), ids(&first));
    assert_eq!(reused(hook.check_amounts(amounts("k-1", 2, 600))), "amounts");
    match hook.check(Request { metric: Some("requests".into()), ..ask("k-1", 1) }) {
        Err(HookError::IdempotencyKeyReused { field: "amounts", .. }) => {}
        other => panic!("after a restart too: {other:?}"),
    }
    assert_eq!(consumed(&hook, "tokens"), 605);
}

// A request of several metrics denied by a throttle is RATE_LIMITED on every metric: a client reading the code of
// the metric that had room must not read QUOTA_EXCEEDED (contract §6: the two signals are never confused).
#[test]
fn a_throttle_denying_one_metric_is_the_code_of_every_metric() {
    let (_dir, hook) = hook_with(vec![
        policy("tokens-month", 1_000, Window::MONTH, Enforcement::HARD, None),
        of_metric(policy("images-bucket", 1, Window::HOUR, Enforcement::HARD, Some(1)), "images"),
    ]);
    let ask = |key: &str| Request {
        amounts: Some([("images".to_string(), 1), ("tokens".to_string(), 1)].into()),
        ..amounts(key, 0, 0)
    };
    assert!(hook.check_amounts(ask("k-1")).unwrap().allowed());
    let denied = hook.check_amounts(ask("k-2")).unwrap();
    let codes: Vec<(&str, Code, Reason)> =
        denied.decisions.iter().map(|d| (d.metric.as_str(), d.code, d.reason)).collect();
    assert_eq!(
        codes,
        [("images", Code::RATE_LIMITED, Reason::RATE_LIMITED), ("tokens", Code::RATE_LIMITED, Reason::WITHIN_LIMIT)]
    );
    assert_eq!(denied.deciding().metric, "images");
    let again = hook.check_amounts(ask("k-2")).unwrap();
    assert!(again.replayed());
    assert_eq!(again.decisions.iter().map(|d| d.code).collect::<Vec<_>>(), [Code::RATE_LIMITED; 2]);
}

/// The lease test's clock, moved by the test only (as the throttle test's): a lease expires when the test says its
/// time-to-live has passed.
static LEASE_CLOCK_MICROS: AtomicI64 = AtomicI64::new(0);

fn lease_clock() -> Timestamp {
    Timestamp(LEASE_CLOCK_MICROS.load(Ordering::Relaxed))
}

fn acquire(key: &str, ttl_ms: i64) -> AcquireRequest {
    let who = Who::tenant("org-1");
    AcquireRequest { who, metric: "tokens".into(), ttl_ms, idempotency_key: key.into(), request_id: None }
}

// A CONCURRENT policy grants at most `limit` leases at once, each under a greater fencing token (a
// restart included); a full policy answers CONCURRENCY_LIMITED with the wait until the first lease expires; a stale
// holder's renew or release is refused and frees nothing; a release frees its slot at once and an expiry without any
// call; a retried acquire answers its lease again; a lease neither counts against windows nor is committed.
#[test]
fn leases_hold_slots_of_a_concurrent_policy() {
    let start = Timestamp::parse_rfc3339("2026-06-01T12:00:00Z").unwrap();
    LEASE_CLOCK_MICROS.store(start.micros(), Ordering::Relaxed);
    let settings = HookSettings { clock: lease_clock, ..HookSettings::default() };
    let policies = vec![
        policy("jobs", 2, Window::CONCURRENT, Enforcement::HARD, None),
        policy("daily", 1, Window::DAY, Enforcement::HARD, None),
    ];
    let (dir, hook) = hook_with_settings(policies, settings.clone());
    let first = hook.acquire(acquire("l-1", 60_000)).unwrap();
    let first_lease = first.lease.clone().expect("an allowed acquire is granted a lease");
    let second = hook.acquire(acquire("l-2", 300)).unwrap().lease.expect("a second slot");
    assert!(second.fencing_token > first_lease.fencing_token);
    assert_eq!(hook.acquire(acquire("l-1", 60_000)).unwrap(), Decision { replayed: true, ..first.clone() });
    let full = hook.acquire(acquire("l-3", 60_000)).unwrap();
    assert_eq!(
        (full.reason, full.code, full.lease.as_ref()),
        (Reason::CONCURRENCY_LIMITED, Code::CONCURRENCY_LIMITED, None)
    );
    let wait = full.retry_after_ms.expect("a full policy says when a slot frees");
    assert!((1..=301).contains(&wait), "the first lease to expire frees a slot in at most 300 ms: {wait}");
    assert!(hook.check(ask("c-1", 1)).unwrap().allowed(), "leases hold nothing against the daily window");
    let quotas = hook.quotas(quotas_of("tokens")).unwrap().quotas;
    let jobs = quotas.iter().find(|q| q.policy_id == "jobs").expect("the CONCURRENT policy is listed");
    assert_eq!((jobs.window, jobs.leases, jobs.remaining, jobs.consumed), (Window::CONCURRENT, Some(2), Some(0), None));
    assert_eq!(jobs.window_end, second.expires_at, "the first slot frees when the 300 ms lease expires");
    let daily = quotas.iter().find(|q| q.policy_id == "daily").expect("the window is listed");
    assert_eq!((daily.consumed, daily.held, daily.leases), (Some(1), Some(0), None));
    let stale = hook.release_lease(&first_lease.lease_id, first_lease.fencing_token - 1).unwrap();
    assert!(matches!(stale, Err(Refusal::StaleToken { .. })), "{stale:?}");
    assert!(matches!(hook.commit(&first_lease.lease_id, 1).unwrap(), Err(Refusal::WrongKind { .. })));
    let renewed = hook.renew(&first_lease.lease_id, first_lease.fencing_token, 120_000).unwrap().unwrap();
    assert!(renewed.expires_at.unwrap() > first_lease.expires_at);
    assert!(!hook.acquire(acquire("l-4", 60_000)).unwrap().allowed(), "the stale release freed nothing");
    LEASE_CLOCK_MICROS.fetch_add(301_000, Ordering::Relaxed);
    let third = hook.acquire(acquire("l-5", 60_000)).unwrap().lease.expect("the 300 ms lease expired");
    assert!(third.fencing_token > second.fencing_token);
    let late = hook.renew(&second.lease_id, second.fencing_token, 60_000).unwrap();
    assert!(matches!(late, Err(Refusal::Expired { .. })), "an expired lease is not revived: {late:?}");
    hook.release_lease(&third.lease_id, third.fencing_token).unwrap().unwrap();
    let again = hook.release_lease(&third.lease_id, third.fencing_token).unwrap().unwrap();
    assert!(again.replayed, "a retried release answers the original");
    let path = dir.path().join("ledger.db");
    drop(hook);
    let hook = Hook::start(&path, settings).unwrap();
    let after = hook.acquire(acquire("l-6", 60_000)).unwrap().lease.expect("l-1 holds one of two slots");
    assert!(after.fencing_token > third.fencing_token, "tokens keep growing across a restart");
    assert!(!hook.acquire(acquire("l-7", 60_000)).unwrap().allowed(), "l-1 (renewed) and l-6 hold both slots");
}

/// The overage test's clock, moved by the test only (as the throttle test's).
static OVERAGE_CLOCK_MICROS: AtomicI64 = AtomicI64::new(0);

fn overage_clock() -> Timestamp {
    Timestamp(OVERAGE_CLOCK_MICROS.load(Ordering::Relaxed))
}

// A HARD quota of 10 a day whose overage is throttled at 2 a minute. Within the limit it allows as
// any quota; beyond it, what the bucket has (filling from the hook's start, so a restart lets nothing extra through)
// and RATE_LIMITED with the wait for a token past it; an ask larger than the whole bucket is QUOTA_EXCEEDED until the
// day resets; an ask that starts within the limit takes from the bucket only what goes beyond it.
#[test]
fn a_throttled_overage_lets_the_rate_through_beyond_the_limit() {
    let start = Timestamp::parse_rfc3339("2026-06-01T12:00:00Z").unwrap();
    OVERAGE_CLOCK_MICROS.store(start.micros(), Ordering::Relaxed);
    let settings = HookSettings { clock: overage_clock, ..HookSettings::default() };
    let Event::Policy(mut daily) = policy("daily", 10, Window::DAY, Enforcement::HARD, None) else { unreachable!() };
    (daily.overage_rate, daily.overage_window) = (Some(2), Some(Window::MINUTE));
    let (dir, hook) = hook_with_settings(vec![Event::Policy(daily)], settings.clone());
    assert!(hook.check(ask("o-1", 9)).unwrap().allowed());
    let started_empty = hook.check(ask("o-2", 2)).unwrap();
    assert_eq!((started_empty.reason, started_empty.code), (Reason::RATE_LIMITED, Code::RATE_LIMITED));
    assert_eq!(started_empty.retry_after_ms, Some(30_000), "the 1 beyond the limit refills in 30 s at 2 a minute");
    OVERAGE_CLOCK_MICROS.fetch_add(30_000_000, Ordering::Relaxed);
    let straddling = hook.check(ask("o-3", 2)).unwrap();
    assert_eq!((straddling.outcome, straddling.reason), (Outcome::ALLOWED, Reason::WITHIN_LIMIT));
    assert_eq!((straddling.policy_id.as_deref(), straddling.remaining), (Some("daily"), Some(0)));
    assert!(!hook.check(ask("o-4", 1)).unwrap().allowed(), "the one token went beyond the limit with o-3");
    OVERAGE_CLOCK_MICROS.fetch_add(60_000_000, Ordering::Relaxed);
    let whole = hook.check(ask("o-5", 3)).unwrap();
    assert_eq!(whole.reason, Reason::QUOTA_EXCEEDED, "3 beyond the limit never fits a bucket of 2");
    let day_end = Timestamp::parse_rfc3339("2026-06-02T00:00:00Z").unwrap();
    assert_eq!(whole.resets_at, Some(day_end));
    for key in ["o-6", "o-7"] {
        assert!(hook.check(ask(key, 1)).unwrap().allowed(), "{key}: the bucket refilled to 2 in a minute");
    }
    assert_eq!(hook.check(ask("o-8", 1)).unwrap().reason, Reason::RATE_LIMITED);
    drop(hook);
    // A restart a minute later: the bucket fills from the new start, not full at once.
    OVERAGE_CLOCK_MICROS.fetch_add(60_000_000, Ordering::Relaxed);
    let hook = Hook::start(dir.path().join("ledger.db"), settings).unwrap();
    assert_eq!(hook.check(ask("o-9", 1)).unwrap().reason, Reason::RATE_LIMITED, "empty at the start");
    OVERAGE_CLOCK_MICROS.fetch_add(30_000_000, Ordering::Relaxed);
    assert!(hook.check(ask("o-10", 1)).unwrap().allowed());
    assert_eq!(usage_recorded(&dir), 9 + 2 + 1 + 1 + 1, "what was allowed, and only that");
    OVERAGE_CLOCK_MICROS.store(day_end.micros(), Ordering::Relaxed);
    assert!(hook.check(ask("o-11", 10)).unwrap().allowed(), "a new day: the limit again");
}

/// `policy` failing open (`on_failure: OPEN`).
fn open(policy: Event) -> Event {
    let Event::Policy(policy) = policy else { unreachable!("a policy") };
    Event::Policy(PolicyEvent { on_failure: Some(OnFailure::OPEN), ..policy })
}

// Failing open for several metrics: while the ledger refuses every group, a check of several metrics whose every
// policy is OPEN is allowed FAIL_OPEN on each metric (one token of the emergency rate), counted at once, and recorded
// once the ledger takes writes again; a reserve of the same fails closed (its commit needs the ledger too), and so
// does a check with a CLOSED policy among its metrics'.
#[test]
fn a_check_of_several_metrics_fails_open_when_every_policy_is_open() {
    let (dir, hook) = hook_with(vec![
        open(policy("tokens-month", 1_000, Window::MONTH, Enforcement::HARD, None)),
        open(of_metric(policy("requests-month", 10, Window::MONTH, Enforcement::HARD, None), "requests")),
        of_metric(policy("bytes-month", 10, Window::MONTH, Enforcement::HARD, None), "bytes"),
    ]);
    assert!(hook.check_amounts(amounts("k-1", 1, 100)).unwrap().allowed());
    let other = rusqlite::Connection::open(dir.path().join("ledger.db")).unwrap();
    other
        .execute_batch(
            "CREATE TRIGGER injected BEFORE INSERT ON entries BEGIN SELECT RAISE(ABORT, 'injected failure'); END",
        )
        .unwrap();
    let opened = hook.check_amounts(amounts("k-2", 2, 300)).unwrap();
    assert!(opened.allowed(), "{opened:?}");
    let codes: Vec<(Code, Reason)> = opened.decisions.iter().map(|d| (d.code, d.reason)).collect();
    assert_eq!(codes, [(Code::FAIL_OPEN, Reason::FAIL_OPEN); 2]);
    assert_eq!((consumed(&hook, "requests"), consumed(&hook, "tokens")), (3, 400), "counted at once");
    let failed = |result: Result<Decisions, HookError>| {
        assert!(matches!(&result, Err(HookError::Ledger(m)) if m.contains("injected failure")), "{result:?}")
    };
    failed(hook.reserve_amounts(reserve_amounts("k-3", 1, 1)));
    let mut with_closed = amounts("k-4", 1, 1);
    with_closed.amounts.as_mut().expect("several metrics").insert("bytes".into(), 1);
    failed(hook.check_amounts(with_closed));
    other.execute_batch("DROP TRIGGER injected").unwrap();

    assert!(hook.check(ask("k-5", 1)).unwrap().allowed(), "recording again");
    let replayed = hook.check_amounts(amounts("k-2", 2, 300)).unwrap();
    assert!(replayed.replayed() && replayed.decisions.iter().all(|d| d.reason == Reason::FAIL_OPEN), "{replayed:?}");
    let made_open = sql_i64(&dir, "SELECT COUNT(*) FROM decision_events WHERE reason = 'FAIL_OPEN'");
    assert_eq!(made_open, 2, "a decision per metric, recorded once");
    assert_eq!(usage_recorded(&dir), 1 + 100 + 2 + 300 + 1, "k-1, k-2 on both metrics, k-5");
}

/// A report of org-1's (or `tenant`'s) level of storage_bytes at `at`, as a storage service sends it through ingest.
fn level(event_id: &str, tenant: &str, at: Timestamp, bytes: i64) -> Event {
    Event::Usage(UsageEvent {
        header: Header {
            event_id: event_id.into(),
            occurred_at: at,
            tenant: tenant.into(),
            subject: None,
            metric: "storage_bytes".into(),
            source: "storage-service".into(),
            api_key: None,
            project: None,
        },
        quantity: bytes,
        request_id: None,
        attributes: Default::default(),
    })
}

fn doing(request: Request, operation: Option<Operation>) -> Request {
    Request { operation, ..request }
}

// A gauge quota (storage_bytes, NO_INSERTS) over its limit refuses the tenant's inserts of every
// metric, and requests that name no operation, until its level drops back; reads, updates and deletes pass. The level is
// the latest report by event time (a late report of an earlier level changes nothing), a gauge's own metric is not
// checked, and a restart knows levels reported longer ago than the fold reaches.
#[test]
fn a_gauge_over_its_limit_refuses_what_its_violation_covers() {
    let gauge = |p: Event| {
        let Event::Policy(p) = of_metric(p, "storage_bytes") else { unreachable!() };
        Event::Policy(PolicyEvent { violation: Some(Violation::NO_INSERTS), ..p })
    };
    let (dir, hook) = hook_with(vec![
        policy("tokens-day", 100, Window::DAY, Enforcement::HARD, None),
        plan_default(gauge(policy("storage", 1_000, Window::DAY, Enforcement::HARD, None))),
    ]);
    let insert = Some(Operation::insert);
    assert!(hook.check(doing(ask("g-1", 1), insert)).unwrap().allowed(), "no level reported: 0");
    let now = Timestamp::now();
    append_as_ingest(&dir, vec![level("level-1", "org-1", now, 1_500)]);
    let denied = hook.check(doing(ask("g-2", 1), insert)).unwrap();
    assert_eq!(
        (denied.outcome, denied.reason, denied.code),
        (Outcome::DENIED, Reason::QUOTA_EXCEEDED, Code::QUOTA_EXCEEDED)
    );
    assert_eq!(
        (denied.policy_id.as_deref(), denied.limit, denied.used_before, denied.violation),
        (Some("storage"), Some(1_000), Some(1_500), Some(Violation::NO_INSERTS))
    );
    assert_eq!(denied.resets_at, None, "a level drops when storage is freed, not at a window's end");
    assert!(!hook.check(doing(ask("g-3", 1), None)).unwrap().allowed(), "no operation named: refused as a write");
    for (n, operation) in [Operation::read, Operation::update, Operation::delete].into_iter().enumerate() {
        let allowed = hook.check(doing(ask(&format!("g-pass-{n}"), 1), Some(operation))).unwrap();
        assert!(allowed.allowed(), "{operation} passes NO_INSERTS: {allowed:?}");
        assert_eq!(allowed.policy_id.as_deref(), Some("tokens-day"), "an allowed request names its own metric's quota");
    }
    // Several metrics at once: refused as one, naming the gauge.
    let several = hook.check_amounts(Request { operation: insert, ..amounts("g-4", 1, 1) }).unwrap();
    assert!(!several.allowed());
    assert_eq!(several.deciding().policy_id.as_deref(), Some("storage"));
    // A late report of an earlier level is not the level.
    append_as_ingest(&dir, vec![level("level-0", "org-1", Timestamp(now.micros() - 60_000_000), 10)]);
    assert!(!hook.check(doing(ask("g-5", 1), insert)).unwrap().allowed(), "the latest level is still 1500");
    append_as_ingest(&dir, vec![level("level-2", "org-1", Timestamp(now.micros() + 1), 900)]);
    assert!(hook.check(doing(ask("g-6", 1), insert)).unwrap().allowed(), "back under its limit");
    // The gauge's metric is reported, not checked.
    let refused = hook.check(Request { metric: Some("storage_bytes".into()), ..ask("g-7", 1) }).unwrap_err();
    assert!(matches!(refused, HookError::BadRequest { field: "metric", .. }), "{refused:?}");
    // org-2 reported its level 40 days ago, beyond the month and a day a start folds: a restart still knows it.
    let long_ago = Timestamp(now.micros() - 40 * 24 * 3_600 * 1_000_000);
    append_as_ingest(&dir, vec![level("level-org-2", "org-2", long_ago, 5_000)]);
    drop(hook);
    let hook = Hook::start(dir.path().join("ledger.db"), HookSettings::default()).unwrap();
    let mut org_2 = doing(ask("g-8", 1), insert);
    org_2.who.tenant = "org-2".into();
    let denied = hook.check(org_2).unwrap();
    assert_eq!((denied.outcome, denied.used_before), (Outcome::DENIED, Some(5_000)));
    assert!(
        hook.check(doing(ask("g-9", 1), insert)).unwrap().allowed(),
        "org-1's latest level, 900, after the restart"
    );
}

/// `policy` of `scope`.
fn scoped(policy: Event, scope: Scope) -> Event {
    let Event::Policy(policy) = policy else { unreachable!("`policy` builds a PolicyEvent") };
    Event::Policy(PolicyEvent { scope, ..policy })
}

fn of_project(request: Request, project: Option<&str>, api_key: Option<&str>) -> Request {
    let who = Who { project: project.map(String::from), api_key: api_key.map(String::from), ..request.who.clone() };
    Request { who, ..request }
}

// One request is checked against every level that has a policy, the tenant's, its project's and its
// API key's, all or nothing, each denial naming the level (the policy's scope) that denied. Each project and each key
// has its own windows, what names none counts together, a grant naming a project raises that project's windows only,
// and a restart counts them again from the ledger.
#[test]
fn every_level_that_has_a_policy_is_checked_all_or_nothing() {
    let grant = Event::Grant(GrantEvent {
        header: Header {
            event_id: "grant-p2".into(),
            occurred_at: Timestamp::parse_rfc3339("2026-01-01T00:00:00Z").unwrap(),
            tenant: "org-1".into(),
            subject: None,
            project: Some("p-2".into()),
            api_key: None,
            metric: "tokens".into(),
            source: "admin".into(),
        },
        grant_id: "g-p2".into(),
        amount: 5,
        valid_from: Timestamp::parse_rfc3339("2026-01-01T00:00:00Z").unwrap(),
        valid_until: Timestamp::parse_rfc3339("2099-01-01T00:00:00Z").unwrap(),
        reason: "a bigger project".into(),
        actor: None,
    });
    let (dir, hook) = hook_with(vec![
        policy("org-day", 25, Window::DAY, Enforcement::HARD, None),
        scoped(policy("project-day", 10, Window::DAY, Enforcement::HARD, None), Scope::PROJECT),
        scoped(policy("key-day", 8, Window::DAY, Enforcement::HARD, None), Scope::API_KEY),
        grant,
    ]);
    let check = |key: &str, amount: i64, project: Option<&str>, api_key: Option<&str>| {
        hook.check(of_project(ask(key, amount), project, api_key)).unwrap()
    };
    // Key k-a may take 8; project p-1 has 10 of its own.
    assert!(check("s-1", 8, Some("p-1"), Some("k-a")).allowed());
    let denied = check("s-2", 1, Some("p-1"), Some("k-a"));
    assert_eq!(
        (denied.reason, denied.policy_id.as_deref(), denied.scope),
        (Reason::QUOTA_EXCEEDED, Some("key-day"), Some(Scope::API_KEY))
    );
    assert!(check("s-3", 2, Some("p-1"), Some("k-b")).allowed(), "another key of the same project");
    let denied = check("s-4", 1, Some("p-1"), Some("k-c"));
    assert_eq!(
        (denied.policy_id.as_deref(), denied.scope, denied.used_before),
        (Some("project-day"), Some(Scope::PROJECT), Some(10))
    );
    // p-2's grant raises p-2's project window to 15, and no other.
    assert!(check("s-5", 8, Some("p-2"), Some("k-d")).allowed());
    assert!(check("s-6", 7, Some("p-2"), Some("k-e")).allowed(), "10 + the grant of 5");
    // The tenant's 25 is spent (8 + 2 + 8 + 7): nothing more of any project, and what was refused consumed nothing.
    let denied = check("s-7", 1, Some("p-3"), Some("k-f"));
    assert_eq!(
        (denied.policy_id.as_deref(), denied.scope, denied.used_before),
        (Some("org-day"), Some(Scope::TENANT), Some(25))
    );
    assert_eq!(usage_recorded(&dir), 25);
    // What names no project or key counts together under the PROJECT and API_KEY policies: its own group.
    let (_dir2, hook2) =
        hook_with(vec![scoped(policy("project-day", 10, Window::DAY, Enforcement::HARD, None), Scope::PROJECT)]);
    assert!(hook2.check(ask("n-1", 10)).unwrap().allowed());
    assert!(!hook2.check(ask("n-2", 1)).unwrap().allowed(), "requests naming no project share one window");
    assert!(hook2.check(of_project(ask("n-3", 10), Some("p-1"), None)).unwrap().allowed());
    // A restart counts each project's and key's windows again from the ledger.
    drop(hook);
    let hook = Hook::start(dir.path().join("ledger.db"), HookSettings::default()).unwrap();
    let after = hook.check(of_project(ask("s-8", 1), Some("p-1"), Some("k-a"))).unwrap();
    assert_eq!((after.outcome, after.policy_id.as_deref()), (Outcome::DENIED, Some("key-day")));
    let replay = hook.check(of_project(ask("s-1", 8), Some("p-1"), Some("k-a"))).unwrap();
    assert!(replay.replayed && replay.allowed());
    let reused = hook.check(of_project(ask("s-1", 8), Some("p-9"), Some("k-a"))).unwrap_err();
    assert!(matches!(reused, HookError::IdempotencyKeyReused { field: "project", .. }), "{reused:?}");
}

// The first PROJECT policy recorded while the hook runs: the consumption of each project before it counts in its
// window (the hook keeps projects' counters only once a PROJECT policy exists, and rebuilds them from the ledger then).
#[test]
fn a_first_project_policy_counts_what_each_project_consumed_before_it() {
    let (dir, hook) = hook_with(vec![policy("org-day", 100, Window::DAY, Enforcement::HARD, None)]);
    assert!(hook.check(of_project(ask("b-1", 9), Some("p-1"), None)).unwrap().allowed());
    assert!(hook.check(of_project(ask("b-2", 9), Some("p-2"), None)).unwrap().allowed());
    let Event::Policy(project_day) =
        scoped(policy("project-day", 10, Window::DAY, Enforcement::HARD, None), Scope::PROJECT)
    else {
        unreachable!()
    };
    let project_day =
        PolicyEvent { header: Header { event_id: "later".into(), ..project_day.header.clone() }, ..project_day };
    append_as_ingest(&dir, vec![Event::Policy(project_day)]);
    let denied = hook.check(of_project(ask("b-3", 2), Some("p-1"), None)).unwrap();
    assert_eq!(
        (denied.outcome, denied.used_before, denied.policy_id.as_deref()),
        (Outcome::DENIED, Some(9), Some("project-day"))
    );
    assert!(hook.check(of_project(ask("b-4", 1), Some("p-2"), None)).unwrap().allowed());
}

static ROLLING_CLOCK_MICROS: AtomicI64 = AtomicI64::new(0);

fn rolling_clock() -> Timestamp {
    Timestamp(ROLLING_CLOCK_MICROS.load(Ordering::Relaxed))
}

// A ROLLING limit of 10 in any hour (PolicyEvent v10) holds over the hour ending at each decision,
// across the UTC hour and day boundaries a calendar window would reset at; a denial says when enough usage ages out
// for the request to fit; a restart rebuilds the timeline from the ledger; and usage recorded before a ROLLING policy
// was (the hook rebuilding its state when the first one arrives) counts in its window.
#[test]
fn a_rolling_limit_holds_over_every_hour_ending_now() {
    let at = |text: &str| Timestamp::parse_rfc3339(text).unwrap();
    let set = |text: &str| ROLLING_CLOCK_MICROS.store(at(text).micros(), Ordering::Relaxed);
    let rolling = |id: &str, limit: i64, seconds: i64| {
        let Event::Policy(p) = policy(id, limit, Window::ROLLING, Enforcement::HARD, None) else { unreachable!() };
        Event::Policy(PolicyEvent { window_seconds: Some(seconds), ..p })
    };
    let settings = || HookSettings { clock: rolling_clock, ..HookSettings::default() };
    set("2026-11-16T23:30:00Z");
    let (dir, hook) =
        hook_with_settings(vec![policy("daily", 1_000, Window::DAY, Enforcement::HARD, None)], settings());
    assert!(hook.check(ask("r-1", 6)).unwrap().allowed());
    // Recorded while the hook runs: the 6 of 23:30 counts in the hour ending at 23:50.
    append_as_ingest(&dir, vec![rolling("hourly", 10, 3_600)]);
    set("2026-11-16T23:50:00Z");
    assert!(hook.check(ask("r-2", 3)).unwrap().allowed(), "6 + 3 of 10");
    // 00:10 the next day: a new UTC hour and day, the same rolling hour (6 + 3 = 9 of 10).
    set("2026-11-17T00:10:00Z");
    let denied = hook.check(ask("r-3", 2)).unwrap();
    assert_eq!(
        (denied.reason, denied.policy_id.as_deref(), denied.used_before, denied.remaining),
        (Reason::QUOTA_EXCEEDED, Some("hourly"), Some(9), Some(1)),
        "{denied:?}"
    );
    assert_eq!(denied.window_start, Some(at("2026-11-16T23:10:00.000001Z")), "the hour up to and including now");
    // 2 fits once the 6 of 23:30 is an hour old.
    assert_eq!(denied.resets_at, Some(at("2026-11-17T00:30:00Z")), "{denied:?}");
    assert_eq!(denied.retry_after_ms, Some(20 * 60 * 1_000));
    assert!(hook.check(ask("r-4", 1)).unwrap().allowed(), "1 fits: 10 of 10");
    drop(hook);
    // After a restart the timeline is read back from the ledger.
    let hook = Hook::start(dir.path().join("ledger.db"), settings()).unwrap();
    set("2026-11-17T00:29:59.999999Z");
    assert!(!hook.check(ask("r-5", 1)).unwrap().allowed(), "the 6 of 23:30 is not an hour old yet");
    set("2026-11-17T00:30:00Z");
    let allowed = hook.check(ask("r-6", 6)).unwrap();
    assert!(allowed.allowed(), "{allowed:?}");
    assert_eq!(allowed.remaining, Some(0), "3 + 1 + 6 of 10 in the hour after 23:30");
}

static CYCLE_CLOCK_MICROS: AtomicI64 = AtomicI64::new(0);

fn cycle_clock() -> Timestamp {
    Timestamp(CYCLE_CLOCK_MICROS.load(Ordering::Relaxed))
}

// A BILLING_CYCLE limit (PolicyEvent v11) anchored on the 31st at midnight in New York resets at
// the local midnight that starts each cycle: on Feb 28 (the 31st falls on the month's last day), then on Mar 31 after
// the clocks sprang forward (04:00 UTC, not 05:00). A restart reads the cycle's usage back, and a new anchor recorded
// mid-cycle takes effect at the next boundary, the cycle between them short.
#[test]
fn a_billing_cycle_limit_resets_at_the_tenants_local_boundaries() {
    let at = |text: &str| Timestamp::parse_rfc3339(text).unwrap();
    let set = |text: &str| CYCLE_CLOCK_MICROS.store(at(text).micros(), Ordering::Relaxed);
    let cycle = |version: i32, anchor: &str, effective_from: &str| {
        let Event::Policy(p) = policy("cycle", 10, Window::BILLING_CYCLE, Enforcement::HARD, None) else {
            unreachable!()
        };
        let header = Header { event_id: format!("policy-cycle-v{version}"), ..p.header.clone() };
        Event::Policy(PolicyEvent {
            header,
            version,
            cycle_anchor: Some(at(anchor)),
            time_zone: Some("America/New_York".into()),
            effective_from: at(effective_from),
            ..p
        })
    };
    let settings = || HookSettings { clock: cycle_clock, ..HookSettings::default() };
    set("2026-02-27T12:00:00Z");
    let (dir, hook) = hook_with_settings(vec![cycle(1, "2026-01-31T05:00:00Z", "2026-01-01T00:00:00Z")], settings());
    assert!(hook.check(ask("c-1", 8)).unwrap().allowed());
    // 23:59:59 on Feb 27 in New York: still the cycle that started on Jan 31.
    set("2026-02-28T04:59:59Z");
    let denied = hook.check(ask("c-2", 3)).unwrap();
    assert_eq!(
        (denied.reason, denied.used_before, denied.window_start),
        (Reason::QUOTA_EXCEEDED, Some(8), Some(at("2026-01-31T05:00:00Z"))),
        "{denied:?}"
    );
    assert_eq!(denied.resets_at, Some(at("2026-02-28T05:00:00Z")), "the next cycle starts at local midnight");
    set("2026-02-28T05:00:00Z");
    let allowed = hook.check(ask("c-3", 3)).unwrap();
    assert!(allowed.allowed(), "{allowed:?}");
    assert_eq!(
        (allowed.window_start, allowed.resets_at),
        (Some(at("2026-02-28T05:00:00Z")), Some(at("2026-03-31T04:00:00Z"))),
        "Feb 28 (the 31st on a short month) to Mar 31, midnight EDT"
    );
    drop(hook);
    let hook = Hook::start(dir.path().join("ledger.db"), settings()).unwrap();
    set("2026-03-30T12:00:00Z");
    assert!(!hook.check(ask("c-4", 8)).unwrap().allowed(), "3 + 8 of 10: the cycle's usage was read back");
    // A new anchor, the 17th, recorded mid-cycle: the cycle in force runs to its end, then a short one to Apr 17.
    append_as_ingest(&dir, vec![cycle(2, "2026-03-17T04:00:00Z", "2026-03-10T00:00:00Z")]);
    assert!(hook.check(ask("c-5", 7)).unwrap().allowed(), "3 + 7 of 10");
    set("2026-03-31T04:00:00Z");
    let short = hook.check(ask("c-6", 10)).unwrap();
    assert!(short.allowed(), "{short:?}");
    assert_eq!(
        (short.policy_version, short.window_start, short.resets_at),
        (Some(2), Some(at("2026-03-31T04:00:00Z")), Some(at("2026-04-17T04:00:00Z"))),
        "the short cycle from the old boundary to the new anchor's first"
    );
}

static ALERT_CLOCK_MICROS: AtomicI64 = AtomicI64::new(0);

fn alert_clock() -> Timestamp {
    Timestamp(ALERT_CLOCK_MICROS.load(Ordering::Relaxed))
}

/// The alerts recorded in the ledger in `dir`, in ledger order: (threshold, observed, request_id, window_start).
fn alerts_recorded(dir: &tempfile::TempDir) -> Vec<(i64, i64, Option<String>, i64)> {
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY;
    let conn = rusqlite::Connection::open_with_flags(dir.path().join("ledger.db"), flags).unwrap();
    let mut statement = conn
        .prepare("SELECT threshold_percent, observed, request_id, window_start FROM alert_events ORDER BY seq")
        .unwrap();
    statement.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))).unwrap().map(Result::unwrap).collect()
}

// As allowed requests bring a SOFT monthly quota of 10 to 80%, 90% and 100% of its limit, the hook
// writes one AlertEvent per threshold (two at once when one request passes both), each once: nothing more as usage
// goes on, nothing again after a restart (the alerts are folded back). In December's window the thresholds alert
// anew; usage another writer recorded reaches 90% without an alert, and the next request the hook allows writes the
// three thresholds it is at, each once.
#[test]
fn alerts_are_written_once_per_window_and_threshold_across_a_restart() {
    let at = |text: &str| Timestamp::parse_rfc3339(text).unwrap();
    let set = |text: &str| ALERT_CLOCK_MICROS.store(at(text).micros(), Ordering::Relaxed);
    let settings = || HookSettings { clock: alert_clock, ..HookSettings::default() };
    set("2026-11-10T00:00:00Z");
    let (dir, hook) =
        hook_with_settings(vec![policy("monthly", 10, Window::MONTH, Enforcement::SOFT, None)], settings());
    let november = at("2026-11-01T00:00:00Z").micros();
    assert!(hook.check(ask("a-1", 7)).unwrap().allowed());
    assert_eq!(alerts_recorded(&dir), [], "70%: none");
    assert!(hook.check(ask("a-2", 1)).unwrap().allowed());
    assert!(hook.check(ask("a-3", 3)).unwrap().allowed());
    assert!(hook.check(ask("a-4", 5)).unwrap().allowed());
    let written = vec![
        (80, 8, Some("req-a-2".to_string()), november),
        (90, 11, Some("req-a-3".to_string()), november),
        (100, 11, Some("req-a-3".to_string()), november),
    ];
    assert_eq!(alerts_recorded(&dir), written);
    drop(hook);
    let hook = Hook::start(dir.path().join("ledger.db"), settings()).unwrap();
    assert!(hook.check(ask("a-5", 1)).unwrap().allowed());
    assert_eq!(alerts_recorded(&dir), written, "none again after a restart");
    set("2026-12-02T00:00:00Z");
    let usage = Event::Usage(UsageEvent {
        header: Header {
            event_id: "from-kafka-1".into(),
            occurred_at: at("2026-12-02T00:00:00Z"),
            tenant: "org-1".into(),
            subject: None,
            metric: "tokens".into(),
            source: "billing-pipeline".into(),
            api_key: None,
            project: None,
        },
        quantity: 9,
        request_id: None,
        attributes: Default::default(),
    });
    append_as_ingest(&dir, vec![usage]);
    assert_eq!(alerts_recorded(&dir).len(), 3, "usage recorded by ingest writes no alert");
    assert!(hook.check(ask("a-6", 1)).unwrap().allowed());
    let december = at("2026-12-01T00:00:00Z").micros();
    let new: Vec<_> = alerts_recorded(&dir).split_off(3);
    assert_eq!(
        new,
        [80, 90, 100].map(|threshold| (threshold, 10, Some("req-a-6".to_string()), december)),
        "December's thresholds, once each"
    );
}
