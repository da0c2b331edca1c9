//! The Confluent wire format (a zero byte, the schema registry's 4-byte schema id, the Avro body), encoded by a
//! third-party encoder (fastavro, from PyPI), with the schemas in the registry's own storage topic `_schemas`
//! written in its documented format: ingest resolves the ids from that topic (no registry server), a message whose id
//! is not there yet is quarantined as `unknown_schema_id`, and `quarantine replay --brokers` records it once its
//! schema appears. On the embedded broker and on Tansu. And the same ids asked of the registry's REST API
//! (`--registry-url`, `GET /schemas/ids/{id}` as Confluent Schema Registry and Karapace document it, behind basic
//! authentication) instead of its topic.

mod support;

use std::io::Write;
use std::process::{Command, Stdio};

use kafka::producer::KafkaProducer;
use schemas::{Catalog, EventType};
use serde_json::{Value, json};
use support::brokers::Broker;
use support::*;

/// The current UsageEvent schema, evolved by the producer with a `region` field.
fn producer_schema() -> Value {
    let mut schema = serde_json::to_value(&Catalog::builtin().current(EventType::UsageEvent).schema).unwrap();
    schema["fields"].as_array_mut().unwrap().push(json!({"name": "region", "type": "string", "default": "eu"}));
    schema
}

/// `records` encoded by fastavro under `schema` with schema id `id`.
fn fastavro_encode(schema: &Value, id: u32, records: &[Value]) -> Vec<Vec<u8>> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/confluent_encode.py");
    let mut child = Command::new("python3")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let request = json!({"schema": schema, "id": id, "records": records});
    child.stdin.take().unwrap().write_all(request.to_string().as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "fastavro: {}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8(output.stdout).unwrap();
    text.lines()
        .map(|line| (0..line.len()).step_by(2).map(|i| u8::from_str_radix(&line[i..i + 2], 16).unwrap()).collect())
        .collect()
}

fn record(event_id: &str, quantity: i64) -> Value {
    json!({
        "event_id": event_id, "occurred_at": 1_793_700_000_000_000i64, "tenant": "org-7", "subject": null,
        "metric": "requests", "source": "python-producer", "quantity": quantity, "request_id": null,
        "attributes": {"plan": "pro"}, "region": "eu-west"
    })
}

/// Registers `schema` under `id` in `_schemas` as the registry does (key and value JSON of its storage format).
fn register(producer: &mut KafkaProducer, id: u32, version: i64, schema: &Value) {
    let subject = "quota.usage-value";
    let key = json!({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1}).to_string();
    let value =
        json!({"subject": subject, "version": version, "id": id, "schema": schema.to_string(), "deleted": false});
    producer.send("_schemas", &key, value.to_string().as_bytes()).expect("send");
}

fn fastavro_available() -> bool {
    if testkit::skip_requested(
        "QUOTA_LEDGER_SKIP_FASTAVRO",
        "the Confluent wire format test",
        "pip install fastavro==1.12.1",
    ) {
        return false;
    }
    let found = Command::new("python3").args(["-c", "import fastavro"]).status().is_ok_and(|s| s.success());
    assert!(
        found,
        "this test needs fastavro: pip install fastavro==1.12.1 (or QUOTA_LEDGER_SKIP_FASTAVRO=1 to skip it)"
    );
    true
}

fn confluent_messages_ingest_and_unknown_ids_replay(broker: &Broker) {
    let schema = producer_schema();
    let mut producer = KafkaProducer::new(&broker.bootstrap, &[]).expect("a producer");
    register(&mut producer, 41, 1, &schema);
    // A schema another team registered that is not a record of ours: the registry holds it, ingest refuses it.
    let foreign = json!({"type": "record", "name": "com.example.Clicks", "fields": [{"name": "n", "type": "long"}]});
    register(&mut producer, 40, 1, &foreign);
    let known = fastavro_encode(&schema, 41, &[record("py-1", 3), record("py-2", 4), record("py-3", 5)]);
    let later = fastavro_encode(&schema, 42, &[record("py-4", 6), record("py-5", 7)]);
    for message in known.iter().chain(&later) {
        producer.send("quota.usage", "org-7", message).expect("send");
    }
    producer.finish().expect("acknowledged");

    let ledger = TestLedger::new();
    let ingest = ledger.run(&["ingest", "--brokers", &broker.bootstrap, "--until-caught-up"]).success();
    let status = ledger.status();
    let counts = (count(&status, "events_recorded"), count(&status, "quarantined"));
    assert_eq!(counts, (3, 2), "{status}\n{}\n{:?}", ingest.stderr, ledger.quarantined());
    let quarantined = ledger.quarantined();
    assert!(quarantined.iter().all(|q| q["reason_code"] == "unknown_schema_id"), "{quarantined:?}");
    // Support sees the three known records' quantities as fastavro encoded them (3 + 4 + 5), the extra field dropped.
    let month = ["--from", "2026-11-01T00:00:00Z", "--to", "2026-12-01T00:00:00Z", "--json"];
    let timeline = ledger.run(&[&["audit", "tenant", "org-7"][..], &month].concat()).success().json();
    let days = timeline["consumption"].as_array().expect("consumption per day").clone();
    let used: i64 = days.iter().map(|day| day["usage"].as_i64().expect("a day's usage")).sum();
    assert_eq!(used, 12, "{timeline}");

    let mut producer = KafkaProducer::new(&broker.bootstrap, &[]).expect("a producer");
    register(&mut producer, 42, 2, &schema);
    producer.finish().expect("acknowledged");
    ledger.run(&["quarantine", "replay", "--brokers", &broker.bootstrap]).success();
    let status = ledger.status();
    assert_eq!(count(&status, "events_recorded"), 5, "replayed once id 42 appeared: {status}");
    let quantities =
        ledger.run(&["sql", "SELECT SUM(quantity) AS q FROM usage_events", "--format", "json"]).success().json();
    assert_eq!(quantities[0]["q"], 25, "{quantities}");
    ledger.assert_verifies();
}

