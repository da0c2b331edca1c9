//! `reconcile --as-of` run as a user runs it: the real binary on a real ledger file, its exit codes, its JSON,
//! reruns that write nothing, a late event that adds exactly one delta, and the outbox reaching Kafka.

mod support;

use std::collections::BTreeSet;

use schemas::*;
use serde_json::{Value, json};
use support::brokers::{Broker, event_ids_on_topic};
use support::*;

const AS_OF: &str = "2026-11-03T00:00:00Z";

fn hard_daily_policy(limit: i64) -> Event {
    Event::Policy(hard_daily("policy-daily-v1", "org-1", limit))
}

fn abandoned_reservation() -> Event {
    Event::Reservation(ReservationEvent {
        header: header("rsv-1-reserve", "2026-11-02T09:00:00Z", "org-1", "requests"),
        reservation_id: "rsv-1".into(),
        action: ReservationAction::RESERVE,
        amount: 7,
        expires_at: Some(at("2026-11-02T09:05:00Z")),
        fencing_token: None,
    })
}

/// A ledger holding a HARD daily limit of 100 for org-1, 60 + 50 requests on Nov 2, and an abandoned reservation.
fn ledger_with_overshoot() -> TestLedger {
    let test = TestLedger::new();
    let files = [
        ("policies.avro", vec![hard_daily_policy(100)]),
        (
            "usage.avro",
            vec![usage("u-1", "2026-11-02T10:00:00Z", "org-1", 60), usage("u-2", "2026-11-02T11:00:00Z", "org-1", 50)],
        ),
        ("reservations.avro", vec![abandoned_reservation()]),
    ];
    for (name, events) in files {
        write_container(&test.file(name), &events);
        test.ingest(&test.file(name));
    }
    test
}

fn reconcile_json(test: &TestLedger, extra: &[&str], code: i32) -> Value {
    let mut args = vec!["reconcile", "--as-of", AS_OF, "--json"];
    args.extend_from_slice(extra);
    test.run(&args).expect_code(code).json()
}

fn adjustments(run: &Value) -> &Vec<Value> {
    run["adjustments"].as_array().unwrap_or_else(|| panic!("no adjustments list in {run}"))
}

// contract §7: the first run finds the overshoot and the expiry (exit 1), names the event that crossed the limit, and three reruns write nothing (exit 0).
#[test]
fn a_run_records_deltas_and_reruns_write_nothing() {
    let test = ledger_with_overshoot();
    let first = reconcile_json(&test, &[], 1);
    assert_eq!(count(&first, "adjustments_written"), 2, "{first}");
    assert_eq!(first["adjustments_by_kind"], serde_json::json!({"OVERSHOOT": 1, "RESERVATION_EXPIRED": 1}));
    assert_eq!(first["as_of"], AS_OF);
    let overshoot = adjustments(&first).iter().find(|a| a["kind"] == "OVERSHOOT").expect("an overshoot");
    assert_eq!(overshoot["amount"], 10);
    assert_eq!(overshoot["refs"], serde_json::json!(["u-2"]), "u-2 took the day from 60 to 110 over 100");
    assert_eq!(overshoot["policy_id"], "daily");
    assert_eq!(
        (overshoot["window_start"].as_str(), overshoot["window_end"].as_str()),
        (Some("2026-11-02T00:00:00Z"), Some("2026-11-03T00:00:00Z"))
    );
    let expiry = adjustments(&first).iter().find(|a| a["kind"] == "RESERVATION_EXPIRED").expect("an expiry");
    assert_eq!((expiry["amount"].as_i64(), &expiry["refs"]), (Some(7), &serde_json::json!(["rsv-1-reserve"])));
    for _ in 0..3 {
        let rerun = reconcile_json(&test, &[], 0);
        assert_eq!(count(&rerun, "adjustments_written"), 0, "{rerun}");
        assert!(adjustments(&rerun).is_empty());
    }
    test.assert_verifies();
}

