//! Kafka ingest end to end: the real binary against librdkafka's mock cluster and against Tansu, a real
//! Kafka-compatible broker process: exactly what was produced is recorded, once; poison messages are
//! quarantined with their coordinates; one ingest per ledger.

mod support;

use std::time::{Duration, Instant};

use kafka::producer::KafkaProducer;
use rdkafka::types::RDKafkaApiKey;
use serde_json::Value;
use support::brokers::{Broker, TrackedMock, records_on};
use support::*;

fn ingest_until_caught_up(ledger: &TestLedger, broker: &Broker) -> Value {
    ledger.run(&["ingest", "--brokers", &broker.bootstrap, "--until-caught-up", "--json"]).success().json()
}

/// The ledger holds exactly what `generate` reported producing.
fn assert_ledger_matches(ledger: &TestLedger, report: &Value) {
    let status = ledger.status();
    let counts = Counts::of_status(&status);
    assert_eq!(counts.events_recorded, count(report, "unique_events"), "events recorded; status {status}");
    assert_eq!(counts.duplicates, count(report, "duplicates"), "duplicates; status {status}");
    assert_eq!(counts.conflicts, count(report, "conflicts"), "conflicts; status {status}");
    assert_eq!(counts.quarantined, count(report, "malformed"), "quarantined; status {status}");
    let offsets: u64 = status["offsets"].as_array().expect("offsets").iter().map(|o| count(o, "next_offset")).sum();
    assert_eq!(offsets, count(report, "messages"), "the stored offsets cover every message; status {status}");
    ledger.assert_verifies();
}

// A generated month through the embedded broker: the ledger equals the generator's report; a second run adds nothing.
#[test]
fn mock_broker_ingest_records_exactly_what_generate_produced() {
    let broker = Broker::mock();
    let ledger = TestLedger::new();
    let report = generate_to(&broker, 30, 6_000, 7);
    ingest_until_caught_up(&ledger, &broker);
    assert_ledger_matches(&ledger, &report);
    let again = ingest_until_caught_up(&ledger, &broker);
    assert_eq!(count(&again, "messages"), 0, "a caught-up ledger reads nothing again: {again}");
    assert_ledger_matches(&ledger, &report);
}

// The same against Tansu, a real broker process.
#[test]
fn real_broker_ingest_records_exactly_what_generate_produced() {
    let Some(broker) = Broker::tansu("memory://tansu/", None) else { return };
    let ledger = TestLedger::new();
    let report = generate_to(&broker, 30, 6_000, 8);
    ingest_until_caught_up(&ledger, &broker);
    assert_ledger_matches(&ledger, &report);
}

/// Sends, on each input topic and all under one key (one partition, in order): a good event, garbage, an event
/// of another type, a truncated good event, a good event. Returns the good events' ids.
fn produce_poison(broker: &Broker) -> Vec<String> {
    let catalog = schemas::Catalog::builtin();
    let mut producer = KafkaProducer::new(&broker.bootstrap, &[]).expect("a producer");
    let mut good_ids = Vec::new();
    let topics = ["quota.usage", "quota.decisions", "quota.reservations", "quota.grants", "quota.policies"];
    for (index, topic) in topics.iter().enumerate() {
        let event_type = kafka::topics::Topics::defaults().event_type(topic).expect("a default topic");
        let good = |n: u32| sample_event(event_type, &format!("poison-{index}-{n}"));
        let other_type = if event_type == schemas::EventType::UsageEvent {
            sample_event(schemas::EventType::GrantEvent, &format!("poison-{index}-other"))
        } else {
            sample_event(schemas::EventType::UsageEvent, &format!("poison-{index}-other"))
        };
        let mut truncated = catalog.encode_single_object(&good(9));
        truncated.truncate(truncated.len() - 2);
        let messages = [
            catalog.encode_single_object(&good(1)),
            b"not avro at all".to_vec(),
            catalog.encode_single_object(&other_type),
            truncated,
            catalog.encode_single_object(&good(2)),
        ];
        for bytes in &messages {
            producer.send(topic, "org-poison", bytes).expect("send");
        }
        good_ids.extend([good(1).event_id().to_string(), good(2).event_id().to_string()]);
    }
    producer.finish().expect("every message acknowledged");
    good_ids
}

