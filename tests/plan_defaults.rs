//! A plan default (a PolicyEvent of tenant `*`) belongs to every shard (contract §9.4), whichever partition its
//! producer sent it to: kafka-python (from PyPI), sending it keyed `*` the way Kafka clients send everything, puts it in
//! one partition of three, and `ingest --data` forwards it to the others, so that every tenant's billing row carries
//! the plan's limit and version. And `status --data` names the shards that do not hold the plan defaults the others
//! hold (a shard restored from a copy made before one was recorded).

mod support;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use schemas::{Catalog, Enforcement, Event, PolicyEvent, Window};
use serde_json::{Value, json};
use support::brokers::Broker;
use support::*;

/// The partition count of the broker's topics.
const P: u32 = 3;
/// The plan's monthly limit of `requests`.
const PLAN_LIMIT: i64 = 50;
/// What each tenant uses in November: past the plan's limit, so that the row's overage says the limit applied.
const USED: i64 = 60;

/// Whether kafka-python can be imported; `QUOTA_LEDGER_SKIP_KAFKA_PYTHON=1` skips the test (never in CI), and without
/// it a missing kafka-python fails the test with how to install it (`.ci/test` does).
fn kafka_python_available() -> bool {
    let install = "pip install kafka-python==3.0.12";
    if testkit::skip_requested("QUOTA_LEDGER_SKIP_KAFKA_PYTHON", "the plan defaults test with kafka-python", install) {
        return false;
    }
    // Not from the workspace root, where `import kafka` finds the `kafka/` crate's folder.
    let found = Command::new("python3")
        .args(["-c", "from kafka import KafkaProducer"])
        .current_dir(std::env::temp_dir())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "this test needs kafka-python: pip install kafka-python==3.0.12 (or QUOTA_LEDGER_SKIP_KAFKA_PYTHON=1 to skip it)"
    );
    true
}

