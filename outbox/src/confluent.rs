//! The outbox in the Confluent wire format (`--outbox-format confluent`), for consumers whose deserializer expects it
//! (Kafka Connect, ksqlDB, Flink): a zero byte, the schema's id in the schema registry (4 bytes, big-endian), then the
//! Avro body. The ledger keeps its entries in single-object encoding either way; each is reframed as it is sent: its
//! header (`C3 01` and the writer schema's fingerprint) is taken off, the fingerprint checked against the schema
//! registered, and the id put in its place. The body is the same bytes.
//!
//! The id of a (topic, writer schema) is asked of the registry at its first entry, by registering the schema under
//! the topic's subject (the TopicNameStrategy: `{topic}-value`, the default of Confluent's serializers), and kept for
//! as long as the publisher lives. A registry that refuses the schema, or cannot be reached, leaves that topic's
//! entries pending (none is sent in the other format, none is lost), and the pass says why; the next pass asks again.

use std::collections::{BTreeMap, HashMap};

use kafka::schema_registry::{RegistryUrl, RegistryUrlError};
use schemas::catalog::{SINGLE_OBJECT_HEADER_BYTES, SINGLE_OBJECT_MAGIC};
use schemas::{Catalog, CatalogSchema};

use crate::OutboxTopics;

/// How the outbox's entries are written on their topics.
#[derive(Debug, Clone, Default)]
pub enum OutboxFormat {
    /// As the ledger keeps them: Avro single-object encoding (contract §2).
    #[default]
    SingleObject,
    /// The Confluent wire format, the schemas registered with this registry.
    Confluent(RegistryUrl),
}

impl OutboxFormat {
    /// The format named `name` (`single-object`, `confluent`), its schemas registered with `registry`, which it
    /// needs (a registry given with `single-object` is refused rather than silently unused); an `https://` registry
    /// trusts `trust`.
    pub fn named(name: &str, registry: Option<&str>, trust: &trust::Trust) -> Result<OutboxFormat, FormatError> {
        match (name, registry) {
            ("confluent", Some(url)) => Ok(OutboxFormat::Confluent(RegistryUrl::parse(url, trust)?)),
            ("single-object", None) => Ok(OutboxFormat::SingleObject),
            ("single-object", Some(_)) => Err(FormatError::RegistryUnused),
            ("confluent", None) => Err(FormatError::RegistryMissing),
            (other, _) => Err(FormatError::Unknown(other.to_string())),
        }
    }
}

/// Why an outbox format cannot be used as asked.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// A registry was given for the single-object format, which registers nothing.
    #[error("a schema registry is only used by the confluent outbox format")]
    RegistryUnused,
    /// The Confluent wire format needs a registry to number its schemas.
    #[error("the confluent outbox format needs a schema registry to register its schemas with")]
    RegistryMissing,
    /// Neither `single-object` nor `confluent`.
    #[error("no outbox format is named {0:?}: single-object or confluent")]
    Unknown(String),
    /// The registry's URL is not one.
    #[error(transparent)]
    Registry(#[from] RegistryUrlError),
}

/// The subject a topic's value schemas are registered under: the TopicNameStrategy of Confluent's serializers.
pub fn subject_of(topic: &str) -> String {
    format!("{topic}-value")
}

/// Why an entry cannot be written in the Confluent wire format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReframeError {
    /// The entry is not in single-object encoding, as every entry the ledger writes is.
    #[error("outbox entry {seq} is not in Avro single-object encoding (it starts {start:02x?})")]
    NotSingleObject {
        /// The entry.
        seq: u64,
        /// Its first bytes.
        start: Vec<u8>,
    },
    /// The entry's writer schema is not one of the catalog's, so there is no schema to register for it.
    #[error(
        "outbox entry {seq} was written with schema fingerprint {fingerprint:016x}, which the catalog does not hold"
    )]
    UnknownFingerprint {
        /// The entry.
        seq: u64,
        /// The fingerprint of its header.
        fingerprint: u64,
    },
    /// The entry's writer schema is not the one registered under the id: never sent under it.
    #[error(
        "outbox entry {seq} was written with schema fingerprint {found:016x}, not {registered:016x}, the schema \
         registered as id {id}"
    )]
    NotTheRegisteredSchema {
        /// The entry.
        seq: u64,
        /// The fingerprint of its header.
        found: u64,
        /// The fingerprint of the schema registered.
        registered: u64,
        /// The id the registry gave it.
        id: u32,
    },
}

