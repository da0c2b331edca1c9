//! Ingest: getting events into the ledger, exactly once. From Kafka ([`consumer::ingest_kafka`]: a consumer
//! group whose offsets live in the ledger) and from Avro object container files ([`file::ingest_file`]).
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

#![deny(missing_docs)]

pub mod consumer;
pub mod file;
