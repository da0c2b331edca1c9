//! `bench export`: the billing export of a generated month (issue: 10,000,000 events) as CSV and as Parquet,
//! against DuckDB summing the same consumption from a Parquet file, in one run.
//!
//! The ledger is the one `bench reconcile` builds and keeps (`bench-reconcile-<events>-<tenants>.db` in
//! `--dir`), built here the same way when missing, and copied before use: the kept file is never modified.
//! Opening the copy applies the billing migration (its `usage_totals` backfill is reported, not timed: a
//! ledger maintains them as it appends). Each export runs as a child process of the real binary, its peak
//! memory the child's maximum resident set (`wait4`). The same month's consumption (every counted usage event
//! and every valid COMMIT, with tenant, metric, occurred_at and quantity) is written to Parquet, and DuckDB
//! (`python3 -c`, `pip install duckdb`) sums it by tenant and metric; its time is the best of three runs of
//! the query, measured inside Python, and its sums must equal the export's consumption.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use arrow::array::{Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use ledger::{Ledger, Period};
use serde::Serialize;

use super::ChildRun;
use generate::Progress;

/// The month the generator writes.
pub const PERIOD: &str = "2026-11";
/// DuckDB runs the query this many times and the best time counts (the first pays for reading the file).
const DUCKDB_RUNS: u32 = 3;
/// What the run says when DuckDB cannot run, before building anything or after.
const DUCKDB_MISSING: &str = "DuckDB failed (pip install duckdb)";
/// Rows per batch of the consumption Parquet file.
const PARQUET_BATCH_ROWS: usize = 65_536;

/// What to generate and where.
#[derive(Debug, Clone)]
pub struct ExportBenchSettings {
    /// Generated messages of the month.
    pub events: u64,
    /// Tenants of the generated month.
    pub tenants: u32,
    /// Where the ledger is kept (shared with `bench reconcile`) and the run's files are written; a temporary
    /// directory when absent.
    pub dir: Option<PathBuf>,
    /// The `quota-ledger` binary whose `export billing` is timed.
    pub binary: PathBuf,
}

/// The figures of one run.
#[derive(Debug, Clone, Serialize)]
pub struct ExportFigures {
    /// Events in the ledger.
    pub events_recorded: u64,
    /// Tenants of the generated month.
    pub tenants: u32,
    /// Size of the ledger file, in MiB.
    pub ledger_file_mib: f64,
    /// Seconds the copy's migration took (its `usage_totals` backfill).
    pub migration_seconds: f64,
    /// Judging every reservation of a ledger built without the append hook, once (not timed in the exports).
    pub commit_totals_seconds: f64,
    /// Reservations that judging covered.
    pub reservations_judged: u64,
    /// Rows of the export with consumption.
    pub rows: u64,
    /// Seconds of the CSV export.
    pub csv_seconds: f64,
    /// Peak resident memory of the CSV export, in MiB.
    pub csv_peak_memory_mib: f64,
    /// Seconds of the Parquet export.
    pub parquet_seconds: f64,
    /// Peak resident memory of the Parquet export, in MiB.
    pub parquet_peak_memory_mib: f64,
    /// Rows of the consumption file DuckDB sums.
    pub consumption_parquet_rows: u64,
    /// DuckDB's best time of the query, in seconds.
    pub duckdb_query_seconds: f64,
    /// Seconds of DuckDB's whole process.
    pub duckdb_process_seconds: f64,
    /// Peak resident memory of DuckDB's process, in MiB.
    pub duckdb_peak_memory_mib: f64,
    /// Parquet export seconds / DuckDB query seconds (goal: at most 1.5).
    pub ratio_parquet: f64,
    /// CSV export seconds / DuckDB query seconds.
    pub ratio_csv: f64,
}

