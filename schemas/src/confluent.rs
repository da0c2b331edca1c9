//! The Confluent wire format beside single-object encoding: a zero byte, the writer schema's id in the schema registry
//! (4 bytes, big-endian), then the Avro body. The ids are this process's registry, filled from the registry's own
//! storage (the compacted `_schemas` topic, read by the `kafka` crate) with [`register`]; each schema is checked as a
//! `--schemas` file is (a record of the catalog's types that the current reader can read). A message whose id is not
//! registered is refused [`DecodeError::UnknownSchemaId`] (quarantine reason `unknown_schema_id`), and decodes once
//! its schema is registered (`quarantine replay`).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, RwLock};

use apache_avro::Schema;
use apache_avro::reader::datum::GenericDatumReader;

use crate::catalog::{Catalog, Decoded, decode_with, writer_schema};
use crate::error::DecodeError;
use crate::event::EventType;
use crate::validate;

/// The first byte of the Confluent wire format.
pub const MAGIC: u8 = 0;
/// The magic byte and the 4-byte schema id.
pub const HEADER_BYTES: usize = 5;

/// A registered writer schema, resolved to the current reader schema of its type.
struct Registered {
    event_type: EventType,
    fingerprint: u64,
    reader: GenericDatumReader<'static>,
}

static IDS: LazyLock<RwLock<HashMap<u32, Arc<Registered>>>> = LazyLock::new(Default::default);

/// What looks an unknown id up (reads `_schemas` again, say), registering what it finds.
type Resolver = Box<dyn Fn(u32) + Send + Sync>;
static RESOLVER: std::sync::OnceLock<Resolver> = std::sync::OnceLock::new();

/// Sets what a decode asks when it meets an unregistered id, before it refuses the message: a schema registered
/// after the process started is found then. Set once per process; later calls are ignored.
pub fn set_resolver(resolver: impl Fn(u32) + Send + Sync + 'static) {
    let _ = RESOLVER.set(Box::new(resolver));
}

/// Registers the schema registry's schema `id` (its Avro schema text): the record type it writes, or why it cannot be
/// read into one. Registering an id again replaces it (the registry never reuses an id for another schema).
pub fn register(id: u32, text: &str) -> Result<EventType, String> {
    let catalog = Catalog::builtin();
    let (schema, event_type) = writer_schema(text, |t| &catalog.current(t).schema)?;
    let fingerprint = crate::catalog::fingerprint(&schema);
    // Registered schemas live as long as the process, as the catalog's do.
    let schema: &'static Schema = Box::leak(Box::new(schema));
    let reader = GenericDatumReader::builder(schema)
        .reader_schema(&catalog.current(event_type).schema)
        .build()
        .map_err(|e| format!("does not resolve to the current {event_type} schema: {e}"))?;
    let registered = Arc::new(Registered { event_type, fingerprint, reader });
    IDS.write().expect("never poisoned").insert(id, registered);
    Ok(event_type)
}

/// Whether schema `id` is registered.
pub fn is_registered(id: u32) -> bool {
    IDS.read().expect("never poisoned").contains_key(&id)
}

/// The schema id of a message in the Confluent wire format, if it is one.
pub fn schema_id(bytes: &[u8]) -> Option<u32> {
    match bytes {
        [MAGIC, a, b, c, d, ..] => Some(u32::from_be_bytes([*a, *b, *c, *d])),
        _ => None,
    }
}

/// Decodes and validates a message in the Confluent wire format (its size already checked).
pub(crate) fn decode(bytes: &[u8], expected: Option<EventType>) -> Result<Decoded, DecodeError> {
    let id = schema_id(bytes).ok_or(DecodeError::TruncatedHeader { size: bytes.len() })?;
    let lookup = || IDS.read().expect("never poisoned").get(&id).cloned();
    let registered = match lookup() {
        Some(registered) => registered,
        None => {
            if let Some(resolve) = RESOLVER.get() {
                resolve(id);
            }
            lookup().ok_or(DecodeError::UnknownSchemaId { id })?
        }
    };
    if let Some(expected) = expected
        && expected != registered.event_type
    {
        return Err(DecodeError::WrongType { expected, found: registered.event_type });
    }
    let event = decode_with(&registered.reader, registered.event_type, registered.fingerprint, &bytes[HEADER_BYTES..])?;
    validate::validate(&event)?;
    Ok(Decoded { event, writer_fingerprint: registered.fingerprint })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registered_id_decodes_and_an_unknown_one_is_named() {
        let catalog = Catalog::builtin();
        let event = crate::Event::from_json(
            EventType::UsageEvent,
            r#"{"event_id":"c-1","occurred_at":"2026-11-02T10:00:00Z","tenant":"org-1","metric":"requests","source":"api","quantity":3}"#,
        )
        .unwrap();
        let mut message = vec![MAGIC, 0, 0, 0x30, 0x39];
        message.extend_from_slice(&catalog.encode_body(&event));
        assert_eq!(
            catalog.decode_single_object(&message, None).unwrap_err(),
            DecodeError::UnknownSchemaId { id: 12345 }
        );
        let text = serde_json::to_string(&catalog.current(EventType::UsageEvent).schema).unwrap();
        assert_eq!(register(12345, &text), Ok(EventType::UsageEvent));
        let decoded = catalog.decode_single_object(&message, Some(EventType::UsageEvent)).unwrap();
        assert_eq!(decoded.event, event);
        assert!(matches!(
            catalog.decode_single_object(&message, Some(EventType::GrantEvent)),
            Err(DecodeError::WrongType { .. })
        ));
        assert!(register(7, r#"{"type":"record","name":"quota.v1.Nope","fields":[]}"#).is_err());
        assert!(!is_registered(7));
    }
}
