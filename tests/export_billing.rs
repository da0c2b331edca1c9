//! `export billing` run as finance runs it: a generated month checked row by row against an independent
//! computation of contract §5 written here, the same bytes twice, a closed period re-exported byte for byte after
//! late events and reconcile, and those late events carried into the next period closed.

mod support;

use std::collections::{BTreeMap, BTreeSet};

use schemas::*;
use support::billing::{HEADER, expected_by_project, expected_rows};
use support::*;

/// Ingests a generated month (`generate --out`), its files in name order.
fn generated_ledger(tenants: &str, events: &str, seed: &str) -> TestLedger {
    let test = TestLedger::new();
    let out = test.file("generated");
    run(&["generate", "--tenants", tenants, "--events", events, "--seed", seed, "--out", out.to_str().unwrap()], b"")
        .success();
    let mut files: Vec<_> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    for file in &files {
        test.ingest(file);
    }
    test
}

fn export(test: &TestLedger, period: &str, format: &str, extra: &[&str]) -> Vec<u8> {
    let mut args = vec!["export", "billing", "--period", period, "--format", format];
    args.extend_from_slice(extra);
    test.run(&args).success().stdout
}

fn csv_lines(bytes: &[u8]) -> Vec<String> {
    String::from_utf8(bytes.to_vec()).unwrap().lines().map(String::from).collect()
}

// contract §5 "Billing export": a generated month's CSV equals, row by row, contract §5 computed independently here; JSONL and Parquet hold the same rows.
#[test]
fn a_generated_month_matches_an_independent_computation() {
    let test = generated_ledger("25", "20000", "3");
    let watermark = count(&test.status(), "watermark");
    let november = ("2026-11", at("2026-11-01T00:00:00Z").micros(), at("2026-12-01T00:00:00Z").micros());
    let lines = csv_lines(&export(&test, "2026-11", "csv", &[]));
    assert_eq!(lines[0], HEADER);
    let expected = expected_rows(&test.path, november, watermark);
    assert!(expected.len() >= 50, "25 tenants, three metrics: {}", expected.len());
    assert_eq!(lines[1..].len(), expected.len());
    for (found, expected) in lines[1..].iter().zip(&expected) {
        assert_eq!(found, expected);
    }
    let jsonl = String::from_utf8(export(&test, "2026-11", "jsonl", &[])).unwrap();
    let json_rows: Vec<serde_json::Value> = jsonl.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(json_rows.len(), expected.len());
    for (json, csv) in json_rows.iter().zip(&expected) {
        let keys: Vec<&String> = json.as_object().unwrap().keys().collect();
        assert_eq!(keys, HEADER.split(',').collect::<Vec<_>>(), "the same columns in the same order");
        let cells: Vec<String> = json
            .as_object()
            .unwrap()
            .values()
            .map(|v| match v {
                serde_json::Value::Null => String::new(),
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect();
        assert_eq!(&cells.join(","), csv);
    }
    let parquet = export(&test, "2026-11", "parquet", &[]);
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(parquet))
        .unwrap()
        .build()
        .unwrap();
    let batches: Vec<_> = reader.map(Result::unwrap).collect();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), expected.len());
    // The cycle's columns are instants: UTC timestamps (microseconds, as the ledger keeps time), equal to the CSV's.
    let utc = arrow::datatypes::DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, Some("+00:00".into()));
    let index = HEADER.split(',').position(|c| c == "cycle_start").unwrap();
    for (column, offset) in [("cycle_start", 0), ("cycle_end", 1)] {
        let cycle = batches[0].column_by_name(column).expect(column);
        assert_eq!(cycle.data_type(), &utc, "{column} in Parquet");
        let micros = cycle.as_any().downcast_ref::<arrow::array::TimestampMicrosecondArray>().unwrap().value(0);
        let in_csv = expected[0].split(',').nth(index + offset).unwrap();
        assert_eq!(micros, at(in_csv).micros(), "{column} of the first row, in Parquet and in CSV");
    }
}

// A metric a gauge quota names is a level, billed to nobody it names: org-1's own gauge of `bytes`
// takes its generated `bytes` row out, the plan's gauge of `storage_bytes` every tenant's readings of it; the export
// still equals the independent computation row by row, which leaves them out by its own reading of the tables.
#[test]
fn gauge_metrics_have_no_row_and_the_rest_matches_the_independent_computation() {
    let test = generated_ledger("6", "3000", "5");
    let gauge = |tenant: &str, metric: &str, id: &str| {
        Event::Policy(PolicyEvent {
            header: header(&format!("{id}-v1"), "2026-10-01T00:00:00Z", tenant, metric),
            policy_id: id.into(),
            violation: Some(Violation::NO_INSERTS),
            window_seconds: None,
            cycle_anchor: None,
            ..hard_daily(&format!("{id}-v1"), tenant, 1_000)
        })
    };
    let reading = |id: &str, t: &str, tenant: &str, level: i64| {
        let Event::Usage(u) = usage(id, t, tenant, level) else { unreachable!("a usage event") };
        Event::Usage(UsageEvent { header: Header { metric: "storage_bytes".into(), ..u.header }, ..u })
    };
    ingest_events(
        &test,
        "gauges.avro",
        &[gauge("org-1", "bytes", "own-bytes-gauge"), gauge("*", "storage_bytes", "plan-storage-gauge")],
    );
    let readings = [
        reading("level-1", "2026-11-02T00:00:00Z", "org-1", 900),
        reading("level-2", "2026-11-03T00:00:00Z", "org-2", 1_200),
    ];
    ingest_events(&test, "levels.avro", &readings);
    let watermark = count(&test.status(), "watermark");
    let november = ("2026-11", at("2026-11-01T00:00:00Z").micros(), at("2026-12-01T00:00:00Z").micros());
    let lines = csv_lines(&export(&test, "2026-11", "csv", &[]));
    let expected = expected_rows(&test.path, november, watermark);
    assert_eq!(lines[1..], expected[..]);
    let keys: BTreeSet<(&str, &str)> = lines[1..]
        .iter()
        .map(|l| {
            let mut cells = l.split(',');
            (cells.next().unwrap(), cells.next().unwrap())
        })
        .collect();
    assert!(!keys.contains(&("org-1", "bytes")) && keys.contains(&("org-2", "bytes")), "{keys:?}");
    assert!(keys.iter().all(|(_, metric)| *metric != "storage_bytes"), "{keys:?}");
}

