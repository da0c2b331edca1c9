//! `demo` end to end: the real binary plays a small month on the embedded broker; every artefact it leaves
//! agrees with the ledger, and report.html renders in headless Chromium with its charts.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const MONTH: &str = "2026-10";
const NEXT: &str = "2026-11";
/// The contract §7 header of a billing CSV.
const HEADER: &str = "tenant,metric,period,consumption,policy_id,policy_version,limit,grants,effective_limit,overage,\
overshoot,late_adjustments,watermark,gaps,cycle_start,cycle_end,plan";
/// What the demo's five late events add up to (10, 20, 30, 40 and 50 requests).
const LATE_QUANTITY: i64 = 150;
/// Longest a Chromium screenshot may take before the test gives up on it.
const CHROMIUM_TIMEOUT: Duration = Duration::from_secs(120);

/// The demo's output directory and what it printed; played once for the tests of this file.
struct Played {
    out: PathBuf,
    stdout: String,
}

fn played() -> &'static Played {
    static PLAYED: OnceLock<Played> = OnceLock::new();
    PLAYED.get_or_init(|| {
        // Under target/ (cargo's temporary directory for integration tests), never in the repository.
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("demo-test");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let args = ["demo", "--tenants", "8", "--events", "20000", "--hook-requests", "300", "--month", MONTH];
        let run = support::run_in(&dir, &[&args[..], &["--out", "out"]].concat(), b"").success();
        Played { out: dir.join("out"), stdout: run.stdout_text() }
    })
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// Billing CSV rows as maps of column to cell.
fn csv_rows(path: &Path) -> Vec<BTreeMap<String, String>> {
    let text = read(path);
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some(HEADER), "{} starts with the contract §7 header", path.display());
    let columns: Vec<&str> = HEADER.split(',').collect();
    lines.map(|line| columns.iter().map(|c| c.to_string()).zip(line.split(',').map(String::from)).collect()).collect()
}

fn cell(row: &BTreeMap<String, String>, column: &str) -> i64 {
    row[column].parse().unwrap_or(0)
}

