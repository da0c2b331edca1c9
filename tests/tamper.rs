// Proves with the real `sqlite3` CLI that the database refuses tampering and `verify` names what gets through.

mod support;

use std::process::Command;

use serde_json::Value;
use support::*;

/// Runs SQL on the ledger file with the real `sqlite3` command-line shell: `(succeeded, stdout, stderr)`.
fn sqlite3(ledger: &TestLedger, sql: &str) -> (bool, String, String) {
    let output = Command::new("sqlite3").arg(&ledger.path).arg(sql).output().unwrap_or_else(|e| {
        panic!(
            "cannot run the sqlite3 command-line shell ({e}). The tamper tests need it for real: install it \
             (Debian/Ubuntu: apt-get install sqlite3) and put it on PATH"
        )
    });
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (output.status.success(), text(&output.stdout), text(&output.stderr))
}

/// SQL that must succeed.
fn sqlite3_ok(ledger: &TestLedger, sql: &str) -> String {
    let (succeeded, stdout, stderr) = sqlite3(ledger, sql);
    assert!(succeeded, "sqlite3 {sql:?} failed: {stderr}");
    stdout
}

/// SQL that the ledger's triggers must refuse with the append-only message of `table`.
fn assert_refused(ledger: &TestLedger, sql: &str, table: &str, verb: &str) {
    let (succeeded, _, stderr) = sqlite3(ledger, sql);
    assert!(!succeeded, "sqlite3 {sql:?} succeeded: the database must refuse it");
    let message = format!("{table} is append-only: {verb} refused");
    assert!(stderr.contains(&message), "sqlite3 {sql:?} should fail with {message:?}, said: {stderr}");
}

/// A ledger of five UsageEvents u-1..u-5 at seq 1..5 (quantity 10 * n), whose chain holds.
fn ledger_of_five() -> TestLedger {
    let ledger = TestLedger::new();
    let file = ledger.file("usage.avro");
    let events: Vec<_> =
        (1..=5).map(|n| usage(&format!("u-{n}"), &format!("2026-11-0{n}T12:00:00Z"), "org-1", 10 * n)).collect();
    write_container(&file, &events);
    assert_eq!(ledger.ingest(&file)["recorded"], 5);
    ledger.assert_verifies();
    ledger
}

/// Runs `verify`, which must exit 1: its JSON report's `first_bad`, after checking that stderr names the entry and
/// that the report says where the walk stopped apart from the ledger's watermark.
fn verify_fails(ledger: &TestLedger, seq: u64, event_id: &str) -> Value {
    let run = ledger.verify().expect_code(1);
    let report = run.json();
    let first_bad = report["first_bad"].clone();
    assert_eq!(first_bad["seq"], seq, "verify --json: {first_bad}");
    assert_eq!(first_bad["event_id"], event_id, "verify --json: {first_bad}");
    assert_eq!(report["walk_stopped_at"], seq, "verify --json: {report}");
    assert_eq!(report["watermark"], ledger.status()["watermark"], "verify --json: {report}");
    let named = format!("verify: entry {seq} (event_id {event_id}) does not hold");
    assert!(run.stderr.contains(&named), "stderr should say {named:?}: {}", run.stderr);
    first_bad
}

// Proves that, with the triggers in place, UPDATE and DELETE through sqlite3 fail with the append-only message.
#[test]
fn database_refuses_update_and_delete() {
    let ledger = ledger_of_five();
    assert_refused(&ledger, "UPDATE usage_events SET quantity = 0 WHERE seq = 2", "usage_events", "UPDATE");
    assert_refused(&ledger, "DELETE FROM entries WHERE seq = 5", "entries", "DELETE");
    assert_refused(&ledger, "UPDATE entries SET tenant = 'org-2' WHERE seq = 1", "entries", "UPDATE");
    assert_refused(&ledger, "DELETE FROM usage_events", "usage_events", "DELETE");
    assert_refused(&ledger, "UPDATE batches SET events_recorded_total = 0", "batches", "UPDATE");
    // REPLACE deletes the row it replaces without firing a delete trigger: refused as an insert over a row.
    let (replaced, _, stderr) = sqlite3(
        &ledger,
        "INSERT OR REPLACE INTO entries SELECT seq, 'evil' || event_id, event_type, status, duplicate_of, \
         tenant, subject, metric, source, occurred_at, origin, origin_stream, origin_partition, origin_offset, \
         recorded_at, payload_fingerprint, payload, raw, payload_hash, entry_hash, project, api_key FROM entries \
         WHERE seq = 1",
    );
    assert!(!replaced && stderr.contains("entries is append-only: a row is never replaced"), "{stderr}");

    assert_eq!(sqlite3_ok(&ledger, "SELECT quantity FROM usage_events WHERE seq = 2").trim(), "20");
    assert_eq!(sqlite3_ok(&ledger, "SELECT COUNT(*) FROM entries").trim(), "5");
    ledger.assert_verifies();
}