/// The plan's TENANT policy `quota` and org-1's own SUBJECT policy `quota` of `requests`, both HARD and daily (a
/// SUBJECT policy does not cover a TENANT one: both apply), and 15 requests of org-1 without a subject on Nov 2.
fn two_scopes_sharing_a_policy_id(subject_limit: i64) -> TestLedger {
    let Event::Policy(plan) = hard_daily_policy(10) else { unreachable!() };
    let plan = PolicyEvent {
        header: header("policy-plan-quota", "2026-10-01T00:00:00Z", "*", "requests"),
        policy_id: "quota".into(),
        ..plan
    };
    let own = PolicyEvent {
        header: header("policy-own-quota", "2026-10-01T00:00:00Z", "org-1", "requests"),
        scope: Scope::SUBJECT,
        limit: subject_limit,
        ..plan.clone()
    };
    let test = TestLedger::new();
    write_container(&test.file("policies.avro"), &[Event::Policy(plan), Event::Policy(own)]);
    write_container(&test.file("usage.avro"), &[usage("u-1", "2026-11-02T10:00:00Z", "org-1", 15)]);
    test.ingest(&test.file("policies.avro"));
    test.ingest(&test.file("usage.avro"));
    test
}

// README "Reconciliation": each window is its own concern, also when the plan's TENANT policy and a tenant's SUBJECT
// policy share a policy_id and the requests have no subject (both windows have subject null). Were the two to share
// one running total, each run would take back what the one before wrote and write it again (exit 1 forever), and
// with equal amounts two adjustments would get one id and reconcile would panic (exit 101), recording nothing.
#[test]
fn windows_of_two_scopes_sharing_a_policy_id_are_two_concerns() {
    for (subject_limit, subject_excess) in [(12, 3), (10, 5)] {
        let test = two_scopes_sharing_a_policy_id(subject_limit);
        let first = reconcile_json(&test, &[], 1);
        let mut found: Vec<(String, i64, Vec<Value>)> = adjustments(&first)
            .iter()
            .map(|a| {
                (
                    a["scope"].as_str().unwrap_or("none").to_string(),
                    a["amount"].as_i64().unwrap(),
                    a["refs"].as_array().unwrap().clone(),
                )
            })
            .collect();
        found.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            found,
            vec![
                ("SUBJECT".to_string(), subject_excess, vec![serde_json::json!("u-1")]),
                ("TENANT".to_string(), 5, vec![serde_json::json!("u-1")]),
            ],
            "{first}"
        );
        for _ in 0..3 {
            assert_eq!(count(&reconcile_json(&test, &[], 0), "adjustments_written"), 0);
        }
        test.assert_verifies();
    }
}

// A window adjustment recorded before AdjustmentEvent v2 carries no scope: one without a subject takes the scope of
// the policies of its id, so a SUBJECT policy's window of requests without a subject, reported by an older binary,
// is not taken back and reported again after the upgrade.
#[test]
fn a_window_adjustment_without_a_scope_is_read_as_its_policys() {
    let Event::Policy(daily) = hard_daily_policy(10) else { unreachable!() };
    let test = TestLedger::new();
    write_container(&test.file("policies.avro"), &[Event::Policy(PolicyEvent { scope: Scope::SUBJECT, ..daily })]);
    write_container(&test.file("usage.avro"), &[usage("u-1", "2026-11-02T10:00:00Z", "org-1", 15)]);
    let before_v2 = AdjustmentEvent {
        header: Header {
            source: "reconcile".into(),
            ..header("adj-before-v2", "2026-11-03T00:00:00Z", "org-1", "requests")
        },
        adjustment_id: "adj-before-v2".into(),
        kind: AdjustmentKind::OVERSHOOT,
        policy_id: Some("daily".into()),
        window_start: Some(at("2026-11-02T00:00:00Z")),
        window_end: Some(at("2026-11-03T00:00:00Z")),
        amount: 5,
        refs: vec!["u-1".into()],
        run_id: "reconcile-before-v2".into(),
        scope: None,
    };
    write_container(&test.file("adjustments.avro"), &[Event::Adjustment(before_v2)]);
    for name in ["policies.avro", "usage.avro", "adjustments.avro"] {
        test.ingest(&test.file(name));
    }
    let run = reconcile_json(&test, &[], 0);
    assert_eq!(count(&run, "adjustments_written"), 0, "{run}");
}

