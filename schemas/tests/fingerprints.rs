// Proves that the catalog's fingerprints are the Avro specification's, the ones other teams' encoders put in
// their single-object messages (Java's SchemaNormalization, Python's avro, fastavro), and that messages under the
// fingerprints of earlier releases (apache-avro 0.22's, which keeps `{"type":"long"}` for a timestamp in the
// canonical form) still decode.

use schemas::catalog::{canonical_form, legacy_fingerprint};
use schemas::{Catalog, Event, EventType, Header, Timestamp, UsageEvent};

/// Computed outside this codebase from the files under `schemas/avro/`: fastavro's `to_parsing_canonical_form`
/// and CRC-64-AVRO for UsageEvent, DecisionEvent and PolicyEvent; the others with a separate implementation of
/// the specification's rules (Python). Both agree where both were run. AdjustmentEvent v2 with a third Python
/// implementation, which gave every other value of this table too. DecisionEvent v2 (with `token_name`) with a
/// fourth, which also gave the other nine. PolicyEvent v3 and GrantEvent v2 (with `actor`, `reason`) with a fifth,
/// which also gave the other ten. PolicyEvent v4 (with `time_zone`) with a sixth (Python: the specification's
/// canonical form rules and the CRC-64-AVRO table, written anew), which also gave the other twelve. PolicyEvent v5 (the
/// CONCURRENT window) and ReservationEvent v2 (RENEW, `fencing_token`) with fastavro's `fingerprint` (its bytes in
/// the order written, read here as a little-endian number), which also gave the other thirteen. PolicyEvent v6
/// (`on_failure`) with fastavro 1.13's `fingerprint`, which also gave v5 as listed; v7 (`overage_rate`,
/// `overage_window`) with the same, which also gave v6 as listed before; v8 (`violation`) with fastavro 1.12's, which
/// also gave v7 as listed before; the versions with `project` and `api_key` (and the PROJECT and API_KEY scopes) with
/// the same, which also gave every other as listed before; PolicyEvent v10 (ROLLING, `window_seconds`) with fastavro
/// 1.12.1, which also gave v9 as listed before; PolicyEvent v11 (BILLING_CYCLE, `cycle_anchor`) with fastavro 1.12.1,
/// which also gave v10 as listed before; AlertEvent v1 with fastavro 1.12.1; PolicyEvent v12 (`alert_thresholds`,
/// `alert_subject_share`) with fastavro 1.12.1, which also gave v11 as listed before; CorrectionEvent v1 with fastavro
/// 1.12.1 (`fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO")`); CapacityLeaseEvent v1, PlanAssignmentEvent
/// v1 and MeterEvent v1 with fastavro 1.12.1 the same way, which also gave CorrectionEvent v1 as listed.
const PUBLISHED: [(&str, u64); 32] = [
    ("UsageEvent.avsc", 0xb6c7e0b43b42b4c7),
    ("DecisionEvent.avsc", 0xe750629d4dedb980),
    ("ReservationEvent.avsc", 0x0c583b0ffbfe3737),
    ("GrantEvent.avsc", 0x17853b4b6a4bca7f),
    ("PolicyEvent.avsc", 0xb11b4ea9cab23166),
    ("AdjustmentEvent.avsc", 0x394c8fc01ce3ae33),
    ("AlertEvent.avsc", 0x1be25095f4c7395f),
    ("CorrectionEvent.avsc", 0x580a3b4e51fc5484),
    ("CapacityLeaseEvent.avsc", 0x6310edf4ed6ff98a),
    ("PlanAssignmentEvent.avsc", 0x0d73235eeb87baf3),
    ("MeterEvent.avsc", 0x9289a02e2ce4676c),
    ("history/UsageEvent.v1.avsc", 0x8860840d2e402f4b),
    ("history/UsageEvent.v2.avsc", 0xa81167332c60b12c),
    ("history/DecisionEvent.v2.avsc", 0x35d1d46f0f097cef),
    ("history/ReservationEvent.v2.avsc", 0x348acb0137d9671f),
    ("history/GrantEvent.v2.avsc", 0x015acf770103b649),
    ("history/AdjustmentEvent.v2.avsc", 0x2f17b563bd4eaf25),
    ("history/DecisionEvent.v1.avsc", 0x0b29ffbeda815cef),
    ("history/PolicyEvent.v1.avsc", 0x9df89f040761b669),
    ("history/PolicyEvent.v2.avsc", 0x022a04edb1695548),
    ("history/PolicyEvent.v3.avsc", 0x28ad7bda5c938cf1),
    ("history/PolicyEvent.v4.avsc", 0x65e0708fc5a46396),
    ("history/PolicyEvent.v5.avsc", 0xec5e9100c961183e),
    ("history/PolicyEvent.v6.avsc", 0x4c21fb37c2942c58),
    ("history/PolicyEvent.v7.avsc", 0xab324664005bd5a3),
    ("history/PolicyEvent.v8.avsc", 0x1502546fb0c9e0e6),
    ("history/PolicyEvent.v9.avsc", 0x26ba3acd74510f06),
    ("history/PolicyEvent.v10.avsc", 0x6d71b015e8a987cf),
    ("history/PolicyEvent.v11.avsc", 0xb1562df39e204212),
    ("history/ReservationEvent.v1.avsc", 0x77c5cb05e89c39c6),
    ("history/GrantEvent.v1.avsc", 0x37b6d2cc1e5b52f5),
    ("history/AdjustmentEvent.v1.avsc", 0x67c71f7cf397d05e),
];

