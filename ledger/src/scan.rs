//! Scans of the tables the ledger shows to SQL ([`crate::tables`]), for a query engine above it (the reports'
//! DataFusion provider behind `quota-ledger sql`). A [`Scan`] names a table, the columns to read, filters of the
//! form `column comparison literal` (all must hold) and a limit; the ledger turns it into one SQLite query and
//! hands each row to the caller as typed [`Value`]s, never a row past the scan's watermark. The caller may stop
//! at any row, and the query stops with it.
//!
//! Filters are where an index is used: `request_id = 'req-1'` on `decision_events` becomes a probe of the
//! request key index (`ddl/010-request-keys.sql`) besides the comparison, so looking one request up reads a few
//! entries, not every decision. A filter the engine cannot express this way is the engine's to apply.
//!
//! ```
//! use std::ops::ControlFlow;
//! use ledger::scan::{Comparison, Filter, Literal, Scan, Value};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let ledger = ledger::Ledger::open(dir.path().join("ledger.db")).unwrap();
//! let table = ledger::tables::table("decision_events").unwrap();
//! let request_id = table.column_index("request_id").unwrap();
//! let filter = Filter { column: request_id, comparison: Comparison::Eq, literal: Literal::Text("req-1".into()) };
//! let scan = Scan { table, projection: vec![0], filters: vec![filter], limit: None, watermark: 0 };
//! let mut seqs = Vec::new();
//! ledger
//!     .scan(&scan, |row| {
//!         if let Ok(Value::Int64(seq)) = row.value(0) {
//!             seqs.push(seq);
//!         }
//!         ControlFlow::Continue(())
//!     })
//!     .unwrap();
//! assert!(seqs.is_empty());
//! ```

use std::ops::ControlFlow;

use rusqlite::types::{Value as SqlValue, ValueRef};
use schemas::Timestamp;

use crate::Ledger;
use crate::dedup::{REQUEST_KEYS, request_key};
use crate::read::watermark_param;
use crate::tables::{Column, Kind, Table};

/// How a filter compares a column with its literal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparison {
    /// `=`
    Eq,
    /// `<>`
    NotEq,
    /// `<`
    Lt,
    /// `<=`
    LtEq,
    /// `>`
    Gt,
    /// `>=`
    GtEq,
}

impl Comparison {
    fn sql(self) -> &'static str {
        match self {
            Comparison::Eq => "=",
            Comparison::NotEq => "<>",
            Comparison::Lt => "<",
            Comparison::LtEq => "<=",
            Comparison::Gt => ">",
            Comparison::GtEq => ">=",
        }
    }
}

/// The value a filter compares a column with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Literal {
    /// An integer.
    Integer(i64),
    /// Text.
    Text(String),
    /// An instant (compared with a timestamp column's microseconds).
    Timestamp(Timestamp),
}

impl Literal {
    fn sql(&self) -> SqlValue {
        match self {
            Literal::Integer(n) => SqlValue::Integer(*n),
            Literal::Text(text) => SqlValue::Text(text.clone()),
            Literal::Timestamp(t) => SqlValue::Integer(t.micros()),
        }
    }
}

/// `column comparison literal`, the column by its index in the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// The column's index in [`Table::columns`].
    pub column: usize,
    /// How it is compared.
    pub comparison: Comparison,
    /// What it is compared with.
    pub literal: Literal,
}

/// What one scan reads.
#[derive(Debug, Clone)]
pub struct Scan {
    /// The table ([`crate::tables::TABLES`]).
    pub table: &'static Table,
    /// The columns read, by index in [`Table::columns`], in the order the rows hold them (none: rows of no value,
    /// counted only).
    pub projection: Vec<usize>,
    /// Conditions every row read meets.
    pub filters: Vec<Filter>,
    /// At most this many rows.
    pub limit: Option<u64>,
    /// No row of an entry past this ledger sequence number is read (tables without one: every row).
    pub watermark: u64,
}

/// One value of a row, as its column's [`Kind`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'r> {
    /// Missing (a nullable column).
    Null,
    /// A [`Kind::Int64`] value.
    Int64(i64),
    /// A [`Kind::Int32`] value.
    Int32(i32),
    /// A [`Kind::Text`] value.
    Text(&'r str),
    /// A [`Kind::Timestamp`] value.
    Timestamp(Timestamp),
}

/// One row of a scan: the values of its projected columns.
pub struct ScanRow<'r> {
    row: &'r rusqlite::Row<'r>,
    scan: &'r Scan,
}

