// Proves that `quota-ledger ingest --file` records, deduplicates and quarantines container files as contract §4 says.

mod support;

use std::path::{Path, PathBuf};

use schemas::*;
use serde_json::Value;
use support::*;

/// The usage file of the main test, by index: 0..=2 good, 3 an exact duplicate of u-1, 4 a conflicting duplicate
/// of u-2 (another quantity), 5 a negative quantity, 6 an empty tenant, 7 a timestamp past 2100, 8 good.
fn mixed_usage_file() -> Vec<Event> {
    vec![
        usage("u-1", "2026-11-01T10:00:00Z", "org-1", 10),
        usage("u-2", "2026-11-02T11:00:00Z", "org-1", 20),
        usage("u-3", "2026-11-03T12:00:00Z", "org-2", 30),
        usage("u-1", "2026-11-01T10:00:00Z", "org-1", 10),
        usage("u-2", "2026-11-02T11:00:00Z", "org-1", 21),
        usage("u-negative", "2026-11-04T09:00:00Z", "org-2", -5),
        usage("u-empty-tenant", "2026-11-04T10:00:00Z", "", 1),
        usage("u-far-future", "2200-01-01T00:00:00Z", "org-2", 1),
        usage("u-4", "2026-11-05T13:00:00Z", "org-3", 40),
    ]
}

fn path_text(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 temporary path")
}

// Proves exact counts, quarantine entries and a holding chain for a mixed file, and that re-ingesting it adds no event.
#[test]
fn usage_file_is_recorded_deduplicated_and_quarantined() {
    let ledger = TestLedger::new();
    let file = ledger.file("usage.avro");
    write_container(&file, &mixed_usage_file());

    let report = ledger.ingest(&file);
    assert_eq!(report["file"], path_text(&file));
    assert_eq!(report["record_type"], "UsageEvent");
    assert_eq!(report["writer_fingerprint"], current_fingerprint(EventType::UsageEvent));
    for (key, expected) in [("records", 9), ("recorded", 4), ("duplicates", 1), ("conflicts", 1), ("quarantined", 3)] {
        assert_eq!(report[key], expected, "ingest report {key}: {report}");
    }
    // Four recorded entries and the conflicting duplicate, kept for audit as an entry of its own.
    assert_eq!(report["watermark"], 5);

    let first = Counts { events_recorded: 4, duplicates: 1, conflicts: 1, quarantined: 3, watermark: 5 };
    assert_eq!(Counts::of_status(&ledger.status()), first);
    ledger.assert_verifies();
    assert_quarantine(&ledger.quarantined(), &file);

    // The same file again (a rerun after a crash, say): the ledger knows how far the last ingest of this file got,
    // and nothing of it is read into the ledger again (read again, every record would count as a duplicate).
    let again = ledger.ingest(&file);
    let expected = [("records", 0), ("resumed_after", 9), ("recorded", 0), ("duplicates", 0), ("quarantined", 0)];
    for (key, expected) in expected {
        assert_eq!(again[key], expected, "second ingest report {key}: {again}");
    }
    assert_eq!(again["watermark"], 5, "{again}");
    assert_eq!(Counts::of_status(&ledger.status()), first);

    // The same records in a file written again (repaired, or exported again: another sync marker) are read whole:
    // every decodable record is now a duplicate (the conflicting copy duplicates the entry it became), nothing new
    // is recorded, and the invalid records are the messages the quarantine holds already, the same bytes from the
    // same place: not quarantined twice, or `quarantine list` would show each bad record once per ingest.
    write_container_marked(&file, &mixed_usage_file(), *b"written-again-16");
    let rewritten = ledger.ingest(&file);
    let expected = [("records", 9), ("recorded", 0), ("duplicates", 6), ("quarantined", 0), ("already_quarantined", 3)];
    for (key, expected) in expected {
        assert_eq!(rewritten[key], expected, "ingest report of the file written again, {key}: {rewritten}");
    }
    let second = Counts { duplicates: 7, ..first };
    assert_eq!(Counts::of_status(&ledger.status()), second);
    assert_quarantine(&ledger.quarantined(), &file);
    ledger.assert_verifies();
    write_container_marked(&file, &mixed_usage_file(), *b"written-3rd-time");
    let words = ledger.run(&["ingest", "--file", file.to_str().unwrap()]).success().stdout_text();
    assert!(words.contains("0 quarantined (3 more quarantined already, by an earlier ingest of this file)"), "{words}");
}

