//! `quarantine replay` records the quarantined messages that decode with the current catalog, under their
//! original coordinates, once; those that still fail stay quarantined with today's reason.

mod support;

use ledger::{Batch, Incoming, Ledger, Origin, Rejected};
use serde_json::{Value, json};
use support::*;

fn kafka(offset: i64) -> Origin {
    Origin::Kafka { topic: "quota.usage".into(), partition: 1, offset }
}

// A message quarantined by an older binary (its schema then unknown) is recorded by a replay; an exact copy of a recorded event replays as a duplicate; garbage stays; a second replay does nothing.
#[test]
fn replay_records_what_now_decodes_once() {
    let test = TestLedger::new();
    let catalog = schemas::Catalog::builtin();
    let fixed = usage("fixed-1", "2026-11-03T08:00:00Z", "org-7", 4);
    let recorded = usage("already-1", "2026-11-03T08:00:01Z", "org-7", 2);
    {
        let mut ledger = Ledger::open(&test.path).expect("a ledger");
        let unknown = schemas::DecodeError::UnknownFingerprint { fingerprint: 42 };
        let garbage = schemas::DecodeError::BadMagic { found: *b"no" };
        let batch = Batch {
            events: vec![Incoming { event: recorded.clone(), origin: kafka(10), raw: None }],
            rejected: vec![
                Rejected::new(kafka(11), catalog.encode_single_object(&fixed), &unknown),
                Rejected::new(kafka(12), catalog.encode_single_object(&recorded), &unknown),
                Rejected::new(kafka(13), b"not avro at all".to_vec(), &garbage),
            ],
            ..Batch::default()
        };
        ledger.append(&batch).expect("appended");
    }
    let report = test.run(&["quarantine", "replay", "--json"]).success().json();
    assert_eq!(
        (report["examined"].as_u64(), report["recorded"].as_u64(), report["duplicates"].as_u64()),
        (Some(3), Some(1), Some(1)),
        "{report}"
    );
    let still = report["still_quarantined"].as_array().expect("a list");
    assert_eq!(still.len(), 1, "{report}");
    assert_eq!(still[0]["reason_code"], "bad_magic");

    let status = Counts::of_status(&test.status());
    assert_eq!(
        (status.events_recorded, status.duplicates, status.quarantined),
        (2, 1, 3),
        "quarantine keeps its history"
    );
    // What an operator still has to look at, after the replay, is said without another replay: status counts
    // it, list says what became of each, and sql reads the replays.
    assert_eq!(test.status()["quarantine_pending"], 1, "only the bad magic");
    let replayed: Vec<Value> = test.quarantined().iter().map(|q| q["replayed"]["outcome"].clone()).collect();
    assert_eq!(replayed, vec![json!("recorded"), json!("duplicate"), Value::Null]);
    let words = test.run(&["quarantine", "list"]).success().stdout_text();
    assert!(words.contains("REPLAYED") && words.contains("duplicate (entry 1)"), "{words}");
    let sql = test.run(&["sql", "--format", "csv", "SELECT outcome FROM quarantine_replays ORDER BY quarantine_id"]);
    assert_eq!(sql.success().stdout_text(), "outcome\nrecorded\nduplicate\n");
    let entry = rusqlite::Connection::open(&test.path)
        .expect("the ledger")
        .query_row(
            "SELECT origin, origin_stream, origin_partition, origin_offset FROM entries WHERE event_id = 'fixed-1'",
            [],
            |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, i64>(2)?, r.get::<_, i64>(3)?)),
        )
        .expect("the replayed event is an entry");
    assert_eq!(
        entry,
        ("kafka".to_string(), "quota.usage".to_string(), 1, 11),
        "recorded under its original coordinates"
    );
    test.assert_verifies();

    let again = test.run(&["quarantine", "replay", "--json"]).success().json();
    assert_eq!((again["examined"].as_u64(), again["recorded"].as_u64()), (Some(1), Some(0)), "{again}");
    assert_eq!(Counts::of_status(&test.status()).events_recorded, 2);
}

