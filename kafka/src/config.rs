//! Every librdkafka setting of every client, in one place: the consumer of `ingest`, the producer of `produce` and
//! `generate`, the outbox's producer and the admin client. `-X key=value` overrides (SASL, TLS, tuning) come last,
//! so they win, except where a setting below says otherwise.
//!
//! The log level of every client follows the binary's logger (warnings by default, `QUOTA_LEDGER_LOG` for more):
//! rdkafka sets librdkafka's `log_level` from the `log` crate's maximum level.

use rdkafka::config::ClientConfig;

/// How long [`KafkaProducer::finish`](crate::producer::KafkaProducer::finish) waits for outstanding deliveries.
/// librdkafka retries within `delivery.timeout.ms` (set to the same), so after this every message is either
/// acknowledged or reported failed.
pub const DELIVERY_TIMEOUT_MS: u64 = 120_000;
/// Messages librdkafka may hold unacknowledged; a producer's `send` waits (polling for acknowledgements) when full.
pub const QUEUE_MAX_MESSAGES: u32 = 100_000;
/// Shortest and longest attempt of the outbox's producer ([`outbox_producer`]): below a second an attempt ends before
/// a broker on another machine answers; librdkafka's own default `delivery.timeout.ms` is the longest.
pub const OUTBOX_ATTEMPT_MS: std::ops::RangeInclusive<u64> = 1_000..=120_000;

/// The partitioner of every producer this product configures: librdkafka's `murmur2_random` is Kafka's default
/// partitioner (the Java client's, kafka-python's) for a keyed record, `(murmur2(key) & 0x7fffffff) % P`, which
/// is [`schemas::partition::partition_of`] over the tenant key (contract §9.4). librdkafka's own default,
/// `consistent_random`, hashes with CRC32 and would put a tenant's events in another partition, so another shard,
/// than every other producer of the topics.
pub const PARTITIONER: &str = "murmur2_random";

/// The idempotent producer of `produce`, `generate --to-kafka`, the demo and the tests.
pub fn producer(brokers: &str, overrides: &[(String, String)]) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("client.id", "quota-ledger-produce")
        // Retries never duplicate or reorder a message within a partition.
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("delivery.timeout.ms", DELIVERY_TIMEOUT_MS.to_string())
        .set("queue.buffering.max.messages", QUEUE_MAX_MESSAGES.to_string())
        .set("linger.ms", "5");
    with_partitioner(overrides_last(config, overrides))
}

/// How long [`events_producer`] tries to have a message acknowledged: an HTTP producer of usage
/// (`POST /v1/events`) waits for it before its answer, so it is an HTTP client's patience (curl, Go's and Python's
/// clients wait 30 s and more), not [`DELIVERY_TIMEOUT_MS`]'s two minutes; a broker away longer answers 503 and the
/// caller resends, which the event ids make safe.
pub const EVENTS_DELIVERY_TIMEOUT_MS: u64 = 10_000;

/// The producer of usage sent over HTTP ([`crate::acknowledged`]): [`producer`]'s settings (idempotent, every in-sync
/// replica, [`PARTITIONER`]), an attempt of [`EVENTS_DELIVERY_TIMEOUT_MS`] and its own `client.id`, both after the
/// overrides: the HTTP answer waits on the attempt.
pub fn events_producer(brokers: &str, overrides: &[(String, String)]) -> ClientConfig {
    let mut config = producer(brokers, overrides);
    config.set("delivery.timeout.ms", EVENTS_DELIVERY_TIMEOUT_MS.to_string()).set("client.id", "quota-ledger-events");
    config
}

/// The outbox's producer: [`producer`]'s settings, but an attempt lasts [`outbox_attempt_ms`] of `attempt_ms` so
/// that an outage ends the attempt, not the entries; and its own `client.id`. These two are set after the
/// overrides: the publisher's retries count on the attempt's length.
pub fn outbox_producer(brokers: &str, overrides: &[(String, String)], attempt_ms: u64) -> ClientConfig {
    let mut config = producer(brokers, overrides);
    config
        .set("delivery.timeout.ms", outbox_attempt_ms(attempt_ms).to_string())
        .set("client.id", "quota-ledger-outbox");
    config
}

/// How long an attempt of the outbox's producer lasts when `requested_ms` is asked for: clamped to
/// [`OUTBOX_ATTEMPT_MS`].
pub fn outbox_attempt_ms(requested_ms: u64) -> u64 {
    requested_ms.clamp(*OUTBOX_ATTEMPT_MS.start(), *OUTBOX_ATTEMPT_MS.end())
}