/// The fingerprint in the header of single-object message `message` (outbox entry `seq`).
pub fn fingerprint_of(seq: u64, message: &[u8]) -> Result<u64, ReframeError> {
    match message.split_at_checked(SINGLE_OBJECT_HEADER_BYTES) {
        Some((header, _)) if header[..2] == SINGLE_OBJECT_MAGIC => {
            Ok(u64::from_le_bytes(header[2..].try_into().expect("the 8 bytes after the magic")))
        }
        _ => Err(ReframeError::NotSingleObject { seq, start: message.iter().take(4).copied().collect() }),
    }
}

/// Single-object message `message` (outbox entry `seq`) in the Confluent wire format under schema id `id`, which the
/// registry gave `registered`: refused unless the message's writer schema is that one (its fingerprint, or the
/// fingerprint earlier versions of the catalog wrote for it).
pub fn reframe(seq: u64, message: &[u8], registered: &CatalogSchema, id: u32) -> Result<Vec<u8>, ReframeError> {
    let found = fingerprint_of(seq, message)?;
    if found != registered.fingerprint && found != registered.legacy_fingerprint {
        return Err(ReframeError::NotTheRegisteredSchema { seq, found, registered: registered.fingerprint, id });
    }
    let body = &message[SINGLE_OBJECT_HEADER_BYTES..];
    let mut framed = Vec::with_capacity(schemas::confluent::HEADER_BYTES + body.len());
    framed.push(schemas::confluent::MAGIC);
    framed.extend_from_slice(&id.to_be_bytes());
    framed.extend_from_slice(body);
    debug_assert_eq!(schemas::confluent::schema_id(&framed), Some(id));
    Ok(framed)
}

/// The text registered for `schema`: its JSON as apache-avro writes it (names, defaults, logical types and docs
/// kept, which a consumer's reader schema resolves against), checked to be the same schema: parsed back, it has the
/// fingerprint the outbox's entries carry.
pub fn registry_text(schema: &CatalogSchema) -> Result<String, String> {
    let text =
        serde_json::to_string(&schema.schema).map_err(|e| format!("cannot write {} as JSON: {e}", schema.file))?;
    let parsed = apache_avro::Schema::parse_str(&text)
        .map_err(|e| format!("the JSON written for {} does not parse back: {e}", schema.file))?;
    let fingerprint = schemas::fingerprint(&parsed);
    if fingerprint != schema.fingerprint {
        return Err(format!(
            "the JSON written for {} is another schema (fingerprint {fingerprint:016x}, not {:016x})",
            schema.file, schema.fingerprint
        ));
    }
    Ok(text)
}

/// What a pass could not send in the Confluent wire format.
#[derive(Debug, Default)]
struct PassHeld {
    /// Topics whose entries wait in this pass, and why: a topic is held whole, so that its entries keep their order.
    topics: BTreeMap<String, String>,
    /// Why the registry could not be reached in this pass: it is not asked again until the next (a registry that does
    /// not answer would otherwise cost a timeout per schema).
    unreachable: Option<String>,
    /// Entries held in this pass.
    entries: u64,
    /// The last entry counted in `entries`: a retry of the pass reads entries again, and counts none twice.
    counted_through: Option<u64>,
}

/// How a [`crate::Publisher`] writes entries on their topics, and the ids it was given.
#[derive(Debug)]
pub(crate) struct Framing {
    format: OutboxFormat,
    /// The id of each (topic, writer schema fingerprint) registered. At most one per topic of the [`OutboxTopics`]
    /// (one per record type) and schema of the catalog, so it cannot outgrow their product; kept for the publisher's
    /// life, as the registry never gives an id to another schema.
    ids: HashMap<(String, u64), u32>,
    held: PassHeld,
    /// What was said of each topic held, so that a reason that holds is not said at every pass. One per topic.
    said: HashMap<String, kafka::Said>,
}

