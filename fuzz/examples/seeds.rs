//! Writes the seed inputs of the decoder targets: one message of every record type under every schema of the
//! catalog for `single_object` (with each topic's expected type as first byte), and a small container file of
//! each type for `container_file`. `cargo run --example seeds` in `fuzz/`.

use std::path::Path;

use schemas::{Catalog, Event, EventType};

fn main() {
    let catalog = Catalog::builtin();
    let events = sample_events();
    let single = Path::new("corpus/single_object");
    let container = Path::new("corpus/container_file");
    std::fs::create_dir_all(single).unwrap();
    std::fs::create_dir_all(container).unwrap();
    for event in &events {
        let message = catalog.encode_single_object(event);
        let pick = EventType::ALL.iter().position(|t| *t == event.event_type()).unwrap() as u8;
        let name = format!("seed-{}", event.event_type());
        std::fs::write(single.join(&name), [&[pick][..], &message].concat()).unwrap();
        let schema = &catalog.current(event.event_type()).schema;
        let mut writer = apache_avro::Writer::new(schema, Vec::new()).unwrap();
        writer.append_value_ref(&schemas::avro::to_value(event)).unwrap();
        std::fs::write(container.join(&name), writer.into_inner().unwrap()).unwrap();
    }
}

fn sample_events() -> Vec<Event> {
    let header = r#""occurred_at":"2026-11-02T10:00:00Z","tenant":"org-42","subject":"user-7","metric":"requests","source":"api""#;
    let json = [
        (
            EventType::UsageEvent,
            format!(
                r#"{{"event_id":"u-1",{header},"quantity":3,"request_id":"req-1","attributes":{{"model":"small"}}}}"#
            ),
        ),
        (
            EventType::DecisionEvent,
            format!(
                r#"{{"event_id":"d-1",{header},"request_id":"req-1","idempotency_key":"k-1","amount":3,"outcome":"DENIED","reason":"QUOTA_EXCEEDED","policy_id":"p-1","policy_version":2,"window_start":"2026-11-01T00:00:00Z","window_end":"2026-12-01T00:00:00Z","limit":100,"used_before":99,"remaining":0,"retry_after_ms":1000}}"#
            ),
        ),
        (
            EventType::ReservationEvent,
            format!(
                r#"{{"event_id":"r-1",{header},"reservation_id":"res-1","action":"RESERVE","amount":50,"expires_at":"2026-11-02T10:05:00Z"}}"#
            ),
        ),
        (
            EventType::GrantEvent,
            format!(
                r#"{{"event_id":"g-1",{header},"grant_id":"g-1","amount":500,"valid_from":"2026-11-01T00:00:00Z","valid_until":"2026-12-01T00:00:00Z","reason":"goodwill"}}"#
            ),
        ),
        (
            EventType::PolicyEvent,
            format!(
                r#"{{"event_id":"p-1",{header},"policy_id":"p-1","version":2,"scope":"TENANT","limit":100,"window":"MONTH","enforcement":"HARD","effective_from":"2026-11-01T00:00:00Z","burst":null,"alert_thresholds":[50,100]}}"#
            ),
        ),
        (
            EventType::AdjustmentEvent,
            format!(
                r#"{{"event_id":"a-1",{header},"adjustment_id":"a-1","kind":"OVERSHOOT","policy_id":"p-1","window_start":"2026-11-01T00:00:00Z","window_end":"2026-12-01T00:00:00Z","amount":7,"refs":["u-1"],"run_id":"run-1","scope":"TENANT"}}"#
            ),
        ),
        (
            EventType::AlertEvent,
            format!(
                r#"{{"event_id":"al-1",{header},"alert_id":"al-1","kind":"THRESHOLD","policy_id":"p-1","policy_version":2,"scope":"TENANT","window_start":"2026-11-01T00:00:00Z","window_end":"2026-12-01T00:00:00Z","threshold_percent":80,"limit":100,"observed":80,"request_id":"req-1"}}"#
            ),
        ),
    ];
    json.iter().map(|(t, j)| Event::from_json(*t, j).unwrap()).collect()
}
