//! Envoy's rate limit service (`serve --rls-listen`) called by a third-party client: grpcio with envoy-data-plane's
//! messages (Envoy's published protos, from PyPI), not the server's own structs. Descriptors mapped by the mapping
//! file, OK then OVER_LIMIT at the limit, a replay of the same request id consuming once, the decisions in the ledger
//! and found by `audit why`, the token checked as over HTTP, and TLS when `serve` serves HTTPS.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use schemas::*;
use serde_json::{Value, json};
use support::*;

const SECRET: &str = "rls-tests-secret-0123456789";
const OTHER_SECRET: &str = "rls-tests-other-secret-0123";
const TOKENS: &str = "[[token]]\nname = \"envoy\"\nsecret = \"rls-tests-secret-0123456789\"\ntenants = [\"org-rls\"]\n\
                      [[token]]\nname = \"other\"\nsecret = \"rls-tests-other-secret-0123\"\ntenants = [\"org-other\"]\n";
/// Envoy's rate limit actions as the mapping reads them: the tenant from a `request_headers` action's entry, the
/// metric a constant, Envoy's `x-request-id` in an entry of its own.
const MAPPING: &str = "[[domain]]\nname = \"edge\"\n\n[[domain.descriptor]]\ntenant = { key = \"tenant\" }\n\
                       metric = { value = \"requests\" }\nrequest_id = \"x-request-id\"\n";
const LIMIT: i64 = 3;

/// Whether grpcio and envoy-data-plane can be imported; `QUOTA_LEDGER_SKIP_ENVOY_CLIENT=1` skips the test (never in
/// CI), and without it a missing package fails the test with how to install it (`.ci/install` does).
fn envoy_client_available() -> bool {
    let install = "pip install grpcio==1.85.1 envoy-data-plane==2.2.0";
    if testkit::skip_requested("QUOTA_LEDGER_SKIP_ENVOY_CLIENT", "the rate limit service test with grpcio", install) {
        return false;
    }
    let found = Command::new("python3")
        .args(["-c", "import grpc, envoy_data_plane.envoy.service.ratelimit.v3"])
        .current_dir(std::env::temp_dir())
        .status()
        .is_ok_and(|s| s.success());
    assert!(found, "this test needs grpcio and envoy-data-plane: {install} (or QUOTA_LEDGER_SKIP_ENVOY_CLIENT=1)");
    true
}

/// `serve` with the rate limit service on free ports: its HTTP base URL and the RLS listener's `host:port`.
fn start(ledger: &TestLedger) -> (ChildGuard, String, String) {
    let (child, base, rls) = start_with(ledger, &[]);
    let rls = rls.strip_prefix("http://").unwrap_or_else(|| panic!("plain gRPC: {rls}")).to_string();
    (child, base, rls)
}

