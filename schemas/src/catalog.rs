//! The schema catalog: every writer schema we accept, by CRC-64-AVRO fingerprint, and the current (reader)
//! schema of each record type. Older versions stay in the catalog so that old producers keep working.

use std::collections::HashMap;
use std::io::Read;
use std::sync::OnceLock;

use apache_avro::rabin::Rabin;
use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::types::Value;
use apache_avro::writer::datum::GenericDatumWriter;
use apache_avro::{Reader, Schema};

use crate::avro;
use crate::error::DecodeError;
use crate::event::{Event, EventType};
use crate::validate::{self, MAX_MESSAGE_BYTES};

/// The two marker bytes that open Avro single-object encoding.
pub const SINGLE_OBJECT_MAGIC: [u8; 2] = [0xC3, 0x01];
/// Largest single allocation apache-avro may make while decoding: a string, an array, or a container file
/// block. Every message is at most `MAX_MESSAGE_BYTES` (1 MiB); container writers use blocks of 64 KiB (Java)
/// to a few MiB, so 16 MiB refuses only corrupt lengths.
pub const MAX_ALLOCATION_BYTES: usize = 16 * 1024 * 1024;
/// Magic plus the 8-byte fingerprint.
pub const SINGLE_OBJECT_HEADER_BYTES: usize = 10;

/// `(file name under schemas/avro, record type, current?, schema text)`. The files are the interface handed
/// to other teams; the binary embeds the same bytes.
const SCHEMA_FILES: &[(&str, EventType, bool, &str)] = &[
    ("UsageEvent.avsc", EventType::UsageEvent, true, include_str!("../avro/UsageEvent.avsc")),
    ("DecisionEvent.avsc", EventType::DecisionEvent, true, include_str!("../avro/DecisionEvent.avsc")),
    ("ReservationEvent.avsc", EventType::ReservationEvent, true, include_str!("../avro/ReservationEvent.avsc")),
    ("GrantEvent.avsc", EventType::GrantEvent, true, include_str!("../avro/GrantEvent.avsc")),
    ("PolicyEvent.avsc", EventType::PolicyEvent, true, include_str!("../avro/PolicyEvent.avsc")),
    ("AdjustmentEvent.avsc", EventType::AdjustmentEvent, true, include_str!("../avro/AdjustmentEvent.avsc")),
    ("AlertEvent.avsc", EventType::AlertEvent, true, include_str!("../avro/AlertEvent.avsc")),
    ("CorrectionEvent.avsc", EventType::CorrectionEvent, true, include_str!("../avro/CorrectionEvent.avsc")),
    ("CapacityLeaseEvent.avsc", EventType::CapacityLeaseEvent, true, include_str!("../avro/CapacityLeaseEvent.avsc")),
    (
        "PlanAssignmentEvent.avsc",
        EventType::PlanAssignmentEvent,
        true,
        include_str!("../avro/PlanAssignmentEvent.avsc"),
    ),
    ("MeterEvent.avsc", EventType::MeterEvent, true, include_str!("../avro/MeterEvent.avsc")),
    ("history/UsageEvent.v1.avsc", EventType::UsageEvent, false, include_str!("../avro/history/UsageEvent.v1.avsc")),
    (
        "history/DecisionEvent.v1.avsc",
        EventType::DecisionEvent,
        false,
        include_str!("../avro/history/DecisionEvent.v1.avsc"),
    ),
    ("history/PolicyEvent.v1.avsc", EventType::PolicyEvent, false, include_str!("../avro/history/PolicyEvent.v1.avsc")),
    ("history/PolicyEvent.v2.avsc", EventType::PolicyEvent, false, include_str!("../avro/history/PolicyEvent.v2.avsc")),
    ("history/PolicyEvent.v3.avsc", EventType::PolicyEvent, false, include_str!("../avro/history/PolicyEvent.v3.avsc")),
    ("history/PolicyEvent.v4.avsc", EventType::PolicyEvent, false, include_str!("../avro/history/PolicyEvent.v4.avsc")),
    ("history/PolicyEvent.v5.avsc", EventType::PolicyEvent, false, include_str!("../avro/history/PolicyEvent.v5.avsc")),
    ("history/PolicyEvent.v6.avsc", EventType::PolicyEvent, false, include_str!("../avro/history/PolicyEvent.v6.avsc")),
    ("history/PolicyEvent.v7.avsc", EventType::PolicyEvent, false, include_str!("../avro/history/PolicyEvent.v7.avsc")),
    ("history/PolicyEvent.v8.avsc", EventType::PolicyEvent, false, include_str!("../avro/history/PolicyEvent.v8.avsc")),
    ("history/PolicyEvent.v9.avsc", EventType::PolicyEvent, false, include_str!("../avro/history/PolicyEvent.v9.avsc")),
    (
        "history/PolicyEvent.v10.avsc",
        EventType::PolicyEvent,
        false,
        include_str!("../avro/history/PolicyEvent.v10.avsc"),
    ),
    (
        "history/PolicyEvent.v11.avsc",
        EventType::PolicyEvent,
        false,
        include_str!("../avro/history/PolicyEvent.v11.avsc"),
    ),
    ("history/UsageEvent.v2.avsc", EventType::UsageEvent, false, include_str!("../avro/history/UsageEvent.v2.avsc")),
    (
        "history/DecisionEvent.v2.avsc",
        EventType::DecisionEvent,
        false,
        include_str!("../avro/history/DecisionEvent.v2.avsc"),
    ),
    (
        "history/ReservationEvent.v2.avsc",
        EventType::ReservationEvent,
        false,
        include_str!("../avro/history/ReservationEvent.v2.avsc"),
    ),
    ("history/GrantEvent.v2.avsc", EventType::GrantEvent, false, include_str!("../avro/history/GrantEvent.v2.avsc")),
    (
        "history/AdjustmentEvent.v2.avsc",
        EventType::AdjustmentEvent,
        false,
        include_str!("../avro/history/AdjustmentEvent.v2.avsc"),
    ),
    (
        "history/ReservationEvent.v1.avsc",
        EventType::ReservationEvent,
        false,
        include_str!("../avro/history/ReservationEvent.v1.avsc"),
    ),
    ("history/GrantEvent.v1.avsc", EventType::GrantEvent, false, include_str!("../avro/history/GrantEvent.v1.avsc")),
    (
        "history/AdjustmentEvent.v1.avsc",
        EventType::AdjustmentEvent,
        false,
        include_str!("../avro/history/AdjustmentEvent.v1.avsc"),
    ),
];