// "Same inputs, same bytes": two exports of the same ledger are identical in every format.
#[test]
fn the_same_ledger_gives_the_same_bytes() {
    let test = generated_ledger("8", "4000", "9");
    for format in ["csv", "jsonl", "parquet"] {
        assert_eq!(export(&test, "2026-11", format, &[]), export(&test, "2026-11", format, &[]), "{format}");
    }
    let out = test.file("billing.parquet");
    test.run(&["export", "billing", "--period", "2026-11", "--format", "parquet", "--out", out.to_str().unwrap()])
        .success();
    assert_eq!(std::fs::read(&out).unwrap(), export(&test, "2026-11", "parquet", &[]));
}

fn tokens(event_id: &str, occurred_at: &str, tenant: &str, quantity: i64) -> Event {
    Event::Usage(UsageEvent {
        header: header(event_id, occurred_at, tenant, "tokens"),
        quantity,
        request_id: None,
        attributes: BTreeMap::new(),
    })
}

fn soft_monthly(tenant: &str, limit: i64) -> Event {
    Event::Policy(PolicyEvent::new(
        header(&format!("{tenant}-tokens-v1"), "2026-08-01T00:00:00Z", tenant, "tokens"),
        format!("{tenant}-tokens"),
        limit,
        Window::MONTH,
        Enforcement::SOFT,
        at("2026-08-01T00:00:00Z"),
    ))
}

fn ingest_events(test: &TestLedger, name: &str, events: &[Event]) {
    write_container(&test.file(name), events);
    test.ingest(&test.file(name));
}

// contract §5 "Closing a period": --final stores September; late September usage, ingested and reconciled, never changes it (byte for byte, CSV and Parquet) and is carried into October's late_adjustments, then never again.
#[test]
fn a_closed_period_reexports_byte_for_byte_and_late_usage_moves_to_the_next_close() {
    let test = TestLedger::new();
    ingest_events(&test, "policies.avro", &[soft_monthly("org-1", 100)]);
    let september = [
        tokens("s-1", "2026-09-03T00:00:00Z", "org-1", 80),
        tokens("s-2", "2026-09-20T00:00:00Z", "org-1", 50),
        tokens("s-3", "2026-09-21T00:00:00Z", "=org-2", 5),
    ];
    ingest_events(&test, "september.avro", &september);
    let closed_csv = export(&test, "2026-09", "csv", &["--final"]);
    let closed_parquet = export(&test, "2026-09", "parquet", &[]);
    let watermark = count(&test.status(), "watermark");
    assert_eq!(
        csv_lines(&closed_csv),
        [
            HEADER.to_string(),
            format!("'=org-2,tokens,2026-09,5,,,,,,,,0,{watermark},,2026-09-01T00:00:00Z,2026-10-01T00:00:00Z,"),
            format!(
                "org-1,tokens,2026-09,130,org-1-tokens,1,100,0,100,30,,0,{watermark},,2026-09-01T00:00:00Z,2026-10-01T00:00:00Z,"
            ),
        ]
    );
    let late = [
        tokens("s-late-1", "2026-09-29T00:00:00Z", "org-1", 7),
        tokens("s-late-2", "2026-09-30T00:00:00Z", "=org-2", 3),
    ];
    ingest_events(&test, "late.avro", &late);
    ingest_events(&test, "october.avro", &[tokens("o-1", "2026-10-02T00:00:00Z", "org-1", 10)]);
    test.run(&["reconcile", "--as-of", "2026-10-31T00:00:00Z"]).expect_code(1);
    for extra in [&[][..], &["--final"][..]] {
        assert_eq!(export(&test, "2026-09", "csv", extra), closed_csv, "September never changes");
    }
    assert_eq!(export(&test, "2026-09", "parquet", &[]), closed_parquet);
    let october_open = csv_lines(&export(&test, "2026-10", "csv", &[]));
    let now = count(&test.status(), "watermark");
    assert_eq!(
        october_open[1..],
        [
            format!("'=org-2,tokens,2026-10,0,,,,,,,,3,{now},,2026-10-01T00:00:00Z,2026-11-01T00:00:00Z,"),
            format!(
                "org-1,tokens,2026-10,10,org-1-tokens,1,100,0,100,0,,7,{now},,2026-10-01T00:00:00Z,2026-11-01T00:00:00Z,"
            ),
        ]
    );
    // Finance's independent computation carries the same late adjustments, and none into a month after the next.
    let month = |name: &str, start: &str, end: &str| (name.to_string(), at(start).micros(), at(end).micros());
    let (name, start, end) = month("2026-10", "2026-10-01T00:00:00Z", "2026-11-01T00:00:00Z");
    // The oracle's rows are the ledger's values; the CSV neutralises a cell that starts with `=`.
    let neutralised = |rows: Vec<String>| -> Vec<String> {
        rows.into_iter().map(|row| if row.starts_with('=') { format!("'{row}") } else { row }).collect()
    };
    assert_eq!(october_open[1..], neutralised(expected_rows(&test.path, (&name, start, end), now))[..], "the oracle");
    let (name, start, end) = month("2026-12", "2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z");
    let december = neutralised(expected_rows(&test.path, (&name, start, end), now));
    assert!(december.iter().all(|row| row.split(',').nth(11) == Some("0")), "{december:?}");
    assert_eq!(csv_lines(&export(&test, "2026-12", "csv", &[]))[1..], december[..]);
    assert_eq!(csv_lines(&export(&test, "2026-10", "csv", &["--final"])), october_open, "closing carries them");
    let november = csv_lines(&export(&test, "2026-11", "csv", &[]));
    assert_eq!(
        november[1..],
        [format!(
            "org-1,tokens,2026-11,0,org-1-tokens,1,100,0,100,0,,0,{now},,2026-11-01T00:00:00Z,2026-12-01T00:00:00Z,"
        )],
        "carried once"
    );
    test.assert_verifies();
}

