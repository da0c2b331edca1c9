//! The routing catalog: entries published by nodes are read back as one owner per partition (a higher epoch wins,
//! of equal epochs the later one), once by `read_routing` and continuously by a follower.

mod support;

use std::time::{Duration, Instant};

use kafka::admin::EmbeddedBroker;
use kafka::routing::{ROUTING_TOPIC, RoutingCatalog, RoutingEntry, RoutingTable, RoutingWriter, read_routing};

fn owners(table: &RoutingTable) -> Vec<(u32, String, i64)> {
    table.entries().map(|e| (e.partition, e.node_id.clone(), e.epoch)).collect()
}

fn publish_rebalances(brokers: &str) {
    let mut a = RoutingWriter::new(brokers, &[]).unwrap();
    let mut b = RoutingWriter::new(brokers, &[]).unwrap();
    a.publish(&RoutingEntry::now(0, "a", "http://127.0.0.2:8080", 1)).unwrap();
    a.publish(&RoutingEntry::now(1, "a", "http://127.0.0.2:8080", 1)).unwrap();
    // The group rebalanced: b took partition 1 at generation 2.
    b.publish(&RoutingEntry::now(1, "b", "http://127.0.0.3:8080", 2)).unwrap();
    // A paused a's late entry for generation 1 arrives after: it must not win.
    a.publish(&RoutingEntry::now(1, "a", "http://127.0.0.2:8080", 1)).unwrap();
}

#[test]
fn read_routing_keeps_the_latest_owner_of_each_partition() {
    let broker = EmbeddedBroker::start(1).unwrap();
    let brokers = broker.bootstrap_servers();
    assert!(read_routing(&brokers, &[]).unwrap().is_empty(), "nothing published yet");
    publish_rebalances(&brokers);
    let table = read_routing(&brokers, &[]).unwrap();
    assert_eq!(owners(&table), [(0, "a".to_string(), 1), (1, "b".to_string(), 2)]);
    assert_eq!(table.owner(1).unwrap().url, "http://127.0.0.3:8080");
}

#[test]
fn a_follower_sees_entries_published_after_it_started() {
    let broker = EmbeddedBroker::start(1).unwrap();
    let brokers = broker.bootstrap_servers();
    let catalog = RoutingCatalog::follow(&brokers, &[]).unwrap();
    publish_rebalances(&brokers);
    // A mark after the late entry of generation 1: the topic has one partition, read in order, so a follower that
    // has the mark has read the late entry too.
    let mark = RoutingEntry::now(2, "c", "http://127.0.0.4:8080", 1);
    RoutingWriter::new(&brokers, &[]).unwrap().publish(&mark).unwrap();
    let started = Instant::now();
    while catalog.table().owner(2).is_none() {
        assert!(started.elapsed() < Duration::from_secs(10), "the follower is at {:?}", owners(&catalog.table()));
        std::thread::sleep(Duration::from_millis(50));
    }
    // Once the late entry is read, the table still names b.
    assert_eq!(owners(&catalog.table()), [(0, "a".to_string(), 1), (1, "b".to_string(), 2), (2, "c".to_string(), 1)]);
}

#[test]
fn a_broker_without_the_topic_is_named() {
    let cluster = rdkafka::mocking::MockCluster::new(1).unwrap();
    let brokers = cluster.bootstrap_servers();
    let error = read_routing(&brokers, &[]).unwrap_err().to_string();
    assert!(error.contains("quota.routing does not exist") && error.contains("topics create"), "{error}");
}

#[test]
fn on_tansu_the_catalog_is_created_compacted_and_read_back() {
    let Some(tansu) = support::Tansu::start(&[ROUTING_TOPIC], 3) else { return };
    publish_rebalances(&tansu.bootstrap);
    let table = read_routing(&tansu.bootstrap, &[]).unwrap();
    assert_eq!(owners(&table), [(0, "a".to_string(), 1), (1, "b".to_string(), 2)]);
}
