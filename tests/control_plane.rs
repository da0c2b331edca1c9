//! The control plane through the real binary: `policy set|list|history`, `plan set`, `grant add|list` against a
//! ledger file, each refusal with its message and nothing written, a change picked up by a running `serve`, and
//! `--brokers` through the embedded broker and `ingest`.

#[path = "support/hook_http.rs"]
mod hook_http;
mod support;

use serde_json::Value;
use support::brokers::Broker;
use support::*;

const WHO: [&str; 4] = ["--actor", "alice@finance", "--reason", "upgrade to pro (TICKET-7)"];

fn policy_set(ledger: &TestLedger, tenant: &str, limit: &str, extra: &[&str]) -> Run {
    let mut args = vec!["policy", "set", "--tenant", tenant, "--metric", "tokens", "--limit", limit];
    args.extend_from_slice(&["--window", "DAY", "--enforcement", "HARD"]);
    args.extend_from_slice(&WHO);
    args.extend_from_slice(extra);
    ledger.run(&args)
}

fn recorded(ledger: &TestLedger) -> u64 {
    count(&ledger.status(), "events_recorded")
}

// Proves that each command's happy path records what it says, with the next version, who and why: two versions of a
// tenant's policy, a plan default, a grant; list shows what is in force, history every version.
#[test]
fn policies_plans_and_grants_are_recorded_with_who_and_why() {
    let ledger = TestLedger::new();
    let first = policy_set(&ledger, "org-1", "100", &["--json"]).success().json();
    assert_eq!((first["policy_id"].as_str(), first["version"].as_i64()), (Some("org-1:tokens:tenant:day"), Some(1)));
    let second = policy_set(&ledger, "org-1", "200", &["--on-failure", "OPEN"]).success().stdout_text();
    assert!(second.starts_with("policy org-1:tokens:tenant:day version 2 of org-1: 200 tokens per DAY"), "{second}");
    ledger
        .run(
            &["plan", "set", "--metric", "tokens", "--limit", "50", "--window", "MONTH", "--enforcement", "SOFT"]
                .into_iter()
                .chain(WHO)
                .collect::<Vec<_>>(),
        )
        .success();
    let grant = ["grant", "add", "--tenant", "org-1", "--metric", "tokens", "--amount", "25", "--grant-id", "g-1"];
    let validity = ["--valid-from", "2026-12-01T00:00:00Z", "--valid-until", "2027-01-01T00:00:00Z"];
    ledger.run(&grant.into_iter().chain(validity).chain(WHO).collect::<Vec<_>>()).success();
    assert_eq!(recorded(&ledger), 4);

    let listed = ledger.run(&["policy", "list", "--json"]).success().json();
    let in_force: Vec<(&str, &str, i64, i64)> = listed
        .as_array()
        .expect("a list")
        .iter()
        .map(|p| {
            (
                p["tenant"].as_str().unwrap(),
                p["policy_id"].as_str().unwrap(),
                p["version"].as_i64().unwrap(),
                p["limit"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(in_force, [("*", "*:tokens:tenant:month", 1, 50), ("org-1", "org-1:tokens:tenant:day", 2, 200)]);
    // A version set to fail open says so; one that says nothing fails closed.
    let modes: Vec<&str> = listed.as_array().unwrap().iter().map(|p| p["on_failure"].as_str().unwrap()).collect();
    assert_eq!(modes, ["CLOSED", "OPEN"], "{listed}");
    let of_other = ledger.run(&["policy", "list", "--tenant", "org-2", "--json"]).success().json();
    assert_eq!(of_other.as_array().map(Vec::len), Some(1), "only the plan default applies to org-2: {of_other}");

    let history = ledger.run(&["policy", "history", "org-1:tokens:tenant:day", "--json"]).success().json();
    let versions: Vec<(i64, i64, &str, &str)> = history
        .as_array()
        .expect("a list")
        .iter()
        .map(|p| {
            (
                p["version"].as_i64().unwrap(),
                p["limit"].as_i64().unwrap(),
                p["actor"].as_str().unwrap(),
                p["reason"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(versions, [(1, 100, WHO[1], WHO[3]), (2, 200, WHO[1], WHO[3])]);
    let table = ledger.run(&["policy", "history", "org-1:tokens:tenant:day"]).success().stdout_text();
    assert!(table.lines().nth(2).is_some_and(|line| line.contains("alice@finance")), "{table}");

    let grants = ledger.run(&["grant", "list", "--tenant", "org-1", "--json"]).success().json();
    assert_eq!(grants[0]["grant_id"], "g-1");
    assert_eq!((grants[0]["amount"].as_i64(), grants[0]["actor"].as_str()), (Some(25), Some(WHO[1])));
    // What was recorded is the contract's own: `sql` shows who and why in the detail tables too.
    let sql = ledger.run(&["sql", "--format", "json", "SELECT version, actor, reason FROM policy_events ORDER BY seq"]);
    assert!(sql.success().stdout_text().contains("alice@finance"));
    // `audit tenant` lists the changes to its limits in the range, with who and why.
    let range = ["--from", "2026-01-01T00:00:00Z", "--to", "2100-01-01T00:00:00Z"];
    let audit = ledger.run(&["audit", "tenant", "org-1", "--json"].into_iter().chain(range).collect::<Vec<_>>());
    let changes = audit.success().json()["changes"].clone();
    let seen: Vec<(&str, &str, &str)> = changes
        .as_array()
        .expect("a list of changes")
        .iter()
        .map(|c| (c["kind"].as_str().unwrap(), c["id"].as_str().unwrap(), c["actor"].as_str().unwrap()))
        .collect();
    let policy = "org-1:tokens:tenant:day";
    let expected = [
        ("policy", policy, WHO[1]),
        ("policy", policy, WHO[1]),
        ("policy", "*:tokens:tenant:month", WHO[1]),
        ("grant", "g-1", WHO[1]),
    ];
    assert_eq!(seen, expected);
    let words = ledger.run(&["audit", "tenant", "org-1"].into_iter().chain(range).collect::<Vec<_>>());
    assert!(words.success().stdout_text().contains("Changes to its limits: 4."));
    ledger.assert_verifies();
}

// Proves that each invalid change is refused with a message naming why, exit 2, and nothing written.
#[test]
fn invalid_changes_are_refused_and_nothing_is_written() {
    let ledger = TestLedger::new();
    policy_set(&ledger, "org-1", "100", &[]).success();
    ledger.run(&["export", "billing", "--period", "2026-11", "--format", "csv", "--final"]).success();
    let before = recorded(&ledger);
    let long = "m".repeat(129);
    let refusals: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--version", "1"], "version 1 of policy org-1:tokens:tenant:day is not above the last recorded, 1"),
        (
            vec!["--effective-from", "2026-11-15T00:00:00Z"],
            "effective_from 2026-11-15T00:00:00Z is before 2026-12-01T00:00:00Z, the end of closed period 2026-11",
        ),
        (vec!["--policy-id", "p\nx"], "policy_id holds a control character"),
    ];
    for (extra, message) in refusals {
        let run = policy_set(&ledger, "org-1", "100", &extra).expect_code(2);
        assert!(run.stderr.contains(message), "{extra:?}: {}", run.stderr);
        assert!(run.stderr.contains("policy not changed"), "{}", run.stderr);
    }
    let negative = policy_set(&ledger, "org-1", "-5", &[]).expect_code(2);
    assert!(negative.stderr.contains("limit is -5, must be at least 0"), "{}", negative.stderr);
    let tab = policy_set(&ledger, "org\t1", "5", &[]).expect_code(2);
    assert!(tab.stderr.contains("tenant holds a control character (U+0009)"), "{}", tab.stderr);
    let metric = ["policy", "set", "--tenant", "org-1", "--metric", &long, "--limit", "5", "--window", "DAY"];
    let too_long = ledger.run(&metric.into_iter().chain(["--enforcement", "HARD"]).chain(WHO).collect::<Vec<_>>());
    assert!(too_long.expect_code(2).stderr.contains("metric is 129 bytes long, longer than the 128"));

    let grant = |amount: &str, from: &str, until: &str| {
        let args = ["grant", "add", "--tenant", "org-1", "--metric", "tokens", "--amount", amount, "--grant-id", "g-1"];
        ledger
            .run(&args.into_iter().chain(["--valid-from", from, "--valid-until", until]).chain(WHO).collect::<Vec<_>>())
    };
    let (december, january) = ("2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z");
    assert!(grant("0", december, january).expect_code(2).stderr.contains("amount is 0, must be at least 1"));
    let backwards = grant("5", january, december).expect_code(2).stderr;
    assert!(backwards.contains("valid_until: 2026-12-01T00:00:00Z is not after valid_from"), "{backwards}");
    let closed = grant("5", "2026-11-20T00:00:00Z", january).expect_code(2).stderr;
    assert!(
        closed.contains(
            "valid_from 2026-11-20T00:00:00Z is before 2026-12-01T00:00:00Z, the end of closed period 2026-11"
        )
    );
    assert_eq!(recorded(&ledger), before, "nothing written by a refused change");

    grant("5", december, january).success();
    let again = grant("5", december, january).expect_code(2).stderr;
    assert!(again.contains("grant g-1 of org-1 is recorded already"), "{again}");
    assert_eq!(recorded(&ledger), before + 1);
}

// Proves that a policy set while `serve` runs changes the next decisions: a HARD daily limit of 5 denies the sixth
// token, and once version 2 (limit 100) is recorded beside the running server, the same request is allowed.
#[test]
fn a_policy_set_while_serve_runs_changes_the_next_decision() {
    let ledger = TestLedger::new();
    policy_set(&ledger, "org-1", "5", &[]).success();
    let server = hook_http::Server::start(&ledger.path, ledger.dir.path(), &[], &ledger.file("serve.err"));
    assert_eq!(server.check("org-1", 5, "k-1").decided().map(|(status, _)| status), Some(200));
    assert_eq!(server.check("org-1", 1, "k-2").decided().map(|(status, _)| status), Some(429));
    policy_set(&ledger, "org-1", "100", &[]).success();
    let mut attempt = 0;
    eventually(10, "a check allowed under version 2", || {
        attempt += 1;
        let key = format!("k-after-{attempt}");
        (server.check("org-1", 1, &key).decided().map(|(status, _)| status) == Some(200)).then_some(())
    });
    assert_eq!(attempt, 1, "the first check after the change is decided under it");
    // `audit why` names who set the version that decided, and why.
    let why = ledger.run(&["audit", "why", "k-after-1"]).success().stdout_text();
    assert!(why.contains("version 2") && why.contains(&format!("Set by {}: {}.", WHO[1], WHO[3])), "{why}");
    let json = ledger.run(&["audit", "why", "k-after-1", "--json"]).success().json();
    assert_eq!(json["policy"]["actor"], WHO[1]);
}

// Proves that `--brokers` produces the change to quota.policies instead of the ledger, with the version read from
// the ledger, and that ingest then records it with who and why.
#[test]
fn policy_set_with_brokers_reaches_the_ledger_through_ingest() {
    let broker = Broker::mock();
    let ledger = TestLedger::new();
    policy_set(&ledger, "org-1", "100", &[]).success();
    let produced = policy_set(&ledger, "org-1", "300", &["--brokers", &broker.bootstrap]).success().stdout_text();
    assert!(produced.contains("version 2") && produced.contains("produced to quota.policies"), "{produced}");
    assert_eq!(recorded(&ledger), 1, "produced, not appended");
    ledger.run(&["ingest", "--brokers", &broker.bootstrap, "--until-caught-up", "--json"]).success();
    let history = ledger.run(&["policy", "history", "org-1:tokens:tenant:day", "--json"]).success().json();
    let last: &Value = history.as_array().and_then(|v| v.last()).expect("versions");
    assert_eq!(
        (last["version"].as_i64(), last["limit"].as_i64(), last["actor"].as_str()),
        (Some(2), Some(300), Some(WHO[1]))
    );
}

/// An admin token for org-1 and org-2 only, and one for every tenant, beside the test's own (not an admin).
const ADMIN_TOKENS: &str = "[[token]]\nname = \"ops-org\"\nsecret = \"admin-secret-org-0123\"\ntenants = [\"org-1\", \"org-2\"]\nadmin = true\n\
[[token]]\nname = \"ops-all\"\nsecret = \"admin-secret-all-0123\"\ntenants = [\"*\"]\nadmin = true\n";

// Proves the admin endpoints: only an admin token covering the tenant may change it (a plan default needs one of
// every tenant), each refusal answers why with nothing written, a change is recorded with the token's name as the
// actor, and the next check is decided under it.
#[test]
fn admin_endpoints_change_policies_and_grants_for_admin_tokens_only() {
    use serde_json::json;
    let ledger = TestLedger::new();
    policy_set(&ledger, "org-1", "5", &[]).success();
    let stderr = ledger.file("serve.err");
    let server = hook_http::Server::start_with_tokens(&ledger.path, ledger.dir.path(), &[], &stderr, ADMIN_TOKENS);
    assert_eq!(server.check("org-1", 6, "k-1").decided().map(|(status, _)| status), Some(429));
    let raise = json!({"tenant": "org-1", "metric": "tokens", "limit": 100, "window": "DAY", "enforcement": "HARD",
                       "reason": "support ticket 12"});
    let (status, body) = server.post("/v1/admin/policies", hook_http::SECRET, &raise);
    assert_eq!((status, body["message"].as_str()), (403, Some("this token is not an admin token (admin = true)")));
    let plan =
        json!({"tenant": "*", "metric": "tokens", "limit": 1, "window": "DAY", "enforcement": "HARD", "reason": "r"});
    assert_eq!(
        server.post("/v1/admin/policies", "admin-secret-org-0123", &plan).0,
        403,
        "a plan default needs every tenant"
    );
    let mut negative = raise.clone();
    negative["limit"] = json!(-1);
    let (status, body) = server.post("/v1/admin/policies", "admin-secret-org-0123", &negative);
    assert_eq!((status, body["message"].as_str()), (400, Some("nothing recorded: limit is -1, must be at least 0")));
    let mut unknown_zone = raise.clone();
    unknown_zone["time_zone"] = json!("America/New_Yrok");
    let (status, body) = server.post("/v1/admin/policies", "admin-secret-org-0123", &unknown_zone);
    assert_eq!(status, 400, "{body}");
    assert!(body["message"].as_str().is_some_and(|m| m.contains("\"America/New_Yrok\" is not a time zone")), "{body}");
    let mut stale = raise.clone();
    stale["version"] = json!(1);
    let (status, body) = server.post("/v1/admin/policies", "admin-secret-org-0123", &stale);
    assert_eq!(status, 409, "{body}");
    assert_eq!(recorded(&ledger), 2, "the first policy and one decision: nothing written by the refusals");

    let (status, body) = server.post("/v1/admin/policies", "admin-secret-org-0123", &raise);
    assert_eq!(status, 201, "{body}");
    assert_eq!((body["event"]["version"].as_i64(), body["event"]["actor"].as_str()), (Some(2), Some("ops-org")));
    assert_eq!(server.check("org-1", 6, "k-2").decided().map(|(status, _)| status), Some(200));
    let grant = json!({"tenant": "org-2", "metric": "tokens", "amount": 10, "valid_from": "2026-12-01T00:00:00Z",
                       "valid_until": "2027-01-01T00:00:00Z", "grant_id": "g-http", "reason": "goodwill"});
    assert_eq!(server.post("/v1/admin/grants", "admin-secret-all-0123", &grant).0, 201);
    assert_eq!(server.post("/v1/admin/grants", "admin-secret-all-0123", &grant).0, 409, "a grant id once");
    let grants = ledger.run(&["grant", "list", "--json"]).success().json();
    assert_eq!((grants[0]["grant_id"].as_str(), grants[0]["actor"].as_str()), (Some("g-http"), Some("ops-all")));
}

// Proves over HTTP that one tenant's admin cannot block another's changes with names holding `/`: tenant iso's grant
// b/credit-7 and policy of metric b leave tenant iso/b's grant credit-7 and default policy answered 201 (not 409), and
// the ledger holds no conflicting copy.
#[test]
fn a_tenants_admin_cannot_take_the_ids_of_another_tenants_changes() {
    use serde_json::json;
    let ledger = TestLedger::new();
    policy_set(&ledger, "org-1", "5", &[]).success();
    let stderr = ledger.file("serve.err");
    let tokens = concat!(
        "[[token]]\nname = \"ops-iso\"\nsecret = \"admin-secret-iso-0123\"\ntenants = [\"iso\"]\nadmin = true\n",
        "[[token]]\nname = \"ops-iso-b\"\nsecret = \"admin-secret-isob-0123\"\ntenants = [\"iso/b\"]\nadmin = true\n",
    );
    let server = hook_http::Server::start_with_tokens(&ledger.path, ledger.dir.path(), &[], &stderr, tokens);
    let grant = |tenant: &str, grant_id: &str| {
        json!({"tenant": tenant, "metric": "tokens", "amount": 10, "valid_from": "2026-12-01T00:00:00Z",
               "valid_until": "2027-01-01T00:00:00Z", "grant_id": grant_id, "reason": "credit"})
    };
    let (status, body) = server.post("/v1/admin/grants", "admin-secret-iso-0123", &grant("iso", "b/credit-7"));
    assert_eq!(status, 201, "{body}");
    let (status, body) = server.post("/v1/admin/grants", "admin-secret-isob-0123", &grant("iso/b", "credit-7"));
    assert_eq!(status, 201, "{body}");
    let squat = json!({"tenant": "iso", "metric": "b", "limit": 0, "window": "DAY", "enforcement": "HARD",
                       "policy_id": "tokens/iso/b:tokens:tenant:day", "reason": "squat"});
    let (status, body) = server.post("/v1/admin/policies", "admin-secret-iso-0123", &squat);
    assert_eq!(status, 201, "{body}");
    let own = json!({"tenant": "iso/b", "metric": "tokens", "limit": 100, "window": "DAY", "enforcement": "HARD",
                     "reason": "plan"});
    let (status, body) = server.post("/v1/admin/policies", "admin-secret-isob-0123", &own);
    assert_eq!((status, body["event"]["version"].as_i64()), (201, Some(1)), "{body}");
    let status = ledger.status();
    assert_eq!((count(&status, "events_recorded"), count(&status, "conflicts")), (5, 0), "org-1's policy, 4 changes");
}

// Measures (prints, asserts nothing about time) how long after a policy change reaches the ledger a running `serve`
// decides under it: the limit toggles between 0 and a million by `policy set` (its process has exited, so the
// append committed), while a client checks without pause; the figure is from the commit to the first answer under
// the new version. It asserts only what must hold whatever the timing: no check sent after the commit is decided
// under the old version. The figure is in docs/benchmarks.md.
#[test]
fn how_soon_serve_applies_a_policy_change() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};
    let ledger = TestLedger::new();
    policy_set(&ledger, "org-1", "0", &[]).success();
    let server = hook_http::Server::start(&ledger.path, ledger.dir.path(), &[], &ledger.file("serve.err"));
    let answers: Arc<Mutex<Vec<(Instant, Instant, u16)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let client = server.client();
    let checker = {
        let (answers, stop) = (answers.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let sent = Instant::now();
                let status = client.check("org-1", 1, &format!("m-{n}")).decided().map_or(0, |(status, _)| status);
                answers.lock().unwrap().push((sent, Instant::now(), status));
            }
        })
    };
    let mut latencies = Vec::new();
    for round in 0..20 {
        let (limit, expected) = if round % 2 == 0 { ("1000000", 200) } else { ("0", 429) };
        policy_set(&ledger, "org-1", limit, &[]).success();
        let committed = Instant::now();
        let first = eventually(10, "an answer under the new version", || {
            let answers = answers.lock().unwrap();
            let after: Vec<_> = answers.iter().filter(|(sent, _, _)| *sent >= committed).collect();
            let stale = after.iter().filter(|(_, _, status)| *status != expected).count();
            assert_eq!(stale, 0, "round {round}: a check sent after the change was decided under the old version");
            after.first().map(|(_, answered, _)| *answered)
        });
        latencies.push(first.duration_since(committed));
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    checker.join().unwrap();
    latencies.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "policy change to first decision under it over {} changes: median {:.2} ms, max {:.2} ms",
        latencies.len(),
        ms(latencies[latencies.len() / 2]),
        ms(latencies[latencies.len() - 1])
    );
}

// Proves that with `--data` a plan default is recorded in every shard and a tenant's change in its tenant's shard
// only, and that `policy list` over the shards shows each version once.
#[test]
fn with_shards_a_plan_default_goes_to_every_shard_and_a_tenant_to_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    let file = dir.path().join("usage.avro");
    write_container(&file, &[usage("u-1", "2026-11-02T10:00:00Z", "org-42", 1)]);
    run_in(dir.path(), &["--data", data, "ingest", "--file", file.to_str().unwrap(), "--partitions", "3"], b"")
        .success();
    let with = |args: &[&str]| run_in(dir.path(), &[&["--data", data][..], args].concat(), b"");
    let plan = ["plan", "set", "--metric", "tokens", "--limit", "50", "--window", "DAY", "--enforcement", "HARD"];
    let plan = with(&plan.into_iter().chain(WHO).collect::<Vec<_>>()).success().stdout_text();
    let shard = schemas::partition::partition_of("org-42", 3);
    // In every shard, in partition order; org-42's shard holds its usage first.
    let seqs: Vec<&str> = (0..3).map(|p| if p == shard { "2" } else { "1" }).collect();
    assert!(plan.contains(&format!("recorded at ledger seq {}", seqs.join(", "))), "{plan}");
    let own = ["policy", "set", "--tenant", "org-42", "--metric", "tokens", "--limit", "9", "--window", "DAY"];
    let own = with(&own.into_iter().chain(["--enforcement", "HARD"]).chain(WHO).collect::<Vec<_>>());
    let own = own.success().stdout_text();
    assert!(own.trim_end().ends_with("recorded at ledger seq 3"), "in org-42's shard only: {own}");
    let in_shards: Vec<u64> = (0..3)
        .map(|p: u32| {
            let path = format!("{data}/shard-{p:04}.db");
            count(
                &run_in(dir.path(), &["--ledger", &path, "status", "--json"], b"").success().json(),
                "events_recorded",
            )
        })
        .collect();
    let expected: Vec<u64> = (0..3).map(|p| if p == shard { 3 } else { 1 }).collect();
    assert_eq!(in_shards, expected);
    let listed = with(&["policy", "list", "--json"]).success().json();
    assert_eq!(listed.as_array().map(Vec::len), Some(2), "each version once: {listed}");
}

// Proves throttled overage through the binary: `policy set --overage-throttle 600/MINUTE` on a HARD daily quota of 5,
// listed as THROTTLE; refused on a SOFT one. `serve` then allows beyond the limit what the overage bucket holds
// (it fills at 10 a second from serve's start), answers 429 RATE_LIMITED with a retry when the bucket lacks the
// tokens and QUOTA_EXCEEDED when an ask is larger than the whole bucket; `audit why` tells each apart, and reconcile
// finds no overshoot in what the throttle let through.
#[test]
fn a_throttled_overage_lets_its_rate_through_beyond_the_limit() {
    let ledger = TestLedger::new();
    let soft = ["--enforcement", "SOFT", "--overage-throttle", "600/minute"];
    let refused = ledger.run(
        &["policy", "set", "--tenant", "org-1", "--metric", "tokens", "--limit", "5"]
            .into_iter()
            .chain(["--window", "DAY"])
            .chain(soft)
            .chain(WHO)
            .collect::<Vec<_>>(),
    );
    let refused = refused.expect_code(2).stderr;
    assert!(refused.contains("a throttled overage is for HARD policies"), "{refused}");
    policy_set(&ledger, "org-1", "5", &["--overage-throttle", "600/minute"]).success();
    let listed = ledger.run(&["policy", "list", "--json"]).success().json();
    assert_eq!(listed[0]["overage"], "THROTTLE 600/MINUTE", "{listed}");
    let table = ledger.run(&["policy", "list"]).success().stdout_text();
    assert!(table.lines().next().is_some_and(|header| header.trim_end().ends_with("overage")), "{table}");
    let shown = ledger.run(&["quota", "show", "org-1"]).success().stdout_text();
    // The overage column, then the window's (the newest last).
    assert!(shown.lines().nth(1).is_some_and(|row| row.trim_end().ends_with("600/MINUTE  DAY")), "{shown}");

    let server = hook_http::Server::start(&ledger.path, ledger.dir.path(), &[], &ledger.file("serve.err"));
    let ask = |key: &str, amount: i64| {
        let body = serde_json::json!({"tenant": "org-1", "metric": "tokens", "amount": amount, "idempotency_key": key});
        server.post("/v1/check", hook_http::SECRET, &body)
    };
    assert_eq!(ask("k-1", 5).0, 200);
    // The bucket has filled enough for 3 beyond the limit (not yet the 500 of k-3), as serve itself says.
    eventually(30, "the overage bucket holds 3 tokens", || {
        let (status, quotas) = server.get("/v1/quotas?tenant=org-1&metric=tokens", hook_http::SECRET);
        assert_eq!(status, 200, "{quotas}");
        let tokens = quotas["quotas"][0]["overage_tokens"].as_i64().unwrap_or_else(|| panic!("tokens: {quotas}"));
        (tokens >= 3).then_some(())
    });
    let beyond = ask("k-2", 3);
    assert_eq!((beyond.0, beyond.1["code"].as_str()), (200, Some("OK")), "{beyond:?}");
    let waiting = ask("k-3", 500);
    assert_eq!((waiting.0, waiting.1["code"].as_str()), (429, Some("RATE_LIMITED")), "{waiting:?}");
    assert!(waiting.1["retryAfterSeconds"].as_i64().is_some_and(|s| (1..=60).contains(&s)), "{waiting:?}");
    let whole = ask("k-4", 700);
    assert_eq!((whole.0, whole.1["code"].as_str()), (429, Some("QUOTA_EXCEEDED")), "{whole:?}");
    drop(server);

    let why = |key: &str| ledger.run(&["audit", "why", key]).success().stdout_text();
    assert!(why("k-2").contains("were let through by the throttled overage (600 per MINUTE)"), "{}", why("k-2"));
    assert!(why("k-3").contains("this policy throttles rather than refuses, 600 per MINUTE"), "{}", why("k-3"));
    assert!(why("k-4").contains("more than the overage bucket of the serving process ever holds (600)"));
    let json = ledger.run(&["audit", "why", "k-2", "--json"]).success().json();
    assert_eq!(
        (json["policy"]["overage_rate"].as_i64(), json["policy"]["overage_window"].as_str()),
        (Some(600), Some("MINUTE"))
    );
    let day_end = json["decision"]["window_end"].as_str().expect("the day's end").to_string();
    let reconciled = ledger.run(&["reconcile", "--as-of", &day_end, "--json"]).expect_code(0).json();
    assert_eq!(count(&reconciled, "adjustments_written"), 0, "8 of 5 is within the throttle: {reconciled}");
}

// Proves `GET /v1/admin/billing` (what `export billing --cluster` asks each owner) on `serve --ledger`: one part, the
// ledger's, whose rows and watermark are those `export billing` prints; only an admin token for every tenant reads
// it, and a period that is not a month is a 400.
#[test]
fn serve_answers_the_billing_export_of_its_ledger_to_an_admin_token_of_every_tenant() {
    let ledger = TestLedger::new();
    policy_set(&ledger, "org-1", "5", &[]).success();
    let stderr = ledger.file("serve.err");
    let server = hook_http::Server::start_with_tokens(&ledger.path, ledger.dir.path(), &[], &stderr, ADMIN_TOKENS);
    assert_eq!(server.check("org-1", 3, "k-1").decided().map(|(status, _)| status), Some(200));
    let period = schemas::Timestamp::now().to_string()[..7].to_string();
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let ask = |period: &str, secret: &str| {
        let url = format!("{}/v1/admin/billing?period={period}", server.base);
        let mut response = agent.get(url).header("Authorization", format!("Bearer {secret}")).call().unwrap();
        (response.status().as_u16(), response.body_mut().read_json::<Value>().unwrap())
    };
    let (status, body) = ask(&period, "admin-secret-org-0123");
    assert_eq!((status, body["error"].as_str()), (403, Some("forbidden")), "{body}");
    let (status, body) = ask(&period, hook_http::SECRET);
    assert_eq!((status, body["error"].as_str()), (403, Some("forbidden")), "not an admin token: {body}");
    assert_eq!(ask("2026-13", "admin-secret-all-0123").0, 400);
    let (status, body) = ask(&period, "admin-secret-all-0123");
    assert_eq!(status, 200, "{body}");
    let shards = body["shards"].as_array().expect("shards");
    assert_eq!(shards.len(), 1, "{body}");
    let part = &shards[0];
    assert_eq!((part["partition"].clone(), part["closed"].as_bool()), (Value::Null, Some(false)), "{body}");
    let rows: Vec<(&str, &str, i64)> = part["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["tenant"].as_str().unwrap(), r["metric"].as_str().unwrap(), r["consumption"].as_i64().unwrap()))
        .collect();
    assert_eq!(rows, [("org-1", "tokens", 3)]);
    drop(server);
    let csv = ledger.run(&["export", "billing", "--period", &period, "--format", "csv"]).success().stdout_text();
    let watermark = part["watermark"].as_u64().unwrap().to_string();
    assert!(csv.lines().nth(1).is_some_and(|row| row.contains(&format!(",{watermark},"))), "{watermark}: {csv}");
}

/// org-1's level of storage_bytes, `bytes`, reported now by a storage service (a UsageEvent), ingested from a file.
fn report_level(ledger: &TestLedger, event_id: &str, bytes: i64) {
    let now = schemas::Timestamp::now().to_string();
    let level = schemas::Event::Usage(schemas::UsageEvent {
        header: header(event_id, &now, "org-1", "storage_bytes"),
        quantity: bytes,
        request_id: None,
        attributes: Default::default(),
    });
    let file = ledger.file(&format!("{event_id}.avro"));
    write_container(&file, &[level]);
    assert_eq!(count(&ledger.ingest(&file), "recorded"), 1);
}

// Gauge quotas through the real binary: `policy set --violation` makes a gauge quota (a SOFT one is refused), a
// level reported above its limit makes serve refuse org-1's inserts of another metric with 429 QUOTA_EXCEEDED naming
// the violation, while reads pass, until a lower level is reported; a check of the gauge's own metric is a 400.
#[test]
fn a_gauge_quota_refuses_inserts_over_http_until_its_level_drops() {
    let ledger = TestLedger::new();
    let gauge = ["--metric", "storage_bytes", "--limit", "1000", "--window", "DAY", "--violation", "NO_INSERTS"];
    let args = |enforcement: &'static str| {
        let mut args = vec!["policy", "set", "--tenant", "org-1", "--enforcement", enforcement];
        args.extend_from_slice(&gauge);
        args.extend_from_slice(&WHO);
        args
    };
    let refused = ledger.run(&args("SOFT")).expect_code(2).stderr;
    assert!(refused.contains("a gauge quota is HARD or SHADOW"), "{refused}");
    ledger.run(&args("HARD")).success();
    policy_set(&ledger, "org-1", "100", &[]).success();
    let listed = ledger.run(&["policy", "list", "--json"]).success().json();
    let overage: Vec<&str> = listed.as_array().unwrap().iter().filter_map(|p| p["overage"].as_str()).collect();
    assert!(overage.contains(&"GAUGE NO_INSERTS"), "{listed}");

    let server = hook_http::Server::start(&ledger.path, ledger.dir.path(), &[], &ledger.file("serve.err"));
    let ask = |key: &str, operation: Option<&str>| {
        let mut body = serde_json::json!({"tenant": "org-1", "metric": "tokens", "amount": 1, "idempotency_key": key});
        if let Some(operation) = operation {
            body["operation"] = operation.into();
        }
        server.post("/v1/check", hook_http::SECRET, &body)
    };
    assert_eq!(ask("k-1", Some("insert")).0, 200, "no level reported yet");
    report_level(&ledger, "level-1", 1_500);
    let denied = eventually(10, "serve sees the level", || Some(ask("k-2", Some("insert"))).filter(|r| r.0 == 429));
    assert_eq!(
        (denied.1["code"].as_str(), denied.1["violation"].as_str(), denied.1["policyId"].as_str()),
        (Some("QUOTA_EXCEEDED"), Some("NO_INSERTS"), Some("org-1:storage_bytes:tenant:day")),
        "{denied:?}"
    );
    assert_eq!(denied.1["resetsAt"], Value::Null, "{denied:?}");
    assert_eq!(ask("k-3", None).0, 429, "a request naming no operation is refused as a write");
    assert_eq!(ask("k-4", Some("read")).0, 200);
    let (status, body) = ask("k-5", Some("upsert"));
    assert_eq!(status, 400, "an operation the contract does not name: {body}");
    let own = serde_json::json!({"tenant": "org-1", "metric": "storage_bytes", "amount": 1, "idempotency_key": "k-6"});
    let (status, body) = server.post("/v1/check", hook_http::SECRET, &own);
    assert_eq!((status, body["field"].as_str()), (400, Some("metric")), "{body}");
    report_level(&ledger, "level-2", 800);
    eventually(10, "serve sees the lower level", || Some(()).filter(|_| ask("k-7", Some("insert")).0 == 200));
    drop(server);
    let why = ledger.run(&["audit", "why", "k-2"]).success().stdout_text();
    assert!(why.contains("Level of storage_bytes at decision time: 1500, above the limit of 1000."), "{why}");
}

// Project and API-key scopes through the real binary: `policy set --scope PROJECT` and `--scope API_KEY`, a grant to
// one project (`grant add --project`), serve checking each request against the tenant's, its project's and its key's
// policies and naming the level that denied, `quota show --project` reading the same counters from the ledger, and
// the month's bill broken down per project.
#[test]
fn projects_and_api_keys_are_limited_on_their_own() {
    let ledger = TestLedger::new();
    let set = |scope: &str, limit: &str| {
        let mut args = vec!["policy", "set", "--tenant", "org-1", "--metric", "tokens", "--limit", limit, "--window"];
        args.extend_from_slice(&["MONTH", "--enforcement", "HARD", "--scope", scope]);
        args.extend_from_slice(&WHO);
        ledger.run(&args).success();
    };
    set("PROJECT", "10");
    set("API_KEY", "6");
    let until = "2099-01-01T00:00:00Z";
    let grant = ["grant", "add", "--tenant", "org-1", "--project", "p-big", "--metric", "tokens", "--amount", "5"];
    let window = ["--valid-from", "2026-01-01T00:00:00Z", "--valid-until", until];
    ledger.run(&[&grant[..], &window, &WHO].concat()).success();
    let both = ledger.run(&[&grant[..], &["--subject", "u-1"], &window, &WHO].concat());
    assert!(both.expect_code(2).stderr.contains("cannot be used with"), "a grant names one member");

    let server = hook_http::Server::start(&ledger.path, ledger.dir.path(), &[], &ledger.file("serve.err"));
    let ask = |key: &str, amount: i64, project: &str, api_key: &str| {
        let body = serde_json::json!({"tenant": "org-1", "metric": "tokens", "amount": amount, "idempotency_key": key,
                                      "project": project, "api_key": api_key});
        server.post("/v1/check", hook_http::SECRET, &body)
    };
    assert_eq!(ask("k-1", 6, "p-1", "key-a").0, 200);
    let by_key = ask("k-2", 1, "p-1", "key-a");
    assert_eq!((by_key.0, by_key.1["scope"].as_str()), (429, Some("API_KEY")), "{by_key:?}");
    assert_eq!(ask("k-3", 4, "p-1", "key-b").0, 200, "another key of p-1");
    let by_project = ask("k-4", 1, "p-1", "key-c");
    assert_eq!((by_project.0, by_project.1["scope"].as_str()), (429, Some("PROJECT")), "{by_project:?}");
    assert_eq!(ask("k-5", 6, "p-big", "key-d").0, 200);
    assert_eq!(ask("k-6", 6, "p-big", "key-e").0, 200, "p-big's 10 plus its grant of 5");
    drop(server);

    let shown = ledger.run(&["quota", "show", "org-1", "--project", "p-big", "--json"]).success().json();
    let project = shown["quotas"].as_array().unwrap().iter().find(|q| q["scope"] == "PROJECT").cloned().unwrap();
    assert_eq!((project["effective_limit"].as_i64(), project["consumed"].as_i64()), (Some(15), Some(12)), "{shown}");
    let month = schemas::Timestamp::now().to_string()[..7].to_string();
    let bill = ledger.run(&["export", "billing", "--period", &month, "--format", "jsonl", "--by", "project"]);
    let rows: Vec<Value> = bill.success().stdout_text().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let tokens: Vec<(Option<&str>, i64)> = rows
        .iter()
        .filter(|r| r["metric"] == "tokens")
        .map(|r| (r["project"].as_str(), r["consumption"].as_i64().unwrap()))
        .collect();
    assert_eq!(tokens, [(None, 22), (Some("p-1"), 10), (Some("p-big"), 12)], "{rows:?}");
}

// Rolling windows through the real binary: `policy set --window ROLLING --window-seconds N` and `plan set` record a
// rolling quota; the two flags given apart, a length out of range or a rolling throttled overage are refused naming
// window_seconds, nothing written; `policy list` and `policy history` show the length; serve refuses past the limit
// of the 24 hours ending now, and `audit why` explains that denial in words support can paste.
#[test]
fn a_rolling_window_is_set_listed_and_its_denial_explained() {
    let ledger = TestLedger::new();
    let set = |window: &[&str]| {
        let mut args = vec!["policy", "set", "--tenant", "org-1", "--metric", "tokens", "--limit", "10000"];
        args.extend_from_slice(&["--enforcement", "HARD"]);
        args.extend_from_slice(window);
        args.extend_from_slice(&WHO);
        ledger.run(&args)
    };
    let line = set(&["--window", "rolling", "--window-seconds", "86400"]).success().stdout_text();
    let said = "policy org-1:tokens:tenant:rolling version 1 of org-1: 10000 tokens per ROLLING 86400s (HARD)";
    assert!(line.starts_with(said), "{line}");
    let refusals: [(&[&str], &str); 5] = [
        (&["--window", "ROLLING"], "policy not changed: window_seconds: a ROLLING window needs window_seconds"),
        (
            &["--window", "DAY", "--window-seconds", "86400"],
            "policy not changed: window_seconds: window_seconds is for ROLLING windows only",
        ),
        (&["--window", "ROLLING", "--window-seconds", "0"], "window_seconds is 0, must be at least 1"),
        (&["--window", "ROLLING", "--window-seconds", "2678401"], "window_seconds is 2678401, must be at most 2678400"),
        (
            &["--window", "ROLLING", "--window-seconds", "60", "--overage-throttle", "5/MINUTE"],
            "a ROLLING window is for quotas, not throttles, throttled overages or gauges",
        ),
    ];
    for (window, message) in refusals {
        let refused = set(window).expect_code(2).stderr;
        assert!(refused.contains(message), "{window:?}: {refused}");
    }
    assert_eq!(recorded(&ledger), 1, "nothing written by a refused change");
    let plan = ["plan", "set", "--metric", "requests", "--limit", "60", "--window", "ROLLING", "--window-seconds"];
    let planned = ledger.run(&[&plan[..], &["3600", "--enforcement", "SOFT"], &WHO].concat()).success().stdout_text();
    assert!(planned.contains("of *: 60 requests per ROLLING 3600s (SOFT)"), "{planned}");

    let table = ledger.run(&["policy", "list"]).success().stdout_text();
    assert!(table.contains("ROLLING 86400s") && table.contains("ROLLING 3600s"), "{table}");
    let listed = ledger.run(&["policy", "list", "--json"]).success().json();
    let windows: Vec<(&str, &str, Option<i64>)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["policy_id"].as_str().unwrap(), p["window"].as_str().unwrap(), p["window_seconds"].as_i64()))
        .collect();
    assert_eq!(
        windows,
        [
            ("*:requests:tenant:rolling", "ROLLING", Some(3_600)),
            ("org-1:tokens:tenant:rolling", "ROLLING", Some(86_400))
        ],
        "{listed}"
    );
    let history = ledger.run(&["policy", "history", "org-1:tokens:tenant:rolling"]).success().stdout_text();
    assert!(history.lines().nth(1).is_some_and(|row| row.contains("ROLLING 86400s")), "{history}");

    let server = hook_http::Server::start(&ledger.path, ledger.dir.path(), &[], &ledger.file("serve.err"));
    assert_eq!(server.check("org-1", 10_000, "k-1").decided().map(|(status, _)| status), Some(200));
    let ask = serde_json::json!({"tenant": "org-1", "metric": "tokens", "amount": 1, "idempotency_key": "k-2"});
    let (status, denied) = server.post("/v1/check", hook_http::SECRET, &ask);
    assert_eq!(
        (status, denied["code"].as_str(), denied["policyId"].as_str()),
        (429, Some("QUOTA_EXCEEDED"), Some("org-1:tokens:tenant:rolling")),
        "{denied}"
    );
    let resets_at = denied["resetsAt"].as_str().expect("when enough ages out").to_string();
    drop(server);
    let json = ledger.run(&["audit", "why", "k-2", "--json"]).success().json();
    assert_eq!(
        (json["policy"]["window"].as_str(), json["policy"]["window_seconds"].as_i64()),
        (Some("ROLLING"), Some(86_400))
    );
    assert_eq!(json["resets_at"].as_str(), Some(resets_at.as_str()), "{json}");
    let decided_at = json["decision"]["occurred_at"].as_str().unwrap();
    let why = ledger.run(&["audit", "why", "k-2"]).success().stdout_text();
    let explained = format!(
        "Out of allowance: the limit of 10,000 tokens in any 24 hours (rolling) was reached: 10,000 were used in the \
         24 hours before {decided_at}; enough ages out at {resets_at}."
    );
    assert!(why.contains(&explained), "{explained:?} missing from:\n{why}");
    assert!(!why.contains("The window resets at"), "a rolling window never resets at once:\n{why}");
    let allowed = ledger.run(&["audit", "why", "k-1", "--json"]).success().json();
    assert_eq!(allowed["resets_at"], Value::Null, "{allowed}");
    let allowed = ledger.run(&["audit", "why", "k-1"]).success().stdout_text();
    let ages = "A rolling window never resets at once: each use ages out of it 24 hours after it happened.";
    assert!(allowed.contains(ages), "{allowed}");
}

