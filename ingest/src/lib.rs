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

pub mod consumed;
pub mod consumer;
pub mod file;
pub mod metrics;
pub mod shards;

pub use consumer::{KafkaIngestError, KafkaIngestProgress, KafkaIngestSettings, ingest_kafka_shards};
pub use shards::ShardWriters;

/// Told of the partitions the consumer group gives a shard ingest and takes back
/// ([`consumer::KafkaIngestSettings::listener`]). Called from the rebalance, before consuming a partition given and
/// before the shard of a partition taken back is closed: what it does there holds the rebalance up.
pub trait PartitionListener: Send + Sync + std::fmt::Debug {
    /// `partition` was assigned; its shard is open and ingest resumes from the offsets it stores.
    fn assigned(&self, partition: u32);
    /// `partition` is taken back; its shard closes once this returns and what was queued for it is appended.
    fn revoked(&self, partition: u32);
    /// `partition` is about to be assigned: its shard opens once this returns (a node's standby lets it go first).
    fn opening(&self, _partition: u32) {}
    /// `partition`'s shard is closed, what was queued for it appended.
    fn closed(&self, _partition: u32) {}
}

/// The partitions an ingest consumes by assignment instead of through the consumer group
/// ([`consumer::KafkaIngestSettings::standing`]): a node's standby shards, kept up to date from partitions another
/// member owns. Asked every [`consumer::STANDING_ASK_MS`] which ones to hold; never joins the group.
pub trait Standing: Send + Sync + std::fmt::Debug {
    /// The partitions whose shards to hold now.
    fn wanted(&self) -> std::collections::BTreeSet<u32>;
    /// The partitions whose shards are open now, after a change (those no longer wanted are closed before this).
    fn holding(&self, partitions: &std::collections::BTreeSet<u32>);
}

/// Told, for each assigned partition, its end on the brokers and the ledger's next offset there, from librdkafka's
/// statistics every [`consumer::LAG_EVERY_MS`] ([`consumer::KafkaIngestSettings::lag_listener`]): the lag an
/// operator graphs, measured without a request that would hold the consuming loop up.
pub trait LagListener: Send + Sync + std::fmt::Debug {
    /// `topic[partition]` ends at `high` (its high watermark); the ledger reads it next at `next`.
    fn lag(&self, topic: &str, partition: i32, high: i64, next: i64);
}

/// Most bytes of messages or records (as received) in one ledger append, whatever their count: a batch of
/// 5,000 messages near Kafka's 1 MB limit would otherwise hold gigabytes in memory before its append.
pub const BATCH_MAX_BYTES: usize = 16 << 20;

/// How large one ledger append grows: it is appended once either bound is reached, so a batch holds at most
/// `events` messages and at most `bytes` plus one message (a message larger than `bytes` is a batch of its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchBounds {
    /// Most messages (Kafka) or records (file).
    pub events: usize,
    /// Most bytes of them as received (their raw bytes, which the quarantine keeps too).
    pub bytes: usize,
}

impl BatchBounds {
    /// The bounds of a Kafka ingest: [`consumer::BATCH_MAX_EVENTS`] and [`BATCH_MAX_BYTES`].
    pub fn kafka() -> BatchBounds {
        BatchBounds { events: consumer::BATCH_MAX_EVENTS, bytes: BATCH_MAX_BYTES }
    }

    /// The bounds of a file ingest: [`file::FILE_BATCH_EVENTS`] and [`BATCH_MAX_BYTES`].
    pub fn file() -> BatchBounds {
        BatchBounds { events: file::FILE_BATCH_EVENTS, bytes: BATCH_MAX_BYTES }
    }

    /// Whether a batch of `events` messages and `bytes` bytes is to be appended now.
    pub fn reached(&self, events: usize, bytes: usize) -> bool {
        events >= self.events || bytes >= self.bytes
    }
}
