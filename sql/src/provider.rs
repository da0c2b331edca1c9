//! A DataFusion `TableProvider` over one of the tables the ledger shows to SQL ([`ledger::tables`]), streaming:
//! each scan opens the ledger read-only in a blocking task, reads it through [`ledger::Ledger::scan`] and sends
//! Arrow batches of [`BATCH_ROWS`] rows through a channel of [`CHANNEL_BATCHES`], so memory follows the batch
//! size, not the table. Projections, simple comparisons (`column <op> literal`, joined by AND) and limits are
//! handed to the ledger's scan, so that an indexed lookup stays one (`request_id = 'req-1'` is a probe of the
//! ledger's request key index). Rows past the session's watermark are never read.
//!
//! Why not `datafusion-table-providers` (sqlite feature): its `query_arrow` collects the whole result into one
//! batch before DataFusion sees a row, and it infers column types from the first row of each table; and the SQL
//! on the ledger's tables is the ledger's own.

use std::fmt;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int32Builder, Int64Builder, RecordBatch, StringBuilder, TimestampMicrosecondBuilder};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use async_trait::async_trait;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{DataFusionError, ScalarValue};
use datafusion::datasource::TableType;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{BinaryExpr, Expr, Operator, TableProviderFilterPushDown};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::stream::RecordBatchReceiverStreamBuilder;
use datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use ledger::scan::{Comparison, Filter, Literal, Scan, ScanRow, Value};
use ledger::tables::{Kind, Table};
use schemas::Timestamp;

/// Rows per Arrow batch: DataFusion's default batch size.
pub const BATCH_ROWS: usize = 8_192;
/// Batches a scan may run ahead of its consumer before it waits (bounded: a slow consumer slows the scan).
pub const CHANNEL_BATCHES: usize = 2;

/// The column every table gains after the ledger's own (contract §9.4): the partition of the shard a row was read
/// from, NULL for a ledger of every partition (`--ledger FILE`).
pub const SHARD_COLUMN: &str = "shard";

/// The tables as `sql --tables` lists them: each with its description, then its columns with their SQL types, the
/// [`SHARD_COLUMN`] last (every table is the union over the shards of a directory, contract §9.4).
pub fn write_tables(out: &mut dyn std::io::Write) -> std::io::Result<()> {
    for table in ledger::tables::TABLES {
        writeln!(out, "{}: {}", table.name, table.description)?;
        for column in table.columns {
            let kind = match column.kind {
                Kind::Int64 => "BIGINT",
                Kind::Int32 => "INT",
                Kind::Text => "VARCHAR",
                Kind::Timestamp => "TIMESTAMP (UTC, microseconds)",
            };
            let null = if column.nullable { ", nullable" } else { "" };
            writeln!(out, "  {} {kind}{null}", column.name)?;
        }
        writeln!(
            out,
            "  {SHARD_COLUMN} INT, nullable (the partition of the shard the row is from; null for --ledger)"
        )?;
    }
    Ok(())
}

/// One ledger file a table is read from, as of a watermark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// The ledger file.
    pub path: PathBuf,
    /// The partition it holds; `None` for a ledger of every partition.
    pub shard: Option<u32>,
    /// Rows of entries past this are not read.
    pub watermark: u64,
}

/// One ledger table as DataFusion sees it: the union of the table over its sources (a single ledger, or every shard
/// of a set), with the [`SHARD_COLUMN`] last.
#[derive(Debug)]
pub struct LedgerTable {
    sources: Vec<Source>,
    table: &'static Table,
    schema: SchemaRef,
}

impl LedgerTable {
    /// The table `table` of the ledger at `path`, as of `watermark`.
    pub fn new(path: PathBuf, table: &'static Table, watermark: u64) -> LedgerTable {
        LedgerTable::over(vec![Source { path, shard: None, watermark }], table)
    }

    /// The table `table` over every source, one partition of the scan each.
    pub fn over(sources: Vec<Source>, table: &'static Table) -> LedgerTable {
        let mut fields: Vec<Field> =
            table.columns.iter().map(|c| Field::new(c.name, data_type(c.kind), c.nullable)).collect();
        fields.push(Field::new(SHARD_COLUMN, DataType::Int32, true));
        LedgerTable { sources, table, schema: Arc::new(Schema::new(fields)) }
    }

