//! A directory of shards (`--data DIR`, contract §9.4) read as users read a ledger: a generated month ingested from
//! files into one ledger and into three shards gives the same billing export bytes, open, closed and re-exported;
//! each shard resumes a file from its own progress; `verify` names an entry in the wrong shard; `status`, `audit`,
//! `sql` and `reconcile` answer for the whole set.

mod support;

use std::path::{Path, PathBuf};

use serde_json::Value;
use support::*;

const PERIOD: &str = "2026-11";

/// A generated month as Avro container files (`generate --out`), in name order, and the single ledger fed them.
struct Month {
    single: TestLedger,
    files: Vec<PathBuf>,
}

impl Month {
    fn generate(tenants: &str, events: &str) -> Month {
        let single = TestLedger::new();
        let out = single.file("generated");
        let out_text = out.to_str().unwrap();
        run(&["generate", "--tenants", tenants, "--events", events, "--seed", "7", "--out", out_text], b"").success();
        let mut files: Vec<PathBuf> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        for file in &files {
            single.ingest(file);
        }
        Month { single, files }
    }

    /// A directory of `partitions` shards fed the same files.
    fn shards(&self, partitions: u32) -> Shards {
        let shards = Shards::new();
        for file in &self.files {
            shards.ingest(file, Some(partitions)).success();
        }
        shards
    }
}

/// A directory of shards in its own temporary directory.
struct Shards {
    dir: tempfile::TempDir,
}

