//! Writing a billing export as CSV, JSON lines or Parquet, with exactly the columns of contract §7 (and `gaps`, appended
//! by the trust issue, then `cycle_start` and `cycle_end`, by billing cycles), to bytes that depend only on the rows:
//! the same ledger gives the same file.

use crate::text::csv_text;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use ledger::{Ledger, Period, PeriodExportRow};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use schemas::Timestamp;

use crate::billing::ByProject;
use crate::error::ReportError;

/// contract §7: the columns, in order; then `gaps` (the trust issue, point 5), and `cycle_start` and `cycle_end` (the
/// billing cycle a row bills), and `plan` (the named plan it was billed under), added at the end as contract §7 allows.
pub const COLUMNS: [&str; 17] = [
    "tenant",
    "metric",
    "period",
    "consumption",
    "policy_id",
    "policy_version",
    "limit",
    "grants",
    "effective_limit",
    "overage",
    "overshoot",
    "late_adjustments",
    "watermark",
    "gaps",
    "cycle_start",
    "cycle_end",
    "plan",
];

/// `export billing --by project`'s columns: [`COLUMNS`] up to `gaps`, then `project`, then the cycle's and the plan (contract §7:
/// columns are added at the end, in the order they were added).
pub const COLUMNS_BY_PROJECT: [&str; 18] = [
    "tenant",
    "metric",
    "period",
    "consumption",
    "policy_id",
    "policy_version",
    "limit",
    "grants",
    "effective_limit",
    "overage",
    "overshoot",
    "late_adjustments",
    "watermark",
    "gaps",
    "project",
    "cycle_start",
    "cycle_end",
    "plan",
];

/// The file formats of `export billing`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// CSV with contract §7's header.
    Csv,
    /// One JSON object per line.
    Jsonl,
    /// Parquet, snappy-compressed.
    Parquet,
}

/// A billing export: its period, the watermark it was computed at, its rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BillingExport {
    /// The month.
    pub period: Period,
    /// The ledger watermark the rows were computed at.
    pub watermark: u64,
    /// The rows, by tenant then metric.
    pub rows: Vec<PeriodExportRow>,
    /// Kafka offsets accepted as never read that this period's bill may lack ([`BillingExport::gaps_of`]), each as
    /// `TOPIC:PARTITION:FROM-TO`, separated by `;`; empty when none. The same in every row.
    pub gaps: String,
}

/// One shard's part of a set's export ([`BillingExport::union`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardExport {
    /// The shard's export (its own watermark).
    pub export: BillingExport,
    /// The shard's plan-default entries up to that watermark ([`Ledger::plan_default_entries_through`]).
    pub plan_default_entries: u64,
}

/// One shard's export of a period as a server answers it (`GET /v1/admin/billing`), for a read across a running
/// cluster (`export billing --cluster`) to join with the other shards' ([`BillingExport::union`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ShardBilling {
    /// The shard's partition; none for a ledger holding every partition.
    pub partition: Option<u32>,
    /// Whether the period is closed in it (its final export) or open (computed now).
    pub closed: bool,
    /// The watermark it was computed at.
    pub watermark: u64,
    /// The shard's plan-default entries up to that watermark ([`Ledger::plan_default_entries_through`]).
    pub plan_default_entries: u64,
    /// Its `gaps` cell.
    pub gaps: String,
    /// Its rows.
    pub rows: Vec<PeriodExportRow>,
}

impl ShardBilling {
    /// `ledger`'s export of `period`, as `export billing` without `--final` computes it.
    pub fn of(ledger: &Ledger, partition: Option<u32>, period: Period) -> Result<ShardBilling, ReportError> {
        let (export, closed) = current_export(ledger, period)?;
        let plan_default_entries = ledger.plan_default_entries_through(export.watermark)?;
        let BillingExport { watermark, rows, gaps, .. } = export;
        Ok(ShardBilling { partition, closed, watermark, plan_default_entries, gaps, rows })
    }