/// The consumer group session of `ingest` and of every node ([`consumer`]'s `session.timeout.ms`): a dead member's
/// partitions move to the others within it, instead of librdkafka's 45 s.
pub const SESSION_TIMEOUT_MS: u64 = 10_000;

/// `ingest`'s consumer in group `group`: the ledger owns the offsets, librdkafka never commits or stores them.
pub fn consumer(brokers: &str, group: &str, overrides: &[(String, String)]) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("client.id", "quota-ledger-ingest")
        // Offsets are the ledger's: never let librdkafka commit or store on its own.
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        // Ingest positions every partition itself (the ledger's next offset, 0 for a partition it never read). An
        // offset the brokers no longer have (removed by retention before it was read, a topic recreated below it)
        // must stop ingest and be named, never skipped: librdkafka's "earliest" or "latest" would move on silently
        // and the ledger would undercount (ingest's `offset_gaps`).
        .set("auto.offset.reset", "error")
        .set("enable.partition.eof", "false")
        // Eager rebalancing: ingest's rebalance callback assigns whole lists.
        .set("partition.assignment.strategy", "range,roundrobin")
        // Producers of ours are idempotent, not transactional; read what is committed to the log.
        .set("isolation.level", "read_committed")
        .set("session.timeout.ms", SESSION_TIMEOUT_MS.to_string())
        .set("heartbeat.interval.ms", "1000")
        // The loop polls every 100 ms and an append takes well under a second; a consumer silent for 30 s is
        // stuck. It is also how long a coordinator may wait for a dead member during a rebalance (300 s by
        // default), which is what a restart after a crash waits for.
        .set("max.poll.interval.ms", "30000")
        // Bounds the prefetched queue per partition (librdkafka's default is 64 MiB).
        .set("queued.max.messages.kbytes", "16384");
    overrides_last(config, overrides)
}

/// Longest time between two checkpoints while the head moves: the contract's "at least every 10 s while the ledger
/// grows". What a rewrite of the file can take back unseen is at most this much of the ledger's latest history.
pub const CHECKPOINT_EVERY_MS: u64 = 10_000;

/// How long a publish to the routing catalog waits for the brokers' acknowledgement.
pub const ROUTING_PUBLISH_TIMEOUT_MS: u64 = 10_000;

/// The producer of the ledger's checkpoints ([`crate::checkpoints`]): acknowledged by every in-sync replica, and
/// given up within a checkpoint interval or three, so that a broker away costs one failed checkpoint at a time, never
/// a queue of stale ones. Not idempotent: a checkpoint sent twice is the same fact twice.
pub fn checkpoint_producer(brokers: &str, overrides: &[(String, String)]) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("client.id", "quota-ledger-checkpoints")
        .set("acks", "all")
        .set("enable.idempotence", "false")
        .set("message.timeout.ms", (3 * CHECKPOINT_EVERY_MS).to_string())
        .set("linger.ms", "0");
    with_partitioner(overrides_last(config, overrides))
}

/// The consumer `verify --checkpoints-from` reads the checkpoints topic whole with: partitions assigned by hand,
/// nothing committed or stored, no group joined (the group id is librdkafka's requirement only).
pub fn checkpoint_reader(brokers: &str, overrides: &[(String, String)]) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("group.id", "quota-ledger-verify")
        .set("client.id", "quota-ledger-verify")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "false");
    overrides_last(config, overrides)
}

/// How long a shard's transaction may stay open before the brokers abort it: a paused owner's open transaction ends
/// within this, as its consumer-group session does (`session.timeout.ms` of [`consumer`]).
pub const SHARD_TRANSACTION_TIMEOUT_MS: u64 = 10_000;
/// How long [`crate::fence::ShardFence`] waits for the brokers to announce their API versions, to answer
/// `init_transactions`, or to acknowledge a publish's records and its commit: a publish answers within it, fenced,
/// failed or done (plus an abort's wait when it failed).
pub const SHARD_PUBLISH_TIMEOUT_MS: u64 = 10_000;

