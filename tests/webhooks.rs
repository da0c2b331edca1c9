//! Webhooks through the real binary: an endpoint registered with `webhook add`, an alert the hook writes delivered
//! by `serve` to a receiver that verifies its signature with the Standard Webhooks specification's own Python library
//! (PyPI's standardwebhooks), retried after failures under one id, every attempt in `webhook deliveries`, and a
//! `serve` killed between two attempts resuming without losing or duplicating the delivery.

#[path = "support/hook_http.rs"]
mod hook_http;
mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use hook_http::{SECRET, Server};
use serde_json::{Value, json};
use support::*;

/// A signing secret the test chooses (`whsec_` and base64 of 32 bytes), so that the receiver knows it first.
const SIGNING_SECRET: &str = "whsec_dGhlIHdlYmhvb2tzIHRlc3QncyBzZWNyZXQgMzJiIQ==";

/// Whether PyPI's standardwebhooks can be imported; `QUOTA_LEDGER_SKIP_STANDARDWEBHOOKS=1` skips the test (never in
/// CI), and without it a missing package fails the test with how to install it (`.ci/install` does).
fn receiver_available() -> bool {
    let install = "pip install standardwebhooks==1.3.0";
    if testkit::skip_requested("QUOTA_LEDGER_SKIP_STANDARDWEBHOOKS", "the webhooks test's receiver", install) {
        return false;
    }
    let found = Command::new("python3")
        .args(["-c", "import standardwebhooks.webhooks"])
        .current_dir(std::env::temp_dir())
        .status()
        .is_ok_and(|s| s.success());
    assert!(found, "this test needs standardwebhooks: {install} (or QUOTA_LEDGER_SKIP_STANDARDWEBHOOKS=1)");
    true
}

/// The receiver, answering 500 to its first `failures` requests: its process and its URL.
fn receiver(ledger: &TestLedger, failures: u32) -> (ChildGuard, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/webhook_receiver.py");
    let mut child = ChildGuard::new(
        Command::new("python3")
            .arg(script)
            .args([SIGNING_SECRET, &failures.to_string()])
            .arg(ledger.file("received.jsonl"))
            .current_dir(std::env::temp_dir())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 starts"),
    );
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line).expect("the receiver's first line");
    let port = line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("the receiver said {line:?}"));
    (child, format!("http://127.0.0.1:{port}/quota-alerts"))
}

/// What the receiver was sent, in order.
fn received(ledger: &TestLedger) -> Vec<Value> {
    let text = std::fs::read_to_string(ledger.file("received.jsonl")).unwrap_or_default();
    text.lines().map(|line| serde_json::from_str(line).expect("a JSON line")).collect()
}

/// A HARD daily limit of 10 tokens for org-1, and the receiver's endpoint registered for its THRESHOLD alerts.
fn registered(ledger: &TestLedger, url: &str) {
    let policy = ["policy", "set", "--tenant", "org-1", "--metric", "tokens", "--limit", "10", "--window", "DAY"];
    ledger.run(&[&policy[..], &["--enforcement", "HARD", "--actor", "alice", "--reason", "trial"]].concat()).success();
    let add = ["webhook", "add", "--tenant", "org-1", "--url", url, "--kinds", "threshold", "--endpoint-id", "desk"];
    let added =
        ledger.run(&[&add[..], &["--secret", SIGNING_SECRET, "--actor", "alice", "--reason", "finance"]].concat());
    let said = added.success().stdout_text();
    assert!(said.starts_with("webhook desk of org-1: alerts THRESHOLD to "), "{said}");
}

/// An admin token of every tenant, beside the hook's token (`SECRET`, not an admin's).
const ADMIN: &str = "webhooks-admin-secret-0123";

fn serve(ledger: &TestLedger, retry_base_ms: &str) -> Server {
    let args = ["--webhook-retry-base-ms", retry_base_ms];
    let admin = format!("[[token]]\nname = \"desk-admin\"\nsecret = \"{ADMIN}\"\ntenants = [\"*\"]\nadmin = true\n");
    Server::start_with_args(&ledger.path, ledger.dir.path(), &[], &ledger.file("serve.err"), &admin, &args)
}

