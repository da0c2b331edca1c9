//! Durability, not only atomicity: `serve --durability full` and `ingest --file` run under an LD_PRELOAD shim that journals every write no sync covered yet; after a SIGKILL at a seeded instant a simulated power cut keeps any subset of those writes (or none), and the reopened ledger verifies, holds every decision answered before the cut once with its outcome, within its HARD limits, replays it after a restart, and a rerun of ingest ends exact.

#[path = "support/fault_fs.rs"]
mod fault_fs;
#[path = "support/hook_http.rs"]
mod hook_http;
mod support;

use std::collections::{BTreeMap, HashMap};
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fault_fs::{CutReport, Intercepted, Keep, Record, Shim, SyncCall, power_cut, read_journal, splitmix};
use hook_http::{LedgerView, Reply, Sent, Server};
use schemas::*;
use support::*;

/// Seeds of the serve scenario; the ingest scenario's follow, so that `POWER_CUT_SEED=N` names one run of either.
const SERVE_SEEDS: RangeInclusive<u64> = 1..=150;
const INGEST_SEEDS: RangeInclusive<u64> = 151..=210;
/// Every fifth serve seed fails a sync before the cut: one of the hook's syncs of the log (its own `fdatasync`), or
/// any sync.
const SERVE_FAILED_SYNC_EVERY: u64 = 5;
/// Every fourth ingest seed fails one of SQLite's syncs (`fsync`: ingest commits at synchronous=FULL).
const INGEST_FAILED_SYNC_EVERY: u64 = 4;
/// How long serve may run on after a failed sync before the cut, in milliseconds.
const AFTER_FAILED_SYNC_MS: u64 = 2_500;
/// Concurrent HTTP clients of each serve run.
const CLIENTS: u64 = 3;
/// Longest run before the SIGKILL, in milliseconds: long enough for groups, syncs and background checkpoints.
const SERVE_KILL_WITHIN_MS: u64 = 700;
/// The early kills of the ingest scenario land this soon after the start.
const INGEST_EARLY_KILL_WITHIN_MS: u64 = 150;

/// The HARD limits of the serve scenario (tokens): a monthly one soon exhausted, a daily one, and a tenant with
/// no policy at all.
const TIGHT: (&str, i64) = ("org-tight", 150);
const DAILY: (&str, i64) = ("org-daily", 400);
const FREE: &str = "org-free";

/// The seeds to run of `range`: all, or only `POWER_CUT_SEED` when it is set (none when it is another range's).
fn seeds(range: RangeInclusive<u64>) -> Vec<u64> {
    match std::env::var("POWER_CUT_SEED") {
        Ok(seed) => {
            let seed: u64 = seed.parse().unwrap_or_else(|e| panic!("POWER_CUT_SEED={seed:?}: {e}"));
            if range.contains(&seed) { vec![seed] } else { vec![] }
        }
        Err(_) => range.collect(),
    }
}

/// A seed's two directories, the ledger's (under the shim) and a scratch one (the journal, logs): removed after
/// the run, but kept and named when one seed runs alone (`POWER_CUT_SEED`), with a copy of the ledger's files as
/// the kill left them (`before-cut` in the scratch directory), to be looked at.
fn seed_dirs(seed: u64) -> (tempfile::TempDir, tempfile::TempDir) {
    let (mut dir, mut scratch) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    if std::env::var_os("POWER_CUT_SEED").is_some() {
        dir.disable_cleanup(true);
        scratch.disable_cleanup(true);
        eprintln!(
            "seed {seed}: the ledger in {}, the journal and logs in {}",
            dir.path().display(),
            scratch.path().display()
        );
    }
    (dir, scratch)
}

/// Reads the journal and cuts the power (see [`power_cut`]), first copying the files as the kill left them when
/// one seed runs alone; then removes SQLite's shared-memory index, which is rebuilt from the log at the next open
/// (not durable state).
fn cut_power(dir: &Path, scratch: &Path, journal: &Path, random: &mut u64) -> (Intercepted, CutReport) {
    if std::env::var_os("POWER_CUT_SEED").is_some() {
        let copy = scratch.join("before-cut");
        std::fs::create_dir_all(&copy).unwrap();
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), copy.join(entry.file_name())).unwrap();
        }
    }
    let records = read_journal(journal);
    let cut = power_cut(&records, keep_of(splitmix(random)), &mut || splitmix(random));
    remove_shared_memory(&dir.join("ledger.db"));
    (Intercepted::of(&records), cut)
}

