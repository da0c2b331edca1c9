// Proves that data written by old producers with UsageEvent v1 (no request_id, no attributes) still decodes to
// the current UsageEvent, from a pinned container file and from a single-object message.

use std::fs::File;
use std::path::PathBuf;

use apache_avro::types::Value;
use apache_avro::writer::datum::GenericDatumWriter;
use apache_avro::{Codec, Schema, Writer};
use schemas::{Catalog, Decoded, Event, EventType, Header, Timestamp, UsageEvent};

/// The old writer schema exactly as it was published.
const V1_SCHEMA: &str = include_str!("../avro/history/UsageEvent.v1.avsc");

/// The pinned container file written with `V1_SCHEMA` by `write_usage_v1_fixture`. Do not regenerate it: it
/// stands for files old producers wrote.
fn fixture_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/usage-v1.avro")
}

fn v1_schema() -> Schema {
    Schema::parse_str(V1_SCHEMA).expect("UsageEvent.v1.avsc parses")
}

/// The fingerprint under which the catalog keeps UsageEvent v1.
fn v1_fingerprint(catalog: &Catalog) -> u64 {
    let v1 = catalog
        .schemas()
        .iter()
        .find(|s| s.file == "history/UsageEvent.v1.avsc")
        .expect("the catalog keeps UsageEvent v1");
    assert_eq!(v1.event_type, EventType::UsageEvent);
    assert!(!v1.current, "v1 is an old writer schema, not the reader schema");
    v1.fingerprint
}

fn at(rfc3339: &str) -> Timestamp {
    Timestamp::parse_rfc3339(rfc3339).expect("a valid RFC 3339 literal")
}

/// The three UsageEvents of the fixture, as the current reader sees them: v1 has no request_id and no
/// attributes, so they take their defaults (null, empty map).
fn expected_events() -> Vec<UsageEvent> {
    let usage = |event_id: &str,
                 occurred_at: &str,
                 tenant: &str,
                 subject: Option<&str>,
                 metric: &str,
                 source: &str,
                 quantity| {
        UsageEvent {
            header: Header {
                event_id: event_id.into(),
                occurred_at: at(occurred_at),
                tenant: tenant.into(),
                subject: subject.map(Into::into),
                metric: metric.into(),
                source: source.into(),
                api_key: None,
                project: None,
            },
            quantity,
            request_id: None,
            attributes: Default::default(),
        }
    };
    vec![
        usage("u-v1-1", "2026-11-02T10:00:00Z", "org-42", None, "requests", "api", 3),
        usage("u-v1-2", "2026-11-15T23:59:59.123456Z", "org-42", Some("user-7"), "tokens", "llm-gateway", 1_500_000),
        usage("u-v1-3", "2026-11-30T00:00:00Z", "org-7", Some("clé-ü"), "bytes", "storage", 0),
    ]
}

/// A UsageEvent as a value of the v1 schema: the fields v1 has, in its order.
fn v1_value(e: &UsageEvent) -> Value {
    let subject = match &e.header.subject {
        None => Value::Union(0, Box::new(Value::Null)),
        Some(s) => Value::Union(1, Box::new(Value::String(s.clone()))),
    };
    Value::Record(vec![
        ("event_id".into(), Value::String(e.header.event_id.clone())),
        ("occurred_at".into(), Value::TimestampMicros(e.header.occurred_at.micros())),
        ("tenant".into(), Value::String(e.header.tenant.clone())),
        ("subject".into(), subject),
        ("metric".into(), Value::String(e.header.metric.clone())),
        ("source".into(), Value::String(e.header.source.clone())),
        ("quantity".into(), Value::Long(e.quantity)),
    ])
}

