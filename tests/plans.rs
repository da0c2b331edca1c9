//! Named plans as finance and support use them (contract §5 "Named plans", §7 `plan set --plan`, `plan assign`): a
//! tenant billed by its cycles in New York time moves from plan free to plan pro in the middle of a cycle, and the
//! billing export bills that cycle in two rows, each with the plan, limit and consumption of its part, as this test
//! computes them from the events it wrote; the enforcement hook counts a window of the new plan from the instant it
//! was assigned; a plan nobody recorded cannot be assigned.

mod support;

use schemas::{Event, Timestamp};
use serde_json::Value;
use support::*;
use testkit::fixtures::at;

/// The cycle's anchor: the 14th at 09:00 in New York (13:00 UTC in October, daylight time; 14:00 UTC from November 1,
/// standard time).
const ANCHOR: &str = "2026-10-14T09:00:00-04:00";
/// When org-1 moves to plan pro: the 20th at 15:00 in New York, 20:00 UTC, in the cycle from November 14 to
/// December 14.
const UPGRADE: &str = "2026-11-20T20:00:00Z";
/// The plans' cycle limits of `requests`, SOFT: the excess is billed.
const FREE_LIMIT: i64 = 100;
const PRO_LIMIT: i64 = 1_000;

/// org-1's usage (and one event of org-2, on no plan): around the cycle boundaries and the upgrade.
const USAGE: [(&str, &str, &str, i64); 7] = [
    ("u-1", "2026-11-10T12:00:00Z", "org-1", 70),
    ("u-2", "2026-11-15T12:00:00Z", "org-1", 80),
    ("u-3", "2026-11-20T19:59:59Z", "org-1", 40),
    ("u-4", "2026-11-20T20:00:00Z", "org-1", 500),
    ("u-5", "2026-12-10T00:00:00Z", "org-1", 600),
    ("u-6", "2026-12-14T14:00:00Z", "org-1", 5),
    ("u-7", "2026-11-16T00:00:00Z", "org-2", 3),
];

/// `plan set --plan PLAN` of a SOFT cycle quota of `requests`, limit `limit`, effective since January.
fn set_plan(test: &TestLedger, plan: &str, limit: i64) {
    let limit = limit.to_string();
    test.run(&[
        "plan",
        "set",
        "--plan",
        plan,
        "--metric",
        "requests",
        "--limit",
        &limit,
        "--window",
        "BILLING_CYCLE",
        "--cycle-anchor",
        ANCHOR,
        "--time-zone",
        "America/New_York",
        "--enforcement",
        "SOFT",
        "--effective-from",
        "2026-01-01T00:00:00Z",
        "--actor",
        "finance@example.com",
        "--reason",
        "the price list",
    ])
    .success();
}

/// `plan assign --tenant org-1 --plan PLAN --effective-from WHEN`.
fn assign(test: &TestLedger, plan: &str, when: &str) -> Run {
    test.run(&[
        "plan",
        "assign",
        "--tenant",
        "org-1",
        "--plan",
        plan,
        "--effective-from",
        when,
        "--actor",
        "sales@example.com",
        "--reason",
        "signed the order form",
    ])
}

/// The export's rows as JSON lines.
fn rows(test: &TestLedger, period: &str) -> Vec<Value> {
    let out = test.run(&["export", "billing", "--period", period, "--format", "jsonl"]).success().stdout_text();
    out.lines().map(|line| serde_json::from_str(line).unwrap()).collect()
}

/// The usage of `tenant` with event time in `[from, until)`, summed here from [`USAGE`].
fn used(tenant: &str, from: &str, until: &str) -> i64 {
    USAGE.iter().filter(|(_, t, who, _)| *who == tenant && at(t) >= at(from) && at(t) < at(until)).map(|u| u.3).sum()
}