/// Says which seed failed, and how to run it alone, when a seed's checks panic.
struct SeedGuard(u64, &'static str);

impl Drop for SeedGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "power cut seed {} ({}) failed: rerun it alone with POWER_CUT_SEED={} cargo test --test power_cut",
                self.0, self.1, self.0
            );
        }
    }
}

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

/// A ledger holding the serve scenario's policies, made once and copied for every seed.
fn policy_ledger() -> TestLedger {
    let template = TestLedger::new();
    let file = template.file("policies.avro");
    write_container(&file, &[policy(TIGHT.0, TIGHT.1, Window::MONTH), policy(DAILY.0, DAILY.1, Window::DAY)]);
    template.ingest(&file);
    template
}

/// Runs the binary on a ledger anywhere.
fn on(ledger: &Path, scratch: &Path, args: &[&str]) -> Run {
    let mut all = vec!["--ledger", ledger.to_str().expect("a UTF-8 path")];
    all.extend_from_slice(args);
    run_in(scratch, &all, b"")
}

fn assert_verifies(ledger: &Path, scratch: &Path) {
    let verified = on(ledger, scratch, &["verify", "--json"]).success().json();
    assert_eq!(verified["first_bad"], serde_json::Value::Null, "verify after the cut: {verified}");
}

/// SQLite's shared-memory index is rebuilt from the log at the next open: not durable state.
fn remove_shared_memory(ledger: &Path) {
    let mut shm = ledger.as_os_str().to_owned();
    shm.push("-shm");
    let _ = std::fs::remove_file(PathBuf::from(shm));
}

/// How a cut treats the writes no sync covered: mostly a random half, sometimes none, sometimes all.
fn keep_of(random: u64) -> Keep {
    match random % 10 {
        0..=2 => Keep::None,
        3 => Keep::All,
        _ => Keep::Some(50),
    }
}

/// What one seed saw, for the summary.
#[derive(Debug, Default, Clone, Copy)]
struct Figures {
    intercepted: Intercepted,
    cut: CutReport,
    /// Checks answered 200 or 429 (serve), or records seen committed by a reader (ingest), before the kill.
    answered: u64,
    /// The injected sync failure was seen (serve: an answer saying not durable; ingest: exit 2 before the kill).
    failure_seen: bool,
}

/// Whether the journal records a sync the shim failed.
fn sync_failed(journal: &Path) -> bool {
    read_journal(journal).iter().any(|r| matches!(r, Record::SyncFailed { .. }))
}

/// Over every seed of a scenario, the faults it claims to inject fired: some cuts lost unsynced writes, and some
/// lost writes a failed sync should have covered (each seed told to fail a sync was checked to have failed one).
fn assert_faults_fired(scenario: &str, figures: &[Figures]) {
    let cuts_that_lost = figures.iter().filter(|f| f.cut.lost > 0).count();
    assert!(cuts_that_lost * 10 >= figures.len(), "{scenario}: only {cuts_that_lost} cuts lost an unsynced write");
    let failed = figures.iter().filter(|f| f.intercepted.failed_syncs > 0).count();
    assert!(failed > 0, "{scenario}: no seed failed a sync");
    let dropped: u64 = figures.iter().map(|f| f.cut.dropped_by_failed_sync).sum();
    assert!(dropped > 0, "{scenario}: no write was dropped by a failed sync in {failed} seeds that failed one");
    let seen = figures.iter().filter(|f| f.failure_seen).count();
    assert!(seen > 0, "{scenario}: no run showed its failed sync to its user");
}

fn summary(scenario: &str, figures: &[Figures], started: Instant) {
    if figures.is_empty() {
        return;
    }
    let calls: Vec<u64> = figures.iter().map(|f| f.intercepted.calls()).collect();
    let n = figures.len() as u64;
    let lost = figures.iter().filter(|f| f.cut.lost > 0).count();
    println!(
        "power cuts under {scenario}: {n} seeds in {:.1} s; intercepted calls per run min {} mean {} max {} (writes {}, \
         syncs {}, truncates {} in all); {lost} cuts lost unsynced writes ({} writes lost of {} unsynced, {} dropped \
         by a failed sync); {} answered before the kill in all; the injected sync failure seen in {} runs",
        started.elapsed().as_secs_f64(),
        calls.iter().min().unwrap(),
        calls.iter().sum::<u64>() / n,
        calls.iter().max().unwrap(),
        figures.iter().map(|f| f.intercepted.writes).sum::<u64>(),
        figures.iter().map(|f| f.intercepted.syncs).sum::<u64>(),
        figures.iter().map(|f| f.intercepted.truncates).sum::<u64>(),
        figures.iter().map(|f| f.cut.lost).sum::<u64>(),
        figures.iter().map(|f| f.cut.unsynced).sum::<u64>(),
        figures.iter().map(|f| f.cut.dropped_by_failed_sync).sum::<u64>(),
        figures.iter().map(|f| f.answered).sum::<u64>(),
        figures.iter().filter(|f| f.failure_seen).count(),
    );
}