// Proves that a changed usage_events quantity (trigger dropped) makes verify exit 1 naming its seq and event_id.
#[test]
fn changed_quantity_is_named_by_verify() {
    let ledger = ledger_of_five();
    sqlite3_ok(&ledger, "DROP TRIGGER usage_events_refuse_update; UPDATE usage_events SET quantity = 31 WHERE seq = 3");
    let first_bad = verify_fails(&ledger, 3, "u-3");
    assert!(first_bad["problem"].as_str().unwrap().contains("usage_events.quantity"), "{first_bad}");
}

// Proves that one changed byte of an entry's payload makes verify exit 1 naming that entry.
#[test]
fn changed_payload_byte_is_named_by_verify() {
    let ledger = ledger_of_five();
    let payload = sqlite3_ok(&ledger, "SELECT hex(payload) FROM entries WHERE seq = 2");
    let mut payload: Vec<u8> = (0..payload.trim().len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&payload.trim()[i..i + 2], 16).expect("sqlite3 prints hex"))
        .collect();
    // One bit of one byte in the middle of the record (inside the tenant or metric string).
    let middle = payload.len() / 2;
    payload[middle] ^= 0x01;
    let hex: String = payload.iter().map(|b| format!("{b:02X}")).collect();
    sqlite3_ok(
        &ledger,
        &format!("DROP TRIGGER entries_refuse_update; UPDATE entries SET payload = X'{hex}' WHERE seq = 2"),
    );
    let first_bad = verify_fails(&ledger, 2, "u-2");
    assert!(first_bad["problem"].as_str().unwrap().contains("payload"), "{first_bad}");
}

// Proves that a change to recorded_at, a column only the chain covers, makes verify exit 1 naming the entry.
#[test]
fn changed_recorded_at_is_caught_by_the_chain() {
    let ledger = ledger_of_five();
    sqlite3_ok(
        &ledger,
        "DROP TRIGGER entries_refuse_update; UPDATE entries SET recorded_at = recorded_at - 1 WHERE seq = 4",
    );
    let first_bad = verify_fails(&ledger, 4, "u-4");
    assert!(first_bad["problem"].as_str().unwrap().contains("chain"), "{first_bad}");
}

// Proves that deleting a middle entry and its usage_events row (triggers dropped) is named as a sequence gap.
#[test]
fn deleted_middle_entry_is_a_sequence_gap() {
    let ledger = ledger_of_five();
    sqlite3_ok(
        &ledger,
        "DROP TRIGGER entries_refuse_delete; DROP TRIGGER usage_events_refuse_delete;
         DELETE FROM usage_events WHERE seq = 3; DELETE FROM entries WHERE seq = 3",
    );
    let run = ledger.verify().expect_code(1);
    assert!(run.stderr.contains("sequence gap: expected entry 3, found 4"), "stderr: {}", run.stderr);
    let first_bad = verify_fails(&ledger, 4, "u-4");
    assert!(first_bad["problem"].as_str().unwrap().contains("sequence gap"), "{first_bad}");
}

// Proves that deleting the last entry, which leaves no gap, is caught by the last batch's watermark.
#[test]
fn deleted_last_entry_is_caught_by_the_watermark() {
    let ledger = ledger_of_five();
    sqlite3_ok(
        &ledger,
        "DROP TRIGGER entries_refuse_delete; DROP TRIGGER usage_events_refuse_delete;
         DELETE FROM usage_events WHERE seq = 5; DELETE FROM entries WHERE seq = 5",
    );
    let run = ledger.verify().expect_code(1);
    let first_bad = run.json()["first_bad"].clone();
    assert_eq!(first_bad["seq"], 5, "{first_bad}");
    assert!(run.stderr.contains("watermark is 5 but the ledger ends at 4"), "stderr: {}", run.stderr);
}