/// What a row of `tenant` over `[from, until)` under `plan` of `limit` must say: its consumption, the plan's
/// policy and limit, the overage beyond it.
fn expected(tenant: &str, (from, until): (&str, &str), plan: &str, limit: i64) -> Value {
    let consumption = used(tenant, from, until);
    serde_json::json!({
        "tenant": tenant, "consumption": consumption, "policy_id": format!("*{plan}:requests:tenant:billing_cycle"),
        "limit": limit, "overage": (consumption - limit).max(0), "plan": plan,
        "cycle_start": Timestamp::parse_rfc3339(from).unwrap().to_string(),
        "cycle_end": Timestamp::parse_rfc3339(until).unwrap().to_string(),
    })
}

/// The keys of `expected` read from `row`.
fn seen(row: &Value) -> Value {
    let keys = ["tenant", "consumption", "policy_id", "limit", "overage", "plan", "cycle_start", "cycle_end"];
    keys.iter().map(|k| (k.to_string(), row[*k].clone())).collect::<serde_json::Map<_, _>>().into()
}

// Proves a plan change in the middle of a New York billing cycle bills the cycle in two rows: free's part from the
// cycle's start to the upgrade, pro's from the upgrade to the cycle's end, each with its own consumption, limit and
// overage (computed here from the events); the cycle before is free's alone, org-2 (no plan) has an empty plan; the
// CSV keeps every earlier column in place with `plan` last; the assignments list who moved the tenant and why.
#[test]
fn a_plan_change_mid_cycle_bills_each_plan_for_its_part_of_the_cycle() {
    let test = TestLedger::new();
    set_plan(&test, "free", FREE_LIMIT);
    set_plan(&test, "pro", PRO_LIMIT);
    assign(&test, "free", "2026-10-01T00:00:00Z").success();
    let upgraded = assign(&test, "pro", UPGRADE).success().stdout_text();
    assert!(
        upgraded.starts_with("org-1 assigned plan pro from 2026-11-20T20:00:00Z by sales@example.com"),
        "{upgraded}"
    );
    let events: Vec<Event> = USAGE.iter().map(|(id, t, tenant, q)| usage(id, t, tenant, *q)).collect();
    let file = test.file("usage.avro");
    write_container(&file, &events);
    test.ingest(&file);

    // November bills the cycle that ends on the 14th (09:00 New York, 14:00 UTC): free's alone.
    let november: Vec<Value> = rows(&test, "2026-11").iter().filter(|r| r["tenant"] == "org-1").map(seen).collect();
    let october_cycle = ("2026-10-14T13:00:00Z", "2026-11-14T14:00:00Z");
    assert_eq!(november, [expected("org-1", october_cycle, "free", FREE_LIMIT)]);

    // December bills the cycle from November 14 to December 14, split at the upgrade.
    let december = rows(&test, "2026-12");
    let org_1: Vec<Value> = december.iter().filter(|r| r["tenant"] == "org-1").map(seen).collect();
    let (start, end) = ("2026-11-14T14:00:00Z", "2026-12-14T14:00:00Z");
    assert_eq!(
        org_1,
        [expected("org-1", (start, UPGRADE), "free", FREE_LIMIT), expected("org-1", (UPGRADE, end), "pro", PRO_LIMIT)]
    );
    let whole: i64 = org_1.iter().map(|r| r["consumption"].as_i64().unwrap()).sum();
    assert_eq!(whole, used("org-1", start, end), "the parts add up to the cycle");

    // org-2 was never assigned a plan: its November row names none.
    let org_2: Vec<Value> = rows(&test, "2026-11").into_iter().filter(|r| r["tenant"] == "org-2").collect();
    assert_eq!(org_2.len(), 1, "{org_2:?}");
    assert_eq!((org_2[0]["consumption"].as_i64(), org_2[0]["plan"].clone()), (Some(3), Value::Null));

    let csv = test.run(&["export", "billing", "--period", "2026-12", "--format", "csv"]).success().stdout_text();
    assert_eq!(
        csv.lines().next(),
        Some(
            "tenant,metric,period,consumption,policy_id,policy_version,limit,grants,effective_limit,overage,overshoot,\
             late_adjustments,watermark,gaps,cycle_start,cycle_end,plan"
        )
    );
    // Support asks why a request of the new cycle was denied: the words name the plan, its version and who assigned it.
    let decision = serde_json::json!({
        "event_id": "d-1", "occurred_at": "2026-11-25T10:00:00Z", "tenant": "org-1", "metric": "requests",
        "source": "gateway", "request_id": "req-pro-1", "idempotency_key": "k-1", "amount": 10, "outcome": "DENIED",
        "reason": "QUOTA_EXCEEDED", "policy_id": "*pro:requests:tenant:billing_cycle", "policy_version": 1,
        "window_start": UPGRADE, "window_end": end, "limit": PRO_LIMIT, "used_before": PRO_LIMIT, "remaining": 0
    });
    let decision = Event::from_json(schemas::EventType::DecisionEvent, &decision.to_string()).unwrap();
    let file = test.file("decision.avro");
    write_container(&file, &[decision]);
    test.ingest(&file);
    let why = test.run(&["audit", "why", "req-pro-1"]).success().stdout_text();
    let named = "plan pro v1, assigned 2026-11-20 by sales@example.com: \"signed the order form\"";
    assert!(why.contains(named), "{why}");
    let why = test.run(&["audit", "why", "req-pro-1", "--json"]).success().json();
    assert_eq!(why["policy"]["plan"]["assigned_from"], UPGRADE, "{why}");

    let listed = test.run(&["plan", "assignments", "--tenant", "org-1", "--json"]).success().json();
    let plans: Vec<(&str, &str, &str)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["plan"].as_str().unwrap(), a["effective_from"].as_str().unwrap(), a["actor"].as_str().unwrap()))
        .collect();
    assert_eq!(plans, [("free", "2026-10-01T00:00:00Z", "sales@example.com"), ("pro", UPGRADE, "sales@example.com")]);
}

