//! `ingest --data DIR --brokers B` (contract §9.4): partition p of every input topic into shard p, each tenant's
//! events in its tenant's shard only, the same totals as a single-file ingest of the same topics, events produced
//! into a wrong partition forwarded and counted once, and a SIGKILL mid-ingest losing nothing and counting nothing
//! twice. Against the embedded broker (librdkafka's mock cluster, a process of its own) with 4 partitions.

mod support;

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::brokers::Broker;
use support::*;

/// The partition count of the tests' topics.
const P: u32 = 4;

/// `quota-ledger --data DIR ARGS...`.
fn run_data(dir: &Path, args: &[&str]) -> Run {
    let mut all = vec!["--data", dir.to_str().expect("a UTF-8 path")];
    all.extend_from_slice(args);
    run_in(dir.parent().expect("a parent"), &all, b"")
}

/// `quota-ledger --ledger FILE ARGS...`.
fn run_ledger(file: &Path, args: &[&str]) -> Run {
    let mut all = vec!["--ledger", file.to_str().expect("a UTF-8 path")];
    all.extend_from_slice(args);
    run_in(file.parent().expect("a parent"), &all, b"")
}

fn shard_files(dir: &Path) -> Vec<(u32, PathBuf)> {
    (0..P).map(|p| (p, dir.join(format!("shard-{p:04}.db")))).filter(|(_, path)| path.exists()).collect()
}

/// Rows of `sql QUERY --format csv` on one ledger file, the header left out.
fn sql_rows(file: &Path, query: &str) -> Vec<Vec<String>> {
    let run = run_ledger(file, &["sql", query, "--format", "csv"]).success();
    run.stdout_text().lines().skip(1).map(|line| line.split(',').map(str::to_string).collect()).collect()
}

/// What a ledger holds per tenant other than `*` (whose plan defaults belong to every shard): its usage totals per
/// (metric, period) and the entries recorded of it.
#[derive(Debug, Default, PartialEq, Eq)]
struct PerTenant {
    usage: BTreeMap<(String, String, String), i64>,
    entries: BTreeMap<String, i64>,
}

impl PerTenant {
    fn add(&mut self, file: &Path) {
        for row in sql_rows(file, "SELECT tenant, metric, period, quantity FROM usage_totals WHERE tenant <> '*'") {
            *self.usage.entry((row[0].clone(), row[1].clone(), row[2].clone())).or_default() +=
                row[3].parse::<i64>().unwrap();
        }
        for row in sql_rows(file, "SELECT tenant, COUNT(*) FROM entries WHERE tenant <> '*' GROUP BY tenant") {
            *self.entries.entry(row[0].clone()).or_default() += row[1].parse::<i64>().unwrap();
        }
    }

    fn of(files: &[PathBuf]) -> PerTenant {
        let mut all = PerTenant::default();
        files.iter().for_each(|file| all.add(file));
        all
    }
}

/// Asserts that each shard holds only tenants whose partition is its own.
fn assert_tenants_in_their_shards(dir: &Path) {
    let files = shard_files(dir);
    assert!(!files.is_empty(), "no shard in {}", dir.display());
    for (partition, file) in files {
        for row in sql_rows(&file, "SELECT DISTINCT tenant FROM entries WHERE tenant <> '*'") {
            let tenant = &row[0];
            assert_eq!(
                schemas::partition::partition_of(tenant, P),
                partition,
                "tenant {tenant} is in shard {partition} of {}",
                dir.display()
            );
        }
        run_ledger(&file, &["verify", "--json"]).success();
    }
}

fn status_sum(dir: &Path, field: &str) -> u64 {
    shard_files(dir)
        .iter()
        .map(|(_, file)| count(&run_ledger(file, &["status", "--json"]).success().json(), field))
        .sum()
}

fn misrouted(dir: &Path) -> u64 {
    shard_files(dir)
        .iter()
        .map(|(_, file)| {
            let status = run_ledger(file, &["status", "--json"]).success().json();
            status["misrouted"].as_object().map_or(0, |m| m.values().map(|v| v.as_u64().unwrap()).sum::<u64>())
        })
        .sum()
}

