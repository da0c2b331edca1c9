//! Backups of a running ledger (`backup --to`, `restore --from`): a copy taken while ingest appends restores in
//! place of a lost ledger, verifies, and resumes ingest from the Kafka offsets it stored, the counts exactly what was
//! produced; a changed copy is refused.

mod support;

use serde_json::Value;
use support::brokers::Broker;
use support::*;

fn unique_events(report: &Value) -> u64 {
    count(report, "unique_events")
}

// Proves the backup is consistent under load and that resuming after a restore counts nothing twice and loses
// nothing: the restored ledger holds exactly the backup's events, and after ingest catches up, exactly what
// `generate` produced, with the chain verifying.
#[test]
fn a_backup_taken_under_load_restores_and_resumes_ingest_with_exact_counts() {
    let broker = Broker::mock();
    let ledger = TestLedger::new();
    let report = generate_to(&broker, 40, 60_000, 21);
    let mut ingest = ledger.spawn_ingest(&broker.bootstrap, &["--batch-max-events", "500", "--batch-wait-ms", "20"]);
    eventually(60, "ingest records its first events", || {
        (Counts::of_status_or_zero(&ledger).events_recorded > 0).then_some(())
    });
    let backup = ledger.file("backup.db");
    let taken = ledger.run(&["backup", "--to", backup.to_str().unwrap(), "--json"]).success().json();
    let in_backup = count(&taken[0], "events_recorded");
    eprintln!("backup taken at {in_backup} of {} events", unique_events(&report));
    assert!(in_backup > 0, "{taken}");
    eventually(120, "ingest records every event", || {
        (Counts::of_status_or_zero(&ledger).events_recorded == unique_events(&report)).then_some(())
    });
    ingest.kill().expect("SIGKILL");
    let _ = ingest.wait();

    // The ledger is lost with its disk.
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", ledger.path.display()));
    }
    let restored = ledger.run(&["restore", "--from", backup.to_str().unwrap(), "--json"]).success().json();
    assert_eq!(restored[0]["verify"]["first_bad"], Value::Null, "{restored}");
    let status = ledger.status();
    assert_eq!(count(&status, "events_recorded"), in_backup, "the restored ledger holds the backup: {status}");
    assert_eq!(status["head_seq"], taken[0]["head_seq"], "{status}");
    assert_eq!(status["ledger_id"], taken[0]["ledger_id"], "a restored ledger keeps its id: {status}");

    ledger.run(&["ingest", "--brokers", &broker.bootstrap, "--until-caught-up", "--json"]).success();
    let status = ledger.status();
    let counts = Counts::of_status(&status);
    assert_eq!(counts.events_recorded, unique_events(&report), "events recorded; {status}");
    assert_eq!(counts.duplicates, count(&report, "duplicates"), "duplicates counted once; {status}");
    assert_eq!(counts.conflicts, count(&report, "conflicts"), "conflicts; {status}");
    assert_eq!(counts.quarantined, count(&report, "malformed"), "quarantined; {status}");
    let offsets: u64 = status["offsets"].as_array().expect("offsets").iter().map(|o| count(o, "next_offset")).sum();
    assert_eq!(offsets, count(&report, "messages"), "the stored offsets cover every message; {status}");
    ledger.assert_verifies();
}

// Proves a backup is never written over, a restore never overwrites a ledger, and a copy changed after it was taken
// is refused with nothing restored.
#[test]
fn a_changed_backup_is_refused_and_nothing_is_overwritten() {
    let ledger = TestLedger::new();
    let file = ledger.file("usage.avro");
    let events: Vec<_> =
        (0..40).map(|i| usage(&format!("u-{i}"), "2026-11-03T10:00:00Z", &format!("org-{}", i % 4), 2)).collect();
    write_container(&file, &events);
    ledger.ingest(&file);
    let backup = ledger.file("backup.db");
    let backup_text = backup.to_str().unwrap();
    ledger.run(&["backup", "--to", backup_text]).success();
    let again = ledger.run(&["backup", "--to", backup_text]).expect_code(2);
    assert!(again.stderr.contains("never overwrites"), "{}", again.stderr);
    let onto = ledger.run(&["restore", "--from", backup_text]).expect_code(2);
    assert!(onto.stderr.contains("never overwrites"), "{}", onto.stderr);

    let mut bytes = std::fs::read(&backup).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x01;
    std::fs::write(&backup, &bytes).unwrap();
    let elsewhere = ledger.file("restored.db");
    let refused =
        run_in(ledger.dir.path(), &["--ledger", elsewhere.to_str().unwrap(), "restore", "--from", backup_text], b"")
            .expect_code(2);
    assert!(refused.stderr.contains("does not hold"), "{}", refused.stderr);
    assert!(!elsewhere.exists(), "nothing restored");
}