/// Sends `events` with kafka-python, each keyed by its tenant to the partition kafka-python's default partitioner
/// picks: answers, per event, the partition it went to.
fn kafka_python_send(bootstrap: &str, events: &[Event]) -> Vec<u32> {
    let catalog = Catalog::builtin();
    let messages: Vec<Value> = events
        .iter()
        .map(|event| {
            let value: String = catalog.encode_single_object(event).iter().map(|b| format!("{b:02x}")).collect();
            json!({"topic": event.event_type().default_topic(), "key": event.header().tenant, "value_hex": value})
        })
        .collect();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/kafka_python_produce.py");
    let mut child = Command::new("python3")
        .arg(script)
        .current_dir(std::env::temp_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    // librdkafka's mock cluster answers ApiVersions up to v2, which kafka-python asks as a broker of version 2.3.
    let request = json!({"bootstrap": bootstrap, "api_version": [2, 3], "messages": messages});
    child.stdin.take().unwrap().write_all(request.to_string().as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "kafka-python: {}", String::from_utf8_lossy(&output.stderr));
    let sent: Vec<Value> =
        String::from_utf8(output.stdout).unwrap().lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    assert_eq!(sent.len(), events.len(), "every message acknowledged: {sent:?}");
    sent.iter().map(|s| u32::try_from(s["partition"].as_u64().unwrap()).unwrap()).collect()
}

/// Version 1 of the plan's SOFT monthly quota of `requests`: what every tenant without one of its own gets.
fn plan_default() -> PolicyEvent {
    PolicyEvent {
        policy_id: "plan-monthly".into(),
        limit: PLAN_LIMIT,
        window: Window::MONTH,
        enforcement: Enforcement::SOFT,
        ..hard_daily("plan-monthly-v1", "*", PLAN_LIMIT)
    }
}

/// Tenants whose partitions cover every partition, each using [`USED`] requests in November 2026.
fn usage_of_every_partition() -> (Vec<String>, Vec<Event>) {
    let tenants: Vec<String> = (1..=9).map(|n| format!("org-{n}")).collect();
    let mut partitions: Vec<u32> = tenants.iter().map(|t| schemas::partition::partition_of(t, P)).collect();
    partitions.sort_unstable();
    partitions.dedup();
    assert_eq!(partitions, [0, 1, 2], "the tenants cover every partition");
    let events = tenants.iter().map(|t| usage(&format!("use-{t}"), "2026-11-10T12:00:00Z", t, USED)).collect();
    (tenants, events)
}

/// `quota-ledger --data DIR ARGS...`, run beside the directory.
fn run_data(dir: &Path, args: &[&str]) -> Run {
    let mut all = vec!["--data", dir.to_str().expect("a UTF-8 path")];
    all.extend_from_slice(args);
    run_in(dir.parent().expect("a parent"), &all, b"")
}

/// The billing rows of November 2026 of the shards of `dir`, as JSON lines.
fn november_rows(dir: &Path) -> Vec<Value> {
    let export = run_data(dir, &["export", "billing", "--period", "2026-11", "--format", "jsonl"]).success();
    export.stdout_text().lines().map(|line| serde_json::from_str(line).unwrap()).collect()
}

// Proves that a plan default kafka-python sent to the one partition its default partitioner picks for the key `*`
// reaches every shard: every tenant's billing row, in each of the three shards, carries the plan's limit, version and
// overage; every shard holds the plan default and `status` finds none lacking it; the shard it was sent to says it
// forwarded it, and a second ingest forwards nothing again.
#[test]
fn a_plan_default_kafka_python_sends_to_one_partition_reaches_every_shard() {
    if !kafka_python_available() {
        return;
    }
    let broker = Broker::mock_with_partitions(P);
    let plan = kafka_python_send(&broker.bootstrap, &[Event::Policy(plan_default())]);
    let home = schemas::partition::partition_of("*", P);
    assert_eq!(plan, [home], "kafka-python's default partitioner is Kafka's: one partition for the key `*`");
    let (tenants, usage) = usage_of_every_partition();
    let sent = kafka_python_send(&broker.bootstrap, &usage);
    let expected: Vec<u32> = tenants.iter().map(|t| schemas::partition::partition_of(t, P)).collect();
    assert_eq!(sent, expected, "each tenant's usage in its tenant's partition");

    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let ingest = || run_data(&data, &["ingest", "--brokers", &broker.bootstrap, "--until-caught-up", "--json"]);
    let first = ingest().success().json();
    // Copies forwarded at the end of a run may be read by the next: each is marked, so none is forwarded again.
    let second = ingest().success().json();

    let rows = november_rows(&data);
    assert_eq!(rows.len(), tenants.len(), "a row per tenant: {rows:?}");
    for row in &rows {
        let tenant = row["tenant"].as_str().unwrap();
        let shard = schemas::partition::partition_of(tenant, P);
        assert_eq!(
            (&row["policy_id"], &row["policy_version"], &row["limit"], &row["effective_limit"], &row["overage"]),
            (&json!("plan-monthly"), &json!(1), &json!(PLAN_LIMIT), &json!(PLAN_LIMIT), &json!(USED - PLAN_LIMIT)),
            "tenant {tenant} of shard {shard} is billed under the plan default: {row}"
        );
    }

    assert_eq!(count(&first, "plan_defaults_forwarded"), 1, "the shard it was sent to forwards it: {first}");
    assert_eq!(count(&first, "forwarded"), 0, "a plan default is not misrouted: {first}");
    assert_eq!(count(&second, "plan_defaults_forwarded"), 0, "a copy is never forwarded: {second}");
    let status = run_data(&data, &["status", "--json"]).success().json();
    assert_eq!(status["plan_defaults_lacking"], json!([]), "{status}");
    let shards = status["shards"].as_array().unwrap();
    assert_eq!(shards.len(), P as usize, "{status}");
    for shard in shards {
        assert_eq!(shard["plan_defaults"], json!(1), "every shard holds the plan default: {shard}");
        let forwarded = if shard["partition"] == json!(home) { 1 } else { 0 };
        assert_eq!(shard["plan_defaults_forwarded"], json!(forwarded), "only the shard it was sent to: {shard}");
        assert_eq!(shard["misrouted"], json!({}), "{shard}");
    }
    let words = run_data(&data, &["status"]).success().stdout_text();
    assert!(words.contains("plan defaults    1 in every shard"), "{words}");
}

// Proves that `status --data` names the shard that lacks a plan default the others hold (in `--json`, and in a
// warning line for people): a set whose shard 1 was put back from a copy of the set made before the plan default was
// recorded.
#[test]
fn status_names_the_shards_that_lack_a_plan_default() {
    let work = tempfile::tempdir().unwrap();
    let (_, usage) = usage_of_every_partition();
    let usage_file = work.path().join("usage.avro");
    write_container(&usage_file, &usage);
    let plan_file = work.path().join("plan.avro");
    write_container(&plan_file, &[Event::Policy(plan_default())]);
    let data = work.path().join("data");
    let file = |path: &Path| path.to_str().unwrap().to_string();
    run_data(&data, &["ingest", "--file", &file(&usage_file), "--partitions", "3"]).success();
    let before = work.path().join("before");
    run_data(&data, &["backup", "--to", &file(&before)]).success();
    run_data(&data, &["ingest", "--file", &file(&plan_file)]).success();
    let agreed = run_data(&data, &["status", "--json"]).success().json();
    assert_eq!(agreed["plan_defaults_lacking"], json!([]), "a file's plan default goes to every shard: {agreed}");

    // Shard 1 put back from the copy made before the plan default.
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(data.join(format!("shard-0001.db{suffix}")));
    }
    std::fs::copy(before.join("shard-0001.db"), data.join("shard-0001.db")).unwrap();
    let status = run_data(&data, &["status", "--json"]).success().json();
    assert_eq!(status["plan_defaults_lacking"], json!([1]), "{status}");
    let held: Vec<&Value> = status["shards"].as_array().unwrap().iter().map(|s| &s["plan_defaults"]).collect();
    assert_eq!(held, [&json!(1), &json!(0), &json!(1)], "{status}");
    let words = run_data(&data, &["status"]).success().stdout_text();
    assert!(
        words.contains(
            "plan defaults    WARNING: shard 1 (0 in shard 1) does not hold the 1 plan defaults of shards 0, 2"
        ),
        "{words}"
    );
}
