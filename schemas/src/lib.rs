//! The event schemas of contract §3 and the schema catalog: the words every other crate of quota-ledger speaks.
//!
//! Producers write Avro single-object encoding (`C3 01`, the writer schema's CRC-64-AVRO fingerprint, the body)
//! or Avro object container files. The [`Catalog`] finds the writer schema by fingerprint, resolves it to the
//! current reader schema, and [`validate`] checks the result; what fails becomes a [`DecodeError`] with a
//! stable [`DecodeError::code`] that the ledger's quarantine keeps.
//!
//! ```
//! use schemas::{Catalog, Event, EventType};
//!
//! let catalog = Catalog::builtin();
//! let json = r#"{"event_id":"u-1","occurred_at":"2026-11-02T10:00:00Z","tenant":"org-42",
//!                "subject":null,"metric":"requests","source":"api","quantity":3}"#;
//! let event = Event::from_json(EventType::UsageEvent, json).unwrap();
//! let bytes = catalog.encode_single_object(&event);
//! assert_eq!(&bytes[..2], &[0xC3, 0x01]);
//! let decoded = catalog.decode_single_object(&bytes, Some(EventType::UsageEvent)).unwrap();
//! assert_eq!(decoded.event, event);
//! ```

#![deny(missing_docs)]

pub mod avro;
pub mod catalog;
pub mod confluent;
pub mod error;
pub mod event;
pub mod ids;
mod message;
pub mod partition;
pub mod timestamp;
pub mod validate;
pub mod who;

pub use catalog::{Catalog, CatalogSchema, ContainerRecord, Decoded, SchemaDirError, fingerprint};
/// An IANA time zone, as policies name them (`PolicyEvent::time_zone`).
pub use chrono_tz::Tz;
pub use error::DecodeError;
pub use event::*;
pub use timestamp::Timestamp;
pub use validate::{Invalid, MAX_MESSAGE_BYTES, validate};
pub use who::Who;

/// The Avro namespace of every record.
pub const NAMESPACE: &str = "quota.v1";