    /// Its part of a set's export.
    pub fn into_part(self, period: Period) -> ShardExport {
        let export = BillingExport { period, watermark: self.watermark, rows: self.rows, gaps: self.gaps };
        ShardExport { export, plan_default_entries: self.plan_default_entries }
    }
}

/// Without `--final`: the stored export of a closed period, else the open period at the current watermark; and a
/// note that says which.
pub fn current(ledger: &Ledger, period: Period) -> Result<(BillingExport, String), ReportError> {
    let (export, closed) = current_export(ledger, period)?;
    let note = match closed {
        true => format!(
            "period {period} is closed (watermark {}){}: its final export",
            export.watermark,
            with_first_close(ledger, period)?
        ),
        false => format!("period {period} is open: computed at watermark {}, not final", export.watermark),
    };
    Ok((export, note))
}

/// [`current`]'s export, and whether the period is closed (the export is then its close's).
pub fn current_export(ledger: &Ledger, period: Period) -> Result<(BillingExport, bool), ReportError> {
    if let Some(closed) = ledger.period_export(period)? {
        return Ok((stored_or_recomputed(ledger, &closed)?, true));
    }
    let (snapshot, rows) = crate::billing::compute_open(ledger, period)?;
    let gaps = BillingExport::gaps_of(ledger, period)?;
    Ok((BillingExport { period, watermark: snapshot.watermark, rows, gaps }, false))
}

/// Said of a month closed with the ledger's first close ([`ledger::covering_close`]), which has no close of its own.
pub fn with_first_close(ledger: &Ledger, period: Period) -> Result<&'static str, ReportError> {
    Ok(match ledger.period_close(period)? {
        Some(_) => "",
        None => ", with the ledger's first close, which closed every month before it",
    })
}

/// A closed period's stored rows; a period closed without stored rows is recomputed at its close's watermark.
pub fn stored_or_recomputed(ledger: &Ledger, closed: &ledger::PeriodExport) -> Result<BillingExport, ReportError> {
    let rows = if closed.rows.is_empty() {
        crate::billing::compute_closed(ledger, &closed.close, &ledger.period_closes()?)?
    } else {
        closed.rows.clone()
    };
    // Asked for the period itself: a month closed with the ledger's first close is judged by that close.
    let gaps = BillingExport::gaps_of(ledger, closed.close.period)?;
    Ok(BillingExport { period: closed.close.period, watermark: closed.close.watermark, rows, gaps })
}

/// One cell: text, an integer, an instant (RFC 3339 text), or empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cell<'a> {
    Text(&'a str),
    Integer(i64),
    Instant(Timestamp),
    Empty,
}

impl BillingExport {
    /// The `gaps` cell of `period`'s export: the gaps accepted while it was open ([`Ledger::gaps_of_period`]). A
    /// closed period's never changes, so its export stays the same bytes.
    pub fn gaps_of(ledger: &Ledger, period: Period) -> Result<String, ReportError> {
        let gaps = ledger.gaps_of_period(period)?;
        Ok(gaps.iter().map(|g| g.range().to_string()).collect::<Vec<_>>().join(";"))
    }

    /// The export of a set of shards (contract §9.4): the union of the shards' rows, by tenant then metric (a
    /// tenant's rows live in its one shard); the watermark is the set's, its entries counted once (each shard's
    /// watermark, less the plan defaults it repeats for every shard but the first); the gaps are each shard's, in
    /// partition order. For the same events this is byte for byte the export of a single ledger that holds them all.
    pub fn union(period: Period, shards: Vec<ShardExport>) -> BillingExport {
        let mut export = BillingExport { period, watermark: 0, rows: Vec::new(), gaps: String::new() };
        let mut gaps = Vec::new();
        for (index, shard) in shards.into_iter().enumerate() {
            let repeated = if index == 0 { 0 } else { shard.plan_default_entries };
            export.watermark += shard.export.watermark - repeated;
            export.rows.extend(shard.export.rows);
            if !shard.export.gaps.is_empty() {
                gaps.push(shard.export.gaps);
            }
        }
        export.rows.sort_by(|a, b| (&a.tenant, &a.metric).cmp(&(&b.tenant, &b.metric)));
        export.gaps = gaps.join(";");
        export
    }