// Checked against finance's independent oracle of contract §5: a close carries the late usage recorded before it
// whether or not a reconcile ran since it arrived (it does not wait for the close after the next reconcile), and an
// open month's export shows the late adjustments not carried yet only if it is the month that will carry them.
#[test]
fn a_close_carries_late_usage_no_reconcile_has_seen_and_only_its_preview_shows_them() {
    let test = TestLedger::new();
    ingest_events(&test, "policies.avro", &[soft_monthly("org-1", 100)]);
    ingest_events(&test, "september.avro", &[tokens("s-1", "2026-09-03T00:00:00Z", "org-1", 80)]);
    export(&test, "2026-09", "csv", &["--final"]);
    ingest_events(&test, "late-1.avro", &[tokens("s-late-1", "2026-09-29T00:00:00Z", "org-1", 7)]);
    test.run(&["reconcile", "--as-of", "2026-10-01T00:00:00Z"]).expect_code(1);
    let late_adjustments = |lines: &[String]| lines[1].split(',').nth(11).unwrap().to_string();
    let preview = |period: &str| late_adjustments(&csv_lines(&export(&test, period, "csv", &[])));
    assert_eq!(preview("2026-10"), "7", "the next month to close carries it");
    assert_eq!(preview("2026-11"), "0", "a later month will not");
    ingest_events(&test, "late-2.avro", &[tokens("s-late-2", "2026-09-30T00:00:00Z", "org-1", 300)]);
    let october = csv_lines(&export(&test, "2026-10", "csv", &["--final"]));
    assert_eq!(late_adjustments(&october), "307", "no reconcile saw the 300, the close recorded it: {october:?}");
    let rerun = test.run(&["reconcile", "--as-of", "2026-11-01T00:00:00Z", "--json"]).expect_code(0).json();
    assert_eq!(rerun["adjustments_written"], 0, "the close's LATE_USAGE is reconcile's own: {rerun}");
    assert_eq!(csv_lines(&export(&test, "2026-10", "csv", &[])), october);
    assert_eq!(preview("2026-11"), "0", "carried once");
    test.assert_verifies();
}

fn reservation(
    event_id: &str,
    tenant: &str,
    action: ReservationAction,
    occurred_at: &str,
    amount: i64,
    expires_at: Option<&str>,
) -> Event {
    Event::Reservation(ReservationEvent {
        header: header(event_id, occurred_at, tenant, "tokens"),
        reservation_id: "r-1".into(),
        action,
        amount,
        expires_at: expires_at.map(at),
        fencing_token: None,
    })
}

// README "Reconciliation" (a reservation is (tenant, reservation_id)): the producers of org-a and org-b both chose
// `r-1`; each tenant is billed its own valid COMMIT, open and closed (org-a's 90 too, though org-b committed `r-1`
// first).
#[test]
fn a_reservation_id_shared_by_two_tenants_bills_each_tenant_its_own_commit() {
    use ReservationAction::*;
    let test = TestLedger::new();
    let events = [
        reservation("a-res", "org-a", RESERVE, "2026-11-10T10:00:00Z", 100, Some("2026-11-10T10:10:00Z")),
        reservation("b-res", "org-b", RESERVE, "2026-11-10T10:01:00Z", 50, Some("2026-11-10T10:11:00Z")),
        reservation("b-com", "org-b", COMMIT, "2026-11-10T10:02:00Z", 40, None),
        reservation("a-com", "org-a", COMMIT, "2026-11-10T10:03:00Z", 90, None),
    ];
    ingest_events(&test, "reservations.avro", &events);
    let watermark = count(&test.status(), "watermark");
    let expected = [
        HEADER.to_string(),
        format!("org-a,tokens,2026-11,90,,,,,,,,0,{watermark},,2026-11-01T00:00:00Z,2026-12-01T00:00:00Z,"),
        format!("org-b,tokens,2026-11,40,,,,,,,,0,{watermark},,2026-11-01T00:00:00Z,2026-12-01T00:00:00Z,"),
    ];
    assert_eq!(csv_lines(&export(&test, "2026-11", "csv", &[])), expected);
    assert_eq!(csv_lines(&export(&test, "2026-11", "csv", &["--final"])), expected);
}

