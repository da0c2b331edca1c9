//! The fuzz targets' seed corpora, made from the current catalog, and how many shapes of the current schemas each
//! corpus reaches. `.ci/run` writes the seeds before it fuzzes, so that a field or a symbol added to a schema is in
//! the corpus the day it is added (libFuzzer cannot guess an 8-byte schema fingerprint in a minute), then prints the
//! coverage:
//!
//! ```sh
//! cargo run -p schemas --example fuzz_corpus -- seeds fuzz/corpus      # writes seed-* files into each target's dir
//! cargo run -p schemas --example fuzz_corpus -- coverage fuzz/corpus   # per target: shapes reached of all
//! ```
//!
//! A *shape* of the decoders' inputs is a record type with one of its variants: each symbol of each enum a record
//! carries (a policy's window, scope, enforcement, on_failure and violation; a reservation's action; a decision's
//! reason; an adjustment's and an alert's kind), each optional part (a project, an API key, a lease's fencing token, a
//! ROLLING window's seconds, a BILLING_CYCLE's anchor, alert settings, a throttle's burst, a throttled overage), and
//! every writer schema of the catalog, old ones included. A shape of the request targets is a route receiving a JSON
//! object body of the fields its handler reads.

use std::collections::BTreeSet;
use std::path::Path;

use apache_avro::writer::datum::GenericDatumWriter;
use schemas::{Catalog, Event, EventType};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["seeds", dir] => seeds(Path::new(dir)),
        ["coverage", dir] => coverage(Path::new(dir)),
        _ => {
            eprintln!("usage: fuzz_corpus seeds|coverage CORPUS_DIR");
            std::process::exit(2);
        }
    }
}