// Proves the admin API takes a ROLLING window's length as `window_seconds`, as `policy set` does, and refuses it
// given without ROLLING, or ROLLING without it, with 400 invalid_change naming window_seconds and nothing recorded.
#[test]
fn the_admin_api_sets_a_rolling_window_only_with_its_length() {
    use serde_json::json;
    let ledger = TestLedger::new();
    policy_set(&ledger, "org-1", "5", &[]).success();
    let stderr = ledger.file("serve.err");
    let server = hook_http::Server::start_with_tokens(&ledger.path, ledger.dir.path(), &[], &stderr, ADMIN_TOKENS);
    let rolling = json!({"tenant": "org-2", "metric": "tokens", "limit": 100, "window": "ROLLING",
                         "window_seconds": 3_600, "enforcement": "HARD", "reason": "an hour at a time"});
    let mut without = rolling.clone();
    without.as_object_mut().unwrap().remove("window_seconds");
    let mut daily = rolling.clone();
    daily["window"] = json!("DAY");
    for (body, message) in [
        (&without, "nothing recorded: window_seconds: a ROLLING window needs window_seconds"),
        (&daily, "nothing recorded: window_seconds: window_seconds is for ROLLING windows only"),
    ] {
        let (status, answer) = server.post("/v1/admin/policies", "admin-secret-org-0123", body);
        assert_eq!(
            (status, answer["error"].as_str(), answer["message"].as_str()),
            (400, Some("invalid_change"), Some(message))
        );
    }
    assert_eq!(recorded(&ledger), 1, "nothing written by the refusals");
    let (status, body) = server.post("/v1/admin/policies", "admin-secret-org-0123", &rolling);
    assert_eq!(status, 201, "{body}");
    let event = &body["event"];
    assert_eq!(
        (event["policy_id"].as_str(), event["window"].as_str(), event["window_seconds"].as_i64()),
        (Some("org-2:tokens:tenant:rolling"), Some("ROLLING"), Some(3_600)),
        "{body}"
    );
    let listed = ledger.run(&["policy", "list", "--tenant", "org-2"]).success().stdout_text();
    assert!(listed.contains("ROLLING 3600s"), "{listed}");
}