// Contract §5: a COMMIT with no RESERVE is a refused transition; a RESERVE that arrives late, dated before it, makes
// it valid. The run that starts counting the COMMIT as consumption takes its REFUSED_TRANSITION back, although the
// reservation is not judged for expiry until its RESERVE expires: a take-back that waited for that would leave the
// ledger meanwhile both counting the COMMIT and calling it refused.
#[test]
fn a_late_reserve_takes_back_the_refusal_of_the_commit_it_makes_valid() {
    let reservation = |event_id: &str, occurred_at: &str, action, amount, expires_at: Option<&str>| {
        Event::Reservation(ReservationEvent {
            header: header(event_id, occurred_at, "org-1", "requests"),
            reservation_id: "r-late".into(),
            action,
            amount,
            expires_at: expires_at.map(at),
            fencing_token: None,
        })
    };
    let test = TestLedger::new();
    write_container(&test.file("policies.avro"), &[hard_daily_policy(5)]);
    let commit = reservation("c-1", "2026-11-02T10:30:00Z", ReservationAction::COMMIT, 7, None);
    write_container(&test.file("commit.avro"), &[commit]);
    test.ingest(&test.file("policies.avro"));
    test.ingest(&test.file("commit.avro"));
    let first = reconcile_json(&test, &[], 1);
    assert_eq!(first["adjustments_by_kind"], serde_json::json!({"REFUSED_TRANSITION": 1}), "{first}");
    let reserve =
        reservation("r-1", "2026-11-02T10:00:00Z", ReservationAction::RESERVE, 10, Some("2026-11-10T00:00:00Z"));
    write_container(&test.file("reserve.avro"), &[reserve]);
    test.ingest(&test.file("reserve.avro"));
    let second = reconcile_json(&test, &[], 1);
    let mut written: Vec<(String, i64)> = adjustments(&second)
        .iter()
        .map(|a| (a["kind"].as_str().unwrap().to_string(), a["amount"].as_i64().unwrap()))
        .collect();
    written.sort();
    assert_eq!(written, vec![("OVERSHOOT".to_string(), 2), ("REFUSED_TRANSITION".to_string(), -7)], "{second}");
    assert_eq!(count(&reconcile_json(&test, &[], 0), "adjustments_written"), 0);
}

// contract §5 "Adjustments are deltas": one late event in a judged window adds exactly one delta, its amount the change.
#[test]
fn a_late_event_adds_exactly_one_delta() {
    let test = ledger_with_overshoot();
    reconcile_json(&test, &[], 1);
    write_container(&test.file("late.avro"), &[usage("u-late", "2026-11-02T09:30:00Z", "org-1", 5)]);
    test.ingest(&test.file("late.avro"));
    let run = reconcile_json(&test, &[], 1);
    let written = adjustments(&run);
    assert_eq!(written.len(), 1, "{run}");
    assert_eq!((written[0]["kind"].as_str(), written[0]["amount"].as_i64()), (Some("OVERSHOOT"), Some(5)));
    assert_eq!(written[0]["refs"], serde_json::json!(["u-2"]), "in event time u-late came first: u-2 still crossed");
    assert_eq!(count(&reconcile_json(&test, &[], 0), "adjustments_written"), 0);
}

// A person's report: per kind, per tenant, largest overshoots first; --dry-run records nothing; a bad --as-of is exit 2.
#[test]
fn the_report_reads_for_people_and_dry_runs_record_nothing() {
    let test = ledger_with_overshoot();
    let dry = test.run(&["reconcile", "--as-of", AS_OF, "--dry-run"]).expect_code(1).stdout_text();
    assert!(dry.contains("would write (dry run, nothing recorded) 2 adjustments"), "{dry}");
    let report = test.run(&["reconcile", "--as-of", AS_OF]).expect_code(1).stdout_text();
    for expected in ["OVERSHOOT", "RESERVATION_EXPIRED", "largest overshoots", "org-1", "1 (first: u-2)"] {
        assert!(report.contains(expected), "{expected:?} missing from:\n{report}");
    }
    assert!(report.contains("entries wait for a run with --brokers"), "{report}");
    let clean = test.run(&["reconcile", "--as-of", AS_OF]).success().stdout_text();
    assert!(clean.contains("clean: nothing to adjust"), "{clean}");
    let bad = test.run(&["reconcile", "--as-of", "yesterday"]).expect_code(2);
    assert!(bad.stderr.contains("not an RFC 3339 instant"), "{}", bad.stderr);
}

