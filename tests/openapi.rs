//! The HTTP contract as written in docs/openapi.yaml, held by the live server: schemathesis (from PyPI) generates
//! valid and invalid requests for every operation from the document and runs its checks against a real `serve` on a
//! real ledger: no server error, every status, header, content type and body as documented, invalid input refused,
//! no route answering without its token.

#[path = "support/hook_http.rs"]
mod hook_http;
mod support;

use std::process::Command;

use hook_http::Server;
use schemas::*;
use support::*;

/// Checks left out, each for a reason documented in docs/services.md ("The OpenAPI contract"):
/// - `positive_data_acceptance`: the document bounds names to 128 characters; the server bounds them to 128 *bytes*
///   of UTF-8 and refuses control characters (contract §9.2), which JSON Schema cannot say, so some schema-valid
///   strings are rightly refused with 400; an idempotency key reused with another body is rightly 409 (422 under the
///   `Idempotency-Key` header); and a body's key other than the header's is rightly 400.
const EXCLUDED_CHECKS: &str = "positive_data_acceptance";

const ADMIN_SECRET: &str = "openapi-admin-secret-0123";
const ADMIN: &str =
    "[[token]]\nname = \"openapi-admin\"\nsecret = \"openapi-admin-secret-0123\"\ntenants = [\"*\"]\nadmin = true\n";

fn policy() -> Event {
    Event::Policy(PolicyEvent::new(
        header("policy-requests-v1", "2026-01-01T00:00:00Z", "*", "requests"),
        "plan-requests",
        1_000,
        Window::DAY,
        Enforcement::HARD,
        at("2026-01-01T00:00:00Z"),
    ))
}

/// Runs schemathesis against `server` with `secret` as the bearer token, its JUnit report written to `report`; fails
/// the test on a finding, and returns the report.
fn schemathesis(server: &Server, secret: &str, max_examples: u32, report: &std::path::Path) -> String {
    let output = Command::new("schemathesis")
        .args(["run", concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.yaml"), "--url", &server.base])
        .args(["--header", &format!("Authorization: Bearer {secret}")])
        .args(["--checks", "all", "--exclude-checks", EXCLUDED_CHECKS])
        // One worker: hypothesis describes its strategies with `ast.parse`, which two threads at once break
        // ("AST constructor recursion depth mismatch", an error of the tool, not a finding).
        .args(["--max-examples", &max_examples.to_string(), "--seed", "1", "--workers", "1"])
        .args(["--phases", "examples,coverage,fuzzing"])
        .args(["--report", "junit", "--report-junit-path", report.to_str().expect("a UTF-8 path")])
        .env("SCHEMATHESIS_HOOKS", "")
        // Its cache of findings (`.schemathesis/`) goes to the test's directory, not the checkout.
        .current_dir(report.parent().expect("the report's directory"))
        .output()
        .expect("schemathesis runs");
    let text = String::from_utf8_lossy(&output.stdout).to_string() + &String::from_utf8_lossy(&output.stderr);
    // Its report is long; the findings and the summary are at its end.
    let tail: String = text.chars().rev().take(20_000).collect::<Vec<_>>().into_iter().rev().collect();
    assert!(output.status.success(), "schemathesis found failures:\n{tail}");
    std::fs::read_to_string(report).unwrap_or_else(|e| panic!("no JUnit report at {}: {e}\n{tail}", report.display()))
}

/// The operations the JUnit report of a run names as test cases, and how many of them failed or erred.
fn operations_run(junit: &str) -> (std::collections::BTreeSet<String>, usize) {
    let cases = junit.split("<testcase").skip(1);
    let names = cases.filter_map(|case| case.split("name=\"").nth(1)?.split('"').next().map(str::to_string)).collect();
    let failed = junit.matches("<failure").count() + junit.matches("<error").count();
    (names, failed)
}

// Proves serve answers as docs/openapi.yaml says, for everything schemathesis generates from it, with an admin token
// and with a tenant's token that is not admin (its admin routes answer 403 as documented): every operation of the
// document is run, and none fails.
#[test]
fn schemathesis_finds_nothing_against_a_live_serve() {
    if !tool_available("schemathesis", "QUOTA_LEDGER_SKIP_SCHEMATHESIS", "pip install schemathesis==4.32.5") {
        return;
    }
    let ledger = TestLedger::new();
    write_container(&ledger.file("policy.avro"), &[policy()]);
    ledger.ingest(&ledger.file("policy.avro"));
    // An admin token of every tenant, so that the admin routes are exercised past their 403 too; and the support
    // module's token of every tenant, not admin.
    // Brokers, so that `POST /v1/events` answers what it answers in production (204 once acknowledged), not 503.
    let broker = support::brokers::Broker::mock();
    let brokers = ["--brokers", broker.bootstrap.as_str()];
    let (stderr, tokens) = (ledger.file("serve.err"), ADMIN);
    let server = Server::start_with_args(&ledger.path, ledger.dir.path(), &[], &stderr, tokens, &brokers);
    let document = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/openapi.yaml")).unwrap();
    let operations = document.matches("operationId:").count();
    assert!(operations >= 20, "docs/openapi.yaml names {operations} operations");
    for (secret, examples, name) in [(ADMIN_SECRET, 100, "admin.xml"), (hook_http::SECRET, 25, "tenant.xml")] {
        let junit = schemathesis(&server, secret, examples, &ledger.file(name));
        let (run, failed) = operations_run(&junit);
        assert_eq!(run.len(), operations, "{name}: every operation of the document is run: {run:?}");
        assert_eq!(failed, 0, "{name}: {junit}");
    }
    ledger.assert_verifies();
}
