//! Partitioning (docs/contract.md §9.4), as a producer team and an operator meet it: `produce` puts every tenant's
//! events in `partition_of(tenant, P)` (Kafka's default partitioner, what ingest and the shards count on), a plan
//! default (tenant `*`) in every partition, and `produce`, `ingest --brokers` and `serve --brokers` refuse input
//! topics whose partition counts differ, naming them.

mod support;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

use kafka::admin::EmbeddedBroker;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use schemas::partition::partition_of;
use schemas::*;
use support::*;

const PARTITIONS: u32 = 6;

/// Every message on `topic` as (partition, key, payload), read to the high watermark each partition had when the read
/// began: `produce` exited, so every message it sent is there.
fn messages_on(bootstrap: &str, topic: &str) -> Vec<(u32, String, Vec<u8>)> {
    brokers::messages_on(bootstrap, topic)
        .into_iter()
        .map(|(partition, key, payload)| {
            let key = String::from_utf8(key.expect("a key")).expect("a UTF-8 key");
            (partition, key, payload)
        })
        .collect()
}

/// The event a message carries.
fn decoded(payload: &[u8]) -> Event {
    Catalog::builtin().decode_single_object(payload, None).expect("a single-object event").event
}

/// JSON lines of `events`, written to `name` in the test's directory.
fn json_lines(test: &TestLedger, name: &str, events: &[Event]) -> String {
    let text: String = events.iter().map(|e| format!("{}\n", e.to_json())).collect();
    let path = test.file(name);
    std::fs::write(&path, text).expect("the JSON lines are written");
    path.to_str().expect("a UTF-8 path").to_string()
}

/// A PolicyEvent of `tenant` (`*`: the plan default).
fn policy(event_id: &str, tenant: &str) -> Event {
    let mut event = sample_event(EventType::PolicyEvent, event_id);
    if let Event::Policy(policy) = &mut event {
        policy.header.tenant = tenant.to_string();
    }
    event
}

fn tenants() -> Vec<String> {
    let mut tenants: Vec<String> = (1..=300).map(|n| format!("org-{n}")).collect();
    tenants.extend(
        ["tenant-0001", "Zürich-GmbH", "org-42", "東京-株式会社", "a", "x".repeat(128).as_str()].map(String::from),
    );
    tenants
}

// Proves that `produce` puts each tenant's events in `partition_of(tenant, P)`: the partition the shards, the
// routing client and every other producer of the topics compute. librdkafka's own default partitioner (CRC32)
// puts most of these tenants elsewhere.
#[test]
fn produce_puts_every_tenant_in_its_partition() {
    let broker = EmbeddedBroker::start(PARTITIONS as i32).expect("the embedded broker");
    let bootstrap = broker.bootstrap_servers();
    let test = TestLedger::new();
    let tenants = tenants();
    let events: Vec<Event> =
        tenants.iter().enumerate().map(|(n, t)| usage(&format!("u-{n}"), "2026-11-02T10:00:00Z", t, 1)).collect();
    let file = json_lines(&test, "usage.jsonl", &events);
    test.run(&["produce", "--type", "UsageEvent", "--file", &file, "--brokers", &bootstrap]).success();

    let messages = messages_on(&bootstrap, "quota.usage");
    assert_eq!(messages.len(), events.len(), "every event once");
    let mut used = BTreeMap::<u32, usize>::new();
    for (partition, key, payload) in &messages {
        let tenant = decoded(payload).header().tenant.clone();
        assert_eq!(key, &tenant, "the key is the tenant");
        assert_eq!(*partition, partition_of(&tenant, PARTITIONS), "the partition of {tenant:?}");
        *used.entry(*partition).or_default() += 1;
    }
    assert_eq!(used.len(), PARTITIONS as usize, "{} tenants spread over every partition: {used:?}", tenants.len());
}