fn check_poison(broker: &Broker) {
    let ledger = TestLedger::new();
    let good_ids = produce_poison(broker);
    ingest_until_caught_up(&ledger, broker);
    let counts = Counts::of_status(&ledger.status());
    assert_eq!((counts.events_recorded, counts.quarantined), (10, 15), "{} broker: {counts:?}", broker.kind);
    let quarantined = ledger.quarantined();
    for topic in ["quota.usage", "quota.decisions", "quota.reservations", "quota.grants", "quota.policies"] {
        let mut found: Vec<(i64, String)> = quarantined
            .iter()
            .filter(|q| q["topic"] == topic)
            .map(|q| (q["offset"].as_i64().expect("an offset"), q["reason_code"].as_str().expect("a code").to_string()))
            .collect();
        found.sort();
        let partitions: Vec<&Value> =
            quarantined.iter().filter(|q| q["topic"] == topic).map(|q| &q["partition"]).collect();
        assert!(partitions.windows(2).all(|w| w[0] == w[1]), "one key, one partition: {partitions:?}");
        let expected = [(1, "bad_magic"), (2, "wrong_type"), (3, "truncated")].map(|(o, c)| (o, c.to_string()));
        assert_eq!(found, expected, "{} broker, topic {topic}", broker.kind);
    }
    let recorded = ledger.run(&["status", "--json"]).success().json();
    assert_eq!(count(&recorded, "events_recorded"), good_ids.len() as u64);
    ledger.assert_verifies();
}

// Garbage, a wrong record type and a truncated body on every topic are quarantined with topic, partition, offset and reason; the events around them are recorded.
#[test]
fn poison_messages_are_quarantined_and_their_neighbours_recorded() {
    check_poison(&Broker::mock());
    if let Some(broker) = Broker::tansu("memory://tansu/", None) {
        check_poison(&broker);
    }
}

// Two ingest processes sharing a ledger: the second is refused at once, naming the first; after the first stops, the second takes over.
#[test]
fn a_second_ingest_on_the_same_ledger_is_refused() {
    let broker = Broker::mock();
    let ledger = TestLedger::new();
    let report = generate_to(&broker, 5, 500, 3);
    let mut first = ledger.spawn_ingest(&broker.bootstrap, &[]);
    let lock = ledger.file("ledger.db.ingest.lock");
    let started = Instant::now();
    while !std::fs::read_to_string(&lock).unwrap_or_default().starts_with("pid") {
        assert!(started.elapsed() < Duration::from_secs(30), "the first ingest never took the lock");
        std::thread::sleep(Duration::from_millis(50));
    }
    let second = ledger.run(&["ingest", "--brokers", &broker.bootstrap, "--until-caught-up"]).expect_code(2);
    assert!(second.stderr.contains("another ingest (pid"), "the refusal names the holder: {}", second.stderr);
    // SAFETY: kill(2) on a child this test started.
    unsafe { libc::kill(first.id() as i32, libc::SIGTERM) };
    let status = first.wait().expect("the first ingest exits");
    let stderr = std::fs::read_to_string(ledger.file("ingest.err")).unwrap_or_default();
    assert!(status.success(), "SIGTERM stops ingest cleanly: {status}, stderr {stderr}");
    ingest_until_caught_up(&ledger, &broker);
    assert_ledger_matches(&ledger, &report);
}

// For the on-call engineer: ingest on a broker that lacks some of its topics (Tansu does not create them) stops
// naming exactly those, with the command that creates them, where librdkafka says only "Unknown topic or partition".
#[test]
fn ingest_names_the_topics_the_broker_lacks() {
    let Some(broker) = Broker::tansu_with_only(&["quota.usage", "quota.policies"]) else { return };
    let ledger = TestLedger::new();
    let refused = ledger.run(&["ingest", "--brokers", &broker.bootstrap, "--until-caught-up"]).expect_code(2);
    let named = format!(
        "quota.alerts, quota.decisions, quota.grants, quota.reservations do not exist on {0} \
         (`quota-ledger topics create --brokers {0}` creates them; with `--topics KIND=TOPIC,...` under other names)",
        broker.bootstrap
    );
    assert!(refused.stderr.contains(&named), "stderr should say {named:?}: {}", refused.stderr);
    // What the hint says works, for topics under other names too; those the broker has are left as they are.
    let created = ledger
        .run(&["topics", "create", "--brokers", &broker.bootstrap, "--topics", "usage=quota.usage,grants=team.grants"])
        .success()
        .stdout_text();
    let mut lines: Vec<&str> = created.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "quota.adjustments  created",
            "quota.checkpoints  created",
            "quota.routing  created",
            "quota.usage  exists",
            "team.grants  created"
        ],
        "{created}"
    );
    let topics = "usage=quota.usage,grants=team.grants";
    // A group of its own: on Tansu the group of the ingest that stopped above assigned nothing for a minute.
    let args =
        ["ingest", "--brokers", &broker.bootstrap, "--topics", topics, "--group", "renamed", "--until-caught-up"];
    ledger.run(&args).success();
}

