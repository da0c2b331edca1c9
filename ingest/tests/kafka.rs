//! Ingest from Kafka as the ledger sees it: `ingest::consumer::ingest_kafka` (and `ingest_kafka_shards`) run in this
//! process `until_caught_up` against librdkafka's mock cluster (`kafka::admin::EmbeddedBroker`, the real Kafka
//! protocol on localhost) into ledgers in a temporary directory. Every assertion is on what the run reports and what
//! the ledger then holds.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use ingest::{KafkaIngestError, KafkaIngestProgress, KafkaIngestSettings};
use kafka::admin::EmbeddedBroker;
use kafka::producer::KafkaProducer;
use ledger::shards::ShardDir;
use ledger::{GapRange, Ledger};
use rdkafka::consumer::{BaseConsumer, Consumer};
use schemas::{Event, Header, UsageEvent};

/// The topic every test produces to.
const USAGE: &str = "quota.usage";

/// A usage event `event_id` of `tenant`: 5 requests.
fn usage(event_id: &str, tenant: &str) -> Event {
    Event::Usage(UsageEvent {
        header: Header {
            event_id: event_id.to_string(),
            occurred_at: schemas::Timestamp::parse_rfc3339("2026-11-10T12:00:00Z").expect("a time"),
            tenant: tenant.to_string(),
            subject: None,
            project: None,
            api_key: None,
            metric: "requests".to_string(),
            source: "ingest-test".to_string(),
        },
        quantity: 5,
        request_id: None,
        attributes: BTreeMap::new(),
    })
}

/// Produces each `(key, payload)` to quota.usage (the key decides the partition), every one acknowledged.
fn produce(broker: &EmbeddedBroker, messages: &[(&str, Vec<u8>)]) {
    let mut producer = KafkaProducer::new(&broker.bootstrap_servers(), &[]).expect("a producer");
    for (key, payload) in messages {
        producer.send(USAGE, key, payload).expect("send");
    }
    producer.finish().expect("every message acknowledged");
}

/// Single-object Avro usage events `ids` of `tenant`, keyed by the tenant.
fn events<'a>(tenant: &'a str, ids: &[&str]) -> Vec<(&'a str, Vec<u8>)> {
    let catalog = schemas::Catalog::builtin();
    ids.iter().map(|id| (tenant, catalog.encode_single_object(&usage(id, tenant)))).collect()
}

/// Consuming every input topic of `broker` until the ledger reached the end of each, without checkpoints.
fn settings(broker: &EmbeddedBroker) -> KafkaIngestSettings {
    let mut settings = KafkaIngestSettings::new(broker.bootstrap_servers(), "ingest-test");
    settings.until_caught_up = true;
    settings.publish_checkpoints = false;
    settings
}

fn ingest(ledger: &mut Ledger, settings: &KafkaIngestSettings) -> Result<KafkaIngestProgress, KafkaIngestError> {
    ingest::consumer::ingest_kafka(ledger, settings, &AtomicBool::new(false), |_| {})
}

/// The event ids of every counted usage event of `ledger`.
fn usage_ids(ledger: &Ledger) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    ledger.for_each_usage(|row| _ = ids.insert(row.event_id.to_string())).expect("the usage reads");
    ids
}

/// The ledger's next offset of each partition of quota.usage it stored one for.
fn usage_offsets(ledger: &Ledger) -> Vec<(i32, i64)> {
    let offsets = ledger.offsets().expect("the offsets read");
    offsets.iter().filter(|o| o.topic == USAGE).map(|o| (o.partition, o.next_offset)).collect()
}

fn ids(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|id| id.to_string()).collect()
}

// Proves a run records each event once, counts an event sent again as a duplicate, quarantines a message that is
// not Avro with its reason and offset, and stores the offsets with the batch: a second run finds nothing new.
#[test]
fn events_are_recorded_once_and_a_second_run_records_nothing() {
    let broker = EmbeddedBroker::start(1).expect("a mock broker");
    let mut messages = events("org-1", &["u-1", "u-2", "u-3", "u-1"]);
    messages.push(("org-1", b"not an Avro message".to_vec()));
    produce(&broker, &messages);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut ledger = Ledger::open(dir.path().join("ledger.db")).expect("a new ledger");

    let first = ingest(&mut ledger, &settings(&broker)).expect("ingest catches up");
    assert_eq!((first.messages, first.recorded, first.duplicates, first.quarantined), (5, 3, 1, 1), "{first:?}");
    assert_eq!(first.quarantined_by_reason, BTreeMap::from([("bad_magic".to_string(), 1)]));
    assert_eq!(usage_ids(&ledger), ids(&["u-1", "u-2", "u-3"]));
    let quarantined = ledger.quarantined().expect("the quarantine reads");
    let [message] = &quarantined[..] else { panic!("one message quarantined: {quarantined:?}") };
    assert_eq!(
        (message.topic.as_deref(), message.partition, message.offset, message.reason_code.as_str()),
        (Some(USAGE), Some(0), Some(4), "bad_magic")
    );
    assert_eq!(usage_offsets(&ledger), [(0, 5)], "the offset past the last message, stored with it");

    let second = ingest(&mut ledger, &settings(&broker)).expect("ingest catches up again");
    assert_eq!((second.messages, second.recorded, second.duplicates, second.quarantined), (0, 0, 0, 0), "{second:?}");
    let status = ledger.status().expect("the status reads");
    assert_eq!((status.events_recorded, status.duplicates, status.quarantined), (3, 1, 1));
}