// A valid COMMIT of 0 as a tenant's only consumption of the month makes no row, open or closed, as a RELEASE would
// not. The closed export must agree with the open one: `--final` stores no row, and must not then print one
// recomputed by the scan that a closed period without stored rows falls back to.
#[test]
fn a_commit_of_nothing_makes_no_row_open_or_closed() {
    use ReservationAction::*;
    let test = TestLedger::new();
    let events = [
        reservation("z-res", "org-z", RESERVE, "2026-10-10T10:00:00Z", 100, Some("2026-10-10T10:10:00Z")),
        reservation("z-com", "org-z", COMMIT, "2026-10-10T10:02:00Z", 0, None),
    ];
    ingest_events(&test, "reservations.avro", &events);
    let expected = [HEADER.to_string()];
    assert_eq!(csv_lines(&export(&test, "2026-10", "csv", &[])), expected, "open");
    assert_eq!(csv_lines(&export(&test, "2026-10", "csv", &["--final"])), expected, "closing");
    assert_eq!(csv_lines(&export(&test, "2026-10", "csv", &[])), expected, "closed");
}

/// The permission bits of `path`, in octal.
fn mode(path: &std::path::Path) -> String {
    use std::os::unix::fs::PermissionsExt;
    format!("{:o}", std::fs::metadata(path).unwrap().permissions().mode() & 0o777)
}

// An export file gets the mode File::create gives (0666 less the umask), not tempfile's 0600, and a file it
// replaces keeps its own mode.
#[test]
fn an_export_file_gets_the_usual_mode() {
    use std::os::unix::fs::PermissionsExt;
    let test = TestLedger::new();
    ingest_events(&test, "policies.avro", &[soft_monthly("org-1", 100)]);
    let out = test.file("billing.csv");
    let export_under_umask_027 = || {
        let args = ["--ledger", test.path.to_str().unwrap(), "export", "billing", "--period", "2026-11"];
        let status = std::process::Command::new("sh")
            .args(["-c", "umask 027 && exec \"$@\"", "sh", BIN])
            .args(args)
            .args(["--format", "csv", "--out", out.to_str().unwrap()])
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "export --out exited with {status}");
    };
    export_under_umask_027();
    assert_eq!(mode(&out), "640", "0666 less the umask 027");
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o604)).unwrap();
    export_under_umask_027();
    assert_eq!(mode(&out), "604", "the replaced file's mode, as File::create keeps it");
}

