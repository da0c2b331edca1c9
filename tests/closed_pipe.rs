//! Output into a closed pipe (`quota-ledger status | head -1`): the output stops, the command does not panic and
//! exits with its own code. Reconcile's exit codes into a closed pipe are checked in `cli_reconcile.rs`.

mod support;

use support::*;

/// A ledger with usage, a conflicting duplicate and a quarantined (negative) record.
fn ledger_with_usage() -> TestLedger {
    let test = TestLedger::new();
    let events = [
        usage("u-1", "2026-11-02T10:00:00Z", "org-1", 3),
        usage("u-2", "2026-11-02T11:00:00Z", "org-1", 4),
        usage("u-2", "2026-11-02T11:00:00Z", "org-1", 40),
        usage("u-bad", "2026-11-02T12:00:00Z", "org-1", -1),
    ];
    write_container(&test.file("usage.avro"), &events);
    test.ingest(&test.file("usage.avro"));
    test
}

/// One row of 100,000 bytes.
const BIG_ROW: &str = "SELECT repeat('x', 100000) AS filler";

/// What was wrong with `run`, unless it exited 0 and said nothing of a panic or an error.
fn unless_quietly_done(run: &Run) -> Option<String> {
    let quiet = !run.stderr.contains("panicked") && !run.stderr.contains("error");
    (run.code != Some(0) || !quiet).then(|| format!("`{}` exited with {:?}: {}", run.command, run.code, run.stderr))
}

fn assert_quietly_done(run: &Run) {
    if let Some(wrong) = unless_quietly_done(run) {
        panic!("{wrong}");
    }
}

// Every command that prints a report for people or JSON exits 0 into a closed pipe, where `println!` panicked (101)
// and `sql --format csv` failed (2) on the broken pipe Arrow hid in a string.
#[test]
fn commands_that_succeed_exit_0_into_a_closed_pipe() {
    let test = ledger_with_usage();
    let commands: [&[&str]; 17] = [
        &["status"],
        &["status", "--json"],
        &["verify"],
        &["verify", "--json"],
        &["quarantine", "list"],
        &["quarantine", "list", "--json"],
        &["quarantine", "replay"],
        &["quarantine", "replay", "--json"],
        &["sql", "SELECT * FROM entries"],
        &["sql", "--format", "csv", "SELECT * FROM entries"],
        // More than the CSV writer's buffer in one row: the broken pipe then comes back from Arrow as text.
        &["sql", "--format", "csv", BIG_ROW],
        &["sql", "--format", "json", BIG_ROW],
        &["sql", "--tables"],
        &["export", "billing", "--period", "2026-11", "--format", "csv"],
        &["audit", "tenant", "org-1", "--from", "2026-11-01T00:00:00Z", "--to", "2026-12-01T00:00:00Z"],
        &["ingest", "--file", "usage.avro"],
        &["ingest", "--file", "usage.avro", "--json"],
    ];
    let mut runs: Vec<Run> = commands.iter().map(|args| test.run_into_closed_pipe(args)).collect();
    runs.push(run_into_closed_pipe_in(test.dir.path(), &["schemas", "list"]));
    let wrong: Vec<String> = runs.iter().filter_map(unless_quietly_done).collect();
    assert!(wrong.is_empty(), "{} of {} commands:\n{}", wrong.len(), runs.len(), wrong.join("\n"));
    test.assert_verifies();
}

// A closed stdout stops `sql` from computing rows nobody reads (`sql ... | head -1`), exit 0, in every format: the
// table prints its rows 10,000 at a time. This query fails in its seventh batch (a division by zero at row 50,000),
// so a run that read on to the end (or, for the table, read every row before printing any) would exit 2 there.
#[test]
fn sql_into_a_closed_pipe_stops_its_query() {
    let test = ledger_with_usage();
    let query = "SELECT 1 / (value - 50000) AS x FROM generate_series(1, 100000)";
    for format in ["csv", "json", "table"] {
        assert_quietly_done(&test.run_into_closed_pipe(&["sql", "--format", format, query]));
    }
    // Read to its end, the query does fail: what the runs above would meet had they read on.
    let read = test.run(&["sql", "--format", "csv", query]).expect_code(2);
    assert!(read.stderr.contains("Divide by zero"), "{}", read.stderr);
}

// A closed pipe stops the output, not the work: `ingest --file F | true` records the file all the same.
#[test]
fn ingest_into_a_closed_pipe_records_the_file() {
    let test = ledger_with_usage();
    let before = count(&test.status(), "events_recorded");
    write_container(&test.file("more.avro"), &[usage("u-3", "2026-11-03T10:00:00Z", "org-2", 5)]);
    assert_quietly_done(&test.run_into_closed_pipe(&["ingest", "--file", "more.avro"]));
    assert_eq!(count(&test.status(), "events_recorded"), before + 1);
}