impl Framing {
    pub(crate) fn new(format: OutboxFormat) -> Framing {
        Framing { format, ids: HashMap::new(), held: PassHeld::default(), said: HashMap::new() }
    }

    /// A new pass: the topics held in the last are tried again.
    pub(crate) fn begin_pass(&mut self) {
        self.held = PassHeld::default();
    }

    /// Entries held in this pass (each once).
    pub(crate) fn held_entries(&self) -> u64 {
        self.held.entries
    }

    /// Why this pass held entries, when it did: each topic held and its reason.
    pub(crate) fn held_reason(&self) -> Option<String> {
        if self.held.entries == 0 {
            return None;
        }
        let reasons: Vec<String> = self.held.topics.iter().map(|(topic, why)| format!("{topic}: {why}")).collect();
        Some(format!("not sent in the Confluent wire format: {}", reasons.join("; ")))
    }

    /// `entries` as they go on their topics: those ready to send, each in the format asked; those of a topic whose
    /// schema has no id (the registry refused it or was not reached) are left out, held, and stay pending.
    pub(crate) fn frame(
        &mut self,
        entries: Vec<ledger::OutboxEntry>,
        topics: &OutboxTopics,
    ) -> Vec<ledger::OutboxEntry> {
        let OutboxFormat::Confluent(registry) = &self.format else { return entries };
        let registry = registry.clone();
        let mut ready = Vec::with_capacity(entries.len());
        for mut entry in entries {
            // An entry without a topic goes on: the send names it (`OutboxPublishError::NoTopic`).
            let Some(topic) = topics.topic_of(entry.event_type) else {
                ready.push(entry);
                continue;
            };
            match self.confluent(&registry, topic, &entry) {
                Ok(framed) => {
                    entry.message = framed;
                    ready.push(entry);
                }
                Err(why) => self.hold(topic, entry.seq, why),
            }
        }
        ready
    }

    /// Entry `entry` of `topic` in the Confluent wire format, its schema registered first if it has no id yet.
    fn confluent(
        &mut self,
        registry: &RegistryUrl,
        topic: &str,
        entry: &ledger::OutboxEntry,
    ) -> Result<Vec<u8>, String> {
        if let Some(why) = self.held.topics.get(topic) {
            return Err(why.clone());
        }
        let found = fingerprint_of(entry.seq, &entry.message).map_err(|e| e.to_string())?;
        let schema = Catalog::builtin()
            .by_fingerprint(found)
            .ok_or_else(|| ReframeError::UnknownFingerprint { seq: entry.seq, fingerprint: found }.to_string())?;
        let key = (topic.to_string(), schema.fingerprint);
        let id = match self.ids.get(&key) {
            Some(id) => *id,
            None => {
                let id = self.register(registry, topic, schema)?;
                if self.said.remove(topic).is_some() {
                    tracing::info!(%topic, "outbox: the schema registry answered; the topic's entries are sent again");
                }
                tracing::info!(
                    schema = schema.file,
                    schema_id = id,
                    subject = %subject_of(topic),
                    registry = %registry.base(),
                    "outbox: schema registered"
                );
                self.ids.insert(key, id);
                id
            }
        };
        reframe(entry.seq, &entry.message, schema, id).map_err(|e| e.to_string())
    }

    /// The id the registry gives `schema` under `topic`'s subject.
    fn register(&mut self, registry: &RegistryUrl, topic: &str, schema: &CatalogSchema) -> Result<u32, String> {
        let subject = subject_of(topic);
        if let Some(reason) = &self.held.unreachable {
            let url = registry.base().to_string();
            let not_asked = RegistryUrlError::Register { url, subject, status: None, reason: reason.clone() };
            return Err(not_asked.to_string());
        }
        let text = registry_text(schema)?;
        registry.register(&subject, &text).map_err(|error| {
            if let RegistryUrlError::Register { status: None, reason, .. } = &error {
                self.held.unreachable = Some(reason.clone());
            }
            error.to_string()
        })
    }