/// One schema of the catalog.
#[derive(Debug)]
pub struct CatalogSchema {
    /// Path under `schemas/avro/` of a compiled schema; the file's path as given of one added at run time.
    pub file: &'static str,
    /// Whether it was added at run time (`--schemas DIR`) rather than compiled in.
    pub runtime: bool,
    /// The record type it writes or reads.
    pub event_type: EventType,
    /// Whether this is the reader schema of its type (otherwise an older writer schema).
    pub current: bool,
    /// CRC-64-AVRO (Rabin) fingerprint of the Parsing Canonical Form.
    pub fingerprint: u64,
    /// The fingerprint apache-avro computes ([`legacy_fingerprint`]), which earlier versions of this catalog
    /// wrote; still accepted when reading.
    pub legacy_fingerprint: u64,
    /// The parsed schema.
    pub schema: Schema,
}

/// A message decoded from single-object encoding or read from a container file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// The event, resolved to the current reader schema.
    pub event: Event,
    /// Fingerprint of the schema the producer wrote with.
    pub writer_fingerprint: u64,
}

/// Every schema we accept, indexed by fingerprint, with apache-avro's resolved readers and writers built once
/// (building them resolves the schema's names, which costs more than encoding an event).
pub struct Catalog {
    schemas: &'static [CatalogSchema],
    by_fingerprint: HashMap<u64, usize>,
    /// Per schema: reads a body written with it, resolved to the current schema of its type.
    readers: Vec<GenericDatumReader<'static>>,
    /// Per schema: writes a value of that schema. Values come from `avro::to_value`, whose shape the round-trip
    /// tests pin, so writers skip apache-avro's per-value validation.
    writers: Vec<GenericDatumWriter<'static>>,
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog").field("schemas", &self.schemas).finish_non_exhaustive()
    }
}

/// The CRC-64-AVRO fingerprint of a schema's Parsing Canonical Form as the Avro specification defines it, as
/// the number whose little-endian bytes follow the single-object magic: what the Java, Python and fastavro
/// encoders of other teams' producers write.
pub fn fingerprint(schema: &Schema) -> u64 {
    rabin(canonical_form(schema).as_bytes())
}