    fn cells<'a>(&'a self, row: &'a PeriodExportRow, period: &'a str) -> [Cell<'a>; 17] {
        let text = |s: Option<&'a String>| s.map_or(Cell::Empty, |s| Cell::Text(s));
        let int = |n: Option<i64>| n.map_or(Cell::Empty, Cell::Integer);
        [
            Cell::Text(&row.tenant),
            Cell::Text(&row.metric),
            Cell::Text(period),
            Cell::Integer(row.consumption),
            text(row.policy_id.as_ref()),
            int(row.policy_version.map(i64::from)),
            int(row.limit),
            int(row.grants),
            int(row.effective_limit),
            int(row.overage),
            int(row.overshoot),
            Cell::Integer(row.late_adjustments),
            Cell::Integer(self.watermark as i64),
            if self.gaps.is_empty() { Cell::Empty } else { Cell::Text(&self.gaps) },
            Cell::Instant(row.cycle_start),
            Cell::Instant(row.cycle_end),
            text(row.plan.as_ref()),
        ]
    }

    /// The lines of `export billing --by project` ([`COLUMNS_BY_PROJECT`]): each bill row as it is without the flag,
    /// its `project` empty (null in JSONL and Parquet), followed by one line per project of `by` for its (tenant,
    /// metric): tenant, metric, period, the project's consumption, the export's watermark and gaps, and `project`,
    /// every other cell empty (`late_adjustments` too, so that a sum of a column over the file counts each bill once).
    /// The consumption naming no project comes last, with `project` the empty string: in CSV an empty cell, as a bill
    /// row's, whose `late_adjustments` is never empty; in JSONL and Parquet `""`, not null. Project names are never
    /// empty (a name is 1 to 128 bytes).
    fn lines_by_project<'a>(&'a self, by: &'a ByProject, period: &'a str) -> Vec<Vec<Cell<'a>>> {
        let mut lines = Vec::new();
        for row in &self.rows {
            let mut bill = self.cells(row, period).to_vec();
            bill.insert(COLUMNS.len() - 3, Cell::Empty);
            lines.push(bill);
            for (project, consumption) in by.of(&row.tenant, &row.metric) {
                let mut line = vec![
                    Cell::Text(&row.tenant),
                    Cell::Text(&row.metric),
                    Cell::Text(period),
                    Cell::Integer(*consumption),
                ];
                line.extend([Cell::Empty; 8]);
                line.push(Cell::Integer(self.watermark as i64));
                line.push(if self.gaps.is_empty() { Cell::Empty } else { Cell::Text(&self.gaps) });
                line.push(Cell::Text(project.as_deref().unwrap_or("")));
                line.extend([Cell::Instant(row.cycle_start), Cell::Instant(row.cycle_end), Cell::Empty]);
                lines.push(line);
            }
        }
        lines
    }

    /// The export in `format` with each row's consumption by project ([`BillingExport::lines_by_project`]).
    pub fn to_bytes_by_project(&self, format: Format, by: &ByProject) -> Result<Vec<u8>, ReportError> {
        let period = self.period.to_string();
        let lines = self.lines_by_project(by, &period);
        match format {
            Format::Csv => Ok(csv_of(&COLUMNS_BY_PROJECT, lines)),
            Format::Jsonl => Ok(jsonl_of(&COLUMNS_BY_PROJECT, lines)),
            Format::Parquet => parquet_of(batch_of(schema_by_project(), &lines)?),
        }
    }

    /// The export in `format`.
    pub fn to_bytes(&self, format: Format) -> Result<Vec<u8>, ReportError> {
        match format {
            Format::Csv => Ok(self.to_csv()),
            Format::Jsonl => Ok(self.to_jsonl()),
            Format::Parquet => self.to_parquet(),
        }
    }

    /// CSV: the header of contract §7, one line per row, `\n` line ends, empty cells for missing values; text that a
    /// spreadsheet would run as a formula is neutralised (see [`crate::text::csv_text`]); numbers are written as numbers.
    pub fn to_csv(&self) -> Vec<u8> {
        let period = self.period.to_string();
        csv_of(&COLUMNS, self.rows.iter().map(|row| self.cells(row, &period).to_vec()))
    }

    /// JSON lines: one object per row, keys in the order of contract §7, numbers as numbers, missing values as null.
    pub fn to_jsonl(&self) -> Vec<u8> {
        let period = self.period.to_string();
        jsonl_of(&COLUMNS, self.rows.iter().map(|row| self.cells(row, &period).to_vec()))
    }

    /// The export as one Arrow batch: strings, 64-bit integers (`policy_version` 32-bit, as in the event), the cycle's
    /// instants as UTC timestamps in microseconds.
    pub fn to_record_batch(&self) -> Result<RecordBatch, ReportError> {
        let text = |f: &dyn Fn(&PeriodExportRow) -> Option<String>| -> ArrayRef {
            Arc::new(self.rows.iter().map(f).collect::<StringArray>())
        };
        let int = |f: &dyn Fn(&PeriodExportRow) -> Option<i64>| -> ArrayRef {
            Arc::new(self.rows.iter().map(f).collect::<Int64Array>())
        };
        let period = self.period.to_string();
        let columns: Vec<ArrayRef> = vec![
            text(&|r| Some(r.tenant.clone())),
            text(&|r| Some(r.metric.clone())),
            text(&|_| Some(period.clone())),
            int(&|r| Some(r.consumption)),
            text(&|r| r.policy_id.clone()),
            Arc::new(self.rows.iter().map(|r| r.policy_version).collect::<Int32Array>()),
            int(&|r| r.limit),
            int(&|r| r.grants),
            int(&|r| r.effective_limit),
            int(&|r| r.overage),
            int(&|r| r.overshoot),
            int(&|r| Some(r.late_adjustments)),
            int(&|_| Some(self.watermark as i64)),
            text(&|_| Some(self.gaps.clone()).filter(|g| !g.is_empty())),
            instant(self.rows.iter().map(|r| Some(r.cycle_start))),
            instant(self.rows.iter().map(|r| Some(r.cycle_end))),
            text(&|r| r.plan.clone()),
        ];
        Ok(RecordBatch::try_new(schema(), columns)?)
    }

    /// Parquet, snappy-compressed, one row group.
    pub fn to_parquet(&self) -> Result<Vec<u8>, ReportError> {
        parquet_of(self.to_record_batch()?)
    }
}