// contract §7's exit codes stand when stdout is a closed pipe (`reconcile | head -1`): 1 for the run that wrote
// adjustments (as a report or as JSON), 0 for the clean rerun, never a panic; the adjustments are recorded.
#[test]
fn a_closed_stdout_keeps_the_exit_code() {
    for json in [&[][..], &["--json"]] {
        let test = ledger_with_overshoot();
        let mut args = vec!["reconcile", "--as-of", AS_OF];
        args.extend_from_slice(json);
        for code in [1, 0] {
            let run = test.run_into_closed_pipe(&args).expect_code(code);
            assert!(run.stderr.is_empty(), "`{}`: {}", run.command, run.stderr);
        }
        assert_eq!(count(&reconcile_json(&test, &[], 0), "adjustments_written"), 0, "the first run recorded them");
    }
}

// The outbox: with no broker reachable the adjustments are recorded and wait; a later run with the broker publishes each exactly once.
// The run's alerts (the day's window went past 80, 90 and 100% through usage no hook saw) wait and go with them.
#[test]
fn adjustments_reach_kafka_through_the_outbox_after_an_outage() {
    let test = ledger_with_overshoot();
    let unreachable = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let outage = reconcile_json(&test, &["--brokers", &unreachable, "--publish-timeout-ms", "1500"], 1);
    assert_eq!(outage["outbox"]["published"], 0, "{outage}");
    assert_eq!((&outage["outbox"]["pending"], &outage["alerts_written"]), (&json!(5), &json!(3)), "{outage}");
    let written: BTreeSet<String> =
        adjustments(&outage).iter().map(|a| a["adjustment_id"].as_str().unwrap().to_string()).collect();
    let broker = Broker::mock();
    let later = reconcile_json(&test, &["--brokers", &broker.bootstrap], 0);
    assert_eq!((later["outbox"]["published"].as_u64(), later["outbox"]["pending"].as_u64()), (Some(5), Some(0)));
    assert_eq!(event_ids_on_topic(&broker.bootstrap, "quota.alerts", 3).len(), 3, "each alert once");
    let on_topic = event_ids_on_topic(&broker.bootstrap, "quota.adjustments", written.len());
    assert_eq!(on_topic.len(), written.len(), "each adjustment once: {on_topic:?}");
    assert_eq!(on_topic.into_iter().collect::<BTreeSet<_>>(), written);
    let again = reconcile_json(&test, &["--brokers", &broker.bootstrap], 0);
    assert_eq!(again["outbox"]["published"], 0, "nothing is published twice: {again}");
}

// One publisher per ledger: while another process publishes its outbox (a `serve --brokers`, here the lock it holds)
// a run records its adjustments, says who publishes them, and sends nothing itself (two publishers sent every
// pending entry twice); once that process is gone a run publishes them.
#[test]
fn a_run_leaves_the_outbox_to_the_process_publishing_it() {
    let test = ledger_with_overshoot();
    let broker = Broker::mock();
    let serving = ledger::ProcessLock::acquire(&test.path, "publisher").expect("the lock a serve --brokers holds");
    let mut args = vec!["reconcile", "--as-of", AS_OF, "--json", "--brokers", broker.bootstrap.as_str()];
    let run = test.run(&args).expect_code(1);
    let holder = format!("the outbox is published by another process (pid {}", std::process::id());
    assert!(run.stderr.contains(&holder), "{}", run.stderr);
    let first = run.json();
    assert_eq!(adjustments(&first).len(), 2, "recorded: {first}");
    assert!(first["outbox"].is_null(), "nothing published by the run: {first}");
    assert_eq!(test.status()["outbox_pending"], 5, "2 adjustments and 3 alerts");
    drop(serving);
    args.truncate(4);
    args.extend(["--brokers", broker.bootstrap.as_str()]);
    let later = test.run(&args).expect_code(0).json();
    assert_eq!((later["outbox"]["published"].as_u64(), later["outbox"]["pending"].as_u64()), (Some(5), Some(0)));
}

