//! `sql` run as an analyst runs it: exact expected tables over the documented table names, CSV and JSON
//! output, and a ledger that no statement can modify.

mod support;

use support::*;

fn ledger_with_usage() -> TestLedger {
    let test = TestLedger::new();
    let events = [
        usage("u-1", "2026-11-02T10:00:00Z", "org-1", 3),
        usage("u-2", "2026-11-02T11:00:00Z", "org-1", 4),
        usage("u-3", "2026-11-03T09:00:00Z", "org-2", 5),
        usage("u-2", "2026-11-02T11:00:00Z", "org-1", 40),
    ];
    write_container(&test.file("usage.avro"), &events);
    test.ingest(&test.file("usage.avro"));
    test
}

// A grouped query over usage_events prints exactly this aligned table; the conflicting copy is visible by status.
#[test]
fn a_query_prints_an_aligned_table() {
    let test = ledger_with_usage();
    let query = "SELECT tenant, status, COUNT(*) AS events, SUM(quantity) AS quantity, MIN(occurred_at) AS first \
                 FROM usage_events GROUP BY tenant, status ORDER BY tenant, status";
    let table = test.run(&["sql", query]).success().stdout_text();
    assert_eq!(
        table,
        "tenant  status                 events  quantity  first\n\
         org-1   conflicting_duplicate  1       40        2026-11-02T11:00:00Z\n\
         org-1   recorded               2       7         2026-11-02T10:00:00Z\n\
         org-2   recorded               1       5         2026-11-03T09:00:00Z\n"
    );
}

// CSV and JSON outputs; usage_totals is the per-period aggregate the appends maintain (recorded usage only).
// README "sql": a table longer than 10,000 rows prints in chunks, each aligned on the widest cells seen so far; the
// first chunk does not wait for a longer cell of a later one.
#[test]
fn a_long_table_prints_in_chunks_aligned_so_far() {
    let test = ledger_with_usage();
    let query = "SELECT CASE WHEN value > 10000 THEN 'longer-cell' ELSE 'a' END AS c, value AS n \
                 FROM generate_series(1, 10001) ORDER BY value";
    let text = test.run(&["sql", query]).success().stdout_text();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 10_002, "the header and every row");
    assert_eq!((lines[0], lines[1], lines[10_000]), ("c  n", "a  1", "a  10000"));
    assert_eq!(lines[10_001], "longer-cell  10001");
}

#[test]
fn csv_and_json_outputs() {
    let test = ledger_with_usage();
    let csv = test.run(&["sql", "--format", "csv", "SELECT * FROM usage_totals ORDER BY tenant"]).success();
    assert_eq!(
        csv.stdout_text(),
        // The last column, `shard`, is null for a ledger of every partition (docs/contract.md §9.4).
        "tenant,metric,period,quantity,shard\norg-1,requests,2026-11,7,\norg-2,requests,2026-11,5,\n"
    );
    let json = test.run(&["sql", "--format", "json", "SELECT seq, event_id FROM entries WHERE seq <= 2 ORDER BY seq"]);
    assert_eq!(
        json.success().json(),
        serde_json::json!([{"seq": 1, "event_id": "u-1"}, {"seq": 2, "event_id": "u-2"}])
    );
}

// An empty result still names its columns: the CSV header, the table's header line, an empty JSON array.
#[test]
fn an_empty_result_keeps_its_header() {
    let test = ledger_with_usage();
    let query = "SELECT seq, tenant FROM entries WHERE seq < 0";
    let csv = test.run(&["sql", "--format", "csv", query]).success();
    assert_eq!(csv.stdout_text(), "seq,tenant\n");
    let table = test.run(&["sql", query]).success();
    assert_eq!(table.stdout_text(), "seq  tenant\n");
    let json = test.run(&["sql", "--format", "json", query]).success();
    assert_eq!(json.json(), serde_json::json!([]));
}