/// The request targets: each route a first byte picks (its index), with seed bodies; the first body of a route has
/// the fields its handler requires, and the others show its optional parts.
type Routes = &'static [(&'static str, &'static [&'static str])];
const REQUEST_TARGETS: [(&str, Routes); 3] = [
    (
        "hook_requests",
        &[
            (
                "/v1/check",
                &[
                    r#"{"tenant":"org-1","metric":"requests","amount":1,"idempotency_key":"k-1"}"#,
                    r#"{"tenant":"org-1","subject":"u-1","amounts":{"requests":1,"tokens":20},"idempotency_key":"k-2","request_id":"req-2"}"#,
                    r#"{"tenant":"org-1","metric":"requests","amount":1,"idempotency_key":"k-3","operation":"insert","project":"p-1","api_key":"key-1"}"#,
                ],
            ),
            (
                "/v1/reservations",
                &[
                    r#"{"tenant":"org-1","metric":"requests","amount":5,"ttl_ms":60000,"idempotency_key":"k-4"}"#,
                    r#"{"tenant":"org-1","amounts":{"requests":2,"tokens":5},"ttl_ms":1000,"idempotency_key":"k-5","project":"p-1"}"#,
                ],
            ),
            ("/v1/reservations/rsv-fuzz/commit", &[r#"{"amount":3}"#]),
            ("/v1/reservations/rsv-fuzz/release", &[r#"{}"#]),
        ],
    ),
    (
        "lease_requests",
        &[
            (
                "/v1/leases",
                &[
                    r#"{"tenant":"org-1","metric":"jobs","ttl_ms":30000,"idempotency_key":"l-1"}"#,
                    r#"{"tenant":"org-1","subject":"w-1","metric":"jobs","ttl_ms":1,"idempotency_key":"l-2","request_id":"r-2"}"#,
                ],
            ),
            ("/v1/leases/lease-fuzz/renew", &[r#"{"fencing_token":1,"ttl_ms":30000}"#]),
            ("/v1/leases/lease-fuzz/release", &[r#"{"fencing_token":1}"#]),
        ],
    ),
    (
        "admin_requests",
        &[
            (
                "/v1/admin/policies",
                &[
                    r#"{"tenant":"org-1","metric":"requests","limit":100,"window":"MONTH","enforcement":"HARD","reason":"fuzz"}"#,
                    r#"{"tenant":"*","metric":"tokens","limit":10,"window":"ROLLING","window_seconds":3600,"enforcement":"SOFT","scope":"SUBJECT","reason":"fuzz"}"#,
                    r#"{"tenant":"org-1","metric":"seats","limit":5,"window":"BILLING_CYCLE","cycle_anchor":"2026-01-17T00:00:00Z","enforcement":"SOFT","alert_thresholds":[50,100],"alert_subject_share":60,"reason":"fuzz"}"#,
                    r#"{"tenant":"org-1","metric":"requests","limit":100,"window":"MONTH","enforcement":"HARD","overage_throttle":{"rate":10,"window":"MINUTE"},"on_failure":"OPEN","time_zone":"Europe/Paris","policy_id":"p-1","version":2,"effective_from":"2026-11-01T00:00:00Z","reason":"fuzz"}"#,
                    r#"{"tenant":"org-1","metric":"rows","limit":1000,"window":"MONTH","enforcement":"HARD","violation":"NO_INSERTS","reason":"fuzz"}"#,
                    r#"{"tenant":"org-1","metric":"jobs","limit":3,"window":"CONCURRENT","enforcement":"HARD","reason":"fuzz"}"#,
                ],
            ),
            (
                "/v1/admin/grants",
                &[
                    r#"{"tenant":"org-1","metric":"requests","amount":50,"valid_from":"2026-11-01T00:00:00Z","valid_until":"2026-12-01T00:00:00Z","reason":"fuzz"}"#,
                    r#"{"tenant":"org-1","project":"p-1","metric":"requests","amount":5,"valid_from":"2026-11-01T00:00:00Z","valid_until":"2026-12-01T00:00:00Z","grant_id":"g-1","reason":"fuzz"}"#,
                ],
            ),
        ],
    ),
];

/// The first byte of a request seed: the route's index, with the high bit clear (the token is sent).
fn request_seed(route: usize, body: &str) -> Vec<u8> {
    [&[route as u8][..], body.as_bytes()].concat()
}

/// Writes `seed-*` files: the decoders' (one message of every sample event under every writer schema that can hold
/// it, single-object with the topic's type as first byte, and as a container file) and the request targets'.
fn seeds(dir: &Path) {
    let catalog = Catalog::builtin();
    let single = dir.join("single_object");
    let container = dir.join("container_file");
    for target in [&single, &container] {
        std::fs::create_dir_all(target).unwrap_or_else(|e| panic!("{}: {e}", target.display()));
    }
    let mut written = 0;
    for (n, event) in sample_events().iter().enumerate() {
        let pick = EventType::ALL.iter().position(|t| *t == event.event_type()).expect("a type") as u8;
        for (version, schema) in catalog.schemas().iter().filter(|s| s.event_type == event.event_type()).enumerate() {
            let Some(value) = value_under(event, &schema.schema) else { continue };
            let mut body = Vec::new();
            let writer = GenericDatumWriter::builder(&schema.schema).build().expect("a datum writer");
            writer.write_value_ref(&mut body, &value).expect("checked by value_under");
            let name = format!("seed-{}-{n:03}-w{version}", event.event_type());
            let message = [&[0xc3, 0x01][..], &schema.fingerprint.to_le_bytes(), &body].concat();
            write(&single.join(&name), &[&[pick][..], &message].concat());
            let mut writer = apache_avro::Writer::new(&schema.schema, Vec::new()).expect("a container writer");
            writer.append_value_ref(&value).expect("checked by value_under");
            write(&container.join(&name), &writer.into_inner().expect("a container file"));
            written += 2;
        }
    }
    for (target, routes) in REQUEST_TARGETS {
        let target_dir = dir.join(target);
        std::fs::create_dir_all(&target_dir).unwrap_or_else(|e| panic!("{}: {e}", target_dir.display()));
        for (route, (_, bodies)) in routes.iter().enumerate() {
            for (n, body) in bodies.iter().enumerate() {
                write(&target_dir.join(format!("seed-route-{route}-{n}")), &request_seed(route, body));
                written += 1;
            }
        }
    }
    println!("{written} seeds written under {}", dir.display());
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// The event as a value of `schema`, a writer schema of its type: the fields the schema has (an older writer lacks
/// the newer ones), or `None` when it cannot hold the event (a symbol or a value it does not know).
fn value_under(event: &Event, schema: &apache_avro::Schema) -> Option<apache_avro::types::Value> {
    let apache_avro::types::Value::Record(fields) = schemas::avro::to_value(event) else { return None };
    let apache_avro::Schema::Record(record) = schema else { return None };
    let known: BTreeSet<&str> = record.fields.iter().map(|f| f.name.as_str()).collect();
    let kept = fields.into_iter().filter(|(name, _)| known.contains(name.as_str())).collect();
    let value = apache_avro::types::Value::Record(kept);
    value.validate(schema).then_some(value)
}

/// Reads every file of each target's corpus and prints, per target, the shapes its inputs reach of all there are.
fn coverage(dir: &Path) {
    let catalog = Catalog::builtin();
    let all = all_shapes(catalog);
    for target in ["single_object", "container_file"] {
        let mut reached = BTreeSet::new();
        for bytes in corpus(&dir.join(target)) {
            match target {
                "single_object" => {
                    let Some((_, message)) = bytes.split_first() else { continue };
                    if let Ok(decoded) = catalog.decode_single_object(message, None) {
                        reached.extend(shapes(&decoded.event));
                        reached.extend(writer_shape(catalog, message));
                    }
                }
                _ => reached.extend(container_shapes(catalog, &bytes)),
            }
        }
        report(target, &reached, &all);
    }
    for (target, routes) in REQUEST_TARGETS {
        let all: BTreeSet<String> = routes.iter().map(|(route, _)| format!("route {route}")).collect();
        let mut reached = BTreeSet::new();
        for bytes in corpus(&dir.join(target)) {
            let Some((&pick, body)) = bytes.split_first() else { continue };
            let (route, seeds) = routes[usize::from(pick) % routes.len()];
            let seed = seeds[0];
            let Ok(serde_json::Value::Object(fields)) = serde_json::from_slice::<serde_json::Value>(body) else {
                continue;
            };
            let wanted: serde_json::Value = serde_json::from_str(seed).expect("a seed body is JSON");
            let wanted = wanted.as_object().expect("an object");
            if wanted.keys().all(|key| fields.contains_key(key)) {
                reached.insert(format!("route {route}"));
            }
        }
        report(target, &reached, &all);
    }
}

fn report(target: &str, reached: &BTreeSet<String>, all: &BTreeSet<String>) {
    let missing: Vec<&String> = all.difference(reached).collect();
    println!(
        "{target}: {} of {} shapes reached{}",
        all.len() - missing.len(),
        all.len(),
        match missing.is_empty() {
            true => String::new(),
            false => format!("; missing: {missing:?}"),
        }
    );
}

/// The files of a corpus directory (none when it does not exist).
fn corpus(dir: &Path) -> Vec<Vec<u8>> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries.filter_map(|entry| std::fs::read(entry.ok()?.path()).ok()).collect()
}

/// The writer schema a single-object message names, as a shape.
fn writer_shape(catalog: &Catalog, message: &[u8]) -> Option<String> {
    let fingerprint = u64::from_le_bytes(message.get(2..10)?.try_into().ok()?);
    let schema = catalog.by_fingerprint(fingerprint)?;
    Some(format!("writer {}", schema.file))
}

/// The shapes of a container file's records, and its writer schema's.
fn container_shapes(catalog: &Catalog, bytes: &[u8]) -> BTreeSet<String> {
    let mut reached = BTreeSet::new();
    let Ok(records) = catalog.read_container(bytes) else { return reached };
    for record in records {
        if let Ok(decoded) = record.result {
            reached.extend(shapes(&decoded.event));
        }
    }
    if let Ok(reader) = apache_avro::Reader::new(bytes) {
        let canonical = reader.writer_schema().canonical_form();
        let schema = catalog.schemas().iter().find(|s| s.schema.canonical_form() == canonical);
        reached.extend(schema.map(|s| format!("writer {}", s.file)));
    }
    reached
}

/// Every shape of the current catalog: each writer schema, and each shape of every sample event (the samples are
/// made to show every symbol and optional part; `sample_events` panics when one is missing).
fn all_shapes(catalog: &Catalog) -> BTreeSet<String> {
    let mut all: BTreeSet<String> = catalog.schemas().iter().map(|s| format!("writer {}", s.file)).collect();
    all.extend(expected_shapes());
    all
}

/// The shapes of an event: its type, each enum symbol it carries and each optional part it has.
fn shapes(event: &Event) -> Vec<String> {
    let header = event.header();
    let kind = event.event_type().to_string();
    let mut found = vec![kind.clone()];
    let mut has = |part: &str, present: bool| {
        if present {
            found.push(format!("{kind} {part}"));
        }
    };
    has("project", header.project.is_some());
    has("api_key", header.api_key.is_some());
    has("subject", header.subject.is_some());
    match event {
        Event::Usage(_) | Event::Grant(_) => {}
        Event::Decision(e) => {
            found.push(format!("{kind} reason={}", e.reason));
            found.push(format!("{kind} outcome={}", e.outcome));
        }
        Event::Reservation(e) => {
            found.push(format!("{kind} action={}", e.action));
            if e.fencing_token.is_some() {
                found.push(format!("{kind} lease"));
            }
        }
        Event::Policy(e) => {
            for symbol in
                [format!("window={}", e.window), format!("scope={}", e.scope), format!("enforcement={}", e.enforcement)]
            {
                found.push(format!("{kind} {symbol}"));
            }
            found.extend(e.on_failure.map(|s| format!("{kind} on_failure={s}")));
            found.extend(e.violation.map(|s| format!("{kind} violation={s}")));
            for (part, present) in [
                ("burst", e.burst.is_some()),
                ("overage_rate", e.overage_rate.is_some()),
                ("time_zone", e.time_zone.is_some()),
                ("alert_thresholds", e.alert_thresholds.is_some()),
                ("alert_subject_share", e.alert_subject_share.is_some()),
            ] {
                if present {
                    found.push(format!("{kind} {part}"));
                }
            }
        }
        Event::Adjustment(e) => found.push(format!("{kind} kind={}", e.kind)),
        Event::Alert(e) => found.push(format!("{kind} kind={}", e.kind)),
        Event::Correction(e) => found.push(format!("{kind} action={}", e.action)),
        Event::CapacityLease(e) => found.push(format!("{kind} action={}", e.action)),
        Event::PlanAssignment(e) => found.push(format!("{kind} plan={}", e.plan.is_some())),
        Event::Meter(e) => found.push(format!("{kind} aggregation={}", e.aggregation)),
    }
    found
}

/// Every shape there is: each enum symbol of the current schemas and each optional part, named as [`shapes`] names
/// them.
fn expected_shapes() -> BTreeSet<String> {
    use schemas::*;
    let mut all = BTreeSet::new();
    for kind in EventType::ALL {
        all.insert(kind.to_string());
        // A plan is assigned to a whole tenant, and a meter is of a tenant's metric: neither names a member.
        if matches!(kind, EventType::PlanAssignmentEvent | EventType::MeterEvent) {
            continue;
        }
        for part in ["project", "api_key", "subject"] {
            all.insert(format!("{kind} {part}"));
        }
    }
    let symbols = |kind: EventType, field: &str, symbols: &[&str]| {
        symbols.iter().map(move |s| format!("{kind} {field}={s}")).collect::<Vec<_>>()
    };
    all.extend(symbols(EventType::DecisionEvent, "reason", Reason::SYMBOLS));
    all.extend(symbols(EventType::DecisionEvent, "outcome", Outcome::SYMBOLS));
    all.extend(symbols(EventType::ReservationEvent, "action", ReservationAction::SYMBOLS));
    all.insert(format!("{} lease", EventType::ReservationEvent));
    all.extend(symbols(EventType::PolicyEvent, "window", Window::SYMBOLS));
    all.extend(symbols(EventType::PolicyEvent, "scope", Scope::SYMBOLS));
    all.extend(symbols(EventType::PolicyEvent, "enforcement", Enforcement::SYMBOLS));
    all.extend(symbols(EventType::PolicyEvent, "on_failure", OnFailure::SYMBOLS));
    all.extend(symbols(EventType::PolicyEvent, "violation", Violation::SYMBOLS));
    for part in ["burst", "overage_rate", "time_zone", "alert_thresholds", "alert_subject_share"] {
        all.insert(format!("{} {part}", EventType::PolicyEvent));
    }
    all.extend(symbols(EventType::AdjustmentEvent, "kind", AdjustmentKind::SYMBOLS));
    all.extend(symbols(EventType::AlertEvent, "kind", AlertKind::SYMBOLS));
    all.extend(symbols(EventType::CorrectionEvent, "action", CorrectionAction::SYMBOLS));
    all.extend(symbols(EventType::CapacityLeaseEvent, "action", CapacityLeaseAction::SYMBOLS));
    all.extend(symbols(EventType::PlanAssignmentEvent, "plan", &["true", "false"]));
    all.extend(symbols(EventType::MeterEvent, "aggregation", Aggregation::SYMBOLS));
    all
}

/// A header's project and API key, in one sample of each record type.
const MEMBER: &str = r#","project":"proj-1","api_key":"key-1""#;

/// Valid events that, together, show every shape of [`expected_shapes`]; panics naming a sample the rules refuse or a
/// shape no sample shows, so that a new symbol or field is noticed here.
fn sample_events() -> Vec<Event> {
    let mut events = Vec::new();
    let mut add = |kind: EventType, json: String| {
        let event = Event::from_json(kind, &json).unwrap_or_else(|e| panic!("sample {json}: {e}"));
        if let Err(invalid) = schemas::validate(&event) {
            panic!("sample {json} is refused: {invalid}");
        }
        events.push(event);
    };
    let header = |id: &str, extra: &str| {
        format!(
            r#""event_id":"{id}","occurred_at":"2026-11-02T10:00:00Z","tenant":"org-42","subject":"user-7","metric":"requests","source":"api"{extra}"#
        )
    };
    add(
        EventType::UsageEvent,
        format!(r#"{{{},"quantity":3,"request_id":"req-1","attributes":{{"model":"small"}}}}"#, header("u-1", "")),
    );
    add(
        EventType::UsageEvent,
        format!(r#"{{{},"quantity":2,"attributes":{{}}}}"#, header("u-2", r#","project":"proj-1","api_key":"key-1""#)),
    );
    let decisions = [
        ("ALLOWED", "WITHIN_LIMIT", ""),
        ("DENIED", "QUOTA_EXCEEDED", r#","retry_after_ms":1000"#),
        ("DENIED", "RATE_LIMITED", r#","retry_after_ms":200"#),
        ("DENIED", "CONCURRENCY_LIMITED", r#","retry_after_ms":500"#),
        ("ALLOWED", "NO_POLICY", ""),
        ("ALLOWED", "SHADOW_DENIED", ""),
        ("ALLOWED", "FAIL_OPEN", ""),
    ];
    for (n, (outcome, reason, extra)) in decisions.iter().enumerate() {
        let policy = match *reason {
            "NO_POLICY" => String::new(),
            _ => r#","policy_id":"p-1","policy_version":2,"window_start":"2026-11-01T00:00:00Z","window_end":"2026-12-01T00:00:00Z","limit":100,"used_before":99,"remaining":0"#.to_string(),
        };
        add(
            EventType::DecisionEvent,
            format!(
                r#"{{{},"request_id":"req-{n}","idempotency_key":"k-{n}","amount":3,"outcome":"{outcome}","reason":"{reason}"{policy}{extra}}}"#,
                header(&format!("d-{n}"), if n == 0 { MEMBER } else { "" })
            ),
        );
    }
    let reservations = [
        ("RESERVE", 50, r#","expires_at":"2026-11-02T10:05:00Z""#),
        ("COMMIT", 30, ""),
        ("RELEASE", 0, ""),
        ("RESERVE", 1, r#","expires_at":"2026-11-02T10:05:00Z","fencing_token":1"#),
        ("RENEW", 0, r#","expires_at":"2026-11-02T10:10:00Z","fencing_token":1"#),
    ];
    for (n, (action, amount, extra)) in reservations.iter().enumerate() {
        add(
            EventType::ReservationEvent,
            format!(
                r#"{{{},"reservation_id":"res-{}","action":"{action}","amount":{amount}{extra}}}"#,
                header(&format!("r-{n}"), if n == 0 { MEMBER } else { "" }),
                n / 3
            ),
        );
    }
    // Grants: one of subject, project and API key each.
    for (n, member) in [r#""subject":"user-7""#, r#""project":"proj-1""#, r#""api_key":"key-1""#].iter().enumerate() {
        let header = header(&format!("g-{n}"), "").replace(r#""subject":"user-7""#, member);
        add(
            EventType::GrantEvent,
            format!(
                r#"{{{header},"grant_id":"g-{n}","amount":500,"valid_from":"2026-11-01T00:00:00Z","valid_until":"2026-12-01T00:00:00Z","reason":"goodwill"}}"#
            ),
        );
    }
    // Policies: each window, scope, enforcement, failure mode, violation and optional part at least once.
    let policies = [
        (
            r#""scope":"TENANT","window":"MONTH","enforcement":"HARD","alert_thresholds":[50,100],"alert_subject_share":60"#,
            "",
        ),
        (r#""scope":"SUBJECT","window":"MINUTE","enforcement":"HARD","burst":20"#, ""),
        (r#""scope":"PROJECT","window":"HOUR","enforcement":"SOFT","on_failure":"OPEN""#, r#","project":"proj-1""#),
        (
            r#""scope":"API_KEY","window":"DAY","enforcement":"SHADOW","time_zone":"Europe/Paris","on_failure":"CLOSED""#,
            r#","api_key":"key-1""#,
        ),
        (r#""scope":"TENANT","window":"CONCURRENT","enforcement":"HARD""#, ""),
        (r#""scope":"TENANT","window":"ROLLING","window_seconds":86400,"enforcement":"HARD""#, ""),
        (r#""scope":"TENANT","window":"BILLING_CYCLE","cycle_anchor":"2026-01-17T00:00:00Z","enforcement":"SOFT""#, ""),
        (r#""scope":"TENANT","window":"MONTH","enforcement":"HARD","overage_rate":100,"overage_window":"MINUTE""#, ""),
        (r#""scope":"TENANT","window":"MONTH","enforcement":"HARD","violation":"NO_INSERTS""#, ""),
        (r#""scope":"TENANT","window":"MONTH","enforcement":"HARD","violation":"NO_WRITES""#, ""),
        (r#""scope":"TENANT","window":"MONTH","enforcement":"HARD","violation":"DISABLE""#, ""),
    ];
    for (n, (fields, extra)) in policies.iter().enumerate() {
        add(
            EventType::PolicyEvent,
            format!(
                r#"{{{},"policy_id":"p-{n}","version":1,"limit":100,"effective_from":"2026-11-01T00:00:00Z",{fields}}}"#,
                header(&format!("p-{n}"), extra)
            ),
        );
    }
    for (n, kind) in schemas::AdjustmentKind::SYMBOLS.iter().enumerate() {
        add(
            EventType::AdjustmentEvent,
            format!(
                r#"{{{},"adjustment_id":"a-{n}","kind":"{kind}","policy_id":"p-1","window_start":"2026-11-01T00:00:00Z","window_end":"2026-12-01T00:00:00Z","amount":7,"refs":["u-1"],"run_id":"run-1","scope":"TENANT"}}"#,
                header(&format!("a-{n}"), if n == 0 { MEMBER } else { "" })
            ),
        );
    }
    let alerts = [
        ("THRESHOLD", r#","threshold_percent":80,"limit":100,"observed":80,"request_id":"req-1""#),
        ("SUBJECT_SHARE", r#","threshold_percent":60,"limit":100,"observed":70"#),
        ("OPEN_TOO_LONG", r#","threshold_percent":100,"observed":7200,"request_id":"res-1""#),
        ("DENY_RATE", r#","threshold_percent":30,"observed":80"#),
    ];
    for (n, (kind, extra)) in alerts.iter().enumerate() {
        add(
            EventType::AlertEvent,
            format!(
                r#"{{{},"alert_id":"al-{n}","kind":"{kind}","policy_id":"p-1","policy_version":2,"scope":"TENANT","window_start":"2026-11-01T00:00:00Z","window_end":"2026-12-01T00:00:00Z"{extra}}}"#,
                header(&format!("al-{n}"), if n == 0 { MEMBER } else { "" })
            ),
        );
    }
    let corrections = [("VOID", ""), ("AMEND", r#","quantity":2"#)];
    for (n, (action, extra)) in corrections.iter().enumerate() {
        add(
            EventType::CorrectionEvent,
            format!(
                r#"{{{},"original_event_id":"u-1","action":"{action}"{extra},"actor":"carol@finance","reason":"the producer double-counted"}}"#,
                header(&format!("c-{n}"), if n == 0 { MEMBER } else { "" })
            ),
        );
    }
    let leases = [
        ("GRANT", r#","units":5,"expires_at":"2026-11-02T10:00:10Z""#),
        ("RENEW", r#","units":2,"used":3,"expires_at":"2026-11-02T10:00:20Z""#),
        ("RETURN", r#","units":4,"used":3"#),
        ("EXPIRE", r#","units":0"#),
        ("RECLAIM", r#","units":4,"used":3"#),
    ];
    for (n, (action, extra)) in leases.iter().enumerate() {
        add(
            EventType::CapacityLeaseEvent,
            format!(
                r#"{{{},"capacity_lease_id":"cl-1","action":"{action}","holder":"shard-0001","policy_id":"p-1","policy_version":1,"window_start":"2026-11-01T00:00:00Z","window_end":"2026-12-01T00:00:00Z"{extra}}}"#,
                header(&format!("cl-{n}"), if n == 0 { MEMBER } else { "" })
            ),
        );
    }
    for (n, plan) in [r#""pro""#, "null"].iter().enumerate() {
        add(
            EventType::PlanAssignmentEvent,
            format!(
                r#"{{"event_id":"pa-{n}","occurred_at":"2026-11-02T10:00:00Z","tenant":"org-42","metric":"*","source":"api","plan":{plan},"effective_from":"2026-11-14T00:00:00Z","actor":"sales@example","reason":"upgraded"}}"#
            ),
        );
    }
    for (n, aggregation) in schemas::Aggregation::SYMBOLS.iter().enumerate() {
        let field = if *aggregation == "UNIQUE_COUNT" { r#","field":"SUBJECT""# } else { "" };
        add(
            EventType::MeterEvent,
            format!(
                r#"{{{},"version":1,"aggregation":"{aggregation}"{field},"effective_from":"2026-11-01T00:00:00Z","actor":"carol@finance","reason":"seats"}}"#,
                header(&format!("m-{n}"), "").replace(r#","subject":"user-7""#, "")
            ),
        );
    }
    let shown: BTreeSet<String> = events.iter().flat_map(shapes).collect();
    let missing: Vec<String> = expected_shapes().difference(&shown).cloned().collect();
    assert!(missing.is_empty(), "no sample event shows {missing:?}: add one to sample_events");
    events
}