    /// The ledger's filters for a DataFusion filter, when it is `column <op> literal` (either side) or an AND of
    /// such; `None` when any part is not.
    fn translate(&self, filter: &Expr) -> Option<Vec<Filter>> {
        let Expr::BinaryExpr(BinaryExpr { left, op, right }) = filter else { return None };
        if *op == Operator::And {
            let mut filters = self.translate(left)?;
            filters.extend(self.translate(right)?);
            return Some(filters);
        }
        let comparison = comparison(*op)?;
        let (column, literal, comparison) = match (left.as_ref(), right.as_ref()) {
            (Expr::Column(c), Expr::Literal(v, _)) => (&c.name, v, comparison),
            (Expr::Literal(v, _), Expr::Column(c)) => (&c.name, v, flipped(comparison)),
            _ => return None,
        };
        let column = self.table.column_index(column)?;
        Some(vec![Filter { column, comparison, literal: literal_of(literal)? }])
    }

    /// The scan DataFusion asks for, as the ledger's (`projection` of the ledger's columns only), of a source at
    /// `watermark`.
    fn scan_of(&self, projection: &[usize], filters: &[Expr], limit: Option<usize>, watermark: u64) -> Scan {
        Scan {
            table: self.table,
            projection: projection.to_vec(),
            filters: filters.iter().filter_map(|f| self.translate(f)).flatten().collect(),
            limit: limit.map(|n| n as u64),
            watermark,
        }
    }
}

fn data_type(kind: Kind) -> DataType {
    match kind {
        Kind::Int64 => DataType::Int64,
        Kind::Int32 => DataType::Int32,
        Kind::Text => DataType::Utf8,
        Kind::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
    }
}

fn comparison(op: Operator) -> Option<Comparison> {
    Some(match op {
        Operator::Eq => Comparison::Eq,
        Operator::NotEq => Comparison::NotEq,
        Operator::Lt => Comparison::Lt,
        Operator::LtEq => Comparison::LtEq,
        Operator::Gt => Comparison::Gt,
        Operator::GtEq => Comparison::GtEq,
        _ => return None,
    })
}

/// The comparison with its sides swapped: `literal < column` is `column > literal`.
fn flipped(comparison: Comparison) -> Comparison {
    match comparison {
        Comparison::Lt => Comparison::Gt,
        Comparison::LtEq => Comparison::GtEq,
        Comparison::Gt => Comparison::Lt,
        Comparison::GtEq => Comparison::LtEq,
        same => same,
    }
}

/// A DataFusion literal as the ledger compares it; `None` for NULL and other types.
fn literal_of(v: &ScalarValue) -> Option<Literal> {
    Some(match v {
        ScalarValue::Int64(Some(n)) => Literal::Integer(*n),
        ScalarValue::Int32(Some(n)) => Literal::Integer(i64::from(*n)),
        ScalarValue::UInt32(Some(n)) => Literal::Integer(i64::from(*n)),
        ScalarValue::Utf8(Some(s)) | ScalarValue::LargeUtf8(Some(s)) | ScalarValue::Utf8View(Some(s)) => {
            Literal::Text(s.clone())
        }
        ScalarValue::TimestampMicrosecond(Some(t), _) => Literal::Timestamp(Timestamp(*t)),
        ScalarValue::TimestampSecond(Some(t), _) => Literal::Timestamp(Timestamp(t.checked_mul(1_000_000)?)),
        ScalarValue::TimestampMillisecond(Some(t), _) => Literal::Timestamp(Timestamp(t.checked_mul(1_000)?)),
        _ => return None,
    })
}

#[async_trait]
impl TableProvider for LedgerTable {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> datafusion::error::Result<Vec<TableProviderFilterPushDown>> {
        // Inexact: DataFusion applies the filter again, so a translation never has to be perfect to be right.
        Ok(filters
            .iter()
            .map(|f| match self.translate(f) {
                Some(_) => TableProviderFilterPushDown::Inexact,
                None => TableProviderFilterPushDown::Unsupported,
            })
            .collect())
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        let shard_index = self.table.columns.len();
        let projection: Vec<usize> = projection.cloned().unwrap_or_else(|| (0..=shard_index).collect());
        let schema = Arc::new(self.schema.project(&projection)?);
        let own: Vec<usize> = projection.iter().copied().filter(|&i| i != shard_index).collect();
        let ledger_schema = Arc::new(self.schema.project(&own)?);
        let shard_at = projection.iter().position(|&i| i == shard_index);
        let partitions: Vec<Arc<dyn PartitionStream>> = self
            .sources
            .iter()
            .map(|source| {
                let scan = self.scan_of(&own, filters, limit, source.watermark);
                Arc::new(LedgerScan {
                    path: source.path.clone(),
                    scan,
                    ledger_schema: Arc::clone(&ledger_schema),
                    schema: Arc::clone(&schema),
                    shard: shard_at.map(|at| (at, source.shard)),
                }) as Arc<dyn PartitionStream>
            })
            .collect();
        let exec = StreamingTableExec::try_new(schema, partitions, None, [], false, limit)?;
        Ok(Arc::new(exec))
    }
}

