// Proves that samples/usage-2026-11.avro ingests to the counts samples/README.md states and is write_sample's output.

mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;

use schemas::{Event, Header, Timestamp, UsageEvent};
use support::*;

/// The committed sample's sync marker, as it was written (the tests' other files draw theirs from their events).
const SAMPLE_MARKER: [u8; 16] = *b"quota-ledger-e2e";

/// Distinct valid UsageEvents in the sample: what `events_recorded` counts.
const UNIQUE_EVENTS: u64 = 1_975;
/// Exact redeliveries of earlier events.
const EXACT_DUPLICATES: u64 = 20;
/// Later copies of an event_id with another quantity.
const CONFLICTING_DUPLICATES: u64 = 3;
/// One negative quantity, one empty tenant.
const INVALID_RECORDS: u64 = 2;

const TENANTS: u64 = 8;
/// `(metric, producing service, smallest quantity, quantity range)`.
const METRICS: [(&str, &str, i64, u64); 3] = [
    ("requests", "api-gateway", 1, 20),
    ("tokens", "llm-gateway", 100, 50_000),
    ("bytes", "storage", 1_000, 10_000_000),
];
const MODELS: [&str; 3] = ["m-small", "m-medium", "m-large"];
const ROUTES: [&str; 2] = ["/v1/check", "/v1/reservations"];

fn sample_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("samples/usage-2026-11.avro")
}

/// splitmix64: deterministic bits that look random, so the sample reads like real traffic and never changes.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The i-th distinct event: November 2026 in time order, one slot of the month each, tenants org-1..org-8.
fn sample_event(i: u64) -> UsageEvent {
    let bits = mix(i);
    let november = at("2026-11-01T00:00:00Z").micros();
    let slot_micros = (30 * 24 * 3_600 * 1_000_000) / UNIQUE_EVENTS as i64;
    let (metric, source, smallest, range) = METRICS[(bits >> 8) as usize % METRICS.len()];
    let subject = match (bits >> 40) % 6 {
        0 => None,
        n => Some(format!("key-{n}")),
    };
    // At most one attribute per event: apache-avro writes a map in HashMap order, which changes from run to run,
    // and one key keeps the file byte-for-byte reproducible.
    let attributes: BTreeMap<String, String> = match (metric, i % 10) {
        ("tokens", 0) => [("model".into(), MODELS[(bits >> 50) as usize % MODELS.len()].into())].into(),
        ("requests", 0) => [("route".into(), ROUTES[(bits >> 50) as usize % ROUTES.len()].into())].into(),
        _ => BTreeMap::new(),
    };
    UsageEvent {
        header: Header {
            // mix is a bijection, so event_ids are distinct.
            event_id: format!("usage-2026-11-{bits:016x}"),
            occurred_at: Timestamp(november + i as i64 * slot_micros + (bits >> 24) as i64 % slot_micros),
            tenant: format!("org-{}", 1 + bits % TENANTS),
            subject,
            metric: metric.to_string(),
            source: source.to_string(),
            api_key: None,
            project: None,
        },
        quantity: smallest + ((bits >> 16) % range) as i64,
        request_id: i.is_multiple_of(25).then(|| format!("req-{:08x}", bits >> 32)),
        attributes,
    }
}

/// Every record of the sample in file order: the distinct events, with a redelivery of the event 40 places back
/// after every 97th, conflicting copies (quantity + 1) of three events and the two invalid records mixed in.
fn sample_records() -> Vec<Event> {
    let events: Vec<UsageEvent> = (0..UNIQUE_EVENTS).map(sample_event).collect();
    let mut records = Vec::new();
    for (i, event) in events.iter().enumerate() {
        records.push(Event::Usage(event.clone()));
        if i % 97 == 50 {
            records.push(Event::Usage(events[i - 40].clone()));
        }
        if matches!(i, 500 | 1000 | 1500) {
            let mut conflicting = events[i - 10].clone();
            conflicting.quantity += 1;
            records.push(Event::Usage(conflicting));
        }
        let invalid = |event_id: &str| UsageEvent {
            header: Header { event_id: event_id.into(), ..event.header.clone() },
            request_id: None,
            ..event.clone()
        };
        if i == 700 {
            records.push(Event::Usage(UsageEvent { quantity: -3, ..invalid("usage-2026-11-negative-quantity") }));
        }
        if i == 1300 {
            let mut empty_tenant = invalid("usage-2026-11-empty-tenant");
            empty_tenant.header.tenant.clear();
            records.push(Event::Usage(empty_tenant));
        }
    }
    records
}

// Writes the sample (run once, by hand): `cargo test --test sample -- --ignored write_sample`.
#[test]
#[ignore = "writes samples/usage-2026-11.avro; run by hand only"]
fn write_sample() {
    let path = sample_path();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    write_container_marked(&path, &sample_records(), SAMPLE_MARKER);
}

// Proves that the sample ingests with the binary to its exact counts and reasons, and that verify accepts it.
#[test]
fn sample_ingests_to_documented_counts() {
    let sample = sample_path();
    assert!(
        sample.is_file(),
        "{} is missing: run `cargo test --test sample -- --ignored write_sample`",
        sample.display()
    );
    let ledger = TestLedger::new();
    let report = ledger.ingest(&sample);
    let records = UNIQUE_EVENTS + EXACT_DUPLICATES + CONFLICTING_DUPLICATES + INVALID_RECORDS;
    assert_eq!(records, 2_000);
    assert_eq!(report["records"], records, "{report}");
    assert_eq!(report["record_type"], "UsageEvent");

    let expected = Counts {
        events_recorded: UNIQUE_EVENTS,
        duplicates: EXACT_DUPLICATES,
        conflicts: CONFLICTING_DUPLICATES,
        quarantined: INVALID_RECORDS,
        // A conflicting duplicate is an entry of its own, kept for audit.
        watermark: UNIQUE_EVENTS + CONFLICTING_DUPLICATES,
    };
    assert_eq!(Counts::of_status(&ledger.status()), expected);
    let codes: Vec<String> =
        ledger.quarantined().iter().map(|m| m["reason_code"].as_str().unwrap_or_default().to_string()).collect();
    assert_eq!(codes, ["negative_quantity", "empty_tenant"]);
    ledger.assert_verifies();
}

// Proves that the committed sample is byte for byte what `write_sample` writes, so the counts above describe it.
#[test]
fn sample_is_what_write_sample_writes() {
    let dir = tempfile::tempdir().unwrap();
    let fresh = dir.path().join("usage-2026-11.avro");
    write_container_marked(&fresh, &sample_records(), SAMPLE_MARKER);
    let committed = std::fs::read(sample_path()).expect("the sample exists (see write_sample)");
    assert!(
        std::fs::read(&fresh).unwrap() == committed,
        "samples/usage-2026-11.avro differs from what write_sample writes now (the generator or UsageEvent.avsc \
         changed): regenerate it with `cargo test --test sample -- --ignored write_sample`, then check the counts"
    );
}
