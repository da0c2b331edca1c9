// Proves that every valid event of the eleven record types survives single-object encoding and JSON unchanged,
// that its encoding is deterministic, and that the catalog's fingerprints are the CRC-64-AVRO of the Avro spec.

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::sample::select;
use schemas::validate::{AMOUNT_MAX, TIMESTAMP_MAX, TIMESTAMP_MIN};
use schemas::{
    AdjustmentEvent, AdjustmentKind, Aggregation, AlertEvent, AlertKind, CapacityLeaseAction, CapacityLeaseEvent,
    Catalog, CorrectionAction, CorrectionEvent, DecisionEvent, DecodeError, Decoded, Enforcement, Event, GrantEvent,
    Header, MeterEvent, MeterField, OnFailure, Outcome, PlanAssignmentEvent, PolicyEvent, Reason, ReservationAction,
    ReservationEvent, Scope, Timestamp, UsageEvent, Violation, Window,
};

// ---------------------------------------------------------------------------------------------------------------
// Generators of valid events (the rules of contract §3 as `schemas::validate` checks them).

/// A timestamp inside the accepted range.
fn timestamp() -> impl Strategy<Value = Timestamp> {
    (TIMESTAMP_MIN.0..TIMESTAMP_MAX.0).prop_map(Timestamp)
}

/// An id: never empty, any printable characters (producers in other languages send UTF-8 of all kinds).
fn id() -> impl Strategy<Value = String> {
    "\\PC{1,16}"
}

/// A free-form string, possibly empty.
fn text() -> impl Strategy<Value = String> {
    "\\PC{0,24}"
}

/// A value of one of the generated Avro enums, from its symbols.
fn symbol_of<T: Clone + std::fmt::Debug + 'static>(
    symbols: &'static [&'static str],
    from_symbol: fn(&str) -> Option<T>,
) -> impl Strategy<Value = T> {
    select(symbols).prop_map(move |s| from_symbol(s).expect("every symbol names a value"))
}

fn header() -> impl Strategy<Value = Header> {
    // Any tenant not starting with `*`: the plan defaults' name (`*`) and the named plans' (`*pro`), which only a
    // PolicyEvent may carry.
    let tenant = id().prop_filter("* names the plans", |t| !t.starts_with('*'));
    (id(), timestamp(), tenant, proptest::option::of(id()), id(), text()).prop_map(
        |(event_id, occurred_at, tenant, subject, metric, source)| Header {
            event_id,
            occurred_at,
            tenant,
            subject,
            metric,
            source,
            api_key: None,
            project: None,
        },
    )
}

fn usage() -> impl Strategy<Value = Event> {
    (header(), 0..=AMOUNT_MAX, proptest::option::of(id()), proptest::collection::btree_map(text(), text(), 0..6))
        .prop_map(|(header, quantity, request_id, attributes)| {
            Event::Usage(UsageEvent { header, quantity, request_id, attributes })
        })
}

fn decision() -> impl Strategy<Value = Event> {
    let ids = (header(), id(), id(), 0..=AMOUNT_MAX);
    let verdict = (symbol_of(Outcome::SYMBOLS, Outcome::from_symbol), symbol_of(Reason::SYMBOLS, Reason::from_symbol));
    let policy = (
        proptest::option::of(id()),
        proptest::option::of(any::<i32>()),
        proptest::option::of(timestamp()),
        proptest::option::of(timestamp()),
    );
    let numbers = (
        proptest::option::of(any::<i64>()),
        proptest::option::of(any::<i64>()),
        proptest::option::of(any::<i64>()),
        proptest::option::of(any::<i64>()),
    );
    (ids, verdict, policy, numbers, proptest::option::of(id())).prop_map(
        |(
            (header, request_id, idempotency_key, amount),
            (outcome, reason),
            (policy_id, policy_version, window_start, window_end),
            (limit, used_before, remaining, retry_after_ms),
            token_name,
        )| {
            Event::Decision(DecisionEvent {
                header,
                request_id,
                idempotency_key,
                amount,
                outcome,
                reason,
                policy_id,
                policy_version,
                window_start,
                window_end,
                limit,
                used_before,
                remaining,
                retry_after_ms,
                token_name,
            })
        },
    )
}