/// One scan of the ledger, streamed as Arrow batches.
struct LedgerScan {
    path: PathBuf,
    scan: Scan,
    /// The batches the ledger's columns make.
    ledger_schema: SchemaRef,
    /// The batches sent: with the shard column, when projected.
    schema: SchemaRef,
    /// Where the shard column goes in a batch, and its value.
    shard: Option<(usize, Option<u32>)>,
}

impl fmt::Debug for LedgerScan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LedgerScan").field("table", &self.scan.table.name).field("filters", &self.scan.filters).finish()
    }
}

impl PartitionStream for LedgerScan {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let mut builder = RecordBatchReceiverStreamBuilder::new(Arc::clone(&self.schema), CHANNEL_BATCHES);
        let tx = builder.tx();
        let (path, scan, schema) = (self.path.clone(), self.scan.clone(), Arc::clone(&self.schema));
        let (ledger_schema, shard) = (Arc::clone(&self.ledger_schema), self.shard);
        builder.spawn_blocking(move || {
            let mut send = |batch: RecordBatch| {
                let batch = match shard {
                    None => Ok(batch),
                    Some((at, shard)) => with_shard(batch, &schema, at, shard),
                };
                tx.blocking_send(batch.map_err(DataFusionError::from)).is_ok()
            };
            stream_scan(&path, &scan, &ledger_schema, &mut send).map_err(|e| {
                let causes = ledger::causes(&*e);
                DataFusionError::External(format!("reading the ledger's {}: {causes}", scan.table.name).into())
            })
        });
        builder.build()
    }
}

/// `batch` with the shard column inserted at `at`, every row `shard`.
fn with_shard(
    batch: RecordBatch,
    schema: &SchemaRef,
    at: usize,
    shard: Option<u32>,
) -> Result<RecordBatch, arrow::error::ArrowError> {
    let rows = batch.num_rows();
    let value = shard.map(|p| i32::try_from(p).unwrap_or(i32::MAX));
    let mut columns = batch.columns().to_vec();
    columns.insert(at, Arc::new(arrow::array::Int32Array::from(vec![value; rows])) as ArrayRef);
    let options = arrow::array::RecordBatchOptions::new().with_row_count(Some(rows));
    RecordBatch::try_new_with_options(Arc::clone(schema), columns, &options)
}

/// Reads `scan` on a read-only ledger and hands its rows to `send` in batches; stops early when `send` answers
/// false (the consumer is gone).
fn stream_scan(
    path: &std::path::Path,
    scan: &Scan,
    schema: &SchemaRef,
    send: &mut dyn FnMut(RecordBatch) -> bool,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let ledger = ledger::Ledger::open_read_only(path)?;
    let kinds: Vec<Kind> = scan.projection.iter().map(|i| scan.table.columns[*i].kind).collect();
    let mut columns = Builders::new(&kinds);
    let mut failed: Option<Box<dyn std::error::Error + Send + Sync>> = None;
    let mut consumer_gone = false;
    ledger.scan(scan, |row| {
        if let Err(e) = columns.append(row) {
            failed = Some(e);
            return ControlFlow::Break(());
        }
        if columns.rows < BATCH_ROWS {
            return ControlFlow::Continue(());
        }
        let batch = match columns.finish(schema) {
            Ok(batch) => batch,
            Err(e) => {
                failed = Some(e.into());
                return ControlFlow::Break(());
            }
        };
        if send(batch) {
            return ControlFlow::Continue(());
        }
        consumer_gone = true;
        ControlFlow::Break(())
    })?;
    if let Some(e) = failed {
        return Err(e);
    }
    if !consumer_gone && (columns.rows > 0 || schema.fields().is_empty()) {
        send(columns.finish(schema)?);
    }
    Ok(())
}