/// CSV of `lines` under the header `columns`: `\n` line ends, text made safe for a spreadsheet
/// ([`crate::text::csv_text`]), numbers plain, empty cells for missing values.
fn csv_of<'a>(columns: &[&str], lines: impl IntoIterator<Item = Vec<Cell<'a>>>) -> Vec<u8> {
    let mut out = columns.join(",");
    out.push('\n');
    for line in lines {
        let cells: Vec<String> = line
            .iter()
            .map(|c| match c {
                Cell::Text(s) => csv_text(s),
                Cell::Integer(n) => n.to_string(),
                Cell::Instant(t) => t.to_string(),
                Cell::Empty => String::new(),
            })
            .collect();
        out.push_str(&cells.join(","));
        out.push('\n');
    }
    out.into_bytes()
}

/// JSON lines of `lines`: one object per line, keys `columns` in order, missing values null.
fn jsonl_of<'a>(columns: &[&str], lines: impl IntoIterator<Item = Vec<Cell<'a>>>) -> Vec<u8> {
    let mut out = Vec::new();
    for line in lines {
        let mut object = serde_json::Map::new();
        for (name, cell) in columns.iter().zip(line) {
            let value = match cell {
                Cell::Text(s) => serde_json::Value::from(s),
                Cell::Integer(n) => serde_json::Value::from(n),
                Cell::Instant(t) => serde_json::Value::from(t.to_string()),
                Cell::Empty => serde_json::Value::Null,
            };
            object.insert(name.to_string(), value);
        }
        out.extend(serde_json::to_vec(&object).expect("a map of strings and numbers serializes"));
        out.push(b'\n');
    }
    out
}