fn reservation() -> impl Strategy<Value = Event> {
    let action = symbol_of(ReservationAction::SYMBOLS, ReservationAction::from_symbol);
    (header(), id(), action, 0..=AMOUNT_MAX, timestamp(), proptest::option::of(1..=AMOUNT_MAX)).prop_map(
        |(header, reservation_id, action, amount, expiry, token)| {
            // RESERVE holds an amount (a lease, with a token: 1) until it expires; COMMIT carries the consumption (never
            // of a lease); RELEASE carries 0; RENEW, of a lease, 0 and the new expiry.
            let (amount, expires_at, fencing_token) = match action {
                ReservationAction::RESERVE => (if token.is_some() { 1 } else { amount }, Some(expiry), token),
                ReservationAction::COMMIT => (amount, None, None),
                ReservationAction::RELEASE => (0, None, token),
                ReservationAction::RENEW => (0, Some(expiry), Some(token.unwrap_or(1))),
            };
            Event::Reservation(ReservationEvent { header, reservation_id, action, amount, expires_at, fencing_token })
        },
    )
}

fn grant() -> impl Strategy<Value = Event> {
    let validity = (TIMESTAMP_MIN.0..TIMESTAMP_MAX.0 - 1)
        .prop_flat_map(|from| (Just(Timestamp(from)), (from + 1..TIMESTAMP_MAX.0).prop_map(Timestamp)));
    (header(), id(), 1..=AMOUNT_MAX, validity, text()).prop_map(
        |(header, grant_id, amount, (valid_from, valid_until), reason)| {
            Event::Grant(GrantEvent { header, grant_id, amount, valid_from, valid_until, reason, actor: None })
        },
    )
}

fn policy() -> impl Strategy<Value = Event> {
    (
        header(),
        id(),
        0..=i32::MAX,
        symbol_of(Scope::SYMBOLS, Scope::from_symbol),
        0..=AMOUNT_MAX,
        symbol_of(Window::SYMBOLS, Window::from_symbol),
        symbol_of(Enforcement::SYMBOLS, Enforcement::from_symbol),
        timestamp(),
        proptest::option::of(1..=AMOUNT_MAX),
        proptest::option::of(proptest::sample::select(
            &["UTC", "America/New_York", "Asia/Kolkata", "Europe/Berlin"][..],
        )),
        proptest::option::of(symbol_of(OnFailure::SYMBOLS, OnFailure::from_symbol)),
        (
            proptest::option::of((
                1..=AMOUNT_MAX,
                select(&[Window::MINUTE, Window::HOUR, Window::DAY, Window::MONTH][..]),
            )),
            proptest::option::of(symbol_of(Violation::SYMBOLS, Violation::from_symbol)),
            1..=schemas::validate::ROLLING_SECONDS_MAX,
            timestamp(),
            proptest::option::of(proptest::collection::btree_set(1..=1_000i32, 0..=10)),
            proptest::option::of(1..=99i32),
        ),
    )
        .prop_map(
            |(
                header,
                policy_id,
                version,
                scope,
                limit,
                window,
                enforcement,
                effective_from,
                burst,
                zone,
                on_failure,
                (overage, violation, seconds, anchor, thresholds, share),
            )| {
                // A ROLLING window (v10) has its length, a BILLING_CYCLE (v11) its anchor, and both are quotas: no
                // burst, overage or violation.
                let rolling = window == Window::ROLLING;
                let cycle = window == Window::BILLING_CYCLE;
                let burst = burst.filter(|_| !rolling && !cycle);
                // A throttled overage is valid on a HARD quota only.
                let quota = enforcement == Enforcement::HARD
                    && burst.is_none()
                    && !matches!(window, Window::CONCURRENT | Window::ROLLING | Window::BILLING_CYCLE);
                let overage = overage.filter(|_| quota);
                // A gauge: HARD or SHADOW, TENANT scope, a window of consumption, nothing of a throttle.
                let gauge = enforcement != Enforcement::SOFT
                    && scope == Scope::TENANT
                    && burst.is_none()
                    && overage.is_none()
                    && !matches!(window, Window::CONCURRENT | Window::ROLLING | Window::BILLING_CYCLE);
                let violation = violation.filter(|_| gauge);
                // Alert settings (v12) on the quotas whose windows are alerted; a subject's share of a TENANT one.
                let alerted =
                    burst.is_none() && violation.is_none() && !matches!(window, Window::CONCURRENT | Window::ROLLING);
                let thresholds = thresholds.filter(|_| alerted).map(|set| set.into_iter().collect());
                let share = share.filter(|_| alerted && scope == Scope::TENANT);
                Event::Policy(PolicyEvent {
                    header,
                    policy_id,
                    version,
                    scope,
                    limit,
                    window,
                    enforcement,
                    effective_from,
                    burst,
                    actor: None,
                    reason: None,
                    time_zone: zone.map(String::from),
                    on_failure,
                    overage_rate: overage.map(|o| o.0),
                    overage_window: overage.map(|o| o.1),
                    violation,
                    window_seconds: Some(seconds).filter(|_| rolling),
                    cycle_anchor: Some(anchor).filter(|_| cycle),
                    alert_thresholds: thresholds,
                    alert_subject_share: share,
                })
            },
        )
}