// contract §4 and 6 under power cuts: every decision `serve --durability full` answered before a SIGKILL and a
// simulated power cut is in the reopened ledger once, with its outcome; the ledger verifies; no HARD limit is
// exceeded; after a restart each answered key replays its decision. Every fifth seed fails one of the hook's
// syncs first: nothing is answered 200 or 429 that the disk does not hold, and /healthz says 503 not_durable.
#[test]
fn serve_loses_no_answered_decision_to_a_power_cut() {
    let seeds = seeds(SERVE_SEEDS);
    if seeds.is_empty() {
        return;
    }
    let (started, shim, template) = (Instant::now(), Shim::build(), policy_ledger());
    let figures: Vec<Figures> = seeds.iter().map(|&seed| serve_seed(seed, &shim, &template.path)).collect();
    summary("serve", &figures, started);
    if figures.len() == SERVE_SEEDS.count() {
        assert_faults_fired("serve", &figures);
    }
}

fn serve_seed(seed: u64, shim: &Shim, template: &Path) -> Figures {
    let _guard = SeedGuard(seed, "serve");
    let mut random = seed.wrapping_mul(0x2545_f491_4f6c_dd1d);
    let (dir, scratch) = seed_dirs(seed);
    let ledger = dir.path().join("ledger.db");
    std::fs::copy(template, &ledger).expect("the policy ledger is copied");
    let journal = scratch.path().join("journal");
    // Half of them the hook's own sync of the log, half any sync (SQLite's of the log or the database file in a
    // background checkpoint too).
    let call = if seed.is_multiple_of(2 * SERVE_FAILED_SYNC_EVERY) { SyncCall::Any } else { SyncCall::Fdatasync };
    // Which sync: one of the first few (the log new, its pages written for the first time since the last
    // checkpoint) or a later one.
    let nth = 1 + splitmix(&mut random) % if splitmix(&mut random).is_multiple_of(2) { 4 } else { 40 };
    let fail_sync = (seed.is_multiple_of(SERVE_FAILED_SYNC_EVERY)).then_some((nth, call));
    let env = shim.env(dir.path(), &journal, fail_sync);
    let server = Server::start(&ledger, scratch.path(), &env, &scratch.path().join("serve.err"));

    let load = Arc::new(Load { faulty: fail_sync.is_some(), ..Load::default() });
    let clients = load.start(&server, seed, &mut random);
    eventually(20, "a first answer", || (!load.sent.lock().unwrap().is_empty()).then_some(()));
    if fail_sync.is_some() {
        // The cut comes after the injected failure, or this seed proves nothing about failed syncs.
        eventually(30, "the injected sync failure", || sync_failed(&journal).then_some(()));
    }
    std::thread::sleep(Duration::from_millis(splitmix(&mut random) % SERVE_KILL_WITHIN_MS));
    let read_log = || std::fs::read_to_string(scratch.path().join("serve.err")).unwrap_or_default();
    if fail_sync.is_some_and(|(_, call)| call == SyncCall::Fdatasync) {
        // The hook's own sync failed: serve says so.
        eventually(10, "serve's word that the log could not be synced", || {
            read_log().contains("could not be synced").then_some(())
        });
    }
    let log = read_log();
    if fail_sync.is_some() && log.contains("could not be synced") {
        load.not_durable.store(true, Ordering::Relaxed);
        // The failed sync is final: /healthz says so (the one case where a probe should restart serve).
        let (status, health) = server.health();
        assert_eq!(
            (status, &health["status"], &health["hook"]["recording"]),
            (503, &"not_durable".into(), &"not_durable".into()),
            "{health}"
        );
        // The process lives on after a failed sync until someone restarts it: its background checkpoints run on
        // (every 250 ms, a second after one fails). Let some of them run before the cut.
        std::thread::sleep(Duration::from_millis(splitmix(&mut random) % AFTER_FAILED_SYNC_MS));
    }
    server.kill();
    let mut sent = load.finish(clients);

    let (intercepted, cut) = cut_power(dir.path(), scratch.path(), &journal, &mut random);
    assert!(
        intercepted.writes > 0 && intercepted.syncs + intercepted.failed_syncs > 0,
        "the shim intercepted nothing: {intercepted:?}"
    );
    assert_eq!(intercepted.failed_syncs, u64::from(fail_sync.is_some()), "the failures injected: {intercepted:?}");

    assert_verifies(&ledger, scratch.path());
    let view = LedgerView::read(&ledger);
    // A check answered 500 (not durable) or not answered at all may or may not be recorded; an answered one must be.
    view.assert_holds(&sent, |_| false);
    assert_within_limits(&view);

    replay_after_restart(&ledger, scratch.path(), &mut sent, &view, &mut random);
    let view = LedgerView::read(&ledger);
    view.assert_holds(&sent, |_| false);
    assert_within_limits(&view);
    Figures {
        intercepted,
        cut,
        answered: sent.iter().filter(|s| s.reply.decided().is_some()).count() as u64,
        failure_seen: load.not_durable.load(Ordering::Relaxed),
    }
}

