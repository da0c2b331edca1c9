//! The schema ids of the Confluent wire format, read from the schema registry's own storage: the compacted topic
//! `_schemas` that Confluent Schema Registry and Karapace keep, read directly with the ledger's Kafka settings, so
//! that no registry server is needed to ingest. A record's key is `{"keytype": "SCHEMA", "subject": ..., "version":
//! ..., "magic": 1}` and its value `{"subject": ..., "version": ..., "id": ..., "schema": "<the schema's JSON>",
//! "deleted": false}` (`schemaType` absent for Avro); other key types (CONFIG, NOOP, DELETE_SUBJECT, ...) and
//! tombstones carry no schema.

use serde::Deserialize;

use crate::whole_topic::{self, WholeTopicError};

/// The topic Confluent Schema Registry and Karapace keep their schemas in by default (`kafkastore.topic`).
pub const SCHEMAS_TOPIC: &str = "_schemas";
/// How long reading `_schemas` whole may take.
pub const READ_TIMEOUT_MS: u64 = 30_000;

/// One schema the registry holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrySchema {
    /// Its id: what a message in the Confluent wire format carries.
    pub id: u32,
    /// The subject it is registered under (`quota.usage-value`, say).
    pub subject: String,
    /// Its version within the subject.
    pub version: i64,
    /// The schema's JSON text.
    pub schema: String,
}

#[derive(Deserialize)]
struct Key {
    keytype: String,
}

#[derive(Deserialize)]
struct Value {
    subject: String,
    version: i64,
    id: u32,
    schema: String,
    #[serde(default)]
    deleted: bool,
    #[serde(default, rename = "schemaType")]
    schema_type: Option<String>,
}

/// What `_schemas` holds: its Avro schemas (the last record of each id wins, as compaction keeps), and how many
/// records of type SCHEMA could not be read as one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegistrySchemas {
    /// The Avro schemas, by id.
    pub schemas: Vec<RegistrySchema>,
    /// SCHEMA records that are not of the documented form.
    pub unreadable: u64,
}

/// Reads `topic` (the registry's `kafkastore.topic`, [`SCHEMAS_TOPIC`] by default) whole from `brokers`.
pub fn read_schemas(
    brokers: &str,
    overrides: &[(String, String)],
    topic: &str,
) -> Result<RegistrySchemas, Box<WholeTopicError>> {
    let mut by_id = std::collections::BTreeMap::new();
    let mut unreadable = 0;
    let config = crate::config::checkpoint_reader(brokers, overrides);
    whole_topic::read(&config, brokers, topic, READ_TIMEOUT_MS, |record| {
        let is_schema =
            record.key.and_then(|key| serde_json::from_slice::<Key>(key).ok()).is_some_and(|k| k.keytype == "SCHEMA");
        if !is_schema {
            return;
        }
        let Some(payload) = record.payload else { return };
        match serde_json::from_slice::<Value>(payload) {
            Ok(value) if value.deleted => {}
            Ok(value) if value.schema_type.as_deref().is_none_or(|t| t == "AVRO") => {
                let schema = RegistrySchema {
                    id: value.id,
                    subject: value.subject,
                    version: value.version,
                    schema: value.schema,
                };
                by_id.insert(value.id, schema);
            }
            Ok(_) => {}
            Err(_) => unreadable += 1,
        }
    })?;
    Ok(RegistrySchemas { schemas: by_id.into_values().collect(), unreadable })
}

/// Shortest time between two reads of `_schemas` for ids met unknown: a burst of messages of a schema the registry
/// does not hold reads the topic once.
pub const REREAD_EVERY_MS: u64 = 5_000;

/// What [`install`] registered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Installed {
    /// Schemas registered, by id.
    pub registered: Vec<(u32, schemas::EventType)>,
    /// Schemas of `_schemas` the catalog cannot read (another record, or one the current reader cannot resolve), by
    /// id, with why: their messages are quarantined as `unknown_schema_id`.
    pub refused: Vec<(u32, String)>,
    /// Whether the topic exists.
    pub topic_exists: bool,
}

/// Has a message in the Confluent wire format whose schema id is not registered yet read `topic` on `brokers` whole
/// and register its Avro schemas ([`schemas::confluent`]), at most every [`REREAD_EVERY_MS`]: nothing is read until
/// the first such message (a deployment without a registry pays nothing, and a start with the brokers away is not
/// held up), and a producer that registers a new schema and sends with it at once is decoded.
pub fn install(brokers: &str, overrides: &[(String, String)], topic: &str) {
    let (brokers, overrides, topic) = (brokers.to_string(), overrides.to_vec(), topic.to_string());
    let last: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);
    schemas::confluent::set_resolver(move |id| {
        let mut last = last.lock().expect("never poisoned");
        if last.is_some_and(|at| at.elapsed() < std::time::Duration::from_millis(REREAD_EVERY_MS)) {
            return;
        }
        *last = Some(std::time::Instant::now());
        match load(&brokers, &overrides, &topic) {
            Ok(found) => {
                tracing::info!(
                    "schemas: {} schemas of {topic} registered for the Confluent wire format",
                    found.registered.len()
                );
                for (refused, why) in &found.refused {
                    tracing::warn!("schemas: schema id {refused} of {topic} is refused: {why}");
                }
                if !schemas::confluent::is_registered(id) {
                    tracing::warn!(
                        "schemas: schema id {id} is not in {topic}; its messages are quarantined as unknown_schema_id"
                    );
                }
            }
            Err(error) => tracing::warn!("schemas: cannot read {topic} for schema id {id}: {error}"),
        }
    });
}

fn load(brokers: &str, overrides: &[(String, String)], topic: &str) -> Result<Installed, Box<WholeTopicError>> {
    let found = match read_schemas(brokers, overrides, topic) {
        Ok(found) => found,
        Err(error) if matches!(*error, WholeTopicError::NoTopic { .. }) => return Ok(Installed::default()),
        Err(error) => return Err(error),
    };
    let mut installed = Installed { topic_exists: true, ..Installed::default() };
    for schema in found.schemas {
        match schemas::confluent::register(schema.id, &schema.schema) {
            Ok(event_type) => installed.registered.push((schema.id, event_type)),
            Err(why) => {
                installed.refused.push((schema.id, format!("{} version {}: {why}", schema.subject, schema.version)))
            }
        }
    }
    Ok(installed)
}