/// The fingerprint apache-avro 0.22 computes, which earlier versions of this catalog wrote: its canonical form writes a
/// primitive with a logical type (`{"type": "long", "logicalType": "timestamp-micros"}`) as `{"type":"long"}`
/// where the specification's [PRIMITIVES] rule writes `"long"`, so every schema of ours, all having timestamps,
/// had a fingerprint no other encoder computes, and their producers' messages were quarantined as of an unknown
/// writer schema. Still accepted when reading: topics and ledgers written by those versions carry it.
pub fn legacy_fingerprint(schema: &Schema) -> u64 {
    rabin(schema.canonical_form().as_bytes())
}

/// Why a schema read from a producer's file has no Parsing Canonical Form that apache-avro can compute: a key the
/// form keeps (`name`, `type`, `fields`, `symbols`, `items`, `values`, `size`) whose value is not a schema, a list
/// or a name (`"symbols": null` in a field, `"size": "x"`). apache-avro parses such a schema, keeping the key as a
/// custom attribute, and then panics computing its canonical form; the form of a schema of the catalog never has
/// one. Likewise a name or symbol holding a quote or a control character, which apache-avro accepts and writes into
/// the form unescaped, so that the form is not JSON.
pub fn canonical_form_refusal(schema: &Schema) -> Option<String> {
    let json = match serde_json::to_value(schema) {
        Ok(json) => json,
        Err(error) => return Some(format!("it does not serialize: {error}")),
    };
    if let Some(refusal) = not_canonicalizable(&json, "schema") {
        return Some(refusal);
    }
    match serde_json::from_str::<serde_json::Value>(&schema.canonical_form()) {
        Ok(_) => None,
        Err(error) => Some(format!("a name or symbol in it is not plain text ({error})")),
    }
}

fn not_canonicalizable(json: &serde_json::Value, path: &str) -> Option<String> {
    const KEPT: [&str; 7] = ["name", "type", "fields", "symbols", "items", "values", "size"];
    match json {
        serde_json::Value::Object(map) => map.iter().find_map(|(key, value)| {
            let kept = KEPT.contains(&key.as_str());
            let path = format!("{path}.{key}");
            match value {
                serde_json::Value::Number(_) if key == "size" => None,
                serde_json::Value::String(s) if key == "size" && s.parse::<i64>().is_err() => {
                    Some(format!("{path} is {s:?}, not a number"))
                }
                serde_json::Value::String(_) => None,
                serde_json::Value::Object(_) | serde_json::Value::Array(_) if kept => not_canonicalizable(value, &path),
                _ if kept => Some(format!("{path} is {value}, not a schema, a list or a name")),
                _ => None,
            }
        }),
        serde_json::Value::Array(items) => items.iter().enumerate().find_map(|(i, item)| match item {
            serde_json::Value::Object(_) | serde_json::Value::Array(_) => {
                not_canonicalizable(item, &format!("{path}[{i}]"))
            }
            serde_json::Value::String(_) => None,
            other => Some(format!("{path}[{i}] is {other}, not a schema or a name")),
        }),
        _ => None,
    }
}

/// The Parsing Canonical Form: apache-avro's, with every `{"type": PRIMITIVE}` left after its [STRIP] written as
/// the bare primitive name. The schema must pass [`canonical_form_refusal`] (every schema of the catalog does).
pub fn canonical_form(schema: &Schema) -> String {
    let mut form: serde_json::Value =
        serde_json::from_str(&schema.canonical_form()).expect("apache-avro writes its canonical form as JSON");
    bare_primitives(&mut form);
    serde_json::to_string(&form).expect("a JSON value serializes")
}