// Once the hook's sync of the log failed, no checkpoint copies the log into the database file any more. The kernel
// may have dropped the pages of the log that sync covered (and reports the next sync clean); a database file holding
// them beside a log on the disk that lacks them is a corrupt ledger after a power cut ("database disk image is
// malformed"), not one missing the groups that were never answered. The seeds above that fail a sync would
// otherwise end with such a ledger.
#[test]
fn after_a_failed_sync_of_the_log_no_checkpoint_copies_it_into_the_database_file() {
    let (shim, template) = (Shim::build(), policy_ledger());
    let (dir, scratch) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let ledger = dir.path().join("ledger.db");
    std::fs::copy(&template.path, &ledger).unwrap();
    let journal = scratch.path().join("journal");
    let env = shim.env(dir.path(), &journal, Some((2, SyncCall::Fdatasync)));
    let server = Server::start(&ledger, scratch.path(), &env, &scratch.path().join("serve.err"));
    let mut sent = Vec::new();
    for i in 0..10 {
        let key = format!("one-at-a-time-{i}");
        let reply = server.check(FREE, 1, &key);
        let failed = matches!(&reply, Reply::Refused { status: 500, .. });
        sent.push(Sent { tenant: FREE.into(), key, amount: 1, reply });
        if failed {
            break;
        }
    }
    assert!(matches!(sent.last().map(|s| &s.reply), Some(Reply::Refused { status: 500, .. })), "{sent:?}");
    // The background thread checkpoints every 250 ms until it sees the failed sync: killed once it has stopped, so
    // that every checkpoint it would make has been made (a thread that went on checkpointing fails here).
    let pid = server.child.id();
    eventually(30, "serve's checkpoint thread stopped after the failed sync", || (!checkpointing(pid)).then_some(()));
    server.kill();

    let records = read_journal(&journal);
    let database = records.iter().find_map(|r| match r {
        Record::Path { path, name } if *name == ledger.canonicalize().unwrap() => Some(*path),
        _ => None,
    });
    let failed = records.iter().position(|r| matches!(r, Record::SyncFailed { .. })).expect("the sync failed");
    let copied = records[failed..]
        .iter()
        .filter(|r| matches!(r, Record::Change { path, .. } if Some(*path) == database))
        .count();
    assert_eq!(copied, 0, "writes to the database file after the log's sync failed: a checkpoint copied the log");
    power_cut(&records, Keep::None, &mut || 0);
    remove_shared_memory(&ledger);
    assert_verifies(&ledger, scratch.path());
    LedgerView::read(&ledger).assert_holds(&sent, |_| false);
}

/// The client threads of a serve run: when they stop, what they sent, and whether an answer said not durable.
#[derive(Default)]
struct Load {
    stop: AtomicBool,
    not_durable: AtomicBool,
    sent: Mutex<Vec<Sent>>,
    /// A sync fails in this run: besides answers saying not durable, a group whose own commit met the failure
    /// (SQLite's sync of a new log's header) is answered 500 with the ledger's error.
    faulty: bool,
}

impl Load {
    /// [`CLIENTS`] threads sending checks until [`Load::finish`] or until the server is gone.
    fn start(self: &Arc<Load>, server: &Server, seed: u64, random: &mut u64) -> Vec<std::thread::JoinHandle<()>> {
        (0..CLIENTS)
            .map(|c| {
                let (load, client, mut random) = (Arc::clone(self), server.client(), splitmix(random));
                std::thread::spawn(move || load.send_checks(seed, c, &client, &mut random))
            })
            .collect()
    }

    /// Stops the clients: what they sent, and what came back.
    fn finish(&self, clients: Vec<std::thread::JoinHandle<()>>) -> Vec<Sent> {
        self.stop.store(true, Ordering::Relaxed);
        clients.into_iter().for_each(|c| c.join().expect("a client thread"));
        std::mem::take(&mut *self.sent.lock().unwrap())
    }

