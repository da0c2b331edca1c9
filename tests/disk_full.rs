//! A real full disk (a size-limited tmpfs, as root) under `ingest --file` and under `serve`: batches and groups fail with the disk named, nothing answered or committed is lost or doubled, and both go on once space is freed.

#[path = "support/hook_http.rs"]
mod hook_http;
mod support;
#[path = "support/tmpfs.rs"]
mod tmpfs;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hook_http::{LedgerView, RecordedDecision, Reply, Sent, Server};
use schemas::*;
use support::*;
use tmpfs::Tmpfs;

/// The filesystem of each test: room for the whole ledger and its log once the filler is gone.
const FILESYSTEM_MIB: u64 = 48;
/// Space the filler leaves: a few batches or groups fit, then the disk is full.
const MARGIN_BYTES: u64 = 1 << 20;
/// What SQLite says of ENOSPC (SQLITE_FULL), which every failure must carry to the operator.
const DISK_FULL: &str = "database or disk is full";

/// A tmpfs for the test, or `None` when the test is not root and QUOTA_LEDGER_SKIP_ROOT=1 skips it (never in CI);
/// not root otherwise, or a refused mount, fails the test.
fn small_filesystem(test: &str) -> Option<Tmpfs> {
    if !testkit::root(&format!("{test} (mounts a size-limited tmpfs)")) {
        return None;
    }
    Some(Tmpfs::mount(FILESYSTEM_MIB).unwrap_or_else(|reason| panic!("{test}: no small filesystem: {reason}")))
}

/// Runs the binary on `ledger` (anywhere, not in a [`TestLedger`]'s directory).
fn on(ledger: &Path, scratch: &Path, args: &[&str]) -> Run {
    let mut all = vec!["--ledger", ledger.to_str().expect("a UTF-8 path")];
    all.extend_from_slice(args);
    run_in(scratch, &all, b"")
}

fn policy(tenant: &str, metric: &str, limit: i64) -> Event {
    Event::Policy(PolicyEvent::new(
        header(&format!("policy-{tenant}"), "2026-01-01T00:00:00Z", tenant, metric),
        format!("quota-{tenant}"),
        limit,
        Window::MONTH,
        Enforcement::HARD,
        at("2026-01-01T00:00:00Z"),
    ))
}

/// A ledger made on `fs` by ingesting one policy.
fn ledger_on(fs: &Tmpfs, scratch: &Path, policy: Event) -> std::path::PathBuf {
    let ledger = fs.path().join("ledger.db");
    let file = scratch.join("policy.avro");
    write_container(&file, &[policy]);
    on(&ledger, scratch, &["ingest", "--file", file.to_str().unwrap()]).success();
    ledger
}

/// `USAGE_RECORDS` usage events; every 25th repeats the one 10 before it exactly (a duplicate). Attributes make
/// each about as large as a real one.
const USAGE_RECORDS: u64 = 12_000;

fn usage_records() -> Vec<Event> {
    (0..USAGE_RECORDS)
        .map(|i| {
            let id = if i % 25 == 24 { i - 10 } else { i };
            let mut event =
                usage(&format!("u-{id:06}"), "2026-11-02T10:00:00Z", &format!("org-{}", id % 7), 1 + id as i64 % 5);
            if let Event::Usage(u) = &mut event {
                u.request_id = Some(format!("req-{id:06}-{}", "r".repeat(24)));
                u.attributes = BTreeMap::from([
                    ("region".to_string(), format!("eu-west-{}", id % 3)),
                    ("route".to_string(), format!("/v1/models/{}/completions", id % 11)),
                ]);
            }
            event
        })
        .collect()
}

/// Recorded events and exact duplicates among the first `records` usage records.
fn expected_after(records: u64) -> (u64, u64) {
    let duplicates = (0..records).filter(|i| i % 25 == 24).count() as u64;
    (records - duplicates, duplicates)
}