fn bare_primitives(form: &mut serde_json::Value) {
    const PRIMITIVES: [&str; 8] = ["null", "boolean", "int", "long", "float", "double", "bytes", "string"];
    match form {
        serde_json::Value::Object(map) => {
            if let (1, Some(serde_json::Value::String(name))) = (map.len(), map.get("type"))
                && PRIMITIVES.contains(&name.as_str())
            {
                *form = serde_json::Value::String(name.clone());
                return;
            }
            map.values_mut().for_each(bare_primitives);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(bare_primitives),
        _ => {}
    }
}

/// Decodes an Avro body with `datum_reader` (a writer schema resolved to the current schema of `event_type`).
pub(crate) fn decode_with(
    datum_reader: &GenericDatumReader<'static>,
    event_type: EventType,
    fingerprint: u64,
    body: &[u8],
) -> Result<Event, DecodeError> {
    let body_error = |message: String| DecodeError::from_body_error(event_type, fingerprint, message);
    let mut input = BodyReader { rest: body, read_past_end: false };
    let value = datum_reader.read_value(&mut input);
    if input.read_past_end {
        // Whatever apache-avro made of it (an error, or a record with nulls), the body ended too early.
        let message = match &value {
            Err(e) => error_chain(e),
            Ok(_) => format!("the {}-byte body ends before the record does", body.len()),
        };
        return Err(DecodeError::TruncatedBody { event_type, fingerprint, message });
    }
    let value = value.map_err(|e| body_error(error_chain(&e)))?;
    if !input.rest.is_empty() {
        return Err(DecodeError::TrailingBytes { event_type, trailing: input.rest.len() });
    }
    Ok(avro::from_value(event_type, &value)?)
}

fn rabin(bytes: &[u8]) -> u64 {
    use digest::Digest;
    u64::from_le_bytes(Rabin::digest(bytes).into())
}

static BUILTIN: OnceLock<Catalog> = OnceLock::new();

/// A directory of writer schemas (`--schemas DIR`) that cannot be added to the catalog.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaDirError {
    /// The directory cannot be read.
    #[error("cannot read the schema directory {dir}")]
    Directory {
        /// The directory.
        dir: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A schema file is refused; none of the directory's is added.
    #[error("{file}: {reason}; no schema of the directory was added")]
    Refused {
        /// The file.
        file: std::path::PathBuf,
        /// Why.
        reason: String,
    },
    /// The catalog was used before the directory was added.
    #[error("the schema catalog was in use before the schema directory was added")]
    AlreadyInUse,
}

/// A producer's writer schema from its text: a record of the catalog's types, with a canonical form, that the current
/// reader schema of its type (`current`) can read; or why not.
pub(crate) fn writer_schema<'a>(
    text: &str,
    current: impl Fn(EventType) -> &'a Schema,
) -> Result<(Schema, EventType), String> {
    let schema = Schema::parse_str(text).map_err(|e| format!("not a valid Avro schema: {}", error_chain(&e)))?;
    if let Some(reason) = canonical_form_refusal(&schema) {
        return Err(format!("has no Parsing Canonical Form: {reason}"));
    }
    let name = match &schema {
        Schema::Record(record) => record.name.fullname(None),
        _ => return Err("not a record schema".into()),
    };
    let event_type = EventType::from_name(&name).ok_or_else(|| {
        let known: Vec<String> = EventType::ALL.iter().map(|t| format!("quota.v1.{t}")).collect();
        format!("record {name} is not a record type of the catalog ({})", known.join(", "))
    })?;
    apache_avro::schema_compatibility::SchemaCompatibility::can_read(&schema, current(event_type))
        .map_err(|e| format!("the current {event_type} schema cannot read what it writes: {e}"))?;
    Ok((schema, event_type))
}

/// A writer schema of a producer's file: a record of the catalog's types, with a canonical form, that the current
/// reader schema of its type can read (Avro's schema resolution: fields it lacks have defaults in the reader, fields
/// the reader lacks are skipped, promotions allowed).
fn runtime_schema(path: &std::path::Path, compiled: &[CatalogSchema]) -> Result<CatalogSchema, SchemaDirError> {
    let refused = |reason: String| SchemaDirError::Refused { file: path.to_path_buf(), reason };
    let text = std::fs::read_to_string(path).map_err(|e| refused(format!("cannot be read: {e}")))?;
    let schema =
        Schema::parse_str(&text).map_err(|e| refused(format!("not a valid Avro schema: {}", error_chain(&e))))?;
    if let Some(reason) = canonical_form_refusal(&schema) {
        return Err(refused(format!("has no Parsing Canonical Form: {reason}")));
    }
    let name = match &schema {
        Schema::Record(record) => record.name.fullname(None),
        _ => return Err(refused("not a record schema".into())),
    };
    let event_type = EventType::from_name(&name).ok_or_else(|| {
        let known: Vec<String> = EventType::ALL.iter().map(|t| format!("quota.v1.{t}")).collect();
        refused(format!("record {name} is not a record type of the catalog ({})", known.join(", ")))
    })?;
    let current = compiled.iter().find(|s| s.event_type == event_type && s.current).expect("one current per type");
    apache_avro::schema_compatibility::SchemaCompatibility::can_read(&schema, &current.schema).map_err(|e| {
        refused(format!("the current {event_type} schema ({}) cannot read what it writes: {e}", current.file))
    })?;
    let file: &'static str = Box::leak(path.display().to_string().into_boxed_str());
    let (fingerprint, legacy_fingerprint) = (fingerprint(&schema), legacy_fingerprint(&schema));
    Ok(CatalogSchema { file, runtime: true, event_type, current: false, fingerprint, legacy_fingerprint, schema })
}