    /// One client: checks with distinct keys over the three tenants.
    fn send_checks(&self, seed: u64, c: u64, client: &hook_http::Client, random: &mut u64) {
        let mut i = 0;
        while !self.stop.load(Ordering::Relaxed) {
            let tenant = [TIGHT.0, DAILY.0, FREE][(splitmix(random) % 3) as usize];
            let (key, amount) = (format!("s{seed}-c{c}-{i}"), (splitmix(random) % 9 + 1) as i64);
            let reply = client.check(tenant, amount, &key);
            match &reply {
                Reply::Decided { replayed, .. } => assert!(!replayed, "{key} is new, yet replayed: {reply:?}"),
                // A 500 says only "not decided or recorded" with an error id; whether a sync failed is in the log.
                Reply::Refused { status: 500, error, .. } if self.faulty && error == "ledger" => {}
                Reply::Refused { .. } => panic!("{key}: an answer neither a decision nor a failed sync: {reply:?}"),
                Reply::Lost(_) => {}
            }
            let (lost, refused) = (matches!(reply, Reply::Lost(_)), matches!(reply, Reply::Refused { .. }));
            self.sent.lock().unwrap().push(Sent { tenant: tenant.into(), key, amount, reply });
            if lost {
                return;
            }
            if refused {
                // Every request may fail at once now: no need to spin on it.
                std::thread::sleep(Duration::from_millis(2));
            }
            i += 1;
        }
    }
}

/// No HARD limit exceeded in any window: the monthly one per month, the daily one per day.
fn assert_within_limits(view: &LedgerView) {
    for (tenant, limit, format) in [(TIGHT.0, TIGHT.1, "%Y-%m"), (DAILY.0, DAILY.1, "%Y-%m-%d")] {
        for (window, used) in view.usage_by_window(tenant, format) {
            assert!(used <= limit, "{tenant} used {used} in {window}, over its HARD limit {limit}");
        }
    }
}

/// Restarts serve (no shim) on the ledger after the cut: every answered key asked again replays its decision;
/// a key never answered replays what the ledger holds of it, or is decided afresh if it holds nothing.
fn replay_after_restart(ledger: &Path, scratch: &Path, sent: &mut [Sent], view: &LedgerView, random: &mut u64) {
    let server = Server::start(ledger, scratch, &[], &scratch.join("serve-restarted.err"));
    let (status, health) = server.health();
    assert_eq!((status, &health["hook"]["recording"]), (200, &"ok".into()), "after the restart: {health}");
    let answered: Vec<usize> = (0..sent.len()).filter(|&i| sent[i].reply.decided().is_some()).collect();
    let unanswered: Vec<usize> = (0..sent.len()).filter(|&i| sent[i].reply.decided().is_none()).collect();
    // Distinct checks: a key asked twice here would replay what this restart decided.
    let pick = |from: &[usize], n: usize, random: &mut u64| -> Vec<usize> {
        let mut from = from.to_vec();
        for i in 0..n.min(from.len()) {
            let j = i + (splitmix(random) % (from.len() - i) as u64) as usize;
            from.swap(i, j);
        }
        from.truncate(n);
        from
    };
    for i in pick(&answered, 8, random) {
        let s = &sent[i];
        let (status, decision_id) = s.reply.decided().expect("answered");
        let again = server.check(&s.tenant, s.amount, &s.key);
        let Reply::Decided { code, .. } = &s.reply else { unreachable!("answered") };
        let expected =
            Reply::Decided { status, decision_id: decision_id.to_string(), replayed: true, code: code.clone() };
        assert_eq!(again, expected, "{}/{} asked again after the cut and a restart", s.tenant, s.key);
    }
    for i in pick(&unanswered, 3, random) {
        let s = &mut sent[i];
        let again = server.check(&s.tenant, s.amount, &s.key);
        match view.decisions.get(&(s.tenant.clone(), s.key.clone())) {
            Some(recorded) => assert!(
                matches!(&again, Reply::Decided { decision_id, replayed: true, .. } if *decision_id == recorded[0].decision_id),
                "{}: recorded as {recorded:?} though never answered; asked again: {again:?}",
                s.key
            ),
            None => assert!(matches!(again, Reply::Decided { replayed: false, .. }), "{}: {again:?}", s.key),
        }
        s.reply = again;
    }
    let exit = server.stop(Duration::from_secs(30));
    assert!(exit.success(), "serve restarted after the cut, stopped: {exit}");
}