/// The records of `file` a committed batch covers (`file_progress`), read straight from the ledger file.
fn file_progress(ledger: &Path) -> u64 {
    let conn = rusqlite::Connection::open_with_flags(ledger, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    conn.query_row("SELECT COALESCE(MAX(records), 0) FROM file_progress", [], |r| r.get::<_, i64>(0)).unwrap() as u64
}

/// The ledger holds exactly what its recorded progress says was committed: the policy, and the first `progress`
/// usage records with their duplicates counted once; and its chain verifies.
fn assert_consistent(ledger: &Path, scratch: &Path, progress: u64) {
    let status = on(ledger, scratch, &["status", "--json"]).success().json();
    let (recorded, duplicates) = expected_after(progress);
    assert_eq!(
        (count(&status, "events_recorded"), count(&status, "duplicates"), count(&status, "conflicts")),
        (1 + recorded, duplicates, 0),
        "after {progress} records committed: {status}"
    );
    let verified = on(ledger, scratch, &["verify", "--json"]).success().json();
    assert_eq!(verified["first_bad"], serde_json::Value::Null, "{verified}");
}

// Ingest onto a full disk: the batch that does not fit fails with exit 2 naming the full disk, every batch before
// it stays (counts and file progress agree, the chain verifies), a rerun on the still-full disk adds nothing
// wrong, and once the filler is removed a rerun resumes and ends with the exact counts, none lost or doubled.
#[test]
fn ingest_onto_a_full_disk_fails_cleanly_and_a_rerun_after_space_is_freed_ends_exact() {
    let Some(fs) = small_filesystem("ingest_onto_a_full_disk") else { return };
    let scratch = tempfile::tempdir().unwrap();
    let ledger = ledger_on(&fs, scratch.path(), policy("org-1", "requests", 1_000_000));
    let input = scratch.path().join("usage.avro");
    write_container(&input, &usage_records());
    let filler = fs.fill_leaving("filler", MARGIN_BYTES);
    let args = ["ingest", "--file", input.to_str().unwrap(), "--batch-max-events", "200", "--json"];

    let full = on(&ledger, scratch.path(), &args).expect_code(2);
    assert!(full.stderr.contains(DISK_FULL) && full.stderr.contains("stopped"), "stderr: {}", full.stderr);
    let progress = file_progress(&ledger);
    assert!(progress > 0 && progress < USAGE_RECORDS, "some batches fit, not all: {progress}");
    assert_consistent(&ledger, scratch.path(), progress);

    // Still full: whatever the rerun manages to commit, the ledger stays exactly its progress.
    let again = on(&ledger, scratch.path(), &args);
    assert_eq!(again.code, Some(2), "the disk is still full: {}", again.stderr);
    assert!(again.stderr.contains(DISK_FULL), "stderr: {}", again.stderr);
    let progress_again = file_progress(&ledger);
    assert!(progress_again >= progress, "{progress_again} < {progress}");
    assert_consistent(&ledger, scratch.path(), progress_again);

    std::fs::remove_file(&filler).unwrap();
    let report = on(&ledger, scratch.path(), &args).success().json();
    assert_eq!(
        count(&report, "resumed_after"),
        progress_again,
        "the rerun resumes after the last committed batch: {report}"
    );
    assert_consistent(&ledger, scratch.path(), USAGE_RECORDS);
    println!(
        "ingest onto a full disk: {progress} of {USAGE_RECORDS} records committed before it was full, {progress_again} \
         after a rerun on the full disk, all after the filler was removed"
    );
}

/// Checks sent by `clients` threads, with distinct keys, until `stop`: half to a tenant with a HARD limit.
fn drive(
    server: &Server,
    clients: u64,
    stop: &Arc<AtomicBool>,
    sent: &Arc<Mutex<Vec<Sent>>>,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..clients)
        .map(|c| {
            let (client, stop, sent) = (server.client(), Arc::clone(stop), Arc::clone(sent));
            std::thread::spawn(move || {
                let mut seed = (c + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let tenant = if seed % 2 == 0 { "org-1" } else { "org-2" };
                    let (key, amount) = (format!("c{c}-{i}"), (seed >> 8) as i64 % 9 + 1);
                    let reply = client.check(tenant, amount, &key);
                    let failed = !matches!(reply, Reply::Decided { .. });
                    sent.lock().unwrap().push(Sent { tenant: tenant.into(), key, amount, reply });
                    if failed {
                        // A full disk answers at once: no need to spin on it.
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    i += 1;
                }
            })
        })
        .collect()
}

fn is_failed_group(reply: &Reply) -> bool {
    matches!(reply, Reply::Refused { status: 500, .. })
}

// `serve --durability full` onto a full disk with 8 concurrent clients: while full, checks answer 500 with an error
// id (the detail, the full disk, in the log) and /healthz says recording fails naming the full disk; every decision
// answered 200 or 429 before and during is in the ledger exactly once, and no failed one is; once the filler is removed serve records again by itself (no
// restart), a failed key retried decides afresh, and after a clean stop the ledger verifies with every answer.
#[test]
fn serve_onto_a_full_disk_answers_500_loses_no_answered_decision_and_recovers_once_space_is_freed() {
    const LIMIT: i64 = 150;
    let Some(fs) = small_filesystem("serve_onto_a_full_disk") else { return };
    let scratch = tempfile::tempdir().unwrap();
    let ledger = ledger_on(&fs, scratch.path(), policy("org-1", "tokens", LIMIT));
    let filler = fs.fill_leaving("filler", MARGIN_BYTES);
    let server = Server::start(&ledger, scratch.path(), &[], &scratch.path().join("serve.err"));
    assert_eq!(server.health().1["hook"]["recording"], "ok");

    let (stop, sent) = (Arc::new(AtomicBool::new(false)), Arc::new(Mutex::new(Vec::new())));
    let clients = drive(&server, 8, &stop, &sent);
    eventually(60, "the disk fills and /healthz says recording fails", || {
        (server.health().1["hook"]["recording"] == "failing").then_some(())
    });
    // The clients meet the full disk a while: several of them were answered a failed group.
    eventually(60, "the clients were answered 500 for failed groups", || {
        let failed = sent.lock().unwrap().iter().filter(|s| is_failed_group(&s.reply)).count();
        (failed >= 8).then_some(())
    });
    let (status, health) = server.health();
    stop.store(true, Ordering::Relaxed);
    clients.into_iter().for_each(|c| c.join().unwrap());
    let mut sent = std::mem::take(&mut *sent.lock().unwrap());

    let decided = sent.iter().filter(|s| s.reply.decided().is_some()).count();
    let failed = sent.iter().filter(|s| is_failed_group(&s.reply)).count();
    assert!(decided > 0 && failed > 0, "{decided} decided, {failed} failed of {}", sent.len());
    for s in &sent {
        match &s.reply {
            Reply::Decided { .. } => {}
            Reply::Refused { status: 500, error, message } => {
                // The detail (the full disk) is in the log and /healthz, under the error id the answer names.
                assert!(error == "ledger" && message.contains("error id"), "{}: {error}: {message}", s.key)
            }
            other => panic!("{}: neither a decision nor a failed group: {other:?}", s.key),
        }
    }
    assert_eq!(
        (status, &health["status"], &health["hook"]["recording"]),
        (200, &"ok".into(), &"failing".into()),
        "{health}"
    );
    let failed_groups = health["hook"]["failed_groups"].as_u64().unwrap();
    assert!(failed_groups > 0, "{health}");
    assert!(health["hook"]["last_failure"]["message"].as_str().unwrap().contains(DISK_FULL), "{health}");
    LedgerView::read(&ledger).assert_holds(&sent, is_failed_group);

    std::fs::remove_file(&filler).unwrap();
    let mut after = 0;
    let reply = eventually(30, "serve records again once space is freed", || {
        after += 1;
        let key = format!("after-{after}");
        let reply = server.check("org-2", 1, &key);
        sent.push(Sent { tenant: "org-2".into(), key, amount: 1, reply: reply.clone() });
        reply.decided().is_some().then_some(reply)
    });
    assert!(matches!(reply, Reply::Decided { status: 200, replayed: false, .. }), "{reply:?}");
    let (status, health) = server.health();
    assert_eq!((status, &health["hook"]["recording"]), (200, &"ok".into()), "{health}");
    assert!(health["hook"]["failed_groups"].as_u64().unwrap() >= failed_groups, "{health}");
    // The operator's alert reads the same count from /metrics.
    let scraped = server.metrics();
    let counted = scraped
        .lines()
        .find_map(|line| line.strip_prefix("quota_ledger_hook_failed_groups_total "))
        .unwrap_or_else(|| panic!("no failed groups counter in\n{scraped}"));
    assert_eq!(counted.parse::<u64>().unwrap(), health["hook"]["failed_groups"].as_u64().unwrap(), "{scraped}");
    // A failed key retried is decided afresh: nothing of its failed group was recorded.
    for s in sent.iter_mut().filter(|s| is_failed_group(&s.reply)).take(20) {
        let retried = server.check(&s.tenant, s.amount, &s.key);
        assert!(matches!(retried, Reply::Decided { replayed: false, .. }), "{}: {retried:?}", s.key);
        s.reply = retried;
    }

    let exit = server.stop(Duration::from_secs(30));
    assert!(exit.success(), "serve after a clean stop: {exit}");
    let verified = on(&ledger, scratch.path(), &["verify", "--json"]).success().json();
    assert_eq!(verified["first_bad"], serde_json::Value::Null, "{verified}");
    let view = LedgerView::read(&ledger);
    view.assert_holds(&sent, is_failed_group);
    for (month, used) in view.usage_by_window("org-1", "%Y-%m") {
        assert!(used <= LIMIT, "org-1 used {used} in {month}, over its HARD limit {LIMIT}");
    }
    println!(
        "serve onto a full disk: {decided} decided and {failed} failed (500) while filling, {failed_groups} failed groups; \
         recorded again {after} checks after the filler was removed, without a restart"
    );
}

/// A HARD monthly policy of `tokens` for `tenant` that fails open.
fn open_policy(tenant: &str, limit: i64) -> Event {
    let Event::Policy(policy) = policy(tenant, "tokens", limit) else { unreachable!("a policy") };
    Event::Policy(PolicyEvent { on_failure: Some(OnFailure::OPEN), ..policy })
}

fn is_fail_open(reply: &Reply) -> bool {
    matches!(reply, Reply::Decided { status: 200, code, .. } if code == "FAIL_OPEN")
}

/// Sends `n` checks of `tenant` one after another, keys `prefix-0` on, each also pushed to `sent`.
fn checks(server: &Server, tenant: &str, prefix: &str, n: usize, sent: &mut Vec<Sent>) -> Vec<Reply> {
    (0..n)
        .map(|i| {
            let key = format!("{prefix}-{i}");
            let reply = server.check(tenant, 1, &key);
            sent.push(Sent { tenant: tenant.into(), key, amount: 1, reply: reply.clone() });
            reply
        })
        .collect()
}

// Failing open on a real full disk: while the ledger refuses writes, checks of a tenant whose policy is
// `on_failure: OPEN` are allowed and answered FAIL_OPEN, those of a CLOSED one answer 500; once space is freed the
// decisions made open are recorded by the running serve without a restart, and those made open before a SIGKILL by
// the next start; every one exactly once, saying FAIL_OPEN, with its usage counted.
#[test]
fn open_policies_answer_fail_open_on_a_full_disk_and_every_open_decision_is_recorded_once() {
    let Some(fs) = small_filesystem("open_policies_answer_fail_open") else { return };
    let scratch = tempfile::tempdir().unwrap();
    let ledger = fs.path().join("ledger.db");
    let file = scratch.path().join("policies.avro");
    write_container(&file, &[open_policy("org-open", 1_000_000), policy("org-closed", "tokens", 1_000_000)]);
    on(&ledger, scratch.path(), &["ingest", "--file", file.to_str().unwrap()]).success();
    let mut sent = Vec::new();
    let (mut made_open, mut open_usage) = (0, 0);
    for round in ["running", "killed"] {
        let server = Server::start(&ledger, scratch.path(), &[], &scratch.path().join(format!("serve-{round}.err")));
        // Before the disk fills, both are decided as always, and the spill is made beside the ledger.
        for tenant in ["org-open", "org-closed"] {
            let replies = checks(&server, tenant, &format!("{round}-before-{tenant}"), 3, &mut sent);
            assert!(replies.iter().all(|r| matches!(r, Reply::Decided { status: 200, code, .. } if code == "OK")));
        }
        open_usage += 3;
        assert!(fs.path().join("ledger.db.spill").exists(), "the spill is made once a policy is OPEN");
        let filler = fs.fill_leaving("filler", 64 << 10);
        let mut i = 0;
        eventually(60, "the disk is full and recording fails", || {
            i += 1;
            let reply = checks(&server, "org-closed", &format!("{round}-filling-{i}"), 1, &mut sent).remove(0);
            is_failed_group(&reply).then_some(())
        });
        // A full disk may still take a group now and then (SQLite reuses the pages a checkpoint frees): those are
        // decided as always. Every other one fails closed, or open.
        let closed = checks(&server, "org-closed", &format!("{round}-full-closed"), 10, &mut sent);
        let ok = |r: &Reply| matches!(r, Reply::Decided { status: 200, code, .. } if code == "OK");
        assert!(closed.iter().all(|r| is_failed_group(r) || ok(r)), "CLOSED answers 500 when full: {closed:?}");
        assert!(closed.iter().filter(|r| is_failed_group(r)).count() >= 5, "{closed:?}");
        let open = checks(&server, "org-open", &format!("{round}-full-open"), 10, &mut sent);
        assert!(open.iter().all(|r| is_fail_open(r) || ok(r)), "OPEN answers FAIL_OPEN when full: {open:?}");
        let opened: Vec<usize> = (0..open.len()).filter(|&i| is_fail_open(&open[i])).collect();
        assert!(opened.len() >= 5, "{open:?}");
        made_open += opened.len();
        open_usage += open.len() as i64;
        // A retry of a key made open answers the same decision.
        let again = server.check("org-open", 1, &format!("{round}-full-open-{}", opened[0]));
        assert!(matches!(&again, Reply::Decided { replayed: true, .. }) && is_fail_open(&again), "{again:?}");
        assert!(server.metrics().contains(r#"quota_ledger_decisions_total{code="FAIL_OPEN""#));
        if round == "running" {
            std::fs::remove_file(&filler).unwrap();
            let mut after = 0;
            eventually(30, "serve records again once space is freed", || {
                after += 1;
                let reply = checks(&server, "org-closed", &format!("{round}-after-{after}"), 1, &mut sent).remove(0);
                reply.decided().is_some().then_some(())
            });
            let exit = server.stop(Duration::from_secs(30));
            let log = std::fs::read_to_string(scratch.path().join("serve-running.err")).unwrap();
            assert!(exit.success(), "serve after a clean stop: {exit}; its log:\n{log}");
        } else {
            server.kill();
            std::fs::remove_file(&filler).unwrap();
            let server = Server::start(&ledger, scratch.path(), &[], &scratch.path().join("serve-restarted.err"));
            // The start recorded them: a retry is answered from the ledger, as made open.
            let again = server.check("org-open", 1, &format!("{round}-full-open-{}", opened[opened.len() - 1]));
            assert!(matches!(&again, Reply::Decided { replayed: true, .. }) && is_fail_open(&again), "{again:?}");
            let exit = server.stop(Duration::from_secs(30));
            assert!(exit.success(), "serve after a clean stop: {exit}");
        }
        let view = LedgerView::read(&ledger);
        view.assert_holds(&sent, is_failed_group);
        let open_recorded: Vec<&RecordedDecision> =
            view.decisions.values().flatten().filter(|d| d.reason == "FAIL_OPEN").collect();
        assert_eq!(
            open_recorded.len(),
            made_open,
            "every decision made open is recorded once, after the {round} round"
        );
        let used: i64 = view.usage.iter().filter(|(tenant, ..)| tenant == "org-open").map(|(.., q)| q).sum();
        assert_eq!(used, open_usage, "the usage of decisions made open counts");
    }
    let verified = on(&ledger, scratch.path(), &["verify", "--json"]).success().json();
    assert_eq!(verified["first_bad"], serde_json::Value::Null, "{verified}");
    // Reconcile counts their usage like any other, and says how much was allowed open.
    let as_of = Timestamp(Timestamp::now().micros() + 60_000_000).to_string();
    let report = on(&ledger, scratch.path(), &["reconcile", "--as-of", &as_of, "--dry-run", "--json"]).success().json();
    let expected =
        serde_json::json!([{"tenant": "org-open", "metric": "tokens", "decisions": made_open, "amount": made_open}]);
    assert_eq!(report["read"]["allowed_open"], expected, "{report}");
}
