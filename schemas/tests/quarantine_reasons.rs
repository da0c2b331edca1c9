// Proves that each kind of bad input (contract §4.4) is refused with its own DecodeError variant and stable code.

use apache_avro::Schema;
use schemas::catalog::SINGLE_OBJECT_HEADER_BYTES;
use schemas::validate::{AMOUNT_MAX, TIMESTAMP_MAX, TIMESTAMP_MIN};
use schemas::{
    AdjustmentEvent, AdjustmentKind, Catalog, DecisionEvent, DecodeError, Enforcement, Event, EventType, GrantEvent,
    Header, Invalid, MAX_MESSAGE_BYTES, Operation, Outcome, PolicyEvent, Reason, ReservationAction, ReservationEvent,
    Scope, Timestamp, UsageEvent, Violation, Window,
};

fn at(rfc3339: &str) -> Timestamp {
    Timestamp::parse_rfc3339(rfc3339).expect("a valid RFC 3339 literal")
}

fn header(event_id: &str) -> Header {
    Header {
        event_id: event_id.into(),
        occurred_at: at("2026-11-02T10:00:00Z"),
        tenant: "org-42".into(),
        subject: Some("user-7".into()),
        metric: "tokens".into(),
        source: "api".into(),
        api_key: None,
        project: None,
    }
}

fn usage() -> UsageEvent {
    UsageEvent {
        header: header("u-1"),
        quantity: 12,
        request_id: Some("req-81f3".into()),
        attributes: [("model".to_string(), "small".to_string()), ("region".to_string(), "eu".to_string())].into(),
    }
}

fn decision() -> DecisionEvent {
    DecisionEvent {
        header: header("d-1"),
        request_id: "req-81f3".into(),
        idempotency_key: "idem-1".into(),
        amount: 12,
        outcome: Outcome::DENIED,
        reason: Reason::QUOTA_EXCEEDED,
        policy_id: Some("p-1".into()),
        policy_version: Some(3),
        window_start: Some(at("2026-11-01T00:00:00Z")),
        window_end: Some(at("2026-12-01T00:00:00Z")),
        limit: Some(1000),
        used_before: Some(995),
        remaining: Some(5),
        retry_after_ms: Some(60_000),
        token_name: None,
    }
}

fn reservation() -> ReservationEvent {
    ReservationEvent {
        header: header("r-1"),
        reservation_id: "res-1".into(),
        action: ReservationAction::RESERVE,
        amount: 50,
        expires_at: Some(at("2026-11-02T10:05:00Z")),
        fencing_token: None,
    }
}

/// One valid event of every record type, each with every optional field set.
fn samples() -> Vec<Event> {
    vec![
        Event::Usage(usage()),
        Event::Decision(decision()),
        Event::Reservation(reservation()),
        Event::Grant(GrantEvent {
            header: header("g-1"),
            grant_id: "g-1".into(),
            amount: 100,
            valid_from: at("2026-11-01T00:00:00Z"),
            valid_until: at("2026-12-01T00:00:00Z"),
            reason: "support ticket 7".into(),
            actor: None,
        }),
        Event::Policy(PolicyEvent {
            version: 3,
            overage_rate: Some(10),
            overage_window: Some(Window::MINUTE),
            ..PolicyEvent::new(header("p-1"), "p-1", 1000, Window::MONTH, Enforcement::HARD, at("2026-11-01T00:00:00Z"))
        }),
        Event::Adjustment(AdjustmentEvent {
            header: header("a-1"),
            adjustment_id: "a-1".into(),
            kind: AdjustmentKind::OVERSHOOT,
            policy_id: Some("p-1".into()),
            window_start: Some(at("2026-11-01T00:00:00Z")),
            window_end: Some(at("2026-12-01T00:00:00Z")),
            amount: 7,
            refs: vec!["u-1".into(), "u-2".into()],
            run_id: "run-1".into(),
            scope: None,
        }),
    ]
}

/// Decodes a message expected to fail, from the UsageEvent topic unless said otherwise.
fn refuse(catalog: &Catalog, bytes: &[u8], expected: Option<EventType>) -> DecodeError {
    match catalog.decode_single_object(bytes, expected) {
        Ok(decoded) => panic!("{} bytes decoded to {decoded:?}, expected an error", bytes.len()),
        Err(e) => e,
    }
}

// Proves that the samples used below are valid, so that each test's one change is what gets refused.
#[test]
fn samples_decode() {
    let catalog = Catalog::builtin();
    for e in samples() {
        let decoded = catalog.decode_single_object(&catalog.encode_single_object(&e), Some(e.event_type()));
        assert_eq!(decoded.map(|d| d.event), Ok(e));
    }
}

