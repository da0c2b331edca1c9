//! Ingest: getting events into the ledger, exactly once. From Kafka ([`kafka::ingest_kafka`]: a consumer
//! group whose offsets live in the ledger) and from Avro object container files ([`file::ingest_file`]); plus
//! the producing side used by other teams' tests and the demo ([`produce`], [`generate`]).
//!
//! ```
//! use ingest::file::{ingest_file, FILE_BATCH_EVENTS};
//! # let dir = tempfile::tempdir().unwrap();
//! # let path = dir.path().join("empty.avro");
//! # let schema = &schemas::Catalog::builtin().current(schemas::EventType::UsageEvent).schema;
//! # let writer = apache_avro::Writer::new(schema, std::fs::File::create(&path).unwrap()).unwrap();
//! # writer.into_inner().unwrap();
//! let mut ledger = ledger::Ledger::open(dir.path().join("ledger.db")).unwrap();
//! let report = ingest_file(&mut ledger, &path, FILE_BATCH_EVENTS, |_| {}).unwrap();
//! assert_eq!(report.records, 0);
//! ```

pub mod admin;
pub mod file;
pub mod generate;
pub mod kafka;
pub mod lock;
pub mod outbox;
pub mod produce;
pub mod topics;

use rdkafka::config::RDKafkaLogLevel;

/// librdkafka's log lines through the `log` crate (target `librdkafka`), named after the client that wrote them:
/// rdkafka's own forwarding does not say which client of a process a line came from. The binary prints warnings
/// and errors on stderr.
pub(crate) fn log_librdkafka(client: &str, level: RDKafkaLogLevel, facility: &str, message: &str) {
    let level = match level {
        RDKafkaLogLevel::Emerg | RDKafkaLogLevel::Alert | RDKafkaLogLevel::Critical | RDKafkaLogLevel::Error => {
            log::Level::Error
        }
        RDKafkaLogLevel::Warning => log::Level::Warn,
        RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => log::Level::Info,
        RDKafkaLogLevel::Debug => log::Level::Debug,
    };
    log::log!(target: "librdkafka", level, "{client}: librdkafka {facility}: {message}");
}
