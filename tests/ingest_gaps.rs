//! Ingest cannot silently undercount (the trust issue, point 5): offsets the ledger never read stop ingest until an
//! operator accepts them as lost, and the ledger keeps that acceptance; two ledgers on the same brokers each read
//! every partition; a nightly ingest that was not given every partition says so instead of exiting 0. And what a
//! producer sends cannot make a batch unbounded: batches are bounded by bytes as well as by count.

mod support;

use std::time::Duration;

use kafka::producer::KafkaProducer;
use rdkafka::consumer::{BaseConsumer, Consumer};
use serde_json::Value;
use support::brokers::Broker;
use support::*;

/// Produces usage events `ids` of tenant `tenant` (one partition: the key decides) to quota.usage.
fn produce_usage(broker: &Broker, tenant: &str, ids: &[&str]) {
    let catalog = schemas::Catalog::builtin();
    let mut producer = KafkaProducer::new(&broker.bootstrap, &[]).expect("a producer");
    for id in ids {
        let event = usage(id, "2026-11-10T12:00:00Z", tenant, 5);
        producer.send("quota.usage", tenant, &catalog.encode_single_object(&event)).expect("send");
    }
    producer.finish().expect("every message acknowledged");
}

/// The (low, high) watermarks of a partition, as the brokers answer now.
fn watermarks(broker: &Broker, topic: &str, partition: i32) -> (i64, i64) {
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &broker.bootstrap)
        .set("group.id", "e2e-watermarks")
        .create()
        .expect("a consumer");
    consumer.fetch_watermarks(topic, partition, Duration::from_secs(10)).expect("the watermarks")
}

/// The partitions of `topic` the ledger stored an offset for, with it.
fn offsets_of(status: &Value, topic: &str) -> Vec<(i64, i64)> {
    let offsets = status["offsets"].as_array().expect("offsets");
    let of_topic = offsets.iter().filter(|o| o["topic"] == topic);
    of_topic.map(|o| (o["partition"].as_i64().unwrap(), o["next_offset"].as_i64().unwrap())).collect()
}

