//! A Kafka message's value in either framing the product reads: Avro single-object encoding (this product's
//! producers), or the Confluent wire format (a zero byte, then the schema registry's 4-byte id of the writer schema:
//! [`crate::confluent`]). Both decode to the same validated event.

use crate::catalog::{Catalog, Decoded};
use crate::error::DecodeError;
use crate::event::EventType;
use crate::validate::MAX_MESSAGE_BYTES;

impl Catalog {
    /// Decodes and validates a single-object encoded message, or one in the Confluent wire format. `expected`, when
    /// given, is the record type the message's topic carries.
    pub fn decode_single_object(&self, bytes: &[u8], expected: Option<EventType>) -> Result<Decoded, DecodeError> {
        if bytes.len() > MAX_MESSAGE_BYTES {
            return Err(DecodeError::Oversize { size: bytes.len(), limit: MAX_MESSAGE_BYTES });
        }
        if bytes.first() == Some(&crate::confluent::MAGIC) {
            return crate::confluent::decode(bytes, expected);
        }
        self.decode_single_object_framing(bytes, expected)
    }
}