// Proves that a message over MAX_MESSAGE_BYTES is refused as "oversize" before anything else is looked at.
#[test]
fn oversize() {
    let catalog = Catalog::builtin();
    let mut bytes = catalog.encode_single_object(&Event::Usage(usage()));
    bytes.resize(MAX_MESSAGE_BYTES + 1, 0);
    let e = refuse(catalog, &bytes, Some(EventType::UsageEvent));
    assert_eq!(e, DecodeError::Oversize { size: MAX_MESSAGE_BYTES + 1, limit: MAX_MESSAGE_BYTES });
    assert_eq!(e.code(), "oversize");
}

// Proves that a message shorter than the 10-byte single-object header is refused as "truncated".
#[test]
fn truncated_header() {
    let catalog = Catalog::builtin();
    let bytes = catalog.encode_single_object(&Event::Usage(usage()));
    let e = refuse(catalog, &bytes[..5], Some(EventType::UsageEvent));
    assert_eq!(e, DecodeError::TruncatedHeader { size: 5 });
    assert_eq!(e.code(), "truncated");
}

// Proves that a message that does not start with C3 01 is refused as "bad_magic".
#[test]
fn bad_magic() {
    let catalog = Catalog::builtin();
    let mut bytes = catalog.encode_single_object(&Event::Usage(usage()));
    bytes[0] = b'{';
    bytes[1] = b'"';
    let e = refuse(catalog, &bytes, Some(EventType::UsageEvent));
    assert_eq!(e, DecodeError::BadMagic { found: [b'{', b'"'] });
    assert_eq!(e.code(), "bad_magic");
}

