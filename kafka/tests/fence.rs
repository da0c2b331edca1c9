//! A shard's transactional producer: what it publishes is acknowledged at the shard's partition, and once another
//! owner acquired the shard (or the brokers refuse its epoch) every publish of the old owner fails as `Fenced`.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kafka::fence::{FenceError, FenceMode, FencedRecord, ShardFence};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

const TOPIC: &str = "quota.decisions";

fn record(payload: &[u8]) -> FencedRecord<'_> {
    FencedRecord { topic: TOPIC, key: "org-42", payload }
}

/// Every payload of `partition` of `TOPIC`, read until `expected` arrived or 10 s passed.
fn payloads(brokers: &str, partition: i32, expected: usize) -> Vec<String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "fence-test")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset(TOPIC, partition, Offset::Beginning).unwrap();
    consumer.assign(&assignment).unwrap();
    let mut read = Vec::new();
    let started = Instant::now();
    while read.len() < expected && started.elapsed() < Duration::from_secs(10) {
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(100)) {
            read.push(String::from_utf8_lossy(message.payload().unwrap_or_default()).into_owned());
        }
    }
    read
}

#[test]
fn a_publish_is_acknowledged_at_the_shards_partition() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(TOPIC, 3, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let mut fence = ShardFence::acquire(&brokers, "main", 2, &[]).unwrap();
    assert_eq!(fence.transactional_id(), "quota-ledger.main.shard-2");
    fence.publish(&[record(b"one"), record(b"two")]).unwrap();
    fence.publish(&[record(b"three")]).unwrap();
    assert_eq!(payloads(&brokers, 2, 3), ["one", "two", "three"]);
    assert!(payloads(&brokers, 0, 1).is_empty(), "nothing on another partition");
}

#[test]
fn a_refused_epoch_is_fenced_for_good() {
    for api in [RDKafkaApiKey::Produce, RDKafkaApiKey::EndTxn] {
        let cluster = MockCluster::new(1).unwrap();
        cluster.create_topic(TOPIC, 1, 1).unwrap();
        let mut fence = ShardFence::acquire(&cluster.bootstrap_servers(), "main", 0, &[]).unwrap();
        fence.publish(&[record(b"before")]).unwrap();
        // What the brokers answer a producer whose epoch another owner's init_transactions bumped.
        cluster.request_errors(api, &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_PRODUCER_FENCED]);
        let fenced = fence.publish(&[record(b"zombie")]).unwrap_err();
        assert!(matches!(fenced, FenceError::Fenced { .. }), "{api:?}: {fenced}");
        cluster.clear_request_errors(api);
        assert_eq!(fence.publish(&[record(b"later")]).unwrap_err(), fenced, "{api:?}: fenced is final");
    }
}

#[test]
fn a_refused_transaction_fails_alone_and_a_later_one_goes_through() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(TOPIC, 1, 1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let mut fence = ShardFence::acquire(&brokers, "main", 0, &[]).unwrap();
    // An abortable refusal of the records (not a fence): this transaction fails, the fence stays usable.
    let refusals = [RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE];
    cluster.request_errors(RDKafkaApiKey::Produce, &refusals);
    let failed = fence.publish(&[record(b"refused")]).unwrap_err();
    assert!(matches!(failed, FenceError::Unavailable { .. }), "{failed}");
    // librdkafka bumps the producer's epoch after an abortable error: the transaction after the refused one may
    // still fail as unavailable, never as fenced, and a later one goes through.
    let attempts: Vec<_> = (0..3).map(|_| fence.publish(&[record(b"after")])).collect();
    assert!(attempts.iter().all(|a| matches!(a, Ok(()) | Err(FenceError::Unavailable { .. }))), "{attempts:?}");
    assert!(attempts.iter().any(Result::is_ok), "{attempts:?}");
}

#[test]
fn brokers_that_commit_transactions_fence_with_transactions() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(TOPIC, 1, 1).unwrap();
    let fence = ShardFence::acquire(&cluster.bootstrap_servers(), "main", 0, &[]).unwrap();
    assert_eq!(fence.mode(), FenceMode::Transactions);
}

/// The mock cluster without `EndTxn` in its API versions stands for brokers that do not end transactions: the fence
/// keeps one transaction open and answers once the records are acknowledged.
#[test]
fn brokers_without_end_txn_fence_by_the_epoch_alone() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(TOPIC, 2, 1).unwrap();
    cluster.apiversion(RDKafkaApiKey::EndTxn, None, None).unwrap();
    let brokers = cluster.bootstrap_servers();
    let mut fence = ShardFence::acquire(&brokers, "main", 1, &[]).unwrap();
    assert_eq!(fence.mode(), FenceMode::EpochOnly);
    fence.publish(&[record(b"one"), record(b"two")]).unwrap();
    fence.publish(&[record(b"three")]).unwrap();
    assert_eq!(payloads(&brokers, 1, 3), ["one", "two", "three"]);
    cluster.request_errors(RDKafkaApiKey::Produce, &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_PRODUCER_FENCED]);
    let fenced = fence.publish(&[record(b"zombie")]).unwrap_err();
    assert!(matches!(fenced, FenceError::Fenced { .. }), "{fenced}");
    cluster.clear_request_errors(RDKafkaApiKey::Produce);
    assert_eq!(fence.publish(&[record(b"later")]).unwrap_err(), fenced, "fenced is final");
}