// Proves that a dedup key referring to no entry (written with sqlite3, which checks no references) is named by
// verify: the schema's references are checked there, not at every insert.
#[test]
fn key_of_no_entry_is_named_by_verify() {
    let ledger = ledger_of_five();
    sqlite3_ok(&ledger, "INSERT INTO event_keys_recent (event_key, seq) VALUES (42, 6)");
    let run = ledger.verify().expect_code(1);
    let first_bad = run.json()["first_bad"].clone();
    let problem = first_bad["problem"].as_str().unwrap();
    assert_eq!(problem, "event_keys_recent.seq refers to entry 6, but the entries are 1 to 5", "{first_bad}");
    assert!(run.stderr.contains(problem), "stderr: {}", run.stderr);
}

// Proves that a reference to another table than entries is checked too: an acknowledgement of an entry that was
// never in the outbox.
#[test]
fn acknowledgement_of_nothing_in_the_outbox_is_named_by_verify() {
    let ledger = ledger_of_five();
    sqlite3_ok(&ledger, "INSERT INTO outbox_published (seq, topic, published_at) VALUES (3, 'quota.usage', 0)");
    let run = ledger.verify().expect_code(1);
    let problem = run.json()["first_bad"]["problem"].as_str().unwrap().to_string();
    assert_eq!(problem, "outbox_published holds row 3 that refers to no row of outbox");
    assert!(run.stderr.contains(&problem), "stderr: {}", run.stderr);
}

// Proves that a cursor past an entry still pending is named by verify: the publisher never reads below the cursor,
// so that entry would never reach Kafka.
#[test]
fn outbox_cursor_past_a_pending_entry_is_named_by_verify() {
    let ledger = ledger_of_five();
    sqlite3_ok(&ledger, "INSERT INTO outbox (seq) VALUES (3), (4)");
    sqlite3_ok(&ledger, "INSERT INTO outbox_published (seq, topic, published_at) VALUES (4, 'quota.usage', 0)");
    ledger.verify().success();
    sqlite3_ok(&ledger, "INSERT INTO outbox_cursor (next_seq, recorded_at) VALUES (5, 0)");
    let run = ledger.verify().expect_code(1);
    let problem = run.json()["first_bad"]["problem"].as_str().unwrap().to_string();
    assert_eq!(problem, "outbox_cursor starts the pending entries at 5, but outbox entry 3 below it is not published");
    assert!(run.stderr.contains(&problem), "stderr: {}", run.stderr);
}

// Proves that `verify --json`'s `watermark` is the ledger's, as `status --json` says, whether the chain holds or
// not, and that where the walk stopped is `walk_stopped_at`, apart from it: a bad entry never makes `watermark`
// that entry's.
#[test]
fn verify_reports_the_ledgers_watermark_and_where_the_walk_stopped() {
    let holds = ledger_of_five();
    let report = holds.verify().success().json();
    assert_eq!((&report["watermark"], &report["walk_stopped_at"]), (&Value::from(5), &Value::from(5)), "{report}");

    let bad_entry = ledger_of_five();
    sqlite3_ok(
        &bad_entry,
        "DROP TRIGGER usage_events_refuse_update; UPDATE usage_events SET quantity = 1 WHERE seq = 2",
    );
    let report = bad_entry.verify().expect_code(1).json();
    assert_eq!(bad_entry.status()["watermark"], 5);
    assert_eq!((&report["watermark"], &report["walk_stopped_at"]), (&Value::from(5), &Value::from(2)), "{report}");
    assert_eq!(report["entries_checked"], 1, "{report}");

    // The last entry deleted: the walk reads 4 entries that hold, and the ledger (its last batch) says 5.
    let last_deleted = ledger_of_five();
    sqlite3_ok(
        &last_deleted,
        "DROP TRIGGER entries_refuse_delete; DROP TRIGGER usage_events_refuse_delete;
         DELETE FROM usage_events WHERE seq = 5; DELETE FROM entries WHERE seq = 5",
    );
    let report = last_deleted.verify().expect_code(1).json();
    assert_eq!(last_deleted.status()["watermark"], 5);
    assert_eq!((&report["watermark"], &report["walk_stopped_at"]), (&Value::from(5), &Value::from(4)), "{report}");
}