/// The ingest scenario's file: usage events with two attributes each; every 25th repeats the one 10 before it
/// exactly (a duplicate), every 40th the one 3 before it with another quantity (a conflicting duplicate).
const INGEST_RECORDS: u64 = 3_000;

fn ingest_records() -> Vec<Event> {
    (0..INGEST_RECORDS)
        .map(|i| {
            let (id, quantity) = match i {
                _ if i % 25 == 24 => (i - 10, 1 + (i - 10) as i64 % 7),
                _ if i % 40 == 39 => (i - 3, 1_000 + i as i64),
                _ => (i, 1 + i as i64 % 7),
            };
            let mut event = usage(&format!("u-{id:05}"), "2026-11-02T10:00:00Z", &format!("org-{}", id % 5), quantity);
            if let Event::Usage(u) = &mut event {
                u.attributes = BTreeMap::from([
                    ("region".to_string(), format!("eu-{}", id % 3)),
                    ("route".to_string(), format!("/v1/r{}", id % 4)),
                ]);
            }
            event
        })
        .collect()
}

/// Recorded, exact duplicates and conflicting duplicates among the first `records` of the file.
fn expected_counts(events: &[Event], records: u64) -> (u64, u64, u64) {
    let mut seen: HashMap<&str, Vec<i64>> = HashMap::new();
    let (mut recorded, mut duplicates, mut conflicts) = (0, 0, 0);
    for event in &events[..records as usize] {
        let Event::Usage(u) = event else { unreachable!("usage only") };
        let copies = seen.entry(&u.header.event_id).or_default();
        match () {
            _ if copies.is_empty() => recorded += 1,
            _ if copies.contains(&u.quantity) => duplicates += 1,
            _ => conflicts += 1,
        }
        copies.push(u.quantity);
    }
    (recorded, duplicates, conflicts)
}

const PROGRESS: &str = "SELECT COALESCE(MAX(records), 0) FROM file_progress WHERE path LIKE '%usage.avro'";

/// Records of the file a committed batch covers, read straight from the ledger file after the cut (`None` when
/// there is no ledger). Opened for writing, as the next ingest opens it: a cut can leave a hot rollback journal of
/// the commit that was under way, which only a connection that may write rolls back (a read-only one cannot open
/// the file at all).
fn file_progress(ledger: &Path) -> Option<u64> {
    if !ledger.exists() {
        return None;
    }
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
    progress_of(&rusqlite::Connection::open_with_flags(ledger, flags).ok()?)
}

fn open_read_only(ledger: &Path) -> Option<rusqlite::Connection> {
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
    rusqlite::Connection::open_with_flags(ledger, flags).ok()
}

fn progress_of(reader: &rusqlite::Connection) -> Option<u64> {
    reader.query_row(PROGRESS, [], |r| r.get::<_, i64>(0)).ok().map(|n| n as u64)
}

/// A reader kept open while ingest runs: it sees a batch once the batch's commit returned, which at
/// synchronous=FULL is once the log is synced, so what it saw must survive the cut. Kept open, because a reader
/// that opens the ledger after ingest closed it (ingest exits 2 on a failed sync) rebuilds SQLite's index from the
/// log file, and the log file holds the frames of the very commit whose sync failed: that reader sees the failed
/// batch committed, and a power cut may then take it away again.
#[derive(Default)]
struct Watcher {
    reader: Option<rusqlite::Connection>,
    seen: u64,
}

impl Watcher {
    fn look(&mut self, ledger: &Path) {
        if self.reader.is_none() {
            // Kept only once it reads the ledger's tables: a ledger being made has none yet.
            self.reader = open_read_only(ledger).filter(|reader| progress_of(reader).is_some());
        }
        if let Some(progress) = self.reader.as_ref().and_then(progress_of) {
            self.seen = self.seen.max(progress);
        }
    }
}

// contract §4.2 under power cuts: `ingest --file` SIGKILLed at a seeded instant, then a power cut: every batch a reader
// saw committed is still there, the ledger holds exactly the records its progress covers and verifies, and a rerun
// resumes and ends with the file's exact counts. Every fourth seed fails one of SQLite's syncs first.
#[test]
fn ingest_loses_no_committed_batch_to_a_power_cut() {
    let seeds = seeds(INGEST_SEEDS);
    if seeds.is_empty() {
        return;
    }
    let (started, shim, template) = (Instant::now(), Shim::build(), policy_ledger());
    let inputs = tempfile::tempdir().unwrap();
    let input = inputs.path().join("usage.avro");
    let events = ingest_records();
    write_container(&input, &events);
    let figures: Vec<Figures> =
        seeds.iter().map(|&seed| ingest_seed(seed, &shim, &template.path, &input, &events)).collect();
    summary("ingest", &figures, started);
    if figures.len() == INGEST_SEEDS.count() {
        assert_faults_fired("ingest", &figures);
    }
}