// Billing cycles through the real binary: `policy set --window BILLING_CYCLE --cycle-anchor T --time-zone Z` records
// a quota of the tenant's billing cycle; an anchor without BILLING_CYCLE, or BILLING_CYCLE without one, is refused
// naming cycle_anchor, nothing written; `policy list --json` shows the anchor; serve counts the cycle the anchor
// makes (from the 17th at local midnight in New York) and `audit why` says which cycle refused.
#[test]
fn a_billing_cycle_is_set_with_its_anchor_and_enforced_per_cycle() {
    let ledger = TestLedger::new();
    let set = |window: &[&str]| {
        let mut args = vec!["policy", "set", "--tenant", "org-1", "--metric", "tokens", "--limit", "100"];
        args.extend_from_slice(&["--enforcement", "HARD", "--effective-from", "2026-01-01T00:00:00Z"]);
        args.extend_from_slice(window);
        args.extend_from_slice(&WHO);
        ledger.run(&args)
    };
    let anchor = ["--cycle-anchor", "2026-01-17T00:00:00-05:00", "--time-zone", "America/New_York"];
    let line = set(&[&["--window", "BILLING_CYCLE"], &anchor[..]].concat()).success().stdout_text();
    assert!(line.contains("100 tokens per BILLING_CYCLE in America/New_York (HARD"), "{line}");
    assert!(line.contains("cycles anchored at 2026-01-17T05:00:00Z"), "{line}");
    let refusals: [(&[&str], &str); 2] = [
        (&["--window", "BILLING_CYCLE"], "cycle_anchor: a BILLING_CYCLE window needs cycle_anchor"),
        (
            &["--window", "MONTH", "--cycle-anchor", "2026-01-17T05:00:00Z"],
            "cycle_anchor: cycle_anchor is for BILLING_CYCLE windows only",
        ),
    ];
    for (window, message) in refusals {
        let refused = set(window).expect_code(2).stderr;
        assert!(refused.contains(message), "{window:?}: {refused}");
    }
    assert_eq!(recorded(&ledger), 1, "nothing written by a refused change");
    let listed = ledger.run(&["policy", "list", "--json"]).success().json();
    assert_eq!(
        (listed[0]["window"].as_str(), listed[0]["cycle_anchor"].as_str()),
        (Some("BILLING_CYCLE"), Some("2026-01-17T05:00:00Z")),
        "{listed}"
    );

    let server = hook_http::Server::start(&ledger.path, ledger.dir.path(), &[], &ledger.file("serve.err"));
    assert_eq!(server.check("org-1", 100, "k-1").decided().map(|(status, _)| status), Some(200));
    let ask = serde_json::json!({"tenant": "org-1", "metric": "tokens", "amount": 1, "idempotency_key": "k-2"});
    let (status, denied) = server.post("/v1/check", hook_http::SECRET, &ask);
    assert_eq!((status, denied["code"].as_str()), (429, Some("QUOTA_EXCEEDED")), "{denied}");
    // The cycle containing now starts on a 17th (or the last day of a shorter month: never, for the 17th) at local
    // midnight, and ends a month later.
    let resets_at = at(denied["resetsAt"].as_str().unwrap());
    let new_york: schemas::Tz = "America/New_York".parse().unwrap();
    let local = resets_at.to_datetime().unwrap().with_timezone(&new_york);
    use chrono::{Datelike, Timelike};
    assert_eq!((local.day(), local.hour(), local.minute()), (17, 0, 0), "{denied}");
    drop(server);
    let why = ledger.run(&["audit", "why", "k-2"]).success().stdout_text();
    assert!(why.contains("per billing cycle (monthly from 2026-01-17T05:00:00Z in America/New_York)"), "{why}");
}