// Proves that a row of totals that does not read does not hide the first bad entry: verify reads the last batch's
// totals before its walk (for the watermark it reports), and failing there at once (exit 2) would not name the entry.
#[test]
fn unreadable_totals_do_not_hide_the_first_bad_entry() {
    let ledger = ledger_of_five();
    sqlite3_ok(
        &ledger,
        "DROP TRIGGER usage_events_refuse_update; UPDATE usage_events SET quantity = 1 WHERE seq = 2;
         DROP TRIGGER batches_refuse_update; UPDATE batches SET watermark = 'x'",
    );
    let run = ledger.verify().expect_code(1);
    assert!(run.stderr.contains("verify: entry 2 (event_id u-2) does not hold"), "{}", run.stderr);
}

// Proves that what the triggers let through into what billing reads is named by verify: a usage total raised by
// hand (usage_totals may grow) and a usage_events row added under an entry of another type (no trigger refuses an
// INSERT). Passed by verify, either would reach `export billing --final`, which would bill the raised total.
#[test]
fn a_raised_usage_total_and_an_extra_detail_row_are_named_by_verify() {
    let raised = ledger_of_five();
    sqlite3_ok(&raised, "UPDATE usage_totals SET quantity = quantity + 1000 WHERE period = '2026-11'");
    let report = raised.verify().expect_code(1).json();
    let problem = report["first_bad"]["problem"].as_str().unwrap_or_default().to_string();
    assert!(problem.contains("usage_totals holds a total of 1150 for org-1 requests 2026-11"), "{report}");
    assert!(problem.contains("sum to 150"), "{report}");

    let extra = ledger_of_five();
    let grant = schemas::Event::Grant(schemas::GrantEvent {
        header: header("g-1", "2026-11-06T12:00:00Z", "org-1", "requests"),
        grant_id: "g-1".into(),
        amount: 5,
        valid_from: at("2026-11-01T00:00:00Z"),
        valid_until: at("2026-12-01T00:00:00Z"),
        reason: "credit".into(),
        actor: None,
    });
    write_container(&extra.file("grant.avro"), &[grant]);
    extra.ingest(&extra.file("grant.avro"));
    sqlite3_ok(
        &extra,
        "INSERT INTO usage_events (seq, quantity, request_id, attributes) VALUES (6, 100000, NULL, '{}')",
    );
    let report = extra.verify().expect_code(1).json();
    let problem = report["first_bad"]["problem"].as_str().unwrap_or_default().to_string();
    assert!(problem.contains("usage_events holds 6 rows, but the ledger has 5 UsageEvent entries"), "{report}");
}

// Proves that a closed month's stored final bill changed behind the ledger's back is named by verify, and that once
// every link hash after it is recomputed (verify alone then passes) the head the operator noted before,
// `verify --expect-head SEQ:HASH`, still catches it. The stored exports are in the chain, not only protected by
// triggers: left outside it, a changed bill would pass verify (exit 0) and `--final` would export it again.
#[test]
fn a_changed_final_bill_is_named_by_verify_and_caught_against_a_noted_head() {
    let ledger = ledger_of_five();
    ledger.run(&["export", "billing", "--period", "2026-11", "--format", "csv", "--final"]).success();
    let status = ledger.status();
    let head = format!("{}:{}", status["head_seq"], status["head_hash"].as_str().expect("status --json has head_hash"));
    ledger.run(&["verify", "--expect-head", &head]).success();
    sqlite3_ok(&ledger, "DROP TRIGGER period_exports_refuse_update; UPDATE period_exports SET consumption = 1");
    let run = ledger.verify().expect_code(1);
    let problem = run.json()["first_bad"]["problem"].as_str().unwrap_or_default().to_string();
    assert!(problem.starts_with("link 3 (close): the rows it covers"), "{problem}");
    assert!(problem.contains("period closes 1-1 with their stored exports"), "{problem}");

    let conn = rusqlite::Connection::open(&ledger.path).expect("the ledger, behind its back");
    ledger::links::rehash_links_as_an_attacker(&conn, 1).expect("every link recomputed");
    drop(conn);
    ledger.assert_verifies();
    let run = ledger.run(&["verify", "--json", "--expect-head", &head]).expect_code(1);
    let bad = run.json()["first_bad_checkpoint"].clone();
    assert!(bad["problem"].as_str().unwrap_or_default().contains("history up to it was rewritten"), "{bad}");
    assert!(run.stderr.contains(&format!("head {head} does not hold")), "{}", run.stderr);
}