/// The (low, high) watermarks of quota.usage's partition 0, as the broker answers now.
fn watermarks(broker: &EmbeddedBroker) -> (i64, i64) {
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", broker.bootstrap_servers())
        .set("group.id", "ingest-test-watermarks")
        .create()
        .expect("a consumer");
    consumer.fetch_watermarks(USAGE, 0, Duration::from_secs(30)).expect("the watermarks")
}

// Proves offsets removed from a partition before the ledger read them stop ingest, naming exactly the range and
// recording nothing past it; an accepted gap that is not that range is refused; the range accepted
// (`accept_gaps`, `--accept-gap`) is recorded as the ledger's gap and ingest goes on with what the broker still holds.
#[test]
fn offsets_never_read_stop_ingest_until_the_gap_is_accepted() {
    let broker = EmbeddedBroker::start(1).expect("a mock broker");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut ledger = Ledger::open(dir.path().join("ledger.db")).expect("a new ledger");
    produce(&broker, &events("org-gap", &["g-1", "g-2", "g-3"]));
    ingest(&mut ledger, &settings(&broker)).expect("ingest catches up");
    assert_eq!(usage_offsets(&ledger), [(0, 3)]);

    // The mock keeps 5 MiB per partition, as a broker's retention would: 6.3 MB more removes offsets 3 and after.
    let large: Vec<(&str, Vec<u8>)> = (0..7u8).map(|n| ("org-gap", vec![n; 900_000])).collect();
    produce(&broker, &large);
    produce(&broker, &events("org-gap", &["g-4", "g-5"]));
    let (low, high) = watermarks(&broker);
    assert!(low > 3 && high == 12, "the broker removed offsets 3 and after: low {low}, high {high}");
    let gap = GapRange { topic: USAGE.to_string(), partition: 0, from_offset: 3, to_offset: low - 1 };

    match ingest(&mut ledger, &settings(&broker)) {
        Err(KafkaIngestError::OffsetsNeverRead { missing }) => {
            let ranges: Vec<&GapRange> = missing.iter().map(|m| &m.range).collect();
            assert_eq!(ranges, [&gap]);
        }
        other => panic!("ingest should stop on the offsets never read: {other:?}"),
    }
    let wrong = GapRange { to_offset: low, ..gap.clone() };
    let mut refusing = settings(&broker);
    refusing.accept_gaps = vec![wrong.clone()];
    match ingest(&mut ledger, &refusing) {
        Err(KafkaIngestError::GapNotMissing { asked, .. }) => assert_eq!(asked, wrong),
        other => panic!("a gap other than the one missing should be refused: {other:?}"),
    }
    assert_eq!((usage_ids(&ledger).len(), usage_offsets(&ledger)), (3, vec![(0, 3)]), "nothing recorded past the gap");
    assert!(ledger.offset_gaps().expect("the gaps read").is_empty(), "no gap recorded by a refusal");

    let mut accepting = settings(&broker);
    accepting.accept_gaps = vec![gap.clone()];
    ingest(&mut ledger, &accepting).expect("ingest goes on past the accepted gap");
    let gaps: Vec<GapRange> = ledger.offset_gaps().expect("the gaps read").iter().map(|g| g.range()).collect();
    assert_eq!(gaps, [gap]);
    assert_eq!(usage_ids(&ledger), ids(&["g-1", "g-2", "g-3", "g-4", "g-5"]));
    assert_eq!(usage_offsets(&ledger), [(0, 12)]);
}

/// The partition count of the shards test's topics.
const PARTITIONS: u32 = 4;

/// The event ids of usage each shard of `dir` holds, by partition, with the tenants they are of.
fn shard_usage(dir: &Path) -> BTreeMap<u32, BTreeSet<(String, String)>> {
    let shards = ShardDir::new(dir);
    let mut held = BTreeMap::new();
    for (shard, ledger) in shards.open_all_read_only().expect("the shards open") {
        let mut usage = BTreeSet::new();
        ledger
            .for_each_usage(|row| _ = usage.insert((row.tenant.to_string(), row.event_id.to_string())))
            .expect("the usage reads");
        held.insert(shard.partition, usage);
    }
    held
}

// Proves `ingest_kafka_shards` records each tenant's events in the shard of its tenant's partition, and only there.
#[test]
fn each_tenants_events_go_to_its_partitions_shard() {
    let broker = EmbeddedBroker::start(PARTITIONS as i32).expect("a mock broker");
    let tenants: Vec<String> = (0..8).map(|n| format!("org-{n}")).collect();
    let catalog = schemas::Catalog::builtin();
    let messages: Vec<(&str, Vec<u8>)> = tenants
        .iter()
        .map(|tenant| (tenant.as_str(), catalog.encode_single_object(&usage(&format!("e-{tenant}"), tenant))))
        .collect();
    produce(&broker, &messages);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let shards = ShardDir::new(dir.path().join("shards"));

    let progress = ingest::consumer::ingest_kafka_shards(&shards, &settings(&broker), &AtomicBool::new(false), |_| {})
        .expect("ingest catches up");
    assert_eq!((progress.recorded, progress.forwarded), (8, 0), "{progress:?}");

    let mut expected: BTreeMap<u32, BTreeSet<(String, String)>> =
        (0..PARTITIONS).map(|p| (p, BTreeSet::new())).collect();
    for tenant in &tenants {
        let partition = schemas::partition::partition_of(tenant, PARTITIONS);
        expected.entry(partition).or_default().insert((tenant.clone(), format!("e-{tenant}")));
    }
    assert!(expected.values().filter(|held| !held.is_empty()).count() > 1, "the tenants span shards: {expected:?}");
    assert_eq!(shard_usage(shards.dir()), expected);
}
