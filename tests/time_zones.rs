//! Policies in a time zone (PolicyEvent v4 `time_zone`) through the real binary, as a user meets them: a HARD DAY
//! policy of America/New_York ingested from a file and judged by `reconcile` per New York day; `policy set
//! --time-zone` recorded, listed and refused when the zone is unknown; `serve` answering a denial with the local
//! midnight as `resetsAt`; and an ingested policy in an unknown zone quarantined.

#[path = "support/hook_http.rs"]
mod hook_http;
mod support;

use schemas::*;
use serde_json::{Value, json};
use support::*;

const NEW_YORK: &str = "America/New_York";
const WHO: [&str; 4] = ["--actor", "alice@ops", "--reason", "their customers' day is New York's"];

/// A HARD limit of `limit` requests per DAY for `tenant`, in `zone`'s calendar (none: UTC).
fn hard_daily_in(tenant: &str, limit: i64, zone: Option<&str>) -> Event {
    let daily = support::hard_daily(&format!("policy-{tenant}"), tenant, limit);
    Event::Policy(PolicyEvent { time_zone: zone.map(String::from), ..daily })
}

/// The same usage for `tenant`: 8 at 23:30 in New York on Nov 16 (04:30 UTC on the 17th), 8 at 00:30 on Nov 17
/// (05:30 UTC, the same UTC day), and 5 in the afternoon of Nov 17 in New York.
fn usage_of(tenant: &str) -> Vec<Event> {
    vec![
        usage(&format!("{tenant}-late-evening"), "2026-11-17T04:30:00Z", tenant, 8),
        usage(&format!("{tenant}-after-midnight"), "2026-11-17T05:30:00Z", tenant, 8),
        usage(&format!("{tenant}-afternoon"), "2026-11-17T20:00:00Z", tenant, 5),
    ]
}