/// The figures as lines for people: the ledger, each export, DuckDB, and the ratios against the goal.
impl std::fmt::Display for ExportFigures {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let f = self;
        writeln!(
            out,
            "ledger ({:.0} MiB): {} events, {} tenants; migration {:.2} s; commit totals {:.2} s ({} reservations judged)",
            f.ledger_file_mib,
            f.events_recorded,
            f.tenants,
            f.migration_seconds,
            f.commit_totals_seconds,
            f.reservations_judged
        )?;
        writeln!(
            out,
            "export billing --period {PERIOD} --format csv      {:7.3} s  peak memory {:7.1} MiB  {} rows",
            f.csv_seconds, f.csv_peak_memory_mib, f.rows
        )?;
        writeln!(
            out,
            "export billing --period {PERIOD} --format parquet  {:7.3} s  peak memory {:7.1} MiB",
            f.parquet_seconds, f.parquet_peak_memory_mib
        )?;
        writeln!(
            out,
            "duckdb: sum of {} consumption rows by tenant, metric  {:7.3} s query ({:.3} s process)  peak memory {:7.1} MiB",
            f.consumption_parquet_rows, f.duckdb_query_seconds, f.duckdb_process_seconds, f.duckdb_peak_memory_mib
        )?;
        writeln!(
            out,
            "ratio: parquet export / duckdb {:.2}, csv export / duckdb {:.2} (goal: at most 1.5)",
            f.ratio_parquet, f.ratio_csv
        )
    }
}

/// Copies the month's ledger (built first when it is not kept yet), times its billing export as CSV and as Parquet,
/// and DuckDB's sums of the same consumption, which must equal the export's. Fails at once, before building
/// anything, without DuckDB.
pub fn run(settings: &ExportBenchSettings, progress: &dyn Fn(Progress)) -> anyhow::Result<ExportFigures> {
    let ExportBenchSettings { events, tenants, .. } = *settings;
    // Every external peer first: building the ledger can take minutes (10 million events: about 6), and a
    // missing DuckDB would otherwise fail the run only after it.
    require_duckdb()?;
    let temporary = tempfile::tempdir().context("cannot create a temporary directory")?;
    let dir = settings.dir.clone().unwrap_or_else(|| temporary.path().to_path_buf());
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let kept = super::reconcile::built_ledger(&dir, events, tenants, progress)?;
    let run_path = dir.join("bench-export-run.db");
    super::remove_database(&run_path);
    progress(Progress::Note(format!("copying {} ...", kept.display())));
    // A plain read-only connection: the kept ledger may be of an older schema (built by an older binary), which
    // the copy's migration brings up to date; the kept file itself is never migrated or written.
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
    rusqlite::Connection::open_with_flags(&kept, flags)
        .and_then(|source| source.execute("VACUUM INTO ?", [run_path.to_string_lossy()]))
        .with_context(|| format!("cannot copy {}", kept.display()))?;
    progress(Progress::Note("migrating the copy (usage_totals backfill) ...".into()));
    let started = Instant::now();
    let ledger = Ledger::open(&run_path)?;
    let migration_seconds = started.elapsed().as_secs_f64();
    let status = ledger.status()?;
    progress(Progress::Note(
        "judging every reservation once (commit_totals: what appends with the hook keep current) ...".into(),
    ));
    let started = Instant::now();
    let caught_up = ledger.catch_up_commit_totals(status.watermark)?;
    let commit_totals_seconds = started.elapsed().as_secs_f64();
    drop(ledger);
    let csv_out = dir.join("bench-export.csv");
    let parquet_out = dir.join("bench-export.parquet");
    let csv = export_child(&settings.binary, &run_path, "csv", &csv_out)?;
    let parquet = export_child(&settings.binary, &run_path, "parquet", &parquet_out)?;
    let consumption_path = dir.join("bench-consumption.parquet");
    progress(Progress::Note(format!("writing the month's consumption events to {} ...", consumption_path.display())));
    let consumption_parquet_rows = write_consumption_parquet(&run_path, &consumption_path)?;
    let duckdb = duckdb_child(&consumption_path)?;
    let (duckdb_query_seconds, duckdb_sums) = parse_duckdb(&duckdb.stdout)?;
    let export_sums = export_consumption(&csv_out)?;
    anyhow::ensure!(duckdb_sums == export_sums, "DuckDB's sums differ from the export's consumption");
    Ok(ExportFigures {
        events_recorded: status.events_recorded,
        tenants,
        ledger_file_mib: std::fs::metadata(&run_path)?.len() as f64 / (1024.0 * 1024.0),
        migration_seconds,
        commit_totals_seconds,
        reservations_judged: caught_up.reservations_judged,
        rows: export_sums.len() as u64,
        csv_seconds: csv.elapsed.as_secs_f64(),
        csv_peak_memory_mib: csv.peak_memory_mib,
        parquet_seconds: parquet.elapsed.as_secs_f64(),
        parquet_peak_memory_mib: parquet.peak_memory_mib,
        consumption_parquet_rows,
        duckdb_query_seconds,
        duckdb_process_seconds: duckdb.elapsed.as_secs_f64(),
        duckdb_peak_memory_mib: duckdb.peak_memory_mib,
        ratio_parquet: parquet.elapsed.as_secs_f64() / duckdb_query_seconds,
        ratio_csv: csv.elapsed.as_secs_f64() / duckdb_query_seconds,
    })
}