impl Catalog {
    /// The catalog of this process, built once: the schemas compiled into this binary from `schemas/avro/`, plus
    /// those added at start from a schema directory ([`Catalog::install_with`]).
    pub fn builtin() -> &'static Catalog {
        BUILTIN.get_or_init(Catalog::load_builtin)
    }

    /// Makes the catalog of this process the compiled one plus the writer schemas of `dir` (`--schemas DIR`): each
    /// `*.avsc` file a record of the catalog's types (`quota.v1.UsageEvent`, ...) that resolves to the current reader
    /// schema of its type. Before anything used the catalog; a file refused refuses them all, naming it and why.
    /// Returns the schemas added (a file whose schema the catalog holds already adds nothing).
    pub fn install_with(dir: &std::path::Path) -> Result<Vec<&'static CatalogSchema>, SchemaDirError> {
        let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
            .map_err(|source| SchemaDirError::Directory { dir: dir.to_path_buf(), source })?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| path.extension().is_some_and(|e| e == "avsc"))
            .collect();
        files.sort();
        let compiled = Catalog::compiled_schemas();
        let mut extra = Vec::new();
        for path in files {
            let schema = runtime_schema(&path, &compiled)?;
            let known = compiled.iter().chain(&extra).any(|s: &CatalogSchema| s.fingerprint == schema.fingerprint);
            if !known {
                extra.push(schema);
            }
        }
        let added: Vec<u64> = extra.iter().map(|s| s.fingerprint).collect();
        let catalog = Catalog::from_schemas(compiled.into_iter().chain(extra).collect());
        BUILTIN.set(catalog).map_err(|_| SchemaDirError::AlreadyInUse)?;
        let catalog = Catalog::builtin();
        Ok(added.iter().filter_map(|f| catalog.by_fingerprint(*f)).collect())
    }

    fn load_builtin() -> Catalog {
        Catalog::from_schemas(Catalog::compiled_schemas())
    }

    /// The schemas compiled into this binary, parsed.
    fn compiled_schemas() -> Vec<CatalogSchema> {
        SCHEMA_FILES
            .iter()
            .map(|&(file, event_type, current, text)| {
                let schema = Schema::parse_str(text)
                    .unwrap_or_else(|e| panic!("schemas/avro/{file} is not a valid Avro schema: {e}"));
                let (fingerprint, legacy_fingerprint) = (fingerprint(&schema), legacy_fingerprint(&schema));
                CatalogSchema { file, runtime: false, event_type, current, fingerprint, legacy_fingerprint, schema }
            })
            .collect()
    }

    fn from_schemas(schemas: Vec<CatalogSchema>) -> Catalog {
        // A corrupt length prefix must not make apache-avro allocate its default 512 MiB. Process-wide, set once.
        apache_avro::util::max_allocation_bytes(MAX_ALLOCATION_BYTES);
        for event_type in EventType::ALL {
            let current = schemas.iter().filter(|s| s.event_type == event_type && s.current).count();
            assert_eq!(current, 1, "exactly one current schema for {event_type}");
        }
        // Built once per process (BUILTIN), so leaking gives the resolved readers and writers their 'static schemas.
        let schemas: &'static [CatalogSchema] = Box::leak(schemas.into_boxed_slice());
        let current = |t: EventType| &schemas.iter().find(|s| s.event_type == t && s.current).expect("checked").schema;
        let readers = schemas
            .iter()
            .map(|s| {
                GenericDatumReader::builder(&s.schema)
                    .maybe_reader_schema((!s.current).then(|| current(s.event_type)))
                    .build()
                    .unwrap_or_else(|e| panic!("schemas/avro/{} does not resolve to the current schema: {e}", s.file))
            })
            .collect();
        let writers = schemas
            .iter()
            .map(|s| {
                GenericDatumWriter::builder(&s.schema)
                    .validate(false)
                    .build()
                    .unwrap_or_else(|e| panic!("schemas/avro/{}: {e}", s.file))
            })
            .collect();
        let by_fingerprint =
            schemas.iter().enumerate().flat_map(|(i, s)| [(s.fingerprint, i), (s.legacy_fingerprint, i)]).collect();
        Catalog { schemas, by_fingerprint, readers, writers }
    }

    fn index_of_current(&self, event_type: EventType) -> usize {
        self.schemas
            .iter()
            .position(|s| s.event_type == event_type && s.current)
            .expect("the catalog holds a current schema for every type (checked in load_builtin)")
    }

    /// Every schema of the catalog: the current one of each type, then the older writer schemas.
    pub fn schemas(&self) -> &[CatalogSchema] {
        self.schemas
    }

    /// The current (reader) schema of a record type.
    pub fn current(&self, event_type: EventType) -> &CatalogSchema {
        &self.schemas[self.index_of_current(event_type)]
    }

    /// The schema a producer wrote with, by its fingerprint (or its legacy one).
    pub fn by_fingerprint(&self, fingerprint: u64) -> Option<&CatalogSchema> {
        self.by_fingerprint.get(&fingerprint).map(|&i| &self.schemas[i])
    }

    /// The Avro binary body of an event under its current schema. Deterministic: the same event always gives the
    /// same bytes (attributes are sorted), which is what deduplication compares.
    pub fn encode_body(&self, event: &Event) -> Vec<u8> {
        let mut body = Vec::with_capacity(256);
        avro::write_body(&mut body, event);
        body
    }

    /// The body as apache-avro encodes it (attribute maps in hash order): what `encode_body` is checked against.
    pub fn encode_body_with_apache_avro(&self, event: &Event) -> Vec<u8> {
        let writer = &self.writers[self.index_of_current(event.event_type())];
        let mut bytes = Vec::new();
        writer
            .write_value_ref(&mut bytes, &avro::to_value(event))
            .unwrap_or_else(|e| panic!("{} does not match its own schema: {e}", event.event_type()));
        bytes
    }

    /// Single-object encoding of an event under its current schema.
    pub fn encode_single_object(&self, event: &Event) -> Vec<u8> {
        let fingerprint = self.current(event.event_type()).fingerprint;
        let body = self.encode_body(event);
        let mut bytes = Vec::with_capacity(SINGLE_OBJECT_HEADER_BYTES + body.len());
        bytes.extend_from_slice(&SINGLE_OBJECT_MAGIC);
        bytes.extend_from_slice(&fingerprint.to_le_bytes());
        bytes.extend_from_slice(&body);
        bytes
    }

    /// Decodes and validates a single-object encoded message of at most `MAX_MESSAGE_BYTES` (the size checked by
    /// [`Catalog::decode_single_object`], which also reads the Confluent wire format).
    pub(crate) fn decode_single_object_framing(
        &self,
        bytes: &[u8],
        expected: Option<EventType>,
    ) -> Result<Decoded, DecodeError> {
        if bytes.len() < SINGLE_OBJECT_HEADER_BYTES {
            return Err(DecodeError::TruncatedHeader { size: bytes.len() });
        }
        if bytes[..2] != SINGLE_OBJECT_MAGIC {
            return Err(DecodeError::BadMagic { found: [bytes[0], bytes[1]] });
        }
        let fingerprint = u64::from_le_bytes(bytes[2..10].try_into().expect("8 bytes"));
        let index = *self.by_fingerprint.get(&fingerprint).ok_or(DecodeError::UnknownFingerprint { fingerprint })?;
        let found = self.schemas[index].event_type;
        if let Some(expected) = expected
            && expected != found
        {
            return Err(DecodeError::WrongType { expected, found });
        }
        let event = self.decode_body(index, &bytes[SINGLE_OBJECT_HEADER_BYTES..])?;
        validate::validate(&event)?;
        Ok(Decoded { event, writer_fingerprint: fingerprint })
    }

    /// Decodes a stored payload: an Avro body written with the catalog schema of that fingerprint.
    pub fn decode_payload(&self, fingerprint: u64, body: &[u8]) -> Result<Event, DecodeError> {
        let index = *self.by_fingerprint.get(&fingerprint).ok_or(DecodeError::UnknownFingerprint { fingerprint })?;
        self.decode_body(index, body)
    }

    /// Decodes an Avro body written with `writer`, resolved to the current schema of its type.
    fn decode_body(&self, index: usize, body: &[u8]) -> Result<Event, DecodeError> {
        let writer = &self.schemas[index];
        decode_with(&self.readers[index], writer.event_type, writer.fingerprint, body)
    }

    /// Reads an Avro object container file of any record type of the catalog. The file's own writer schema is
    /// resolved to the current reader schema of the record it names.
    pub fn read_container<R: Read>(&self, input: R) -> Result<ContainerRecords<'_, R>, DecodeError> {
        let reader = Reader::new(input).map_err(|e| DecodeError::Container { message: error_chain(&e) })?;
        let writer_schema = reader.writer_schema().clone();
        let name = match &writer_schema {
            Schema::Record(record) => record.name.fullname(None),
            other => format!("{other:?}").chars().take(60).collect(),
        };
        let event_type = EventType::from_name(&name).ok_or(DecodeError::UnknownRecord { name })?;
        if let Some(refusal) = canonical_form_refusal(&writer_schema) {
            return Err(DecodeError::Container {
                message: format!("the file's writer schema is not valid: {refusal}"),
            });
        }
        let writer_fingerprint = fingerprint(&writer_schema);
        Ok(ContainerRecords { catalog: self, reader, writer_schema, event_type, writer_fingerprint, index: 0 })
    }
}