// The ledger cannot be modified through `sql`: DDL, DML and statements are refused (exit 2) and the ledger still verifies unchanged.
#[test]
fn sql_never_modifies_the_ledger() {
    let test = ledger_with_usage();
    let before = test.status();
    for statement in [
        "INSERT INTO usage_totals VALUES ('org-x', 'requests', '2026-11', 1)",
        "DELETE FROM entries",
        "UPDATE usage_totals SET quantity = 0",
        "CREATE TABLE stolen AS SELECT * FROM entries",
        "DROP TABLE entries",
    ] {
        let refused = test.run(&["sql", statement]).expect_code(2);
        assert!(!refused.stderr.is_empty(), "{statement}: a refusal says why");
    }
    assert_eq!(test.status(), before);
    test.assert_verifies();
}

// A query on a table that does not exist says so once, for every format (DataFusion's error repeated itself).
#[test]
fn an_unknown_table_is_named_once() {
    let test = ledger_with_usage();
    for format in ["table", "csv", "json"] {
        let failed = test.run(&["sql", "--format", format, "SELECT * FROM nope"]).expect_code(2);
        assert_eq!(
            failed.stderr,
            "quota-ledger: error: query failed: Error during planning: table 'datafusion.public.nope' not found\n",
            "--format {format}"
        );
    }
}

// `sql --tables` documents every table and its columns.
#[test]
fn the_tables_are_listed_with_their_columns() {
    let listed = TestLedger::new().run(&["sql", "--tables"]).success().stdout_text();
    for expected in [
        "usage_events: ",
        "  quantity BIGINT",
        "decision_events: ",
        "  retry_after_ms BIGINT, nullable",
        "period_exports: ",
        "plan_assignment_events: ",
        "  effective_from TIMESTAMP",
        "offset_gaps: ",
        "  to_offset BIGINT",
    ] {
        assert!(listed.contains(expected), "{expected:?} missing from:\n{listed}");
    }
}

// A cell longer than a format width can be (65,535) is printed whole and the next column still aligned: the table
// padded with `{:<width$}`, whose width is a u16, and panicked.
#[test]
fn a_cell_longer_than_a_format_width_is_printed() {
    let test = ledger_with_usage();
    let query = "SELECT repeat('x', 70000) AS cell, 1 AS n UNION ALL SELECT 'y', 22";
    let table = test.run(&["sql", query]).success().stdout_text();
    let cell = "x".repeat(70_000);
    let expected = format!("cell{}  n\n{cell}  1\ny{}  22\n", " ".repeat(70_000 - 4), " ".repeat(70_000 - 1));
    assert!(table == expected, "the table differs from the one expected (first 200 bytes: {:?})", &table[..200]);
}

// Trust issue, point 7: output is safe to open. An event id a producer chose to run as a spreadsheet formula is
// neutralised in `sql --format csv` as in the billing CSV (numbers stay numbers, a negative one unprefixed), and a
// producer's newline or escape sequence in a source is shown escaped on its own line of the table, never a forged
// row nor a terminal command.
#[test]
fn csv_and_table_output_is_safe_to_open() {
    let test = TestLedger::new();
    let mut formula = usage("=HYPERLINK(\"http://x\",\"y\")", "2026-11-02T10:00:00Z", "org-1", 3);
    let mut forged = usage("u-2", "2026-11-02T11:00:00Z", "org-1", 4);
    if let (schemas::Event::Usage(a), schemas::Event::Usage(b)) = (&mut formula, &mut forged) {
        a.header.source = "api".into();
        b.header.source = "api\norg-9  recorded  999\u{1b}[2J".into();
    }
    write_container(&test.file("usage.avro"), &[formula, forged]);
    test.ingest(&test.file("usage.avro"));

    let query = "SELECT event_id, quantity, 0 - quantity AS negative FROM usage_events ORDER BY seq";
    let csv = test.run(&["sql", "--format", "csv", query]).success().stdout_text();
    assert_eq!(csv, "event_id,quantity,negative\n\"'=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\",3,-3\nu-2,4,-4\n");

    let table = test.run(&["sql", "SELECT event_id, source FROM usage_events ORDER BY seq"]).success().stdout_text();
    assert_eq!(table.lines().count(), 3, "a header and two rows, whatever the sources hold: {table}");
    assert!(table.contains("api\\norg-9  recorded  999\\u{1b}[2J"), "{table}");
    assert!(!table.contains('\u{1b}'), "{table}");
}