impl Shards {
    fn new() -> Shards {
        Shards { dir: tempfile::tempdir().unwrap() }
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn shard(&self, partition: u32) -> PathBuf {
        self.data().join(format!("shard-{partition:04}.db"))
    }

    fn run(&self, args: &[&str]) -> Run {
        let data = self.data();
        let mut all = vec!["--data", data.to_str().unwrap()];
        all.extend_from_slice(args);
        run_in(self.dir.path(), &all, b"")
    }

    fn ingest(&self, file: &Path, partitions: Option<u32>) -> Run {
        let partitions = partitions.map(|p| p.to_string());
        let mut args = vec!["ingest", "--file", file.to_str().unwrap(), "--json"];
        if let Some(p) = &partitions {
            args.extend(["--partitions", p]);
        }
        self.run(&args)
    }
}

fn export(run: impl Fn(&[&str]) -> Run, format: &str, extra: &[&str]) -> Vec<u8> {
    let mut args = vec!["export", "billing", "--period", PERIOD, "--format", format];
    args.extend_from_slice(extra);
    run(&args).success().stdout
}

/// Asserts the single ledger and the shards export the same bytes in every format.
fn assert_same_exports(month: &Month, shards: &Shards, extra: &[&str], when: &str) -> Vec<u8> {
    let mut csv = Vec::new();
    for format in ["csv", "jsonl", "parquet"] {
        let one = export(|a| month.single.run(a), format, extra);
        let set = export(|a| shards.run(a), format, extra);
        if format == "csv" {
            assert!(one.len() > 200, "a month's export has rows: {}", String::from_utf8_lossy(&one));
            assert_eq!(String::from_utf8_lossy(&set), String::from_utf8_lossy(&one), "{when}: CSV");
            csv = one.clone();
        }
        assert!(set == one, "{when}: the {format} export of the shards differs from the single ledger's");
    }
    csv
}

// Proves the billing export of three shards is byte for byte the single ledger's for the same events (the set's
// watermark counting each plan default once): open, closed with --final, and the closed month re-exported.
#[test]
fn export_over_shards_is_the_single_ledgers_bytes() {
    let month = Month::generate("40", "6000");
    let shards = month.shards(3);
    assert_same_exports(&month, &shards, &[], "open month");
    let closed = assert_same_exports(&month, &shards, &["--final"], "the close");
    let again = assert_same_exports(&month, &shards, &[], "the closed month re-exported");
    assert_eq!(again, closed, "a closed month re-exports its close's bytes");
    assert_same_exports(&month, &shards, &["--final"], "a second --final");
    // Each shard holds its close (a shard closed is closed for good).
    let status = shards.run(&["sql", "SELECT shard, period FROM period_closes ORDER BY shard", "--format", "csv"]);
    assert_eq!(status.success().stdout_text(), "shard,period\n0,2026-11\n1,2026-11\n2,2026-11\n");
}

// Proves a shard closed alone (a close stopped part way) makes a preview of the month refuse, naming the shards, and
// that --final run again finishes the close.
#[test]
fn a_close_stopped_part_way_is_finished_by_a_rerun() {
    let month = Month::generate("20", "2000");
    let shards = month.shards(2);
    // Shard 0 closed by itself, as if the command had stopped before shard 1.
    let shard0 = shards.shard(0);
    run_in(
        shards.dir.path(),
        &["--ledger", shard0.to_str().unwrap(), "export", "billing", "--period", PERIOD, "--format", "csv", "--final"],
        b"",
    )
    .success();
    let refused = shards.run(&["export", "billing", "--period", PERIOD, "--format", "csv"]).expect_code(2);
    assert!(refused.stderr.contains("closed in shards [0] of 2"), "{}", refused.stderr);
    assert!(refused.stderr.contains("--final again"), "{}", refused.stderr);
    assert_same_exports(&month, &shards, &["--final"], "the close finished");
}

// Proves a directory's --final checks every shard before closing any: one shard that cannot close the month (its
// September closed alone, so November would skip October) refuses the close naming it and why, and no shard is closed.
#[test]
fn a_close_one_shard_refuses_closes_none() {
    let month = Month::generate("20", "2000");
    let shards = month.shards(2);
    let shard1 = shards.shard(1);
    let september = ["export", "billing", "--period", "2026-09", "--format", "csv", "--final"];
    run_in(shards.dir.path(), &[&["--ledger", shard1.to_str().unwrap()][..], &september].concat(), b"").success();
    let refused = shards.run(&["export", "billing", "--period", PERIOD, "--format", "csv", "--final"]).expect_code(2);
    assert!(refused.stderr.contains("closed in no shard: 1 of 2 shards cannot close it"), "{}", refused.stderr);
    assert!(refused.stderr.contains("shard 1: cannot close period 2026-11"), "{}", refused.stderr);
    assert!(refused.stderr.contains("cannot be closed before 2026-10"), "{}", refused.stderr);
    let closes = shards.run(&["sql", "SELECT shard, period FROM period_closes ORDER BY shard", "--format", "csv"]);
    assert_eq!(closes.success().stdout_text(), "shard,period\n1,2026-09\n", "shard 0 closed nothing");
}

// Proves ingest --data routes each record to its tenant's shard (verify checks every entry is of its partition),
// refuses another partition count, and that each shard resumes the file from its own progress: a shard lost and
// recreated takes the whole file again while the others append nothing.
#[test]
fn ingest_into_shards_routes_by_tenant_and_resumes_per_shard() {
    let month = Month::generate("30", "3000");
    let shards = month.shards(3);
    shards.run(&["verify"]).success();
    let usage = month.files.iter().find(|f| f.ends_with("UsageEvent.avro")).unwrap();

    let wrong = shards.ingest(usage, Some(4)).expect_code(2);
    assert!(wrong.stderr.contains("holds shards of 3 partitions, not 4"), "{}", wrong.stderr);
    let fresh = Shards::new();
    let unknown = fresh.ingest(usage, None).expect_code(2);
    assert!(unknown.stderr.contains("--partitions"), "{}", unknown.stderr);

    let rerun = shards.ingest(usage, None).success().json();
    assert_eq!(rerun["records"], 0, "a rerun reads nothing again: {rerun}");
    let file_records = month.single.ingest(usage)["resumed_after"].as_u64().unwrap();
    for shard in rerun["shards"].as_array().unwrap() {
        assert_eq!(shard["resumed_after"].as_u64(), Some(file_records), "{rerun}");
    }

    std::fs::remove_file(shards.shard(1)).unwrap();
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", shards.shard(1).display()));
    }
    // The other files of the month first (the lost shard needs its policies and grants again), then the usage.
    for file in &month.files {
        let report = shards.ingest(file, None).success().json();
        let parts = report["shards"].as_array().unwrap();
        assert_eq!(parts[0]["recorded"], 0, "shard 0 had it all: {report}");
        assert_eq!(parts[2]["recorded"], 0, "shard 2 had it all: {report}");
        assert_eq!(parts[1]["resumed_after"], 0, "the new shard 1 takes the whole file: {report}");
    }
    shards.run(&["verify"]).success();
    assert_same_exports(&month, &shards, &[], "after shard 1 was rebuilt");
}