// Proves that a plan default (tenant `*`) is produced to every partition of its topic, the same bytes under the
// same key, so that every shard records it, while a tenant's own policy goes to its partition only.
#[test]
fn a_plan_default_goes_to_every_partition() {
    let broker = EmbeddedBroker::start(PARTITIONS as i32).expect("the embedded broker");
    let bootstrap = broker.bootstrap_servers();
    let test = TestLedger::new();
    let events = [policy("plan-default", "*"), policy("own-plan", "org-42")];
    let file = json_lines(&test, "policies.jsonl", &events);
    let report = test
        .run(&["produce", "--type", "PolicyEvent", "--file", &file, "--brokers", &bootstrap, "--json"])
        .success()
        .json();
    assert_eq!(count(&report, "delivered"), u64::from(PARTITIONS) + 1, "{report}");

    let messages = messages_on(&bootstrap, "quota.policies");
    let default_bytes = Catalog::builtin().encode_single_object(&events[0]);
    let mut defaults: Vec<u32> = messages
        .iter()
        .filter(|(_, key, _)| key == "*")
        .map(|(partition, _, payload)| {
            assert_eq!(payload, &default_bytes, "the same bytes on every partition");
            *partition
        })
        .collect();
    defaults.sort();
    assert_eq!(defaults, (0..PARTITIONS).collect::<Vec<_>>(), "once on each partition");
    let own: Vec<u32> = messages.iter().filter(|(_, key, _)| key == "org-42").map(|(p, _, _)| *p).collect();
    assert_eq!(own, [partition_of("org-42", PARTITIONS)], "a tenant's policy in its partition only");

    // A ledger that holds every partition counts the plan default once, the copies as exact duplicates.
    test.run(&["ingest", "--brokers", &bootstrap, "--until-caught-up"]).success();
    let status = test.status();
    assert_eq!(count(&status, "events_recorded"), 2, "{status}");
    assert_eq!(count(&status, "duplicates"), u64::from(PARTITIONS) - 1, "{status}");
}

/// A mock cluster whose input topics have 6 partitions, but `quota.grants` 4.
fn mismatched_cluster() -> rdkafka::mocking::MockCluster<'static, rdkafka::producer::DefaultProducerContext> {
    let cluster = rdkafka::mocking::MockCluster::new(1).expect("a mock cluster");
    for name in kafka::topics::all_default_topic_names().into_iter().chain([kafka::checkpoints::CHECKPOINTS_TOPIC]) {
        let partitions = if name == "quota.grants" { 4 } else { 6 };
        cluster.create_topic(name, partitions, 1).expect("a topic");
    }
    cluster
}

const MISMATCH: &str = "the input topics must have one partition count (a tenant's partition is murmur2(tenant) % P \
                        on every topic), but quota.alerts has 6, quota.decisions has 6, quota.grants has 4, \
                        quota.policies has 6, quota.reservations has 6, quota.usage has 6";

// Proves that `produce`, `ingest --brokers` and `serve --brokers` refuse to start when the input topics' partition
// counts differ (a tenant would hash to different partitions, so shards, on each), naming every topic with its
// count, and that `produce` sends nothing then.
#[test]
fn input_topics_of_different_partition_counts_are_refused_by_name() {
    let cluster = mismatched_cluster();
    let bootstrap = cluster.bootstrap_servers();
    let test = TestLedger::new();

    let file = json_lines(&test, "usage.jsonl", &[usage("u-1", "2026-11-02T10:00:00Z", "org-42", 1)]);
    let produced = test.run(&["produce", "--type", "UsageEvent", "--file", &file, "--brokers", &bootstrap]);
    let produced = produced.expect_code(2);
    assert!(produced.stderr.contains(MISMATCH), "{}", produced.stderr);
    assert!(messages_on(&bootstrap, "quota.usage").is_empty(), "nothing produced");

    let ingested = test.run(&["ingest", "--brokers", &bootstrap, "--until-caught-up"]).expect_code(2);
    assert!(ingested.stderr.contains(MISMATCH), "{}", ingested.stderr);

    // serve opens a ledger that exists: one ingested from a file.
    let backfill = test.file("usage.avro");
    write_container(&backfill, &[usage("u-0", "2026-11-01T10:00:00Z", "org-42", 1)]);
    test.ingest(&backfill);
    let tokens = test.file("tokens.toml");
    serve::tokens::write_private(&tokens, "[[token]]\nsecret = \"s3cret-s3cret-s3cret\"\ntenants = [\"*\"]\n")
        .expect("a token file");
    let mut server = ChildGuard::new(
        Command::new(BIN)
            .args(["--ledger", test.path.to_str().expect("UTF-8"), "serve", "--listen", "127.0.0.1:0"])
            .args(["--brokers", &bootstrap, "--tokens"])
            .arg(&tokens)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("serve starts"),
    );
    let status = eventually(30, "serve exits", || server.try_wait().expect("serve's status"));
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut server.stderr.take().expect("piped"), &mut stderr).expect("serve's stderr");
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(MISMATCH), "{stderr}");
}

// Proves that `topics create --partitions N` makes every input topic with N partitions on a broker that does not
// create topics on first use (Tansu), so that the check above passes on the topics it made.
#[test]
fn topics_create_makes_one_partition_count() {
    let Some(broker) = brokers::Broker::tansu_with_only(&[]) else { return };
    run(&["topics", "create", "--brokers", &broker.bootstrap, "--partitions", "6"], b"").success();
    let consumer: BaseConsumer =
        ClientConfig::new().set("bootstrap.servers", &broker.bootstrap).create().expect("a consumer");
    let count = kafka::topics::common_partition_count(consumer.client(), kafka::topics::Topics::defaults().names());
    assert_eq!(count, Ok(6));
}