    /// Holds `topic` for the rest of the pass, `seq` the entry that met `why`; said on stderr when the reason is new
    /// for the topic, and once a minute while it holds (a pass a second would say it every second).
    fn hold(&mut self, topic: &str, seq: u64, why: String) {
        if !self.held.topics.contains_key(topic) {
            if self.said.entry(topic.to_string()).or_default().again(&why) {
                tracing::error!(%topic, %why, "outbox: entries stay pending, not sent in the Confluent wire format");
            }
            self.held.topics.insert(topic.to_string(), why);
        }
        if self.held.counted_through.is_none_or(|through| seq > through) {
            self.held.entries += 1;
            self.held.counted_through = Some(seq);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use schemas::{Event, EventType};

    fn usage() -> Event {
        Event::from_json(
            EventType::UsageEvent,
            r#"{"event_id":"u-1","occurred_at":"2026-11-02T10:00:00Z","tenant":"org-1","metric":"requests","source":"api","quantity":3}"#,
        )
        .unwrap()
    }

    // Proves that the text registered for each schema of the catalog, current and older, is that schema: parsed back
    // it has the fingerprint the entries written with it carry.
    #[test]
    fn every_catalog_schema_is_registered_as_itself() {
        for schema in Catalog::builtin().schemas() {
            let text = registry_text(schema).unwrap_or_else(|e| panic!("{}: {e}", schema.file));
            assert!(text.contains("timestamp-micros"), "{}: logical types are kept: {text}", schema.file);
        }
    }

    // Proves an entry is reframed as a zero byte, the id big-endian and the same body, which the Confluent decoder of
    // the catalog reads back as the same event once the id names the schema registered.
    #[test]
    fn an_entry_becomes_the_id_and_the_same_body() {
        let catalog = Catalog::builtin();
        let event = usage();
        let message = catalog.encode_single_object(&event);
        let schema = catalog.current(EventType::UsageEvent);
        let framed = reframe(4, &message, schema, 0x0102_0304).unwrap();
        assert_eq!(framed[..5], [0, 1, 2, 3, 4]);
        assert_eq!(framed[5..], message[SINGLE_OBJECT_HEADER_BYTES..]);
        schemas::confluent::register(0x0102_0304, &registry_text(schema).unwrap()).unwrap();
        assert_eq!(catalog.decode_single_object(&framed, Some(EventType::UsageEvent)).unwrap().event, event);

        // An entry an earlier version wrote with the legacy fingerprint is the same schema.
        let mut legacy = message.clone();
        legacy[2..10].copy_from_slice(&schema.legacy_fingerprint.to_le_bytes());
        assert_eq!(reframe(4, &legacy, schema, 9).unwrap()[5..], framed[5..]);
    }

    // Proves an entry is never sent under the id of another schema, and one that is not single-object is named.
    #[test]
    fn another_schema_or_another_encoding_is_refused() {
        let catalog = Catalog::builtin();
        let message = catalog.encode_single_object(&usage());
        let decisions = catalog.current(EventType::DecisionEvent);
        assert!(matches!(
            reframe(4, &message, decisions, 9),
            Err(ReframeError::NotTheRegisteredSchema { seq: 4, id: 9, .. })
        ));
        let refused = reframe(5, b"\x00\x00\x00\x00\x07body", decisions, 9).unwrap_err();
        assert_eq!(refused, ReframeError::NotSingleObject { seq: 5, start: vec![0, 0, 0, 0] });
        assert!(matches!(fingerprint_of(6, &[0xC3, 0x01, 1, 2]), Err(ReframeError::NotSingleObject { .. })));
    }

    // Proves the subject is the TopicNameStrategy's.
    #[test]
    fn the_subject_is_the_topics_value() {
        assert_eq!(subject_of("quota.decisions"), "quota.decisions-value");
    }
}
