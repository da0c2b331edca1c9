//! A Kafka message as consumed, and what it decodes to: the unit a consumer hands to whoever appends it.

use kafka::topics::Topics;
use ledger::{Incoming, Origin, Rejected};
use rdkafka::message::{Headers, Message};
use schemas::{Catalog, DecodeError};

/// A message as read from Kafka, not decoded yet: where it was read, its key and its bytes. The consumer only
/// copies it; the writer that appends it decodes it (with a writer per shard, decoding runs on as many threads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumed {
    /// The topic it was read from.
    pub topic: String,
    /// Its partition.
    pub partition: i32,
    /// Its offset in the partition.
    pub offset: i64,
    /// Its key as produced (the tenant, contract §2), kept so that a forwarded copy carries the same key.
    pub key: Option<Vec<u8>>,
    /// Its bytes as produced (single-object Avro).
    pub payload: Vec<u8>,
    /// Whether it carries [`kafka::producer::PLAN_DEFAULT_HEADER`]: a plan default sent to every partition already
    /// (by its producer, or forwarded by a shard), which a shard records without forwarding it again.
    pub plan_default_copy: bool,
}

impl Consumed {
    /// The copy of a message librdkafka handed out.
    pub fn of(message: &impl Message) -> Consumed {
        Consumed {
            topic: message.topic().to_string(),
            partition: message.partition(),
            offset: message.offset(),
            key: message.key().map(<[u8]>::to_vec),
            payload: message.payload().unwrap_or_default().to_vec(),
            plan_default_copy: message
                .headers()
                .is_some_and(|headers| headers.iter().any(|h| h.key == kafka::producer::PLAN_DEFAULT_HEADER)),
        }
    }
}

/// A consumed message decoded: an event to append, or a message to quarantine.
// Nearly every message is an event; boxing it would add an allocation per message for the rare rejection.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Pending {
    Event(Incoming),
    Rejected(Rejected),
}

/// Decodes `message` as the record type of its topic; a topic of no known type or bytes that fail to decode or
/// validate become a message to quarantine, with its reason.
pub(crate) fn decode(catalog: &Catalog, topics: &Topics, message: Consumed) -> Pending {
    let Consumed { topic, partition, offset, payload, .. } = message;
    let expected = topics.event_type(&topic);
    let origin = Origin::Kafka { topic, partition, offset };
    let Some(expected) = expected else {
        // Subscribed topics only; a topic we do not know is a configuration bug, not a message to lose.
        let Origin::Kafka { topic, .. } = &origin else { unreachable!("made above") };
        let error = DecodeError::Shape { message: format!("topic {topic} carries no known record type") };
        return Pending::Rejected(Rejected::new(origin, payload, &error));
    };
    match catalog.decode_single_object(&payload, Some(expected)) {
        Ok(decoded) => Pending::Event(Incoming { event: decoded.event, origin, raw: Some(payload) }),
        Err(error) => Pending::Rejected(Rejected::new(origin, payload, &error)),
    }
}

/// The reasons of `rejected`, counted: what the quarantine gains by reason (`quarantined_by_reason` of the progress).
pub(crate) fn by_reason(rejected: &[ledger::Rejected]) -> std::collections::BTreeMap<String, u64> {
    let mut counts = std::collections::BTreeMap::new();
    for message in rejected {
        *counts.entry(message.reason_code.clone()).or_insert(0) += 1;
    }
    counts
}

/// Says on stderr, once per batch, what it quarantined: how many, by reason, and the first's coordinates and reason
/// (`quarantine list` has every one).
pub(crate) fn log_quarantined(rejected: &[ledger::Rejected]) {
    let Some(first) = rejected.first() else { return };
    let reasons: Vec<String> = by_reason(rejected).iter().map(|(reason, n)| format!("{reason}={n}")).collect();
    let reasons = reasons.join(",");
    let (topic, partition, offset) = match &first.origin {
        Origin::Kafka { topic, partition, offset } => (topic.as_str(), *partition, *offset),
        _ => ("", -1, -1),
    };
    tracing::warn!(
        quarantined = rejected.len(),
        reasons = %reasons,
        topic,
        partition,
        offset,
        first = %first.reason,
        "ingest: messages quarantined; `quarantine list` shows them"
    );
}