fn overshoots(run: &Value) -> Vec<(String, String, String, i64, Value)> {
    let adjustments = run["adjustments"].as_array().unwrap_or_else(|| panic!("no adjustments in {run}"));
    let mut found: Vec<_> = adjustments
        .iter()
        .filter(|a| a["kind"] == "OVERSHOOT")
        .map(|a| {
            let text = |field: &str| a[field].as_str().unwrap_or_else(|| panic!("no {field} in {a}")).to_string();
            (text("tenant"), text("window_start"), text("window_end"), a["amount"].as_i64().unwrap(), a["refs"].clone())
        })
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

// Proves reconcile judges a New York policy's DAY windows from local midnight to local midnight: 23:30 and 00:30 the
// next day fall in two windows although the same UTC day (8 and 13 of a limit of 10: one overshoot of 3, named by the
// afternoon's event), where the same usage under a UTC policy is one day of 21 (an overshoot of 11).
#[test]
fn reconcile_judges_a_new_york_day_from_local_midnight() {
    let test = TestLedger::new();
    write_container(
        &test.file("policies.avro"),
        &[hard_daily_in("org-ny", 10, Some(NEW_YORK)), hard_daily_in("org-utc", 10, None)],
    );
    test.ingest(&test.file("policies.avro"));
    let usage: Vec<Event> = usage_of("org-ny").into_iter().chain(usage_of("org-utc")).collect();
    write_container(&test.file("usage.avro"), &usage);
    test.ingest(&test.file("usage.avro"));
    let run = test.run(&["reconcile", "--as-of", "2026-11-19T00:00:00Z", "--json"]).expect_code(1).json();
    assert_eq!(
        overshoots(&run),
        [
            (
                "org-ny".into(),
                "2026-11-17T05:00:00Z".into(),
                "2026-11-18T05:00:00Z".into(),
                3,
                json!(["org-ny-afternoon"])
            ),
            (
                "org-utc".into(),
                "2026-11-17T00:00:00Z".into(),
                "2026-11-18T00:00:00Z".into(),
                11,
                json!(["org-utc-after-midnight", "org-utc-afternoon"])
            ),
        ],
        "{run}"
    );
    // The same windows judged again: nothing more.
    test.run(&["reconcile", "--as-of", "2026-11-19T00:00:00Z", "--json"]).success();
    // What was recorded carries the zone, shown by sql.
    let sql = test.run(&["sql", "--format", "json", "SELECT tenant, time_zone FROM policy_events ORDER BY seq"]);
    let rows = sql.success().json();
    let zones: Vec<(Value, Value)> =
        rows.as_array().expect("rows").iter().map(|r| (r["tenant"].clone(), r["time_zone"].clone())).collect();
    assert_eq!(zones, [(json!("org-ny"), json!(NEW_YORK)), (json!("org-utc"), Value::Null)], "{rows}");
    test.assert_verifies();
}

// Proves `policy set --time-zone` records the zone, `policy list` and `policy history` show it (UTC for a policy
// that names none), and an unknown zone is refused with its name, exit 2, nothing written.
#[test]
fn policy_set_records_a_time_zone_and_refuses_an_unknown_one() {
    let test = TestLedger::new();
    let set = |tenant: &str, extra: &[&str]| {
        let mut args = vec!["policy", "set", "--tenant", tenant, "--metric", "tokens", "--limit", "10"];
        args.extend_from_slice(&["--window", "DAY", "--enforcement", "HARD"]);
        args.extend_from_slice(&WHO);
        args.extend_from_slice(extra);
        test.run(&args)
    };
    let recorded = set("org-ny", &["--time-zone", NEW_YORK, "--json"]).success().json();
    assert_eq!(recorded["time_zone"], NEW_YORK, "{recorded}");
    let words = set("org-ny", &["--time-zone", NEW_YORK]).success().stdout_text();
    assert!(words.contains("10 tokens per DAY in America/New_York (HARD)"), "{words}");
    set("org-utc", &[]).success();
    let refused = set("org-mars", &["--time-zone", "Mars/Olympus_Mons"]).expect_code(2);
    assert!(refused.stderr.contains("time_zone \"Mars/Olympus_Mons\" is not a time zone"), "{}", refused.stderr);
    assert!(refused.stderr.contains("policy not changed"), "{}", refused.stderr);
    assert_eq!(count(&test.status(), "events_recorded"), 3, "nothing written by the refusal");

    let listed = test.run(&["policy", "list", "--json"]).success().json();
    let zones: Vec<(&str, &str)> = listed
        .as_array()
        .expect("a list")
        .iter()
        .map(|p| (p["tenant"].as_str().unwrap(), p["time_zone"].as_str().unwrap()))
        .collect();
    assert_eq!(zones, [("org-ny", NEW_YORK), ("org-utc", "UTC")]);
    let table = test.run(&["policy", "list"]).success().stdout_text();
    // Columns are added at the end: the zone, what the hook does when the ledger cannot record, what beyond the limit.
    let header: Vec<&str> = table.lines().next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header[header.len() - 3..], ["time_zone", "on_failure", "overage"], "{table}");
    assert!(table.contains(NEW_YORK), "{table}");
    let history = test.run(&["policy", "history", "org-ny:tokens:tenant:day", "--json"]).success().json();
    assert_eq!(history[1]["time_zone"], NEW_YORK, "{history}");

    // The window `quota show` counts is New York's day: it starts at a local midnight (04:00 or 05:00 UTC).
    let quotas = test.run(&["quota", "show", "org-ny", "--json"]).success().json();
    let quota = &quotas["quotas"][0];
    assert_eq!(quota["time_zone"], NEW_YORK, "{quotas}");
    let start = quota["window_start"].as_str().unwrap();
    assert!(start.ends_with("T04:00:00Z") || start.ends_with("T05:00:00Z"), "{quotas}");
}