// Writes the fixture (run once, by hand): `cargo test -p schemas --test old_writers -- --ignored write_usage_v1_fixture`.
#[test]
#[ignore = "writes tests/fixtures/usage-v1.avro; run by hand only"]
fn write_usage_v1_fixture() {
    let schema = v1_schema();
    let path = fixture_path();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let file = File::create(&path).unwrap();
    let mut writer = Writer::builder()
        .schema(&schema)
        .writer(file)
        .codec(Codec::Null)
        .marker(*b"quota-ledger-v1!")
        .build()
        .expect("a container writer for UsageEvent v1");
    for e in expected_events() {
        writer.append_value_ref(&v1_value(&e)).expect("the value matches UsageEvent v1");
    }
    writer.flush().unwrap();
    writer.into_inner().unwrap().sync_all().unwrap();
}

// Proves that a container file's sync marker is read from its header: the pinned fixture was written with
// `quota-ledger-v1!`, and every block ends with it too. Bytes that are not a container file are refused.
#[test]
fn the_sync_marker_is_read_from_the_header() {
    let bytes = std::fs::read(fixture_path()).expect("tests/fixtures/usage-v1.avro");
    let marker = schemas::catalog::container_sync_marker(&bytes[..]).expect("a container file");
    assert_eq!(&marker, b"quota-ledger-v1!");
    assert_eq!(bytes[bytes.len() - 16..], marker, "the last block ends with the marker");
    let error = schemas::catalog::container_sync_marker(&b"PAR1 not avro"[..]).unwrap_err();
    assert!(error.to_string().contains("magic"), "{error}");
}

// Proves that the pinned v1 container file reads back as current UsageEvents with default request_id and
// attributes, tagged with the v1 fingerprint.
#[test]
fn usage_v1_container_decodes_to_current_usage_events() {
    let catalog = Catalog::builtin();
    let v1 = v1_fingerprint(catalog);
    let file = File::open(fixture_path())
        .expect("tests/fixtures/usage-v1.avro is missing: run the ignored test write_usage_v1_fixture once");
    let records = catalog.read_container(file).expect("the fixture is an Avro container file");
    assert_eq!(records.event_type, EventType::UsageEvent);
    assert_eq!(records.writer_fingerprint, v1);
    assert_ne!(records.writer_fingerprint, catalog.current(EventType::UsageEvent).fingerprint);

    let records: Vec<_> = records.collect();
    let expected = expected_events();
    assert_eq!(records.len(), expected.len());
    for (i, (record, expected)) in records.into_iter().zip(expected).enumerate() {
        assert_eq!(record.index, i as u64);
        let decoded = record.result.unwrap_or_else(|e| panic!("record {i} does not decode: {e}"));
        let Event::Usage(usage) = &decoded.event else { panic!("record {i} is not a UsageEvent: {decoded:?}") };
        assert_eq!(usage.request_id, None, "record {i}");
        assert!(usage.attributes.is_empty(), "record {i}");
        assert_eq!(decoded, Decoded { event: Event::Usage(expected), writer_fingerprint: v1 }, "record {i}");

        // The raw bytes kept for the record are the producer's: single-object encoding under v1.
        assert_eq!(&record.raw[..2], &[0xC3, 0x01]);
        assert_eq!(&record.raw[2..10], &v1.to_le_bytes());
        assert_eq!(catalog.decode_single_object(&record.raw, Some(EventType::UsageEvent)), Ok(decoded));
    }
}

// Proves that a single-object message from an old producer (magic, v1 fingerprint, v1 body) decodes to the
// current UsageEvent.
#[test]
fn usage_v1_single_object_decodes_to_current_usage_event() {
    let catalog = Catalog::builtin();
    let v1 = v1_fingerprint(catalog);
    let schema = v1_schema();
    assert_eq!(schemas::fingerprint(&schema), v1);

    for expected in expected_events() {
        let body = GenericDatumWriter::builder(&schema)
            .build()
            .unwrap()
            .write_value_to_vec(v1_value(&expected))
            .expect("the value matches UsageEvent v1");
        let mut message = vec![0xC3, 0x01];
        message.extend_from_slice(&v1.to_le_bytes());
        message.extend_from_slice(&body);

        let decoded = catalog.decode_single_object(&message, Some(EventType::UsageEvent));
        assert_eq!(decoded, Ok(Decoded { event: Event::Usage(expected.clone()), writer_fingerprint: v1 }));

        // Re-encoded, the event is written with the current schema and reads back the same.
        let current = catalog.encode_single_object(&Event::Usage(expected.clone()));
        assert_eq!(&current[2..10], &catalog.current(EventType::UsageEvent).fingerprint.to_le_bytes());
        assert_eq!(catalog.decode_single_object(&current, None).map(|d| d.event), Ok(Event::Usage(expected)));
    }
}

