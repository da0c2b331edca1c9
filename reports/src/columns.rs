//! Reading typed columns out of query results, whatever string or integer width DataFusion chose.

use std::sync::Arc;

use arrow::array::{Array, AsArray, Int64Array, RecordBatch, StringArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Int64Type};

use crate::error::ReportError;

fn column(
    batch: &RecordBatch,
    name: &str,
    to: &DataType,
    expected: &'static str,
) -> Result<Arc<dyn Array>, ReportError> {
    let array = batch.column_by_name(name).ok_or_else(|| ReportError::ColumnType {
        column: name.to_string(),
        found: "missing".to_string(),
        expected,
    })?;
    Ok(cast(array, to)?)
}

/// A column as UTF-8 strings.
pub fn text(batch: &RecordBatch, name: &str) -> Result<StringArray, ReportError> {
    Ok(column(batch, name, &DataType::Utf8, "text")?.as_string::<i32>().clone())
}

/// A column as 64-bit integers (timestamps as microseconds).
pub fn int64(batch: &RecordBatch, name: &str) -> Result<Int64Array, ReportError> {
    let array = batch.column_by_name(name).ok_or_else(|| ReportError::ColumnType {
        column: name.to_string(),
        found: "missing".to_string(),
        expected: "integer",
    })?;
    let array = match array.data_type() {
        DataType::Timestamp(_, _) => {
            cast(&cast(array, &DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None))?, &DataType::Int64)?
        }
        _ => column(batch, name, &DataType::Int64, "integer")?,
    };
    Ok(array.as_primitive::<Int64Type>().clone())
}

/// The value at `row` of a string column, `None` when null.
pub fn opt_str(array: &StringArray, row: usize) -> Option<&str> {
    (!array.is_null(row)).then(|| array.value(row))
}

/// The value at `row` of an integer column, `None` when null.
pub fn opt_i64(array: &Int64Array, row: usize) -> Option<i64> {
    (!array.is_null(row)).then(|| array.value(row))
}

/// One batch's columns by name, as strings or 64-bit integers (timestamps as microseconds), for reading rows.
pub struct Frame {
    names: Vec<String>,
    text: Vec<Option<StringArray>>,
    integers: Vec<Option<Int64Array>>,
    rows: usize,
}

impl Frame {
    pub fn new(batch: &RecordBatch) -> Result<Frame, ReportError> {
        let schema = batch.schema();
        let mut frame = Frame { names: Vec::new(), text: Vec::new(), integers: Vec::new(), rows: batch.num_rows() };
        for field in schema.fields() {
            let name = field.name();
            let is_text = matches!(field.data_type(), DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View);
            frame.names.push(name.clone());
            frame.text.push(if is_text { Some(text(batch, name)?) } else { None });
            frame.integers.push(if is_text { None } else { Some(int64(batch, name)?) });
        }
        Ok(frame)
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    fn index(&self, name: &str) -> usize {
        self.names.iter().position(|n| n == name).unwrap_or_else(|| panic!("the query selects {name:?}"))
    }

    pub fn opt_str(&self, name: &str, row: usize) -> Option<String> {
        let array = self.text[self.index(name)].as_ref().unwrap_or_else(|| panic!("{name:?} is text"));
        opt_str(array, row).map(str::to_string)
    }

    pub fn str(&self, name: &str, row: usize) -> String {
        self.opt_str(name, row).unwrap_or_default()
    }

    pub fn opt_i64(&self, name: &str, row: usize) -> Option<i64> {
        let array = self.integers[self.index(name)].as_ref().unwrap_or_else(|| panic!("{name:?} is an integer"));
        opt_i64(array, row)
    }

    pub fn i64(&self, name: &str, row: usize) -> i64 {
        self.opt_i64(name, row).unwrap_or(0)
    }

    pub fn opt_time(&self, name: &str, row: usize) -> Option<schemas::Timestamp> {
        self.opt_i64(name, row).map(schemas::Timestamp)
    }

    pub fn time(&self, name: &str, row: usize) -> schemas::Timestamp {
        schemas::Timestamp(self.i64(name, row))
    }

    /// The fields every event starts with (SPEC 3), from a row that selected them under their own names.
    pub fn header(&self, row: usize) -> schemas::Header {
        schemas::Header {
            event_id: self.str("event_id", row),
            occurred_at: self.time("occurred_at", row),
            tenant: self.str("tenant", row),
            subject: self.opt_str("subject", row),
            metric: self.str("metric", row),
            source: self.str("source", row),
        }
    }
}