// An --out that cannot be written is named as given, with why (tempfile's "failed to persist temporary file" and
// its internal .tmpXXXX path say neither), and nothing is left behind.
#[test]
fn an_unwritable_out_says_which_path_and_why() {
    let test = TestLedger::new();
    ingest_events(&test, "policies.avro", &[soft_monthly("org-1", 100)]);
    std::fs::create_dir(test.file("exports")).unwrap();
    std::fs::write(test.file("a-file"), b"").unwrap();
    let before: BTreeSet<_> = std::fs::read_dir(test.dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    for (out, why) in [
        ("exports", "it is a directory"),
        ("exports/", "it is a directory"),
        ("missing/", "a file name cannot end with /"),
        ("missing/billing.csv", "directory missing does not exist"),
        ("a-file/billing.csv", "a-file is not a directory"),
    ] {
        let failed =
            test.run(&["export", "billing", "--period", "2026-11", "--format", "csv", "--out", out]).expect_code(2);
        assert_eq!(failed.stderr, format!("quota-ledger: error: cannot write {out}: {why}\n"));
    }
    let after: BTreeSet<_> = std::fs::read_dir(test.dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(after, before, "no file written");
}

// A period that is not over cannot be closed (exit 2, nothing recorded); a bad period is refused by name.
#[test]
fn only_a_finished_period_can_be_closed() {
    let test = TestLedger::new();
    ingest_events(&test, "policies.avro", &[soft_monthly("org-1", 100)]);
    let refused = test.run(&["export", "billing", "--period", "2099-01", "--format", "csv", "--final"]).expect_code(2);
    assert!(refused.stderr.contains("not over yet"), "{}", refused.stderr);
    let rows = test.run(&["sql", "--format", "csv", "SELECT COUNT(*) AS closes FROM period_closes"]).success();
    assert_eq!(rows.stdout_text(), "closes\n0\n");
    let bad = test.run(&["export", "billing", "--period", "2026-13", "--format", "csv"]).expect_code(2);
    assert!(bad.stderr.contains("YYYY-MM"), "{}", bad.stderr);
}

// For finance: a close cannot be undone, so the command refuses one that would put money in the wrong month: an
// earlier month after a later one (it would carry the later month's late usage into the earlier bill), a month that
// skips one, and a close whose --out cannot be written (the month would be closed for good, its bill unwritten).
#[test]
fn closes_go_in_order_and_only_with_a_writable_out() {
    let test = TestLedger::new();
    ingest_events(&test, "policies.avro", &[soft_monthly("org-1", 100)]);
    ingest_events(&test, "usage.avro", &[tokens("s-1", "2026-09-03T00:00:00Z", "org-1", 80)]);
    let closes = || test.run(&["sql", "--format", "csv", "SELECT period FROM period_closes ORDER BY period"]).success();
    let missing = test.file("no-such-dir").join("september.csv");
    let out = missing.to_str().unwrap();
    let refused = test.run(&["export", "billing", "--period", "2026-09", "--format", "csv", "--final", "--out", out]);
    let refused = refused.expect_code(2);
    assert!(refused.stderr.contains("does not exist"), "{}", refused.stderr);
    let dir = test.file("").to_str().unwrap().to_string();
    let refused = test.run(&["export", "billing", "--period", "2026-09", "--format", "csv", "--final", "--out", &dir]);
    assert!(refused.expect_code(2).stderr.contains("it is a directory"));
    let count = test.run(&["sql", "--format", "csv", "SELECT COUNT(*) AS closes FROM period_closes"]).success();
    assert_eq!(count.stdout_text(), "closes\n0\n", "nothing closed");
    export(&test, "2026-09", "csv", &["--final"]);
    ingest_events(&test, "late.avro", &[tokens("s-late", "2026-09-20T00:00:00Z", "org-1", 50)]);
    let skipping = test.run(&["export", "billing", "--period", "2026-11", "--format", "csv", "--final"]).expect_code(2);
    assert!(skipping.stderr.contains("cannot be closed before 2026-10"), "{}", skipping.stderr);
    // A refused close records nothing, not even the late usage a close records first.
    let adjustments = test.run(&["sql", "--format", "csv", "SELECT COUNT(*) AS n FROM adjustment_events"]).success();
    assert_eq!(adjustments.stdout_text(), "n\n0\n", "{}", skipping.stderr);
    // An earlier month was closed with the first close: --final answers its export, and closes nothing more.
    let earlier = test.run(&["export", "billing", "--period", "2026-08", "--format", "csv", "--final"]).success();
    assert!(earlier.stderr.contains("with the ledger's first close"), "{}", earlier.stderr);
    assert_eq!(closes().stdout_text(), "period\n2026-09\n");
    assert_eq!(export(&test, "2026-08", "csv", &[]), earlier.stdout);
}

// The first close of a ledger may be any month that is over, and months close in order, so a month before the
// first close could never close on its own, and its late usage would never be billed anywhere. The first close
// therefore closes every month before it too: their exports are computed at its watermark, and their late usage is
// carried into the next close like any closed month's.
#[test]
fn months_before_the_first_close_are_closed_with_it_and_their_late_usage_is_carried() {
    let test = TestLedger::new();
    ingest_events(&test, "policies.avro", &[soft_monthly("org-1", 100)]);
    ingest_events(
        &test,
        "usage.avro",
        &[tokens("a-1", "2026-08-10T00:00:00Z", "org-1", 40), tokens("s-1", "2026-09-03T00:00:00Z", "org-1", 80)],
    );
    let watermark = count(&test.status(), "watermark");
    let closed = test.run(&["export", "billing", "--period", "2026-09", "--format", "csv", "--final"]).success();
    assert!(
        closed.stderr.contains("which closed every month before it too: 2026-08 with consumption)"),
        "contract §9.5: the first close says which months it closed: {}",
        closed.stderr
    );
    let august = export(&test, "2026-08", "csv", &[]);
    assert_eq!(
        csv_lines(&august)[1..],
        [format!(
            "org-1,tokens,2026-08,40,org-1-tokens,1,100,0,100,0,,0,{watermark},,2026-08-01T00:00:00Z,2026-09-01T00:00:00Z,"
        )],
        "computed at the first close's watermark"
    );
    ingest_events(&test, "late.avro", &[tokens("a-late", "2026-08-20T00:00:00Z", "org-1", 1_000)]);
    assert_eq!(export(&test, "2026-08", "csv", &["--final"]), august, "closed: the late 1,000 does not change it");
    let reconciled = test.run(&["reconcile", "--as-of", "2026-10-01T00:00:00Z", "--json"]).expect_code(1).json();
    assert_eq!(reconciled["adjustments_by_kind"]["LATE_USAGE"], 1, "{reconciled}");
    let october = csv_lines(&export(&test, "2026-10", "csv", &["--final"]));
    assert_eq!(october[1].split(',').nth(11), Some("1000"), "carried into the next close: {october:?}");
    test.assert_verifies();
}

/// `tokens` usage of `tenant` naming `project` (none: naming no project).
fn tokens_of(event_id: &str, occurred_at: &str, tenant: &str, quantity: i64, project: Option<&str>) -> Event {
    let Event::Usage(u) = tokens(event_id, occurred_at, tenant, quantity) else { unreachable!("a usage event") };
    Event::Usage(UsageEvent { header: Header { project: project.map(String::from), ..u.header }, ..u })
}

/// A history of projects for `--by project`: org-p's usage of two projects and of none, a valid COMMIT of p-2 and an
/// expired one of p-1 (not consumption), a project of another month, a gauge metric naming a project (a level: no
/// row, so no breakdown), org-q naming no project at all, and org-r's own MONTH quota without consumption (a row of
/// 0, no breakdown).
fn projects_ledger() -> TestLedger {
    use ReservationAction::*;
    let test = TestLedger::new();
    let with_project = |event: Event, project: &str| match event {
        Event::Reservation(mut r) => {
            r.header.project = Some(project.into());
            r.reservation_id = format!("r-{project}");
            Event::Reservation(r)
        }
        other => other,
    };
    let gauge = Event::Policy(PolicyEvent {
        header: header("gauge-v1", "2026-10-01T00:00:00Z", "org-p", "storage_bytes"),
        policy_id: "gauge".into(),
        violation: Some(Violation::NO_INSERTS),
        window_seconds: None,
        cycle_anchor: None,
        ..hard_daily("gauge-v1", "org-p", 1_000)
    });
    let Event::Usage(level) = tokens_of("level-1", "2026-11-03T00:00:00Z", "org-p", 900, Some("p-1")) else {
        unreachable!()
    };
    let level = Event::Usage(UsageEvent { header: Header { metric: "storage_bytes".into(), ..level.header }, ..level });
    let events = [
        soft_monthly("org-p", 100),
        soft_monthly("org-r", 100),
        gauge,
        level,
        tokens_of("p1-a", "2026-11-02T10:00:00Z", "org-p", 30, Some("p-1")),
        tokens_of("p1-b", "2026-11-20T10:00:00Z", "org-p", 12, Some("p-1")),
        tokens_of("p2-a", "2026-11-05T10:00:00Z", "org-p", 7, Some("p-2")),
        tokens_of("none-a", "2026-11-06T10:00:00Z", "org-p", 5, None),
        tokens_of("p3-oct", "2026-10-30T10:00:00Z", "org-p", 50, Some("p-3")),
        tokens_of("q-a", "2026-11-07T10:00:00Z", "org-q", 9, None),
        with_project(
            reservation("p2-res", "org-p", RESERVE, "2026-11-10T10:00:00Z", 100, Some("2026-11-10T10:10:00Z")),
            "p-2",
        ),
        with_project(reservation("p2-com", "org-p", COMMIT, "2026-11-10T10:05:00Z", 40, None), "p-2"),
        with_project(
            reservation("p1-res", "org-p", RESERVE, "2026-11-11T10:00:00Z", 100, Some("2026-11-11T10:10:00Z")),
            "p-1",
        ),
        with_project(reservation("p1-com", "org-p", COMMIT, "2026-11-11T10:30:00Z", 60, None), "p-1"),
    ];
    // A container file holds one record type.
    for (i, kind) in
        [EventType::PolicyEvent, EventType::UsageEvent, EventType::ReservationEvent].into_iter().enumerate()
    {
        let of_kind: Vec<Event> = events.iter().filter(|e| e.event_type() == kind).cloned().collect();
        ingest_events(&test, &format!("projects-{i}.avro"), &of_kind);
    }
    test
}

// `export billing --by project`: each bill row, unchanged but for an empty `project` added last, is
// followed by its consumption per project (by name, then the consumption naming none), which adds up to the row's
// and equals an independent computation from the ledger's tables (usage plus valid COMMITs, an expired reservation's
// COMMIT not counted, a gauge metric left out); a row without consumption has none. The same holds after --final, and
// JSONL and Parquet carry the same lines.
#[test]
fn a_bill_by_project_adds_up_to_its_rows_and_matches_an_independent_computation() {
    let test = projects_ledger();
    let watermark = count(&test.status(), "watermark");
    let plain = csv_lines(&export(&test, "2026-11", "csv", &[]));
    let by = csv_lines(&export(&test, "2026-11", "csv", &["--by", "project"]));
    let (columns, cycle_columns) = HEADER.split_once(",cycle_start").unwrap();
    assert_eq!(by[0], format!("{columns},project,cycle_start{cycle_columns}"), "project, then the cycle's columns");
    let expected =
        expected_by_project(&test.path, (at("2026-11-01T00:00:00Z").micros(), at("2026-12-01T00:00:00Z").micros()));
    let mut lines = by[1..].iter().peekable();
    let mut found: BTreeMap<(String, String), BTreeMap<String, i64>> = BTreeMap::new();
    for bill in &plain[1..] {
        let mut last = bill.rsplitn(4, ',');
        let (plan, end, start) = (last.next().unwrap(), last.next().unwrap(), last.next().unwrap());
        let front = last.next().unwrap();
        let row = format!("{front},,{start},{end},{plan}");
        assert_eq!(lines.next(), Some(&row), "the bill's row, an empty project added");
        let cells: Vec<&str> = bill.split(',').collect();
        let (tenant, metric, consumption) = (cells[0], cells[1], cells[3].parse::<i64>().unwrap());
        let mut sum = 0;
        let mut order = Vec::new();
        // A project's line: its late_adjustments (12th cell) is empty, never a bill row's.
        while let Some(line) = lines.next_if(|l| l.split(',').nth(11) == Some("")) {
            let cells: Vec<&str> = line.split(',').collect();
            assert_eq!(
                (cells[0], cells[1], cells[2], &cells[4..11], cells[12], cells[13]),
                (tenant, metric, "2026-11", &["", "", "", "", "", "", ""][..], watermark.to_string().as_str(), ""),
                "a project's line carries tenant, metric, period, consumption, watermark and gaps only: {line}"
            );
            let amount: i64 = cells[3].parse().unwrap();
            sum += amount;
            assert_eq!((cells[15], cells[16]), (start, end), "a project's line carries its bill's cycle");
            order.push(cells[14].to_string());
            found.entry((tenant.into(), metric.into())).or_default().insert(cells[14].into(), amount);
        }
        assert_eq!(sum, consumption, "{tenant} {metric}: its projects add up to its consumption");
        let mut sorted: Vec<String> = order.iter().filter(|p| !p.is_empty()).cloned().collect();
        sorted.sort();
        sorted.extend(order.iter().filter(|p| p.is_empty()).cloned());
        assert_eq!(order, sorted, "projects by name, then the consumption naming none");
    }
    assert_eq!(lines.next(), None);
    let billed: BTreeSet<(String, String)> = found.keys().cloned().collect();
    let expected: BTreeMap<_, _> = expected.into_iter().filter(|(key, _)| billed.contains(key)).collect();
    assert_eq!(found, expected);
    let org_p = &found[&("org-p".to_string(), "tokens".to_string())];
    assert_eq!(org_p.iter().map(|(p, a)| (p.as_str(), *a)).collect::<Vec<_>>(), [("", 5), ("p-1", 42), ("p-2", 47)]);
    assert!(!found.contains_key(&("org-r".to_string(), "tokens".to_string())), "no consumption, no breakdown");
    assert!(found.keys().all(|(_, metric)| metric != "storage_bytes"), "a level is billed to no project");

    let jsonl = String::from_utf8(export(&test, "2026-11", "jsonl", &["--by", "project"])).unwrap();
    let json: Vec<serde_json::Value> = jsonl.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(json.len(), by.len() - 1);
    let keys: Vec<&String> = json[0].as_object().unwrap().keys().collect();
    assert_eq!(keys, by[0].split(',').collect::<Vec<_>>());
    let projects: Vec<&serde_json::Value> = json.iter().map(|j| &j["project"]).collect();
    assert!(projects.contains(&&serde_json::Value::Null), "a bill's row: null");
    assert!(projects.contains(&&serde_json::json!("")), "the consumption naming no project: the empty string");
    let parquet = export(&test, "2026-11", "parquet", &["--by", "project"]);
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(parquet))
        .unwrap()
        .build()
        .unwrap();
    let batches: Vec<_> = reader.map(Result::unwrap).collect();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), by.len() - 1);
    assert_eq!(batches[0].schema().fields()[14].name(), "project");

    let closed = csv_lines(&export(&test, "2026-11", "csv", &["--final", "--by", "project"]));
    assert_eq!(closed, by, "a close's rows and their projects, at its watermark");
    ingest_events(&test, "late.avro", &[tokens_of("p1-late", "2026-11-25T10:00:00Z", "org-p", 1_000, Some("p-1"))]);
    assert_eq!(
        csv_lines(&export(&test, "2026-11", "csv", &["--by", "project"])),
        by,
        "late usage changes no closed bill"
    );
    assert_eq!(csv_lines(&export(&test, "2026-11", "csv", &[])), plain);
}