fn ingest_seed(seed: u64, shim: &Shim, template: &Path, input: &Path, events: &[Event]) -> Figures {
    let _guard = SeedGuard(seed, "ingest");
    let mut random = seed.wrapping_mul(0x2545_f491_4f6c_dd1d);
    let (dir, scratch) = seed_dirs(seed);
    let ledger = dir.path().join("ledger.db");
    // One seed in three lets ingest create the ledger under the shim; the others append to the policy ledger.
    let base = if seed.is_multiple_of(3) { 0 } else { std::fs::copy(template, &ledger).map(|_| 2).expect("copied") };
    let journal = scratch.path().join("journal");
    // One of the first dozen syncs: a run of 200-record batches makes only a few dozen in all.
    let fail_sync =
        (seed.is_multiple_of(INGEST_FAILED_SYNC_EVERY)).then(|| (1 + splitmix(&mut random) % 12, SyncCall::Fsync));
    let batch = ["20", "50", "200"][(splitmix(&mut random) % 3) as usize];
    let args = ["ingest", "--file", input.to_str().unwrap(), "--batch-max-events", batch, "--json"];
    let mut child = ChildGuard::new(
        Command::new(BIN)
            .arg("--ledger")
            .arg(&ledger)
            .args(args)
            .envs(shim.env(dir.path(), &journal, fail_sync))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(scratch.path().join("ingest.err")).unwrap()))
            .spawn()
            .expect("ingest starts"),
    );
    // The kill lands once a reader has seen a seeded number of records committed, a few milliseconds later (or,
    // one seed in eight, at a seeded instant from the start: while the ledger is opened or made). A seed told to
    // fail a sync is killed only once it did.
    let (mut watcher, started) = (Watcher::default(), Instant::now());
    let (target, early) = (splitmix(&mut random) % INGEST_RECORDS, splitmix(&mut random).is_multiple_of(8));
    let early = early && fail_sync.is_none();
    let kill_at = Duration::from_millis(splitmix(&mut random) % INGEST_EARLY_KILL_WITHIN_MS);
    // Whether the injected failure fired: read from the journal (megabytes) every 50th turn once the kill is
    // otherwise due, not at every turn, and remembered.
    let (mut failed, mut turn) = (fail_sync.is_none(), 0u64);
    let exited = loop {
        watcher.look(&ledger);
        let exited = child.try_wait().expect("wait for ingest");
        let due = if early { started.elapsed() >= kill_at } else { watcher.seen >= target };
        turn += 1;
        failed = failed || (due && turn.is_multiple_of(50) && sync_failed(&journal));
        let due = due && failed;
        if exited.is_some() || due || started.elapsed() > Duration::from_secs(30) {
            break exited;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    std::thread::sleep(Duration::from_millis(splitmix(&mut random) % 20));
    let exited = exited.or_else(|| child.try_wait().expect("wait for ingest"));
    if exited.is_none() {
        child.kill().expect("SIGKILL ingest");
        child.wait().expect("ingest is reaped");
    }
    let seen = watcher.seen;
    drop(watcher);

    let (intercepted, cut) = cut_power(dir.path(), scratch.path(), &journal, &mut random);
    assert_eq!(intercepted.failed_syncs, u64::from(fail_sync.is_some()), "the failures injected: {intercepted:?}");
    if seen > 0 || exited.is_some() {
        // It committed something: its writes and syncs went through the shim.
        assert!(
            intercepted.writes > 0 && intercepted.syncs + intercepted.failed_syncs > 0,
            "the shim intercepted nothing: {intercepted:?}"
        );
    }

    let progress = file_progress(&ledger).unwrap_or(0);
    assert!(progress >= seen, "a reader saw {seen} records committed, the ledger holds {progress} after the cut");
    if exited.is_some_and(|status| status.success()) {
        assert_eq!(progress, INGEST_RECORDS, "ingest exited 0 before the kill: everything is on the disk");
    }
    // A ledger whose making failed before its first commit (a failed sync of the migration, ingest exiting 2) is,
    // after the cut, a database of no table at all: nothing was made, and the rerun makes it.
    let never_made = seen == 0 && progress == 0 && tables(&ledger) == Some(0);
    if ledger.exists() && std::fs::metadata(&ledger).unwrap().len() > 0 && !never_made {
        assert_verifies(&ledger, scratch.path());
        assert_counts(&ledger, scratch.path(), base, expected_counts(events, progress));
    }
    let rerun = on(&ledger, scratch.path(), &args).success().json();
    if progress > 0 {
        assert_eq!(count(&rerun, "resumed_after"), progress, "the rerun resumes after the last batch: {rerun}");
    }
    assert_verifies(&ledger, scratch.path());
    assert_counts(&ledger, scratch.path(), base, expected_counts(events, INGEST_RECORDS));
    Figures { intercepted, cut, answered: seen, failure_seen: exited.is_some_and(|status| status.code() == Some(2)) }
}

/// How many tables a database file holds (`None`: it cannot be read as one).
fn tables(path: &Path) -> Option<i64> {
    open_read_only(path)?.query_row("SELECT COUNT(*) FROM sqlite_master", [], |r| r.get(0)).ok()
}

/// `status --json` counts: the base ledger's entries plus what the first records of the file make.
fn assert_counts(ledger: &Path, scratch: &Path, base: u64, (recorded, duplicates, conflicts): (u64, u64, u64)) {
    let status = on(ledger, scratch, &["status", "--json"]).success().json();
    assert_eq!(
        (count(&status, "events_recorded"), count(&status, "duplicates"), count(&status, "conflicts")),
        (base + recorded, duplicates, conflicts),
        "{status}"
    );
}

// A sync that fails inside a checkpoint of the background thread (SQLite's own `fsync` of the log or of the
// database file, not the hook's) stops the checkpoints for good too: the retry a second later would sync again, see
// no error, and copy pages the kernel may have dropped into the database file. No write reaches the database file
// after the failed sync, and the ledger verifies after the power cut (were the checkpoints to go on, it would be
// corrupt in about 1 of 30 failed-sync seeds of `serve_loses_no_answered_decision_to_a_power_cut`).
#[test]
fn after_a_failed_sync_inside_a_checkpoint_no_checkpoint_copies_the_log() {
    let (shim, template) = (Shim::build(), policy_ledger());
    let (dir, scratch) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let ledger = dir.path().join("ledger.db");
    std::fs::copy(&template.path, &ledger).unwrap();
    let journal = scratch.path().join("journal");
    // The first `fsync` is SQLite's of a new log's header, at the first commit; the second, the first checkpoint's.
    let env = shim.env(dir.path(), &journal, Some((2, SyncCall::Fsync)));
    let server = Server::start(&ledger, scratch.path(), &env, &scratch.path().join("serve.err"));
    let mut sent = Vec::new();
    let started = std::time::Instant::now();
    let mut failed = false;
    // Checks until the checkpoint's sync has failed and the checkpoint thread has stopped for it (before, it
    // checkpointed again a second after a checkpoint that failed, once the log held enough to copy): a thread that
    // went on checkpointing runs the 30 s out, and its copies fail the test below.
    for i in 0.. {
        let key = format!("through-a-checkpoint-{i}");
        let reply = server.check(FREE, 1, &key);
        sent.push(Sent { tenant: FREE.into(), key, amount: 1, reply });
        if i % 50 == 0 {
            failed = failed || read_journal(&journal).iter().any(|r| matches!(r, Record::SyncFailed { .. }));
            if failed && !checkpointing(server.child.id()) {
                break;
            }
        }
        if started.elapsed() > Duration::from_secs(30) {
            break;
        }
    }
    server.kill();

    let records = read_journal(&journal);
    let Some(failed) = records.iter().position(|r| matches!(r, Record::SyncFailed { .. })) else {
        panic!("no fsync failed: SQLite syncs with another call here, and this test proves nothing");
    };
    let database = records.iter().find_map(|r| match r {
        Record::Path { path, name } if *name == ledger.canonicalize().unwrap() => Some(*path),
        _ => None,
    });
    let copied = records[failed..]
        .iter()
        .filter(|r| matches!(r, Record::Change { path, .. } if Some(*path) == database))
        .count();
    assert_eq!(copied, 0, "writes to the database file after a checkpoint's sync failed: a later one copied the log");
    power_cut(&records, Keep::None, &mut || 0);
    remove_shared_memory(&ledger);
    assert_verifies(&ledger, scratch.path());
    LedgerView::read(&ledger).assert_holds(&sent, |_| false);
}

/// Whether process `pid` runs the ledger's background checkpoint thread (named `ledger-checkpoint`, which Linux
/// keeps as its first 15 bytes): the thread stops for good once a sync failed.
fn checkpointing(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    tasks.filter_map(Result::ok).any(|task| {
        std::fs::read_to_string(task.path().join("comm")).is_ok_and(|name| name.trim() == &"ledger-checkpoint"[..15])
    })
}
