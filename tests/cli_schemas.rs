// Proves that `quota-ledger schemas list|encode|decode` serves producer teams as contract §3 and 7 say.

mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemas::{Catalog, EventType};
use serde_json::{Value, json};
use support::*;

// Proves that `schemas list --json` lists the catalog's 25 schemas, 16-hex-digit fingerprints, one current per type.
#[test]
fn list_json_names_twenty_five_schemas_one_current_per_type() {
    let listed = run(&["schemas", "list", "--json"], b"").success().json();
    let listed = listed.as_array().unwrap_or_else(|| panic!("schemas list --json is not an array: {listed}"));
    assert_eq!(
        listed.len(),
        32,
        "eleven current schemas; v1 and v2 but AlertEvent's, CorrectionEvent's, CapacityLeaseEvent's, PlanAssignmentEvent's and MeterEvent's; PolicyEvent v3 \
         to v11: {listed:?}"
    );

    let catalog = Catalog::builtin();
    let mut current_per_type: BTreeMap<String, usize> = BTreeMap::new();
    for (schema, expected) in listed.iter().zip(catalog.schemas()) {
        let fingerprint = schema["fingerprint"].as_str().unwrap_or_else(|| panic!("no fingerprint: {schema}"));
        assert!(
            fingerprint.len() == 16 && fingerprint.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()),
            "fingerprint {fingerprint:?} is not 16 lower-case hex digits"
        );
        assert_eq!(fingerprint, format!("{:016x}", expected.fingerprint), "{schema}");
        assert_eq!(schema["name"], expected.event_type.full_name(), "{schema}");
        let file = schema["file"].as_str().expect("a file");
        assert!(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(file).is_file(), "{file} does not exist");
        if schema["current"].as_bool().expect("current is a boolean") {
            *current_per_type.entry(schema["name"].as_str().unwrap().to_string()).or_default() += 1;
        }
    }
    let expected: BTreeMap<String, usize> = EventType::ALL.iter().map(|t| (t.full_name(), 1)).collect();
    assert_eq!(current_per_type, expected);

    let mut fingerprints: Vec<&str> = listed.iter().map(|s| s["fingerprint"].as_str().unwrap()).collect();
    fingerprints.sort_unstable();
    fingerprints.dedup();
    assert_eq!(fingerprints.len(), listed.len(), "fingerprints are distinct");
}

/// One event of each record type in JSON, every optional field set (but a throttled overage, a HARD quota's, and alert
/// settings, a quota's, which this SOFT throttle cannot carry), in the form `schemas decode` prints.
fn one_event_per_type() -> Vec<(EventType, Value)> {
    let header = |event_id: &str| {
        json!({
            "event_id": event_id, "occurred_at": "2026-11-02T10:00:00.123456Z", "tenant": "org-42",
            "subject": "user-7", "project": "proj-a", "api_key": "key-3", "metric": "tokens", "source": "llm-gateway"
        })
    };
    let with = |event_id: &str, rest: Value| {
        let mut event = header(event_id);
        event.as_object_mut().unwrap().extend(rest.as_object().unwrap().clone());
        event
    };
    vec![
        (
            EventType::UsageEvent,
            with(
                "u-1",
                json!({"quantity": 1500, "request_id": "req-81f3", "attributes": {"model": "m-large", "region": "eu"}}),
            ),
        ),
        (
            EventType::DecisionEvent,
            with(
                "d-1",
                json!({
                    "request_id": "req-81f3", "idempotency_key": "idem-1", "amount": 1500, "outcome": "DENIED",
                    "reason": "QUOTA_EXCEEDED", "policy_id": "p-1", "policy_version": 3,
                    "window_start": "2026-11-01T00:00:00Z", "window_end": "2026-12-01T00:00:00Z",
                    "limit": 1000000, "used_before": 999000, "remaining": 1000, "retry_after_ms": 60000,
                    "token_name": "checkout-service"
                }),
            ),
        ),
        (
            EventType::ReservationEvent,
            with(
                "r-1",
                json!({
                    "reservation_id": "lease-1", "action": "RENEW", "amount": 0,
                    "expires_at": "2026-11-02T10:05:00Z", "fencing_token": 42
                }),
            ),
        ),
        (EventType::GrantEvent, {
            // A grant names one member (the project's windows it raises): no subject, no API key.
            let mut grant = with(
                "g-1",
                json!({
                    "grant_id": "g-1", "amount": 50000, "valid_from": "2026-11-01T00:00:00Z",
                    "valid_until": "2026-12-01T00:00:00Z", "reason": "support ticket 4711", "actor": "bob@support"
                }),
            );
            grant["subject"] = Value::Null;
            grant.as_object_mut().unwrap().remove("api_key");
            grant
        }),
        (
            EventType::PolicyEvent,
            with(
                "p-1",
                json!({
                    "policy_id": "p-1", "version": 3, "scope": "SUBJECT", "limit": 1000000, "window": "MONTH",
                    "enforcement": "SOFT", "effective_from": "2026-11-01T00:00:00Z", "burst": 500,
                    "actor": "alice@finance", "reason": "upgrade to pro", "time_zone": "America/New_York",
                    "on_failure": "OPEN", "overage_rate": null, "overage_window": null, "violation": null,
                    "window_seconds": null, "cycle_anchor": null, "alert_thresholds": null, "alert_subject_share": null
                }),
            ),
        ),
        (
            EventType::AdjustmentEvent,
            with(
                "adj-1",
                json!({
                    "adjustment_id": "adj-1", "kind": "OVERSHOOT", "policy_id": "p-1",
                    "window_start": "2026-11-01T00:00:00Z", "window_end": "2026-12-01T00:00:00Z", "amount": 500,
                    "refs": ["u-1", "u-2"], "run_id": "run-2026-12-01", "scope": "SUBJECT"
                }),
            ),
        ),
        (
            EventType::AlertEvent,
            with(
                "alert-1",
                json!({
                    "alert_id": "alert-1", "kind": "THRESHOLD", "policy_id": "p-1", "policy_version": 3,
                    "scope": "SUBJECT", "window_start": "2026-11-01T00:00:00Z", "window_end": "2026-12-01T00:00:00Z",
                    "threshold_percent": 80, "limit": 1000, "observed": 812, "request_id": "req-9"
                }),
            ),
        ),
        (
            EventType::CorrectionEvent,
            with(
                "c-1",
                json!({
                    "original_event_id": "u-1", "action": "AMEND", "quantity": 1200, "actor": "carol@finance",
                    "reason": "the producer double-counted"
                }),
            ),
        ),
        (
            EventType::CapacityLeaseEvent,
            with(
                "cl-1-grant",
                json!({
                    "capacity_lease_id": "cl-1", "action": "GRANT", "holder": "shard-0001", "policy_id": "p-1",
                    "policy_version": 1, "window_start": "2026-11-01T00:00:00Z",
                    "window_end": "2026-12-01T00:00:00Z", "units": 5, "used": null,
                    "expires_at": "2026-11-02T10:00:10Z"
                }),
            ),
        ),
        (
            EventType::PlanAssignmentEvent,
            json!({
                "event_id": "pa-1", "occurred_at": "2026-11-02T10:00:00.123456Z", "tenant": "org-42",
                "subject": null, "metric": "*", "source": "quota-ledger plan assign",
                "plan": "pro", "effective_from": "2026-11-14T00:00:00Z", "actor": "sales@example.com",
                "reason": "signed the order form"
            }),
        ),
        (EventType::MeterEvent, {
            // A meter is of a tenant's metric: it names no member.
            let mut meter = with(
                "m-1",
                json!({
                    "version": 1, "aggregation": "UNIQUE_COUNT", "field": "SUBJECT",
                    "effective_from": "2026-11-01T00:00:00Z", "actor": "carol@finance", "reason": "seats are billed"
                }),
            );
            meter["subject"] = Value::Null;
            for member in ["project", "api_key"] {
                meter.as_object_mut().unwrap().remove(member);
            }
            meter
        }),
    ]
}