fn adjustment() -> impl Strategy<Value = Event> {
    (
        header(),
        symbol_of(AdjustmentKind::SYMBOLS, AdjustmentKind::from_symbol),
        proptest::option::of(id()),
        proptest::option::of(timestamp()),
        proptest::option::of(timestamp()),
        any::<i64>(),
        proptest::collection::vec(id(), 0..5),
        (id(), proptest::option::of(symbol_of(Scope::SYMBOLS, Scope::from_symbol))),
    )
        .prop_map(|(header, kind, policy_id, window_start, window_end, amount, refs, (run_id, scope))| {
            // An adjustment's event_id is its adjustment_id (contract §3). Amounts are deltas: any sign.
            let adjustment_id = header.event_id.clone();
            Event::Adjustment(AdjustmentEvent {
                header,
                adjustment_id,
                kind,
                policy_id,
                window_start,
                window_end,
                amount,
                refs,
                run_id,
                scope,
            })
        })
}

fn alert() -> impl Strategy<Value = Event> {
    (
        header(),
        symbol_of(AlertKind::SYMBOLS, AlertKind::from_symbol),
        proptest::option::of((id(), 0..=i32::MAX, symbol_of(Scope::SYMBOLS, Scope::from_symbol))),
        proptest::option::of((timestamp(), 1..=86_400_000_000i64)),
        (1..=1_000i32, proptest::option::of(0..=AMOUNT_MAX), 0..=AMOUNT_MAX, proptest::option::of(id())),
    )
        .prop_map(|(header, kind, policy, window, (threshold_percent, limit, observed, request_id))| {
            // An alert's event_id is its alert_id; a window ends after it starts.
            let alert_id = header.event_id.clone();
            let window = window.filter(|(start, length)| start.micros() + length < TIMESTAMP_MAX.micros());
            Event::Alert(AlertEvent {
                header,
                alert_id,
                kind,
                policy_id: policy.as_ref().map(|p| p.0.clone()),
                policy_version: policy.as_ref().map(|p| p.1),
                scope: policy.as_ref().map(|p| p.2),
                window_start: window.map(|w| w.0),
                window_end: window.map(|(start, length)| Timestamp(start.micros() + length)),
                threshold_percent,
                limit,
                observed,
                request_id,
            })
        })
}

fn correction() -> impl Strategy<Value = Event> {
    let action = symbol_of(CorrectionAction::SYMBOLS, CorrectionAction::from_symbol);
    (header(), id(), action, 0..=AMOUNT_MAX, "[a-z@.]{1,32}", "\\PC{1,64}").prop_map(
        |(header, original, action, quantity, actor, reason)| {
            // A correction names another event than itself; a VOID carries no quantity, an AMEND one.
            let original_event_id = format!("{original}-original");
            let quantity = (action == CorrectionAction::AMEND).then_some(quantity);
            Event::Correction(CorrectionEvent { header, original_event_id, action, quantity, actor, reason })
        },
    )
}

fn capacity_lease() -> impl Strategy<Value = Event> {
    let action = symbol_of(CapacityLeaseAction::SYMBOLS, CapacityLeaseAction::from_symbol);
    (
        header(),
        id(),
        action,
        "[a-z0-9-]{1,32}",
        id(),
        1..=i32::MAX,
        1..=AMOUNT_MAX,
        0..=AMOUNT_MAX,
        1..=86_400_000_000i64,
    )
        .prop_map(|(header, lease, action, holder, policy_id, policy_version, units, used, length)| {
            // Each action carries what it needs: an expiry after the event on GRANT and RENEW, units used on RENEW,
            // RETURN and RECLAIM, nothing back on an EXPIRE.
            let expiry = matches!(action, CapacityLeaseAction::GRANT | CapacityLeaseAction::RENEW);
            let expires_at = expiry.then(|| Timestamp(header.occurred_at.micros() + length));
            let used = (!matches!(action, CapacityLeaseAction::GRANT | CapacityLeaseAction::EXPIRE)).then_some(used);
            let units = if action == CapacityLeaseAction::EXPIRE { 0 } else { units };
            let window_start = header.occurred_at;
            let window_end = Timestamp(window_start.micros() + length);
            Event::CapacityLease(CapacityLeaseEvent {
                header,
                capacity_lease_id: lease,
                action,
                holder,
                policy_id,
                policy_version,
                window_start,
                window_end,
                units,
                used,
                expires_at,
            })
        })
}

