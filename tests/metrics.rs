//! Metrics as an operator scrapes them: a real Prometheus (Debian's `prometheus`, started here on loopback) scrapes a
//! live `ingest --metrics-listen` and a live `serve`, and its HTTP API answers, after a known load, exactly what was
//! sent: messages and events recorded, every partition's lag back to zero, decisions by code and policy version.

#[path = "support/hook_http.rs"]
mod hook_http;
mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use hook_http::{Reply, SECRET, Server};
use schemas::*;
use serde_json::Value;
use support::brokers::Broker;
use support::*;

const LIMIT: i64 = 30;

/// The address a process listening on port 0 wrote to `log` after `before` (up to the next space, quote or `/`),
/// once it has: the port is the one it bound and kept, not one a test found free and let go of.
fn logged_address(log: &std::path::Path, before: &str) -> String {
    eventually(60, &format!("{} names its address after {before:?}", log.display()), || {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let (_, after) = text.split_once(before)?;
        let address: String = after.chars().take_while(|c| !matches!(c, ' ' | '"' | '/' | '\n')).collect();
        address.contains(':').then_some(address)
    })
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
    let log = dir.join("prometheus.err");
    let stderr = std::fs::File::create(&log).unwrap();
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
        .arg("--web.listen-address=127.0.0.1:0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("prometheus starts");
    let child = ChildGuard::new(child);
    // Prometheus logs the address it was given, then the one it bound: `msg="Listening on" address=127.0.0.1:N`.
    let address = logged_address(&log, "msg=\"Listening on\" address=");
    (child, format!("http://{address}"))
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
        version: 7,
        ..PolicyEvent::new(
            header("policy-tokens-v7", "2026-01-01T00:00:00Z", "org-1", "tokens"),
            "tokens",
            LIMIT,
            Window::MONTH,
            Enforcement::HARD,
            at("2026-01-01T00:00:00Z"),
        )
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
    let _ingest = ingested.spawn_ingest(&broker.bootstrap, &["--metrics-listen", "127.0.0.1:0"]);
    let metrics_address = logged_address(&ingested.file("ingest.err"), "metrics=http://");

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
    // Two reservations of a metric without a policy stay open.
    for key in ["r-1", "r-2"] {
        let body = serde_json::json!({"tenant": "org-2", "metric": "jobs", "amount": 1, "ttl_ms": 3_600_000,
                                      "idempotency_key": key});
        let sent = ureq::post(format!("{}/v1/reservations", server.base))
            .header("Authorization", format!("Bearer {SECRET}"))
            .send_json(&body)
            .expect("a reservation");
        assert_eq!(sent.status().as_u16(), 200);
    }

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
    // Every partition of the six input topics reports its lag, and all are back to zero once caught up.
    eventually_equals(&api, "count(quota_ledger_ingest_lag_messages)", 6.0 * 3.0);
    eventually_equals(&api, "sum(quota_ledger_ingest_lag_messages)", 0.0);

    let decided =
        |code: &str| format!(r#"quota_ledger_decisions_total{{code="{code}",metric="tokens",policy_version="7"}}"#);
    eventually_equals(&api, &decided("OK"), LIMIT as f64);
    eventually_equals(&api, &decided("QUOTA_EXCEEDED"), (50 - LIMIT) as f64);
    eventually_equals(&api, "quota_ledger_decision_duration_seconds_count", 52.0);
    // Each of the 52 waited in the queue, and was a group of its own (one caller at a time), committed and synced.
    for stage in ["queue_wait", "group_commit", "sync"] {
        let series = format!(r#"quota_ledger_hook_stage_duration_seconds_count{{stage="{stage}"}}"#);
        eventually_equals(&api, &series, 52.0);
    }
    // org-1 used its 30 of 30: at its limit (and so near it too); org-2 holds two open reservations.
    eventually_equals(&api, "quota_ledger_tenants_at_limit", 1.0);
    eventually_equals(&api, "quota_ledger_tenants_near_limit", 1.0);
    eventually_equals(&api, "quota_ledger_reservations_open", 2.0);
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

/// `promtool check metrics` of `text` (its lint of names, units and help), which must pass.
fn promtool_accepts(text: &str) {
    use std::io::Write;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&output.stdout).to_string() + &String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "promtool check metrics: {said}\n{text}");
}

/// The value of the gauge `name` (with its labels as written) in a textfile.
fn gauge(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
        .parse()
        .unwrap()
}

// Proves the nightly jobs' figures for the textfile collector are valid and say what the run did.
#[test]
fn reconcile_and_export_write_their_figures_for_the_textfile_collector() {
    if !tool_available("promtool", "QUOTA_LEDGER_SKIP_PROMETHEUS", "apt-get install prometheus") {
        return;
    }
    let ledger = TestLedger::new();
    let out = ledger.file("generated");
    run(&["generate", "--tenants", "20", "--events", "3000", "--seed", "3", "--out", out.to_str().unwrap()], b"")
        .success();
    let mut files: Vec<_> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    for file in &files {
        ledger.ingest(file);
    }
    let figures = ledger.file("reconcile.prom");
    let report = ledger
        .run(&["reconcile", "--as-of", "2026-12-01T00:00:00Z", "--json", "--metrics-file", figures.to_str().unwrap()])
        .json();
    let text = std::fs::read_to_string(&figures).unwrap();
    promtool_accepts(&text);
    let by_kind = report["adjustments_by_kind"].as_object().unwrap();
    assert!(!by_kind.is_empty(), "a generated month has adjustments to make: {report}");
    for (kind, n) in by_kind {
        let series = format!(r#"quota_ledger_reconcile_adjustments{{kind="{kind}"}}"#);
        assert_eq!(gauge(&text, &series), n.as_f64().unwrap(), "{kind}");
    }
    assert_eq!(
        gauge(&text, "quota_ledger_reconcile_windows_judged"),
        report["read"]["windows_judged"].as_f64().unwrap()
    );

    let export_figures = ledger.file("export.prom");
    let csv = ledger
        .run(&[
            "export",
            "billing",
            "--period",
            "2026-11",
            "--format",
            "csv",
            "--metrics-file",
            export_figures.to_str().unwrap(),
        ])
        .success()
        .stdout_text();
    let text = std::fs::read_to_string(&export_figures).unwrap();
    promtool_accepts(&text);
    let rows = csv.lines().count() - 1;
    assert_eq!(gauge(&text, r#"quota_ledger_export_rows{period="2026-11"}"#), rows as f64);
    assert_eq!(gauge(&text, r#"quota_ledger_export_final{period="2026-11"}"#), 0.0);
}

// Proves the Grafana dashboard docs/operations.md ships is JSON whose every query names only series quota-ledger
// exposes: the families of serve and ingest, and the figures of reconcile and export.
#[test]
fn the_shipped_dashboard_queries_only_series_that_exist() {
    let mut registry = telemetry::registry();
    let ingest = ingest::metrics::IngestMetrics::register(&mut registry);
    ingest.observe(&ingest::KafkaIngestProgress { messages: 1, ..Default::default() });
    ingest::LagListener::lag(&*ingest, "quota.usage", 0, 1, 1);
    let hook = serve::metrics::HookMetrics::register(&mut registry);
    hook.decided("OK", Some("requests"), None);
    hook.stage("queue_wait", std::time::Duration::from_micros(50));
    let mut exposed = telemetry::encode(&registry);
    let ledger = TestLedger::new();
    let file = ledger.file("usage.avro");
    write_container(&file, &[usage("u-1", "2026-11-03T10:00:00Z", "org-1", 1)]);
    ledger.ingest(&file);
    let (reconcile, export) = (ledger.file("r.prom"), ledger.file("e.prom"));
    ledger.run(&["reconcile", "--as-of", "2026-12-01T00:00:00Z", "--metrics-file", reconcile.to_str().unwrap()]);
    let args =
        ["export", "billing", "--period", "2026-11", "--format", "csv", "--metrics-file", export.to_str().unwrap()];
    ledger.run(&args).success();
    exposed += &std::fs::read_to_string(&reconcile).unwrap();
    exposed += &std::fs::read_to_string(&export).unwrap();
    // Every series written, and every family declared (a family with no series yet, such as adjustments of a clean
    // run, is declared all the same).
    let series: std::collections::BTreeSet<String> = exposed
        .lines()
        .filter_map(|line| match line.strip_prefix("# TYPE ") {
            Some(declared) => declared.split(' ').next(),
            None if line.starts_with('#') => None,
            None => line.split(['{', ' ']).next(),
        })
        .map(str::to_string)
        .collect();

    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/grafana-dashboard.json")).unwrap();
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut queried = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            for name in expr
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| w.starts_with("quota_ledger_"))
            {
                assert!(
                    series.contains(name),
                    "panel {:?} queries {name}, which nothing exposes ({series:?})",
                    panel["title"]
                );
                queried += 1;
            }
        }
    }
    assert!(queried >= 12, "every panel queries a series: {queried}");
}