// A broker that has every topic already (the embedded mock cluster has them from the start) is not asked to create
// any: asked, the mock would leave `topics create` waiting a minute for its answer, then failing with "Timed out".
#[test]
fn topics_create_on_a_broker_that_has_them_asks_nothing() {
    let broker = Broker::mock();
    let ledger = TestLedger::new();
    let said = ledger.run(&["topics", "create", "--brokers", &broker.bootstrap]).success().stdout_text();
    assert_eq!(said.lines().count(), 9, "the seven of contract §2, quota.checkpoints and quota.routing: {said}");
    assert!(said.lines().all(|l| l.ends_with("  exists")), "{said}");
}

// A test that panics while its ingest runs leaves no ingest behind: `spawn_ingest`'s guard kills and reaps it as
// the panic unwinds. A plain `Child` is neither killed nor waited for when dropped: with one, the ingest would run
// on after the test failed, holding its ledger, its lock and a member of its consumer group.
#[test]
fn a_test_that_panics_leaves_no_ingest_running() {
    let ledger = TestLedger::new();
    let pid = std::sync::Mutex::new(None);
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // Nothing listens on the discard port: a running ingest waits for its brokers as long as it takes.
        let ingest = ledger.spawn_ingest("127.0.0.1:9", &[]);
        *pid.lock().unwrap() = Some(ingest.id() as i32);
        let lock = ledger.file("ledger.db.ingest.lock");
        eventually(30, "ingest took its lock", || {
            std::fs::read_to_string(&lock).unwrap_or_default().starts_with("pid").then_some(())
        });
        panic!("this test panics here on purpose, with ingest running");
    }));
    assert!(unwound.is_err(), "the closure panicked");
    let pid = pid.lock().unwrap().expect("ingest started");
    // SAFETY: signal 0 only asks whether the process exists (a zombie, not yet reaped, still does).
    let alive = unsafe { libc::kill(pid, 0) } == 0;
    if alive {
        // SAFETY: kill(2) and waitpid(2) on a child this test started, so that a failure leaves nothing either.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
    }
    assert!(!alive, "ingest (pid {pid}) outlived the test that panicked");
}

/// Waits until the ledger holds `events` events (60 s at most).
fn wait_recorded(ledger: &TestLedger, events: u64, what: &str) {
    eventually(60, what, || (Counts::of_status_or_zero(ledger).events_recorded >= events).then_some(()));
}

// For the on-call engineer: a running ingest rides out a restart of its broker (librdkafka reconnects) rather than
// stop with "All broker connections are down"; what was produced on either side of the outage is recorded, each
// event once, and stderr says why it waited and when the broker was back.
#[test]
fn a_running_ingest_rides_out_a_broker_restart() {
    let data = tempfile::tempdir().unwrap();
    let Some(broker) = Broker::tansu_sqlite(&data.path().join("tansu.db"), None) else { return };
    let (port, bootstrap) = (broker.port(), broker.bootstrap.clone());
    let ledger = TestLedger::new();
    let before = generate_to(&broker, 5, 500, 21);
    let mut ingest = ledger.spawn_ingest(&bootstrap, &[]);
    wait_recorded(&ledger, count(&before, "unique_events"), "ingest recorded what came before the outage");
    drop(broker);
    let stderr = || std::fs::read_to_string(ledger.file("ingest.err")).unwrap_or_default();
    let waiting = |stderr: &str| said(stderr, "ingest: waiting for the brokers", &format!("brokers={bootstrap}"));
    eventually(60, "ingest said it waits for the brokers", || waiting(&stderr()).then_some(()));
    assert!(ingest.try_wait().expect("ingest's status").is_none(), "ingest still runs while the broker is away");
    let broker = Broker::tansu_sqlite(&data.path().join("tansu.db"), Some(port)).expect("Tansu restarts");
    let after = generate_to(&broker, 5, 500, 22);
    let total = count(&before, "unique_events") + count(&after, "unique_events");
    wait_recorded(&ledger, total, "ingest recorded what came after the outage");
    // SAFETY: kill(2) on a child this test started.
    unsafe { libc::kill(ingest.id() as i32, libc::SIGTERM) };
    assert!(ingest.wait().expect("ingest exits").success(), "SIGTERM stops ingest cleanly");
    let counts = Counts::of_status(&ledger.status());
    assert_eq!(counts.events_recorded, total, "each event once");
    assert_eq!(counts.duplicates, count(&before, "duplicates") + count(&after, "duplicates"));
    ledger.assert_verifies();
    let stderr = std::fs::read_to_string(ledger.file("ingest.err")).expect("ingest's stderr");
    assert!(waiting(&stderr), "{stderr}");
    assert!(said(&stderr, "ingest: the brokers answer again", &format!("brokers={bootstrap}")), "{stderr}");
}