// A generated month ingested into 4 shards: each shard holds only the tenants of its partition, and the totals per
// tenant are those of a single-file ingest of the same topics.
#[test]
fn a_generated_month_goes_into_the_shard_of_each_tenant() {
    let broker = Broker::mock_with_partitions(P);
    generate_to(&broker, 40, 4_000, 35);
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let report =
        run_data(&data, &["ingest", "--brokers", &broker.bootstrap, "--until-caught-up", "--json"]).success().json();
    assert_eq!(shard_files(&data).len(), P as usize, "one shard per partition: {report}");
    assert_tenants_in_their_shards(&data);
    let single = work.path().join("single.db");
    run_ledger(&single, &["ingest", "--brokers", &broker.bootstrap, "--until-caught-up"]).success();
    let shards: Vec<PathBuf> = shard_files(&data).into_iter().map(|(_, file)| file).collect();
    let sharded = PerTenant::of(&shards);
    assert!(!sharded.usage.is_empty(), "the shards hold usage");
    assert_eq!(
        sharded,
        PerTenant::of(std::slice::from_ref(&single)),
        "per tenant, the shards hold what one ledger holds"
    );
    let single_status = run_ledger(&single, &["status", "--json"]).success().json();
    assert_eq!(status_sum(&data, "quarantined"), count(&single_status, "quarantined"), "the malformed messages");
    assert_eq!(single_status["misrouted"], serde_json::json!({}), "a ledger of every partition forwards nothing");
    assert_eq!(misrouted(&data), count(&report, "forwarded"), "status counts what ingest forwarded");
}

/// Sends `events` to quota.usage, each into the partition `partition(tenant)` says, with the tenant as key.
fn produce_into(bootstrap: &str, events: &[schemas::Event], partition: impl Fn(&str) -> i32) {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let producer: BaseProducer =
        rdkafka::ClientConfig::new().set("bootstrap.servers", bootstrap).create().expect("a producer");
    let catalog = schemas::Catalog::builtin();
    for event in events {
        let tenant = event.header().tenant.clone();
        let payload = catalog.encode_single_object(event);
        let record = BaseRecord::to("quota.usage").key(&tenant).payload(&payload).partition(partition(&tenant));
        producer.send(record).map_err(|(e, _)| e).expect("queued");
    }
    producer.flush(Duration::from_secs(30)).expect("acknowledged");
}

// Events produced into partitions other than their tenant's (a producer with another partitioner) are forwarded to
// their tenant's partition: each is counted once, in its tenant's shard; the shard it was read in records that it
// forwarded it (status: misrouted); a second ingest forwards nothing again.
#[test]
fn events_in_the_wrong_partition_are_forwarded_and_counted_once() {
    let broker = Broker::mock_with_partitions(P);
    let events: Vec<schemas::Event> = (0..40)
        .map(|i| usage(&format!("wrong-{i}"), "2026-11-03T10:00:00Z", &format!("t-{}", i % 8), 10 + i))
        .collect();
    let wrong = |tenant: &str| ((schemas::partition::partition_of(tenant, P) + 1) % P) as i32;
    produce_into(&broker.bootstrap, &events, wrong);
    let right = |tenant: &str| schemas::partition::partition_of(tenant, P) as i32;
    let fine: Vec<schemas::Event> =
        (0..8).map(|i| usage(&format!("right-{i}"), "2026-11-03T11:00:00Z", &format!("t-{i}"), 1)).collect();
    produce_into(&broker.bootstrap, &fine, right);
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let ingest = || run_data(&data, &["ingest", "--brokers", &broker.bootstrap, "--until-caught-up", "--json"]);
    let first = ingest().success().json();
    assert_eq!(count(&first, "forwarded"), 40, "{first}");
    // The copies are at the end of their tenant's partitions: a run until caught up may end before it read them all.
    let second = ingest().success().json();
    assert_eq!(count(&second, "forwarded"), 0, "nothing is forwarded twice: {second}");
    assert_eq!(status_sum(&data, "events_recorded"), 48, "each event once");
    assert_eq!(status_sum(&data, "duplicates"), 0);
    assert_eq!(misrouted(&data), 40);
    assert_tenants_in_their_shards(&data);
    let shards: Vec<PathBuf> = shard_files(&data).into_iter().map(|(_, file)| file).collect();
    let totals = PerTenant::of(&shards);
    for tenant in 0..8 {
        let expected: i64 = 1 + (0..40).filter(|i| i % 8 == tenant).map(|i| 10 + i).sum::<i64>();
        let key = (format!("t-{tenant}"), "requests".to_string(), "2026-11".to_string());
        assert_eq!(totals.usage.get(&key), Some(&expected), "tenant t-{tenant}: {:?}", totals.usage);
    }
    let on_topic = support::brokers::event_ids_on_topic(&broker.bootstrap, "quota.usage", 88);
    assert_eq!(on_topic.len(), 88, "each misrouted event was copied once to its tenant's partition");
}

