//! A DataFusion `TableProvider` over one ledger table, streaming: each scan runs one SQLite query on its own
//! read-only connection in a blocking task and sends Arrow batches of [`BATCH_ROWS`] rows through a channel of
//! [`CHANNEL_BATCHES`], so memory follows the batch size, not the table. Projections and simple comparisons
//! (`column <op> literal`, joined by AND) are pushed down into the SQLite query, so that an indexed lookup
//! stays one (`request_id = 'req-1'` becomes a probe of the ledger's request key index). Rows past the session's
//! watermark are never read.
//!
//! Why not `datafusion-table-providers` (sqlite feature): its DataFusion (55.2) and rusqlite (0.37) fit, but
//! its `query_arrow` collects the whole result into one batch before DataFusion sees a row, and it infers
//! column types from the first row of each table; this file is what the ledger needs and nothing more.

use std::fmt;
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
use rusqlite::types::{Value, ValueRef};
use rusqlite::{Connection, OpenFlags};

use crate::tables::{Column, Kind, Table};

/// Rows per Arrow batch: DataFusion's default batch size.
pub const BATCH_ROWS: usize = 8_192;
/// Batches a scan may run ahead of its consumer before it waits (bounded: a slow consumer slows the scan).
pub const CHANNEL_BATCHES: usize = 2;
/// How long a scan waits for a writer's lock (WAL readers rarely wait at all).
pub const BUSY_TIMEOUT_MS: u64 = ledger::BUSY_TIMEOUT_MS;

/// One ledger table as DataFusion sees it.
#[derive(Debug)]
pub struct LedgerTable {
    path: PathBuf,
    table: &'static Table,
    /// Rows whose sequence column is above this are not read.
    watermark: u64,
    schema: SchemaRef,
}

impl LedgerTable {
    pub fn new(path: PathBuf, table: &'static Table, watermark: u64) -> LedgerTable {
        let fields: Vec<Field> =
            table.columns.iter().map(|c| Field::new(c.name, data_type(c.kind), c.nullable)).collect();
        LedgerTable { path, table, watermark, schema: Arc::new(Schema::new(fields)) }
    }

    /// `SELECT <projected columns> FROM ... WHERE <watermark> AND <pushed filters> [LIMIT n]` and its parameters.
    fn query(&self, projection: &[usize], filters: &[Expr], limit: Option<usize>) -> (String, Vec<Value>) {
        let columns: Vec<&str> = projection.iter().map(|i| self.table.columns[*i].sql).collect();
        let select = if columns.is_empty() { "1".to_string() } else { columns.join(", ") };
        let mut conditions = Vec::new();
        let mut params = Vec::new();
        if let Some(seq) = self.table.seq {
            conditions.push(format!("{seq} <= ?"));
            params.push(Value::Integer(self.watermark as i64));
        }
        for filter in filters {
            if let Some((condition, values)) = self.translate(filter) {
                conditions.push(condition);
                params.extend(values);
            }
        }
        let mut sql = format!("SELECT {select} FROM {}", self.table.from);
        if !conditions.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&conditions.join(" AND "));
        }
        if let Some(limit) = limit {
            sql.push_str(&format!(" LIMIT {limit}"));
        }
        (sql, params)
    }

    /// A filter as a SQLite condition, when it is `column <op> literal` (either side) or an AND of such.
    fn translate(&self, filter: &Expr) -> Option<(String, Vec<Value>)> {
        let Expr::BinaryExpr(BinaryExpr { left, op, right }) = filter else { return None };
        if *op == Operator::And {
            let (l, mut lp) = self.translate(left)?;
            let (r, rp) = self.translate(right)?;
            lp.extend(rp);
            return Some((format!("({l} AND {r})"), lp));
        }
        let symbol = comparison(*op)?;
        let (column, literal, condition) = match (left.as_ref(), right.as_ref()) {
            (Expr::Column(c), Expr::Literal(v, _)) => {
                let column = self.column(&c.name)?;
                (column, v, format!("{} {symbol} ?", column.sql))
            }
            (Expr::Literal(v, _), Expr::Column(c)) => {
                let column = self.column(&c.name)?;
                (column, v, format!("? {symbol} {}", column.sql))
            }
            _ => return None,
        };
        let value = value(literal)?;
        match (&value, *op, self.table.seq) {
            // The request key index finds the few entries first; the comparison then checks each one's request_id.
            (Value::Text(request_id), Operator::Eq, Some(seq)) if column.request_keyed => {
                let key = Value::Integer(ledger::dedup::request_key(request_id));
                let probe = ledger::dedup::REQUEST_KEYS.condition(seq);
                let probes = vec![key; ledger::dedup::REQUEST_KEYS.tiers.len()];
                Some((format!("({probe} AND {condition})"), [probes, vec![value]].concat()))
            }
            _ => Some((condition, vec![value])),
        }
    }

    fn column(&self, name: &str) -> Option<&'static Column> {
        self.table.columns.iter().find(|c| c.name == name)
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

