//! The `bench` subcommands run as a user runs them, at sizes a test can afford: each finishes and prints the
//! figures its README section reports, for every peer. No figure's value is asserted (performance is measured
//! by running the benchmarks, never by timing a test), only that each is there and makes sense.

mod support;

use std::process::Command;

use serde_json::Value;
use support::*;

fn bench_json(args: &[&str]) -> Value {
    let mut all = vec!["bench"];
    all.extend_from_slice(args);
    all.push("--json");
    run(&all, b"").success().json()
}

fn positive(value: &Value, field: &str) -> f64 {
    let number = value[field].as_f64().unwrap_or_else(|| panic!("{field} is not a number: {value}"));
    assert!(number > 0.0, "{field} is {number}: {value}");
    number
}

#[test]
fn bench_append_measures_the_ledger_beside_bare_inserts() {
    let figures = bench_json(&["append", "--events", "2000"]);
    assert_eq!(figures["events"], 2000, "{figures}");
    let ledger = positive(&figures, "ledger_events_per_second");
    let bare = positive(&figures, "bare_insert_events_per_second");
    let ratio = positive(&figures, "ratio");
    assert!((ratio - ledger / bare).abs() < 1e-9, "ratio is the ledger's rate over the bare inserts': {figures}");
}

// `bench ingest` appends the same month into 1 and 2 shards, every message given to exactly one shard.
#[test]
fn bench_ingest_measures_one_shard_and_two() {
    let figures = bench_json(&["ingest", "--events", "3000", "--tenants", "20", "--rounds", "1"]);
    let messages = figures["messages"].as_u64().expect("messages");
    assert_eq!(messages, 3000, "{figures}");
    let runs = figures["runs"].as_array().expect("runs");
    assert_eq!(runs.iter().map(|r| r["shards"].as_u64().unwrap()).collect::<Vec<_>>(), [1, 2], "{figures}");
    for run in runs {
        positive(run, "messages_per_second");
        let shares: u64 = run["per_shard"].as_array().unwrap().iter().map(|s| s["messages"].as_u64().unwrap()).sum();
        assert_eq!(shares, messages, "each message in one shard: {run}");
    }
    positive(&figures["speedup"], "2");
}

#[test]
fn bench_reconcile_times_a_first_run_a_rerun_and_runs_after_new_events() {
    let figures = bench_json(&["reconcile", "--events", "20000", "--tenants", "10"]);
    assert_eq!(figures["tenants"], 10, "{figures}");
    // The generated month holds duplicates, which are not recorded as new events.
    let recorded = positive(&figures, "events_recorded");
    assert!(recorded <= 20_000.0, "{figures}");
    for field in ["first_run_seconds", "first_run_peak_memory_mib", "rerun_seconds", "rerun_peak_memory_mib"] {
        positive(&figures, field);
    }
    positive(&figures, "adjustments_written");
    // The rerun starts from the first run and reads nothing again; 1% new events of one tenant of ten are read
    // alone; new events of every tenant are read with the whole ledger.
    assert_eq!(figures["rerun_coverage"], "incremental (0 tenants)", "{figures}");
    positive(&figures, "full_rerun_seconds");
    let few = &figures["new_events_of_few_tenants"];
    assert_eq!(
        (few["tenants"].as_u64(), few["coverage"].as_str()),
        (Some(1), Some("incremental (1 tenants)")),
        "{few}"
    );
    let every = &figures["new_events_of_every_tenant"];
    assert_eq!(every["coverage"], "full (many_tenants)", "{every}");
    for run in [few, every] {
        positive(run, "events_appended");
        positive(run, "seconds");
    }
}

// The hook's benchmark: every peer at every concurrency, Redis+Lua included (Debian's redis-server, which
// `.ci/run` installs; `QUOTA_LEDGER_SKIP_REDIS=1` skips this test explicitly).
#[test]
fn bench_hook_measures_every_peer_beside_redis() {
    if !redis("bench hook") {
        return;
    }
    let figures = bench_json(&["hook", "--concurrency", "1,2", "--seconds", "0.3"]);
    let figures = figures.as_array().expect("an array of measurements");
    let peers = [
        "hook in-process (Full)",
        "hook in-process (Normal)",
        "hook in-process (Full, 2 metrics)",
        "hook in-process (Normal, 2 metrics)",
        "hook in-process (Normal, leases)",
        "hook in-process (Normal, rolling day)",
        "hook in-process (Normal, billing cycle)",
        "hook in-process (Normal, 10000 holds)",
        "hook over HTTP (full)",
        "hook over HTTP (normal)",
        "hook over HTTP (normal, publishing)",
        "redis+lua (no persistence)",
        "redis+lua (appendfsync always)",
    ];
    for clients in [1, 2] {
        for peer in peers {
            let found: Vec<&Value> =
                figures.iter().filter(|f| f["peer"] == peer && f["concurrency"] == clients).collect();
            assert_eq!(found.len(), 1, "one measurement of {peer} at {clients} clients: {figures:?}");
            let f = found[0];
            positive(f, "requests");
            positive(f, "decisions_per_second");
            let (p50, p99) = (positive(f, "p50_us"), positive(f, "p99_us"));
            assert!(p50 <= p99, "p50 at most p99: {f}");
            // Only the publishing peer says when its outbox caught up.
            assert_eq!(f.get("outbox_caught_up_ms").is_some(), peer.ends_with("publishing)"), "{f}");
        }
    }
    assert_eq!(figures.len(), 2 * peers.len(), "nothing else measured: {figures:?}");
}

