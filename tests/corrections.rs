//! Usage corrections as finance and support make them (`usage void|amend`, contract §7): a void and an amend before
//! a close change the open month's export, one after the close leaves the closed export byte for byte and is carried
//! as a late adjustment into the next month; a correction of a correction, of an unknown event, a second void are
//! refused; a retry is one correction; `audit tenant` shows who corrected what and why; the chain still verifies.

#[path = "support/hook_http.rs"]
mod hook_http;
mod support;

use std::collections::BTreeMap;

use schemas::*;
use serde_json::Value;
use support::*;

/// A usage event of `requests` for `tenant` naming `request`.
fn usage_of(event_id: &str, occurred_at: &str, tenant: &str, quantity: i64, request: &str) -> Event {
    let Event::Usage(mut usage) = usage(event_id, occurred_at, tenant, quantity) else { unreachable!("usage") };
    usage.request_id = Some(request.to_string());
    Event::Usage(usage)
}

/// The usage recorded: October's, and one event of November.
const OCTOBER: [(&str, &str, &str, i64); 5] = [
    ("u-1", "2026-10-03T10:00:00Z", "org-1", 100),
    ("u-2", "2026-10-04T10:00:00Z", "org-1", 50),
    ("u-3", "2026-10-05T10:00:00Z", "org-1", 30),
    ("u-4", "2026-10-06T10:00:00Z", "org-2", 70),
    ("u-5", "2026-11-02T10:00:00Z", "org-1", 10),
];

fn ledger_with_usage() -> TestLedger {
    let test = TestLedger::new();
    let events: Vec<Event> =
        OCTOBER.iter().map(|(id, t, tenant, q)| usage_of(id, t, tenant, *q, &format!("req-{id}"))).collect();
    let file = test.file("usage.avro");
    write_container(&file, &events);
    test.ingest(&file);
    test
}

/// `export billing --period P --format csv [EXTRA]`: its bytes.
fn export(test: &TestLedger, period: &str, extra: &[&str]) -> Vec<u8> {
    let mut args = vec!["export", "billing", "--period", period, "--format", "csv"];
    args.extend_from_slice(extra);
    test.run(&args).success().stdout
}

/// The export's `column` per (tenant, metric).
fn column(csv: &[u8], column: &str) -> BTreeMap<(String, String), String> {
    let text = String::from_utf8(csv.to_vec()).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
    let at = header.iter().position(|c| *c == column).unwrap_or_else(|| panic!("no column {column}: {header:?}"));
    lines
        .map(|line| {
            let cells: Vec<&str> = line.split(',').collect();
            ((cells[0].to_string(), cells[1].to_string()), cells[at].to_string())
        })
        .collect()
}

/// What each (tenant, month) consumes when `counted` says what each event counts now (the events not in it their
/// quantity): the contract's sum, computed here.
fn expected_consumption(month: &str, counted: &BTreeMap<&str, i64>) -> BTreeMap<(String, String), String> {
    let mut sums: BTreeMap<(String, String), i64> = BTreeMap::new();
    for (id, _, tenant, quantity) in OCTOBER.iter().filter(|(_, t, ..)| t.starts_with(month)) {
        *sums.entry((tenant.to_string(), "requests".to_string())).or_default() += counted.get(id).unwrap_or(quantity);
    }
    sums.into_iter().map(|(key, sum)| (key, sum.to_string())).collect()
}

fn correct(test: &TestLedger, args: &[&str]) -> support::Run {
    let mut all = vec!["usage"];
    all.extend_from_slice(args);
    test.run(&all)
}

fn watermark(test: &TestLedger) -> u64 {
    count(&test.status(), "watermark")
}