// Proves that a PolicyEvent from a producer still on v1 (no `burst`) decodes to the current PolicyEvent as a
// quota (`burst` null), so that adding throttles broke no policy producer.
#[test]
fn policy_v1_single_object_decodes_to_a_quota() {
    use schemas::{Enforcement, PolicyEvent, Window};
    let catalog = Catalog::builtin();
    let v1 = catalog
        .schemas()
        .iter()
        .find(|s| s.file == "history/PolicyEvent.v1.avsc")
        .expect("the catalog keeps PolicyEvent v1");
    assert!(!v1.current);
    let schema = Schema::parse_str(include_str!("../avro/history/PolicyEvent.v1.avsc")).expect("v1 parses");
    assert_eq!(schemas::fingerprint(&schema), v1.fingerprint);
    let value = Value::Record(vec![
        ("event_id".into(), Value::String("pol-v1".into())),
        ("occurred_at".into(), Value::TimestampMicros(at("2026-11-01T00:00:00Z").micros())),
        ("tenant".into(), Value::String("org-1".into())),
        ("subject".into(), Value::Union(0, Box::new(Value::Null))),
        ("metric".into(), Value::String("requests".into())),
        ("source".into(), Value::String("admin".into())),
        ("policy_id".into(), Value::String("daily".into())),
        ("version".into(), Value::Int(3)),
        ("scope".into(), Value::Enum(0, "TENANT".into())),
        ("limit".into(), Value::Long(1_000)),
        ("window".into(), Value::Enum(2, "DAY".into())),
        ("enforcement".into(), Value::Enum(0, "HARD".into())),
        ("effective_from".into(), Value::TimestampMicros(at("2026-11-01T00:00:00Z").micros())),
    ]);
    let body = GenericDatumWriter::builder(&schema).build().unwrap().write_value_to_vec(value).expect("a v1 value");
    let mut message = vec![0xC3, 0x01];
    message.extend_from_slice(&v1.fingerprint.to_le_bytes());
    message.extend_from_slice(&body);
    let decoded = catalog.decode_single_object(&message, Some(EventType::PolicyEvent)).expect("v1 decodes");
    let expected = PolicyEvent {
        version: 3,
        ..PolicyEvent::new(
            Header {
                event_id: "pol-v1".into(),
                occurred_at: at("2026-11-01T00:00:00Z"),
                tenant: "org-1".into(),
                subject: None,
                metric: "requests".into(),
                source: "admin".into(),
                api_key: None,
                project: None,
            },
            "daily",
            1_000,
            Window::DAY,
            Enforcement::HARD,
            at("2026-11-01T00:00:00Z"),
        )
    };
    assert_eq!(decoded, Decoded { event: Event::Policy(expected), writer_fingerprint: v1.fingerprint });
}