fn comparison(op: Operator) -> Option<&'static str> {
    Some(match op {
        Operator::Eq => "=",
        Operator::NotEq => "<>",
        Operator::Lt => "<",
        Operator::LtEq => "<=",
        Operator::Gt => ">",
        Operator::GtEq => ">=",
        _ => return None,
    })
}

/// A literal as SQLite stores it (timestamps as microseconds); `None` for NULL and other types.
fn value(v: &ScalarValue) -> Option<Value> {
    Some(match v {
        ScalarValue::Int64(Some(n)) => Value::Integer(*n),
        ScalarValue::Int32(Some(n)) => Value::Integer(i64::from(*n)),
        ScalarValue::UInt32(Some(n)) => Value::Integer(i64::from(*n)),
        ScalarValue::Utf8(Some(s)) | ScalarValue::LargeUtf8(Some(s)) | ScalarValue::Utf8View(Some(s)) => {
            Value::Text(s.clone())
        }
        ScalarValue::TimestampMicrosecond(Some(t), _) => Value::Integer(*t),
        ScalarValue::TimestampSecond(Some(t), _) => Value::Integer(t.checked_mul(1_000_000)?),
        ScalarValue::TimestampMillisecond(Some(t), _) => Value::Integer(t.checked_mul(1_000)?),
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
        let projection: Vec<usize> = projection.cloned().unwrap_or_else(|| (0..self.table.columns.len()).collect());
        let schema = Arc::new(self.schema.project(&projection)?);
        let kinds = projection.iter().map(|i| self.table.columns[*i].kind).collect();
        let (sql, params) = self.query(&projection, filters, limit);
        let partition = SqliteScan { path: self.path.clone(), sql, params, kinds, schema: Arc::clone(&schema) };
        let exec = StreamingTableExec::try_new(schema, vec![Arc::new(partition)], None, [], false, limit)?;
        Ok(Arc::new(exec))
    }
}

/// One SQLite query, streamed as Arrow batches.
struct SqliteScan {
    path: PathBuf,
    sql: String,
    params: Vec<Value>,
    kinds: Vec<Kind>,
    schema: SchemaRef,
}

impl fmt::Debug for SqliteScan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteScan").field("sql", &self.sql).field("params", &self.params).finish()
    }
}

impl PartitionStream for SqliteScan {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let mut builder = RecordBatchReceiverStreamBuilder::new(Arc::clone(&self.schema), CHANNEL_BATCHES);
        let tx = builder.tx();
        let (path, sql, params, kinds, schema) =
            (self.path.clone(), self.sql.clone(), self.params.clone(), self.kinds.clone(), Arc::clone(&self.schema));
        builder.spawn_blocking(move || {
            let mut send = |batch: RecordBatch| tx.blocking_send(Ok(batch)).is_ok();
            stream_query(&path, &sql, &params, &kinds, &schema, &mut send)
                .map_err(|e| DataFusionError::External(format!("reading the ledger ({sql}): {e}").into()))
        });
        builder.build()
    }
}

/// Opens a read-only connection to the ledger: reports can never write.
pub fn open_read_only(path: &std::path::Path) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_handler(Some(ledger::poll_while_busy))?;
    conn.pragma_update(None, "query_only", true)?;
    Ok(conn)
}