impl ScanRow<'_> {
    /// How many values the row holds (the projection's length).
    pub fn len(&self) -> usize {
        self.scan.projection.len()
    }

    /// Whether the row holds no value (an empty projection).
    pub fn is_empty(&self) -> bool {
        self.scan.projection.is_empty()
    }

    /// The value of the `index`-th projected column.
    pub fn value(&self, index: usize) -> Result<Value<'_>, ScanError> {
        let table = self.scan.table;
        let column = self
            .scan
            .projection
            .get(index)
            .and_then(|c| table.columns.get(*c))
            .ok_or(ScanError::NoSuchColumn { table: table.name, index })?;
        let unexpected = |found: &str| ScanError::UnexpectedValue {
            table: table.name,
            column: column.name,
            kind: column.kind,
            found: found.to_string(),
        };
        Ok(match (column.kind, self.row.get_ref(index)?) {
            (_, ValueRef::Null) => Value::Null,
            (Kind::Int64, ValueRef::Integer(n)) => Value::Int64(n),
            (Kind::Int32, ValueRef::Integer(n)) => {
                Value::Int32(i32::try_from(n).map_err(|_| unexpected(&format!("the integer {n}")))?)
            }
            (Kind::Timestamp, ValueRef::Integer(n)) => Value::Timestamp(Timestamp(n)),
            (Kind::Text, ValueRef::Text(bytes)) => {
                Value::Text(std::str::from_utf8(bytes).map_err(|_| unexpected("text that is not UTF-8"))?)
            }
            (_, other) => return Err(unexpected(&format!("a value of type {}", other.data_type()))),
        })
    }
}

/// A scan failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScanError {
    /// A projection or filter named a column the table does not have.
    #[error("table {table} has no column {index}")]
    NoSuchColumn {
        /// The table scanned.
        table: &'static str,
        /// The column index asked for.
        index: usize,
    },
    /// A stored value does not have its column's type.
    #[error("column {column} of {table} holds {found}, not {kind:?}")]
    UnexpectedValue {
        /// The table scanned.
        table: &'static str,
        /// The column read.
        column: &'static str,
        /// Its type.
        kind: Kind,
        /// What it held.
        found: String,
    },
    /// SQLite failed.
    #[error("ledger scan failed")]
    Sqlite(#[from] rusqlite::Error),
}