// Proves that a DecisionEvent from a producer still on v1 (no `token_name`), as a message and as a ledger entry's
// payload stored before v2, decodes to the current DecisionEvent with `token_name` null: adding which token asked
// broke no enforcer and no ledger.
#[test]
fn decision_v1_decodes_with_no_token_name() {
    use schemas::{DecisionEvent, Outcome, Reason};
    let catalog = Catalog::builtin();
    let v1 = catalog
        .schemas()
        .iter()
        .find(|s| s.file == "history/DecisionEvent.v1.avsc")
        .expect("the catalog keeps DecisionEvent v1");
    assert!(!v1.current);
    let schema = Schema::parse_str(include_str!("../avro/history/DecisionEvent.v1.avsc")).expect("v1 parses");
    assert_eq!(schemas::fingerprint(&schema), v1.fingerprint);
    let null = || Value::Union(0, Box::new(Value::Null));
    let value = Value::Record(vec![
        ("event_id".into(), Value::String("dec-v1".into())),
        ("occurred_at".into(), Value::TimestampMicros(at("2026-11-02T10:00:00Z").micros())),
        ("tenant".into(), Value::String("org-1".into())),
        ("subject".into(), null()),
        ("metric".into(), Value::String("requests".into())),
        ("source".into(), Value::String("gateway".into())),
        ("request_id".into(), Value::String("req-1".into())),
        ("idempotency_key".into(), Value::String("k-1".into())),
        ("amount".into(), Value::Long(3)),
        ("outcome".into(), Value::Enum(1, "DENIED".into())),
        ("reason".into(), Value::Enum(1, "QUOTA_EXCEEDED".into())),
        ("policy_id".into(), Value::Union(1, Box::new(Value::String("daily".into())))),
        ("policy_version".into(), Value::Union(1, Box::new(Value::Int(2)))),
        ("window_start".into(), null()),
        ("window_end".into(), null()),
        ("limit".into(), Value::Union(1, Box::new(Value::Long(100)))),
        ("used_before".into(), Value::Union(1, Box::new(Value::Long(99)))),
        ("remaining".into(), Value::Union(1, Box::new(Value::Long(1)))),
        ("retry_after_ms".into(), null()),
    ]);
    let body = GenericDatumWriter::builder(&schema).build().unwrap().write_value_to_vec(value).expect("a v1 value");
    let mut message = vec![0xC3, 0x01];
    message.extend_from_slice(&v1.fingerprint.to_le_bytes());
    message.extend_from_slice(&body);
    let expected = Event::Decision(DecisionEvent {
        header: Header {
            event_id: "dec-v1".into(),
            occurred_at: at("2026-11-02T10:00:00Z"),
            tenant: "org-1".into(),
            subject: None,
            metric: "requests".into(),
            source: "gateway".into(),
            api_key: None,
            project: None,
        },
        request_id: "req-1".into(),
        idempotency_key: "k-1".into(),
        amount: 3,
        outcome: Outcome::DENIED,
        reason: Reason::QUOTA_EXCEEDED,
        policy_id: Some("daily".into()),
        policy_version: Some(2),
        window_start: None,
        window_end: None,
        limit: Some(100),
        used_before: Some(99),
        remaining: Some(1),
        retry_after_ms: None,
        token_name: None,
    });
    let decoded = catalog.decode_single_object(&message, Some(EventType::DecisionEvent)).expect("v1 decodes");
    assert_eq!(decoded, Decoded { event: expected.clone(), writer_fingerprint: v1.fingerprint });
    let stored = catalog.decode_payload(v1.fingerprint, &body).expect("a ledger entry written before v2");
    assert_eq!(stored, expected);
}

