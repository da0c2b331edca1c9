//! Any bytes given to the container-file reader (`ingest --file`) are read record by record or refused: never a
//! panic, never an allocation the input's size does not justify (libFuzzer's -rss_limit_mb catches those). A
//! record read under a writer schema of the catalog keeps raw bytes that decode to the same event, as the
//! quarantine's replay needs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use schemas::Catalog;

fuzz_target!(|data: &[u8]| {
    let catalog = Catalog::builtin();
    let Ok(records) = catalog.read_container(std::io::Cursor::new(data)) else { return };
    let known = catalog.by_fingerprint(records.writer_fingerprint).is_some();
    for record in records.take(100_000) {
        match record.result {
            Ok(decoded) => {
                assert!(schemas::validate(&decoded.event).is_ok(), "a decoded record is valid");
                if known {
                    let again = catalog.decode_single_object(&record.raw, Some(decoded.event.event_type()));
                    assert_eq!(again.map(|d| d.event).ok(), Some(decoded.event), "its raw bytes decode to it");
                }
            }
            Err(error) => assert!(!error.code().is_empty()),
        }
    }
});