/// The attempts recorded, as `webhook deliveries --json` prints them.
fn deliveries(ledger: &TestLedger) -> Vec<Value> {
    let answer = ledger.run(&["webhook", "deliveries", "--tenant", "org-1", "--json"]).success().json();
    answer.as_array().expect("an array").clone()
}

/// Waits until the delivery log holds a DELIVERED attempt; answers the log.
fn delivered(ledger: &TestLedger) -> Vec<Value> {
    eventually(60, "an attempt recorded DELIVERED", || {
        let log = deliveries(ledger);
        log.iter().any(|a| a["outcome"] == "DELIVERED").then_some(log)
    })
}

/// Checks what the receiver was sent against the log: every request verified, one id, the attempts' statuses, the
/// body the alert the ledger holds.
fn assert_one_delivery_after_two_failures(ledger: &TestLedger, log: &[Value]) {
    let outcomes: Vec<(&Value, &Value, &Value)> =
        log.iter().map(|a| (&a["attempt"], &a["outcome"], &a["status"])).collect();
    assert_eq!(
        outcomes,
        [
            (&json!(1), &json!("FAILED"), &json!(500)),
            (&json!(2), &json!("FAILED"), &json!(500)),
            (&json!(3), &json!("DELIVERED"), &json!(204))
        ],
        "{log:?}"
    );
    let id = &log[0]["webhook_id"];
    assert!(log.iter().all(|a| &a["webhook_id"] == id), "one id for every attempt: {log:?}");
    let sent = received(ledger);
    assert_eq!(sent.len(), 3, "{sent:?}");
    for request in &sent {
        assert_eq!(request["verified"], true, "the receiver verified the signature: {request}");
        assert_eq!(&request["id"], id, "{request}");
    }
    assert_eq!(sent.iter().map(|r| r["status"].as_u64().unwrap()).collect::<Vec<_>>(), [500, 500, 204]);
    // The body is the alert as the ledger holds it, read back through `sql` rather than the deliverer's own read.
    let rows = ledger.run(&[
        "sql",
        "SELECT alert_id, kind, threshold_percent, observed, \"limit\" FROM alert_events",
        "--format",
        "json",
    ]);
    let rows = rows.success().json();
    let alert = &rows.as_array().expect("rows")[0];
    let body = &sent[2]["body"];
    assert_eq!(body["type"], "quota.alert.threshold", "{body}");
    let data = &body["data"];
    assert_eq!(
        (&data["alert_id"], &data["tenant"], &data["kind"]),
        (&alert["alert_id"], &json!("org-1"), &json!("THRESHOLD"))
    );
    assert_eq!((&data["threshold_percent"], &data["observed"], &data["limit"]), (&json!(80), &json!(8), &json!(10)));
    assert_eq!(&log[0]["alert_id"], &alert["alert_id"]);
}