// contract §2: a topic carries one record type. A message of another type on it, quarantined as wrong_type, stays so
// in a replay; a message from a topic the replay is not told the type of stays quarantined, until it is told
// (`--topics`, as given to ingest).
#[test]
fn replay_keeps_each_topic_to_its_record_type() {
    let test = TestLedger::new();
    let catalog = schemas::Catalog::builtin();
    let usage_event = usage("custom-1", "2026-11-03T08:00:00Z", "org-7", 4);
    let decision = sample_event(schemas::EventType::DecisionEvent, "d-1");
    {
        let mut ledger = Ledger::open(&test.path).expect("a ledger");
        let wrong = schemas::DecodeError::WrongType {
            expected: schemas::EventType::UsageEvent,
            found: schemas::EventType::DecisionEvent,
        };
        let unknown = schemas::DecodeError::UnknownFingerprint { fingerprint: 42 };
        let custom = Origin::Kafka { topic: "custom.usage".into(), partition: 0, offset: 5 };
        let batch = Batch {
            rejected: vec![
                Rejected::new(kafka(20), catalog.encode_single_object(&decision), &wrong),
                Rejected::new(custom, catalog.encode_single_object(&usage_event), &unknown),
            ],
            ..Batch::default()
        };
        ledger.append(&batch).expect("appended");
    }
    let report = test.run(&["quarantine", "replay", "--json"]).success().json();
    assert_eq!(report["recorded"].as_u64(), Some(0), "{report}");
    let codes: Vec<&str> =
        report["still_quarantined"].as_array().unwrap().iter().map(|s| s["reason_code"].as_str().unwrap()).collect();
    assert_eq!(codes, ["wrong_type", "unknown_topic"], "{report}");
    let told = test.run(&["quarantine", "replay", "--topics", "usage=custom.usage", "--json"]).success().json();
    assert_eq!(told["recorded"].as_u64(), Some(1), "{told}");
    assert_eq!(Counts::of_status(&test.status()).events_recorded, 1, "only the usage event, from its topic");
}

/// A ledger holding one good usage event, quarantined at `offset` as if its schema had been unknown.
fn with_one_quarantined(event_id: &str, offset: i64) -> TestLedger {
    let test = TestLedger::new();
    let catalog = schemas::Catalog::builtin();
    let fixed = usage(event_id, "2026-11-03T08:00:00Z", "org-7", 4);
    let mut ledger = Ledger::open(&test.path).expect("a ledger");
    let unknown = schemas::DecodeError::UnknownFingerprint { fingerprint: 42 };
    let rejected = vec![Rejected::new(kafka(offset), catalog.encode_single_object(&fixed), &unknown)];
    ledger.append(&Batch { rejected, ..Batch::default() }).expect("appended");
    test
}

// Proves that an id that is not in the quarantine is an error (exit 2) naming it, and that nothing of that call
// is replayed, not even its valid ids (all or nothing); the same valid id alone then replays.
#[test]
fn replay_of_an_unknown_id_fails_and_replays_nothing() {
    let test = with_one_quarantined("fixed-1", 11);
    let id = test.quarantined()[0]["id"].as_i64().expect("an id").to_string();
    let run = test.run(&["quarantine", "replay", "--id", &id, "--id", "999", "--id", "1000"]).expect_code(2);
    assert!(run.stdout.is_empty(), "nothing reported as replayed: {}", run.stdout_text());
    assert!(
        run.stderr.contains("no quarantined message has id 999, 1000") && run.stderr.contains("nothing replayed"),
        "stderr: {}",
        run.stderr
    );
    assert_eq!(Counts::of_status(&test.status()).events_recorded, 0, "the valid id was replayed anyway");

    let report = test.run(&["quarantine", "replay", "--id", &id, "--json"]).success().json();
    assert_eq!((report["examined"].as_u64(), report["recorded"].as_u64()), (Some(1), Some(1)), "{report}");
}

// One replay at a time: a second, while another runs, is refused at once naming it (two read the same messages, and
// the second's append was refused by quarantine_replays' append-only trigger in words that read like tampering).
#[test]
fn a_second_replay_is_refused_while_one_runs() {
    let test = with_one_quarantined("fixed-2", 12);
    let running = ledger::ProcessLock::acquire(&test.path, "replay").expect("the lock of a replay at work");
    let run = test.run(&["quarantine", "replay"]).expect_code(2);
    let holder = format!("another replay (pid {}) is writing to this ledger", std::process::id());
    assert!(run.stderr.contains(&holder), "stderr: {}", run.stderr);
    assert_eq!(Counts::of_status(&test.status()).events_recorded, 0);
    drop(running);
    assert_eq!(test.run(&["quarantine", "replay", "--json"]).success().json()["recorded"], 1);
}