// Proves that a fingerprint that is not in the catalog is refused as "unknown_fingerprint".
#[test]
fn unknown_fingerprint() {
    let catalog = Catalog::builtin();
    let mut bytes = catalog.encode_single_object(&Event::Usage(usage()));
    let unknown = Schema::parse_str(r#"{"type":"record","name":"Other","fields":[{"name":"x","type":"long"}]}"#)
        .map(|s| schemas::fingerprint(&s))
        .unwrap();
    assert!(catalog.by_fingerprint(unknown).is_none());
    bytes[2..10].copy_from_slice(&unknown.to_le_bytes());
    let e = refuse(catalog, &bytes, Some(EventType::UsageEvent));
    assert_eq!(e, DecodeError::UnknownFingerprint { fingerprint: unknown });
    assert_eq!(e.code(), "unknown_fingerprint");
}

// Proves that a DecisionEvent arriving on the UsageEvent topic is refused as "wrong_type".
#[test]
fn wrong_type() {
    let catalog = Catalog::builtin();
    let bytes = catalog.encode_single_object(&Event::Decision(decision()));
    let e = refuse(catalog, &bytes, Some(EventType::UsageEvent));
    assert_eq!(e, DecodeError::WrongType { expected: EventType::UsageEvent, found: EventType::DecisionEvent });
    assert_eq!(e.code(), "wrong_type");
}

// Proves that a valid message cut short by a few bytes is refused as "truncated".
#[test]
fn truncated_body() {
    let catalog = Catalog::builtin();
    let bytes = catalog.encode_single_object(&Event::Usage(usage()));
    let e = refuse(catalog, &bytes[..bytes.len() - 3], Some(EventType::UsageEvent));
    assert!(
        matches!(e, DecodeError::TruncatedBody { event_type: EventType::UsageEvent, .. }),
        "expected TruncatedBody, got {e:?}"
    );
    assert_eq!(e.code(), "truncated");
}

// Proves that every cut of every record type's body, at every length, is refused as "truncated": never decoded
// to a different event (apache-avro reads a missing union index as null and a missing string as null).
#[test]
fn truncated_body_at_every_length() {
    let catalog = Catalog::builtin();
    let mut wrong = Vec::new();
    for event in samples() {
        let bytes = catalog.encode_single_object(&event);
        for len in SINGLE_OBJECT_HEADER_BYTES..bytes.len() {
            let result = catalog.decode_single_object(&bytes[..len], Some(event.event_type()));
            if !matches!(&result, Err(e @ DecodeError::TruncatedBody { .. }) if e.code() == "truncated") {
                wrong.push(format!("{} cut to {len} of {} bytes: {result:?}", event.event_type(), bytes.len()));
            }
        }
    }
    assert!(wrong.is_empty(), "cuts not refused as TruncatedBody:\n{}", wrong.join("\n"));
}

// Proves that bytes after a complete body are refused ("malformed_body") rather than ignored.
#[test]
fn trailing_bytes() {
    let catalog = Catalog::builtin();
    let mut bytes = catalog.encode_single_object(&Event::Usage(usage()));
    bytes.extend_from_slice(&[0, 0]);
    let e = refuse(catalog, &bytes, Some(EventType::UsageEvent));
    assert_eq!(e, DecodeError::TrailingBytes { event_type: EventType::UsageEvent, trailing: 2 });
    assert_eq!(e.code(), "malformed_body");
}

// Proves that a body that does not follow its schema (an enum index past the last symbol) is "malformed_body".
#[test]
fn malformed_body() {
    let catalog = Catalog::builtin();
    let mut reservation = reservation();
    reservation.action = ReservationAction::RELEASE;
    reservation.amount = 0;
    reservation.expires_at = None;
    let mut bytes = catalog.encode_single_object(&Event::Reservation(reservation));
    // The body ends with: action (enum index 2 = zig-zag 0x04), amount 0 (0x00), expires_at null (0x00), fencing_token
    // null (0x00).
    let n = bytes.len();
    assert_eq!(&bytes[n - 4..], &[0x04, 0x00, 0x00, 0x00]);
    bytes[n - 4] = 0x08; // index 4: ReservationAction has four symbols
    let e = refuse(catalog, &bytes, Some(EventType::ReservationEvent));
    assert!(
        matches!(e, DecodeError::MalformedBody { event_type: EventType::ReservationEvent, .. }),
        "expected MalformedBody, got {e:?}"
    );
    assert_eq!(e.code(), "malformed_body");
}

// Proves that a UsageEvent with a negative quantity is refused as "negative_quantity".
#[test]
fn negative_quantity() {
    let catalog = Catalog::builtin();
    let mut event = usage();
    event.quantity = -1;
    let e = refuse(catalog, &catalog.encode_single_object(&Event::Usage(event)), Some(EventType::UsageEvent));
    assert_eq!(e, DecodeError::Invalid(Invalid::Negative { field: "quantity", value: -1, minimum: 0 }));
    assert_eq!(e.code(), "negative_quantity");
}

// Proves that a quantity above 2^53 - 1 is refused as "quantity_too_large", and 2^53 - 1 itself accepted: sums of
// such quantities overflowed the ledger's 64-bit totals.
#[test]
fn quantity_too_large() {
    let catalog = Catalog::builtin();
    let mut event = usage();
    event.quantity = AMOUNT_MAX + 1;
    let e = refuse(catalog, &catalog.encode_single_object(&Event::Usage(event.clone())), Some(EventType::UsageEvent));
    assert_eq!(
        e,
        DecodeError::Invalid(Invalid::TooLarge { field: "quantity", value: AMOUNT_MAX + 1, maximum: AMOUNT_MAX })
    );
    assert_eq!(e.code(), "quantity_too_large");
    event.quantity = AMOUNT_MAX;
    assert!(schemas::validate::validate(&Event::Usage(event)).is_ok());
}

// Proves that usage, decisions, reservations and grants of tenant "*" (the plan defaults' name) are refused as
// "inconsistent_fields", and a PolicyEvent of "*" is not.
#[test]
fn the_plan_default_tenant_carries_only_policies() {
    let mut event = usage();
    event.header.tenant = "*".into();
    let e = schemas::validate::validate(&Event::Usage(event)).unwrap_err();
    assert_eq!(e.code(), "inconsistent_fields");
    assert!(e.to_string().contains("names the plan defaults"), "{e}");
}

// Proves that an event with an empty tenant is refused as "empty_tenant".
#[test]
fn empty_tenant() {
    let catalog = Catalog::builtin();
    let mut event = usage();
    event.header.tenant = String::new();
    let e = refuse(catalog, &catalog.encode_single_object(&Event::Usage(event)), Some(EventType::UsageEvent));
    assert_eq!(e, DecodeError::Invalid(Invalid::Empty { field: "tenant" }));
    assert_eq!(e.code(), "empty_tenant");
}

// Proves that timestamps outside [TIMESTAMP_MIN, TIMESTAMP_MAX) are refused as "timestamp_out_of_range", and
// that both ends are where the constants say.
#[test]
fn timestamp_out_of_range() {
    let catalog = Catalog::builtin();
    let with_time = |occurred_at: Timestamp| {
        let mut event = usage();
        event.header.occurred_at = occurred_at;
        catalog.decode_single_object(&catalog.encode_single_object(&Event::Usage(event)), Some(EventType::UsageEvent))
    };
    for value in [TIMESTAMP_MAX, Timestamp(TIMESTAMP_MIN.0 - 1), Timestamp(0), Timestamp(i64::MIN)] {
        let e = with_time(value).expect_err("out of range");
        assert_eq!(e, DecodeError::Invalid(Invalid::TimestampOutOfRange { field: "occurred_at", value }));
        assert_eq!(e.code(), "timestamp_out_of_range");
    }
    assert!(with_time(TIMESTAMP_MIN).is_ok());
    assert!(with_time(Timestamp(TIMESTAMP_MAX.0 - 1)).is_ok());
}

// Proves that a RESERVE without expires_at is refused as "inconsistent_fields".
#[test]
fn reserve_without_expires_at() {
    let catalog = Catalog::builtin();
    let mut event = reservation();
    event.expires_at = None;
    let bytes = catalog.encode_single_object(&Event::Reservation(event));
    let e = refuse(catalog, &bytes, Some(EventType::ReservationEvent));
    assert!(
        matches!(e, DecodeError::Invalid(Invalid::Inconsistent { field: "expires_at", .. })),
        "expected Inconsistent expires_at, got {e:?}"
    );
    assert_eq!(e.code(), "inconsistent_fields");
}

// Proves that a throttled overage (PolicyEvent v7) is refused as "inconsistent_fields" unless it has both its rate
// (at least 1) and a window of consumption, on a HARD quota: on SOFT the excess is billed, and a throttle or a
// CONCURRENT policy has no allowance to go beyond.
#[test]
fn a_throttled_overage_is_for_hard_quotas() {
    let Event::Policy(valid) = samples().remove(4) else { unreachable!("the fifth sample is the policy") };
    assert!(schemas::validate::validate(&Event::Policy(valid.clone())).is_ok());
    type Change = fn(&mut PolicyEvent);
    let refusals: [(&str, Change); 6] = [
        ("no window", |p| p.overage_window = None),
        ("a window of leases", |p| p.overage_window = Some(Window::CONCURRENT)),
        ("SOFT", |p| p.enforcement = Enforcement::SOFT),
        ("a throttle", |p| p.burst = Some(5)),
        ("CONCURRENT", |p| p.window = Window::CONCURRENT),
        ("no rate", |p| p.overage_rate = None),
    ];
    for (what, change) in refusals {
        let mut policy = valid.clone();
        change(&mut policy);
        let e = schemas::validate::validate(&Event::Policy(policy)).unwrap_err();
        assert_eq!(e.code(), "inconsistent_fields", "{what}: {e}");
    }
    let e = schemas::validate::validate(&Event::Policy(PolicyEvent { overage_rate: Some(0), ..valid })).unwrap_err();
    assert_eq!(e.code(), "negative_quantity", "a rate of 0 is a wall: {e}");
}

// Proves that input that is not an Avro container file is refused as "malformed_container".
#[test]
fn not_a_container_file() {
    let catalog = Catalog::builtin();
    let e = catalog.read_container(&b"not an avro container file"[..]).err().expect("refused");
    assert!(matches!(e, DecodeError::Container { .. }), "expected Container, got {e:?}");
    assert_eq!(e.code(), "malformed_container");
}

// Proves that a container file of a record that is not in the catalog is refused as "wrong_type".
#[test]
fn container_of_unknown_record() {
    let catalog = Catalog::builtin();
    let schema =
        Schema::parse_str(r#"{"type":"record","name":"Other","namespace":"x","fields":[{"name":"a","type":"long"}]}"#)
            .unwrap();
    let mut writer = apache_avro::Writer::new(&schema, Vec::new()).unwrap();
    writer.append_value_ref(&apache_avro::types::Value::Record(vec![("a".into(), 1i64.into())])).unwrap();
    let bytes = writer.into_inner().unwrap();
    let e = catalog.read_container(&bytes[..]).err().expect("refused");
    assert_eq!(e, DecodeError::UnknownRecord { name: "x.Other".into() });
    assert_eq!(e.code(), "wrong_type");
}

// Proves contract §9.2's bounds: a tenant, subject or metric longer than 128 bytes, or an idempotency_key or request_id
// longer than 256, is refused as "field_too_long", and exactly the limit passes.
#[test]
fn field_too_long() {
    use schemas::validate::{ID_BYTES_MAX, NAME_BYTES_MAX};
    let catalog = Catalog::builtin();
    let decode = |event: Event| catalog.decode_single_object(&catalog.encode_single_object(&event), None);
    type Set<E> = fn(&mut E, String);
    let names: [(&str, Set<UsageEvent>); 3] = [
        ("tenant", |e, v| e.header.tenant = v),
        ("subject", |e, v| e.header.subject = Some(v)),
        ("metric", |e, v| e.header.metric = v),
    ];
    for (field, set) in names {
        let mut fits = usage();
        set(&mut fits, "é".repeat(NAME_BYTES_MAX / 2));
        assert!(decode(Event::Usage(fits)).is_ok(), "{field} of exactly {NAME_BYTES_MAX} bytes passes");
        let mut long = usage();
        set(&mut long, "x".repeat(NAME_BYTES_MAX + 1));
        let e = decode(Event::Usage(long)).unwrap_err();
        assert_eq!(
            e,
            DecodeError::Invalid(Invalid::TooLong { field, bytes: NAME_BYTES_MAX + 1, maximum: NAME_BYTES_MAX })
        );
        assert_eq!(e.code(), "field_too_long");
    }
    let ids: [(&str, Set<DecisionEvent>); 2] =
        [("request_id", |e, v| e.request_id = v), ("idempotency_key", |e, v| e.idempotency_key = v)];
    for (field, set) in ids {
        let mut fits = decision();
        set(&mut fits, "k".repeat(ID_BYTES_MAX));
        assert!(decode(Event::Decision(fits)).is_ok(), "{field} of exactly {ID_BYTES_MAX} bytes passes");
        let mut long = decision();
        set(&mut long, "k".repeat(ID_BYTES_MAX + 1));
        assert_eq!(decode(Event::Decision(long)).unwrap_err().code(), "field_too_long", "{field}");
    }
    let mut usage_id = usage();
    usage_id.request_id = Some("r".repeat(ID_BYTES_MAX + 1));
    assert_eq!(decode(Event::Usage(usage_id)).unwrap_err().code(), "field_too_long", "a usage event's request_id");
    // A token's name is a name: `audit why` shows it.
    let mut token = decision();
    token.token_name = Some("é".repeat(NAME_BYTES_MAX / 2));
    assert!(decode(Event::Decision(token.clone())).is_ok(), "a token_name of exactly {NAME_BYTES_MAX} bytes passes");
    token.token_name = Some("t".repeat(NAME_BYTES_MAX + 1));
    assert_eq!(decode(Event::Decision(token)).unwrap_err().code(), "field_too_long", "token_name");
}

// Proves that a control character in a name or id (a newline that would forge a line of `status` or of a CSV, an
// escape sequence for a terminal) is refused as "control_character", naming the field and where.
#[test]
fn control_character() {
    let catalog = Catalog::builtin();
    let decode = |event: Event| catalog.decode_single_object(&catalog.encode_single_object(&event), None);
    let mut tenant = usage();
    tenant.header.tenant = "org-42\nTOTAL,0".into();
    let e = decode(Event::Usage(tenant)).unwrap_err();
    assert_eq!(e, DecodeError::Invalid(Invalid::ControlCharacter { field: "tenant", code_point: 0x0A, at: 6 }));
    assert_eq!(e.code(), "control_character");
    let mut metric = usage();
    metric.header.metric = "tokens\u{1b}[2J".into();
    assert_eq!(decode(Event::Usage(metric)).unwrap_err().code(), "control_character");
    let mut key = decision();
    key.idempotency_key = "k\u{7f}".into();
    assert_eq!(decode(Event::Decision(key)).unwrap_err().code(), "control_character");
    let mut token = decision();
    token.token_name = Some("ops\nforged line".into());
    assert_eq!(decode(Event::Decision(token.clone())).unwrap_err().code(), "control_character", "token_name");
    token.token_name = Some(String::new());
    assert_eq!(
        decode(Event::Decision(token)).unwrap_err(),
        DecodeError::Invalid(Invalid::Empty { field: "token_name" })
    );
    let mut subject = usage();
    subject.header.subject = Some(String::new());
    assert_eq!(decode(Event::Usage(subject)).unwrap_err(), DecodeError::Invalid(Invalid::Empty { field: "subject" }));
}

// Regressions (found by the container_file fuzz target): a container file whose writer schema has a null where
// the canonical form expects a schema (`"symbols": null` in a field) panicked inside apache-avro, and one with a
// control character in a name panicked reading apache-avro's canonical form back as JSON, both while its
// fingerprint was computed, stopping `ingest --file`. Each is refused as a malformed container, saying why.
#[test]
fn fuzz_writer_schema_without_canonical_form() {
    let refuse = |bytes: &[u8]| match Catalog::builtin().read_container(bytes) {
        Ok(_) => panic!("a writer schema without a canonical form is refused"),
        Err(error) => error,
    };
    let error = refuse(include_bytes!("fixtures/fuzz-writer-schema-null-symbols.avro"));
    assert_eq!(error.code(), "malformed_container");
    assert!(error.to_string().contains("symbols is null"), "{error}");
    let error = refuse(include_bytes!("fixtures/fuzz-writer-schema-control-character.avro"));
    assert_eq!(error.code(), "malformed_container");
    assert!(error.to_string().contains("not plain text"), "{error}");
}

// Regression (found by the container_file fuzz target): a container record cut short inside its block read, through
// apache-avro, as a DecisionEvent whose policy_id branch held null, which resolved to a valid-looking event with
// the producer's values gone. It is refused as truncated, and never recorded.
#[test]
fn fuzz_container_record_cut_short() {
    let bytes = include_bytes!("fixtures/fuzz-record-cut-short.avro");
    let records: Vec<_> = Catalog::builtin().read_container(&bytes[..]).expect("a readable header").collect();
    let error = records[0].result.as_ref().expect_err("the damaged record is refused");
    assert_eq!(error.code(), "truncated", "{error}");
    assert!(error.to_string().contains("does not match its writer schema"), "{error}");
}

// Proves that a policy naming a time zone the IANA database does not know (a typo, another spelling, an offset) is
// refused as "unknown_time_zone", quoting the name, and that IANA names, UTC included, are accepted.
#[test]
fn unknown_time_zone() {
    let catalog = Catalog::builtin();
    let Some(Event::Policy(policy)) = samples().into_iter().find(|e| matches!(e, Event::Policy(_))) else {
        unreachable!("the samples hold a policy")
    };
    for name in ["America/New_Yrok", "america/new_york", "+05:30", "EST5", ""] {
        let event = Event::Policy(PolicyEvent { time_zone: Some(name.into()), ..policy.clone() });
        let e = refuse(catalog, &catalog.encode_single_object(&event), Some(EventType::PolicyEvent));
        assert_eq!(e, DecodeError::Invalid(Invalid::UnknownTimeZone { value: name.into() }), "{name:?}");
        assert_eq!(e.code(), "unknown_time_zone");
        assert!(e.to_string().contains(&format!("{name:?}")), "{e}");
    }
    for name in ["America/New_York", "Europe/Berlin", "Asia/Kolkata", "UTC", "Etc/UTC"] {
        let event = Event::Policy(PolicyEvent { time_zone: Some(name.into()), ..policy.clone() });
        assert!(schemas::validate::validate(&event).is_ok(), "{name}");
    }
}

// Proves that a gauge quota (PolicyEvent v8 `violation`) is refused as "inconsistent_fields" unless it is HARD or
// SHADOW, of TENANT scope, over a window of consumption, and neither a throttle nor a throttled overage; and what each
// violation refuses.
#[test]
fn a_gauge_quota_is_a_tenant_level_judged_hard_or_shadow() {
    let Event::Policy(quota) = samples().remove(4) else { unreachable!("the fifth sample is the policy") };
    let valid =
        PolicyEvent { violation: Some(Violation::NO_WRITES), overage_rate: None, overage_window: None, ..quota };
    assert!(schemas::validate::validate(&Event::Policy(valid.clone())).is_ok());
    let shadow = PolicyEvent { enforcement: Enforcement::SHADOW, ..valid.clone() };
    assert!(schemas::validate::validate(&Event::Policy(shadow)).is_ok());
    type Change = fn(&mut PolicyEvent);
    let refusals: [(&str, Change); 5] = [
        ("SOFT", |p| p.enforcement = Enforcement::SOFT),
        ("SUBJECT", |p| p.scope = Scope::SUBJECT),
        ("a throttle", |p| p.burst = Some(5)),
        ("CONCURRENT", |p| p.window = Window::CONCURRENT),
        ("a throttled overage", |p| (p.overage_rate, p.overage_window) = (Some(1), Some(Window::MINUTE))),
    ];
    for (what, change) in refusals {
        let mut policy = valid.clone();
        change(&mut policy);
        let e = schemas::validate::validate(&Event::Policy(policy)).unwrap_err();
        assert_eq!(e.code(), "inconsistent_fields", "{what}: {e}");
    }
    use Operation::*;
    let refused = |v: Violation| [None, Some(insert), Some(update), Some(delete), Some(read)].map(|op| v.refuses(op));
    assert_eq!(refused(Violation::NO_INSERTS), [true, true, false, false, false]);
    assert_eq!(refused(Violation::NO_WRITES), [true, true, true, false, false]);
    assert_eq!(refused(Violation::DISABLE), [true, true, true, true, true]);
}

// Proves that a ROLLING window (PolicyEvent v10) comes with its length, from 1 s to 31 days, and only with it, on a
// quota: the length without ROLLING, ROLLING without a length, and ROLLING on a throttle, a throttled overage or a gauge
// are "inconsistent_fields"; a length out of range is named by its bound.
#[test]
fn a_rolling_window_has_its_length_and_is_a_quota() {
    let Event::Policy(quota) = samples().remove(4) else { unreachable!("the fifth sample is the policy") };
    let valid = PolicyEvent {
        window: Window::ROLLING,
        window_seconds: Some(86_400),
        cycle_anchor: None,
        burst: None,
        overage_rate: None,
        overage_window: None,
        violation: None,
        ..quota
    };
    assert!(schemas::validate::validate(&Event::Policy(valid.clone())).is_ok());
    type Change = fn(&mut PolicyEvent);
    let refusals: [(&str, &str, Change); 7] = [
        ("no length", "inconsistent_fields", |p| p.window_seconds = None),
        ("a length of a DAY", "inconsistent_fields", |p| p.window = Window::DAY),
        ("a throttle", "inconsistent_fields", |p| p.burst = Some(5)),
        ("a throttled overage", "inconsistent_fields", |p| {
            (p.overage_rate, p.overage_window) = (Some(1), Some(Window::MINUTE))
        }),
        ("a gauge", "inconsistent_fields", |p| p.violation = Some(Violation::NO_WRITES)),
        ("0 s", "negative_quantity", |p| p.window_seconds = Some(0)),
        ("32 days", "quantity_too_large", |p| p.window_seconds = Some(32 * 86_400)),
    ];
    for (what, code, change) in refusals {
        let mut policy = valid.clone();
        change(&mut policy);
        let e = schemas::validate::validate(&Event::Policy(policy)).unwrap_err();
        assert_eq!(e.code(), code, "{what}: {e}");
    }
    let overage_of_rolling = PolicyEvent {
        window: Window::DAY,
        window_seconds: None,
        cycle_anchor: None,
        overage_rate: Some(1),
        overage_window: Some(Window::ROLLING),
        ..valid
    };
    let e = schemas::validate::validate(&Event::Policy(overage_of_rolling)).unwrap_err();
    assert_eq!(e.code(), "inconsistent_fields", "an overage per ROLLING: {e}");
}

// Proves a BILLING_CYCLE window (PolicyEvent v11) takes its anchor and nothing of a throttle or a gauge: without an
// anchor, an anchor on another window, a throttle, a throttled overage, a gauge and an anchor outside 2000 to 2100
// are each quarantined with their reason, and an overage counted per BILLING_CYCLE is refused.
#[test]
fn a_billing_cycle_has_its_anchor_and_is_a_quota() {
    let Event::Policy(quota) = samples().remove(4) else { unreachable!("the fifth sample is the policy") };
    let anchor = Timestamp::parse_rfc3339("2026-01-17T05:00:00Z").unwrap();
    let valid = PolicyEvent {
        window: Window::BILLING_CYCLE,
        window_seconds: None,
        cycle_anchor: Some(anchor),
        time_zone: Some("America/New_York".into()),
        burst: None,
        overage_rate: None,
        overage_window: None,
        violation: None,
        ..quota
    };
    assert!(schemas::validate::validate(&Event::Policy(valid.clone())).is_ok());
    type Change = fn(&mut PolicyEvent);
    let refusals: [(&str, &str, Change); 7] = [
        ("no anchor", "inconsistent_fields", |p| p.cycle_anchor = None),
        ("an anchor of a MONTH", "inconsistent_fields", |p| p.window = Window::MONTH),
        ("a throttle", "inconsistent_fields", |p| p.burst = Some(5)),
        ("a throttled overage", "inconsistent_fields", |p| {
            (p.overage_rate, p.overage_window) = (Some(1), Some(Window::MINUTE))
        }),
        ("a gauge", "inconsistent_fields", |p| p.violation = Some(Violation::NO_WRITES)),
        ("a ROLLING length", "inconsistent_fields", |p| p.window_seconds = Some(60)),
        ("an anchor in 2100", "timestamp_out_of_range", |p| {
            p.cycle_anchor = Some(Timestamp::parse_rfc3339("2100-01-01T00:00:00Z").unwrap())
        }),
    ];
    for (what, code, change) in refusals {
        let mut policy = valid.clone();
        change(&mut policy);
        let e = schemas::validate::validate(&Event::Policy(policy)).unwrap_err();
        assert_eq!(e.code(), code, "{what}: {e}");
    }
    let overage_per_cycle = PolicyEvent {
        window: Window::DAY,
        cycle_anchor: None,
        overage_rate: Some(1),
        overage_window: Some(Window::BILLING_CYCLE),
        ..valid
    };
    let e = schemas::validate::validate(&Event::Policy(overage_per_cycle)).unwrap_err();
    assert_eq!(e.code(), "inconsistent_fields", "an overage per BILLING_CYCLE: {e}");
}

// Proves a policy's own alert settings (PolicyEvent v12) are quarantined with their reason when out of range, out of
// order, too many, a subject share of a SUBJECT policy, or set on a throttle, a gauge, a CONCURRENT or a ROLLING
// policy, and that an empty list (no THRESHOLD alert) and settings on a BILLING_CYCLE quota are valid.
#[test]
fn alert_settings_are_on_alerted_quotas_and_in_range() {
    let Event::Policy(quota) = samples().remove(4) else { unreachable!("the fifth sample is the policy") };
    let valid = PolicyEvent {
        overage_rate: None,
        overage_window: None,
        alert_thresholds: Some(vec![50, 75, 100, 1_000]),
        alert_subject_share: Some(40),
        ..quota
    };
    assert!(schemas::validate::validate(&Event::Policy(valid.clone())).is_ok());
    type Change = fn(&mut PolicyEvent);
    let accepted: [(&str, Change); 3] = [
        ("an empty list", |p| p.alert_thresholds = Some(vec![])),
        ("ten thresholds", |p| p.alert_thresholds = Some((1..=10).collect())),
        ("a BILLING_CYCLE", |p| (p.window, p.cycle_anchor) = (Window::BILLING_CYCLE, Some(at("2026-01-17T05:00:00Z")))),
    ];
    for (what, change) in accepted {
        let mut policy = valid.clone();
        change(&mut policy);
        assert_eq!(schemas::validate::validate(&Event::Policy(policy)), Ok(()), "{what}");
    }
    let refusals: [(&str, &str, Change); 13] = [
        ("a threshold of 0", "negative_quantity", |p| p.alert_thresholds = Some(vec![0, 50])),
        ("a threshold of 1001", "quantity_too_large", |p| p.alert_thresholds = Some(vec![50, 1_001])),
        ("thresholds out of order", "inconsistent_fields", |p| p.alert_thresholds = Some(vec![90, 80])),
        ("a threshold twice", "inconsistent_fields", |p| p.alert_thresholds = Some(vec![80, 80])),
        ("eleven thresholds", "inconsistent_fields", |p| p.alert_thresholds = Some((1..=11).collect())),
        ("a share of 0", "negative_quantity", |p| p.alert_subject_share = Some(0)),
        ("a share of 100", "quantity_too_large", |p| p.alert_subject_share = Some(100)),
        ("a share of a SUBJECT policy", "inconsistent_fields", |p| {
            (p.scope, p.alert_thresholds) = (Scope::SUBJECT, None)
        }),
        ("thresholds of a throttle", "inconsistent_fields", |p| (p.burst, p.alert_subject_share) = (Some(5), None)),
        ("a share of a gauge", "inconsistent_fields", |p| {
            (p.violation, p.alert_thresholds) = (Some(Violation::NO_WRITES), None)
        }),
        ("thresholds of a CONCURRENT policy", "inconsistent_fields", |p| {
            (p.window, p.alert_subject_share) = (Window::CONCURRENT, None)
        }),
        ("thresholds of a ROLLING window", "inconsistent_fields", |p| {
            (p.window, p.window_seconds, p.alert_subject_share) = (Window::ROLLING, Some(3_600), None)
        }),
        ("a share of a ROLLING window", "inconsistent_fields", |p| {
            (p.window, p.window_seconds, p.alert_thresholds) = (Window::ROLLING, Some(3_600), None)
        }),
    ];
    for (what, code, change) in refusals {
        let mut policy = valid.clone();
        change(&mut policy);
        let e = schemas::validate::validate(&Event::Policy(policy)).unwrap_err();
        assert_eq!(e.code(), code, "{what}: {e}");
    }
}

// Proves a capacity lease's step carries what its action needs and nothing it cannot, each miss refused with its field.
#[test]
fn capacity_lease_steps_carry_what_their_action_needs() {
    use schemas::{CapacityLeaseAction::*, CapacityLeaseEvent};
    let grant = CapacityLeaseEvent {
        header: Header { subject: None, ..header("cl-1-grant") },
        capacity_lease_id: "cl-1".into(),
        action: GRANT,
        holder: "shard-0001".into(),
        policy_id: "hot".into(),
        policy_version: 1,
        window_start: at("2026-11-02T10:00:00Z"),
        window_end: at("2026-11-02T10:01:00Z"),
        units: 40,
        used: None,
        expires_at: Some(at("2026-11-02T10:00:10Z")),
    };
    let judged = |e: CapacityLeaseEvent| schemas::validate::validate(&Event::CapacityLease(e));
    assert!(judged(grant.clone()).is_ok());
    let returned = CapacityLeaseEvent { action: RETURN, units: 15, used: Some(25), expires_at: None, ..grant.clone() };
    assert!(judged(returned.clone()).is_ok());
    let expired = CapacityLeaseEvent { action: EXPIRE, units: 0, used: None, expires_at: None, ..grant.clone() };
    assert!(judged(expired.clone()).is_ok());
    let refused = [
        (CapacityLeaseEvent { units: 0, ..grant.clone() }, "units", "negative_quantity"),
        (CapacityLeaseEvent { expires_at: None, ..grant.clone() }, "expires_at", "inconsistent_fields"),
        (
            CapacityLeaseEvent { expires_at: Some(at("2026-11-02T10:00:00Z")), ..grant.clone() },
            "expires_at",
            "inconsistent_fields",
        ),
        (CapacityLeaseEvent { used: Some(1), ..grant.clone() }, "used", "inconsistent_fields"),
        (CapacityLeaseEvent { window_end: grant.window_start, ..grant.clone() }, "window_end", "inconsistent_fields"),
        (CapacityLeaseEvent { used: None, ..returned.clone() }, "used", "inconsistent_fields"),
        (CapacityLeaseEvent { expires_at: grant.expires_at, ..returned.clone() }, "expires_at", "inconsistent_fields"),
        (CapacityLeaseEvent { units: 3, ..expired }, "units", "inconsistent_fields"),
        (CapacityLeaseEvent { used: Some(-1), ..returned }, "used", "negative_quantity"),
        (CapacityLeaseEvent { capacity_lease_id: String::new(), ..grant.clone() }, "capacity_lease_id", "empty_field"),
        (CapacityLeaseEvent { holder: "shard\n1".into(), ..grant }, "holder", "control_character"),
    ];
    for (event, field, code) in refused {
        let e = judged(event.clone()).unwrap_err();
        assert_eq!((e.code(), e.to_string().contains(field)), (code, true), "{event:?}: {e}");
    }
}
