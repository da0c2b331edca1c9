//! Why a message could not become an event. Each variant is a quarantine reason with a stable code.

use crate::avro::ShapeError;
use crate::event::EventType;
use crate::validate::Invalid;

/// A message that failed to decode or validate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
#[allow(missing_docs)] // Each variant's #[error] message says what it means and quotes its fields.
pub enum DecodeError {
    #[error("message of {size} bytes exceeds the limit of {limit} bytes")]
    Oversize { size: usize, limit: usize },
    #[error("message of {size} bytes is shorter than the 10-byte single-object header")]
    TruncatedHeader { size: usize },
    #[error("not Avro single-object encoding: starts with {:02X} {:02X}, expected C3 01", found[0], found[1])]
    BadMagic { found: [u8; 2] },
    #[error("unknown writer schema fingerprint {fingerprint:016x}: not in the schema catalog")]
    UnknownFingerprint { fingerprint: u64 },
    #[error("unknown schema id {id} (Confluent wire format): not in the schema registry's `_schemas` topic as read")]
    UnknownSchemaId { id: u32 },
    #[error("expected a {expected} on this topic, found a {found}")]
    WrongType { expected: EventType, found: EventType },
    #[error("{event_type} body ends early (writer schema {fingerprint:016x}): {message}")]
    TruncatedBody { event_type: EventType, fingerprint: u64, message: String },
    #[error("{event_type} body does not decode (writer schema {fingerprint:016x}): {message}")]
    MalformedBody { event_type: EventType, fingerprint: u64, message: String },
    #[error("{trailing} bytes left over after the {event_type} body")]
    TrailingBytes { event_type: EventType, trailing: usize },
    #[error("decoded record has the wrong shape: {message}")]
    Shape { message: String },
    #[error("Avro container file: {message}")]
    Container { message: String },
    #[error("container file holds {name:?}, which is not a record type of the catalog")]
    UnknownRecord { name: String },
    #[error(transparent)]
    Invalid(#[from] Invalid),
}

impl From<ShapeError> for DecodeError {
    fn from(e: ShapeError) -> DecodeError {
        DecodeError::Shape { message: e.to_string() }
    }
}

impl DecodeError {
    /// A body error from apache-avro, told apart into "ends early" and anything else.
    pub(crate) fn from_body_error(event_type: EventType, fingerprint: u64, message: String) -> DecodeError {
        let ends_early = ["fill whole buffer", "UnexpectedEof", "unexpected end"].iter().any(|m| message.contains(m));
        if ends_early {
            DecodeError::TruncatedBody { event_type, fingerprint, message }
        } else {
            DecodeError::MalformedBody { event_type, fingerprint, message }
        }
    }

    /// A stable, machine-readable code for the quarantine (`quarantine list --json` prints it).
    pub fn code(&self) -> &'static str {
        match self {
            DecodeError::Oversize { .. } => "oversize",
            DecodeError::TruncatedHeader { .. } | DecodeError::TruncatedBody { .. } => "truncated",
            DecodeError::BadMagic { .. } => "bad_magic",
            DecodeError::UnknownFingerprint { .. } => "unknown_fingerprint",
            DecodeError::UnknownSchemaId { .. } => "unknown_schema_id",
            DecodeError::WrongType { .. } | DecodeError::UnknownRecord { .. } => "wrong_type",
            DecodeError::MalformedBody { .. } | DecodeError::TrailingBytes { .. } | DecodeError::Shape { .. } => {
                "malformed_body"
            }
            DecodeError::Container { .. } => "malformed_container",
            DecodeError::Invalid(invalid) => invalid.code(),
        }
    }
}
