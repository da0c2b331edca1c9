//! A shard's transactional producer: what it publishes is acknowledged at the shard's partition, and once another
//! owner acquired the shard (or the brokers refuse its epoch) every publish of the old owner fails as `Fenced`.

mod support;

use std::time::{Duration, Instant};

use kafka::fence::{FenceError, FencedRecord, ShardFence};
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

/// Tansu 0.6.0 bumps the epoch of a transactional id at `init_transactions` and refuses the old epoch on produce, so
/// the fence holds there; it does not serve `EndTxn`, so no transaction commits (what this test also pins, so that a
/// Tansu that gains it is noticed).
#[test]
fn on_tansu_a_second_acquire_fences_the_first() {
    let Some(tansu) = support::Tansu::start(&[TOPIC], 1) else { return };
    let mut first = ShardFence::acquire(&tansu.bootstrap, "main", 0, &[]).unwrap();
    let mut second = ShardFence::acquire(&tansu.bootstrap, "main", 0, &[]).unwrap();
    let fenced = first.publish(&[record(b"zombie")]).unwrap_err();
    assert!(matches!(fenced, FenceError::Fenced { .. }), "{fenced}");
    let unsupported = second.publish(&[record(b"owner")]).unwrap_err();
    assert!(matches!(unsupported, FenceError::Unsupported { .. }), "{unsupported}");
}