fn plan_assignment() -> impl Strategy<Value = Event> {
    let plan = proptest::option::of("[a-z][a-z0-9-]{0,15}");
    (header(), plan, timestamp(), "[a-z@.]{1,32}", "\\PC{1,64}").prop_map(
        |(header, plan, effective_from, actor, reason)| {
            // Of a whole tenant, every metric: no member, metric `*`.
            let header = Header { metric: "*".into(), subject: None, project: None, api_key: None, ..header };
            Event::PlanAssignment(PlanAssignmentEvent { header, plan, effective_from, actor, reason })
        },
    )
}

fn meter() -> impl Strategy<Value = Event> {
    let aggregation = symbol_of(Aggregation::SYMBOLS, Aggregation::from_symbol);
    let field = symbol_of(MeterField::SYMBOLS, MeterField::from_symbol);
    (header(), 0..=i32::MAX, aggregation, field, timestamp(), "[a-z@.]{1,32}", "\\PC{1,64}").prop_map(
        |(mut header, version, aggregation, field, effective_from, actor, reason)| {
            // A meter is a tenant's metric's, never a member's; only a UNIQUE_COUNT names a field.
            (header.subject, header.project, header.api_key) = (None, None, None);
            let field = (aggregation == Aggregation::UNIQUE_COUNT).then_some(field);
            Event::Meter(MeterEvent { header, version, aggregation, field, effective_from, actor, reason })
        },
    )
}

/// A valid event of any of the eleven record types.
fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        usage(),
        decision(),
        reservation(),
        grant(),
        policy(),
        adjustment(),
        alert(),
        correction(),
        capacity_lease(),
        plan_assignment(),
        meter()
    ]
}

// ---------------------------------------------------------------------------------------------------------------
// Properties.

proptest! {
    // Proves that the generators make valid events (otherwise the round trips below would prove little).
    #[test]
    fn generated_events_are_valid(e in event()) {
        prop_assert_eq!(schemas::validate(&e), Ok(()));
    }

    // Proves that single-object encoding then decoding gives back the same event, written with the current schema.
    #[test]
    fn single_object_round_trip(e in event()) {
        let catalog = Catalog::builtin();
        let bytes = catalog.encode_single_object(&e);
        let expected = Decoded { event: e.clone(), writer_fingerprint: catalog.current(e.event_type()).fingerprint };
        prop_assert_eq!(catalog.decode_single_object(&bytes, Some(e.event_type())), Ok(expected.clone()));
        prop_assert_eq!(catalog.decode_single_object(&bytes, None), Ok(expected));
    }

    // Proves that the JSON form read back with `from_json` gives the same event.
    #[test]
    fn json_round_trip(e in event()) {
        let json = e.to_json().to_string();
        let back = Event::from_json(e.event_type(), &json);
        prop_assert!(back.is_ok(), "{json} does not read back: {:?}", back);
        prop_assert_eq!(back.unwrap(), e);
    }

    // Proves that the hand-written encoder writes exactly apache-avro's bytes wherever map order cannot differ (at
    // most one attribute), and bytes apache-avro decodes to the same event otherwise.
    #[test]
    fn encode_body_matches_apache_avro(e in event()) {
        let catalog = Catalog::builtin();
        let ours = catalog.encode_body(&e);
        let attributes = match &e { Event::Usage(u) => u.attributes.len(), _ => 0 };
        if attributes <= 1 {
            prop_assert_eq!(&ours, &catalog.encode_body_with_apache_avro(&e));
        }
        let fingerprint = catalog.current(e.event_type()).fingerprint;
        prop_assert_eq!(catalog.decode_payload(fingerprint, &ours), Ok(e));
    }

    // Proves that encode_body depends only on the event: the same event twice, a clone whose attributes were
    // inserted in the opposite order, and the event decoded again all give identical bytes.
    #[test]
    fn encode_body_is_deterministic(e in event()) {
        let catalog = Catalog::builtin();
        let first = catalog.encode_body(&e);
        prop_assert_eq!(&catalog.encode_body(&e), &first);

        let mut reordered = e.clone();
        if let Event::Usage(usage) = &mut reordered {
            let mut attributes = BTreeMap::new();
            for (key, value) in usage.attributes.iter().rev() {
                attributes.insert(key.clone(), value.clone());
            }
            usage.attributes = attributes;
        }
        prop_assert_eq!(&catalog.encode_body(&reordered), &first);

        let message = catalog.encode_single_object(&e);
        prop_assert_eq!(&message[schemas::catalog::SINGLE_OBJECT_HEADER_BYTES..], &first[..]);
        let decoded = catalog.decode_single_object(&message, None).expect("a valid event decodes");
        prop_assert_eq!(&catalog.encode_body(&decoded.event), &first);
    }
}