fn export_child(binary: &Path, ledger_path: &Path, format: &str, out: &Path) -> anyhow::Result<ChildRun> {
    let mut command = Command::new(binary);
    command
        .arg("--ledger")
        .arg(ledger_path)
        .args(["export", "billing", "--period", PERIOD, "--format", format, "--out"])
        .arg(out);
    timed_child(command)
}

/// Fails at once, with the message a failed DuckDB run gives, unless `python3` can import `duckdb`.
fn require_duckdb() -> anyhow::Result<()> {
    let output = Command::new("python3")
        .args(["-c", "import duckdb"])
        .stdin(Stdio::null())
        .output()
        .context("cannot start python3")
        .context(DUCKDB_MISSING)?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr.lines().last().unwrap_or_default().trim().to_string();
        return Err(anyhow::anyhow!("python3 -c 'import duckdb' {}: {last}", output.status)).context(DUCKDB_MISSING);
    }
    Ok(())
}

fn duckdb_child(consumption: &Path) -> anyhow::Result<ChildRun> {
    let script = format!(
        "import time, duckdb\n\
         con = duckdb.connect()\n\
         query = \"SELECT tenant, metric, SUM(quantity) FROM read_parquet('{}') \
         WHERE occurred_at >= TIMESTAMPTZ '2026-11-01 00:00:00+00' AND occurred_at < TIMESTAMPTZ '2026-12-01 00:00:00+00' \
         GROUP BY tenant, metric ORDER BY tenant, metric\"\n\
         best = None\n\
         for _ in range({DUCKDB_RUNS}):\n\
         \x20   start = time.perf_counter()\n\
         \x20   rows = con.execute(query).fetchall()\n\
         \x20   elapsed = time.perf_counter() - start\n\
         \x20   best = elapsed if best is None else min(best, elapsed)\n\
         print(best)\n\
         for tenant, metric, total in rows: print(f'{{tenant}},{{metric}},{{total}}')\n",
        consumption.display()
    );
    let mut command = Command::new("python3");
    command.args(["-c", &script]);
    timed_child(command).context(DUCKDB_MISSING)
}

/// `command` timed, its stdout kept; an exit other than 0 is an error.
fn timed_child(command: Command) -> anyhow::Result<ChildRun> {
    let run = super::timed_child(command, true)?;
    anyhow::ensure!(run.exit_code == 0, "the child failed: exit code {}", run.exit_code);
    Ok(run)
}

type Sums = BTreeMap<(String, String), i64>;