// Proves that a PolicyEvent from a producer still on v2 and a GrantEvent from one on v1 (neither says who made the
// change or why) decode to the current events with `actor` and `reason` null: recording who changed a plan broke no
// producer.
#[test]
fn policy_v2_and_grant_v1_decode_with_no_actor() {
    use schemas::{Enforcement, GrantEvent, PolicyEvent, Window};
    let catalog = Catalog::builtin();
    let message = |file: &str, text: &str, fields: Vec<(&str, Value)>| {
        let old = catalog.schemas().iter().find(|s| s.file == file).expect("the catalog keeps the old version");
        assert!(!old.current);
        let schema = Schema::parse_str(text).expect("the old version parses");
        assert_eq!(schemas::fingerprint(&schema), old.fingerprint);
        let header = vec![
            ("event_id".to_string(), Value::String("e-old".into())),
            ("occurred_at".into(), Value::TimestampMicros(at("2026-11-01T00:00:00Z").micros())),
            ("tenant".into(), Value::String("org-1".into())),
            ("subject".into(), Value::Union(0, Box::new(Value::Null))),
            ("metric".into(), Value::String("requests".into())),
            ("source".into(), Value::String("admin".into())),
        ];
        let value =
            Value::Record(header.into_iter().chain(fields.into_iter().map(|(k, v)| (k.to_string(), v))).collect());
        let body = GenericDatumWriter::builder(&schema).build().unwrap().write_value_to_vec(value).expect("a value");
        let mut message = vec![0xC3, 0x01];
        message.extend_from_slice(&old.fingerprint.to_le_bytes());
        message.extend_from_slice(&body);
        message
    };
    let header = Header {
        event_id: "e-old".into(),
        occurred_at: at("2026-11-01T00:00:00Z"),
        tenant: "org-1".into(),
        subject: None,
        metric: "requests".into(),
        source: "admin".into(),
        api_key: None,
        project: None,
    };
    let policy = message(
        "history/PolicyEvent.v2.avsc",
        include_str!("../avro/history/PolicyEvent.v2.avsc"),
        vec![
            ("policy_id", Value::String("daily".into())),
            ("version", Value::Int(2)),
            ("scope", Value::Enum(0, "TENANT".into())),
            ("limit", Value::Long(1_000)),
            ("window", Value::Enum(2, "DAY".into())),
            ("enforcement", Value::Enum(0, "HARD".into())),
            ("effective_from", Value::TimestampMicros(at("2026-11-01T00:00:00Z").micros())),
            ("burst", Value::Union(1, Box::new(Value::Long(50)))),
        ],
    );
    let decoded = catalog.decode_single_object(&policy, Some(EventType::PolicyEvent)).expect("v2 decodes");
    let expected = PolicyEvent {
        version: 2,
        burst: Some(50),
        ..PolicyEvent::new(header.clone(), "daily", 1_000, Window::DAY, Enforcement::HARD, at("2026-11-01T00:00:00Z"))
    };
    assert_eq!(decoded.event, Event::Policy(expected));
    let grant = message(
        "history/GrantEvent.v1.avsc",
        include_str!("../avro/history/GrantEvent.v1.avsc"),
        vec![
            ("grant_id", Value::String("g-1".into())),
            ("amount", Value::Long(500)),
            ("valid_from", Value::TimestampMicros(at("2026-11-01T00:00:00Z").micros())),
            ("valid_until", Value::TimestampMicros(at("2026-12-01T00:00:00Z").micros())),
            ("reason", Value::String("goodwill".into())),
        ],
    );
    let decoded = catalog.decode_single_object(&grant, Some(EventType::GrantEvent)).expect("v1 decodes");
    let expected = GrantEvent {
        header,
        grant_id: "g-1".into(),
        amount: 500,
        valid_from: at("2026-11-01T00:00:00Z"),
        valid_until: at("2026-12-01T00:00:00Z"),
        reason: "goodwill".into(),
        actor: None,
    };
    assert_eq!(decoded.event, Event::Grant(expected));
}