// Proves verify over shards names the shard and the entry whose tenant belongs to another shard, exit 1.
#[test]
fn verify_names_an_entry_in_the_wrong_shard() {
    let shards = Shards::new();
    let right = shards.dir.path().join("right.avro");
    // org-42 is in partition 3 of 6 (Kafka's vectors), and in partition 0 or 1 of 2.
    let home = schemas::partition::partition_of("org-42", 2);
    write_container(&right, &[usage("u-1", "2026-11-02T10:00:00Z", "org-42", 5)]);
    shards.ingest(&right, Some(2)).success();
    shards.run(&["verify"]).success();

    let stray = shards.dir.path().join("stray.avro");
    write_container(&stray, &[usage("u-2", "2026-11-02T11:00:00Z", "org-42", 7)]);
    let other = shards.shard(1 - home);
    run_in(shards.dir.path(), &["--ledger", other.to_str().unwrap(), "ingest", "--file", stray.to_str().unwrap()], b"")
        .success();
    let found = shards.run(&["verify"]).expect_code(1);
    let named = format!("shard {} of 2", 1 - home);
    assert!(found.stderr.contains(&named), "{}", found.stderr);
    assert!(found.stderr.contains("event_id u-2"), "{}", found.stderr);
    assert!(found.stderr.contains(&format!("belong to shard {home}")), "{}", found.stderr);
    let report = shards.run(&["verify", "--json"]).expect_code(1).json();
    assert_eq!(report["shards"][(1 - home) as usize]["first_misplaced"]["seq"], 1, "{report}");
}

// Proves status, audit why and audit tenant answer for the whole set as the single ledger does.
#[test]
fn status_and_audit_over_shards() {
    let month = Month::generate("20", "2000");
    let shards = month.shards(3);
    let status = shards.run(&["status", "--json"]).success().json();
    assert_eq!(status["partitions"], 3, "{status}");
    let parts = status["shards"].as_array().unwrap();
    assert_eq!(parts.len(), 3);
    let usage_single = sql_count(|a| month.single.run(a), "usage_events");
    let usage_set: u64 = (0..3).map(|p| sql_count(|a| shards.run(a), &format!("usage_events WHERE shard = {p}"))).sum();
    assert_eq!(usage_set, usage_single, "every usage event in exactly one shard");

    let request = month
        .single
        .run(&["sql", "SELECT request_id FROM decision_events ORDER BY seq DESC LIMIT 1", "--format", "json"])
        .success()
        .json()[0]["request_id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut one = month.single.run(&["audit", "why", &request, "--json"]).success().json();
    let mut set = shards.run(&["audit", "why", &request, "--json"]).success().json();
    without_ledger_positions(&mut one);
    without_ledger_positions(&mut set);
    assert_eq!(set, one, "audit why of the set is the single ledger's, but for ledger positions");
    let unknown = shards.run(&["audit", "why", &format!("{request}x")]).expect_code(1);
    assert!(unknown.stdout_text().contains(&request), "the nearest names the request: {}", unknown.stdout_text());

    let tenant = one["decision"]["tenant"].as_str().unwrap().to_string();
    let range = ["--from", "2026-11-01T00:00:00Z", "--to", "2026-12-01T00:00:00Z", "--json"];
    let timeline = |run: &dyn Fn(&[&str]) -> Run| {
        let mut args = vec!["audit", "tenant", &tenant];
        args.extend(range);
        let mut answer = run(&args).success().json();
        without_ledger_positions(&mut answer);
        answer
    };
    assert_eq!(timeline(&|a| shards.run(a)), timeline(&|a| month.single.run(a)));
}

/// Removes `seq` and `watermark` everywhere in `value`: positions in a ledger, which a shard numbers on its own.
fn without_ledger_positions(value: &mut Value) {
    match value {
        Value::Object(object) => {
            object.remove("seq");
            object.remove("watermark");
            object.values_mut().for_each(without_ledger_positions);
        }
        Value::Array(items) => items.iter_mut().for_each(without_ledger_positions),
        _ => {}
    }
}

fn sql_count(run: impl Fn(&[&str]) -> Run, from: &str) -> u64 {
    let query = format!("SELECT COUNT(*) AS n FROM {from}");
    let answer: Value = run(&["sql", &query, "--format", "json"]).success().json();
    answer[0]["n"].as_u64().unwrap()
}

// Proves reconcile over shards writes what the single ledger writes (the same adjustments by kind and tenant, the
// same counts read), exits as it does, writes nothing more when run again, and leaves the exports equal.
#[test]
fn reconcile_over_shards_is_the_single_ledgers() {
    let month = Month::generate("20", "3000");
    let shards = month.shards(3);
    let args = ["reconcile", "--as-of", "2026-12-02T00:00:00Z", "--json"];
    let one = month.single.run(&args);
    let set = shards.run(&args);
    assert_eq!(set.code, one.code, "{}", set.stderr);
    let (one, set) = (one.json(), set.json());
    assert_eq!(set["adjustments_by_kind"], one["adjustments_by_kind"], "{set}");
    assert!(one["adjustments_written"].as_u64().unwrap() > 0, "the generated month has something to adjust: {one}");
    let without_ids = |run: &Value| {
        let mut found: Vec<(String, String, String, i64)> = run["adjustments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                let text = |k: &str| a[k].as_str().unwrap_or_default().to_string();
                (text("kind"), text("tenant"), text("metric"), a["amount"].as_i64().unwrap())
            })
            .collect();
        found.sort();
        found
    };
    assert_eq!(without_ids(&set), without_ids(&one));
    for count in ["usage_events", "reservation_events", "valid_commits", "windows_judged"] {
        assert_eq!(set["read"][count], one["read"][count], "{count}: {set}");
    }
    assert_eq!(set["run_id"], one["run_id"], "the set's run id is the single ledger's");
    shards.run(&["reconcile", "--as-of", "2026-12-02T00:00:00Z"]).success();
    assert_same_exports(&month, &shards, &[], "after reconcile");
}