// Messages removed from a partition before ingest read them (librdkafka's mock cluster keeps 5 MiB per partition,
// as a broker's retention would): ingest stops, exit 2, naming topic, partition and the range; `--accept-gap` with
// that range records it, in the chain, and ingest goes on with what is left; `status` lists the gap and the billing
// export of the month names it in its last column, `gaps`. Were ingest to reset to the partition's new start
// (auto.offset.reset=earliest), it would exit 0 with the removed messages never counted and nothing said.
#[test]
fn offsets_removed_before_they_were_read_stop_ingest_until_accepted() {
    let broker = Broker::mock();
    let ledger = TestLedger::new();
    let ingest = ["ingest", "--brokers", &broker.bootstrap, "--until-caught-up"];
    produce_usage(&broker, "org-gap", &["g-1", "g-2", "g-3"]);
    ledger.run(&ingest).success();
    let [(partition, 3)] = offsets_of(&ledger.status(), "quota.usage")[..] else { panic!("{}", ledger.status()) };

    // 6.3 MB more on the partition: the broker drops its oldest batches, the ledger's next offset with them.
    let mut producer = KafkaProducer::new(&broker.bootstrap, &[]).expect("a producer");
    for n in 0..7u8 {
        producer.send("quota.usage", "org-gap", &vec![n; 900_000]).expect("send a large message");
    }
    producer.finish().expect("acknowledged");
    produce_usage(&broker, "org-gap", &["g-4", "g-5"]);
    let (low, high) = watermarks(&broker, "quota.usage", partition as i32);
    assert!(low > 3 && high == 12, "the broker removed offsets 3 and after: low {low}, high {high}");
    let gap = format!("quota.usage:{partition}:3-{}", low - 1);

    let stopped = ledger.run(&ingest).expect_code(2);
    let named = format!("quota.usage[{partition}] offsets 3 to {} were never read", low - 1);
    assert!(stopped.stderr.contains(&named), "stderr should say {named:?}: {}", stopped.stderr);
    assert!(stopped.stderr.contains(&format!("--accept-gap {gap}")), "{}", stopped.stderr);
    assert_eq!(count(&ledger.status(), "events_recorded"), 3, "nothing skipped, nothing recorded past the gap");

    let wrong = format!("quota.usage:{partition}:3-{}", low);
    let mut refusing = ingest.to_vec();
    refusing.extend(["--accept-gap", &wrong]);
    let refused = ledger.run(&refusing).expect_code(2);
    assert!(refused.stderr.contains(&format!("gap {wrong} not accepted")), "{}", refused.stderr);

    let mut accepting = ingest.to_vec();
    accepting.extend(["--accept-gap", &gap]);
    ledger.run(&accepting).success();
    let status = ledger.status();
    assert_eq!(count(&status, "events_recorded"), 5, "the two events after the gap: {status}");
    assert_eq!(count(&status, "quarantined"), 12 - low as u64 - 2, "the large messages left: {status}");
    assert_eq!(offsets_of(&status, "quota.usage"), [(partition, 12)]);
    let gaps = status["gaps"].as_array().expect("status lists gaps");
    assert_eq!(gaps.len(), 1, "{status}");
    assert_eq!((&gaps[0]["topic"], &gaps[0]["partition"]), (&Value::from("quota.usage"), &Value::from(partition)));
    assert_eq!((&gaps[0]["from_offset"], &gaps[0]["to_offset"]), (&Value::from(3), &Value::from(low - 1)));
    let table = ledger.run(&["status"]).success().stdout_text();
    assert!(table.contains(&format!("3-{}", low - 1)), "{table}");
    let query = "SELECT topic, partition, from_offset, to_offset FROM offset_gaps";
    let rows = ledger.run(&["sql", "--format", "json", query]).success().json();
    assert_eq!(
        rows,
        serde_json::json!([{"topic": "quota.usage", "partition": partition, "from_offset": 3, "to_offset": low - 1}])
    );
    ledger.assert_verifies();
    // November's bill may lack the messages never read: its export says which, in every format.
    let csv = ledger.run(&["export", "billing", "--period", "2026-11", "--format", "csv"]).success().stdout_text();
    let lines: Vec<&str> = csv.lines().collect();
    assert!(lines[0].ends_with(",late_adjustments,watermark,gaps,cycle_start,cycle_end,plan"), "{csv}");
    assert_eq!(lines[1].rsplit(',').nth(3), Some(gap.as_str()), "{csv}");
    assert!(lines[1].starts_with("org-gap,requests,2026-11,25,"), "{csv}");
    let jsonl = ledger.run(&["export", "billing", "--period", "2026-11", "--format", "jsonl"]).success().stdout_text();
    let row: Value = serde_json::from_str(jsonl.lines().next().expect("a row")).unwrap();
    assert_eq!(row["gaps"], Value::from(gap.as_str()), "{row}");
    // The same command again (a nightly job that kept the flag) changes nothing.
    ledger.run(&accepting).success();
    assert_eq!(ledger.status()["gaps"].as_array().unwrap().len(), 1);
}

// Two ledgers ingesting from the same brokers, neither given a group: each gets its own (derived from its id), so
// each reads every partition. Sharing one group, the second would take part of the partitions from the first, and
// each would hold part of the events while its ingest said it was caught up.
#[test]
fn two_ledgers_on_the_same_brokers_each_read_every_partition() {
    let broker = Broker::mock();
    let report = generate_to(&broker, 30, 600, 11);
    let first = TestLedger::new();
    let _running = first.spawn_ingest(&broker.bootstrap, &[]);
    let unique = count(&report, "unique_events");
    eventually(60, "the first ledger recorded every event", || {
        (Counts::of_status_or_zero(&first).events_recorded == unique).then_some(())
    });
    let second = TestLedger::new();
    second.run(&["ingest", "--brokers", &broker.bootstrap, "--until-caught-up"]).success();
    assert_eq!(count(&second.status(), "events_recorded"), unique, "the second ledger read every partition");
    let ids = [first.status()["ledger_id"].clone(), second.status()["ledger_id"].clone()];
    assert_ne!(ids[0], ids[1], "each ledger has its own id");
    for id in &ids {
        let id = id.as_str().expect("status --json has ledger_id");
        assert_eq!((id.len(), id.chars().filter(|c| *c == '-').count()), (36, 4), "a UUID: {id}");
    }
    assert_eq!(second.status()["ledger_id"], ids[1], "the id stays");
}