// Proves it on the embedded broker.
#[test]
fn confluent_framed_messages_on_the_embedded_broker() {
    if !fastavro_available() {
        return;
    }
    confluent_messages_ingest_and_unknown_ids_replay(&Broker::mock());
}

// Proves it through Tansu, a real broker process, with `_schemas` created as a registry creates it.
#[test]
fn confluent_framed_messages_through_tansu() {
    if !fastavro_available() {
        return;
    }
    let storage = tempfile::tempdir().unwrap();
    let Some(broker) = Broker::tansu_sqlite(&storage.path().join("tansu.db"), None) else { return };
    kafka::admin::create_topics(&broker.bootstrap, &["_schemas"], 1, &[]).expect("_schemas created");
    confluent_messages_ingest_and_unknown_ids_replay(&broker);
}

/// The registry's REST API on loopback (tests/support/schema_registry.py), serving the files `dir/{id}.avsc` to
/// `credentials`: its URL with them, and the process (killed when dropped).
fn registry_server(dir: &std::path::Path, credentials: &str) -> (String, ChildGuard) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/schema_registry.py");
    let mut child = ChildGuard::new(
        Command::new("python3")
            .args([script, dir.to_str().unwrap(), credentials])
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs"),
    );
    let mut port = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut port).unwrap();
    (format!("http://{credentials}@127.0.0.1:{}", port.trim()), child)
}

// Proves that with --registry-url the ids come from the registry's REST API, the topic unread (there is none): an id
// it holds ingests, an id it does not yet hold (404) is quarantined and replayed once it answers it, and wrong
// credentials (401) resolve nothing.
#[test]
fn schema_ids_resolve_through_the_registry_rest_api() {
    if !fastavro_available() {
        return;
    }
    let broker = Broker::mock();
    let schema = producer_schema();
    let schemas = tempfile::tempdir().unwrap();
    std::fs::write(schemas.path().join("51.avsc"), schema.to_string()).unwrap();
    let (url, _registry) = registry_server(schemas.path(), "team:s3cret");
    let mut producer = KafkaProducer::new(&broker.bootstrap, &[]).expect("a producer");
    let known = fastavro_encode(&schema, 51, &[record("rest-1", 3), record("rest-2", 4)]);
    let later = fastavro_encode(&schema, 52, &[record("rest-3", 5)]);
    for message in known.iter().chain(&later) {
        producer.send("quota.usage", "org-7", message).expect("send");
    }
    producer.finish().expect("acknowledged");

    let ledger = TestLedger::new();
    let args = ["ingest", "--brokers", &broker.bootstrap, "--until-caught-up", "--registry-url", &url];
    let ingest = ledger.run(&args).success();
    let status = ledger.status();
    let counts = (count(&status, "events_recorded"), count(&status, "quarantined"));
    assert_eq!(counts, (2, 1), "{status}\n{}", ingest.stderr);
    assert!(ingest.stderr.contains("schema id 52 is not in http://127.0.0.1:"), "{}", ingest.stderr);
    assert!(!ingest.stderr.contains("s3cret"), "the password is never logged: {}", ingest.stderr);
    assert_eq!(ledger.quarantined()[0]["reason_code"], "unknown_schema_id");

    std::fs::write(schemas.path().join("52.avsc"), schema.to_string()).unwrap();
    let wrong = url.replace("s3cret", "guess");
    let refused = ledger.run(&["quarantine", "replay", "--registry-url", &wrong]).success();
    assert!(refused.stderr.contains("HTTP 401"), "{}", refused.stderr);
    assert_eq!(count(&ledger.status(), "events_recorded"), 2, "nothing resolved without the right credentials");
    ledger.run(&["quarantine", "replay", "--registry-url", &url]).success();
    let status = ledger.status();
    assert_eq!(count(&status, "events_recorded"), 3, "replayed once the registry holds id 52: {status}");
    let quantities =
        ledger.run(&["sql", "SELECT SUM(quantity) AS q FROM usage_events", "--format", "json"]).success().json();
    assert_eq!(quantities[0]["q"], 12, "{quantities}");
    ledger.assert_verifies();
}