// For the on-call engineer: an append that outlasts `max.poll.interval.ms` (here another writer holds the ledger
// against an interval of 3 s) makes librdkafka leave the group. Ingest does not stop there with "Kafka consumer
// failed": it says why, rejoins, and records what was produced before, during and after the stall, each event once.
#[test]
fn an_append_that_outlasts_the_poll_interval_rejoins_the_group() {
    let broker = TrackedMock::start();
    let ledger = TestLedger::new();
    let before = generate_into(&broker.bootstrap, 5, 500, 31);
    let overrides = ["max.poll.interval.ms=3000", "session.timeout.ms=3000", "heartbeat.interval.ms=500"];
    let args: Vec<&str> = overrides.iter().flat_map(|o| ["-X", *o]).collect();
    let mut ingest = ledger.spawn_ingest(&broker.bootstrap, &args);
    wait_recorded(&ledger, count(&before, "unique_events"), "ingest recorded what came before the stall");
    let writer = rusqlite::Connection::open(&ledger.path).expect("the ledger opens");
    writer.execute_batch("BEGIN IMMEDIATE").expect("another writer takes the ledger");
    let left = || broker.requests(RDKafkaApiKey::LeaveGroup);
    assert_eq!(left(), 0, "ingest's consumer is in its group before the stall");
    let during = generate_into(&broker.bootstrap, 5, 500, 32);
    // Held until librdkafka, its poll interval outlasted by the append that waits for the ledger, has left the group:
    // the broker received its LeaveGroup (librdkafka's own line saying so waits for ingest's next poll). Before the
    // ledger's busy timeout, after which the append would give up.
    let busy_secs = ledger::BUSY_TIMEOUT_MS / 1_000;
    eventually(busy_secs, "ingest's consumer left its group while its append waited for the ledger", || {
        (left() > 0).then_some(())
    });
    writer.execute_batch("COMMIT").expect("the other writer lets go");
    drop(writer);
    let after = generate_into(&broker.bootstrap, 5, 500, 33);
    let reports = [&before, &during, &after];
    let total: u64 = reports.iter().map(|r| count(r, "unique_events")).sum();
    let stderr = || std::fs::read_to_string(ledger.file("ingest.err")).expect("ingest's stderr");
    eventually(60, "ingest recorded what came during and after the stall", || {
        assert!(ingest.try_wait().expect("ingest's status").is_none(), "ingest stopped: {}", stderr());
        (Counts::of_status(&ledger.status()).events_recorded >= total).then_some(())
    });
    // SAFETY: kill(2) on a child this test started.
    unsafe { libc::kill(ingest.id() as i32, libc::SIGTERM) };
    assert!(ingest.wait().expect("ingest exits").success(), "SIGTERM stops ingest cleanly: {}", stderr());
    let counts = Counts::of_status(&ledger.status());
    assert_eq!(counts.events_recorded, total, "each event once");
    assert_eq!(counts.duplicates, reports.iter().map(|r| count(r, "duplicates")).sum::<u64>());
    ledger.assert_verifies();
    assert!(stderr().contains("longer than max.poll.interval.ms, so it left the group"), "{}", stderr());
}

