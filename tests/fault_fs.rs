//! The fault filesystem of the power-cut tests, tested on its own: a child process writes under the LD_PRELOAD shim,
//! and the simulated power cut keeps exactly what a disk may hold: a synced write stays, a write no sync covered is
//! gone when the cut keeps none, a write before a failed sync is lost even when a later sync succeeds, and the
//! failed sync is seen by the program that asked for it.

// The power-cut tests use the rest of it (the seeded cuts, syncs of any kind).
#[allow(dead_code)]
#[path = "support/fault_fs.rs"]
mod fault_fs;

use std::io::Write;
use std::path::Path;
use std::process::Command;

use fault_fs::{CutReport, Intercepted, Keep, Shim, SyncCall, power_cut, read_journal};

/// Set for the child: the directory it writes in.
const CHILD_DIR: &str = "QL_FAULT_FS_TEST_DIR";
/// Set for the child: which steps it takes (`plain` or `failing`).
const CHILD_STEPS: &str = "QL_FAULT_FS_TEST_STEPS";

/// Runs [`writer_child`] under the shim in `dir`, journaling into `journal`, failing the `fail_sync`th sync.
fn run_child(shim: &Shim, dir: &Path, journal: &Path, steps: &str, fail_sync: Option<(u64, SyncCall)>) {
    let output = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "writer_child", "--ignored", "--nocapture", "--test-threads", "1"])
        .env(CHILD_DIR, dir)
        .env(CHILD_STEPS, steps)
        .envs(shim.env(dir, journal, fail_sync))
        .output()
        .expect("the writer child runs");
    assert!(
        output.status.success(),
        "the writer child failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The writing child (started by the tests below, ignored when run on its own).
#[test]
#[ignore = "child process of the fault filesystem's tests"]
fn writer_child() {
    let (Some(dir), Some(steps)) = (std::env::var_os(CHILD_DIR), std::env::var(CHILD_STEPS).ok()) else { return };
    let dir = Path::new(&dir);
    let mut file = std::fs::File::create(dir.join("data")).unwrap();
    match steps.as_str() {
        "plain" => {
            file.write_all(b"durable-1;").unwrap();
            file.sync_all().expect("the first sync succeeds");
            file.write_all(b"unsynced-2;").unwrap();
            // Another file: written and synced, then cut short without a sync.
            let mut other = std::fs::File::create(dir.join("other")).unwrap();
            other.write_all(b"kept").unwrap();
            other.sync_data().expect("fdatasync succeeds");
            other.set_len(0).unwrap();
        }
        "failing" => {
            file.write_all(b"A-synced;").unwrap();
            file.sync_all().expect("the first sync succeeds");
            file.write_all(b"B-failed;").unwrap();
            let failed = file.sync_all().expect_err("the second sync fails, as the shim was told");
            assert_eq!(failed.raw_os_error(), Some(libc::EIO), "{failed}");
            file.write_all(b"C-synced;").unwrap();
            file.sync_all().expect("the third sync succeeds");
        }
        other => panic!("unknown steps {other:?}"),
    }
}

/// Runs the child's `steps`, then cuts the power keeping `keep` of what no sync covered: the files' bytes after the
/// cut, what the shim saw and what the cut did.
fn cut(steps: &str, fail_sync: Option<(u64, SyncCall)>, keep: Keep) -> (Vec<u8>, Vec<u8>, Intercepted, CutReport) {
    let shim = Shim::build();
    let (dir, scratch) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let journal = scratch.path().join("journal");
    run_child(&shim, dir.path(), &journal, steps, fail_sync);
    let records = read_journal(&journal);
    let report = power_cut(&records, keep, &mut || 0);
    let read = |name: &str| std::fs::read(dir.path().join(name)).unwrap_or_default();
    (read("data"), read("other"), Intercepted::of(&records), report)
}

// A write no sync covered is gone after a power cut that keeps none, a synced one stays, and a truncate no sync
// covered is taken back.
#[test]
fn a_write_not_synced_is_gone_after_a_power_cut_and_a_synced_one_stays() {
    let (data, other, seen, report) = cut("plain", None, Keep::None);
    assert_eq!(String::from_utf8_lossy(&data), "durable-1;");
    assert_eq!(String::from_utf8_lossy(&other), "kept", "the truncate no sync covered is taken back");
    // Three truncates: each file opened with O_TRUNC, and the one cut short.
    assert_eq!((seen.files, seen.writes, seen.truncates, seen.syncs, seen.failed_syncs), (2, 3, 3, 2, 0), "{seen:?}");
    assert_eq!(report, CutReport { unsynced: 2, lost: 2, dropped_by_failed_sync: 0 });
}

// The same run, cut keeping every unsynced change: what a crash of the process alone leaves.
#[test]
fn a_cut_that_keeps_everything_leaves_what_the_process_wrote() {
    let (data, other, _, report) = cut("plain", None, Keep::All);
    assert_eq!(String::from_utf8_lossy(&data), "durable-1;unsynced-2;");
    assert_eq!(other, b"");
    assert_eq!(report, CutReport { unsynced: 2, lost: 0, dropped_by_failed_sync: 0 });
}

// The injected sync failure fires where it was told (the second sync), the program sees EIO, and what that sync
// should have covered is lost though a later sync succeeded (fsyncgate): the disk keeps A and C, with B's bytes a hole.
#[test]
fn a_write_before_a_failed_sync_is_lost_though_a_later_sync_succeeds() {
    let (data, _, seen, report) = cut("failing", Some((2, SyncCall::Fsync)), Keep::None);
    assert_eq!((seen.syncs, seen.failed_syncs), (2, 1), "the second sync failed, and only it: {seen:?}");
    assert_eq!(report, CutReport { unsynced: 1, lost: 1, dropped_by_failed_sync: 1 });
    let mut expected = b"A-synced;".to_vec();
    expected.extend([0u8; 9]);
    expected.extend(b"C-synced;");
    assert_eq!(data, expected, "{}", String::from_utf8_lossy(&data));
}

// A failure told to count `fdatasync` leaves `fsync` alone: the run syncs with fsync only and nothing fails.
#[test]
fn a_failure_counts_only_the_sync_call_it_names() {
    let shim = Shim::build();
    let (dir, scratch) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let journal = scratch.path().join("journal");
    let output = Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "writer_child", "--ignored", "--nocapture", "--test-threads", "1"])
        .env(CHILD_DIR, dir.path())
        .env(CHILD_STEPS, "failing")
        .envs(shim.env(dir.path(), &journal, Some((1, SyncCall::Fdatasync))))
        .output()
        .expect("the writer child runs");
    assert!(!output.status.success(), "the child expected its second fsync to fail, and none did");
    let seen = Intercepted::of(&read_journal(&journal));
    assert_eq!((seen.syncs, seen.failed_syncs), (2, 0), "{seen:?}");
}
