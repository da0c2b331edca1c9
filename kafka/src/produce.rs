//! Producing events (`quota-ledger produce`, a change sent with `--brokers`): JSON lines (the form `schemas encode` reads) to single-object Avro on Kafka, the tenant as key. Every
//! line is read and checked before the first is sent: a bad line stops the whole file, naming it. A tenant's
//! events go to its partition by Kafka's default partitioner, a plan default (tenant `*`) to every partition of
//! its topic (contract §9.4), and nothing is sent unless the input topics share one partition count.

use std::io::BufRead;

use crate::producer::{KafkaProducer, ProduceError, ProduceReport};
use crate::topics::{PartitionCountError, Topics};
use schemas::{Catalog, Event, EventType};

/// How many times `produce` asks the brokers for their topics before it gives up.
const METADATA_ASKS: u32 = 5;

/// Producing events failed, or was refused before anything was sent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProduceEventsError {
    /// The topic to produce to is not on the brokers (a broker that does not create topics on first use would
    /// otherwise let every message time out, as in an outage).
    #[error("{}", crate::topics::missing_topics_message(&std::iter::once(topic.clone()).collect(), brokers))]
    MissingTopic {
        /// The topic.
        topic: String,
        /// `bootstrap.servers`.
        brokers: String,
    },
    /// The input topics do not share one partition count (contract §9.4): a tenant's events would land in
    /// different shards.
    #[error("nothing produced to {brokers}")]
    PartitionCount {
        /// `bootstrap.servers`.
        brokers: String,
        /// The topics and their counts.
        source: PartitionCountError,
    },
    /// Sending failed.
    #[error(transparent)]
    Produce(#[from] ProduceError),
}

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

/// Sends `events` to `topic` as single-object Avro, the tenant as key, and waits for every acknowledgement; an
/// event of tenant `*` goes to every partition of `topic` ([`send_event`]). First checks that `topic` exists and
/// that it and every input topic of `inputs` the brokers have share one partition count (an input topic not
/// created yet cannot disagree; `ingest` names it).
pub fn produce_events(
    brokers: &str,
    overrides: &[(String, String)],
    inputs: &Topics,
    topic: &str,
    events: &[Event],
) -> Result<ProduceReport, ProduceEventsError> {
    let catalog = Catalog::builtin();
    let mut producer = KafkaProducer::new(brokers, overrides)?;
    let mut checked: Vec<&str> = inputs.names();
    checked.push(topic);
    let refused = |source| ProduceEventsError::PartitionCount { brokers: brokers.to_string(), source };
    // A first connection (TLS, SASL) may take longer than one request waits: asked a few times before giving up.
    let missing =
        (0..METADATA_ASKS).find_map(|_| producer.missing_topics(checked.iter().copied())).ok_or_else(|| {
            refused(PartitionCountError::Unanswered {
                timeout_ms: crate::topics::METADATA_WAIT_MS * u64::from(METADATA_ASKS),
            })
        })?;
    if missing.contains(topic) {
        return Err(ProduceEventsError::MissingTopic { topic: topic.to_string(), brokers: brokers.to_string() });
    }
    checked.retain(|t| !missing.contains(*t));
    producer.common_partition_count(checked).map_err(refused)?;
    for event in events {
        send_event(&mut producer, catalog, topic, event)?;
    }
    Ok(producer.finish()?)
}

/// Sends one event to `topic`, the tenant as key: to the tenant's partition, or, for a plan default (tenant `*`,
/// contract §9.4), to every partition, so that every shard records it. Answers the messages sent.
pub fn send_event(
    producer: &mut KafkaProducer,
    catalog: &Catalog,
    topic: &str,
    event: &Event,
) -> Result<u32, ProduceError> {
    let tenant = &event.header().tenant;
    let bytes = catalog.encode_single_object(event);
    if tenant == schemas::partition::PLAN_DEFAULT_TENANT {
        producer.send_to_every_partition(topic, tenant, &bytes)
    } else {
        producer.send(topic, tenant, &bytes).map(|()| 1)
    }
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