// Proves that `bench export` without DuckDB fails at once, before it builds its ledger (which takes minutes at
// the default size), with the message that says how to install it. DuckDB is made absent whatever is installed:
// python3 is not on the PATH given.
#[test]
fn bench_export_without_duckdb_fails_before_building_anything() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let empty_path = tempfile::tempdir().expect("a directory with no programs");
    let output = Command::new(BIN)
        .args(["bench", "export", "--events", "2000", "--tenants", "5", "--dir"])
        .arg(dir.path())
        .env("PATH", empty_path.path())
        .env_remove("QUOTA_LEDGER_PATH")
        .current_dir(dir.path())
        .output()
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.contains("DuckDB failed (pip install duckdb)"), "stderr: {stderr}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "bench export built or wrote something before failing: {left:?}");
}

// `bench hook` without redis-server fails at once, before its first measurement, naming what to install: it
// found out only at the Redis peer, after six other peers at each concurrency (minutes at the defaults).
// redis-server is made absent whatever is installed: the PATH given holds no programs. Each measurement here
// would last an hour, so a run that measures before it checks is still running when the test gives up on it.
#[test]
fn bench_hook_without_redis_fails_before_measuring_anything() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let empty_path = tempfile::tempdir().expect("a directory with no programs");
    let mut child = Command::new(BIN)
        .args(["bench", "hook", "--concurrency", "1", "--seconds", "3600"])
        .env("PATH", empty_path.path())
        .env_remove("QUOTA_LEDGER_PATH")
        .env_remove("QUOTA_LEDGER_BROKERS")
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the binary starts");
    let started = std::time::Instant::now();
    while child.try_wait().expect("the child can be waited for").is_none() {
        if started.elapsed() > std::time::Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("bench hook without redis-server still ran after 60 s: it measures before it checks");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let output = child.wait_with_output().expect("the child's output");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.contains("cannot start redis-server (apt-get install redis-server)"), "stderr: {stderr}");
    assert!(output.stdout.is_empty(), "nothing measured: {}", String::from_utf8_lossy(&output.stdout));
}

// The shards' benchmark: `--shards 2` measures the hook over 1 shard and over 2 in one run, at both durabilities,
// the 2-shard figure with its speedup over 1 shard and every sharded one with its ratio to Redis+Lua (per node). A
// second per peer: the other benchmarks of this file run beside it, and a full-durability group commit on a busy
// disk can take longer than a shorter window.
#[test]
fn bench_hook_shards_measures_one_shard_against_many() {
    if !redis("bench hook --shards") {
        return;
    }
    let figures = bench_json(&["hook", "--concurrency", "4", "--seconds", "1", "--shards", "2"]);
    let figures = figures.as_array().expect("an array of measurements");
    let redis = figures.iter().find(|f| f["peer"] == "redis+lua (appendfsync always)").expect("redis measured");
    let redis = positive(redis, "decisions_per_second");
    for durability in ["Full", "Normal"] {
        let of = |peer: String| {
            let found: Vec<&Value> = figures.iter().filter(|f| f["peer"] == peer.as_str()).collect();
            assert_eq!(found.len(), 1, "one measurement of {peer}: {figures:?}");
            found[0]
        };
        let one = of(format!("hook in-process, 1 shard ({durability})"));
        let two = of(format!("hook in-process, 2 shards ({durability})"));
        assert_eq!((&one["shards"], &two["shards"]), (&Value::from(1), &Value::from(2)));
        let speedup = positive(two, "speedup_over_one_shard");
        let expected = positive(two, "decisions_per_second") / positive(one, "decisions_per_second");
        assert!((speedup - expected).abs() < 1e-9, "{two}");
        assert!(one.get("speedup_over_one_shard").is_none(), "{one}");
        for f in [one, two] {
            let ratio = positive(f, "ratio_to_redis_fsync_always");
            assert!((ratio - positive(f, "decisions_per_second") / redis).abs() < 1e-9, "{f}");
        }
    }
}

/// Whether `redis-server`, the peer of `bench hook`, is there for `part`: false when QUOTA_LEDGER_SKIP_REDIS=1 skips it
/// (never in CI); missing otherwise fails with the command that installs it.
fn redis(part: &str) -> bool {
    testkit::tool("redis-server", "QUOTA_LEDGER_SKIP_REDIS", "apt-get install -y redis-server", part)
}