/// One Arrow batch of `lines`, each column typed by `schema` (strings, `Int32`, `Int64`, UTC timestamps); an empty
/// cell is null.
fn batch_of(schema: Arc<Schema>, lines: &[Vec<Cell<'_>>]) -> Result<RecordBatch, ReportError> {
    let columns: Vec<ArrayRef> = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, field)| -> ArrayRef {
            let text = |c: &Cell<'_>| match c {
                Cell::Text(s) => Some(s.to_string()),
                Cell::Instant(t) => Some(t.to_string()),
                _ => None,
            };
            let int = |c: &Cell<'_>| if let Cell::Integer(n) = c { Some(*n) } else { None };
            let at = |c: &Cell<'_>| if let Cell::Instant(t) = c { Some(*t) } else { None };
            match field.data_type() {
                DataType::Utf8 => Arc::new(lines.iter().map(|l| text(&l[i])).collect::<StringArray>()),
                DataType::Timestamp(..) => instant(lines.iter().map(|l| at(&l[i]))),
                // `policy_version`, an `int` in the event: its values fit.
                DataType::Int32 => Arc::new(lines.iter().map(|l| int(&l[i]).map(|n| n as i32)).collect::<Int32Array>()),
                _ => Arc::new(lines.iter().map(|l| int(&l[i])).collect::<Int64Array>()),
            }
        })
        .collect();
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// A column of instants: Arrow's timestamp in microseconds (the ledger's own resolution) at offset `+00:00`, which
/// Parquet writes as adjusted to UTC (a zone's name would need Arrow's time-zone database to be read back).
fn instant(instants: impl Iterator<Item = Option<Timestamp>>) -> ArrayRef {
    let micros: TimestampMicrosecondArray = instants.map(|t| t.map(|t| t.micros())).collect();
    Arc::new(micros.with_timezone("+00:00"))
}

/// The type of the cycle's columns: [`instant`]'s.
fn instant_type() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()))
}

/// Parquet of one batch, snappy-compressed, one row group.
fn parquet_of(batch: RecordBatch) -> Result<Vec<u8>, ReportError> {
    let properties = WriterProperties::builder().set_compression(Compression::SNAPPY).build();
    let mut out = Vec::new();
    let mut writer = ArrowWriter::try_new(&mut out, batch.schema(), Some(properties))?;
    writer.write(&batch)?;
    writer.close()?;
    Ok(out)
}

/// The Arrow schema of `export billing --by project`: [`schema`]'s columns, `late_adjustments` nullable (empty in the
/// lines of a project), with `project`, a nullable string (null in a bill's row), after `gaps`.
pub fn schema_by_project() -> Arc<Schema> {
    let mut fields: Vec<Field> = schema().fields().iter().map(|f| f.as_ref().clone()).collect();
    for field in &mut fields {
        if field.name() == "late_adjustments" {
            *field = field.clone().with_nullable(true);
        }
    }
    fields.insert(COLUMNS.len() - 3, Field::new("project", DataType::Utf8, true));
    Arc::new(Schema::new(fields))
}