// Alert thresholds through the real binary: `policy set --alert-thresholds 50,100` records a policy's own thresholds,
// `policy list` shows them (an `alerts` column, and both fields in --json); thresholds out of order and a subject
// share of a SUBJECT policy are refused naming the field, nothing written, as by the admin API (400); serve then writes
// a THRESHOLD alert at 50% of the limit and none at 80% or 90%, and `--alert-thresholds none` silences the next version.
#[test]
fn a_policy_sets_its_own_alert_thresholds_and_serve_alerts_at_them() {
    use serde_json::json;
    let ledger = TestLedger::new();
    let line = policy_set(&ledger, "org-1", "10", &["--alert-thresholds", "50,100"]).success().stdout_text();
    assert!(line.contains("alerts at 50,100%"), "{line}");
    let refusals: [(&[&str], &str); 2] = [
        (&["--alert-thresholds", "90,80"], "alert_thresholds: 90 then 80: thresholds are strictly increasing"),
        (
            &["--scope", "SUBJECT", "--alert-subject-share", "40"],
            "alert_subject_share: a subject's share is of a TENANT policy's consumption",
        ),
    ];
    for (extra, message) in refusals {
        let refused = policy_set(&ledger, "org-1", "10", extra).expect_code(2).stderr;
        assert!(refused.contains("policy not changed") && refused.contains(message), "{extra:?}: {refused}");
    }
    assert_eq!(recorded(&ledger), 1, "nothing written by a refused change");
    let listed = ledger.run(&["policy", "list", "--json"]).success().json();
    assert_eq!(
        (&listed[0]["alert_thresholds"], &listed[0]["alert_subject_share"]),
        (&json!([50, 100]), &Value::Null),
        "{listed}"
    );
    let table = ledger.run(&["policy", "list"]).success().stdout_text();
    assert!(table.lines().next().is_some_and(|header| header.trim_end().ends_with("alerts")), "{table}");
    assert!(table.contains("at 50,100%"), "{table}");

    let stderr = ledger.file("serve.err");
    let server = hook_http::Server::start_with_tokens(&ledger.path, ledger.dir.path(), &[], &stderr, ADMIN_TOKENS);
    let unordered = json!({"tenant": "org-2", "metric": "tokens", "limit": 10, "window": "DAY", "enforcement": "HARD",
                           "alert_thresholds": [90, 80], "reason": "alerts"});
    let (status, body) = server.post("/v1/admin/policies", "admin-secret-org-0123", &unordered);
    assert_eq!(
        (status, body["message"].as_str()),
        (400, Some("nothing recorded: alert_thresholds: 90 then 80: thresholds are strictly increasing"))
    );
    let shared = json!({"tenant": "org-2", "metric": "tokens", "limit": 10, "window": "DAY", "enforcement": "HARD",
                        "alert_thresholds": [], "alert_subject_share": 40, "reason": "alerts"});
    let (status, body) = server.post("/v1/admin/policies", "admin-secret-org-0123", &shared);
    assert_eq!(status, 201, "{body}");
    assert_eq!((&body["event"]["alert_thresholds"], &body["event"]["alert_subject_share"]), (&json!([]), &json!(40)));

    let thresholds = || -> Vec<i64> {
        let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY;
        let conn = rusqlite::Connection::open_with_flags(&ledger.path, flags).unwrap();
        let mut statement = conn.prepare("SELECT threshold_percent FROM alert_events ORDER BY seq").unwrap();
        statement.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
    };
    assert_eq!(server.check("org-1", 4, "k-1").decided().map(|(status, _)| status), Some(200));
    assert_eq!(thresholds(), Vec::<i64>::new(), "40%: below the policy's first threshold");
    assert_eq!(server.check("org-1", 1, "k-2").decided().map(|(status, _)| status), Some(200));
    assert_eq!(thresholds(), [50], "50%: the policy's first threshold");
    assert_eq!(server.check("org-1", 4, "k-3").decided().map(|(status, _)| status), Some(200));
    assert_eq!(thresholds(), [50], "90%: no default threshold of 80 or 90");
    assert_eq!(server.check("org-2", 10, "k-4").decided().map(|(status, _)| status), Some(200));
    assert_eq!(thresholds(), [50], "an empty list: no THRESHOLD alert at 100%");
    policy_set(&ledger, "org-1", "10", &["--alert-thresholds", "none"]).success();
    assert_eq!(server.check("org-1", 1, "k-5").decided().map(|(status, _)| status), Some(200));
    assert_eq!(thresholds(), [50], "version 2 sets none: no alert at 100%");
    drop(server);
    // `audit why` reads the policy back as it was recorded; verify compares its columns with the events.
    let why = ledger.run(&["audit", "why", "k-2", "--json"]).success().json();
    assert_eq!(why["policy"]["version"].as_i64(), Some(1), "{why}");
    ledger.assert_verifies();
}