// Proves a void and an amend before the close change the open month's export (the originals stay recorded), a retry
// is one correction, and a second void, a correction of a correction and one of an unknown event are refused, exit 2,
// with what is wrong and nothing written.
#[test]
fn corrections_before_a_close_change_the_open_month_and_bad_ones_are_refused() {
    let test = ledger_with_usage();
    let before = export(&test, "2026-10", &[]);
    assert_eq!(column(&before, "consumption"), expected_consumption("2026-10", &BTreeMap::new()));

    let void = correct(&test, &["void", "--event", "u-2", "--actor", "carol", "--reason", "test traffic"]).success();
    assert!(
        void.stdout_text().contains("usage event u-2 of org-1 (requests) voided by carol"),
        "{}",
        void.stdout_text()
    );
    let amend = ["amend", "--event", "u-3", "--quantity", "12", "--actor", "carol", "--reason", "double-counted"];
    correct(&test, &amend).success();
    let counted = BTreeMap::from([("u-2", 0), ("u-3", 12)]);
    let after = export(&test, "2026-10", &[]);
    assert_eq!(column(&after, "consumption"), expected_consumption("2026-10", &counted));
    assert_eq!(column(&after, "consumption")[&("org-1".into(), "requests".into())], "112", "100 + 0 + 12");

    // A retry of the same correction is the one recorded: nothing new is written.
    let mark = watermark(&test);
    let retry = correct(&test, &["void", "--event", "u-2", "--actor", "carol", "--reason", "test traffic"]).success();
    assert!(retry.stdout_text().contains("recorded already at ledger seq"), "{}", retry.stdout_text());
    assert_eq!(watermark(&test), mark, "a retry writes nothing");

    let refusals: [(&[&str], &str); 4] = [
        (
            &["void", "--event", "u-2", "--correction-id", "another", "--actor", "dan", "--reason", "again"],
            "the usage event was voided already by \"correction/org-1/u-2/void\": a void is final",
        ),
        (
            &["void", "--event", "correction/org-1/u-2/void", "--actor", "dan", "--reason", "undo"],
            "is a correction: a correction of a correction is refused",
        ),
        (
            &["amend", "--event", "u-404", "--quantity", "1", "--actor", "dan", "--reason", "typo"],
            "original_event_id \"u-404\" is not recorded in this ledger",
        ),
        (
            &[
                "amend",
                "--event",
                "u-3",
                "--quantity",
                "12",
                "--correction-id",
                "same",
                "--actor",
                "dan",
                "--reason",
                "x",
            ],
            "the usage event counts 12 already",
        ),
    ];
    for (args, message) in refusals {
        let refused = correct(&test, args).expect_code(2);
        assert!(refused.stderr.contains("usage not corrected"), "{args:?}: {}", refused.stderr);
        assert!(refused.stderr.contains(message), "{args:?} should say {message:?}: {}", refused.stderr);
    }
    assert_eq!(watermark(&test), mark, "a refused correction records nothing");
    assert!(test.quarantined().is_empty(), "the control plane quarantines nothing");
    // The originals stay recorded as they were: the chain holds and the corrections are entries of their own.
    test.assert_verifies();
    let sql = test.run(&["sql", "SELECT count(*) AS n FROM usage_events", "--format", "csv"]).success();
    assert!(sql.stdout_text().contains("\n5"), "every original is still recorded: {}", sql.stdout_text());
}

