//! `quota-ledger route TENANT`: the tenant's partition (murmur2 modulo the input topics' partition count) and the
//! owner the routing catalog records for it, the latest epoch winning.

mod support;

use kafka::routing::{RoutingEntry, publish_owner};
use support::brokers::Broker;
use support::run;

#[test]
fn route_names_the_partition_and_its_owner() {
    let broker = Broker::mock();
    let partition = schemas::partition::partition_of("org-42", 3);
    let args = ["route", "org-42", "--brokers", &broker.bootstrap];
    let before = run(&args, b"").success().stdout_text();
    assert!(before.contains(&format!("partition  {partition} of 3")), "{before}");
    assert!(before.contains("no owner recorded"), "{before}");
    publish_owner(&broker.bootstrap, &[], &RoutingEntry::now(partition, "node-a", "http://127.0.0.2:8080", 4)).unwrap();
    publish_owner(&broker.bootstrap, &[], &RoutingEntry::now(partition, "node-b", "http://127.0.0.3:8080", 5)).unwrap();
    let after = run(&args, b"").success().stdout_text();
    assert!(after.contains("node-b at http://127.0.0.3:8080 (epoch 5"), "{after}");
    let json = run(&[&args[..], &["--json"]].concat(), b"").success().json();
    assert_eq!(json["partition"], partition);
    assert_eq!(json["partitions"], 3);
    assert_eq!(json["owner"]["node_id"], "node-b");
}
