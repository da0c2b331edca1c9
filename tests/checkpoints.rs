//! Tamper evidence that survives someone who can rewrite the ledger file (the trust issue, point 4): ingest publishes
//! the chain head to `quota.checkpoints`, and `verify --checkpoints-from` catches what `verify` alone cannot, a
//! ledger replaced by an older copy of itself and a final bill rewritten with every hash after it recomputed.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use kafka::producer::KafkaProducer;
use support::brokers::Broker;
use support::*;

/// Produces usage events `ids` (November 2026, tenant org-1) to quota.usage.
fn produce_usage(broker: &Broker, ids: &[&str]) {
    let catalog = schemas::Catalog::builtin();
    let mut producer = KafkaProducer::new(&broker.bootstrap, &[]).expect("a producer");
    for id in ids {
        let event = usage(id, "2026-11-10T12:00:00Z", "org-1", 7);
        producer.send("quota.usage", "org-1", &catalog.encode_single_object(&event)).expect("send");
    }
    producer.finish().expect("every message acknowledged");
}

// A rollback to an older copy of the file, and a stored final bill changed with every link hash after it recomputed,
// both pass `verify`, which can only check the file against itself, and both fail `verify --checkpoints-from`: the
// copy lacks the head ingest published since, and the rewritten chain no longer has the hash published for it.
// Without checkpoints published outside the file, nothing would tell either file from the ledger it claims to be.
#[test]
fn a_rollback_and_a_rewritten_bill_fail_against_published_checkpoints() {
    let broker = Broker::mock();
    let ledger = TestLedger::new();
    let ingest = ["ingest", "--brokers", &broker.bootstrap, "--until-caught-up"];
    let verify_against_checkpoints = ["verify", "--json", "--checkpoints-from", &broker.bootstrap];
    produce_usage(&broker, &["c-1", "c-2"]);
    ledger.run(&ingest).success();
    let held = ledger.run(&verify_against_checkpoints).success().json();
    assert!(count(&held, "checkpoints_checked") >= 1, "ingest published its head: {held}");
    assert_eq!(held["head_seq"], ledger.status()["head_seq"], "{held}");

    // A clean stop folds the log into the file: copying it is a backup.
    let copy = ledger.file("copy.db");
    std::fs::copy(&ledger.path, &copy).expect("a copy of the ledger");
    produce_usage(&broker, &["c-3"]);
    ledger.run(&ingest).success();
    std::fs::rename(&ledger.path, ledger.file("current.db")).expect("the current ledger set aside");
    std::fs::copy(&copy, &ledger.path).expect("the older copy put in its place");
    ledger.assert_verifies();
    let rolled_back = ledger.run(&verify_against_checkpoints).expect_code(1);
    let bad = &rolled_back.json()["first_bad_checkpoint"];
    assert!(bad["problem"].as_str().unwrap().contains("is not in the chain, which ends at link"), "{bad}");
    assert!(rolled_back.stderr.contains("published at"), "{}", rolled_back.stderr);

    std::fs::rename(ledger.file("current.db"), &ledger.path).expect("the current ledger back");
    ledger.run(&["export", "billing", "--period", "2026-11", "--format", "csv", "--final"]).success();
    // An ingest with nothing to read publishes the head the close moved.
    ledger.run(&ingest).success();
    ledger.run(&verify_against_checkpoints).success();
    let conn = rusqlite::Connection::open(&ledger.path).expect("the ledger, behind its back");
    conn.execute_batch("DROP TRIGGER period_exports_refuse_update; UPDATE period_exports SET consumption = 1")
        .expect("the bill changed");
    ledger::links::rehash_links_as_an_attacker(&conn, 1).expect("every link recomputed");
    drop(conn);
    ledger.assert_verifies();
    let rewritten = ledger.run(&verify_against_checkpoints).expect_code(1);
    let bad = &rewritten.json()["first_bad_checkpoint"];
    assert!(bad["problem"].as_str().unwrap().contains("history up to it was rewritten"), "{bad}");

    // A ledger whose id was changed finds no checkpoint of its own: nothing vouches for it.
    let conn = rusqlite::Connection::open(&ledger.path).expect("the ledger, behind its back");
    conn.execute_batch("DROP TRIGGER ledger_identity_refuse_update; UPDATE ledger_identity SET ledger_id = 'other'")
        .expect("the id changed");
    drop(conn);
    let renamed = ledger.run(&verify_against_checkpoints).expect_code(1);
    assert!(renamed.stderr.contains("no checkpoint of ledger other"), "{}", renamed.stderr);
}

// `serve --brokers` checkpoints the ledger its hook writes: the head after a decision reaches quota.checkpoints
// within the interval (10 s), and the ledger then verifies against everything serve published.
#[test]
fn serve_publishes_the_head_its_decisions_move() {
    let broker = Broker::mock();
    let ledger = TestLedger::new();
    // serve runs on a ledger that exists.
    write_container(&ledger.file("usage.avro"), &[usage("u-1", "2026-11-02T12:00:00Z", "org-1", 1)]);
    ledger.ingest(&ledger.file("usage.avro"));
    let tokens = ledger.file("tokens.toml");
    std::fs::write(&tokens, "[[token]]\nsecret = \"checkpoint-secret-0123456789\"\ntenants = [\"*\"]\n").unwrap();
    // A token file only its owner may read, as `serve` requires.
    std::fs::set_permissions(&tokens, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let mut serve = ChildGuard::new(
        Command::new(BIN)
            .args(["--ledger", ledger.path.to_str().unwrap(), "serve", "--listen", "127.0.0.1:0", "--tokens"])
            .arg(&tokens)
            .args(["--brokers", &broker.bootstrap])
            .env_remove("QUOTA_LEDGER_PATH")
            .env_remove("QUOTA_LEDGER_BROKERS")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("serve starts"),
    );
    let mut line = String::new();
    BufReader::new(serve.stdout.take().unwrap()).read_line(&mut line).expect("serve prints its address");
    let base = line.trim().strip_prefix("listening on ").expect("listening on ADDR").to_string();
    let body = serde_json::json!({"tenant": "org-1", "metric": "tokens", "amount": 1, "idempotency_key": "k-1"});
    let answer = ureq::post(format!("{base}/v1/check"))
        .header("Authorization", "Bearer checkpoint-secret-0123456789")
        .send_json(&body)
        .expect("an answer");
    assert_eq!(answer.status().as_u16(), 200);
    let head = ledger.status()["head_seq"].as_u64().expect("head_seq");
    let id = ledger.status()["ledger_id"].as_str().unwrap().to_string();
    eventually(30, "serve published the head of its decision", || {
        let read = kafka::checkpoints::read_checkpoints(&broker.bootstrap, &[], &id).ok()?;
        read.checkpoints.iter().any(|c| c.head_seq == head).then_some(())
    });
    // SAFETY: kill(2) on a child this test started and has not reaped.
    unsafe { libc::kill(serve.id() as i32, libc::SIGTERM) };
    assert!(serve.wait().expect("serve exits").success());
    let report = ledger.run(&["verify", "--json", "--checkpoints-from", &broker.bootstrap]).success().json();
    assert!(count(&report, "checkpoints_checked") >= 1, "{report}");
}