// `--by project` needs the events, which a cluster's nodes do not answer: refused with --cluster, before anything.
#[test]
fn by_project_is_refused_with_cluster() {
    let test = TestLedger::new();
    let refused = test.run(&[
        "export",
        "billing",
        "--period",
        "2026-11",
        "--format",
        "csv",
        "--by",
        "project",
        "--cluster",
        "localhost:9092",
    ]);
    let refused = refused.expect_code(2);
    assert!(refused.stderr.contains("--cluster"), "{}", refused.stderr);
}

/// A version of `tenant`'s tokens policy billed per cycle anchored at `anchor` in `zone` (SOFT, limit 100).
fn soft_cycle(tenant: &str, version: i32, anchor: &str, zone: &str, effective_from: &str) -> Event {
    let Event::Policy(monthly) = soft_monthly(tenant, 100) else { unreachable!("a policy") };
    Event::Policy(PolicyEvent {
        header: header(&format!("{tenant}-tokens-v{version}"), effective_from, tenant, "tokens"),
        version,
        window: Window::BILLING_CYCLE,
        cycle_anchor: Some(at(anchor)),
        time_zone: Some(zone.into()),
        effective_from: at(effective_from),
        ..monthly
    })
}

// `export billing` bills a tenant on a billing cycle by its cycles, in its time zone. org-ny's cycles
// start on the 31st at midnight in New York: on Feb 28 in February (the 31st clamped), on Mar 31 at 04:00 UTC after
// the clocks sprang forward. Each month's export lists the cycles that end in it (by the tenant's clock), with
// cycle_start and cycle_end, and February's equals the independent computation. Late usage of a closed cycle is
// carried into the next cycle's row; an anchor moved mid-cycle (to the 17th) takes effect at the next boundary, and
// April bills the short cycle it makes. org-switch moves from calendar months to cycles on the 17th (UTC) in March:
// its first cycle's row bills from March 1, where February's month row stopped, so no day is billed twice. org-back
// moves the other way, from cycles on the 17th back to calendar months on March 1: March's month row bills from
// February 17, where its last cycle ended, so no day goes unbilled.
#[test]
fn billing_cycles_bill_each_tenant_its_own_cycles_in_its_time_zone() {
    let test = TestLedger::new();
    let Event::Policy(monthly) = soft_monthly("org-switch", 100) else { unreachable!("a policy") };
    let from_january = PolicyEvent { effective_from: at("2026-01-01T00:00:00Z"), ..monthly };
    let Event::Policy(monthly) = soft_monthly("org-back", 100) else { unreachable!("a policy") };
    let back_to_months = PolicyEvent {
        header: header("org-back-tokens-v2", "2026-02-25T00:00:00Z", "org-back", "tokens"),
        version: 2,
        effective_from: at("2026-03-01T00:00:00Z"),
        ..monthly
    };
    let policies = [
        soft_cycle("org-back", 1, "2026-01-17T00:00:00Z", "UTC", "2026-01-01T00:00:00Z"),
        Event::Policy(back_to_months),
        soft_cycle("org-ny", 1, "2026-01-31T05:00:00Z", "America/New_York", "2026-01-01T00:00:00Z"),
        Event::Policy(from_january),
        soft_cycle("org-switch", 2, "2026-01-17T00:00:00Z", "UTC", "2026-03-05T00:00:00Z"),
    ];
    ingest_events(&test, "policies.avro", &policies);
    let usage = [
        tokens("n-1", "2026-02-10T00:00:00Z", "org-ny", 60),
        // 23:59:59 on Feb 27 in New York: still the cycle from Jan 31.
        tokens("n-2", "2026-02-28T04:59:59Z", "org-ny", 50),
        tokens("n-3", "2026-02-28T05:00:00Z", "org-ny", 30),
        // 23:59:59 on Mar 30, EDT.
        tokens("n-4", "2026-03-31T03:59:59Z", "org-ny", 20),
        tokens("n-5", "2026-03-31T04:00:00Z", "org-ny", 5),
        tokens("s-1", "2026-02-20T00:00:00Z", "org-switch", 10),
        tokens("s-2", "2026-03-10T00:00:00Z", "org-switch", 20),
        tokens("s-3", "2026-03-20T00:00:00Z", "org-switch", 40),
        tokens("b-1", "2026-02-10T00:00:00Z", "org-back", 10),
        tokens("b-2", "2026-02-20T00:00:00Z", "org-back", 20),
        tokens("b-3", "2026-03-10T00:00:00Z", "org-back", 40),
    ];
    ingest_events(&test, "usage.avro", &usage);
    let watermark = count(&test.status(), "watermark");
    let february = csv_lines(&export(&test, "2026-02", "csv", &["--final"]));
    let period = ("2026-02", at("2026-02-01T00:00:00Z").micros(), at("2026-03-01T00:00:00Z").micros());
    assert_eq!(february[1..], expected_rows(&test.path, period, watermark), "the independent computation");
    assert_eq!(
        february[1..],
        [
            format!(
                "org-back,tokens,2026-02,10,org-back-tokens,1,100,0,100,0,,0,{watermark},,2026-01-17T00:00:00Z,\
                 2026-02-17T00:00:00Z,"
            ),
            format!(
                "org-ny,tokens,2026-02,110,org-ny-tokens,1,100,0,100,10,,0,{watermark},,2026-01-31T05:00:00Z,\
                 2026-02-28T05:00:00Z,"
            ),
            format!(
                "org-switch,tokens,2026-02,10,org-switch-tokens,1,100,0,100,0,,0,{watermark},,2026-02-01T00:00:00Z,\
                 2026-03-01T00:00:00Z,"
            ),
        ]
    );
    // Late: 7 more of org-ny's closed February cycle. A new anchor, the 17th, set on March 10.
    ingest_events(&test, "late.avro", &[tokens("n-late", "2026-02-20T00:00:00Z", "org-ny", 7)]);
    let moved = soft_cycle("org-ny", 2, "2026-03-17T04:00:00Z", "America/New_York", "2026-03-10T00:00:00Z");
    ingest_events(&test, "moved.avro", &[moved]);
    let march = csv_lines(&export(&test, "2026-03", "csv", &["--final"]));
    // The close records the late usage it bills first (a LATE_USAGE adjustment), at the watermark it closes at.
    let now = count(&test.status(), "watermark");
    assert_eq!(
        march[1..],
        [
            format!(
                "org-back,tokens,2026-03,60,org-back-tokens,2,100,0,100,0,,0,{now},,2026-02-17T00:00:00Z,\
                 2026-04-01T00:00:00Z,"
            ),
            format!(
                "org-ny,tokens,2026-03,50,org-ny-tokens,2,100,0,100,0,,7,{now},,2026-02-28T05:00:00Z,\
                 2026-03-31T04:00:00Z,"
            ),
            format!(
                "org-switch,tokens,2026-03,20,org-switch-tokens,2,100,0,100,0,,0,{now},,2026-03-01T00:00:00Z,\
                 2026-03-17T00:00:00Z,"
            ),
        ],
        "org-back's month from its last cycle's end; the cycle across the spring-forward, with February's late usage; \
         org-switch's first cycle from March 1"
    );
    let april = csv_lines(&export(&test, "2026-04", "csv", &[]));
    assert_eq!(
        april[1..],
        [
            format!(
                "org-back,tokens,2026-04,0,org-back-tokens,2,100,0,100,0,,0,{now},,2026-04-01T00:00:00Z,\
                 2026-05-01T00:00:00Z,"
            ),
            format!(
                "org-ny,tokens,2026-04,5,org-ny-tokens,2,100,0,100,0,,0,{now},,2026-03-31T04:00:00Z,\
                 2026-04-17T04:00:00Z,"
            ),
            format!(
                "org-switch,tokens,2026-04,40,org-switch-tokens,2,100,0,100,0,,0,{now},,2026-03-17T00:00:00Z,\
                 2026-04-17T00:00:00Z,"
            ),
        ],
        "the short cycle the anchor change makes, to the new anchor's first start"
    );
    test.assert_verifies();
}