// Proves that the binary encodes a JSON event of each type as single-object Avro and decodes it back unchanged.
#[test]
fn encode_then_decode_round_trips_every_record_type() {
    for (event_type, event) in one_event_per_type() {
        let input = serde_json::to_vec(&event).unwrap();
        let encoded = run(&["schemas", "encode", "--type", event_type.name()], &input).success().stdout;
        assert_eq!(&encoded[..2], &[0xC3, 0x01], "{event_type}: single-object magic");
        let fingerprint = Catalog::builtin().current(event_type).fingerprint;
        assert_eq!(&encoded[2..10], &fingerprint.to_le_bytes(), "{event_type}: current writer fingerprint");

        let decoded = run(&["schemas", "decode"], &encoded).success().json();
        assert_eq!(decoded, event, "{event_type} round trip");
    }
}

// Proves that `schemas decode` of bytes that are not an event exits 2 with a message saying what is wrong.
#[test]
fn decode_of_garbage_exits_2_with_a_specific_message() {
    let mut unknown_fingerprint = vec![0xC3, 0x01];
    unknown_fingerprint.extend_from_slice(&0x0123_4567_89ab_cdef_u64.to_le_bytes());
    unknown_fingerprint.extend_from_slice(b"body");
    let cases: [(&[u8], &str); 3] = [
        (b"this is not avro at all", "not Avro single-object encoding: starts with 74 68, expected C3 01"),
        (b"short", "message of 5 bytes is shorter than the 10-byte single-object header"),
        (&unknown_fingerprint, "unknown writer schema fingerprint 0123456789abcdef"),
    ];
    for (input, message) in cases {
        let decoded = run(&["schemas", "decode"], input).expect_code(2);
        assert!(decoded.stdout.is_empty(), "nothing on stdout: {:?}", decoded.stdout_text());
        assert!(decoded.stderr.contains("stdin is not a valid event"), "stderr: {}", decoded.stderr);
        assert!(decoded.stderr.contains(message), "stderr should say {message:?}: {}", decoded.stderr);
    }
}

// Proves that `schemas encode` refuses an unknown record type and an invalid event, exit 2, naming the problem.
#[test]
fn encode_refuses_unknown_type_and_invalid_event() {
    let (_, usage) = one_event_per_type().remove(0);
    let unknown = run(&["schemas", "encode", "--type", "UsageEvnt"], &serde_json::to_vec(&usage).unwrap());
    let unknown = unknown.expect_code(2);
    assert!(unknown.stderr.contains("unknown record type \"UsageEvnt\""), "stderr: {}", unknown.stderr);

    let mut negative = usage;
    negative["quantity"] = json!(-3);
    let invalid = run(&["schemas", "encode", "--type", "UsageEvent"], &serde_json::to_vec(&negative).unwrap());
    let invalid = invalid.expect_code(2);
    assert!(invalid.stdout.is_empty(), "nothing encoded");
    assert!(invalid.stderr.contains("quantity is -3, must be at least 0"), "stderr: {}", invalid.stderr);
}

// Proves that a closed stdout is not an error (ripgrep's rule): `schemas list --json` into a dead pipe exits 0.
#[test]
fn list_json_into_closed_pipe_exits_0() {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let output = std::process::Command::new(BIN)
        .args(["schemas", "list", "--json"])
        .stdout(writer)
        .output()
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "stderr: {stderr}");
    assert!(stderr.is_empty(), "stderr: {stderr}");
}