/// The Arrow schema of an export: contract §7 columns, nullable where a value may be missing.
pub fn schema() -> Arc<Schema> {
    let field = |name: &str, data_type: DataType, nullable: bool| Field::new(name, data_type, nullable);
    Arc::new(Schema::new(vec![
        field("tenant", DataType::Utf8, false),
        field("metric", DataType::Utf8, false),
        field("period", DataType::Utf8, false),
        field("consumption", DataType::Int64, false),
        field("policy_id", DataType::Utf8, true),
        field("policy_version", DataType::Int32, true),
        field("limit", DataType::Int64, true),
        field("grants", DataType::Int64, true),
        field("effective_limit", DataType::Int64, true),
        field("overage", DataType::Int64, true),
        field("overshoot", DataType::Int64, true),
        field("late_adjustments", DataType::Int64, false),
        field("watermark", DataType::Int64, false),
        field("gaps", DataType::Utf8, true),
        field("cycle_start", instant_type(), false),
        field("cycle_end", instant_type(), false),
        field("plan", DataType::Utf8, true),
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn export() -> BillingExport {
        let row = |tenant: &str, consumption: i64, late: i64| PeriodExportRow {
            tenant: tenant.into(),
            metric: "tokens".into(),
            consumption,
            policy_id: Some("plan".into()),
            policy_version: Some(2),
            limit: Some(100),
            grants: Some(0),
            effective_limit: Some(100),
            overage: Some(0),
            overshoot: None,
            late_adjustments: late,
            cycle_start: Timestamp::parse_rfc3339("2026-11-01T00:00:00Z").unwrap(),
            cycle_end: Timestamp::parse_rfc3339("2026-12-01T00:00:00Z").unwrap(),
            plan: (late == 0).then(|| "pro".to_string()),
        };
        BillingExport {
            period: "2026-11".parse().unwrap(),
            watermark: 42,
            rows: vec![row("=HYPERLINK(\"x\")", 5, -3), row("org,2", 7, 0)],
            gaps: String::new(),
        }
    }

    // Proves CSV cells that a spreadsheet would run are neutralised and quoted, while negative numbers stay numbers.
    #[test]
    fn csv_is_safe_in_a_spreadsheet() {
        let csv = String::from_utf8(export().to_csv()).unwrap();
        assert_eq!(
            csv,
            "tenant,metric,period,consumption,policy_id,policy_version,limit,grants,effective_limit,overage,overshoot,late_adjustments,watermark,gaps,cycle_start,cycle_end,plan\n\
             \"'=HYPERLINK(\"\"x\"\")\",tokens,2026-11,5,plan,2,100,0,100,0,,-3,42,,2026-11-01T00:00:00Z,2026-12-01T00:00:00Z,\n\
             \"org,2\",tokens,2026-11,7,plan,2,100,0,100,0,,0,42,,2026-11-01T00:00:00Z,2026-12-01T00:00:00Z,pro\n"
        );
        for (text, safe) in
            [("@SUM(A1)", "'@SUM(A1)"), ("+1", "'+1"), ("-1", "'-1"), ("\tx", "'\tx"), ("org-1", "org-1")]
        {
            assert_eq!(csv_text(text), safe);
        }
        assert_eq!(csv_text("\rx"), "\"'\rx\"");
    }

    // Proves JSON lines keep contract §7's keys in order, numbers as numbers and missing values as null.
    #[test]
    fn jsonl_has_the_columns_in_order() {
        let jsonl = String::from_utf8(export().to_jsonl()).unwrap();
        let first = jsonl.lines().next().unwrap();
        assert_eq!(
            first,
            r#"{"tenant":"=HYPERLINK(\"x\")","metric":"tokens","period":"2026-11","consumption":5,"policy_id":"plan","policy_version":2,"limit":100,"grants":0,"effective_limit":100,"overage":0,"overshoot":null,"late_adjustments":-3,"watermark":42,"gaps":null,"cycle_start":"2026-11-01T00:00:00Z","cycle_end":"2026-12-01T00:00:00Z","plan":null}"#
        );
    }

    // Proves `--by project` follows each row with its projects (by name, then the consumption naming none, with an
    // empty `project`), in a last column, the bill's rows unchanged but for that column; JSONL tells the bill's null
    // from the empty string of the consumption naming no project; Parquet has the extra nullable column.
    #[test]
    fn by_project_follows_each_row_with_its_projects() {
        let export = export();
        let mut by = ByProject::default();
        by.0.insert(("org,2".into(), "tokens".into()), vec![(Some("p-1".into()), 4), (None, 3)]);
        let csv = String::from_utf8(export.to_bytes_by_project(Format::Csv, &by).unwrap()).unwrap();
        assert_eq!(
            csv,
            "tenant,metric,period,consumption,policy_id,policy_version,limit,grants,effective_limit,overage,overshoot,late_adjustments,watermark,gaps,project,cycle_start,cycle_end,plan\n\
             \"'=HYPERLINK(\"\"x\"\")\",tokens,2026-11,5,plan,2,100,0,100,0,,-3,42,,,2026-11-01T00:00:00Z,2026-12-01T00:00:00Z,\n\
             \"org,2\",tokens,2026-11,7,plan,2,100,0,100,0,,0,42,,,2026-11-01T00:00:00Z,2026-12-01T00:00:00Z,pro\n\
             \"org,2\",tokens,2026-11,4,,,,,,,,,42,,p-1,2026-11-01T00:00:00Z,2026-12-01T00:00:00Z,\n\
             \"org,2\",tokens,2026-11,3,,,,,,,,,42,,,2026-11-01T00:00:00Z,2026-12-01T00:00:00Z,\n"
        );
        let jsonl = String::from_utf8(export.to_bytes_by_project(Format::Jsonl, &by).unwrap()).unwrap();
        let lines: Vec<serde_json::Value> = jsonl.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let projects: Vec<&serde_json::Value> = lines.iter().map(|l| &l["project"]).collect();
        assert_eq!(projects, [&serde_json::Value::Null, &serde_json::Value::Null, &"p-1".into(), &"".into()]);
        assert_eq!(lines[3]["late_adjustments"], serde_json::Value::Null);
        let bytes = export.to_bytes_by_project(Format::Parquet, &by).unwrap();
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(bytes))
            .unwrap()
            .build()
            .unwrap();
        let batches: Vec<RecordBatch> = reader.map(Result::unwrap).collect();
        assert_eq!(batches[0].schema(), schema_by_project());
        assert_eq!(batches[0].num_rows(), 4);
        assert_eq!(export.to_csv(), export.to_bytes(Format::Csv).unwrap(), "without --by, the export of old");
    }

    // Proves Parquet reads back with the contract §7 columns and gaps, integer types and nulls, and is the same bytes twice.
    #[test]
    fn parquet_reads_back_typed() {
        let with_gaps = || BillingExport { gaps: "quota.usage:0:3-4".into(), ..export() };
        let bytes = with_gaps().to_parquet().unwrap();
        assert_eq!(bytes, with_gaps().to_parquet().unwrap());
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(bytes))
            .unwrap()
            .build()
            .unwrap();
        let batches: Vec<RecordBatch> = reader.map(Result::unwrap).collect();
        assert_eq!(batches[0].schema(), schema());
        let shown = arrow::util::pretty::pretty_format_batches(&batches).unwrap().to_string();
        let expected = [
            "+-----------------+--------+---------+-------------+-----------+----------------+-------+--------+-----------------+---------+-----------+------------------+-----------+-------------------+----------------------+----------------------+------+",
            "| tenant          | metric | period  | consumption | policy_id | policy_version | limit | grants | effective_limit | overage | overshoot | late_adjustments | watermark | gaps              | cycle_start          | cycle_end            | plan |",
            "+-----------------+--------+---------+-------------+-----------+----------------+-------+--------+-----------------+---------+-----------+------------------+-----------+-------------------+----------------------+----------------------+------+",
            "| =HYPERLINK(\"x\") | tokens | 2026-11 | 5           | plan      | 2              | 100   | 0      | 100             | 0       |           | -3               | 42        | quota.usage:0:3-4 | 2026-11-01T00:00:00Z | 2026-12-01T00:00:00Z |      |",
            "| org,2           | tokens | 2026-11 | 7           | plan      | 2              | 100   | 0      | 100             | 0       |           | 0                | 42        | quota.usage:0:3-4 | 2026-11-01T00:00:00Z | 2026-12-01T00:00:00Z | pro  |",
            "+-----------------+--------+---------+-------------+-----------+----------------+-------+--------+-----------------+---------+-----------+------------------+-----------+-------------------+----------------------+----------------------+------+",
        ];
        assert_eq!(shown.lines().collect::<Vec<_>>(), expected);
    }
}
