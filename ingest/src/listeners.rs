//! What a caller of a shard ingest is told, and asks: the partitions assigned and revoked, the partitions a standby
//! holds, and each partition's lag.

/// Told of the partitions the consumer group gives a shard ingest and takes back
/// ([`crate::consumer::KafkaIngestSettings::listener`]). Called from the rebalance, before consuming a partition given and
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
/// ([`crate::consumer::KafkaIngestSettings::standing`]): a node's standby shards, kept up to date from partitions another
/// member owns. Asked every [`crate::consumer::STANDING_ASK_MS`] which ones to hold; never joins the group.
pub trait Standing: Send + Sync + std::fmt::Debug {
    /// The partitions whose shards to hold now.
    fn wanted(&self) -> std::collections::BTreeSet<u32>;
    /// The partitions whose shards are open now, after a change (those no longer wanted are closed before this).
    fn holding(&self, partitions: &std::collections::BTreeSet<u32>);
}

/// Told, for each assigned partition, its end on the brokers and the ledger's next offset there, from librdkafka's
/// statistics every [`crate::consumer::LAG_EVERY_MS`] ([`crate::consumer::KafkaIngestSettings::lag_listener`]): the lag an
/// operator graphs, measured without a request that would hold the consuming loop up.
pub trait LagListener: Send + Sync + std::fmt::Debug {
    /// `topic[partition]` ends at `high` (its high watermark); the ledger reads it next at `next`.
    fn lag(&self, topic: &str, partition: i32, high: i64, next: i64);
}
