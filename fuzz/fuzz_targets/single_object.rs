//! Any bytes given to the single-object decoder (what every Kafka message goes through) decode or are refused
//! with a quarantine reason: never a panic, and what decodes re-encodes to a message that decodes to the same
//! event.
#![no_main]

use libfuzzer_sys::fuzz_target;
use schemas::{Catalog, EventType};

fuzz_target!(|data: &[u8]| {
    let catalog = Catalog::builtin();
    // The first byte picks what the topic expects (none: a file of any type), the rest is the message.
    let (expected, message) = match data.split_first() {
        Some((pick, rest)) => (EventType::ALL.get(usize::from(*pick) % (EventType::ALL.len() + 1)).copied(), rest),
        None => (None, data),
    };
    match catalog.decode_single_object(message, expected) {
        Ok(decoded) => {
            assert!(expected.is_none_or(|t| t == decoded.event.event_type()));
            assert!(schemas::validate(&decoded.event).is_ok(), "a decoded event is valid");
            let again = catalog.encode_single_object(&decoded.event);
            let round = catalog.decode_single_object(&again, expected).expect("a re-encoded event decodes");
            assert_eq!(round.event, decoded.event);
        }
        Err(error) => {
            assert!(!error.code().is_empty());
        }
    }
});