/// Runs `sql` and hands its rows to `send` in batches; stops early when `send` answers false (the consumer is
/// gone).
fn stream_query(
    path: &std::path::Path,
    sql: &str,
    params: &[Value],
    kinds: &[Kind],
    schema: &SchemaRef,
    send: &mut dyn FnMut(RecordBatch) -> bool,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let conn = open_read_only(path)?;
    let mut statement = conn.prepare(sql)?;
    let mut rows = statement.query(rusqlite::params_from_iter(params))?;
    let mut columns = Builders::new(kinds);
    while let Some(row) = rows.next()? {
        for (index, builder) in columns.0.iter_mut().enumerate() {
            builder.append(row.get_ref(index)?)?;
        }
        columns.1 += 1;
        if columns.1 == BATCH_ROWS && !send(columns.finish(schema)?) {
            return Ok(());
        }
    }
    if columns.1 > 0 || schema.fields().is_empty() {
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

    fn append(&mut self, value: ValueRef<'_>) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        match (self, value) {
            (ColumnBuilder::Int64(b), ValueRef::Null) => b.append_null(),
            (ColumnBuilder::Int32(b), ValueRef::Null) => b.append_null(),
            (ColumnBuilder::Text(b), ValueRef::Null) => b.append_null(),
            (ColumnBuilder::Timestamp(b), ValueRef::Null) => b.append_null(),
            (ColumnBuilder::Int64(b), ValueRef::Integer(n)) => b.append_value(n),
            (ColumnBuilder::Int32(b), ValueRef::Integer(n)) => b.append_value(i32::try_from(n)?),
            (ColumnBuilder::Timestamp(b), ValueRef::Integer(n)) => b.append_value(n),
            (ColumnBuilder::Text(b), ValueRef::Text(t)) => b.append_value(std::str::from_utf8(t)?),
            (_, other) => return Err(format!("unexpected SQLite value {other:?}").into()),
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
struct Builders(Vec<ColumnBuilder>, usize);

impl Builders {
    fn new(kinds: &[Kind]) -> Builders {
        Builders(kinds.iter().map(|k| ColumnBuilder::new(*k)).collect(), 0)
    }

    fn finish(&mut self, schema: &SchemaRef) -> Result<RecordBatch, arrow::error::ArrowError> {
        let rows = std::mem::take(&mut self.1);
        let arrays: Vec<ArrayRef> = self.0.iter_mut().map(ColumnBuilder::finish).collect();
        let options = arrow::array::RecordBatchOptions::new().with_row_count(Some(rows));
        RecordBatch::try_new_with_options(Arc::clone(schema), arrays, &options)
    }
}

#[cfg(test)]
mod tests {
    use datafusion::prelude::{col, lit};

    use super::*;

    // Proves that `request_id = 'literal'` on decisions reaches SQLite as a probe of the request key index (there is
    // no other index of request ids: without it, `audit why` reads every decision), and that a comparison of
    // another kind, or on another column, stays a plain comparison.
    #[test]
    fn a_request_id_filter_probes_the_request_key_index() {
        let table = LedgerTable::new(PathBuf::from("unused.db"), crate::tables::table("decision_events").unwrap(), 9);
        let key = Value::Integer(ledger::dedup::request_key("req-1"));
        let (sql, params) = table.query(&[0], &[col("request_id").eq(lit("req-1"))], None);
        let probe = ledger::dedup::REQUEST_KEYS.condition("d.seq");
        assert_eq!(
            sql,
            format!("SELECT e.seq FROM {} WHERE d.seq <= ? AND ({probe} AND d.request_id = ?)", table.table.from)
        );
        let mut expected = vec![Value::Integer(9)];
        expected.extend(std::iter::repeat_n(key, 4));
        expected.push(Value::Text("req-1".into()));
        assert_eq!(params, expected);

        let (sql, _) = table.query(&[0], &[col("request_id").gt(lit("req-1")), col("reason").eq(lit("x"))], None);
        assert!(!sql.contains("request_keys"), "{sql}");
    }
}