#[test]
fn the_catalog_has_the_fingerprints_other_encoders_compute() {
    let catalog = Catalog::builtin();
    for (file, published) in PUBLISHED {
        let schema =
            catalog.schemas().iter().find(|s| s.file == file).unwrap_or_else(|| panic!("{file} in the catalog"));
        assert_eq!(schema.fingerprint, published, "{file}: {:016x}, published {published:016x}", schema.fingerprint);
        assert_eq!(catalog.by_fingerprint(published).map(|s| s.file), Some(file));
    }
}

// contract §3's timestamps are longs with a logical type: [STRIP] drops the logicalType, [PRIMITIVES] then writes the
// bare primitive.
#[test]
fn a_logical_type_is_its_bare_primitive_in_the_canonical_form() {
    let schema = apache_avro::Schema::parse_str(
        r#"{"type": "record", "name": "T", "namespace": "n", "doc": "x", "fields": [
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
            {"name": "maybe", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}], "default": null}
        ]}"#,
    )
    .unwrap();
    assert_eq!(
        canonical_form(&schema),
        r#"{"name":"n.T","type":"record","fields":[{"name":"at","type":"long"},{"name":"maybe","type":["null","long"]}]}"#
    );
}

#[test]
fn messages_under_the_old_fingerprints_still_decode() {
    let catalog = Catalog::builtin();
    let event = Event::Usage(UsageEvent {
        header: Header {
            event_id: "u-1".into(),
            occurred_at: Timestamp::parse_rfc3339("2026-11-02T10:00:00Z").unwrap(),
            tenant: "org-1".into(),
            subject: None,
            metric: "tokens".into(),
            source: "svc".into(),
            api_key: None,
            project: None,
        },
        quantity: 7,
        request_id: None,
        attributes: Default::default(),
    });
    let current = catalog.current(EventType::UsageEvent);
    assert_ne!(current.legacy_fingerprint, current.fingerprint);
    assert_eq!(current.legacy_fingerprint, legacy_fingerprint(&current.schema));
    let mut message = catalog.encode_single_object(&event);
    assert_eq!(&message[2..10], &current.fingerprint.to_le_bytes(), "written under the specification's");
    message[2..10].copy_from_slice(&current.legacy_fingerprint.to_le_bytes());
    let decoded = catalog.decode_single_object(&message, Some(EventType::UsageEvent)).expect("an old message");
    assert_eq!(decoded.event, event);
    let stored = catalog.decode_payload(current.legacy_fingerprint, &message[10..]).expect("an old ledger entry");
    assert_eq!(stored, event);
}
