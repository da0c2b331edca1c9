//! `audit why` and `audit tenant` run as support runs them: a denied request of a generated history explained
//! word for word (golden file), a hand-built denial whose every part is checked, an unknown request id.

mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemas::*;
use serde_json::Value;
use support::*;

/// `tests/golden/NAME`; with `UPDATE_GOLDEN=1` (exactly, and never in CI) the file is rewritten from `found` instead.
fn assert_golden(name: &str, found: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name);
    let update = std::env::var("UPDATE_GOLDEN").ok();
    assert!(
        update.is_none() || !testkit::in_ci(),
        "UPDATE_GOLDEN is set in CI, where a golden file is compared, never rewritten"
    );
    if update.as_deref() == Some("1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, found).unwrap();
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", path.display()));
    assert_eq!(found, expected, "{} differs (UPDATE_GOLDEN=1 rewrites it after a deliberate change)", path.display());
}

fn generated_ledger() -> TestLedger {
    let test = TestLedger::new();
    let out = test.file("generated");
    run(&["generate", "--tenants", "10", "--events", "3000", "--seed", "11", "--out", out.to_str().unwrap()], b"")
        .success();
    let mut files: Vec<_> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    for file in &files {
        test.ingest(file);
    }
    test
}

// contract §1 "Why was request X denied?": on a generated history, the first denial is explained in words that name the policy, version and counter the decision recorded (golden output).
#[test]
fn a_generated_denial_is_explained_word_for_word() {
    let test = generated_ledger();
    let query = "SELECT request_id, policy_id, policy_version, used_before, remaining FROM decision_events \
                 WHERE outcome = 'DENIED' ORDER BY seq LIMIT 1";
    let denial = &test.run(&["sql", "--format", "json", query]).success().json()[0];
    let request_id = denial["request_id"].as_str().expect("a denied request in the generated history");
    let text = test.run(&["audit", "why", request_id]).success().stdout_text();
    assert!(text.contains(&format!("Request {request_id} was DENIED: QUOTA_EXCEEDED.")), "{text}");
    let policy = format!("Policy: {} version {}", denial["policy_id"].as_str().unwrap(), denial["policy_version"]);
    assert!(text.contains(&policy), "{policy:?} missing from:\n{text}");
    let counter =
        format!("Counter at decision time: {} used before, {} remaining", denial["used_before"], denial["remaining"]);
    assert!(text.contains(&counter), "{counter:?} missing from:\n{text}");
    assert_golden("audit_why_generated.txt", &text);
    let json = test.run(&["audit", "why", request_id, "--json"]).success().json();
    assert_eq!(json["policy"]["policy_id"], denial["policy_id"]);
    assert_eq!(json["policy"]["version"], denial["policy_version"]);
    assert_eq!(json["counter"]["used_before"], denial["used_before"]);
}

fn decision(request_id: &str, occurred_at: &str, amount: i64, denied: bool) -> Event {
    Event::Decision(DecisionEvent {
        header: Header {
            subject: Some("key-1".into()),
            ..header(&format!("dec-{request_id}"), occurred_at, "org-9", "requests")
        },
        request_id: request_id.into(),
        idempotency_key: format!("idem-{request_id}"),
        amount,
        outcome: if denied { Outcome::DENIED } else { Outcome::ALLOWED },
        reason: if denied { Reason::QUOTA_EXCEEDED } else { Reason::WITHIN_LIMIT },
        policy_id: Some("org-9-daily".into()),
        policy_version: Some(2),
        window_start: Some(at("2026-10-05T00:00:00Z")),
        window_end: Some(at("2026-10-06T00:00:00Z")),
        limit: Some(110),
        // As the hook records it: consumed 105 plus the 4 held by the reservation open then.
        used_before: Some(109),
        remaining: Some(if denied { 1 } else { 0 }),
        retry_after_ms: denied.then_some(3_600_000),
        token_name: None,
    })
}

fn daily_policy(version: i32, limit: i64) -> Event {
    Event::Policy(PolicyEvent {
        version,
        ..PolicyEvent::new(
            header(&format!("org-9-daily-v{version}"), "2026-10-01T00:00:00Z", "org-9", "requests"),
            "org-9-daily",
            limit,
            Window::DAY,
            Enforcement::HARD,
            at("2026-10-01T00:00:00Z"),
        )
    })
}

fn usage_of(event_id: &str, occurred_at: &str, quantity: i64, request_id: &str) -> Event {
    Event::Usage(UsageEvent {
        header: header(event_id, occurred_at, "org-9", "requests"),
        quantity,
        request_id: Some(request_id.into()),
        attributes: BTreeMap::new(),
    })
}

fn reservation(event_id: &str, occurred_at: &str, id: &str, action: ReservationAction, amount: i64) -> Event {
    Event::Reservation(ReservationEvent {
        header: header(event_id, occurred_at, "org-9", "requests"),
        reservation_id: id.into(),
        action,
        amount,
        expires_at: (action == ReservationAction::RESERVE).then(|| Timestamp(at(occurred_at).micros() + 3_600_000_000)),
        fencing_token: None,
    })
}

/// Grant `grant-1` of org-9: 10 more requests on Oct 5, for `reason`.
fn grant_for_oct_5(reason: &str) -> Event {
    Event::Grant(GrantEvent {
        header: header("grant-1", "2026-10-05T00:00:00Z", "org-9", "requests"),
        grant_id: "grant-1".into(),
        amount: 10,
        valid_from: at("2026-10-05T00:00:00Z"),
        valid_until: at("2026-10-06T00:00:00Z"),
        reason: reason.into(),
        actor: None,
    })
}

/// org-9: a HARD daily limit of 100 (version 2), a grant of 10, 60 + 40 requests and a committed reservation of
/// 5 before a denial at 12:00 on Oct 5, a reservation of 4 open at that instant, reconciled on Oct 7.
fn hand_built() -> TestLedger {
    let test = TestLedger::new();
    let grant = grant_for_oct_5("support credit");
    let files: Vec<(&str, Vec<Event>)> = vec![
        ("policies.avro", vec![daily_policy(1, 50), daily_policy(2, 100)]),
        ("grants.avro", vec![grant]),
        (
            "usage.avro",
            vec![
                usage_of("u-1", "2026-10-05T08:00:00Z", 60, "req-a"),
                usage_of("u-2", "2026-10-05T09:00:00Z", 40, "req-b"),
                usage_of("u-3", "2026-10-05T13:00:00Z", 30, "req-c"),
            ],
        ),
        (
            "reservations.avro",
            vec![
                reservation("r-1", "2026-10-05T10:00:00Z", "rsv-1", ReservationAction::RESERVE, 8),
                reservation("r-2", "2026-10-05T10:30:00Z", "rsv-1", ReservationAction::COMMIT, 5),
                reservation("r-3", "2026-10-05T11:30:00Z", "rsv-2", ReservationAction::RESERVE, 4),
            ],
        ),
        ("decisions.avro", vec![decision("req-81f3", "2026-10-05T12:00:00Z", 10, true)]),
    ];
    for (name, events) in files {
        write_container(&test.file(name), &events);
        test.ingest(&test.file(name));
    }
    test.run(&["reconcile", "--as-of", "2026-10-07T00:00:00Z"]).expect_code(1);
    test
}