/// `ingest --data DIR --brokers B --group G` as a child process, killed when dropped.
fn spawn_shard_ingest(data: &Path, brokers: &str, group: &str, log: &Path) -> ChildGuard {
    let child = Command::new(BIN)
        .args(["--data", data.to_str().unwrap(), "ingest", "--brokers", brokers, "--group", group])
        .args(["--batch-max-events", "100", "--batch-wait-ms", "50"])
        .env_remove("QUOTA_LEDGER_BROKERS")
        .env_remove("QUOTA_LEDGER_GROUP")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(log).unwrap())
        .spawn()
        .expect("ingest starts");
    ChildGuard::new(child)
}

fn recorded_so_far(data: &Path) -> u64 {
    shard_files(data)
        .iter()
        .filter_map(|(_, file)| {
            let run = run_ledger(file, &["status", "--json"]);
            (run.code == Some(0)).then(|| count(&run.json(), "events_recorded"))
        })
        .sum()
}

// SIGKILL while ingest appends to 4 shards, three times, then a run to the end: per tenant, the shards hold exactly
// what a single-file ingest of the same topics holds (nothing lost, nothing twice), and each verifies.
#[test]
fn sigkill_mid_shard_ingest_loses_nothing_and_counts_nothing_twice() {
    let broker = Broker::mock_with_partitions(P);
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    for round in 0..3u64 {
        generate_to(&broker, 40, 3_000, 350 + round);
        let before = recorded_so_far(&data);
        // A group of its own each time: the offsets are the shards', and the dead member of the last group is not
        // waited for (the mock cluster keeps it until its session expires).
        let log = work.path().join(format!("ingest-{round}.err"));
        let mut ingest = spawn_shard_ingest(&data, &broker.bootstrap, &format!("crash-{round}"), &log);
        let started = Instant::now();
        while recorded_so_far(&data) == before {
            assert!(ingest.try_wait().unwrap().is_none(), "ingest exited: {}", std::fs::read_to_string(&log).unwrap());
            assert!(started.elapsed() < Duration::from_secs(60), "ingest appended nothing within 60 s");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(50 + 70 * round));
        ingest.kill().expect("SIGKILL");
        ingest.wait().expect("reaped");
    }
    run_data(&data, &["ingest", "--brokers", &broker.bootstrap, "--until-caught-up"]).success();
    // Forwarded copies land at the end of partitions: a second run reads those the first ended before.
    run_data(&data, &["ingest", "--brokers", &broker.bootstrap, "--until-caught-up"]).success();
    assert_tenants_in_their_shards(&data);
    let single = work.path().join("single.db");
    run_ledger(&single, &["ingest", "--brokers", &broker.bootstrap, "--until-caught-up"]).success();
    let shards: Vec<PathBuf> = shard_files(&data).into_iter().map(|(_, file)| file).collect();
    assert_eq!(PerTenant::of(&shards), PerTenant::of(std::slice::from_ref(&single)));
    let single_status: Value = run_ledger(&single, &["status", "--json"]).success().json();
    assert_eq!(status_sum(&data, "quarantined"), count(&single_status, "quarantined"));
}