// Proves a correction after the month's close leaves the closed export byte for byte, is carried by the next
// reconcile as a LATE_USAGE adjustment into the next month's export, and `audit tenant` shows it with who and why.
#[test]
fn a_correction_after_the_close_is_a_late_adjustment_and_the_closed_bill_stays() {
    let test = ledger_with_usage();
    correct(&test, &["void", "--event", "u-2", "--actor", "carol", "--reason", "test traffic"]).success();
    let closed = export(&test, "2026-10", &["--final"]);
    assert_eq!(column(&closed, "consumption"), expected_consumption("2026-10", &BTreeMap::from([("u-2", 0)])));

    let amend = ["amend", "--event", "u-1", "--quantity", "60", "--actor", "erin", "--reason", "incident refund"];
    let amended = correct(&test, &amend).success();
    assert!(amended.stdout_text().contains("amended to 60"), "{}", amended.stdout_text());
    assert_eq!(export(&test, "2026-10", &[]), closed, "a closed month's export never changes");

    // Carried as late usage is: the next reconcile records the delta, the next month's preview carries it.
    test.run(&["reconcile", "--as-of", "2026-12-01T00:00:00Z"]).expect_code(1);
    let november = export(&test, "2026-11", &[]);
    let late = column(&november, "late_adjustments");
    assert_eq!(late[&("org-1".into(), "requests".into())], "-40", "60 counted instead of 100");
    assert_eq!(column(&november, "consumption")[&("org-1".into(), "requests".into())], "10");
    assert_eq!(export(&test, "2026-10", &[]), closed, "still the closed bytes");
    test.run(&["reconcile", "--as-of", "2026-12-01T00:00:00Z"]).success();

    let audit = test
        .run(&["audit", "tenant", "org-1", "--from", "2026-10-01T00:00:00Z", "--to", "2026-12-01T00:00:00Z", "--json"])
        .success()
        .json();
    let corrections = audit["corrections"].as_array().unwrap_or_else(|| panic!("no corrections: {audit}"));
    let seen: Vec<(&str, &str, i64, i64, &str, &str)> = corrections
        .iter()
        .map(|c| {
            let text = |k: &str| c[k].as_str().unwrap_or_else(|| panic!("{k} in {c}"));
            let number = |k: &str| c[k].as_i64().unwrap_or_else(|| panic!("{k} in {c}"));
            (
                text("original_event_id"),
                text("action"),
                number("quantity_before"),
                number("quantity_after"),
                text("actor"),
                text("reason"),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [("u-2", "VOID", 50, 0, "carol", "test traffic"), ("u-1", "AMEND", 100, 60, "erin", "incident refund")]
    );
    let words = test
        .run(&["audit", "tenant", "org-1", "--from", "2026-10-01T00:00:00Z", "--to", "2026-12-01T00:00:00Z"])
        .success()
        .stdout_text();
    assert!(words.contains("Corrections of its usage: 2."), "{words}");
    assert!(words.contains("incident refund"), "{words}");
    test.assert_verifies();
}

// Proves a correction that arrives through ingest before its original is quarantined (`unknown_original`), and
// recorded by `quarantine replay` once the original is; the open month then counts the amended amount.
#[test]
fn a_correction_ingested_before_its_original_waits_in_the_quarantine() {
    let test = TestLedger::new();
    let correction = Event::Correction(CorrectionEvent {
        header: Header { source: "billing-fixer".into(), ..header("c-1", "2026-10-20T00:00:00Z", "org-1", "requests") },
        original_event_id: "u-1".into(),
        action: CorrectionAction::AMEND,
        quantity: Some(25),
        actor: "producer-team".into(),
        reason: "sent the wrong amount".into(),
    });
    let file = test.file("corrections.avro");
    write_container(&file, &[correction]);
    test.ingest(&file);
    let quarantined = test.quarantined();
    assert_eq!(quarantined.len(), 1, "{quarantined:?}");
    assert_eq!(quarantined[0]["reason_code"], Value::from("unknown_original"), "{quarantined:?}");

    let usage = test.file("usage.avro");
    write_container(&usage, &[usage_of("u-1", "2026-10-03T10:00:00Z", "org-1", 100, "req-1")]);
    test.ingest(&usage);
    test.run(&["quarantine", "replay", "--json"]).success();
    let consumption = column(&export(&test, "2026-10", &[]), "consumption");
    assert_eq!(consumption[&("org-1".into(), "requests".into())], "25");
    test.assert_verifies();
}

// Proves `POST /v1/admin/corrections` records a correction with the token's name as its actor (201), answers a retry
// with the one recorded (200, nothing written), and refuses an unknown event (404), another tenant's event (404, as
// if unknown), a second void (409 `already_voided`) and a token of another tenant (403), with problem documents; and
// that a customer's dashboard (`GET /v1/usage`) then counts the corrected amounts, day by day.
#[test]
fn the_admin_route_corrects_usage_as_the_command_does() {
    use serde_json::json;
    let test = ledger_with_usage();
    let stderr = test.file("serve.err");
    let tokens =
        "[[token]]\nname = \"ops-org-1\"\nsecret = \"admin-secret-org1-0123\"\ntenants = [\"org-1\"]\nadmin = true\n";
    let server = hook_http::Server::start_with_tokens(&test.path, test.dir.path(), &[], &stderr, tokens);
    let secret = "admin-secret-org1-0123";
    let void = json!({"tenant": "org-1", "original_event_id": "u-2", "action": "VOID", "reason": "test traffic"});
    let (status, body) = server.post("/v1/admin/corrections", secret, &void);
    assert_eq!(status, 201, "{body}");
    assert_eq!((body["event"]["actor"].as_str(), body["replayed"].as_bool()), (Some("ops-org-1"), Some(false)));
    let mark = watermark(&test);
    let (status, body) = server.post("/v1/admin/corrections", secret, &void);
    assert_eq!((status, body["replayed"].as_bool(), body["seqs"].clone()), (200, Some(true), json!([mark])), "{body}");

    let refused = [
        (
            json!({"tenant": "org-1", "original_event_id": "u-404", "action": "VOID", "reason": "r"}),
            404,
            "unknown_original",
        ),
        (
            json!({"tenant": "org-1", "original_event_id": "u-4", "action": "VOID", "reason": "r"}),
            404,
            "unknown_original",
        ),
        (
            json!({"tenant": "org-1", "original_event_id": "u-2", "action": "VOID", "correction_id": "again", "reason": "r"}),
            409,
            "already_voided",
        ),
        (json!({"tenant": "org-2", "original_event_id": "u-4", "action": "VOID", "reason": "r"}), 403, "forbidden"),
        (
            json!({"tenant": "org-1", "original_event_id": "u-1", "action": "AMEND", "reason": "r"}),
            400,
            "invalid_change",
        ),
    ];
    for (body, status, code) in refused {
        let (found, answer) = server.post("/v1/admin/corrections", secret, &body);
        assert_eq!((found, answer["error"].as_str()), (status, Some(code)), "{body}: {answer}");
    }
    assert_eq!(watermark(&test), mark, "nothing written by a retry or a refusal");
    let consumption = column(&export(&test, "2026-10", &[]), "consumption");
    assert_eq!(consumption[&("org-1".into(), "requests".into())], "130", "100 + 30, u-2 voided");

    let amend =
        json!({"tenant": "org-1", "original_event_id": "u-3", "action": "AMEND", "quantity": 12, "reason": "r"});
    assert_eq!(server.post("/v1/admin/corrections", secret, &amend).0, 201);
    let (status, body) = server.get(
        "/v1/usage?tenant=org-1&metric=requests&from=2026-10-03T00:00:00Z&to=2026-10-06T00:00:00Z&granularity=day",
        secret,
    );
    assert_eq!(status, 200, "{body}");
    let days: Vec<(&str, i64)> = body["data"]
        .as_array()
        .unwrap_or_else(|| panic!("{body}"))
        .iter()
        .map(|row| (row["windowStart"].as_str().unwrap_or_default(), row["value"].as_i64().unwrap_or(-1)))
        .collect();
    let counted = [("2026-10-03T00:00:00Z", 100), ("2026-10-04T00:00:00Z", 0), ("2026-10-05T00:00:00Z", 12)];
    let days_with_usage: Vec<(&str, i64)> = days.iter().copied().filter(|(_, value)| *value != 0).collect();
    let expected: Vec<(&str, i64)> = counted.into_iter().filter(|(_, value)| *value != 0).collect();
    assert_eq!(days_with_usage, expected, "the dashboard counts u-2 voided and u-3 amended to 12: {body}");
}