impl Ledger {
    /// Reads the rows `scan` selects, in the table's storage order, and hands each to `each` until it answers
    /// `Break` or the rows end; answers how many rows were handed over.
    pub fn scan(&self, scan: &Scan, mut each: impl FnMut(&ScanRow<'_>) -> ControlFlow<()>) -> Result<u64, ScanError> {
        let (sql, params) = query(scan)?;
        let mut statement = self.conn.prepare(&sql)?;
        let mut rows = statement.query(rusqlite::params_from_iter(params))?;
        let mut count = 0;
        while let Some(row) = rows.next()? {
            count += 1;
            if each(&ScanRow { row, scan }).is_break() {
                break;
            }
        }
        Ok(count)
    }
}

/// `SELECT <projected columns> FROM ... WHERE <watermark> AND <filters> [LIMIT n]` and its parameters.
fn query(scan: &Scan) -> Result<(String, Vec<SqlValue>), ScanError> {
    let table = scan.table;
    let column = |index: usize| -> Result<&'static Column, ScanError> {
        table.columns.get(index).ok_or(ScanError::NoSuchColumn { table: table.name, index })
    };
    let columns: Vec<&str> = scan.projection.iter().map(|i| column(*i).map(|c| c.sql)).collect::<Result<_, _>>()?;
    let select = if columns.is_empty() { "1".to_string() } else { columns.join(", ") };
    let mut conditions = Vec::new();
    let mut params = Vec::new();
    if let Some(seq) = table.seq {
        conditions.push(format!("{seq} <= ?"));
        params.push(SqlValue::Integer(watermark_param(scan.watermark)));
    }
    for filter in &scan.filters {
        let column = column(filter.column)?;
        let condition = format!("{} {} ?", column.sql, filter.comparison.sql());
        match (&filter.literal, filter.comparison, table.seq) {
            // The request key index finds the few entries first; the comparison then checks each one's request_id.
            (Literal::Text(request_id), Comparison::Eq, Some(seq)) if column.request_keyed => {
                let key = SqlValue::Integer(request_key(request_id));
                conditions.push(format!("({} AND {condition})", REQUEST_KEYS.condition(seq)));
                params.extend(std::iter::repeat_n(key, REQUEST_KEYS.tiers.len()));
            }
            _ => conditions.push(condition),
        }
        params.push(filter.literal.sql());
    }
    let mut sql = format!("SELECT {select} FROM {}", table.from);
    if !conditions.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&conditions.join(" AND "));
    }
    if let Some(limit) = scan.limit {
        sql.push_str(&format!(" LIMIT {limit}"));
    }
    Ok((sql, params))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::table;

    fn filter(table: &Table, column: &str, comparison: Comparison, literal: Literal) -> Filter {
        Filter { column: table.column_index(column).unwrap(), comparison, literal }
    }

    // Proves that `request_id = 'literal'` on decisions reaches SQLite as a probe of the request key index (there is
    // no other index of request ids: without it, a lookup reads every decision), and that a comparison of another
    // kind, or on another column, stays a plain comparison.
    #[test]
    fn a_request_id_filter_probes_the_request_key_index() {
        let decisions = table("decision_events").unwrap();
        let request = filter(decisions, "request_id", Comparison::Eq, Literal::Text("req-1".into()));
        let scan = Scan { table: decisions, projection: vec![0], filters: vec![request], limit: None, watermark: 9 };
        let (sql, params) = query(&scan).unwrap();
        let probe = REQUEST_KEYS.condition("d.seq");
        assert_eq!(
            sql,
            format!("SELECT e.seq FROM {} WHERE d.seq <= ? AND ({probe} AND d.request_id = ?)", decisions.from)
        );
        let key = SqlValue::Integer(request_key("req-1"));
        let mut expected = vec![SqlValue::Integer(9)];
        expected.extend(std::iter::repeat_n(key, 4));
        expected.push(SqlValue::Text("req-1".into()));
        assert_eq!(params, expected);

        let filters = vec![
            filter(decisions, "request_id", Comparison::Gt, Literal::Text("req-1".into())),
            filter(decisions, "reason", Comparison::Eq, Literal::Text("x".into())),
        ];
        let (sql, _) = query(&Scan { filters, ..scan }).unwrap();
        assert!(!sql.contains("request_keys"), "{sql}");
    }

    // Proves a scan reads typed values within its watermark and filters, stops when asked, and refuses a column the
    // table does not have.
    #[test]
    fn a_scan_reads_typed_rows_up_to_its_watermark() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = Ledger::open(dir.path().join("l.db")).unwrap();
        let usage = |id: &str, quantity: i64| {
            let json = format!(
                r#"{{"event_id":"{id}","occurred_at":"2026-11-02T10:00:00Z","tenant":"org-1","metric":"requests","source":"t","quantity":{quantity}}}"#
            );
            let event = schemas::Event::from_json(schemas::EventType::UsageEvent, &json).unwrap();
            crate::Incoming { event, origin: crate::Origin::Local { name: "test".into() }, raw: None }
        };
        let events = vec![usage("u-1", 3), usage("u-2", 4), usage("u-3", 5)];
        ledger.append(&crate::Batch { events, ..crate::Batch::default() }).unwrap();
        let table = table("usage_events").unwrap();
        let columns = ["event_id", "occurred_at", "subject", "quantity"];
        let projection: Vec<usize> = columns.iter().map(|c| table.column_index(c).unwrap()).collect();
        let above_3 = filter(table, "quantity", Comparison::Gt, Literal::Integer(3));
        let scan = Scan { table, projection, filters: vec![above_3], limit: None, watermark: 2 };
        let mut rows = Vec::new();
        ledger
            .scan(&scan, |row| {
                let values: Vec<String> = (0..row.len()).map(|i| format!("{:?}", row.value(i).unwrap())).collect();
                rows.push(values.join(" "));
                ControlFlow::Continue(())
            })
            .unwrap();
        let at = Timestamp::parse_rfc3339("2026-11-02T10:00:00Z").unwrap().micros();
        assert_eq!(rows, [format!("Text(\"u-2\") Timestamp(Timestamp({at})) Null Int64(4)")]);

        let every = Scan { filters: Vec::new(), watermark: 3, ..scan.clone() };
        assert_eq!(ledger.scan(&every, |_| ControlFlow::Break(())).unwrap(), 1, "stopped at the first row");
        let missing = Scan { projection: vec![99], ..scan };
        assert!(matches!(ledger.scan(&missing, |_| ControlFlow::Continue(())), Err(ScanError::NoSuchColumn { .. })));
    }
}
