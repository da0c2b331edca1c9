//! Writer schemas added at run time (`--schemas DIR`): a producer's evolved schema is decoded without a rebuild,
//! through `schemas decode` and through Kafka ingest; a message written with it before it was added is quarantined
//! and replayed once it is; a schema the current reader cannot read, or of no record type of the catalog, is refused
//! by name and nothing starts.

mod support;

use std::path::Path;

use kafka::producer::KafkaProducer;
use schemas::{Catalog, EventType};
use support::brokers::Broker;
use support::*;

/// The current UsageEvent schema with a field appended: `region`, a string defaulting to "eu" (a producer's
/// evolution the reader does not know, and skips).
fn evolved_usage_schema() -> String {
    let current = &Catalog::builtin().current(EventType::UsageEvent).schema;
    let mut json = serde_json::to_value(current).unwrap();
    json["fields"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"name": "region", "type": "string", "default": "eu"}));
    json.to_string()
}

/// `event` in single-object encoding under the evolved schema: its body under the current schema, then the region
/// (Avro writes a record's fields in order, a string as its zigzag length and its bytes).
fn encode_evolved(schema_text: &str, event: &schemas::Event) -> Vec<u8> {
    let schema = apache_avro::Schema::parse_str(schema_text).unwrap();
    let mut bytes = vec![0xC3, 0x01];
    bytes.extend_from_slice(&schemas::fingerprint(&schema).to_le_bytes());
    bytes.extend_from_slice(&Catalog::builtin().encode_body(event));
    bytes.push(2 * 7);
    bytes.extend_from_slice(b"eu-west");
    bytes
}

fn schema_dir(text: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("UsageEvent.v3.avsc"), text).unwrap();
    dir
}

fn with_schemas<'a>(dir: &'a Path, args: &[&'a str]) -> Vec<&'a str> {
    let mut all = vec!["--schemas", dir.to_str().unwrap()];
    all.extend_from_slice(args);
    all
}

// Proves an evolved writer schema decodes with --schemas and not without.
#[test]
fn schemas_decode_reads_a_message_of_a_schema_added_at_start() {
    let dir = schema_dir(&evolved_usage_schema());
    let event = usage("evolved-1", "2026-11-03T10:00:00Z", "org-1", 5);
    let message = encode_evolved(&evolved_usage_schema(), &event);
    let unknown = run(&["schemas", "decode"], &message).expect_code(2);
    assert!(unknown.stderr.contains("unknown writer schema fingerprint"), "{}", unknown.stderr);
    let decoded = run(&with_schemas(dir.path(), &["schemas", "decode"]), &message).success().json();
    assert_eq!(decoded["event_id"], "evolved-1", "{decoded}");
    assert_eq!(decoded["quantity"], 5, "{decoded}");
    let compiled = run(&["schemas", "list", "--json"], b"").success().json().as_array().unwrap().len();
    let listed = run(&with_schemas(dir.path(), &["schemas", "list", "--json"]), b"").success().json();
    let added = listed.as_array().unwrap().last().unwrap().clone();
    assert_eq!(listed.as_array().unwrap().len(), compiled + 1, "the compiled ones and the one added: {listed}");
    assert!(added["file"].as_str().unwrap().ends_with("UsageEvent.v3.avsc") && added["current"] == false, "{added}");
    assert!(!added["file"].as_str().unwrap().starts_with("schemas/avro/"), "its own path: {added}");
}

// Proves the Kafka path: quarantined as unknown without the schema, replayed once it is added, and ingested
// directly with it.
#[test]
fn a_message_of_an_added_schema_ingests_and_one_quarantined_before_is_replayed() {
    let broker = Broker::mock();
    let dir = schema_dir(&evolved_usage_schema());
    let mut producer = KafkaProducer::new(&broker.bootstrap, &[]).expect("a producer");
    for i in 0..3 {
        let event = usage(&format!("evolved-{i}"), "2026-11-03T10:00:00Z", "org-1", 2);
        producer.send("quota.usage", "org-1", &encode_evolved(&evolved_usage_schema(), &event)).expect("send");
    }
    producer.finish().expect("acknowledged");

    let before = TestLedger::new();
    before.run(&["ingest", "--brokers", &broker.bootstrap, "--until-caught-up"]).success();
    let quarantined = before.quarantined();
    assert_eq!(quarantined.len(), 3, "{quarantined:?}");
    assert!(quarantined.iter().all(|q| q["reason_code"] == "unknown_fingerprint"), "{quarantined:?}");
    before.run(&with_schemas(dir.path(), &["quarantine", "replay"])).success();
    assert_eq!(count(&before.status(), "events_recorded"), 3, "replayed once the schema was added");

    let with = TestLedger::new();
    with.run(&with_schemas(dir.path(), &["ingest", "--brokers", &broker.bootstrap, "--until-caught-up"])).success();
    let status = with.status();
    assert_eq!((count(&status, "events_recorded"), count(&status, "quarantined")), (3, 0), "{status}");
    with.assert_verifies();
}

// Proves a schema the reader cannot read, or of a record the catalog does not know, is refused by name.
#[test]
fn an_incompatible_or_unknown_schema_is_refused_and_nothing_starts() {
    let current = &Catalog::builtin().current(EventType::UsageEvent).schema;
    let mut incompatible = serde_json::to_value(current).unwrap();
    for field in incompatible["fields"].as_array_mut().unwrap() {
        if field["name"] == "quantity" {
            field["type"] = serde_json::json!("string");
        }
    }
    let mut unknown = serde_json::to_value(current).unwrap();
    unknown["name"] = serde_json::json!("CarbonEvent");
    for (text, expected) in [
        (incompatible.to_string(), "cannot read what it writes"),
        (unknown.to_string(), "is not a record type of the catalog"),
        ("{\"type\": \"record\"".to_string(), "not a valid Avro schema"),
    ] {
        let dir = schema_dir(&text);
        let refused = run(&with_schemas(dir.path(), &["schemas", "list"]), b"").expect_code(2);
        assert!(
            refused.stderr.contains(expected) && refused.stderr.contains("UsageEvent.v3.avsc"),
            "{}",
            refused.stderr
        );
    }
}