/// The sync marker of an Avro object container file: the 16 bytes its writer drew at random and wrote after the
/// header and after every block. A file appended to keeps its marker; two files written apart have different ones.
pub fn container_sync_marker<R: Read>(mut input: R) -> Result<[u8; 16], DecodeError> {
    let container = |message: String| DecodeError::Container { message };
    let mut magic = [0u8; 4];
    input.read_exact(&mut magic).map_err(|e| container(format!("cannot read the header: {e}")))?;
    if magic != *b"Obj\x01" {
        return Err(container("not an Avro object container file (no `Obj` magic)".into()));
    }
    // The metadata (the writer schema, the codec, ...), a map of bytes: skipped, apache-avro's reader reads it.
    let metadata = Schema::parse_str(r#"{"type": "map", "values": "bytes"}"#).expect("a valid schema");
    let reader = GenericDatumReader::builder(&metadata).build().map_err(|e| container(error_chain(&e)))?;
    reader.read_value(&mut input).map_err(|e| container(error_chain(&e)))?;
    let mut marker = [0u8; 16];
    input.read_exact(&mut marker).map_err(|e| container(format!("cannot read the sync marker: {e}")))?;
    Ok(marker)
}

/// The records of a container file, in order. Each item is the record's index in the file and either the
/// decoded event with its raw bytes (single-object encoding under the file's writer schema) or why it failed.
pub struct ContainerRecords<'c, R: Read> {
    catalog: &'c Catalog,
    reader: Reader<'static, R>,
    writer_schema: Schema,
    /// The record type of the file's writer schema.
    pub event_type: EventType,
    /// The fingerprint of the file's writer schema.
    pub writer_fingerprint: u64,
    index: u64,
}