/// Without `EndTxn` no transaction can be aborted, and librdkafka takes nothing after a refused record until it is:
/// a refusal that fences nothing still ends the fence, saying so.
#[test]
fn without_end_txn_a_refused_publish_ends_the_fence() {
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic(TOPIC, 1, 1).unwrap();
    cluster.apiversion(RDKafkaApiKey::EndTxn, None, None).unwrap();
    let mut fence = ShardFence::acquire(&cluster.bootstrap_servers(), "main", 0, &[]).unwrap();
    fence.publish(&[record(b"before")]).unwrap();
    cluster.request_errors(RDKafkaApiKey::Produce, &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE]);
    let failed = fence.publish(&[record(b"refused")]).unwrap_err();
    assert!(matches!(failed, FenceError::Unrecoverable { .. }), "{failed}");
    cluster.clear_request_errors(RDKafkaApiKey::Produce);
    assert_eq!(fence.publish(&[record(b"later")]).unwrap_err(), failed, "final");
}

const USAGE: &str = "quota.usage";

/// Every payload of `partition` of `topic` from offset 0, read by a consumer configured as ingest's
/// (`read_committed`, `auto.offset.reset=error`), until `expected` arrived or 10 s passed.
fn ingested(brokers: &str, topic: &str, partition: i32, expected: usize) -> Vec<String> {
    let group = format!("fence-ingest-{}", NEXT_GROUP.fetch_add(1, Ordering::Relaxed));
    let consumer: BaseConsumer = kafka::config::consumer(brokers, &group, &[]).create().unwrap();
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset(topic, partition, Offset::Offset(0)).unwrap();
    consumer.assign(&assignment).unwrap();
    let mut read = Vec::new();
    let started = Instant::now();
    while read.len() < expected && started.elapsed() < Duration::from_secs(10) {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(message)) => read.push(String::from_utf8_lossy(message.payload().unwrap_or_default()).into_owned()),
            Some(Err(error)) => panic!("ingest's consumer failed on {topic}[{partition}]: {error}"),
            None => {}
        }
    }
    read
}

static NEXT_GROUP: AtomicUsize = AtomicUsize::new(0);

/// Tansu 0.6.0 announces no `EndTxn` and fences by the epoch on produce. What an owner published and the brokers
/// acknowledged stays readable by ingest's consumer after the next owner's takeover (which ends the open transaction
/// of the previous owner), the previous owner is fenced for good, and the new owner publishes.
#[test]
fn on_tansu_a_takeover_fences_the_old_owner_and_keeps_what_it_published() {
    let Some(tansu) = support::Tansu::start(&[TOPIC, USAGE], 2) else { return };
    let brokers = &tansu.bootstrap;
    let on = |topic, payload| FencedRecord { topic, key: "org-42", payload };
    let mut first = ShardFence::acquire(brokers, "main", 1, &[]).unwrap();
    assert_eq!(first.mode(), FenceMode::EpochOnly, "Tansu 0.6.0 does not serve EndTxn");
    first.publish(&[on(TOPIC, b"first-1"), on(USAGE, b"first-usage-1"), on(TOPIC, b"first-2")]).unwrap();
    first.publish(&[on(TOPIC, b"first-3")]).unwrap();

    let mut second = ShardFence::acquire(brokers, "main", 1, &[]).unwrap();
    assert_eq!(ingested(brokers, TOPIC, 1, 3), ["first-1", "first-2", "first-3"], "kept after the takeover");
    let fenced = first.publish(&[on(TOPIC, b"zombie")]).unwrap_err();
    assert!(matches!(fenced, FenceError::Fenced { .. }), "{fenced}");
    assert_eq!(first.publish(&[on(TOPIC, b"zombie-again")]).unwrap_err(), fenced, "fenced is final");

    second.publish(&[on(TOPIC, b"second-1"), on(USAGE, b"second-usage-1")]).unwrap();
    second.publish(&[on(TOPIC, b"second-2")]).unwrap();
    // The zombie's record, had the brokers taken it, would sit before the second owner's.
    assert_eq!(ingested(brokers, TOPIC, 1, 5), ["first-1", "first-2", "first-3", "second-1", "second-2"]);
    assert_eq!(ingested(brokers, USAGE, 1, 2), ["first-usage-1", "second-usage-1"]);
    assert!(ingested(brokers, TOPIC, 0, 1).is_empty(), "nothing on another shard's partition");
}