/// One Arrow builder per column.
enum ColumnBuilder {
    Int64(Int64Builder),
    Int32(Int32Builder),
    Text(StringBuilder),
    Timestamp(TimestampMicrosecondBuilder),
}

impl ColumnBuilder {
    fn new(kind: Kind) -> ColumnBuilder {
        match kind {
            Kind::Int64 => ColumnBuilder::Int64(Int64Builder::with_capacity(BATCH_ROWS)),
            Kind::Int32 => ColumnBuilder::Int32(Int32Builder::with_capacity(BATCH_ROWS)),
            Kind::Text => ColumnBuilder::Text(StringBuilder::with_capacity(BATCH_ROWS, BATCH_ROWS * 16)),
            Kind::Timestamp => {
                ColumnBuilder::Timestamp(TimestampMicrosecondBuilder::with_capacity(BATCH_ROWS).with_timezone("UTC"))
            }
        }
    }

    fn append(&mut self, value: Value<'_>) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        match (self, value) {
            (ColumnBuilder::Int64(b), Value::Null) => b.append_null(),
            (ColumnBuilder::Int32(b), Value::Null) => b.append_null(),
            (ColumnBuilder::Text(b), Value::Null) => b.append_null(),
            (ColumnBuilder::Timestamp(b), Value::Null) => b.append_null(),
            (ColumnBuilder::Int64(b), Value::Int64(n)) => b.append_value(n),
            (ColumnBuilder::Int32(b), Value::Int32(n)) => b.append_value(n),
            (ColumnBuilder::Timestamp(b), Value::Timestamp(t)) => b.append_value(t.micros()),
            (ColumnBuilder::Text(b), Value::Text(t)) => b.append_value(t),
            (_, other) => return Err(format!("unexpected ledger value {other:?}").into()),
        }
        Ok(())
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            ColumnBuilder::Int64(b) => Arc::new(b.finish()),
            ColumnBuilder::Int32(b) => Arc::new(b.finish()),
            ColumnBuilder::Text(b) => Arc::new(b.finish()),
            ColumnBuilder::Timestamp(b) => Arc::new(b.finish()),
        }
    }
}

/// The builders of a batch and how many rows it holds.
struct Builders {
    columns: Vec<ColumnBuilder>,
    rows: usize,
}

impl Builders {
    fn new(kinds: &[Kind]) -> Builders {
        Builders { columns: kinds.iter().map(|k| ColumnBuilder::new(*k)).collect(), rows: 0 }
    }

    fn append(&mut self, row: &ScanRow<'_>) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        for (index, builder) in self.columns.iter_mut().enumerate() {
            builder.append(row.value(index)?)?;
        }
        self.rows += 1;
        Ok(())
    }

    fn finish(&mut self, schema: &SchemaRef) -> Result<RecordBatch, arrow::error::ArrowError> {
        let rows = std::mem::take(&mut self.rows);
        let arrays: Vec<ArrayRef> = self.columns.iter_mut().map(ColumnBuilder::finish).collect();
        let options = arrow::array::RecordBatchOptions::new().with_row_count(Some(rows));
        RecordBatch::try_new_with_options(Arc::clone(schema), arrays, &options)
    }
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::{col, lit};

    use super::*;

    // Proves DataFusion's filters reach the ledger's scan as its own: `request_id = 'req-1'` (which the ledger probes
    // in its request key index), a literal on the left with its comparison turned around, ANDs flattened; and that a
    // filter of another shape is left to DataFusion.
    #[test]
    fn filters_reach_the_ledgers_scan() {
        let table = LedgerTable::new(PathBuf::from("unused.db"), ledger::tables::table("decision_events").unwrap(), 9);
        let column = |name: &str| table.table.column_index(name).unwrap();
        let request = col("request_id").eq(lit("req-1"));
        let amount = lit(5i64).lt(col("amount"));
        let scan = table.scan_of(&[0], &[request.and(amount), col("reason").like(lit("x%"))], Some(3), 9);
        assert_eq!(
            scan.filters,
            [
                Filter {
                    column: column("request_id"),
                    comparison: Comparison::Eq,
                    literal: Literal::Text("req-1".into())
                },
                Filter { column: column("amount"), comparison: Comparison::Gt, literal: Literal::Integer(5) },
            ]
        );
        assert_eq!((scan.projection, scan.limit, scan.watermark), (vec![0], Some(3), 9));
        assert!(table.translate(&col("reason").like(lit("x%"))).is_none());
    }
}