// Proves a set of shards is backed up and restored whole: each copy verified against its manifest, the restored
// set bills byte for byte as the original, and a restore onto shards already present restores nothing.
#[test]
fn a_set_of_shards_is_backed_up_and_restored_whole() {
    let month = Month::generate("20", "2000");
    let shards = month.shards(3);
    let backup = shards.dir.path().join("backup");
    let taken = shards.run(&["backup", "--to", backup.to_str().unwrap(), "--json"]).success().json();
    let manifests = taken.as_array().unwrap();
    assert_eq!(manifests.len(), 3, "one manifest per shard: {taken}");
    let recorded: u64 = manifests.iter().map(|m| count(m, "events_recorded")).sum();
    let status = shards.run(&["status", "--json"]).success().json();
    let in_shards: u64 = status["shards"].as_array().unwrap().iter().map(|s| count(s, "events_recorded")).sum();
    assert_eq!(recorded, in_shards, "the backup holds every shard's events: {status}");

    let restored = Shards::new();
    let answer = restored.run(&["restore", "--from", backup.to_str().unwrap(), "--json"]).success().json();
    assert_eq!(answer.as_array().unwrap().len(), 3, "{answer}");
    restored.run(&["verify"]).success();
    for format in ["csv", "jsonl"] {
        assert_eq!(
            export(|a| restored.run(a), format, &[]),
            export(|a| shards.run(a), format, &[]),
            "the restored set bills as the original ({format})"
        );
    }

    // Onto a set already present: refused before any shard is copied.
    let again = restored.run(&["restore", "--from", backup.to_str().unwrap()]).expect_code(2);
    assert!(again.stderr.contains("restore never overwrites a shard"), "{}", again.stderr);

    // A copy missing from the backup: the set is refused, nothing restored.
    std::fs::remove_file(backup.join("shard-0001.db")).unwrap();
    let partial = Shards::new();
    let refused = partial.run(&["restore", "--from", backup.to_str().unwrap()]).expect_code(2);
    assert!(refused.stderr.contains("not a backup of a set of shards"), "{}", refused.stderr);
    assert!(!partial.data().exists() || std::fs::read_dir(partial.data()).unwrap().next().is_none());
}