/// One record of a container file.
pub struct ContainerRecord {
    /// Position of the record in the file, from 0.
    pub index: u64,
    /// The record as single-object encoding under the file's writer schema: what the producer wrote.
    pub raw: Vec<u8>,
    /// The event, or why the record could not become one.
    pub result: Result<Decoded, DecodeError>,
}

impl<R: Read> Iterator for ContainerRecords<'_, R> {
    type Item = ContainerRecord;

    fn next(&mut self) -> Option<ContainerRecord> {
        let value = self.reader.next()?;
        let index = self.index;
        self.index += 1;
        let (raw, result) = match value {
            Ok(value) => self.resolve(value),
            Err(e) => (Vec::new(), Err(DecodeError::Container { message: error_chain(&e) })),
        };
        Some(ContainerRecord { index, raw, result })
    }
}

impl<R: Read> ContainerRecords<'_, R> {
    fn resolve(&self, writer_value: Value) -> (Vec<u8>, Result<Decoded, DecodeError>) {
        let mut raw = Vec::new();
        raw.extend_from_slice(&SINGLE_OBJECT_MAGIC);
        raw.extend_from_slice(&self.writer_fingerprint.to_le_bytes());
        match write_datum(&self.writer_schema, &writer_value) {
            Ok(body) => raw.extend_from_slice(&body),
            // apache-avro reads a string or a union that meets the end of its block as null instead of failing, so a
            // record cut short reads as a value its own schema refuses (`Union(1, Null)` for a string branch): the
            // event it would resolve to has nulls where the producer wrote values.
            Err(error) => {
                let message = format!("the record does not match its writer schema, cut short or damaged: {error}");
                let error = DecodeError::TruncatedBody {
                    event_type: self.event_type,
                    fingerprint: self.writer_fingerprint,
                    message,
                };
                return (raw, Err(error));
            }
        }
        let reader_schema = &self.catalog.current(self.event_type).schema;
        let result = writer_value
            .resolve(reader_schema)
            .map_err(|e| DecodeError::from_body_error(self.event_type, self.writer_fingerprint, error_chain(&e)))
            .and_then(|value| Ok(avro::from_value(self.event_type, &value)?))
            .and_then(|event| {
                validate::validate(&event)?;
                Ok(Decoded { event, writer_fingerprint: self.writer_fingerprint })
            });
        if raw.len() > MAX_MESSAGE_BYTES {
            return (raw.clone(), Err(DecodeError::Oversize { size: raw.len(), limit: MAX_MESSAGE_BYTES }));
        }
        (raw, result)
    }
}