fn parse_duckdb(stdout: &str) -> anyhow::Result<(f64, Sums)> {
    let mut lines = stdout.lines();
    let seconds: f64 = lines.next().context("DuckDB printed nothing")?.trim().parse()?;
    let mut sums = Sums::new();
    for line in lines {
        let mut cells = line.rsplitn(3, ',');
        let (total, metric, tenant) = (cells.next(), cells.next(), cells.next());
        let (Some(total), Some(metric), Some(tenant)) = (total, metric, tenant) else {
            anyhow::bail!("bad line {line:?}")
        };
        sums.insert((tenant.to_string(), metric.to_string()), total.parse()?);
    }
    Ok((seconds, sums))
}

/// The export's nonzero consumption per (tenant, metric), read back from its CSV.
fn export_consumption(csv: &Path) -> anyhow::Result<Sums> {
    let text = std::fs::read_to_string(csv)?;
    let mut sums = Sums::new();
    for line in text.lines().skip(1) {
        let cells: Vec<&str> = line.split(',').collect();
        let consumption: i64 = cells[3].parse()?;
        if consumption != 0 {
            sums.insert((cells[0].to_string(), cells[1].to_string()), consumption);
        }
    }
    Ok(sums)
}

/// Writes every counted usage event and valid COMMIT of the period to Parquet (tenant, metric, occurred_at,
/// quantity); answers the rows written.
fn write_consumption_parquet(ledger_path: &Path, out: &Path) -> anyhow::Result<u64> {
    let period: Period = PERIOD.parse().expect("a valid period");
    let schema = Arc::new(Schema::new(vec![
        Field::new("tenant", DataType::Utf8, false),
        Field::new("metric", DataType::Utf8, false),
        Field::new("occurred_at", DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), false),
        Field::new("quantity", DataType::Int64, false),
    ]));
    let file = std::fs::File::create(out)?;
    let mut writer = parquet::arrow::ArrowWriter::try_new(file, Arc::clone(&schema), None)?;
    let session = sql::LedgerSession::open(ledger_path, None)?;
    let mut rows = 0u64;
    let sql = "SELECT tenant, metric, occurred_at, quantity FROM usage_events WHERE status = 'recorded'";
    session.for_each_batch_with(sql, Vec::new(), |batch| {
        rows += batch.num_rows() as u64;
        writer.write(batch).map_err(|e| sql::SqlError::Batch(Box::new(e)))
    })?;
    let ledger = Ledger::open_read_only(ledger_path)?;
    let mut commits: Vec<(String, String, i64, i64)> = Vec::new();
    ledger.for_each_reservation_through(session.watermark(), |group| {
        let events: Vec<(u64, &schemas::ReservationEvent)> = group.iter().map(|(s, e)| (*s, e)).collect();
        let verdict = rules::reservation::judge(&events, period.end());
        if let Some((seq, schemas::ReservationAction::COMMIT, amount)) = verdict.close {
            let commit = &group.iter().find(|(s, _)| *s == seq).expect("in its group").1;
            let h = &commit.header;
            commits.push((h.tenant.clone(), h.metric.clone(), h.occurred_at.micros(), amount));
        }
    })?;
    for chunk in commits.chunks(PARQUET_BATCH_ROWS) {
        let columns: Vec<arrow::array::ArrayRef> = vec![
            Arc::new(chunk.iter().map(|c| Some(c.0.as_str())).collect::<StringArray>()),
            Arc::new(chunk.iter().map(|c| Some(c.1.as_str())).collect::<StringArray>()),
            Arc::new(
                TimestampMicrosecondArray::from(chunk.iter().map(|c| c.2).collect::<Vec<_>>()).with_timezone("UTC"),
            ),
            Arc::new(Int64Array::from(chunk.iter().map(|c| c.3).collect::<Vec<_>>())),
        ];
        writer.write(&RecordBatch::try_new(Arc::clone(&schema), columns)?)?;
        rows += chunk.len() as u64;
    }
    writer.close()?;
    Ok(rows)
}