// A nightly ingest in a group whose other member holds some of the partitions: it reads all it is given, then
// exits 2 naming the partitions it was not given and how far behind the ledger is on them, rather than exit 0 once
// its own partitions are read, as if the ledger were complete.
#[test]
fn a_nightly_ingest_names_the_partitions_another_member_holds() {
    let broker = Broker::mock();
    let report = generate_to(&broker, 30, 600, 12);
    let other = TestLedger::new();
    let _member = other.spawn_ingest(&broker.bootstrap, &["--group", "shared"]);
    eventually(60, "the other member recorded what it holds", || {
        (Counts::of_status_or_zero(&other).events_recorded == count(&report, "unique_events")).then_some(())
    });
    let ledger = TestLedger::new();
    let args = ["ingest", "--brokers", &broker.bootstrap, "--group", "shared", "--until-caught-up"];
    let stopped = ledger.run(&args).expect_code(2);
    assert!(stopped.stderr.contains("group shared assigned them to other members"), "{}", stopped.stderr);
    let status = ledger.status();
    let read: Vec<String> = status["offsets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| format!("{}[{}]", o["topic"].as_str().unwrap(), o["partition"]))
        .collect();
    let named = stopped.stderr.split("the ledger did not reach the end of ").nth(1).unwrap_or_default();
    assert!(named.contains("(next offset 0, end "), "names partitions never read: {}", stopped.stderr);
    for partition in &read {
        assert!(!named.contains(&format!("{partition} (next offset")), "{partition} was read: {}", stopped.stderr);
    }
}

/// Each append's quarantined and recorded messages, from the `batches` table's running counts.
fn per_batch(ledger: &TestLedger) -> Vec<(u64, u64)> {
    let query = "SELECT quarantined_total, events_recorded_total FROM batches ORDER BY id";
    let rows = ledger.run(&["sql", "--format", "json", query]).success().json();
    let totals: Vec<(u64, u64)> = rows
        .as_array()
        .expect("rows")
        .iter()
        .map(|b| (count(b, "quarantined_total"), count(b, "events_recorded_total")))
        .collect();
    let before = std::iter::once((0, 0)).chain(totals.iter().copied());
    totals.iter().zip(before).map(|(after, before)| (after.0 - before.0, after.1 - before.1)).collect()
}

// Proves that a batch is bounded by bytes as well as by count: twelve messages of 300 KB (garbage, quarantined with
// their bytes) and three usage events read with `--batch-max-bytes 1000000` are appended four large messages at most
// at a time (1 MB, plus the message that passes it), each recorded once; a file's records too. Bounded by count
// alone, 5,000 messages near Kafka's 1 MB limit would hold gigabytes in memory before their append.
#[test]
fn batches_are_bounded_by_bytes() {
    let broker = Broker::mock();
    let ledger = TestLedger::new();
    let mut producer = KafkaProducer::new(&broker.bootstrap, &[]).expect("a producer");
    for n in 0..12u8 {
        producer.send("quota.usage", "org-big", &vec![n; 300_000]).expect("send a large message");
    }
    producer.finish().expect("acknowledged");
    produce_usage(&broker, "org-big", &["b-1", "b-2", "b-3"]);
    let ingest = ["ingest", "--brokers", &broker.bootstrap, "--until-caught-up", "--batch-max-bytes", "1000000"];
    ledger.run(&ingest).success();
    let status = ledger.status();
    assert_eq!((count(&status, "quarantined"), count(&status, "events_recorded")), (12, 3), "{status}");
    let batches = per_batch(&ledger);
    assert!(batches.len() >= 3, "{batches:?}");
    assert!(
        batches.iter().all(|(quarantined, _)| *quarantined <= 4),
        "a batch past 1 MB plus one message: {batches:?}"
    );

    let file = TestLedger::new();
    let events: Vec<_> = (0..60).map(|n| usage(&format!("f-{n}"), "2026-11-10T12:00:00Z", "org-file", 1)).collect();
    write_container(&file.file("usage.avro"), &events);
    let path = file.file("usage.avro");
    let args = ["ingest", "--file", path.to_str().unwrap(), "--batch-max-bytes", "1000"];
    file.run(&args).success();
    assert_eq!(count(&file.status(), "events_recorded"), 60);
    let batches = per_batch(&file);
    // Records of about 48 bytes each (Avro binary), so about 21 per batch of 1,000 bytes.
    assert!(batches.len() >= 3, "60 records of about 48 bytes in batches of about 1,000 bytes: {batches:?}");
    assert_eq!(batches.iter().map(|(_, recorded)| recorded).sum::<u64>(), 60);
}