/// The head a verify printed, as `--since` and `--expect-head` take it.
fn head_of(report: &Value) -> String {
    format!("{}:{}", report["head_seq"], report["head_hash"].as_str().expect("verify --json has head_hash"))
}

/// `ledger_of_five`, verified, then three more usage events (u-6..u-8, in November too): the head the first verify
/// printed.
fn ledger_of_eight_verified_at_five() -> (TestLedger, String) {
    let ledger = ledger_of_five();
    let head = head_of(&ledger.verify().success().json());
    let file = ledger.file("more.avro");
    let events: Vec<_> =
        (6..=8).map(|n| usage(&format!("u-{n}"), &format!("2026-11-0{n}T12:00:00Z"), "org-1", 10 * n)).collect();
    write_container(&file, &events);
    assert_eq!(ledger.ingest(&file)["recorded"], 3);
    (ledger, head)
}

// Proves `verify --since HEAD` walks only what was appended after the head an earlier verify printed, and finds there
// what a full verify finds: a changed entry and a raised total of a month it appended to. It starts only from a head
// that still holds: once every link is recomputed after a covered row changed, the head is refused. What the head covers is not
// walked again (the trust it rests on): a change there without recomputing the hashes is found by the full verify.
#[test]
fn verify_since_a_head_walks_only_what_was_appended_after_it() {
    let (ledger, head) = ledger_of_eight_verified_at_five();
    let said = ledger.run(&["verify", "--since", &head]).success().stdout_text();
    assert!(said.contains("ok: 8 entries, chain holds up to watermark 8 (walked after entry 5"), "{said}");
    let report = ledger.run(&["verify", "--json", "--since", &head]).success().json();
    assert_eq!((report["walked_from"].as_u64(), report["entries_checked"].as_u64()), (Some(5), Some(8)), "{report}");

    sqlite3_ok(&ledger, "DROP TRIGGER usage_events_refuse_update; UPDATE usage_events SET quantity = 71 WHERE seq = 7");
    let run = ledger.run(&["verify", "--json", "--since", &head]).expect_code(1);
    assert_eq!(run.json()["first_bad"]["seq"], 7, "{}", run.stdout_text());
    assert!(run.stderr.contains("verify: entry 7 (event_id u-7) does not hold"), "{}", run.stderr);

    let (raised, head) = ledger_of_eight_verified_at_five();
    sqlite3_ok(&raised, "UPDATE usage_totals SET quantity = quantity + 1000 WHERE period = '2026-11'");
    let report = raised.run(&["verify", "--json", "--since", &head]).expect_code(1).json();
    let problem = report["first_bad"]["problem"].as_str().unwrap_or_default().to_string();
    assert!(problem.contains("usage_totals holds a total of 1360 for org-1 requests 2026-11"), "{report}");
    assert!(problem.contains("sum to 360"), "{report}");

    let (covered, head) = ledger_of_eight_verified_at_five();
    sqlite3_ok(
        &covered,
        "DROP TRIGGER entries_refuse_update; UPDATE entries SET recorded_at = recorded_at + 1 WHERE seq = 2",
    );
    covered.run(&["verify", "--since", &head]).success();
    assert_eq!(covered.verify().expect_code(1).json()["first_bad"]["seq"], 2, "the full verify walks it");

    let (rewritten, head) = ledger_of_eight_verified_at_five();
    sqlite3_ok(
        &rewritten,
        "DROP TRIGGER batches_refuse_update; UPDATE batches SET committed_at = committed_at + 1 WHERE id = 1",
    );
    let conn = rusqlite::Connection::open(&rewritten.path).expect("the ledger, behind its back");
    ledger::links::rehash_links_as_an_attacker(&conn, 1).expect("every link recomputed");
    drop(conn);
    let run = rewritten.run(&["verify", "--json", "--since", &head]).expect_code(1);
    let bad = run.json()["first_bad_checkpoint"].clone();
    assert!(bad["problem"].as_str().unwrap_or_default().contains("history up to it was rewritten"), "{bad}");
    assert!(run.stderr.contains(&format!("head {head} does not hold")), "{}", run.stderr);
}