// Contract §9.5: a grant and a policy raise for October recorded after October was closed never change its bill;
// reconcile lists them under `after_close` (and in its report for people) with the closed months they would have
// changed, and they are no adjustments: the exit code and the written count stay those of the run.
#[test]
fn policies_and_grants_recorded_after_a_close_are_listed_for_finance() {
    let test = TestLedger::new();
    write_container(&test.file("policy.avro"), &[hard_daily_policy(100)]);
    test.ingest(&test.file("policy.avro"));
    write_container(&test.file("october.avro"), &[usage("u-oct", "2026-10-20T10:00:00Z", "org-1", 30)]);
    test.ingest(&test.file("october.avro"));
    test.run(&["export", "billing", "--period", "2026-10", "--format", "csv", "--final"]).expect_code(0);
    let grant = Event::Grant(GrantEvent {
        header: header("grant-oct", "2026-11-02T00:00:00Z", "org-1", "requests"),
        grant_id: "goodwill".into(),
        amount: 500,
        valid_from: at("2026-10-15T00:00:00Z"),
        valid_until: at("2026-12-01T00:00:00Z"),
        reason: "outage credit".into(),
        actor: None,
    });
    let Event::Policy(mut raise) = hard_daily_policy(200) else { unreachable!() };
    raise.header.event_id = "policy-daily-v2".into();
    raise.version = 2;
    raise.effective_from = at("2026-10-10T00:00:00Z");
    for (name, event) in [("grant.avro", grant), ("raise.avro", Event::Policy(raise))] {
        write_container(&test.file(name), &[event]);
        test.ingest(&test.file(name));
    }

    let run = reconcile_json(&test, &[], 0);
    assert_eq!(count(&run, "adjustments_written"), 0, "{run}");
    let listed = run["after_close"].as_array().unwrap_or_else(|| panic!("no after_close in {run}"));
    let rows: BTreeSet<(String, String, String, String)> = listed
        .iter()
        .map(|a| {
            let field = |k: &str| a[k].as_str().unwrap_or_default().to_string();
            (field("kind"), field("id"), field("from_period"), field("to_period"))
        })
        .collect();
    let expected = [("grant", "goodwill", "2026-10", "2026-10"), ("policy", "daily", "2026-10", "2026-10")];
    let expected = expected.map(|(a, b, c, d)| (a.to_string(), b.to_string(), c.to_string(), d.to_string()));
    assert_eq!(rows, BTreeSet::from(expected), "{run}");
    assert!(listed.iter().any(|a| a["version"] == 2), "the policy's version is named: {run}");
    let text = test.run(&["reconcile", "--as-of", AS_OF]).expect_code(0).stdout_text();
    assert!(text.contains("recorded after the close of a month they change"), "{text}");
    assert!(text.contains("goodwill") && text.contains("daily v2"), "{text}");
}