// A backfill killed halfway (SIGKILL, no shutdown of any kind) and run again resumes after the last batch it
// committed: each batch records how far into the file it reaches in its own transaction. Nothing is appended twice
// (no duplicate), nothing is missed.
#[test]
fn a_killed_file_ingest_resumes_after_its_last_committed_batch() {
    let ledger = TestLedger::new();
    let file = ledger.file("backfill.avro");
    let total: u64 = 40_000;
    let events: Vec<Event> =
        (0..total).map(|i| usage(&format!("u-{i}"), "2026-11-01T10:00:00Z", &format!("org-{}", i % 7), 1)).collect();
    write_container(&file, &events);
    let mut first = ChildGuard::new(
        std::process::Command::new(BIN)
            .args([
                "--ledger",
                path_text(&ledger.path),
                "ingest",
                "--file",
                path_text(&file),
                "--batch-max-events",
                "20",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("ingest starts"),
    );
    let watermark = || {
        let open = ledger::Ledger::open_read_only(&ledger.path).ok()?;
        open.watermark().ok().filter(|w| *w > 0)
    };
    eventually(60, "the first batches committed", watermark);
    unsafe { libc::kill(first.id() as i32, libc::SIGKILL) };
    first.wait().expect("the killed ingest is reaped");
    let recorded_before = watermark().expect("batches committed before the kill");
    assert!(recorded_before < total, "the kill came before the end: {recorded_before} of {total} recorded");

    let rerun = ledger.ingest(&file);
    assert_eq!(rerun["resumed_after"], recorded_before, "{rerun}");
    assert_eq!(rerun["records"], total - recorded_before, "{rerun}");
    assert_eq!(rerun["recorded"], total - recorded_before, "{rerun}");
    assert_eq!(rerun["duplicates"], 0, "{rerun}");
    let expected = Counts { events_recorded: total, duplicates: 0, conflicts: 0, quarantined: 0, watermark: total };
    assert_eq!(Counts::of_status(&ledger.status()), expected);
    ledger.assert_verifies();
}

// A file that grew (records appended to it, as Avro writers can: the same sync marker) resumes after what an
// earlier ingest appended; another file that carries the same marker but other records is not trusted: it is read
// whole, and the operator is told why.
#[test]
fn a_file_is_resumed_only_where_it_begins_with_what_was_appended() {
    let ledger = TestLedger::new();
    let file = ledger.file("usage.avro");
    let marker = *b"one-marker-16-by";
    let usage_of = |i: u32| usage(&format!("u-{i}"), "2026-11-01T10:00:00Z", "org-1", 1);
    write_container_marked(&file, &(0..300).map(usage_of).collect::<Vec<_>>(), marker);
    assert_eq!(ledger.ingest(&file)["recorded"], 300);

    write_container_marked(&file, &(0..500).map(usage_of).collect::<Vec<_>>(), marker);
    let grown = ledger.ingest(&file);
    for (key, expected) in [("resumed_after", 300), ("records", 200), ("recorded", 200), ("duplicates", 0)] {
        assert_eq!(grown[key], expected, "{key}: {grown}");
    }
    assert!(grown.get("resume_refused").is_none(), "{grown}");

    // Other records under the same marker: the first 500 differ from what was appended.
    let other = ledger.file("other.avro");
    let others: Vec<Event> =
        (0..600).map(|i| usage(&format!("other-{i}"), "2026-11-02T10:00:00Z", "org-2", 2)).collect();
    write_container_marked(&other, &others, marker);
    // In batches of 100: its first batches reach less far than the progress the marker held (500), which they
    // replace.
    let run = ledger.run(&["ingest", "--file", path_text(&other), "--batch-max-events", "100", "--json"]).success();
    let whole = run.json();
    for (key, expected) in [("resumed_after", 0), ("records", 600), ("recorded", 600), ("duplicates", 0)] {
        assert_eq!(whole[key], expected, "{key}: {whole}");
    }
    let refused = whole["resume_refused"].as_str().expect("the report says why it read the file whole");
    assert!(
        refused.contains("appended its first 500 records") && refused.contains("begins with other records"),
        "{refused}"
    );
    let stderr = &run.stderr;
    assert!(stderr.contains("warning:") && stderr.contains("it was ingested whole"), "{stderr}");
    assert_eq!(Counts::of_status(&ledger.status()).events_recorded, 1_100);
    // What an operator reads of it: the marker's progress, now that file's.
    let progress = ledger
        .run(&["sql", "--format", "csv", "SELECT sync_marker, records, path FROM file_progress"])
        .success()
        .stdout_text();
    let expected = format!("sync_marker,records,path\n{},600,{}\n", hex(&marker), path_text(&other));
    assert_eq!(progress, expected);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The three invalid records of `mixed_usage_file`, each with its reason code, the file as topic and its index in
/// the file as offset, and its bytes kept as received.
fn assert_quarantine(quarantined: &[Value], file: &Path) {
    let expected =
        [(5, "negative_quantity", "-5"), (6, "empty_tenant", "tenant"), (7, "timestamp_out_of_range", "2200")];
    assert_eq!(quarantined.len(), expected.len(), "quarantine list --json: {quarantined:?}");
    for (message, (offset, reason_code, quoted)) in quarantined.iter().zip(expected) {
        assert_eq!(message["reason_code"], reason_code, "{message}");
        assert_eq!(message["topic"], path_text(file), "{message}");
        assert_eq!(message["offset"], offset, "{message}");
        assert_eq!(message["origin"], "file", "{message}");
        assert_eq!(message["partition"], Value::Null, "{message}");
        let reason = message["reason"].as_str().expect("a reason");
        assert!(reason.contains(quoted), "reason {reason:?} should quote {quoted:?}");
        // Nothing lost: the record as the producer wrote it, in single-object encoding.
        let raw_hex = message["raw_hex"].as_str().expect("raw bytes in hexadecimal");
        assert!(raw_hex.starts_with("c301"), "raw bytes {raw_hex:?} are not single-object encoding");
        assert_eq!(message["raw_bytes"].as_u64(), Some(raw_hex.len() as u64 / 2), "{message}");
    }
}

/// Two valid events of every record type but UsageEvent.
fn one_file_per_other_type() -> Vec<Vec<Event>> {
    let with_subject = |event_id: &str, metric: &str| Header {
        subject: Some("key-1".into()),
        ..header(event_id, "2026-11-10T08:00:00Z", "org-5", metric)
    };
    let decision = |event_id: &str, outcome, reason, remaining| {
        Event::Decision(DecisionEvent {
            header: with_subject(event_id, "requests"),
            request_id: format!("req-{event_id}"),
            idempotency_key: format!("idem-{event_id}"),
            amount: 1,
            outcome,
            reason,
            policy_id: Some("p-requests".into()),
            policy_version: Some(2),
            window_start: Some(at("2026-11-10T08:00:00Z")),
            window_end: Some(at("2026-11-10T08:01:00Z")),
            limit: Some(100),
            used_before: Some(100 - remaining),
            remaining: Some(remaining),
            retry_after_ms: (remaining == 0).then_some(30_000),
            token_name: None,
        })
    };
    let reservation = |event_id: &str, action, amount, expires_at: Option<&str>| {
        Event::Reservation(ReservationEvent {
            header: header(event_id, "2026-11-10T09:00:00Z", "org-5", "tokens"),
            reservation_id: "r-1".into(),
            action,
            amount,
            expires_at: expires_at.map(at),
            fencing_token: None,
        })
    };
    let grant = |event_id: &str, amount| {
        Event::Grant(GrantEvent {
            header: header(event_id, "2026-11-01T00:00:00Z", "org-5", "tokens"),
            grant_id: format!("g-{event_id}"),
            amount,
            valid_from: at("2026-11-01T00:00:00Z"),
            valid_until: at("2026-12-01T00:00:00Z"),
            reason: "support ticket 4711".into(),
            actor: None,
        })
    };
    let policy = |event_id: &str, tenant: &str, version, enforcement| {
        Event::Policy(PolicyEvent {
            version,
            ..PolicyEvent::new(
                header(event_id, "2026-10-31T00:00:00Z", tenant, "tokens"),
                format!("p-tokens-{tenant}"),
                1_000_000,
                Window::MONTH,
                enforcement,
                at("2026-11-01T00:00:00Z"),
            )
        })
    };
    let adjustment = |event_id: &str, kind, amount| {
        Event::Adjustment(AdjustmentEvent {
            header: header(event_id, "2026-12-01T00:00:00Z", "org-5", "tokens"),
            adjustment_id: event_id.into(),
            kind,
            policy_id: Some("p-tokens-org-5".into()),
            window_start: Some(at("2026-11-01T00:00:00Z")),
            window_end: Some(at("2026-12-01T00:00:00Z")),
            amount,
            refs: vec!["u-1".into(), "u-2".into()],
            run_id: "run-1".into(),
            scope: Some(Scope::TENANT),
        })
    };
    vec![
        vec![
            decision("d-1", Outcome::ALLOWED, Reason::WITHIN_LIMIT, 10),
            decision("d-2", Outcome::DENIED, Reason::QUOTA_EXCEEDED, 0),
        ],
        vec![
            reservation("r-1-reserve", ReservationAction::RESERVE, 500, Some("2026-11-10T09:05:00Z")),
            reservation("r-1-commit", ReservationAction::COMMIT, 420, None),
        ],
        vec![grant("g-1", 5_000), grant("g-2", 1)],
        vec![policy("pol-1", "org-5", 1, Enforcement::HARD), policy("pol-2", "*", 0, Enforcement::SOFT)],
        vec![
            adjustment("adj-1", AdjustmentKind::OVERSHOOT, 1_200),
            adjustment("adj-2", AdjustmentKind::CONFLICTING_DUPLICATE, 0),
        ],
    ]
}

// Proves that a container file of each other record type ingests, is reported under its type and is counted.
#[test]
fn every_other_record_type_ingests_and_is_counted() {
    let ledger = TestLedger::new();
    let mut recorded = 0;
    for events in one_file_per_other_type() {
        let event_type = events[0].event_type();
        let file = ledger.file(&format!("{event_type}.avro"));
        write_container(&file, &events);
        let report = ledger.ingest(&file);
        assert_eq!(report["record_type"], event_type.name(), "{report}");
        assert_eq!(report["writer_fingerprint"], current_fingerprint(event_type), "{report}");
        assert_eq!(report["records"], events.len(), "{report}");
        assert_eq!(report["recorded"], events.len(), "{report}");
        assert_eq!(report["quarantined"], 0, "{report}");
        recorded += events.len() as u64;
        assert_eq!(Counts::of_status(&ledger.status()).events_recorded, recorded, "after {event_type}");
    }
    let expected = Counts { events_recorded: 10, duplicates: 0, conflicts: 0, quarantined: 0, watermark: 10 };
    assert_eq!(Counts::of_status(&ledger.status()), expected);
    ledger.assert_verifies();
}

// Proves that a file that is not an Avro container file is an error (exit 2) naming the file, and records nothing:
// an existing ledger is unchanged, and no new ledger is created.
#[test]
fn non_avro_file_exits_2_naming_the_file() {
    let ledger = TestLedger::new();
    let file = ledger.file("not-avro.avro");
    std::fs::write(&file, "tenant,metric,quantity\norg-1,requests,3\n").unwrap();
    let run = ledger.run(&["ingest", "--file", path_text(&file)]).expect_code(2);
    assert!(run.stderr.contains(path_text(&file)), "stderr should name {}: {}", file.display(), run.stderr);
    assert!(run.stderr.contains("not a readable Avro object container file"), "stderr: {}", run.stderr);
    assert!(!ledger.path.exists(), "a failed ingest left a new ledger at {}", ledger.path.display());
    let good = ledger.file("usage.avro");
    write_container(&good, &[usage("u-1", "2026-11-01T00:00:00Z", "org-1", 1)]);
    ledger.ingest(&good);
    ledger.run(&["ingest", "--file", path_text(&file)]).expect_code(2);
    assert_eq!(Counts::of_status(&ledger.status()).events_recorded, 1);
}

// Proves that a missing input file is an error (exit 2) naming the file, and that it leaves no new, empty ledger
// behind.
#[test]
fn missing_file_exits_2_naming_the_file() {
    let ledger = TestLedger::new();
    let file = ledger.file("no-such-file.avro");
    let run = ledger.run(&["ingest", "--file", path_text(&file)]).expect_code(2);
    assert!(run.stderr.contains(&format!("cannot read {}", file.display())), "stderr: {}", run.stderr);
    let left: Vec<_> = std::fs::read_dir(ledger.dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "a failed ingest left files behind: {left:?}");
}

// A directory given as the ledger is named as one, by readers and writers alike (SQLite's own error says only
// "disk I/O error").
#[test]
fn a_directory_as_the_ledger_is_named() {
    let test = TestLedger::new();
    let dir = path_text(test.dir.path()).to_string();
    let good = test.file("usage.avro");
    write_container(&good, &[usage("u-1", "2026-11-01T00:00:00Z", "org-1", 1)]);
    for args in [vec!["status"], vec!["ingest", "--file", path_text(&good)]] {
        let mut all = vec!["--ledger", dir.as_str()];
        all.extend(args);
        let run = run(&all, b"").expect_code(2);
        assert!(run.stderr.contains(&format!("{dir} is a directory, not a ledger file")), "{}", run.stderr);
    }
}

fn usage_v1_fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("schemas/tests/fixtures/usage-v1.avro")
}

// Proves that the old-writer fixture (UsageEvent v1) ingests through the binary and its 3 events are counted.
#[test]
fn usage_v1_fixture_ingests_and_is_counted() {
    let fixture = usage_v1_fixture();
    assert!(fixture.exists(), "{} is missing (written by schemas' old_writers test)", fixture.display());
    let catalog = Catalog::builtin();
    let v1 = catalog.schemas().iter().find(|s| s.event_type == EventType::UsageEvent && !s.current).expect("v1");

    let ledger = TestLedger::new();
    let report = ledger.ingest(&fixture);
    assert_eq!(report["record_type"], "UsageEvent");
    assert_eq!(report["writer_fingerprint"], format!("{:016x}", v1.fingerprint));
    assert_eq!(report["recorded"], 3, "{report}");
    let expected = Counts { events_recorded: 3, duplicates: 0, conflicts: 0, quarantined: 0, watermark: 3 };
    assert_eq!(Counts::of_status(&ledger.status()), expected);
    ledger.assert_verifies();
}

// Proves that the ledger path can come from QUOTA_LEDGER_PATH instead of --ledger.
#[test]
fn ledger_path_from_environment() {
    let ledger = TestLedger::new();
    let file = ledger.file("usage.avro");
    write_container(&file, &[usage("u-env", "2026-11-01T00:00:00Z", "org-1", 1)]);
    let output = std::process::Command::new(BIN)
        .args(["ingest", "--file", path_text(&file)])
        .current_dir(ledger.dir.path())
        .env("QUOTA_LEDGER_PATH", &ledger.path)
        .output()
        .expect("the binary runs");
    assert!(output.status.success(), "ingest failed: {}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(Counts::of_status(&ledger.status()).events_recorded, 1);
}

// QUOTA_LEDGER_BROKERS, set in an operator's environment for the Kafka commands, does not make `ingest --file` fail
// with "--file cannot be used with --brokers" when no --brokers was typed: a file wins over the environment. Both
// flags typed together are refused.
#[test]
fn a_broker_address_from_the_environment_does_not_stop_a_file_ingest() {
    let test = TestLedger::new();
    let file = test.file("usage.avro");
    write_container(&file, &[usage("u-1", "2026-11-01T10:00:00Z", "org-1", 10)]);
    let ingest = |extra: &[&str]| {
        std::process::Command::new(BIN)
            .args(["--ledger", path_text(&test.path), "ingest", "--file", path_text(&file)])
            .args(extra)
            .env("QUOTA_LEDGER_BROKERS", "127.0.0.1:9")
            .output()
            .expect("ingest runs")
    };
    let from_env = ingest(&[]);
    assert!(from_env.status.success(), "{}", String::from_utf8_lossy(&from_env.stderr));
    assert_eq!(count(&test.status(), "events_recorded"), 1);
    let both = ingest(&["--brokers", "127.0.0.1:19"]);
    assert_eq!(both.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&both.stderr);
    assert!(stderr.contains("--file and --brokers cannot be used together"), "{stderr}");
    // Neither: both are named as the choice, so the error does not read as if --file alone were required.
    let neither = test.run(&["ingest"]).expect_code(2);
    assert!(neither.stderr.contains("<--file <FILE>|--brokers <BROKERS>>"), "{}", neither.stderr);
}

// A reader who cannot write in the ledger's directory (another account, on a shared host) is told why and what to
// do: SQLite needs the WAL's -shm file even to read, and its own error for `status` says only "attempt to write a
// readonly database". Runs only as root, which can run the binary as `nobody`.
#[test]
fn a_reader_who_cannot_write_beside_the_ledger_is_told_why() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    if !testkit::root("a_reader_who_cannot_write_beside_the_ledger_is_told_why (runs the binary as nobody)") {
        return;
    }
    let test = TestLedger::new();
    let file = test.file("usage.avro");
    write_container(&file, &[usage("u-1", "2026-11-01T10:00:00Z", "org-1", 10)]);
    test.ingest(&file);
    std::fs::set_permissions(test.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&test.path, std::fs::Permissions::from_mode(0o644)).unwrap();
    // The binary beside the ledger: `nobody` may not reach the build's own directory (a checkout under a private
    // directory, as CI's is).
    let binary = test.file("quota-ledger");
    if std::fs::hard_link(BIN, &binary).is_err() {
        std::fs::copy(BIN, &binary).expect("a copy of the binary");
    }
    std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
    let output = std::process::Command::new(&binary)
        .args(["--ledger", path_text(&test.path), "status"])
        .uid(65534)
        .gid(65534)
        .output()
        .expect("status runs as nobody");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("SQLite creates") && stderr.contains("this user cannot write in"), "{stderr}");
}

// Proves that another application's SQLite database given as --ledger is refused by every command, naming what it
// holds (status must not call it "no ledger", nor ingest turn it into a ledger), and that not a byte of it changes.
#[test]
fn a_foreign_sqlite_database_is_refused_by_every_command() {
    let ledger = TestLedger::new();
    let conn = rusqlite::Connection::open(&ledger.path).unwrap();
    conn.execute_batch("CREATE TABLE customers (id INTEGER); INSERT INTO customers VALUES (42);").unwrap();
    drop(conn);
    let before = std::fs::read(&ledger.path).unwrap();
    let file = ledger.file("usage.avro");
    write_container(&file, &[usage("u-foreign", "2026-11-01T00:00:00Z", "org-1", 1)]);
    let expected = format!(
        "{} is a SQLite database but not a quota-ledger ledger: it holds table customers",
        ledger.path.display()
    );
    let commands: [&[&str]; 7] = [
        &["status"],
        &["ingest", "--file", path_text(&file)],
        &["verify"],
        &["quarantine", "list"],
        &["quarantine", "replay"],
        &["reconcile", "--as-of", "2026-12-01T00:00:00Z"],
        &["audit", "tenant", "org-1", "--from", "2026-11-01T00:00:00Z", "--to", "2026-12-01T00:00:00Z"],
    ];
    for args in commands {
        let run = ledger.run(args).expect_code(2);
        assert!(run.stderr.contains(&expected), "`{}`: stderr: {}", run.command, run.stderr);
    }
    assert_eq!(std::fs::read(&ledger.path).unwrap(), before, "the foreign database was written to");
}

// A quantity above 2^53 - 1 is quarantined (`quantity_too_large`) and the rest of the file is recorded, and the
// month's billing export reads. Recorded, two usage events of 2^62 of one tenant and month would overflow the
// total and make every ingest of their batch panic (exit 101, nothing recorded, the same again on every retry: a
// blocked partition), and one of 2^63 - 1 followed by any other would turn the month's usage total into a float
// that fails every export.
#[test]
fn quantities_that_would_overflow_a_total_are_quarantined() {
    let test = TestLedger::new();
    let events = [
        usage("big-1", "2026-11-02T10:00:00Z", "org-1", 1 << 62),
        usage("big-2", "2026-11-02T11:00:00Z", "org-1", 1 << 62),
        usage("max", "2026-11-02T12:00:00Z", "org-1", i64::MAX),
        usage("small", "2026-11-02T13:00:00Z", "org-2", 1),
        usage("largest", "2026-11-02T14:00:00Z", "org-1", schemas::validate::AMOUNT_MAX),
    ];
    write_container(&test.file("usage.avro"), &events);
    let report = test.ingest(&test.file("usage.avro"));
    assert_eq!((count(&report, "recorded"), count(&report, "quarantined")), (2, 3), "{report}");
    let reasons: Vec<Value> = test.quarantined().iter().map(|q| q["reason_code"].clone()).collect();
    assert_eq!(reasons, vec![serde_json::json!("quantity_too_large"); 3]);
    let export = test.run(&["export", "billing", "--period", "2026-11", "--format", "csv"]).success().stdout_text();
    assert!(export.contains(&format!("org-1,requests,2026-11,{},", schemas::validate::AMOUNT_MAX)), "{export}");
    assert!(export.contains("org-2,requests,2026-11,1,"), "{export}");
}

// A container file damaged part way (here cut short in its last blocks): the records before the damage are
// recorded, the report names the record where reading stopped, and ingest exits 2 saying so; the repaired file,
// ingested again, resumes at the damaged record and records only the rest (the records before the damage are not
// read again, so none of them counts as a duplicate). An exit of 0 would drop the records after the damage without
// a word.
#[test]
fn a_damaged_file_exits_2_naming_where_it_stopped() {
    let test = TestLedger::new();
    let events: Vec<Event> = (0..3_000).map(|i| usage(&format!("u-{i}"), "2026-11-02T10:00:00Z", "org-1", 1)).collect();
    let path = test.file("usage.avro");
    write_container(&path, &events);
    let whole = std::fs::read(&path).unwrap();
    std::fs::write(&path, &whole[..whole.len() * 3 / 4]).unwrap();
    let run = test.run(&["ingest", "--file", path.to_str().unwrap(), "--json"]).expect_code(2);
    let report = run.json();
    let recorded = count(&report, "recorded");
    assert!(recorded > 0 && recorded < 3_000, "{report}");
    assert_eq!(report["damaged"]["record"], recorded, "{report}");
    assert!(run.stderr.contains("is damaged: it cannot be read past record"), "{}", run.stderr);
    std::fs::write(&path, &whole).unwrap();
    let again = test.ingest(&path);
    let counts = (count(&again, "resumed_after"), count(&again, "recorded"), count(&again, "duplicates"));
    assert_eq!(counts, (recorded, 3_000 - recorded, 0), "{again}");
}

// For the on-call engineer: a command that waited longer than the busy timeout (10 s) for another process's write
// transaction says so, and that running it again is safe, not only SQLite's "database is locked";
// nothing of it was recorded, and once the other writer is done the same command records the file.
#[test]
fn a_ledger_held_by_another_writer_is_named_busy() {
    let ledger = TestLedger::new();
    let file = ledger.file("usage.avro");
    write_container(&file, &[usage("u-1", "2026-11-01T00:00:00Z", "org-1", 1)]);
    ledger.ingest(&file);
    let other = rusqlite::Connection::open(&ledger.path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    write_container(&file, &[usage("u-2", "2026-11-02T00:00:00Z", "org-1", 2)]);
    let run = ledger.run(&["ingest", "--file", path_text(&file)]).expect_code(2);
    assert!(run.stderr.contains("database is locked"), "{}", run.stderr);
    assert!(run.stderr.contains(ledger::BUSY_HINT), "{}", run.stderr);
    other.execute_batch("ROLLBACK").unwrap();
    assert_eq!(Counts::of_status(&ledger.status()).events_recorded, 1, "nothing of the refused file recorded");
    assert_eq!(ledger.ingest(&file)["recorded"], 1, "the same command, once the other writer is done");
}

// Usage that would take its tenant's month total past 2^63 - 1 (1,025 of the largest quantities) is quarantined as
// `total_overflow`, once, and the rest of its file is recorded; the month's export goes on. Were the whole append
// to fail instead, the same file (or Kafka batch) would fail on every retry, for good.
#[test]
fn usage_past_a_total_of_i64_is_quarantined_and_the_rest_recorded() {
    let test = TestLedger::new();
    let largest = schemas::validate::AMOUNT_MAX;
    let mut events: Vec<Event> =
        (0..1_025).map(|i| usage(&format!("u-{i}"), "2026-11-02T10:00:00Z", "org-1", largest)).collect();
    events.push(usage("other", "2026-11-02T10:00:00Z", "org-2", 3));
    write_container(&test.file("usage.avro"), &events);
    let report = test.ingest(&test.file("usage.avro"));
    let counts = (count(&report, "records"), count(&report, "recorded"), count(&report, "quarantined"));
    assert_eq!(counts, (1_026, 1_025, 1), "{report}");
    let quarantined = test.quarantined();
    assert_eq!((quarantined.len(), quarantined[0]["reason_code"].as_str()), (1, Some("total_overflow")));
    assert_eq!(quarantined[0]["offset"], 1_024, "the event that did not fit: {}", quarantined[0]);
    assert_eq!(count(&test.ingest(&test.file("usage.avro")), "quarantined"), 0, "a rerun adds nothing");
    let export = test.run(&["export", "billing", "--period", "2026-11", "--format", "csv"]).success().stdout_text();
    assert!(export.contains(&format!("org-1,requests,2026-11,{},", 1_024 * largest)), "{export}");
    assert!(export.contains("org-2,requests,2026-11,3,"), "{export}");
    test.assert_verifies();
}
