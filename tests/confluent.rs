//! The Confluent wire format (a zero byte, the schema registry's 4-byte schema id, the Avro body), encoded by a
//! third-party encoder (fastavro, from PyPI), with the schemas in the registry's own storage topic `_schemas`
//! written in its documented format: ingest resolves the ids from that topic (no registry server), a message whose id
//! is not there yet is quarantined as `unknown_schema_id`, and `quarantine replay --brokers` records it once its
//! schema appears. On the embedded broker and on Tansu. And the same ids asked of the registry's REST API
//! (`--registry-url`, `GET /schemas/ids/{id}` as Confluent Schema Registry and Karapace document it, behind basic
//! authentication) instead of its topic.
//!
//! The other way round, the outbox published in the Confluent wire format (`--outbox-format confluent`) by `serve` and
//! by `reconcile`, its schemas registered with the registry's REST API, and its messages decoded by fastavro with the
//! schema text the registry received.

#[path = "support/hook_http.rs"]
mod hook_http;
mod support;

use std::io::Write;
use std::process::{Command, Stdio};

use kafka::producer::KafkaProducer;
use schemas::{Catalog, EventType};
use serde_json::{Value, json};
use support::brokers::{Broker, payloads_on_topic};
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
    assert!(said(&ingest.stderr, "a schema id is not in the registry", "schema_id=52"), "{}", ingest.stderr);
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