// Proves the enforcement hook counts the new plan's window from the instant the plan was assigned: after a move from
// free to pro ten minutes ago, `quota show` names pro's rolling quota, its window starting at the assignment, holding
// only the usage since then (40 of the 70 of the last hour), beside pro's limit; and that a plan without a policy
// recorded cannot be assigned (exit 2, nothing written).
#[test]
fn the_hook_counts_a_new_plan_from_its_assignment() {
    let test = TestLedger::new();
    let now = Timestamp::now().micros();
    let ago = |minutes: i64| Timestamp(now - minutes * 60 * 1_000_000).to_string();
    for (plan, limit) in [("free", "100"), ("pro", "1000")] {
        test.run(&[
            "plan",
            "set",
            "--plan",
            plan,
            "--metric",
            "requests",
            "--limit",
            limit,
            "--window",
            "ROLLING",
            "--window-seconds",
            "86400",
            "--enforcement",
            "HARD",
            "--effective-from",
            &ago(600),
            "--actor",
            "ops",
            "--reason",
            "tiers",
        ])
        .success();
    }
    assign(&test, "free", &ago(20)).success();
    let upgrade = ago(10);
    assign(&test, "pro", &upgrade).success();
    let events = [usage("u-1", &ago(15), "org-1", 30), usage("u-2", &ago(5), "org-1", 40)];
    let file = test.file("usage.avro");
    write_container(&file, &events);
    test.ingest(&file);

    let shown = test.run(&["quota", "show", "org-1", "--metric", "requests", "--json"]).success().json();
    let quotas = shown["quotas"].as_array().unwrap();
    assert_eq!(quotas.len(), 1, "{shown}");
    let quota = &quotas[0];
    assert_eq!(quota["policy_id"], "*pro:requests:tenant:rolling", "{shown}");
    assert_eq!(quota["window_start"].as_str(), Some(upgrade.as_str()), "{shown}");
    assert_eq!((quota["limit"].as_i64(), quota["consumed"].as_i64()), (Some(1_000), Some(40)), "{shown}");

    let before = test.status();
    let refused = test.run(&[
        "plan",
        "assign",
        "--tenant",
        "org-1",
        "--plan",
        "enterprise",
        "--actor",
        "ops",
        "--reason",
        "typo",
    ]);
    let refused = refused.expect_code(2);
    assert!(refused.stderr.contains("plan \"enterprise\" has no policy recorded"));
    assert_eq!(test.status()["watermark"], before["watermark"], "nothing written");
}
