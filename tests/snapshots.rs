//! The hook's snapshots of its state in the ledger (contract §6): `serve` killed at arbitrary points while it takes
//! snapshots continuously, then started from the snapshot, answers what a start that folds the whole ledger answers,
//! and what the ledger holds.

#[path = "support/hook_http.rs"]
mod hook_http;
mod support;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use hook_http::{LedgerView, Reply, SECRET, Server};
use schemas::*;
use serde_json::Value;
use support::*;

/// (tenant, limit) of the scenario's policies: a day's and a month's.
const DAILY: (&str, i64) = ("org-1", 400);
const MONTHLY: (&str, i64) = ("org-2", 900);
/// Kills, each followed by two starts compared.
const ROUNDS: u64 = 4;

fn policy(tenant: &str, limit: i64, window: Window) -> Event {
    Event::Policy(PolicyEvent::new(
        header(&format!("policy-{tenant}"), "2026-01-01T00:00:00Z", tenant, "tokens"),
        format!("quota-{tenant}"),
        limit,
        window,
        Enforcement::HARD,
        at("2026-01-01T00:00:00Z"),
    ))
}

/// The quotas `server` answers for `tenant`, without the instant asked at.
fn quotas(server: &Server, tenant: &str) -> Value {
    let (status, answer) = server.get(&format!("/v1/quotas?tenant={tenant}"), SECRET);
    assert_eq!(status, 200, "{answer}");
    answer["quotas"].clone()
}

/// `serve` on `ledger` with `args`, its stderr in `log`.
fn start(ledger: &TestLedger, log: &Path, args: &[&str]) -> Server {
    Server::start_with_args(&ledger.path, ledger.dir.path(), &[], log, "", args)
}

/// Checks from a client thread until `stop`, amounts from `seed`; kept as the model.
fn checks(server: &Server, round: u64, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<Reply>> {
    let client = server.client();
    std::thread::spawn(move || {
        let mut replies = Vec::new();
        let mut state = round;
        for i in 0.. {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let tenant = if i % 2 == 0 { DAILY.0 } else { MONTHLY.0 };
            let amount = 1 + (splitmix(&mut state) % 9) as i64;
            let reply = client.check(tenant, amount, &format!("r{round}-{i}"));
            let lost = matches!(reply, Reply::Lost(_));
            replies.push(reply);
            if lost {
                break;
            }
        }
        replies
    })
}

/// splitmix64: amounts and kill points that differ by round, the same on every run.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut x = *state;
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

// contract §6: serve killed (SIGKILL) while it takes a snapshot every few entries, at a point that differs by round,
// starts from its snapshot answering the quotas a full fold answers, which are what the ledger holds.
#[test]
fn a_start_after_a_kill_around_a_snapshot_answers_what_a_full_fold_answers() {
    let ledger = TestLedger::new();
    let file = ledger.file("policies.avro");
    write_container(&file, &[policy(DAILY.0, DAILY.1, Window::DAY), policy(MONTHLY.0, MONTHLY.1, Window::MONTH)]);
    ledger.ingest(&file);
    let mut from_snapshots = 0;
    for round in 0..ROUNDS {
        let log = ledger.file(&format!("serve-{round}.log"));
        let server = start(&ledger, &log, &["--snapshot-every-entries", "3", "--snapshot-check-ms", "1"]);
        let stop = Arc::new(AtomicBool::new(false));
        let client = checks(&server, round, Arc::clone(&stop));
        // Killed after a number of snapshots that differs by round, while checks and snapshots go on.
        let snapshots = 1 + round as usize;
        eventually(60, "snapshots recorded", || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            (text.matches("recorded a snapshot of the state").count() >= snapshots).then_some(())
        });
        server.kill();
        stop.store(true, Ordering::Relaxed);
        let replies = client.join().expect("the client thread");
        assert!(replies.iter().any(|r| r.decided().is_some()), "round {round}: some checks were decided");

        let restarted_log = ledger.file(&format!("restarted-{round}.log"));
        let restarted = start(&ledger, &restarted_log, &["--snapshot-every-entries", "0"]);
        let answered = (quotas(&restarted, DAILY.0), quotas(&restarted, MONTHLY.0));
        restarted.kill();
        let started_log = std::fs::read_to_string(&restarted_log).unwrap_or_default();
        if logged(&started_log, "started from the snapshot of the state", "snapshot_watermark") {
            from_snapshots += 1;
        }

        let folded_log = ledger.file(&format!("folded-{round}.log"));
        let folded = start(&ledger, &folded_log, &["--snapshot-every-entries", "0", "--full-fold"]);
        let truth = (quotas(&folded, DAILY.0), quotas(&folded, MONTHLY.0));
        folded.kill();
        let folded_log = std::fs::read_to_string(&folded_log).unwrap_or_default();
        assert!(logged(&folded_log, "no snapshot of the state used", "reason"), "{folded_log}");
        assert_eq!(answered, truth, "round {round}: the start from the snapshot answers what a full fold answers");
        assert_used_is_the_ledgers(&ledger.path, &truth);
    }
    assert!(from_snapshots > 0, "no start used a snapshot: the comparison proved nothing");
}

/// Whether a line of `log` says `message` with the field `field`, whatever its value.
fn logged(log: &str, message: &str, field: &str) -> bool {
    let prefix = format!("{field}=");
    log.lines().any(|line| line.contains(message) && line.split_whitespace().any(|word| word.starts_with(&prefix)))
}

/// Each tenant's consumption in the quotas answered is the usage the ledger holds in that window, summed here.
fn assert_used_is_the_ledgers(path: &Path, (daily, monthly): &(Value, Value)) {
    let view = LedgerView::read(path);
    let consumed = |quotas: &Value| quotas[0]["consumed"].as_i64().unwrap_or_else(|| panic!("no consumed in {quotas}"));
    // The window's start (RFC 3339, UTC) names it as `usage_by_window` does: its day, or its month.
    let of = |quotas: &Value, tenant: &str, format: &str, length: usize| {
        let start = quotas[0]["window_start"].as_str().unwrap_or_else(|| panic!("no window_start in {quotas}"));
        view.usage_by_window(tenant, format).get(&start[..length]).copied().unwrap_or(0)
    };
    assert_eq!(consumed(daily), of(daily, DAILY.0, "%Y-%m-%d", 10), "{daily}");
    assert_eq!(consumed(monthly), of(monthly, MONTHLY.0, "%Y-%m", 7), "{monthly}");
}