// Proves an alert reaches a receiver that answers 500 twice: two failed attempts and one delivery recorded, one
// webhook-id, each request's signature verified by the specification's own library, the body the alert; the figures
// count the attempts by outcome; and a secret is shown once, when generated, never by `webhook list`.
#[test]
fn an_alert_is_delivered_signed_after_two_failures() {
    if !receiver_available() {
        return;
    }
    let ledger = TestLedger::new();
    let (_receiver, url) = receiver(&ledger, 2);
    registered(&ledger, &url);
    let server = serve(&ledger, "100");
    assert_eq!(server.check("org-1", 8, "k-1").decided().map(|(status, _)| status), Some(200));
    let log = delivered(&ledger);
    assert_one_delivery_after_two_failures(&ledger, &log);
    let figures = server.metrics();
    for line in [
        "quota_ledger_webhook_attempts_total{outcome=\"failed\"} 2",
        "quota_ledger_webhook_attempts_total{outcome=\"delivered\"} 1",
    ] {
        assert!(figures.lines().any(|l| l == line), "{line} in\n{figures}");
    }
    // Registered through the admin API, with no secret given: the answer shows a new one, once.
    let asked = json!({"tenant": "org-1", "url": "https://hooks.example.com/q", "endpoint_id": "ops", "reason": "ops"});
    let (status, refused) = server.post("/v1/admin/webhooks", SECRET, &asked);
    assert_eq!((status, refused["error"].as_str()), (403, Some("forbidden")), "{refused}");
    let (status, answer) = server.post("/v1/admin/webhooks", ADMIN, &asked);
    assert_eq!(status, 201, "{answer}");
    let secret = answer["endpoint"]["secret"].as_str().expect("the secret, once").to_string();
    assert!(secret.starts_with("whsec_") && secret.len() > 40, "{secret}");
    let (status, again) = server.post("/v1/admin/webhooks", ADMIN, &asked);
    assert_eq!((status, again["error"].as_str()), (409, Some("refused_change")), "{again}");
    let listed = ledger.run(&["webhook", "list", "--json"]).success().stdout_text();
    assert!(!listed.contains("whsec_") && listed.contains("\"ops\"") && listed.contains("\"desk\""), "{listed}");
    let (status, over_http) = server.get("/v1/admin/webhooks?tenant=org-1", ADMIN);
    assert_eq!(status, 200);
    assert!(!over_http.to_string().contains("whsec_"), "{over_http}");
    assert_eq!(over_http["endpoints"].as_array().map(Vec::len), Some(2), "{over_http}");
    let (status, log_over_http) = server.get("/v1/admin/webhooks/deliveries?tenant=org-1&endpoint_id=desk", ADMIN);
    assert_eq!((status, log_over_http["deliveries"].as_array().map(Vec::len)), (200, Some(3)), "{log_over_http}");
    let serve_log = std::fs::read_to_string(ledger.file("serve.err")).unwrap();
    assert!(!serve_log.contains(&secret) && !serve_log.contains(SIGNING_SECRET), "no secret in the log:\n{serve_log}");
    ledger
        .run(&["webhook", "remove", "--tenant", "org-1", "--endpoint-id", "ops", "--actor", "bob", "--reason", "gone"])
        .success();
    let listed = ledger.run(&["webhook", "list", "--json"]).success().json();
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
}

// Proves a serve killed after a failed attempt resumes from the ledger: the retry after the restart reuses the
// webhook-id, the delivery is recorded DELIVERED once, and a later alert is delivered without the first again.
#[test]
fn a_restart_between_attempts_loses_and_repeats_nothing() {
    if !receiver_available() {
        return;
    }
    let ledger = TestLedger::new();
    let (_receiver, url) = receiver(&ledger, 2);
    registered(&ledger, &url);
    // Two seconds between the first attempt and the next: room to kill serve in between.
    let server = serve(&ledger, "2000");
    assert_eq!(server.check("org-1", 8, "k-1").decided().map(|(status, _)| status), Some(200));
    eventually(30, "the first attempt recorded", || (!deliveries(&ledger).is_empty()).then_some(()));
    server.kill();
    let server = serve(&ledger, "100");
    let log = delivered(&ledger);
    assert_one_delivery_after_two_failures(&ledger, &log);
    // The next threshold (90%): delivered once too, and the first not again.
    assert_eq!(server.check("org-1", 1, "k-2").decided().map(|(status, _)| status), Some(200));
    let log = eventually(60, "the second alert delivered", || {
        let log = deliveries(&ledger);
        (log.iter().filter(|a| a["outcome"] == "DELIVERED").count() == 2).then_some(log)
    });
    assert_eq!(log.len(), 4, "{log:?}");
    let sent = received(&ledger);
    assert_eq!(sent.len(), 4, "{sent:?}");
    assert_eq!(sent[3]["body"]["data"]["threshold_percent"], 90, "{}", sent[3]);
    assert_ne!(sent[3]["id"], sent[2]["id"]);
    drop(server);
}