/// The body of a message, remembering whether the decoder asked for bytes past its end. apache-avro reads a
/// string or a union index that meets the end of its input as null instead of failing, so a truncated body can
/// decode to a different, valid-looking record (a DecisionEvent cut short loses its last optional fields);
/// this tells truncation apart whatever apache-avro returns.
struct BodyReader<'a> {
    rest: &'a [u8],
    read_past_end: bool,
}

impl Read for BodyReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if !buf.is_empty() && self.rest.is_empty() {
            self.read_past_end = true;
        }
        self.rest.read(buf)
    }
}

/// The Avro binary encoding of a value under a schema, a record's maps of strings in key order. apache-avro writes
/// a `Value::Map` in the order of its HashMap, seeded afresh for every map: written by it, a record of a container
/// file with two or more attributes would have other raw bytes on every read, so the digest `ingest --file` keeps
/// of the records it appended would never match a rerun's, and a rerun after a kill or a full disk would read the
/// whole file again, counting each record appended before as a duplicate. A record without such a map is written
/// by apache-avro alone.
fn write_datum(schema: &Schema, value: &Value) -> apache_avro::AvroResult<Vec<u8>> {
    let mut bytes = Vec::new();
    match (schema, value) {
        (Schema::Record(record), Value::Record(fields)) if fields.iter().any(|(_, v)| sorted_map(v).is_some()) => {
            let names = apache_avro::schema::ResolvedSchema::try_from(schema)?;
            for (field, (_, value)) in record.fields.iter().zip(fields) {
                match sorted_map(value) {
                    Some(map) => avro::write_sorted_map(&mut bytes, &map),
                    None => GenericDatumWriter::builder(&field.schema)
                        .resolved_schemata(names.clone())
                        .build()?
                        .write_value_ref(&mut bytes, value)
                        .map(drop)?,
                }
            }
        }
        _ => GenericDatumWriter::builder(schema).build()?.write_value_ref(&mut bytes, value).map(drop)?,
    }
    Ok(bytes)
}

/// A map of two or more strings, in key order (one of fewer has one order already).
fn sorted_map(value: &Value) -> Option<std::collections::BTreeMap<String, String>> {
    match value {
        Value::Map(items) if items.len() > 1 => items
            .iter()
            .map(|(key, item)| match item {
                Value::String(s) => Some((key.clone(), s.clone())),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        // apache-avro's messages often quote their cause already.
        let cause_text = cause.to_string();
        if !message.contains(&cause_text) {
            message.push_str(": ");
            message.push_str(&cause_text);
        }
        source = cause.source();
    }
    message
}
