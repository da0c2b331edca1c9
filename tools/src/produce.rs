//! `produce`: JSON lines (the form `schemas encode` reads) to single-object Avro on Kafka, the tenant as key. Every
//! line is read and checked before the first is sent: a bad line stops the whole file, naming it.

use std::io::BufRead;

use kafka::producer::{KafkaProducer, ProduceError, ProduceReport};
use schemas::{Catalog, Event, EventType};

/// A line that is not an event to send.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JsonLinesError {
    /// The input cannot be read.
    #[error("cannot read {input}")]
    Read {
        /// The input, as the caller names it.
        input: String,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// A line is not JSON of the record type.
    #[error("{input} line {line} is not a {event_type}")]
    NotEvent {
        /// The input, as the caller names it.
        input: String,
        /// The line, from 1.
        line: usize,
        /// The record type expected.
        event_type: EventType,
        /// What the JSON parser found.
        source: serde_json::Error,
    },
    /// A line is an event that fails validation (a negative quantity, an empty tenant, ...).
    #[error("{input} line {line} is not a valid {event_type}")]
    Invalid {
        /// The input, as the caller names it.
        input: String,
        /// The line, from 1.
        line: usize,
        /// The record type expected.
        event_type: EventType,
        /// What is wrong with it.
        source: schemas::Invalid,
    },
}

/// Every event of `lines`, one `event_type` per line (blank lines skipped), each validated; `input` names the
/// input in errors (a file's path, or `-`).
pub fn read_events(lines: impl BufRead, event_type: EventType, input: &str) -> Result<Vec<Event>, JsonLinesError> {
    let mut events = Vec::new();
    for (index, line) in lines.lines().enumerate() {
        let line = line.map_err(|source| JsonLinesError::Read { input: input.to_string(), source })?;
        if line.trim().is_empty() {
            continue;
        }
        let at = index + 1;
        let event = Event::from_json(event_type, &line).map_err(|source| JsonLinesError::NotEvent {
            input: input.to_string(),
            line: at,
            event_type,
            source,
        })?;
        schemas::validate(&event).map_err(|source| JsonLinesError::Invalid {
            input: input.to_string(),
            line: at,
            event_type,
            source,
        })?;
        events.push(event);
    }
    Ok(events)
}

/// Sends `events` to `topic` as single-object Avro, the tenant as key, and waits for every acknowledgement.
pub fn produce_events(
    brokers: &str,
    overrides: &[(String, String)],
    topic: &str,
    events: &[Event],
) -> Result<ProduceReport, ProduceError> {
    let catalog = Catalog::builtin();
    let mut producer = KafkaProducer::new(brokers, overrides)?;
    for event in events {
        producer.send(topic, &event.header().tenant, &catalog.encode_single_object(event))?;
    }
    producer.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    const USAGE: &str = r#"{"event_id": "u-1", "occurred_at": "2026-11-02T10:00:00Z", "tenant": "org-42", "subject": null, "metric": "tokens", "source": "test", "quantity": QUANTITY, "request_id": null, "attributes": {}}"#;

    fn usage(quantity: i64) -> String {
        USAGE.replace("QUANTITY", &quantity.to_string())
    }

    #[test]
    fn every_line_is_an_event_and_blank_lines_are_skipped() {
        let text = format!("{}\n\n{}\n", usage(1), usage(2));
        let events = read_events(text.as_bytes(), EventType::UsageEvent, "usage.jsonl").unwrap();
        assert_eq!(events.len(), 2);
    }

    #[test]
    fn a_bad_line_stops_the_input_naming_the_line() {
        let text = format!("{}\n{}\n", usage(1), usage(-3));
        let error = read_events(text.as_bytes(), EventType::UsageEvent, "usage.jsonl").unwrap_err();
        assert_eq!(error.to_string(), "usage.jsonl line 2 is not a valid UsageEvent");
        let error = read_events("{\"tenant\": 1}\n".as_bytes(), EventType::UsageEvent, "-").unwrap_err();
        assert!(matches!(error, JsonLinesError::NotEvent { line: 1, .. }), "{error}");
    }
}