/// The transactional producer of one shard ([`crate::fence`]): `transactional_id` names the shard, so that the
/// next owner's `init_transactions` fences this one. Idempotent and acknowledged by every in-sync replica, as
/// transactions require. `transactional.id` and the timeouts come after the overrides: the fence is the point.
pub fn shard_producer(brokers: &str, transactional_id: &str, overrides: &[(String, String)]) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("client.id", "quota-ledger-shard")
        .set("enable.idempotence", "true")
        .set("acks", "all")
        // A publish is one group of the hook's decisions, waited for: nothing gains from lingering.
        .set("linger.ms", "0");
    let mut config = overrides_last(config, overrides);
    config
        .set("transactional.id", transactional_id)
        .set("transaction.timeout.ms", SHARD_TRANSACTION_TIMEOUT_MS.to_string())
        .set("message.timeout.ms", SHARD_PUBLISH_TIMEOUT_MS.to_string());
    config
}

/// The client that reads the brokers' API versions before a shard is acquired ([`crate::fence`]): it connects, reads
/// the metadata and goes. librdkafka tells the API versions only in its debug log, so `debug=feature` and the debug
/// log level come after the overrides (only this client's log; its other debug lines are dropped).
pub fn api_versions_reader(brokers: &str, overrides: &[(String, String)]) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", brokers).set("client.id", "quota-ledger-shard");
    let mut config = overrides_last(config, overrides);
    config.set("debug", "feature").set_log_level(rdkafka::config::RDKafkaLogLevel::Debug);
    config
}

/// The producer of the routing catalog ([`crate::routing`]): idempotent, so that a node's entries of one partition are
/// never reordered (of equal epochs, the later offset wins), and acknowledged by every in-sync replica.
pub fn routing_producer(brokers: &str, overrides: &[(String, String)]) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("client.id", "quota-ledger-routing")
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("message.timeout.ms", ROUTING_PUBLISH_TIMEOUT_MS.to_string())
        .set("linger.ms", "0");
    overrides_last(config, overrides)
}

/// The consumer that reads the routing catalog whole: partitions assigned by hand, nothing committed, no group joined
/// (the group id is librdkafka's requirement only).
pub fn routing_reader(brokers: &str, overrides: &[(String, String)]) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("group.id", "quota-ledger-routing")
        .set("client.id", "quota-ledger-routing")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "false");
    overrides_last(config, overrides)
}

/// The admin client of `topics create`: librdkafka's defaults.
pub fn admin(brokers: &str, overrides: &[(String, String)]) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", brokers);
    overrides_last(config, overrides)
}

/// [`PARTITIONER`], set after the overrides: where a record lands is the contract (§9.4), not a tuning knob. A
/// `-X partitioner=...` that says otherwise is named on stderr and not applied.
fn with_partitioner(mut config: ClientConfig) -> ClientConfig {
    if let Some(asked) = config.get("partitioner").filter(|asked| *asked != PARTITIONER) {
        tracing::warn!(
            asked = %asked,
            used = PARTITIONER,
            "-X partitioner ignored: every producer partitions by Kafka's default partitioner over the tenant \
             (docs/contract.md §9.4)"
        );
    }
    config.set("partitioner", PARTITIONER);
    config
}

fn overrides_last(mut config: ClientConfig, overrides: &[(String, String)]) -> ClientConfig {
    for (key, value) in overrides {
        config.set(key, value);
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_win_except_for_the_outbox_attempt() {
        let overrides = [("linger.ms".to_string(), "50".to_string()), ("client.id".to_string(), "mine".to_string())];
        let produce = producer("b:9092", &overrides);
        assert_eq!(produce.get("linger.ms"), Some("50"));
        assert_eq!(produce.get("client.id"), Some("mine"));
        let outbox = outbox_producer("b:9092", &overrides, 5_000);
        assert_eq!(outbox.get("linger.ms"), Some("50"));
        assert_eq!(outbox.get("client.id"), Some("quota-ledger-outbox"));
        assert_eq!(outbox.get("delivery.timeout.ms"), Some("5000"));
        assert_eq!(outbox_producer("b:9092", &[], 10).get("delivery.timeout.ms"), Some("1000"), "clamped");
    }

    #[test]
    fn every_producer_partitions_by_kafkas_default_partitioner() {
        let overrides = [("partitioner".to_string(), "consistent_random".to_string())];
        for config in [
            producer("b:9092", &overrides),
            outbox_producer("b:9092", &overrides, 5_000),
            checkpoint_producer("b:9092", &overrides),
            events_producer("b:9092", &overrides),
        ] {
            assert_eq!(config.get("partitioner"), Some(PARTITIONER));
        }
    }
}