/// Messages in the Confluent wire format decoded by fastavro (tests/support/confluent_decode.py), each with the schema
/// text the test registry (`registry_dir`, tests/support/schema_registry.py) received for its id: the records.
fn fastavro_decode(registry_dir: &std::path::Path, messages: &[Vec<u8>]) -> Vec<Value> {
    let mut schemas = serde_json::Map::new();
    for message in messages {
        let id = schemas::confluent::schema_id(message).expect("the Confluent wire format");
        let text = std::fs::read_to_string(registry_dir.join(format!("{id}.avsc")))
            .unwrap_or_else(|e| panic!("the registry received no schema for id {id}: {e}"));
        schemas.insert(id.to_string(), Value::String(text));
    }
    let hex: Vec<String> = messages.iter().map(|m| m.iter().map(|b| format!("{b:02x}")).collect()).collect();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/confluent_decode.py");
    let mut child = Command::new("python3")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let request = json!({"schemas": schemas, "messages": hex});
    child.stdin.take().unwrap().write_all(request.to_string().as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "fastavro: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap().lines().map(|line| serde_json::from_str(line).unwrap()).collect()
}

/// The subjects the test registry registered, each with the ids it gave (subjects.log).
fn registered_subjects(registry_dir: &std::path::Path) -> Vec<String> {
    let log = std::fs::read_to_string(registry_dir.join("subjects.log")).unwrap_or_default();
    let mut subjects: Vec<String> = log.lines().map(|line| line.split(' ').next().unwrap().to_string()).collect();
    subjects.sort();
    subjects.dedup();
    subjects
}

// Proves that `serve --brokers` publishes the outbox in the Confluent wire format when its config file asks for it
// (`outbox-format`, `outbox-registry-url` in `[serve]`, as any flag): while the registry refuses the schemas (409)
// nothing is sent, the entries wait and /healthz and stderr name the registry's answer; once it registers them, every
// decision and usage reaches its topic as 00, an id and a body that fastavro decodes, with the schema text the
// registry received for that id, to what the ledger holds.
#[test]
fn serve_publishes_the_outbox_in_the_confluent_wire_format() {
    if !fastavro_available() {
        return;
    }
    let broker = Broker::mock();
    let registry_dir = tempfile::tempdir().unwrap();
    std::fs::write(registry_dir.path().join("refuse"), "409").unwrap();
    let (url, _registry) = registry_server(registry_dir.path(), "team:s3cret");
    let ledger = TestLedger::new();
    write_container(&ledger.file("policy.avro"), &[schemas::Event::Policy(hard_daily("p-1", "org-1", 1_000))]);
    ledger.ingest(&ledger.file("policy.avro"));
    let config = ledger.file("quota-ledger.toml");
    let text = format!(
        "[serve]\nbrokers = \"{}\"\noutbox-format = \"confluent\"\noutbox-registry-url = \"{url}\"\n",
        broker.bootstrap
    );
    std::fs::write(&config, text).unwrap();
    let env = [("QUOTA_LEDGER_CONFIG", config.clone().into_os_string())];
    let stderr = ledger.file("serve.err");
    let server = hook_http::Server::start(&ledger.path, ledger.dir.path(), &env, &stderr);
    for tenant in ["org-1", "org-2", "org-3"] {
        assert!(server.check(tenant, 1, &format!("k-{tenant}")).decided().is_some());
    }
    let health = eventually(30, "healthz named the registry's refusal", || {
        let (_, health) = server.health();
        health["outbox"]["last_error"].as_str().is_some_and(|e| e.contains("HTTP 409")).then_some(health)
    });
    assert_eq!(health["outbox"]["pending"], 6, "three decisions and their usage wait: {health}");
    let error = health["outbox"]["last_error"].as_str().unwrap();
    assert!(error.contains("subject quota.decisions-value") && !error.contains("s3cret"), "{error}");
    let said = std::fs::read_to_string(&stderr).unwrap();
    assert!(said.contains("entries stay pending, not sent in the Confluent wire format"), "{said}");
    assert!(server.metrics().contains("quota_ledger_outbox_pending_events 6"), "{}", server.metrics());
    let decisions_sent = payloads_on_topic(&broker.bootstrap, "quota.decisions", 0);
    assert!(decisions_sent.is_empty(), "nothing is sent in another format while the registry refuses");

    std::fs::remove_file(registry_dir.path().join("refuse")).unwrap();
    eventually(30, "the outbox drained", || (server.health().1["outbox"]["pending"] == 0).then_some(()));
    assert_eq!(registered_subjects(registry_dir.path()), ["quota.decisions-value", "quota.usage-value"]);
    let decisions = fastavro_decode(registry_dir.path(), &payloads_on_topic(&broker.bootstrap, "quota.decisions", 3));
    let usage = fastavro_decode(registry_dir.path(), &payloads_on_topic(&broker.bootstrap, "quota.usage", 3));
    server.stop(std::time::Duration::from_secs(30));

    let held = hook_http::LedgerView::read(&ledger.path);
    assert_eq!(decisions.len(), 3, "{decisions:?}");
    for record in &decisions {
        let key =
            (record["tenant"].as_str().unwrap().to_string(), record["idempotency_key"].as_str().unwrap().to_string());
        let [decision] = &held.decisions[&key][..] else { panic!("one decision of {key:?}") };
        assert_eq!(record["event_id"], decision.decision_id.as_str(), "{record}");
        assert_eq!(record["outcome"], decision.outcome.as_str(), "{record}");
        assert_eq!(record["amount"], decision.amount, "{record}");
    }
    let mut tenants: Vec<&str> = usage.iter().map(|u| u["tenant"].as_str().unwrap()).collect();
    tenants.sort();
    assert_eq!(tenants, ["org-1", "org-2", "org-3"], "{usage:?}");
    assert!(usage.iter().all(|u| u["quantity"] == 1), "{usage:?}");
}

// Proves that `reconcile --brokers --outbox-format confluent --outbox-registry-url` publishes the pending outbox in
// the Confluent wire format: a registry that refuses (500) leaves it pending, the run says why; the next run
// publishes it, and fastavro decodes the events the ledger holds.
#[test]
fn reconcile_publishes_the_outbox_in_the_confluent_wire_format() {
    if !fastavro_available() {
        return;
    }
    let broker = Broker::mock();
    let registry_dir = tempfile::tempdir().unwrap();
    std::fs::write(registry_dir.path().join("refuse"), "500").unwrap();
    let (url, _registry) = registry_server(registry_dir.path(), "team:s3cret");
    let test = TestLedger::new();
    let mut ledger = ledger::Ledger::open(&test.path).unwrap();
    let events = ["a-1", "a-2"]
        .iter()
        .map(|id| ledger::Incoming {
            event: usage(id, "2026-11-02T00:00:00Z", "org-1", 2),
            origin: ledger::Origin::Local { name: "earlier".into() },
            raw: None,
        })
        .collect();
    ledger.append(&ledger::Batch { events, outbox: true, ..ledger::Batch::default() }).unwrap();
    drop(ledger);
    let run = |json: bool| {
        let args = ["reconcile", "--as-of", "2026-12-01T00:00:00Z", "--brokers", &broker.bootstrap];
        let format = ["--outbox-format", "confluent", "--outbox-registry-url", &url];
        test.run(&[&args[..], &format, if json { &["--json"][..] } else { &[] }].concat()).success()
    };
    let words = run(false).stdout_text();
    assert!(words.contains("0 published, 2 still pending (schema registry: "), "{words}");
    assert!(words.contains("HTTP 500"), "{words}");

    std::fs::remove_file(registry_dir.path().join("refuse")).unwrap();
    let report = run(true).json();
    assert_eq!(report["outbox"]["published"], 2, "{report}");
    assert_eq!(report["outbox"]["awaiting_registry"], 0, "{report}");
    let records = fastavro_decode(registry_dir.path(), &payloads_on_topic(&broker.bootstrap, "quota.usage", 2));
    let mut ids: Vec<&str> = records.iter().map(|r| r["event_id"].as_str().unwrap()).collect();
    ids.sort();
    assert_eq!(ids, ["a-1", "a-2"], "{records:?}");
    assert_eq!(registered_subjects(registry_dir.path()), ["quota.usage-value"]);
}
