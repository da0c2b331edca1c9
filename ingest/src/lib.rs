//! Ingest: getting events into the ledger, exactly once. From Kafka ([`consumer::ingest_kafka`]: a consumer
//! group whose offsets live in the ledger; [`consumer::ingest_kafka_shards`]: a shard per partition, each appended
//! by its own writer, [`ShardWriters`]) and from Avro object container files ([`file::ingest_file`]).
//!
//! ```
//! use ingest::BatchBounds;
//! use ingest::file::ingest_file;
//! # let dir = tempfile::tempdir().unwrap();
//! # let path = dir.path().join("empty.avro");
//! # let schema = &schemas::Catalog::builtin().current(schemas::EventType::UsageEvent).schema;
//! # let writer = apache_avro::Writer::new(schema, std::fs::File::create(&path).unwrap()).unwrap();
//! # writer.into_inner().unwrap();
//! let mut ledger = ledger::Ledger::open(dir.path().join("ledger.db")).unwrap();
//! let report = ingest_file(&mut ledger, &path, BatchBounds::file(), |_| {}).unwrap();
//! assert_eq!(report.records, 0);
//! ```

#![deny(missing_docs)]

mod bounds;
pub mod consumed;
pub mod consumer;
pub mod file;
mod listeners;
pub mod metrics;
pub mod shards;

pub use bounds::{BATCH_MAX_BYTES, BatchBounds};
pub use consumer::{KafkaIngestError, KafkaIngestProgress, KafkaIngestSettings, ingest_kafka_shards};
pub use listeners::{LagListener, PartitionListener, Standing};
pub use shards::ShardWriters;