proptest! {
    // Proves that a valid message cut anywhere in its body is refused as truncated, never decoded to another event.
    #[test]
    fn every_cut_of_a_body_is_truncated(e in event(), cut in any::<proptest::sample::Index>()) {
        let catalog = Catalog::builtin();
        let message = catalog.encode_single_object(&e);
        let header = schemas::catalog::SINGLE_OBJECT_HEADER_BYTES;
        let len = header + cut.index(message.len() - header);
        let result = catalog.decode_single_object(&message[..len], Some(e.event_type()));
        prop_assert!(
            matches!(&result, Err(error @ DecodeError::TruncatedBody { .. }) if error.code() == "truncated"),
            "cut to {} of {} bytes: {:?}", len, message.len(), result
        );
    }
}

// Proves that attribute maps with many entries, whose HashMap order inside apache-avro varies, still encode
// to one and the same byte string.
#[test]
fn usage_with_many_attributes_encodes_identically() {
    let catalog = Catalog::builtin();
    let attributes: BTreeMap<String, String> = (0..64).map(|i| (format!("key-{i:02}"), format!("value-{i}"))).collect();
    let event = Event::Usage(UsageEvent {
        header: Header {
            event_id: "u-1".into(),
            occurred_at: Timestamp::parse_rfc3339("2026-11-02T10:00:00Z").unwrap(),
            tenant: "org-42".into(),
            subject: Some("user-7".into()),
            metric: "tokens".into(),
            source: "api".into(),
            api_key: None,
            project: None,
        },
        quantity: 12,
        request_id: Some("req-81f3".into()),
        attributes,
    });
    let first = catalog.encode_body(&event);
    for _ in 0..20 {
        assert_eq!(catalog.encode_body(&event.clone()), first);
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Fingerprints, computed independently of apache-avro from the Avro specification ("Schema Fingerprints").

/// The CRC-64-AVRO empty value of the Avro specification.
const EMPTY: u64 = 0xc15d_213a_a4d7_a795;

/// The 256-entry table of the Avro specification's fingerprint64.
fn fingerprint_table() -> [u64; 256] {
    let mut table = [0u64; 256];
    for (i, entry) in table.iter_mut().enumerate() {
        let mut fp = i as u64;
        for _ in 0..8 {
            fp = (fp >> 1) ^ (EMPTY & (fp & 1).wrapping_neg());
        }
        *entry = fp;
    }
    table
}

/// CRC-64-AVRO (Rabin) of a byte string, as in the Avro specification.
fn fingerprint64(bytes: &[u8]) -> u64 {
    let table = fingerprint_table();
    let mut fp = EMPTY;
    for &b in bytes {
        fp = (fp >> 8) ^ table[((fp ^ u64::from(b)) & 0xff) as usize];
    }
    fp
}

// Proves that the independent CRC-64-AVRO gives the Avro project's published fingerprints
// (share/test/data/schema-tests.txt), so that it can judge the catalog below.
#[test]
fn independent_crc64_avro_matches_the_avro_test_vectors() {
    let vectors: &[(&str, i64)] = &[
        (r#""null""#, 7195948357588979594),
        (r#""boolean""#, -6970731678124411036),
        (r#"{"name":"foo","type":"fixed","size":15}"#, 1756455273707447556),
    ];
    for (canonical, expected) in vectors {
        assert_eq!(fingerprint64(canonical.as_bytes()) as i64, *expected, "fingerprint of {canonical}");
    }
}

// Proves that every schema of the catalog has its own fingerprint, equal to the CRC-64-AVRO of its Parsing
// Canonical Form (the specification's: `tests/fingerprints.rs` pins the values other encoders compute), that
// its legacy fingerprint (of apache-avro's canonical form, which earlier releases wrote) still finds it, and
// that single-object messages carry the fingerprint little-endian.
#[test]
fn catalog_fingerprints_are_distinct_crc64_avro() {
    let catalog = Catalog::builtin();
    let schemas = catalog.schemas();
    assert_eq!(
        schemas.len(),
        32,
        "eleven current schemas; every type's v1 and v2 but AlertEvent's, CorrectionEvent's, CapacityLeaseEvent's, PlanAssignmentEvent's and MeterEvent's; \
         PolicyEvent v3 to v11"
    );
    let mut seen = BTreeMap::new();
    for s in schemas {
        let canonical = schemas::catalog::canonical_form(&s.schema);
        assert_eq!(s.fingerprint, fingerprint64(canonical.as_bytes()), "{}: {canonical}", s.file);
        assert_eq!(schemas::fingerprint(&s.schema), s.fingerprint, "{}", s.file);
        let legacy = s.schema.canonical_form();
        assert_eq!(s.legacy_fingerprint, fingerprint64(legacy.as_bytes()), "{}: {legacy}", s.file);
        for fingerprint in [s.fingerprint, s.legacy_fingerprint] {
            assert!(catalog.by_fingerprint(fingerprint).is_some_and(|found| found.file == s.file), "{}", s.file);
            if let Some(other) = seen.insert(fingerprint, s.file) {
                panic!("{} and {other} share the fingerprint {fingerprint:016x}", s.file);
            }
        }
    }
    for s in schemas.iter().filter(|s| s.current) {
        let sample = Event::from_json(s.event_type, &minimal_json(s.event_type)).expect("sample JSON reads");
        let message = catalog.encode_single_object(&sample);
        assert_eq!(&message[..2], &[0xC3, 0x01]);
        assert_eq!(&message[2..10], &s.fingerprint.to_le_bytes(), "{}", s.file);
    }
}

/// The JSON of a small valid event of a type.
fn minimal_json(event_type: schemas::EventType) -> String {
    let header = r#""event_id":"e-1","occurred_at":"2026-11-02T10:00:00Z","tenant":"org-42","metric":"requests",
                    "source":"test""#;
    let rest = match event_type {
        schemas::EventType::UsageEvent => r#""quantity":1"#,
        schemas::EventType::DecisionEvent => {
            r#""request_id":"r","idempotency_key":"k","amount":1,"outcome":"ALLOWED","reason":"WITHIN_LIMIT""#
        }
        schemas::EventType::ReservationEvent => {
            r#""reservation_id":"res","action":"RESERVE","amount":5,"expires_at":"2026-11-02T10:01:00Z""#
        }
        schemas::EventType::GrantEvent => {
            r#""grant_id":"g","amount":5,"valid_from":"2026-11-01T00:00:00Z","valid_until":"2026-12-01T00:00:00Z",
               "reason":"support""#
        }
        schemas::EventType::PolicyEvent => {
            r#""policy_id":"p","version":1,"scope":"TENANT","limit":100,"window":"MONTH","enforcement":"HARD",
               "effective_from":"2026-11-01T00:00:00Z""#
        }
        schemas::EventType::AdjustmentEvent => {
            r#""adjustment_id":"e-1","kind":"OVERSHOOT","amount":3,"refs":["u-1"],"run_id":"run-1""#
        }
        schemas::EventType::AlertEvent => r#""alert_id":"e-1","kind":"THRESHOLD","threshold_percent":80,"observed":8"#,
        schemas::EventType::CorrectionEvent => {
            r#""original_event_id":"u-1","action":"AMEND","quantity":3,"actor":"alice","reason":"wrong count""#
        }
        schemas::EventType::CapacityLeaseEvent => {
            r#""capacity_lease_id":"cl-1","action":"GRANT","holder":"shard-0001","policy_id":"p","policy_version":1,
               "window_start":"2026-11-01T00:00:00Z","window_end":"2026-12-01T00:00:00Z","units":5,
               "expires_at":"2026-11-02T10:00:10Z""#
        }
        schemas::EventType::PlanAssignmentEvent => {
            r#""plan":"pro","effective_from":"2026-11-14T00:00:00Z","actor":"alice","reason":"upgraded""#
        }
        schemas::EventType::MeterEvent => {
            r#""version":1,"aggregation":"UNIQUE_COUNT","field":"SUBJECT","effective_from":"2026-11-01T00:00:00Z","actor":"alice","reason":"seats""#
        }
    };
    format!("{{{header},{rest}}}")
}