/// Counted usage per (tenant, metric) with event time in the month, up to the close's watermark: straight from
/// the ledger's tables.
fn ledger_usage(ledger: &rusqlite::Connection) -> BTreeMap<(String, String), i64> {
    let (start, end, watermark): (i64, i64, i64) = ledger
        .query_row("SELECT period_start, period_end, watermark FROM period_closes WHERE period = ?1", [MONTH], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .expect("the demo closed its month");
    let mut statement = ledger
        .prepare(
            "SELECT e.tenant, e.metric, SUM(u.quantity) FROM entries e JOIN usage_events u ON u.seq = e.seq \
             WHERE e.status = 'recorded' AND e.seq <= ?1 AND e.occurred_at >= ?2 AND e.occurred_at < ?3 \
             GROUP BY e.tenant, e.metric",
        )
        .unwrap();
    statement
        .query_map([watermark, start, end], |r| Ok(((r.get(0)?, r.get(1)?), r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// Counted usage of `tenant`'s `metric` with event time before `ends`, up to the close's watermark.
fn ledger_usage_before(ledger: &rusqlite::Connection, tenant: &str, metric: &str, ends: i64) -> i64 {
    ledger
        .query_row(
            "SELECT COALESCE(SUM(u.quantity), 0) FROM entries e JOIN usage_events u ON u.seq = e.seq \
             WHERE e.status = 'recorded' AND e.tenant = ?1 AND e.metric = ?2 AND e.occurred_at < ?3 \
               AND e.seq <= (SELECT watermark FROM period_closes WHERE period = ?4)",
            rusqlite::params![tenant, metric, ends, MONTH],
            |r| r.get(0),
        )
        .unwrap()
}

#[test]
fn demo_leaves_every_artefact_and_each_agrees_with_the_ledger() {
    let played = played();
    let out = &played.out;
    for file in ["ledger.db", "reconcile.txt", "reconcile.json", "reconcile-late.json", "report.html", "tokens.toml"] {
        assert!(out.join(file).is_file(), "{file} is in the demo's output");
    }
    let ledger =
        rusqlite::Connection::open_with_flags(out.join("ledger.db"), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();

    // Billing: consumption equals the ledger's usage where no reservation adds to it (requests, bytes); tokens
    // also carry valid commits, so at least the usage.
    let rows = csv_rows(&out.join(format!("billing-{MONTH}.csv")));
    let usage = ledger_usage(&ledger);
    assert!(!usage.is_empty());
    let month_start = format!("{MONTH}-01T00:00:00Z");
    for ((tenant, metric), quantity) in &usage {
        let row = rows
            .iter()
            .find(|r| r["tenant"] == *tenant && r["metric"] == *metric)
            .unwrap_or_else(|| panic!("a billing row for {tenant} {metric}"));
        if metric == "seats" {
            // org-2's seats are metered (UNIQUE_COUNT of the subject, HARD 5): the bill counts the distinct users,
            // not their asks, which the usage adds up.
            let users: i64 = ledger
                .query_row(
                    "SELECT COUNT(DISTINCT e.subject) FROM entries e JOIN usage_events u ON u.seq = e.seq \
                     WHERE e.status = 'recorded' AND e.tenant = ?1 AND e.metric = 'seats'",
                    [tenant],
                    |r| r.get(0),
                )
                .unwrap();
            assert_eq!((tenant.as_str(), users, *quantity), ("org-2", 5, 10), "5 users seated, each asked twice");
            assert_eq!(cell(row, "consumption"), users, "the bill counts seats: {row:?}");
            continue;
        }
        // org-3 is billed by its own cycle (from the 17th at midnight in Tokyo): the month's bill holds the cycle
        // that ends on the 17th, and of the month's usage only what came before.
        let quantity = &match row["cycle_start"] == month_start {
            true => *quantity,
            false => {
                assert_eq!((tenant.as_str(), metric.as_str()), ("org-3", "tokens"), "the cycle tenant: {row:?}");
                let ends = schemas::Timestamp::parse_rfc3339(&row["cycle_end"]).unwrap().micros();
                ledger_usage_before(&ledger, tenant, metric, ends)
            }
        };
        if metric == "tokens" {
            assert!(cell(row, "consumption") >= *quantity, "{tenant} tokens: {row:?} below usage {quantity}");
        } else {
            assert_eq!(cell(row, "consumption"), *quantity, "{tenant} {metric}: {row:?}");
        }
    }
    assert!(rows.iter().any(|r| cell(r, "overshoot") > 0), "some tenant overshot a HARD limit: {rows:?}");
    assert!(rows.iter().any(|r| cell(r, "overage") > 0), "some tenant is billed overage: {rows:?}");

    // Parquet holds the same rows.
    let parquet = std::fs::read(out.join(format!("billing-{MONTH}.parquet"))).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(parquet))
        .unwrap()
        .build()
        .unwrap();
    let parquet_rows: usize = reader.map(|batch| batch.unwrap().num_rows()).sum();
    assert_eq!(parquet_rows, rows.len(), "Parquet and CSV hold the same rows");

    // The late events are carried into the next month, once, and so is the usage event finance voided after the
    // close: less what it had counted.
    let (voided, action): (i64, String) = ledger
        .query_row(
            "SELECT u.quantity, c.action FROM correction_events c JOIN entries o ON o.event_id = c.original_event_id \
             JOIN usage_events u ON u.seq = o.seq",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("the demo voided one usage event");
    assert_eq!(action, "VOID");
    let refused_seats: i64 = ledger
        .query_row(
            "SELECT COUNT(*) FROM decision_events d JOIN entries e ON e.seq = d.seq \
             WHERE e.metric = 'seats' AND d.outcome = 'DENIED'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(refused_seats, 6, "the 3 users past the 5 seats are refused, each time they ask");
    assert!(played.stdout.contains("10 asks allowed"), "{}", played.stdout);
    assert!(played.stdout.contains(" voided by finance@demo"), "{}", played.stdout);
    let next = csv_rows(&out.join(format!("billing-{NEXT}.csv")));
    let late: i64 = next.iter().map(|r| cell(r, "late_adjustments")).sum();
    assert_eq!(late, LATE_QUANTITY - voided, "the next month carries the late usage and the void: {next:?}");
    let late_run: serde_json::Value = serde_json::from_str(&read(&out.join("reconcile-late.json"))).unwrap();
    assert!(late_run["adjustments_by_kind"]["LATE_USAGE"].as_u64().unwrap_or(0) > 0, "{late_run}");
    // org-1's workers leased its 3 job slots; 3 leases were never released, and the nightly job says so. The ledger
    // holds the refused stale release nowhere: a refusal records nothing.
    let run: serde_json::Value = serde_json::from_str(&read(&out.join("reconcile.json"))).unwrap();
    assert_eq!(run["read"]["leases_expired"], serde_json::json!({"org-1": 3}), "{}", run["read"]);
    let tokens: Vec<i64> = ledger
        .prepare("SELECT fencing_token FROM reservation_events WHERE action = 'RESERVE' AND fencing_token IS NOT NULL ORDER BY seq")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(tokens, [1, 2, 3, 4], "four leases granted, each a greater fencing token");

    // The audit answer names a request the ledger holds as denied.
    let audit = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .find(|name| name.starts_with("audit-why-"))
        .expect("an audit-why file");
    let request_id = audit.trim_start_matches("audit-why-").trim_end_matches(".txt");
    let denied: i64 = ledger
        .query_row(
            "SELECT COUNT(*) FROM decision_events WHERE request_id = ?1 AND outcome = 'DENIED'",
            [request_id],
            |r| r.get(0),
        )
        .unwrap();
    assert!(denied > 0, "{request_id} is a denied request of the ledger");
    let answer = read(&out.join(&audit));
    assert!(answer.starts_with(&format!("Request {request_id} was DENIED")), "{answer}");
    assert!(played.stdout.contains(&format!("audit why {request_id}")), "the commands to paste:\n{}", played.stdout);

    // The hook's checks of the month's last day found tenants past their thresholds: the page lists the alerts the
    // ledger holds.
    let alerts: i64 = ledger.query_row("SELECT COUNT(*) FROM alert_events", [], |r| r.get(0)).unwrap();
    assert!(alerts > 0, "the hook wrote alerts");

    // The page is self-contained, with its four charts, and lists the alerts.
    let html = read(&out.join("report.html"));
    assert!(html.contains("<h2>Alerts (quota.alerts)</h2>"), "the alerts section");
    assert!(html.contains(">80%<"), "an 80% alert listed");
    assert!(html.matches("<svg").count() >= 4, "four inline SVG charts");
    // What remains after the SVG namespace and the `serve` example's local address must not be a URL.
    let text = html.replace("xmlns=\"http://www.w3.org/2000/svg\"", "").replace("http://127.0.0.1:8080/", "");
    assert!(!text.contains("http://") && !text.contains("https://"), "no network reference");
    for loads in ["<script", "<link", "<img", "src=", "href=", "url(", "@import"] {
        assert!(!html.contains(loads), "nothing to load: {loads}");
    }
}

/// `chromium`, or `None` when QUOTA_LEDGER_SKIP_CHROMIUM=1 says to skip (never in CI); missing otherwise fails with
/// the command that installs it.
fn chromium() -> Option<&'static str> {
    let found = testkit::tool(
        "chromium",
        "QUOTA_LEDGER_SKIP_CHROMIUM",
        "apt-get install -y chromium",
        "the rendering of the demo's report.html",
    );
    found.then_some("chromium")
}

#[test]
fn report_renders_in_headless_chromium_with_its_charts() {
    let Some(chromium) = chromium() else { return };
    let page = played().out.join("report.html").canonicalize().unwrap();
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let screenshot = tmp.join("demo-report.png");
    let profile = tempfile::tempdir_in(tmp).unwrap();
    let _ = std::fs::remove_file(&screenshot);
    let mut child = Command::new(chromium)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"])
        .args(["--disable-background-networking", "--disable-component-update", "--disable-sync"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--window-size=1280,2000")
        .arg(format!("--screenshot={}", screenshot.display()))
        .arg(format!("file://{}", page.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium starts");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > CHROMIUM_TIMEOUT {
            let _ = child.kill();
            panic!("chromium did not write the screenshot within {CHROMIUM_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "chromium exited with {status}");

    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&screenshot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut pixels).unwrap();
    assert_eq!((info.width, info.height), (1280, 2000), "the window's size");
    let channels = info.color_type.samples();
    let rgb: Vec<[u8; 3]> = pixels[..info.buffer_size()].chunks(channels).map(|p| [p[0], p[1], p[2]]).collect();
    let not_white = rgb.iter().filter(|p| **p != [255, 255, 255]).count();
    assert!(not_white * 50 > rgb.len(), "more than 2 % of the page is drawn ({not_white} of {} pixels)", rgb.len());
    // The charts' own colours: the first metric's bars (blue) and the limit line and denials (red).
    for (name, colour) in [("blue bars", [31, 119, 180]), ("red limit line", [214, 39, 40])] {
        let n = rgb.iter().filter(|p| **p == colour).count();
        assert!(n > 500, "the {name} of the charts are on the screenshot ({n} pixels of {colour:?})");
    }
    eprintln!("screenshot of report.html: {}", screenshot.display());
}

#[test]
fn a_ledger_the_demo_did_not_write_is_refused_and_kept() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("demo-foreign-ledger");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("out")).unwrap();
    std::fs::write(dir.join("out/ledger.db"), b"someone's ledger").unwrap();
    let run =
        support::run_in(&dir, &["demo", "--tenants", "2", "--events", "1000", "--month", MONTH, "--out", "out"], b"");
    let run = run.expect_code(2);
    assert!(run.stderr.contains("that no demo wrote"), "{}", run.stderr);
    assert_eq!(std::fs::read(dir.join("out/ledger.db")).unwrap(), b"someone's ledger");
}