// Proves that a PolicyEvent from a producer still on v3 (no `time_zone`) decodes to the current event with the zone
// null, so its windows stay UTC, and that a ledger entry written with v3 reads back the same way: giving policies a
// time zone broke no producer and changed no recorded policy.
#[test]
fn policy_v3_decodes_with_no_time_zone() {
    use schemas::{Enforcement, PolicyEvent, Window};
    let catalog = Catalog::builtin();
    let v3 = catalog.schemas().iter().find(|s| s.file == "history/PolicyEvent.v3.avsc").expect("v3 kept");
    assert!(!v3.current);
    let schema = Schema::parse_str(include_str!("../avro/history/PolicyEvent.v3.avsc")).expect("v3 parses");
    assert_eq!(schemas::fingerprint(&schema), v3.fingerprint);
    let micros = |text: &str| Value::TimestampMicros(at(text).micros());
    let fields = vec![
        ("event_id", Value::String("p-v3".into())),
        ("occurred_at", micros("2026-11-01T00:00:00Z")),
        ("tenant", Value::String("org-1".into())),
        ("subject", Value::Union(0, Box::new(Value::Null))),
        ("metric", Value::String("requests".into())),
        ("source", Value::String("admin".into())),
        ("policy_id", Value::String("daily".into())),
        ("version", Value::Int(3)),
        ("scope", Value::Enum(0, "TENANT".into())),
        ("limit", Value::Long(1_000)),
        ("window", Value::Enum(2, "DAY".into())),
        ("enforcement", Value::Enum(0, "HARD".into())),
        ("effective_from", micros("2026-11-01T00:00:00Z")),
        ("burst", Value::Union(0, Box::new(Value::Null))),
        ("actor", Value::Union(1, Box::new(Value::String("alice".into())))),
        ("reason", Value::Union(1, Box::new(Value::String("upgrade".into())))),
    ];
    let value = Value::Record(fields.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
    let body = GenericDatumWriter::builder(&schema).build().unwrap().write_value_to_vec(value).expect("a value");
    let mut message = vec![0xC3, 0x01];
    message.extend_from_slice(&v3.fingerprint.to_le_bytes());
    message.extend_from_slice(&body);
    let expected = Event::Policy(PolicyEvent {
        version: 3,
        actor: Some("alice".into()),
        reason: Some("upgrade".into()),
        ..PolicyEvent::new(
            Header {
                event_id: "p-v3".into(),
                occurred_at: at("2026-11-01T00:00:00Z"),
                tenant: "org-1".into(),
                subject: None,
                metric: "requests".into(),
                source: "admin".into(),
                api_key: None,
                project: None,
            },
            "daily",
            1_000,
            Window::DAY,
            Enforcement::HARD,
            at("2026-11-01T00:00:00Z"),
        )
    });
    let decoded = catalog.decode_single_object(&message, Some(EventType::PolicyEvent)).expect("v3 decodes");
    assert_eq!(decoded, Decoded { event: expected.clone(), writer_fingerprint: v3.fingerprint });
    let Event::Policy(policy) = &decoded.event else { unreachable!() };
    assert_eq!(policy.zone(), schemas::Tz::UTC, "a policy without a zone has UTC windows");
    let stored = catalog.decode_payload(v3.fingerprint, &body).expect("a ledger entry written before v4");
    assert_eq!(stored, expected);
}

// Proves that a ReservationEvent from a producer still on v1 (no RENEW, no `fencing_token`) decodes to the current
// event with the token null, so it stays a reservation of an amount: leases broke no producer of reservations.
#[test]
fn reservation_v1_decodes_with_no_fencing_token() {
    use schemas::{ReservationAction, ReservationEvent};
    let catalog = Catalog::builtin();
    let v1 = catalog.schemas().iter().find(|s| s.file == "history/ReservationEvent.v1.avsc").expect("v1 kept");
    assert!(!v1.current);
    let schema = Schema::parse_str(include_str!("../avro/history/ReservationEvent.v1.avsc")).expect("v1 parses");
    assert_eq!(schemas::fingerprint(&schema), v1.fingerprint);
    let micros = |text: &str| Value::TimestampMicros(at(text).micros());
    let fields = vec![
        ("event_id", Value::String("r-v1".into())),
        ("occurred_at", micros("2026-11-01T00:00:00Z")),
        ("tenant", Value::String("org-1".into())),
        ("subject", Value::Union(0, Box::new(Value::Null))),
        ("metric", Value::String("tokens".into())),
        ("source", Value::String("gateway".into())),
        ("reservation_id", Value::String("res-1".into())),
        ("action", Value::Enum(0, "RESERVE".into())),
        ("amount", Value::Long(500)),
        ("expires_at", Value::Union(1, Box::new(micros("2026-11-01T00:05:00Z")))),
    ];
    let value = Value::Record(fields.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
    let body = GenericDatumWriter::builder(&schema).build().unwrap().write_value_to_vec(value).expect("a value");
    let mut message = vec![0xC3, 0x01];
    message.extend_from_slice(&v1.fingerprint.to_le_bytes());
    message.extend_from_slice(&body);
    let expected = Event::Reservation(ReservationEvent {
        header: Header {
            event_id: "r-v1".into(),
            occurred_at: at("2026-11-01T00:00:00Z"),
            tenant: "org-1".into(),
            subject: None,
            metric: "tokens".into(),
            source: "gateway".into(),
            api_key: None,
            project: None,
        },
        reservation_id: "res-1".into(),
        action: ReservationAction::RESERVE,
        amount: 500,
        expires_at: Some(at("2026-11-01T00:05:00Z")),
        fencing_token: None,
    });
    let decoded = catalog.decode_single_object(&message, None).expect("a v1 reservation decodes");
    assert_eq!(decoded, Decoded { event: expected, writer_fingerprint: v1.fingerprint });
}

// Proves that a PolicyEvent from a producer still on v11 (no alert settings) decodes, as a message and as a ledger
// entry, to the current event with `alert_thresholds` and `alert_subject_share` null: its windows alert at the default
// 80, 90 and 100 percent, as before v12.
#[test]
fn policy_v11_decodes_with_the_default_alerts() {
    use schemas::{Enforcement, PolicyEvent, Window};
    let catalog = Catalog::builtin();
    let v11 = catalog.schemas().iter().find(|s| s.file == "history/PolicyEvent.v11.avsc").expect("v11 kept");
    assert!(!v11.current);
    let schema = Schema::parse_str(include_str!("../avro/history/PolicyEvent.v11.avsc")).expect("v11 parses");
    assert_eq!(schemas::fingerprint(&schema), v11.fingerprint);
    let micros = |text: &str| Value::TimestampMicros(at(text).micros());
    let null = || Value::Union(0, Box::new(Value::Null));
    let fields = vec![
        ("event_id", Value::String("p-v11".into())),
        ("occurred_at", micros("2026-11-01T00:00:00Z")),
        ("tenant", Value::String("org-1".into())),
        ("subject", null()),
        ("project", null()),
        ("api_key", null()),
        ("metric", Value::String("tokens".into())),
        ("source", Value::String("admin".into())),
        ("policy_id", Value::String("cycle".into())),
        ("version", Value::Int(1)),
        ("scope", Value::Enum(0, "TENANT".into())),
        ("limit", Value::Long(1_000)),
        ("window", Value::Enum(6, "BILLING_CYCLE".into())),
        ("enforcement", Value::Enum(1, "SOFT".into())),
        ("effective_from", micros("2026-11-01T00:00:00Z")),
        ("burst", null()),
        ("actor", null()),
        ("reason", null()),
        ("time_zone", null()),
        ("on_failure", null()),
        ("overage_rate", null()),
        ("overage_window", null()),
        ("violation", null()),
        ("window_seconds", null()),
        ("cycle_anchor", Value::Union(1, Box::new(micros("2026-01-17T05:00:00Z")))),
    ];
    let value = Value::Record(fields.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
    let body = GenericDatumWriter::builder(&schema).build().unwrap().write_value_to_vec(value).expect("a value");
    let mut message = vec![0xC3, 0x01];
    message.extend_from_slice(&v11.fingerprint.to_le_bytes());
    message.extend_from_slice(&body);
    let expected = Event::Policy(PolicyEvent {
        cycle_anchor: Some(at("2026-01-17T05:00:00Z")),
        ..PolicyEvent::new(
            Header {
                event_id: "p-v11".into(),
                occurred_at: at("2026-11-01T00:00:00Z"),
                tenant: "org-1".into(),
                subject: None,
                metric: "tokens".into(),
                source: "admin".into(),
                api_key: None,
                project: None,
            },
            "cycle",
            1_000,
            Window::BILLING_CYCLE,
            Enforcement::SOFT,
            at("2026-11-01T00:00:00Z"),
        )
    });
    let decoded = catalog.decode_single_object(&message, Some(EventType::PolicyEvent)).expect("v11 decodes");
    assert_eq!(decoded, Decoded { event: expected.clone(), writer_fingerprint: v11.fingerprint });
    let Event::Policy(policy) = &decoded.event else { unreachable!() };
    assert_eq!(policy.alert_thresholds(), schemas::DEFAULT_ALERT_THRESHOLDS);
    let stored = catalog.decode_payload(v11.fingerprint, &body).expect("a ledger entry written before v12");
    assert_eq!(stored, expected);
}