// A gauge quota's level above its limit is reported per window, in words and in `--json`
// (`read.gauges_over_limit`), and leaves the run clean (exit 0): it is the hook enforcing, nothing to adjust; the
// readings are no consumption, so the month's bill has no row of the metric.
#[test]
fn a_gauge_over_its_limit_is_reported_per_window_and_leaves_the_run_clean() {
    let test = TestLedger::new();
    let gauge = PolicyEvent {
        header: header("storage-v1", "2026-10-01T00:00:00Z", "org-1", "storage_bytes"),
        policy_id: "storage".into(),
        violation: Some(Violation::NO_INSERTS),
        window_seconds: None,
        cycle_anchor: None,
        ..hard_daily("storage-v1", "org-1", 1_000)
    };
    let reading = |id: &str, t: &str, level: i64| {
        let Event::Usage(u) = usage(id, t, "org-1", level) else { unreachable!("a usage event") };
        Event::Usage(UsageEvent { header: Header { metric: "storage_bytes".into(), ..u.header }, ..u })
    };
    let readings =
        vec![reading("level-1", "2026-11-02T10:00:00Z", 1_500), reading("level-2", "2026-11-02T13:30:00Z", 800)];
    for (name, events) in [("gauge.avro", vec![Event::Policy(gauge)]), ("levels.avro", readings)] {
        write_container(&test.file(name), &events);
        test.ingest(&test.file(name));
    }

    let words = test.run(&["reconcile", "--as-of", AS_OF]).expect_code(0).stdout_text();
    assert!(words.contains("gauges over their limit (time above the limit per window):"), "{words}");
    let row = words.lines().find(|l| l.starts_with("org-1")).unwrap_or_else(|| panic!("a row for org-1: {words}"));
    for cell in ["storage_bytes", "storage v1 (HARD, NO_INSERTS)", "2026-11-02T00:00:00Z", "1000", "1500", "3h 30m 00s"]
    {
        assert!(row.contains(cell), "{cell} in {row}");
    }
    let run = reconcile_json(&test, &[], 0);
    assert_eq!(
        run["read"]["gauges_over_limit"],
        serde_json::json!([{
            "tenant": "org-1", "metric": "storage_bytes", "policy_id": "storage", "version": 1,
            "enforcement": "HARD", "violation": "NO_INSERTS", "window_start": "2026-11-02T00:00:00Z",
            "window_end": "2026-11-03T00:00:00Z", "limit": 1000, "peak": 1500, "over_ms": 12_600_000u64,
        }])
    );
    let bill = test.run(&["export", "billing", "--period", "2026-11", "--format", "csv"]).success().stdout_text();
    assert_eq!(bill.lines().count(), 1, "the header alone: {bill}");
}

// contract §5 "What a run covers": a rerun as of the same instant reads nothing again; after a late event of org-1 it
// reads org-1 alone and writes exactly what a run reading everything (`--full`) would; another --as-of reads everything.
#[test]
fn a_rerun_reads_only_the_tenants_touched_since_and_writes_what_a_full_run_would() {
    let test = ledger_with_overshoot();
    let first = reconcile_json(&test, &[], 1);
    assert_eq!(first["coverage"], json!({"mode": "full", "reason": "no_checkpoint"}), "{first}");
    let rerun = reconcile_json(&test, &[], 0);
    let since = first["watermark"].clone();
    assert_eq!(rerun["coverage"], json!({"mode": "incremental", "since": since, "tenants": []}), "{rerun}");
    assert_eq!(rerun["read"]["usage_events"], 0, "nothing read again: {rerun}");

    let late = [usage("u-3", "2026-11-02T12:00:00Z", "org-1", 5), usage("u-4", "2026-11-02T12:00:00Z", "org-2", 1)];
    write_container(&test.file("late.avro"), &late[..1]);
    test.ingest(&test.file("late.avro"));
    let full = reconcile_json(&test, &["--full", "--dry-run"], 1);
    assert_eq!(full["coverage"], json!({"mode": "full", "reason": "asked"}), "{full}");
    let incremental = reconcile_json(&test, &[], 1);
    let since = rerun["watermark"].clone();
    assert_eq!(incremental["coverage"], json!({"mode": "incremental", "since": since, "tenants": ["org-1"]}));
    assert_eq!(adjustments(&incremental), adjustments(&full), "the same adjustments, ids and run as a full run's");
    let found: Vec<(&Value, &Value)> = adjustments(&incremental).iter().map(|a| (&a["kind"], &a["amount"])).collect();
    assert_eq!(found, [(&json!("OVERSHOOT"), &json!(5))], "5 more over the day's 100: {incremental}");

    write_container(&test.file("other.avro"), &late[1..]);
    test.ingest(&test.file("other.avro"));
    let other = reconcile_json(&test, &[], 0);
    assert_eq!(other["coverage"]["tenants"], json!(["org-2"]), "org-1 is not read again: {other}");
    let tomorrow = test.run(&["reconcile", "--as-of", "2026-11-04T00:00:00Z", "--json"]).expect_code(0).json();
    assert_eq!(tomorrow["coverage"], json!({"mode": "full", "reason": "other_as_of"}), "{tomorrow}");
    test.assert_verifies();
}