/// `serve` with the rate limit service and `extra` flags: its base URL and the RLS listener's URL, as announced.
fn start_with(ledger: &TestLedger, extra: &[&str]) -> (ChildGuard, String, String) {
    let tokens = ledger.file("tokens.toml");
    serve::tokens::write_private(&tokens, TOKENS).unwrap();
    std::fs::write(ledger.file("rls.toml"), MAPPING).unwrap();
    let stderr = std::fs::File::create(ledger.file("serve.err")).unwrap();
    let mut child = ChildGuard::new(
        Command::new(BIN)
            .arg("--ledger")
            .arg(&ledger.path)
            .args(["serve", "--listen", "127.0.0.1:0", "--rls-listen", "127.0.0.1:0", "--tokens"])
            .arg(&tokens)
            .arg("--rls-config")
            .arg(ledger.file("rls.toml"))
            .args(extra)
            .env_remove("QUOTA_LEDGER_PATH")
            .env_remove("QUOTA_LEDGER_BROKERS")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut line = || lines.next().and_then(Result::ok).unwrap_or_default();
    let (http, rls) = (line(), line());
    let err = || std::fs::read_to_string(ledger.file("serve.err")).unwrap_or_default();
    let base = http.strip_prefix("listening on ").unwrap_or_else(|| panic!("{http:?}; {}", err())).to_string();
    let rls = rls.strip_prefix("rls listening on ").unwrap_or_else(|| panic!("{rls:?}; {}", err())).to_string();
    (child, base, rls)
}

/// Each call's answer from the third-party client, over plain gRPC.
fn call(target: &str, secret: &str, calls: &[Value]) -> Vec<Value> {
    call_trusting(target, secret, None, calls)
}

/// Each call's answer from the third-party client, over TLS trusting `root_ca` when given.
fn call_trusting(target: &str, secret: &str, root_ca: Option<&Path>, calls: &[Value]) -> Vec<Value> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/rls_client.py");
    let mut child = Command::new("python3")
        .arg(script)
        .current_dir(std::env::temp_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let asked = json!({"target": target, "secret": secret, "root_ca": root_ca, "calls": calls});
    child.stdin.take().unwrap().write_all(asked.to_string().as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "the client: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap().lines().map(|line| serde_json::from_str(line).unwrap()).collect()
}

fn descriptor(tenant: &str, request_id: &str, hits_addend: u32) -> Value {
    json!({"domain": "edge", "descriptors": [[["tenant", tenant], ["x-request-id", request_id]]], "hits_addend": hits_addend})
}

fn decisions_of(ledger: &Path, request_id: &str) -> Value {
    let query =
        format!("SELECT outcome, amount, idempotency_key FROM decision_events WHERE request_id = '{request_id}'");
    run(&["--ledger", ledger.to_str().unwrap(), "sql", "--format", "json", &query], b"").success().json()
}

// Proves a mapped descriptor is checked as /v1/check checks it: OK under the limit with its figures, a replay of the
// same request id answering the first decision and consuming once, OVER_LIMIT at the limit with the headers to add,
// each decision recorded under Envoy's request id and explained by `audit why`.
#[test]
fn envoy_descriptors_are_decided_recorded_and_audited() {
    if !envoy_client_available() {
        return;
    }
    let ledger = TestLedger::new();
    write_container(&ledger.file("policy.avro"), &[Event::Policy(hard_daily("policy-rls", "org-rls", LIMIT))]);
    ledger.ingest(&ledger.file("policy.avro"));
    let (_server, _base, rls) = start(&ledger);

    let calls = [
        descriptor("org-rls", "req-1", 2),
        descriptor("org-rls", "req-1", 2),
        descriptor("org-rls", "req-2", 0),
        descriptor("org-rls", "req-3", 1),
    ];
    let answers = call(&rls, SECRET, &calls);
    let first = &answers[0];
    assert_eq!(first["overall_code"], "OK", "{first}");
    let status = &first["statuses"][0];
    assert_eq!(status["limit"], json!({"name": "daily", "requests_per_unit": LIMIT, "unit": "DAY"}), "{first}");
    assert_eq!(status["limit_remaining"], 1, "{first}");
    assert!(status["reset_seconds"].as_f64().is_some_and(|s| s > 0.0 && s <= 86_400.0), "{first}");
    assert_eq!(first["headers"]["ratelimit-remaining"], "1", "{first}");
    assert_eq!(
        answers[1]["statuses"][0]["limit_remaining"], 1,
        "the replay answers the first decision: {}",
        answers[1]
    );
    assert_eq!(answers[2]["statuses"][0]["limit_remaining"], 0, "hits_addend 0 is 1, and req-1 counted once");
    let denied = &answers[3];
    assert_eq!(denied["overall_code"], "OVER_LIMIT", "{denied}");
    assert_eq!(denied["statuses"][0]["code"], "OVER_LIMIT", "{denied}");
    assert!(denied["headers"]["retry-after"].as_str().is_some(), "{denied}");

    assert_eq!(
        decisions_of(&ledger.path, "req-1"),
        json!([{"outcome": "ALLOWED", "amount": 2, "idempotency_key": "rls/edge/0/req-1"}]),
        "the replay recorded nothing"
    );
    let why = ledger.run(&["audit", "why", "req-3", "--json"]).success().json();
    assert_eq!(
        (why["decision"]["outcome"].as_str(), why["decision"]["reason"].as_str()),
        (Some("DENIED"), Some("QUOTA_EXCEEDED"))
    );
    assert_eq!(why["policy"]["policy_id"], "daily");
    assert_eq!(why["counter"]["used_before"], LIMIT);
    ledger.assert_verifies();
}

// Proves what is not checked: an unknown domain or a descriptor no mapping reads is not limited (OK, nothing
// recorded, as Limitador answers), a request without a domain is UNKNOWN; a bad token is UNAUTHENTICATED and a tenant
// the token does not cover PERMISSION_DENIED, nothing consumed.
#[test]
fn unmapped_descriptors_pass_and_tokens_are_checked() {
    if !envoy_client_available() {
        return;
    }
    let ledger = TestLedger::new();
    write_container(&ledger.file("policy.avro"), &[Event::Policy(hard_daily("policy-rls", "org-rls", LIMIT))]);
    ledger.ingest(&ledger.file("policy.avro"));
    let (_server, _base, rls) = start(&ledger);
    let unknown_domain = json!({"domain": "elsewhere", "descriptors": [[["tenant", "org-rls"]]]});
    let unmapped = json!({"domain": "edge", "descriptors": [[["tenant", "org-rls"], ["path", "/a"]]]});
    let no_domain = json!({"domain": "", "descriptors": [[["tenant", "org-rls"]]]});
    let answers = call(&rls, SECRET, &[unknown_domain, unmapped, no_domain, descriptor("org-other", "req-x", 1)]);
    assert_eq!(
        answers[0],
        json!({"overall_code": "OK", "statuses": [{"code": "OK", "limit": null, "limit_remaining": 0, "reset_seconds": null}], "headers": {}})
    );
    assert_eq!(answers[1]["overall_code"], "OK", "{}", answers[1]);
    assert_eq!(answers[2]["overall_code"], "UNKNOWN", "{}", answers[2]);
    assert_eq!(answers[3]["error"], "PERMISSION_DENIED", "{}", answers[3]);
    let refused = call(&rls, "not-a-token-of-the-file", &[descriptor("org-rls", "req-y", 1)]);
    assert_eq!(refused[0]["error"], "UNAUTHENTICATED", "{}", refused[0]);
    let other = call(&rls, OTHER_SECRET, &[descriptor("org-rls", "req-z", 1)]);
    assert_eq!(other[0]["error"], "PERMISSION_DENIED", "{}", other[0]);
    let recorded = run(
        &[
            "--ledger",
            ledger.path.to_str().unwrap(),
            "sql",
            "--format",
            "json",
            "SELECT count(*) AS n FROM decision_events",
        ],
        b"",
    );
    assert_eq!(recorded.success().json()[0]["n"], 0, "nothing checked, nothing recorded");
}

// Proves the rate limit service speaks TLS when `serve` does (--tls-cert and --tls-key, the HTTP API's certificate):
// a client trusting the test's certificate authority is answered over it and its decision recorded, and one speaking
// plain gRPC to the same port is not answered at all, nothing recorded.
#[test]
fn the_rate_limit_service_is_served_over_tls_as_the_http_api_is() {
    if !envoy_client_available() {
        return;
    }
    let ledger = TestLedger::new();
    write_container(&ledger.file("policy.avro"), &[Event::Policy(hard_daily("policy-rls", "org-rls", LIMIT))]);
    ledger.ingest(&ledger.file("policy.avro"));
    let (ca, cert, key) = tls::certificates(ledger.dir.path());
    let served = ["--tls-cert", cert.to_str().unwrap(), "--tls-key", key.to_str().unwrap()];
    let (_server, base, rls) = start_with(&ledger, &served);
    assert!(base.starts_with("https://"), "{base}");
    let target = rls.strip_prefix("https://").unwrap_or_else(|| panic!("announced over TLS: {rls}"));

    let answers = call_trusting(target, SECRET, Some(&ca), &[descriptor("org-rls", "req-tls", 1)]);
    assert_eq!(answers[0]["overall_code"], "OK", "{}", answers[0]);
    assert_eq!(answers[0]["statuses"][0]["limit_remaining"], LIMIT - 1, "{}", answers[0]);
    let plain = call(target, SECRET, &[descriptor("org-rls", "req-plain", 1)]);
    assert_eq!(plain[0]["error"], "UNAVAILABLE", "plain gRPC to the TLS port: {}", plain[0]);
    assert_eq!(decisions_of(&ledger.path, "req-tls").as_array().map(Vec::len), Some(1));
    assert_eq!(decisions_of(&ledger.path, "req-plain"), json!([]), "nothing recorded of the plain call");
}

// Proves a node serves Envoy's rate limit service for the partitions it owns (`node --rls-listen`): a descriptor of
// its tenant is decided, recorded in its shard and found by `audit why --cluster`; one of a tenant another node owns
// is UNAVAILABLE naming the partition (Envoy's failure mode decides, as for any error of this side), and its owner's
// listener decides it.
#[test]
fn a_node_answers_the_rate_limit_service_for_the_partitions_it_owns() {
    use support::brokers::Broker;
    use support::nodes::{self, Node};
    if !envoy_client_available() {
        return;
    }
    let broker = Broker::mock();
    let dir = tempfile::tempdir().unwrap();
    let tokens = nodes::tokens(dir.path());
    let config = dir.path().join("rls.toml");
    std::fs::write(&config, MAPPING).unwrap();
    let start = |id: &str| {
        let rls = format!("127.0.0.1:{}", testkit::ports::free_a_moment_ago("127.0.0.1"));
        let more = ["--rls-listen", &rls, "--rls-config", config.to_str().unwrap()];
        (Node::start_with(&broker.bootstrap, &dir.path().join(id), &tokens, "127.0.0.1", id, &more), rls)
    };
    let ((a, rls_a), (b, rls_b)) = (start("a"), start("b"));
    let owners = nodes::routing_of_all(&a.url, 3, &[&a.url, &b.url], 90);
    let tenant_owned_by = |url: &str| {
        (0..200)
            .map(|n| format!("org-{n}"))
            .find(|t| owners[&u64::from(schemas::partition::partition_of(t, 3))] == url)
            .unwrap_or_else(|| panic!("no tenant of {url}: {owners:?}"))
    };
    let (of_a, of_b) = (tenant_owned_by(&a.url), tenant_owned_by(&b.url));

    let answers =
        call(&rls_a, nodes::SECRET, &[descriptor(&of_a, "req-node-1", 1), descriptor(&of_b, "req-node-2", 1)]);
    assert_eq!(answers[0]["overall_code"], "OK", "{}", answers[0]);
    assert_eq!(answers[1]["error"], "UNAVAILABLE", "{}", answers[1]);
    assert!(answers[1]["details"].as_str().is_some_and(|d| d.contains("partition")), "{}", answers[1]);
    let cluster = ["--cluster", &broker.bootstrap, "--token", nodes::ADMIN_SECRET];
    let why = run(&[&["audit", "why", "req-node-1", "--json"][..], &cluster].concat(), b"").success().json();
    assert_eq!(why["decision"]["outcome"], "ALLOWED", "{why}");
    assert_eq!(why["decision"]["tenant"], json!(of_a), "{why}");
    let answers = call(&rls_b, nodes::SECRET, &[descriptor(&of_b, "req-node-2", 1)]);
    assert_eq!(answers[0]["overall_code"], "OK", "its owner decides it: {}", answers[0]);
}