// Proves `serve` answers a denial under a New York DAY policy with the next local midnight as resetsAt, and
// retryAfterSeconds until then; the admin endpoint refuses an unknown zone with 400 and records a known one.
#[test]
fn serve_resets_a_new_york_day_at_local_midnight() {
    let test = TestLedger::new();
    let mut args = vec!["policy", "set", "--tenant", "org-ny", "--metric", "tokens", "--limit", "1"];
    args.extend_from_slice(&["--window", "DAY", "--enforcement", "HARD", "--time-zone", NEW_YORK]);
    args.extend_from_slice(&WHO);
    test.run(&args).success();
    let admin = "[[token]]\nname = \"ops\"\nsecret = \"time-zone-admin-0123\"\ntenants = [\"*\"]\nadmin = true\n";
    let stderr = test.file("serve.err");
    let server = hook_http::Server::start_with_tokens(&test.path, test.dir.path(), &[], &stderr, admin);
    let check = |key: &str| {
        let body = json!({"tenant": "org-ny", "metric": "tokens", "amount": 1, "idempotency_key": key});
        server.post("/v1/check", hook_http::SECRET, &body)
    };
    assert_eq!(check("k-1").0, 200);
    let (status, denied) = check("k-2");
    assert_eq!((status, denied["code"].as_str()), (429, Some("QUOTA_EXCEEDED")), "{denied}");
    let resets_at = denied["resetsAt"].as_str().expect("resetsAt");
    assert!(resets_at.ends_with("T04:00:00Z") || resets_at.ends_with("T05:00:00Z"), "{denied}");
    let wait = denied["retryAfterSeconds"].as_i64().expect("retryAfterSeconds");
    assert!((1..=25 * 3_600).contains(&wait), "{denied}");

    let mut change = json!({"tenant": "org-ny", "metric": "tokens", "limit": 5, "window": "DAY", "enforcement": "HARD",
                            "reason": "more", "time_zone": "Mars/Olympus_Mons"});
    let (status, body) = server.post("/v1/admin/policies", "time-zone-admin-0123", &change);
    assert_eq!(status, 400, "{body}");
    assert!(body["message"].as_str().is_some_and(|m| m.contains("\"Mars/Olympus_Mons\" is not a time zone")), "{body}");
    change["time_zone"] = json!("Asia/Kolkata");
    let (status, body) = server.post("/v1/admin/policies", "time-zone-admin-0123", &change);
    assert_eq!((status, body["event"]["time_zone"].as_str()), (201, Some("Asia/Kolkata")), "{body}");
    drop(server);

    // `audit why` explains the denial with the same window, and names its zone.
    let request_id = denied["requestId"].as_str().expect("requestId");
    let why = test.run(&["audit", "why", request_id, "--json"]).success().json();
    assert_eq!(why["resets_at"].as_str(), Some(resets_at), "{why}");
    assert_eq!(why["policy"]["time_zone"], NEW_YORK, "{why}");
    let words = test.run(&["audit", "why", request_id]).success().stdout_text();
    assert!(words.contains("a DAY of America/New_York's calendar"), "{words}");
}

// Proves a PolicyEvent naming a zone the IANA database does not know is quarantined at ingest with reason
// `unknown_time_zone`, and the good policy beside it is recorded.
#[test]
fn an_unknown_time_zone_is_quarantined_at_ingest() {
    let test = TestLedger::new();
    let Event::Policy(mut unknown) = hard_daily_in("org-2", 10, Some("America/New_Yrok")) else { unreachable!() };
    unknown.header.event_id = "policy-typo".into();
    write_container(&test.file("policies.avro"), &[hard_daily_in("org-1", 10, Some(NEW_YORK)), Event::Policy(unknown)]);
    test.ingest(&test.file("policies.avro"));
    assert_eq!(count(&test.status(), "events_recorded"), 1);
    let quarantined = test.quarantined();
    assert_eq!(quarantined.len(), 1, "{quarantined:?}");
    assert_eq!(quarantined[0]["reason_code"], "unknown_time_zone", "{quarantined:?}");
}