// For the nightly job: `--until-caught-up` started while its broker is away waits for it (a minute at most), then
// catches up and exits 0, rather than failing at the first refused connection.
#[test]
fn a_nightly_ingest_waits_for_its_broker() {
    let data = tempfile::tempdir().unwrap();
    let Some(broker) = Broker::tansu_sqlite(&data.path().join("tansu.db"), None) else { return };
    let (port, bootstrap) = (broker.port(), broker.bootstrap.clone());
    let report = generate_to(&broker, 5, 500, 23);
    drop(broker);
    let ledger = TestLedger::new();
    let mut ingest = ledger.spawn_ingest(&bootstrap, &["--until-caught-up"]);
    let stderr = || std::fs::read_to_string(ledger.file("ingest.err")).unwrap_or_default();
    let waiting = |stderr: &str| said(stderr, "ingest: waiting for the brokers", &format!("brokers={bootstrap}"));
    eventually(60, "ingest said it waits for the brokers", || waiting(&stderr()).then_some(()));
    assert!(ingest.try_wait().expect("ingest's status").is_none(), "ingest waits while the broker is away");
    let _broker = Broker::tansu_sqlite(&data.path().join("tansu.db"), Some(port)).expect("Tansu restarts");
    let status =
        eventually(90, "ingest caught up after the broker came back", || ingest.try_wait().expect("ingest's status"));
    let stderr = std::fs::read_to_string(ledger.file("ingest.err")).expect("ingest's stderr");
    assert!(status.success(), "ingest caught up once the broker was back: {stderr}");
    assert!(waiting(&stderr), "{stderr}");
    assert_ledger_matches(&ledger, &report);
}

// For the nightly job: `--until-caught-up` against producers that never pause exits once it holds what the topics
// held when it first asked; what arrives after is the next run's. Waiting for a lag of 0 against the current high
// watermark instead would never end while producers work, as the consumer would never go idle to ask.
#[test]
fn a_nightly_ingest_ends_while_producers_keep_producing() {
    let broker = Broker::mock();
    let ledger = TestLedger::new();
    let before = generate_to(&broker, 5, 1_000, 31);
    let generated_on_usage = records_on(&broker.bootstrap, "quota.usage");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producing = std::thread::spawn({
        let (bootstrap, stop) = (broker.bootstrap.clone(), stop.clone());
        move || {
            let catalog = schemas::Catalog::builtin();
            let mut producer = KafkaProducer::new(&bootstrap, &[]).expect("a producer");
            let mut sent = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let event = sample_event(schemas::EventType::UsageEvent, &format!("live-{sent}"));
                producer.send("quota.usage", "org-live", &catalog.encode_single_object(&event)).expect("send");
                sent += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            producer.finish().expect("every message acknowledged");
            sent
        }
    });
    // Ingest starts once the producer's messages are on the topic: the end it first asks for holds some of them.
    eventually(30, "the producer's first messages reached quota.usage", || {
        (records_on(&broker.bootstrap, "quota.usage") > generated_on_usage).then_some(())
    });
    let mut ingest = ledger.spawn_ingest(&broker.bootstrap, &["--until-caught-up"]);
    let started = Instant::now();
    let status = loop {
        if let Some(status) = ingest.try_wait().expect("ingest's status") {
            break status;
        }
        assert!(started.elapsed() < Duration::from_secs(90), "ingest --until-caught-up still runs after 90 s");
        std::thread::sleep(Duration::from_millis(100));
    };
    let stderr = std::fs::read_to_string(ledger.file("ingest.err")).expect("ingest's stderr");
    assert!(status.success(), "{status}: {stderr}");
    assert!(!producing.is_finished(), "the producer was still at work when ingest exited");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let sent = producing.join().expect("the producer thread");
    let recorded = Counts::of_status(&ledger.status()).events_recorded;
    let generated = count(&before, "unique_events");
    assert!(recorded > generated && recorded < generated + sent, "{recorded} recorded, {generated} + {sent} produced");
    ledger.assert_verifies();
}

// `generate --out` writes one container file per record type; ingesting them all gives exactly the report's counts.
#[test]
fn generated_container_files_ingest_to_the_reported_counts() {
    let ledger = TestLedger::new();
    let out = ledger.file("generated");
    let out_arg = out.to_str().expect("UTF-8");
    let report = run(&["generate", "--tenants", "12", "--events", "3000", "--seed", "5", "--out", out_arg], b"")
        .success()
        .json();
    let mut files: Vec<_> =
        std::fs::read_dir(&out).expect("the output directory").map(|e| e.expect("an entry").path()).collect();
    files.sort();
    assert!(files.len() >= 4, "one file per record type generated: {files:?}");
    for file in &files {
        ledger.ingest(file);
    }
    let counts = Counts::of_status(&ledger.status());
    assert_eq!(counts.events_recorded, count(&report, "unique_events"));
    assert_eq!(counts.duplicates, count(&report, "duplicates"));
    assert_eq!(counts.conflicts, count(&report, "conflicts"));
    assert_eq!(counts.quarantined, count(&report, "malformed"));
    ledger.assert_verifies();
}
