//! Metrics as an operator scrapes them: a real Prometheus (Debian's `prometheus`, started here on loopback) scrapes a
//! live `ingest --metrics-listen` and a live `serve`, and its HTTP API answers, after a known load, exactly what was
//! sent: messages and events recorded, every partition's lag back to zero, decisions by code and policy version.

#[path = "support/hook_http.rs"]
mod hook_http;
mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use hook_http::{Reply, Server};
use schemas::*;
use serde_json::Value;
use support::brokers::Broker;
use support::*;

const LIMIT: i64 = 30;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `prometheus` on loopback scraping `targets` every second, its data in `dir`: the process and its API's base URL.
fn prometheus(dir: &std::path::Path, targets: &[String]) -> (ChildGuard, String) {
    let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: quota-ledger\n    \
             static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        ),
    )
    .unwrap();
    let address = format!("127.0.0.1:{}", free_port());
    let stderr = std::fs::File::create(dir.join("prometheus.err")).unwrap();
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
        .arg(format!("--web.listen-address={address}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("prometheus starts");
    (ChildGuard::new(child), format!("http://{address}"))
}

/// The value of an instant query's single series, once Prometheus answers one.
fn query(prometheus: &str, promql: &str) -> Option<f64> {
    let agent = ureq::Agent::new_with_defaults();
    let mut response = agent.get(format!("{prometheus}/api/v1/query")).query("query", promql).call().ok()?;
    let body: Value = serde_json::from_str(&response.body_mut().read_to_string().ok()?).ok()?;
    let result = body["data"]["result"].as_array()?;
    if result.len() != 1 {
        return None;
    }
    result[0]["value"][1].as_str()?.parse().ok()
}

/// Waits until Prometheus answers `promql` with `expected`, failing with the last answer.
fn eventually_equals(prometheus: &str, promql: &str, expected: f64) {
    let mut last = None;
    for _ in 0..600 {
        last = query(prometheus, promql);
        if last == Some(expected) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("Prometheus answers {promql} with {last:?} within 60 s, not {expected}");
}

fn hard_policy() -> Event {
    Event::Policy(PolicyEvent {
        header: header("policy-tokens-v7", "2026-01-01T00:00:00Z", "org-1", "tokens"),
        policy_id: "tokens".into(),
        version: 7,
        scope: Scope::TENANT,
        limit: LIMIT,
        window: Window::MONTH,
        enforcement: Enforcement::HARD,
        effective_from: at("2026-01-01T00:00:00Z"),
        burst: None,
        actor: None,
        reason: None,
    })
}

// Proves the figures an operator alerts on are true: what Prometheus scraped equals what was produced and decided.
#[test]
fn prometheus_scrapes_ingest_and_serve_and_the_numbers_match_what_was_sent() {
    let broker = Broker::mock();
    let ingested = TestLedger::new();
    if !tool_available("prometheus", "QUOTA_LEDGER_SKIP_PROMETHEUS", "apt-get install prometheus") {
        return;
    }
    let report = generate_to(&broker, 20, 4_000, 5);
    let metrics_address = format!("127.0.0.1:{}", free_port());
    let _ingest = ingested.spawn_ingest(&broker.bootstrap, &["--metrics-listen", &metrics_address]);

    // The hook: a HARD limit of 30 tokens, asked 50 times for 1.
    let served = TestLedger::new();
    write_container(&served.file("policy.avro"), &[hard_policy()]);
    served.ingest(&served.file("policy.avro"));
    let server = Server::start(&served.path, served.dir.path(), &[], &served.file("serve.err"));
    let (mut allowed, mut denied) = (0, 0);
    for i in 0..50 {
        match server.check("org-1", 1, &format!("k-{i}")) {
            Reply::Decided { status: 200, .. } => allowed += 1,
            Reply::Decided { status: 429, .. } => denied += 1,
            other => panic!("check {i}: {other:?}"),
        }
    }
    assert_eq!((allowed, denied), (LIMIT, 50 - LIMIT));

    let serve_address = server.base.strip_prefix("http://").unwrap().to_string();
    let scratch = tempfile::tempdir().unwrap();
    let (_prometheus, api) = prometheus(scratch.path(), &[metrics_address, serve_address]);

    let unique = count(&report, "unique_events") as f64;
    eventually_equals(&api, r#"quota_ledger_ingest_events_total{outcome="recorded"}"#, unique);
    eventually_equals(&api, "quota_ledger_ingest_messages_total", count(&report, "messages") as f64);
    eventually_equals(
        &api,
        r#"quota_ledger_ingest_events_total{outcome="duplicate"}"#,
        count(&report, "duplicates") as f64,
    );
    eventually_equals(
        &api,
        r#"quota_ledger_ingest_events_total{outcome="quarantined"}"#,
        count(&report, "malformed") as f64,
    );
    // Every partition of the five input topics reports its lag, and all are back to zero once caught up.
    eventually_equals(&api, "count(quota_ledger_ingest_lag_messages)", 5.0 * 3.0);
    eventually_equals(&api, "sum(quota_ledger_ingest_lag_messages)", 0.0);

    let decided =
        |code: &str| format!(r#"quota_ledger_decisions_total{{code="{code}",metric="tokens",policy_version="7"}}"#);
    eventually_equals(&api, &decided("OK"), LIMIT as f64);
    eventually_equals(&api, &decided("QUOTA_EXCEEDED"), (50 - LIMIT) as f64);
    eventually_equals(&api, "quota_ledger_decision_duration_seconds_count", 50.0);
}

// Proves the alerting rules docs/operations.md ships parse, with Prometheus' own checker.
#[test]
fn the_shipped_alerting_rules_are_valid() {
    if !tool_available("promtool", "QUOTA_LEDGER_SKIP_PROMETHEUS", "apt-get install prometheus") {
        return;
    }
    let output = Command::new("promtool")
        .args(["check", "rules", "docs/alerts.yml"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("promtool runs");
    let text = String::from_utf8_lossy(&output.stdout).to_string() + &String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "promtool check rules docs/alerts.yml: {text}");
}