// Every part of the answer on a hand-built denial: decision, policy version in the ledger, counter and open reservations, consumption largest first with its total, grants, retry-after, later adjustments.
#[test]
fn a_hand_built_denial_is_explained_in_every_part() {
    let test = hand_built();
    let why = test.run(&["audit", "why", "req-81f3", "--json"]).success().json();
    assert_eq!(
        (why["decision"]["outcome"].as_str(), why["decision"]["reason"].as_str()),
        (Some("DENIED"), Some("QUOTA_EXCEEDED"))
    );
    assert_eq!(why["decision"]["source"], "e2e");
    assert_eq!(why["policy"]["version"], 2);
    assert_eq!((why["policy"]["limit"].as_i64(), why["policy"]["window"].as_str()), (Some(100), Some("DAY")));
    assert_eq!(why["policy"]["enforcement"], "HARD");
    assert_eq!(why["effective_limit"], 110, "limit 100 + grant 10");
    assert_eq!(why["grants"][0]["grant_id"], "grant-1");
    assert_eq!(why["counter"]["used_before"], 109);
    assert_eq!(why["consumption"]["used_before"], 109, "the ledger's account: 105 consumed + 4 held");
    assert_eq!(
        (why["counter"]["open_reservations"].as_u64(), why["counter"]["open_reservations_amount"].as_i64()),
        (Some(1), Some(4))
    );
    let consumption = &why["consumption"];
    assert_eq!((consumption["total"].as_i64(), consumption["events"].as_u64()), (Some(105), Some(3)), "u-3 came after");
    let largest: Vec<(&str, &str, i64)> = consumption["largest"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["event_id"].as_str().unwrap(), e["kind"].as_str().unwrap(), e["quantity"].as_i64().unwrap()))
        .collect();
    assert_eq!(largest, [("u-1", "usage", 60), ("u-2", "usage", 40), ("r-2", "commit", 5)]);
    assert_eq!(
        (why["retry_after_ms"].as_i64(), why["resets_at"].as_str()),
        (Some(3_600_000), Some("2026-10-06T00:00:00Z"))
    );
    let kinds: Vec<&str> = why["adjustments"].as_array().unwrap().iter().map(|a| a["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["OVERSHOOT"], "60 + 40 + 5 + 30 = 135 over 110");
    assert_eq!(why["adjustments"][0]["amount"], 25);
    let words = test.run(&["audit", "why", "req-81f3"]).success().stdout_text();
    for expected in [
        "Policy: org-9-daily version 2, tenant org-9's own, TENANT scope: at most 100 requests per DAY window, HARD enforcement",
        "Grants: 1 applied to this window, adding 10:",
        "Effective limit: 110.",
        "Counter at decision time: 109 used before (which includes the 4 held by 1 reservation open then), 1 remaining (limit 110).",
        "109 used + 10 asked = 119, over the limit of 110.",
        "per the ledger: 105 requests in 3 events, and 4 held by 1 open reservation: 109 used before.",
        "Retry after: 3600000 ms (3600 s).",
        "The window resets at 2026-10-06T00:00:00Z.",
        "Adjustments for this window since: 1.",
    ] {
        assert!(words.contains(expected), "{expected:?} missing from:\n{words}");
    }
}

// An unknown request id: a clear message, exit 1, and the nearest recorded ones.
#[test]
fn an_unknown_request_id_names_the_nearest() {
    let test = hand_built();
    let unknown = test.run(&["audit", "why", "req-81f4"]).expect_code(1).stdout_text();
    assert_eq!(
        unknown,
        "No decision is recorded for request id \"req-81f4\".\nNearest recorded request ids:\n  req-81f3\n"
    );
    let json: Value = test.run(&["audit", "why", "nothing-like-it", "--json"]).expect_code(1).json();
    assert_eq!(
        json,
        serde_json::json!({"error": "unknown_request_id", "request_id": "nothing-like-it", "nearest": []})
    );
}

// Proves that the nearest request ids are found whatever the case typed.
#[test]
fn an_unknown_request_id_in_another_case_names_the_nearest() {
    let test = hand_built();
    let unknown = test.run(&["audit", "why", "REQ-81F3"]).expect_code(1).stdout_text();
    assert_eq!(
        unknown,
        "No decision is recorded for request id \"REQ-81F3\".\nNearest recorded request ids:\n  req-81f3\n"
    );
}

// Proves that a tenant the ledger holds no event of is said to be unknown, with the nearest known tenants, exit 1
// (as `audit why` for an unknown request id); a known tenant with nothing in the range still gets its empty
// timeline, exit 0.
#[test]
fn an_unknown_tenant_names_the_nearest() {
    let test = hand_built();
    let range = ["--from", "2026-10-05T00:00:00Z", "--to", "2026-10-08T00:00:00Z"];
    let unknown = test.run(&[&["audit", "tenant", "org-999"][..], &range].concat()).expect_code(1).stdout_text();
    assert_eq!(unknown, "No event is recorded for tenant \"org-999\".\nNearest recorded tenants:\n  org-9\n");
    let in_capitals = test.run(&[&["audit", "tenant", "ORG-9"][..], &range].concat()).expect_code(1).stdout_text();
    assert!(in_capitals.ends_with("Nearest recorded tenants:\n  org-9\n"), "{in_capitals}");
    let json: Value =
        test.run(&[&["audit", "tenant", "nothing-like-it"][..], &range, &["--json"]].concat()).expect_code(1).json();
    assert_eq!(
        (&json["error"], &json["tenant"], &json["nearest"]),
        (&"unknown_tenant".into(), &"nothing-like-it".into(), &serde_json::json!([]))
    );
    // The keys of a known tenant's timeline are there too, empty: a script reading them does not break.
    for part in ["decisions", "consumption", "reservations", "adjustments"] {
        assert_eq!(json[part], serde_json::json!([]), "{part}: {json}");
    }

    let quiet = ["audit", "tenant", "org-9", "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-02T00:00:00Z"];
    let timeline = test.run(&[&quiet[..], &["--json"]].concat()).success().json();
    for part in ["decisions", "consumption", "reservations", "adjustments"] {
        assert_eq!(timeline[part], serde_json::json!([]), "{part}: {timeline}");
    }
}

// `audit tenant`: decisions, consumption per day (usage and valid commits), reservations with their state, adjustments (the expiry written on Oct 7 included).
#[test]
fn a_tenant_timeline_over_a_range() {
    let test = hand_built();
    let args = ["audit", "tenant", "org-9", "--from", "2026-10-05T00:00:00Z", "--to", "2026-10-08T00:00:00Z", "--json"];
    let timeline = test.run(&args).success().json();
    assert_eq!(timeline["decisions"].as_array().unwrap().len(), 1);
    let day = &timeline["consumption"][0];
    assert_eq!(
        (day["usage"].as_i64(), day["commits"].as_i64(), day["total"].as_i64()),
        (Some(130), Some(5), Some(135))
    );
    let states: Vec<(&str, &str)> = timeline["reservations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["reservation_id"].as_str().unwrap(), r["state"].as_str().unwrap()))
        .collect();
    assert_eq!(states, [("rsv-1", "committed"), ("rsv-2", "expired")]);
    let mut kinds: Vec<&str> =
        timeline["adjustments"].as_array().unwrap().iter().map(|a| a["kind"].as_str().unwrap()).collect();
    kinds.sort_unstable();
    assert_eq!(kinds, ["OVERSHOOT", "RESERVATION_EXPIRED"], "in ledger order, whichever reconcile wrote first");
    let words = test.run(&args[..args.len() - 1]).success().stdout_text();
    assert!(words.starts_with("Tenant org-9 from 2026-10-05T00:00:00Z to 2026-10-08T00:00:00Z"), "{words}");
    let bad = test.run(&["audit", "tenant", "org-9", "--from", "2026-10-06T00:00:00Z", "--to", "2026-10-05T00:00:00Z"]);
    assert!(bad.expect_code(2).stderr.contains("must be before"));
}

/// Ingests `events`, one container file per event (in order: each file is one ledger entry, so that ledger order
/// is the order given, as the hook appends).
fn ingest_in_order(test: &TestLedger, events: Vec<Event>) {
    for (index, event) in events.into_iter().enumerate() {
        let file = test.file(&format!("in-order-{index}.avro"));
        write_container(&file, &[event]);
        test.ingest(&file);
    }
}

/// What the hook decides and records for org-s (TENANT MONTH HARD limit 100): reserve 50 (the decision, then its
/// RESERVE at the same instant), then check 40 (recorded with `used_before` 50: consumed 0 + held 50).
fn reserved_then_checked() -> TestLedger {
    let test = TestLedger::new();
    let policy = Event::Policy(PolicyEvent::new(
        header("org-s-requests-v1", "2026-11-01T00:00:00Z", "org-s", "requests"),
        "org-s-requests",
        100,
        Window::MONTH,
        Enforcement::HARD,
        at("2026-11-01T00:00:00Z"),
    ));
    let allowed = |request_id: &str, occurred_at: &str, amount: i64, used_before: i64| {
        Event::Decision(DecisionEvent {
            header: header(&format!("dec-{request_id}"), occurred_at, "org-s", "requests"),
            request_id: request_id.into(),
            idempotency_key: format!("idem-{request_id}"),
            amount,
            outcome: Outcome::ALLOWED,
            reason: Reason::WITHIN_LIMIT,
            policy_id: Some("org-s-requests".into()),
            policy_version: Some(1),
            window_start: Some(at("2026-11-01T00:00:00Z")),
            window_end: Some(at("2026-12-01T00:00:00Z")),
            limit: Some(100),
            used_before: Some(used_before),
            remaining: Some(100 - used_before - amount),
            retry_after_ms: None,
            token_name: None,
        })
    };
    let reserve = Event::Reservation(ReservationEvent {
        header: header("rsv-s-reserve", "2026-11-10T10:00:00Z", "org-s", "requests"),
        reservation_id: "rsv-s".into(),
        action: ReservationAction::RESERVE,
        amount: 50,
        expires_at: Some(at("2026-11-10T10:05:00Z")),
        fencing_token: None,
    });
    let usage = Event::Usage(UsageEvent {
        header: header("use-req-check", "2026-11-10T10:01:00Z", "org-s", "requests"),
        quantity: 40,
        request_id: Some("req-check".into()),
        attributes: BTreeMap::new(),
    });
    ingest_in_order(
        &test,
        vec![
            policy,
            allowed("req-reserve", "2026-11-10T10:00:00Z", 50, 0),
            reserve,
            allowed("req-check", "2026-11-10T10:01:00Z", 40, 50),
            usage,
        ],
    );
    test
}

// The recorded used_before already includes what open reservations held, so a check allowed with 50 used (all held)
// and 40 asked is within 100, and the ledger's own account (consumption + held, its own RESERVE not counted) gives
// the same 50 and 0.
#[test]
fn why_counts_held_reservations_once() {
    let test = reserved_then_checked();
    let words = test.run(&["audit", "why", "req-check"]).success().stdout_text();
    for expected in [
        "Counter at decision time: 50 used before (which includes the 50 held by 1 reservation open then), 10 remaining after it (limit 100).",
        "50 used + 40 asked = 90, within the limit of 100.",
        "per the ledger: 0 requests in 0 events, and 50 held by 1 open reservation: 50 used before.",
    ] {
        assert!(words.contains(expected), "{expected:?} missing from:\n{words}");
    }
    assert!(!words.contains("should have been denied"), "{words}");
    for request_id in ["req-check", "req-reserve"] {
        let why = test.run(&["audit", "why", request_id, "--json"]).success().json();
        assert_eq!(why["consumption"]["used_before"], why["counter"]["used_before"], "{request_id}: {why}");
    }
    let reserve = test.run(&["audit", "why", "req-reserve", "--json"]).success().json();
    assert_eq!(reserve["counter"]["open_reservations"], 0, "its own RESERVE came after the decision: {reserve}");
}

/// org-t: reservations expired, a refused COMMIT and a conflicting copy, judged by a run inside November
/// (as of Nov 20) and by the month-end run dated exactly at the range's end (as of Dec 1).
fn reconciled_at_month_end() -> TestLedger {
    let test = TestLedger::new();
    let reservation = |event_id: &str, occurred_at: &str, id: &str, action: ReservationAction| {
        Event::Reservation(ReservationEvent {
            header: header(event_id, occurred_at, "org-t", "requests"),
            reservation_id: id.into(),
            action,
            amount: if action == ReservationAction::RELEASE { 0 } else { 10 },
            expires_at: (action == ReservationAction::RESERVE)
                .then(|| Timestamp(at(occurred_at).micros() + 3_600_000_000)),
            fencing_token: None,
        })
    };
    use ReservationAction::*;
    // Reserved on Oct 31 and Nov 10, both expired by the run of Nov 20.
    ingest_in_order(
        &test,
        vec![
            reservation("rsv-z-reserve", "2026-10-31T23:00:00Z", "rsv-z", RESERVE),
            reservation("rsv-a-reserve", "2026-11-10T10:00:00Z", "rsv-a", RESERVE),
        ],
    );
    test.run(&["reconcile", "--as-of", "2026-11-20T00:00:00Z"]).expect_code(1);
    ingest_in_order(
        &test,
        vec![
            reservation("rsv-b-reserve", "2026-11-25T10:00:00Z", "rsv-b", RESERVE),
            reservation("rsv-b-release", "2026-11-25T10:10:00Z", "rsv-b", RELEASE),
            reservation("rsv-b-commit", "2026-11-25T10:20:00Z", "rsv-b", COMMIT),
            reservation("rsv-e-reserve", "2026-11-28T10:00:00Z", "rsv-e", RESERVE),
            usage("use-1", "2026-11-26T10:00:00Z", "org-t", 5),
            usage("use-1", "2026-11-26T10:00:00Z", "org-t", 7),
        ],
    );
    test.run(&["reconcile", "--as-of", "2026-12-01T00:00:00Z"]).expect_code(1);
    test
}

/// `audit tenant org-t --json` over [from, to): the (kind, refs) of its adjustments, sorted.
fn adjustments_of(test: &TestLedger, from: &str, to: &str) -> Vec<(String, String)> {
    let timeline = test.run(&["audit", "tenant", "org-t", "--from", from, "--to", to, "--json"]).success().json();
    let mut found: Vec<(String, String)> = timeline["adjustments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["kind"].as_str().unwrap().to_string(), a["refs"].to_string()))
        .collect();
    found.sort();
    found
}

// Adjustments without a window belong to the range their events happened in (the RESERVE, the refused close, the
// conflicting copy), not to the run's --as-of: a month-end run dated exactly at `to` is in the month, an October
// reservation expired by a November run is not.
#[test]
fn tenant_adjustments_without_a_window_follow_their_events() {
    let test = reconciled_at_month_end();
    let pair = |kind: &str, event_id: &str| (kind.to_string(), format!("[\"{event_id}\"]"));
    assert_eq!(
        adjustments_of(&test, "2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z"),
        [
            pair("CONFLICTING_DUPLICATE", "use-1"),
            pair("REFUSED_TRANSITION", "rsv-b-commit"),
            pair("RESERVATION_EXPIRED", "rsv-a-reserve"),
            pair("RESERVATION_EXPIRED", "rsv-e-reserve"),
        ]
    );
    assert_eq!(
        adjustments_of(&test, "2026-10-01T00:00:00Z", "2026-11-01T00:00:00Z"),
        [pair("RESERVATION_EXPIRED", "rsv-z-reserve")]
    );
    assert_eq!(
        adjustments_of(&test, "2026-11-26T00:00:00Z", "2026-11-27T00:00:00Z"),
        [pair("CONFLICTING_DUPLICATE", "use-1")]
    );
}

// A reservation's state is as of `to`: committed at 10:30, it is open in a range ending at 10:15.
#[test]
fn tenant_reservation_state_is_as_of_the_end_of_the_range() {
    let test = hand_built();
    let states = |to: &str| -> Vec<(String, String, Value)> {
        let args = ["audit", "tenant", "org-9", "--from", "2026-10-05T00:00:00Z", "--to", to, "--json"];
        let timeline = test.run(&args).success().json();
        timeline["reservations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["reservation_id"].as_str().unwrap().into(),
                    r["state"].as_str().unwrap().into(),
                    r["committed"].clone(),
                )
            })
            .collect()
    };
    let line = |id: &str, state: &str, committed: Value| (id.to_string(), state.to_string(), committed);
    assert_eq!(states("2026-10-05T10:15:00Z"), [line("rsv-1", "open", Value::Null)]);
    assert_eq!(
        states("2026-10-05T12:00:00Z"),
        [line("rsv-1", "committed", 5.into()), line("rsv-2", "open", Value::Null)]
    );
}

// The retry time in seconds is rounded up, as the Retry-After header is: 86356.8 s is 86357 s.
#[test]
fn why_rounds_the_retry_seconds_up() {
    let test = TestLedger::new();
    let Event::Decision(mut denial) = decision("req-retry", "2026-10-05T12:00:00Z", 10, true) else { unreachable!() };
    denial.retry_after_ms = Some(86_356_800);
    ingest_in_order(&test, vec![Event::Decision(denial)]);
    let words = test.run(&["audit", "why", "req-retry"]).success().stdout_text();
    assert!(words.contains("Retry after: 86356800 ms (86357 s)."), "{words}");
}

/// A decision of org-1 on `requests` (no subject) under `quota` version 1 in November's MONTH window, recorded
/// with the counter (`limit`, `used_before`): DENIED (QUOTA_EXCEEDED) when it has no room for `amount`.
fn decision_of_org_1(event_id: &str, request_id: &str, occurred_at: &str, amount: i64, counter: (i64, i64)) -> Event {
    let (limit, used_before) = counter;
    let denied = used_before + amount > limit;
    Event::Decision(DecisionEvent {
        header: header(event_id, occurred_at, "org-1", "requests"),
        request_id: request_id.into(),
        idempotency_key: format!("idem-{event_id}"),
        amount,
        outcome: if denied { Outcome::DENIED } else { Outcome::ALLOWED },
        reason: if denied { Reason::QUOTA_EXCEEDED } else { Reason::WITHIN_LIMIT },
        policy_id: Some("quota".into()),
        policy_version: Some(1),
        window_start: Some(at("2026-11-01T00:00:00Z")),
        window_end: Some(at("2026-12-01T00:00:00Z")),
        limit: Some(limit),
        used_before: Some(used_before),
        remaining: Some(if denied { limit - used_before } else { limit - used_before - amount }),
        retry_after_ms: None,
        token_name: None,
    })
}

/// Version 1 of policy `quota`, effective from 2026-01-01 (its event time too), with no burst.
fn quota_v1(event_id: &str, owner: &str, metric: &str, limit: i64, shape: (Scope, Window, Enforcement)) -> Event {
    let (scope, window, enforcement) = shape;
    Event::Policy(PolicyEvent {
        scope,
        ..PolicyEvent::new(
            header(event_id, "2026-01-01T00:00:00Z", owner, metric),
            "quota",
            limit,
            window,
            enforcement,
            at("2026-01-01T00:00:00Z"),
        )
    })
}

// Contract §5 "Policy in force" is per tenant *and metric*: a denial on `requests` under `quota` v1 is explained
// with the `*` plan's requests policy and the grants of its TENANT windows, not with org-1's own `quota` v1 of
// another metric (tokens, SUBJECT scope), which has nothing to do with it.
#[test]
fn why_takes_the_policy_of_the_decisions_metric() {
    let test = TestLedger::new();
    let grant = Event::Grant(GrantEvent {
        header: header("grant-nov", "2026-11-01T00:00:00Z", "org-1", "requests"),
        grant_id: "grant-nov".into(),
        amount: 20,
        valid_from: at("2026-11-01T00:00:00Z"),
        valid_until: at("2026-12-01T00:00:00Z"),
        reason: "support credit".into(),
        actor: None,
    });
    ingest_in_order(
        &test,
        vec![
            quota_v1("plan-quota", "*", "requests", 100, (Scope::TENANT, Window::MONTH, Enforcement::HARD)),
            quota_v1("own-quota", "org-1", "tokens", 5_000, (Scope::SUBJECT, Window::DAY, Enforcement::SOFT)),
            grant,
            usage("u-1", "2026-11-10T00:00:00Z", "org-1", 120),
            decision_of_org_1("d-1", "req-1", "2026-11-10T10:05:00Z", 1, (120, 120)),
        ],
    );
    let why = test.run(&["audit", "why", "req-1", "--json"]).success().json();
    let policy = &why["policy"];
    assert_eq!(
        (policy["owner"].as_str(), policy["limit"].as_i64(), policy["window"].as_str(), policy["scope"].as_str()),
        (Some("*"), Some(100), Some("MONTH"), Some("TENANT")),
        "{why}"
    );
    assert_eq!(policy["enforcement"], "HARD");
    let grants: Vec<&str> = why["grants"].as_array().unwrap().iter().map(|g| g["grant_id"].as_str().unwrap()).collect();
    assert_eq!(grants, ["grant-nov"], "a TENANT policy's window is raised by the grant without subject: {why}");
    assert_eq!(why["effective_limit"], 120, "limit 100 + grant 20");
    let words = test.run(&["audit", "why", "req-1"]).success().stdout_text();
    let expected =
        "Policy: quota version 1, the plan default (tenant *), TENANT scope: at most 100 requests per MONTH window";
    assert!(words.contains(expected), "{expected:?} missing from:\n{words}");
    // The tenant's timeline says whose copy too: `quota v1` alone could be read as org-1's own.
    let range = ["--from", "2026-11-10T00:00:00Z", "--to", "2026-11-11T00:00:00Z"];
    let timeline = test.run(&[&["audit", "tenant", "org-1"][..], &range, &["--json"]].concat()).success().json();
    assert_eq!(timeline["decisions"][0]["policy_owner"], "*", "{timeline}");
    let words = test.run(&[&["audit", "tenant", "org-1"][..], &range].concat()).success().stdout_text();
    assert!(words.contains("quota v1 (plan default)"), "{words}");
}

/// Usage of org-1's `requests` recorded for `request_id`.
fn usage_of_org_1(event_id: &str, occurred_at: &str, quantity: i64, request_id: &str) -> Event {
    Event::Usage(UsageEvent {
        header: header(event_id, occurred_at, "org-1", "requests"),
        quantity,
        request_id: Some(request_id.into()),
        attributes: BTreeMap::new(),
    })
}

// Proves that a request_id decided twice (allowed 8 at 10:00, denied at 10:05 with 8 used before) is explained by
// its latest decision, and that the usage its first decision recorded is "before" the second (contract §5
// consumption): 8 used before, as recorded. Only usage of the request at the explained decision's own instant is
// its own, whichever the ledger holds first (req-2's usage reached the ledger before its decision).
#[test]
fn why_counts_the_usage_of_an_earlier_decision_of_the_same_request() {
    let test = TestLedger::new();
    let own_monthly = (Scope::TENANT, Window::MONTH, Enforcement::HARD);
    ingest_in_order(
        &test,
        vec![
            quota_v1("own-quota", "org-1", "requests", 10, own_monthly),
            decision_of_org_1("d-1", "req-1", "2026-11-10T10:00:00Z", 8, (10, 0)),
            usage_of_org_1("u-1", "2026-11-10T10:00:00Z", 8, "req-1"),
            decision_of_org_1("d-2", "req-1", "2026-11-10T10:05:00Z", 8, (10, 8)),
            usage_of_org_1("u-2", "2026-11-10T10:10:00Z", 1, "req-2"),
            decision_of_org_1("d-3", "req-2", "2026-11-10T10:10:00Z", 1, (10, 8)),
        ],
    );
    let why = test.run(&["audit", "why", "req-1", "--json"]).success().json();
    assert_eq!((why["decision"]["event_id"].as_str(), why["decisions_for_request"].as_u64()), (Some("d-2"), Some(2)));
    let consumption = &why["consumption"];
    assert_eq!(
        (consumption["total"].as_i64(), consumption["events"].as_u64(), consumption["used_before"].as_i64()),
        (Some(8), Some(1), Some(8)),
        "{why}"
    );
    assert_eq!(consumption["largest"][0]["event_id"], "u-1");
    let words = test.run(&["audit", "why", "req-1"]).success().stdout_text();
    for expected in [
        "(2 decisions are recorded for this request id; this is the latest.)",
        "per the ledger: 8 requests in 1 event, and no reservation open: 8 used before.",
    ] {
        assert!(words.contains(expected), "{expected:?} missing from:\n{words}");
    }
    let own_first = test.run(&["audit", "why", "req-2", "--json"]).success().json();
    assert_eq!(own_first["consumption"]["used_before"], 8, "u-2 is req-2's own: {own_first}");
}

// Proves that a version published twice (`quota` v1 with limit 10, then again with 20) is shown as the copy the
// hook, reconcile and billing apply (contract §5 "Policy in force", rules::policy's tie rule: the later one), so
// the answer agrees with the recorded limit 20 and with reconcile finding no overshoot.
#[test]
fn why_shows_the_copy_of_a_republished_version_that_reconcile_applies() {
    let test = TestLedger::new();
    let own_monthly = (Scope::TENANT, Window::MONTH, Enforcement::HARD);
    ingest_in_order(
        &test,
        vec![
            quota_v1("quota-a", "org-1", "requests", 10, own_monthly),
            quota_v1("quota-b", "org-1", "requests", 20, own_monthly),
            usage("u-1", "2026-11-10T00:00:00Z", "org-1", 15),
            decision_of_org_1("d-1", "req-1", "2026-11-10T10:05:00Z", 5, (20, 15)),
        ],
    );
    let why = test.run(&["audit", "why", "req-1", "--json"]).success().json();
    let policy = &why["policy"];
    assert_eq!(
        (policy["limit"].as_i64(), policy["seq"].as_u64(), policy["copies"].as_u64()),
        (Some(20), Some(2), Some(2)),
        "{why}"
    );
    assert_eq!(why["effective_limit"], 20);
    let range = ["--from", "2026-11-10T00:00:00Z", "--to", "2026-11-11T00:00:00Z", "--json"];
    let timeline = test.run(&[&["audit", "tenant", "org-1"][..], &range].concat()).success().json();
    assert_eq!(timeline["decisions"][0]["policy_owner"], "org-1", "{timeline}");
    let words = test.run(&["audit", "why", "req-1"]).success().stdout_text();
    for expected in
        ["at most 20 requests per MONTH window", "This version was published 2 times; shown is ledger entry 2"]
    {
        assert!(words.contains(expected), "{expected:?} missing from:\n{words}");
    }
    // Reconcile and billing read the same copy: 15 within 20, no overshoot to report.
    test.run(&["reconcile", "--as-of", "2026-12-01T00:00:00Z"]).expect_code(0);
    let billing = test.run(&["export", "billing", "--period", "2026-11", "--format", "jsonl"]).success().stdout_text();
    let row: Value = serde_json::from_str(billing.lines().next().expect("org-1's requests row")).unwrap();
    assert_eq!((row["limit"].as_i64(), row["overshoot"].as_i64()), (Some(20), Some(0)), "{billing}");
}

// README "Reconciliation" (a reservation is (tenant, reservation_id)): org-a and org-b both chose `r-1`; each
// tenant's timeline shows its own reservation committed, and reconcile refused nothing for audit to list.
#[test]
fn tenants_sharing_a_reservation_id_each_see_their_own_reservation() {
    let test = TestLedger::new();
    let of = |tenant: &str, event_id: &str, occurred_at: &str, action: ReservationAction, amount: i64| {
        let expires_at =
            (action == ReservationAction::RESERVE).then(|| Timestamp(at(occurred_at).micros() + 600_000_000));
        let header = header(event_id, occurred_at, tenant, "requests");
        Event::Reservation(ReservationEvent {
            header,
            reservation_id: "r-1".into(),
            action,
            amount,
            expires_at,
            fencing_token: None,
        })
    };
    use ReservationAction::*;
    ingest_in_order(
        &test,
        vec![
            of("org-a", "a-res", "2026-11-10T10:00:00Z", RESERVE, 100),
            of("org-b", "b-res", "2026-11-10T10:01:00Z", RESERVE, 50),
            of("org-b", "b-com", "2026-11-10T10:02:00Z", COMMIT, 40),
            of("org-a", "a-com", "2026-11-10T10:03:00Z", COMMIT, 90),
        ],
    );
    test.run(&["reconcile", "--as-of", "2026-12-01T00:00:00Z"]).success();
    for (tenant, committed) in [("org-a", 90), ("org-b", 40)] {
        let args =
            ["audit", "tenant", tenant, "--from", "2026-11-10T00:00:00Z", "--to", "2026-11-11T00:00:00Z", "--json"];
        let timeline = test.run(&args).success().json();
        let lines: Vec<(&str, &str, Value)> = timeline["reservations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["reservation_id"].as_str().unwrap(), r["state"].as_str().unwrap(), r["committed"].clone()))
            .collect();
        assert_eq!(lines, [("r-1", "committed", committed.into())], "{tenant}");
        assert_eq!(timeline["adjustments"], serde_json::json!([]), "{tenant}: nothing refused, nothing expired");
        assert_eq!(timeline["consumption"][0]["commits"].as_i64(), Some(committed), "{tenant}");
    }
}

// Under a SUBJECT-scope policy only the decision's subject's events and grants count, and so only its adjustments
// are listed: bob's OVERSHOOT of `quota`, listed under alice's decision, would read as alice's. Adjustments carry
// their subject (text and `--json`) for the same reason.
#[test]
fn why_lists_only_the_decisions_subjects_adjustments() {
    let test = TestLedger::new();
    let with_subject = |event: Event, subject: &str| match event {
        Event::Usage(mut u) => {
            u.header.subject = Some(subject.into());
            Event::Usage(u)
        }
        Event::Decision(mut d) => {
            d.header.subject = Some(subject.into());
            Event::Decision(d)
        }
        other => other,
    };
    let Event::Decision(denied) = decision_of_org_1("d-alice", "req-alice", "2026-11-10T10:00:00Z", 5, (4, 0)) else {
        unreachable!()
    };
    let denied = Event::Decision(DecisionEvent {
        window_start: Some(at("2026-11-10T00:00:00Z")),
        window_end: Some(at("2026-11-11T00:00:00Z")),
        ..denied
    });
    ingest_in_order(
        &test,
        vec![
            quota_v1("own-quota", "org-1", "requests", 4, (Scope::SUBJECT, Window::DAY, Enforcement::HARD)),
            with_subject(usage("u-bob", "2026-11-10T09:00:00Z", "org-1", 10), "bob"),
            with_subject(denied, "alice"),
        ],
    );
    test.run(&["reconcile", "--as-of", "2026-11-12T00:00:00Z"]).expect_code(1);
    let bob = test.run(&["sql", "--format", "csv", "SELECT subject, amount FROM adjustment_events"]).success();
    assert_eq!(bob.stdout_text(), "subject,amount\nbob,6\n", "bob's overshoot is recorded");
    let why = test.run(&["audit", "why", "req-alice", "--json"]).success().json();
    assert_eq!(why["adjustments"], serde_json::json!([]), "{why}");
    let words = test.run(&["audit", "why", "req-alice"]).success().stdout_text();
    assert!(words.contains("Adjustments for this window since: none."), "{words}");
}

// Proves that a decision of another enforcement point that names no policy, limit or window (here
// CONCURRENCY_LIMITED) is said to have none, not given a counter line of blanks and "0 requests in 0 events" of a
// window it never named.
#[test]
fn why_says_a_decision_names_no_limit_and_no_window() {
    let test = TestLedger::new();
    // A decision naming no policy, limit or window, as `sample_event` makes one.
    let Event::Decision(sample) = sample_event(EventType::DecisionEvent, "d-c") else { unreachable!() };
    let concurrency =
        Event::Decision(DecisionEvent { outcome: Outcome::DENIED, reason: Reason::CONCURRENCY_LIMITED, ..sample });
    ingest_in_order(&test, vec![usage("u-1", "2026-11-02T09:00:00Z", "org-poison", 40), concurrency]);
    let words = test.run(&["audit", "why", "req-d-c"]).success().stdout_text();
    for expected in [
        "Counter at decision time: none recorded (the decision names no limit).",
        "Consumption: the decision names no window, so none is counted against it.",
    ] {
        assert!(words.contains(expected), "{expected:?} missing from:\n{words}");
    }
}

// Proves that a producer's control characters never forge a line of support's answer: a policy id, a source and a
// grant reason holding a newline or an escape sequence (names and ids are refused with them, these are not) are
// shown escaped by `audit why` and `audit tenant`, and kept as they are in `--json`.
#[test]
fn audit_answers_show_control_characters_escaped() {
    let test = TestLedger::new();
    let forged = "org-9-daily\nRequest req-81f3 was ALLOWED: WITHIN_LIMIT.\u{1b}[2J";
    let Event::Decision(denial) = decision("req-81f3", "2026-10-05T12:00:00Z", 10, true) else { unreachable!() };
    let denial = DecisionEvent {
        header: Header { source: "edge\r\n1".into(), ..denial.header.clone() },
        policy_id: Some(forged.into()),
        ..denial
    };
    let grant = grant_for_oct_5("credit\n  grant-2  999");
    let plain = decision("req-2", "2026-10-05T12:30:00Z", 10, true);
    ingest_in_order(&test, vec![daily_policy(2, 100), grant, Event::Decision(denial), plain]);
    let grants = test.run(&["audit", "why", "req-2"]).success().stdout_text();
    assert!(grants.contains("credit\\n  grant-2  999"), "{grants}");
    assert!(!grants.lines().any(|line| line.trim_start().starts_with("grant-2")), "{grants}");
    let words = test.run(&["audit", "why", "req-81f3"]).success().stdout_text();
    assert!(!words.chars().any(|c| c.is_control() && c != '\n'), "{words:?}");
    assert!(!words.lines().any(|line| line.starts_with("Request req-81f3 was ALLOWED")), "{words}");
    assert!(words.contains("org-9-daily\\nRequest req-81f3 was ALLOWED: WITHIN_LIMIT.\\u{1b}[2J"), "{words}");
    assert!(words.contains("by edge\\r\\n1 for tenant org-9"), "{words}");
    let json = test.run(&["audit", "why", "req-81f3", "--json"]).success().json();
    assert_eq!(json["decision"]["policy_id"], forged);
    let timeline = test
        .run(&["audit", "tenant", "org-9", "--from", "2026-10-01T00:00:00Z", "--to", "2026-11-01T00:00:00Z"])
        .success()
        .stdout_text();
    assert!(!timeline.chars().any(|c| c.is_control() && c != '\n'), "{timeline:?}");
    assert!(timeline.contains("org-9-daily\\nRequest"), "{timeline}");
    assert!(!timeline.lines().any(|line| line.starts_with("Request req-81f3")), "{timeline}");
}

// A denial by a gauge quota (storage_bytes, NO_INSERTS) of a request of another metric is explained
// by the gauge: its policy found under its own metric, the level against the limit, what the violation refuses, and
// no window consumption or reset time that would mislead.
#[test]
fn why_explains_a_gauge_quota_denial() {
    let test = TestLedger::new();
    let Event::Policy(storage) =
        quota_v1("storage-v1", "org-1", "storage_bytes", 1_000, (Scope::TENANT, Window::DAY, Enforcement::HARD))
    else {
        unreachable!()
    };
    let gauge = PolicyEvent { policy_id: "storage".into(), violation: Some(Violation::NO_INSERTS), ..storage };
    let Event::Decision(denial) = decision_of_org_1("d-g", "req-g", "2026-11-10T10:05:00Z", 1, (1_000, 1_500)) else {
        unreachable!()
    };
    let denial = DecisionEvent {
        policy_id: Some("storage".into()),
        window_start: Some(at("2026-11-10T00:00:00Z")),
        window_end: Some(at("2026-11-11T00:00:00Z")),
        remaining: Some(0),
        ..denial
    };
    let level = Event::Usage(UsageEvent {
        header: header("level-1", "2026-11-10T09:00:00Z", "org-1", "storage_bytes"),
        quantity: 1_500,
        request_id: None,
        attributes: Default::default(),
    });
    ingest_in_order(&test, vec![Event::Policy(gauge), level, Event::Decision(denial)]);
    let why = test.run(&["audit", "why", "req-g", "--json"]).success().json();
    let policy = &why["policy"];
    assert_eq!(
        (policy["policy_id"].as_str(), policy["violation"].as_str(), policy["gauge_metric"].as_str()),
        (Some("storage"), Some("NO_INSERTS"), Some("storage_bytes")),
        "{why}"
    );
    assert_eq!(why["resets_at"], serde_json::Value::Null, "a level does not reset with its window: {why}");
    let words = test.run(&["audit", "why", "req-g"]).success().stdout_text();
    for expected in [
        "a gauge quota: the tenant's level of storage_bytes (the latest it reported) at most 1000",
        "NO_INSERTS: inserts are refused (and requests that name no operation)",
        "Level of storage_bytes at decision time: 1500, above the limit of 1000.",
        "so the request was refused",
        "Consumption: not what decided",
    ] {
        assert!(words.contains(expected), "{expected:?} missing from:\n{words}");
    }
    assert!(!words.contains("The window resets at"), "{words}");
}

// Under a PROJECT-scope policy a decision is explained by its project's window alone: the usage of
// that project counts (not another project's, nor that of requests naming none), the grants of that project raise its
// limit (not another project's, nor the tenant's), only that project's adjustments are listed (another project's
// OVERSHOOT, and that of the requests naming none, would read as this one's), and the words name the project. The same
// decision under an API_KEY policy would name its key: the scopes share the rule.
#[test]
fn why_counts_only_the_decisions_project() {
    let test = TestLedger::new();
    let of_project = |event: Event, project: &str| match event {
        Event::Usage(mut u) => {
            u.header.project = Some(project.into());
            Event::Usage(u)
        }
        Event::Decision(mut d) => {
            d.header.project = Some(project.into());
            Event::Decision(d)
        }
        Event::Grant(mut g) => {
            g.header.project = Some(project.into());
            Event::Grant(g)
        }
        other => other,
    };
    let grant = |id: &str, amount: i64| {
        Event::Grant(GrantEvent {
            header: header(id, "2026-11-10T00:00:00Z", "org-1", "requests"),
            grant_id: id.into(),
            amount,
            valid_from: at("2026-11-10T00:00:00Z"),
            valid_until: at("2026-11-11T00:00:00Z"),
            reason: format!("credit {id}"),
            actor: None,
        })
    };
    // p-1's window: limit 4 + its grant 2 = 6, used 3 before the request for 5: denied.
    let Event::Decision(denied) = decision_of_org_1("d-p1", "req-p1", "2026-11-10T10:00:00Z", 5, (6, 3)) else {
        unreachable!()
    };
    let denied = Event::Decision(DecisionEvent {
        window_start: Some(at("2026-11-10T00:00:00Z")),
        window_end: Some(at("2026-11-11T00:00:00Z")),
        ..denied
    });
    ingest_in_order(
        &test,
        vec![
            quota_v1("own-quota", "org-1", "requests", 4, (Scope::PROJECT, Window::DAY, Enforcement::HARD)),
            of_project(grant("grant-p1", 2), "p-1"),
            of_project(grant("grant-p2", 50), "p-2"),
            grant("grant-tenant", 70),
            of_project(usage("u-p1", "2026-11-10T08:00:00Z", "org-1", 3), "p-1"),
            of_project(usage("u-p2", "2026-11-10T09:00:00Z", "org-1", 60), "p-2"),
            usage("u-none", "2026-11-10T09:30:00Z", "org-1", 80),
            of_project(denied, "p-1"),
        ],
    );
    let run = test.run(&["reconcile", "--as-of", "2026-11-12T00:00:00Z", "--json"]).expect_code(1).json();
    let mut recorded: Vec<(Option<&str>, Option<&str>, Option<i64>)> = run["adjustments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["project"].as_str(), a["scope"].as_str(), a["amount"].as_i64()))
        .collect();
    recorded.sort();
    assert_eq!(
        recorded,
        [(None, Some("PROJECT"), Some(76)), (Some("p-2"), Some("PROJECT"), Some(6))],
        "the overshoots of the requests naming no project (80 - 4) and of p-2 (60 - 54), none of p-1's: {run}"
    );
    let why = test.run(&["audit", "why", "req-p1", "--json"]).success().json();
    assert_eq!(why["decision"]["project"], "p-1", "{why}");
    assert_eq!(why["policy"]["scope"], "PROJECT", "{why}");
    assert_eq!(
        (why["consumption"]["total"].as_i64(), why["consumption"]["events"].as_i64()),
        (Some(3), Some(1)),
        "{why}"
    );
    assert_eq!(why["consumption"]["largest"][0]["event_id"], "u-p1", "{why}");
    let grants: Vec<&str> = why["grants"].as_array().unwrap().iter().map(|g| g["grant_id"].as_str().unwrap()).collect();
    assert_eq!(grants, ["grant-p1"], "{why}");
    assert_eq!(why["effective_limit"], 6, "limit 4 + p-1's grant 2: {why}");
    assert_eq!(why["adjustments"], serde_json::json!([]), "{why}");
    let words = test.run(&["audit", "why", "req-p1"]).success().stdout_text();
    for expected in [
        "for tenant org-1, project p-1, metric requests, asking for 5.",
        "PROJECT scope, for project \"p-1\": at most 4 requests per DAY window",
        "Effective limit: 6.",
        "Adjustments for this window since: none.",
    ] {
        assert!(words.contains(expected), "{expected:?} missing from:\n{words}");
    }
}

// A denial by a ROLLING quota (10,000 requests in any 24 hours) is explained as support would say it:
// the limit over any 24 hours, what the 24 hours before the decision held (not the usage that had aged out), and when
// enough of it ages out, in place of a calendar window's reset.
#[test]
fn why_explains_a_rolling_window_denial() {
    let test = TestLedger::new();
    let Event::Policy(quota) =
        quota_v1("rolling-v1", "org-1", "requests", 10_000, (Scope::TENANT, Window::ROLLING, Enforcement::HARD))
    else {
        unreachable!()
    };
    let rolling = PolicyEvent { window_seconds: Some(86_400), ..quota };
    let Event::Decision(denial) = decision_of_org_1("d-r", "req-r", "2026-12-04T10:00:00Z", 1, (10_000, 10_000)) else {
        unreachable!()
    };
    // As the hook records it: the window ending with the decision, and the wait until the usage of 13:00 the day
    // before ages out.
    let denial = DecisionEvent {
        window_start: Some(at("2026-12-03T10:00:00.000001Z")),
        window_end: Some(at("2026-12-04T10:00:00.000001Z")),
        retry_after_ms: Some(3 * 3_600_000),
        ..denial
    };
    ingest_in_order(
        &test,
        vec![
            Event::Policy(rolling),
            usage("u-aged", "2026-12-03T09:00:00Z", "org-1", 4_000),
            usage("u-1", "2026-12-03T13:00:00Z", "org-1", 6_000),
            usage("u-2", "2026-12-04T08:00:00Z", "org-1", 4_000),
            Event::Decision(denial),
        ],
    );
    let why = test.run(&["audit", "why", "req-r", "--json"]).success().json();
    assert_eq!(
        (why["policy"]["window"].as_str(), why["policy"]["window_seconds"].as_i64()),
        (Some("ROLLING"), Some(86_400))
    );
    assert_eq!((why["consumption"]["total"].as_i64(), why["consumption"]["events"].as_i64()), (Some(10_000), Some(2)));
    assert_eq!(why["resets_at"].as_str(), Some("2026-12-04T13:00:00Z"), "{why}");
    let words = test.run(&["audit", "why", "req-r"]).success().stdout_text();
    for expected in [
        "Request req-r was DENIED: QUOTA_EXCEEDED.\nOut of allowance: the limit of 10,000 requests in any 24 hours \
         (rolling) was reached: 10,000 were used in the 24 hours before 2026-12-04T10:00:00Z; enough ages out at \
         2026-12-04T13:00:00Z.",
        "TENANT scope: at most 10000 requests in any 24 hours (a rolling window of 86400 s), HARD enforcement",
        "Window: 2026-12-03T10:00:00.000001Z to 2026-12-04T10:00:00.000001Z, the 24 hours up to and including the \
         decision",
        "per the ledger: 10000 requests in 2 events",
        "Enough of the window's usage ages out for this amount at 2026-12-04T13:00:00Z.",
    ] {
        assert!(words.contains(expected), "{expected:?} missing from:\n{words}");
    }
    assert!(!words.contains("The window resets at") && !words.contains("u-aged"), "{words}");
}
