//! Producers' text made safe to show: in a spreadsheet ([`csv_text`]) and on a terminal or in a log ([`printable`]),
//! and tables of it aligned for people ([`TableWriter`]); the rows of Arrow batches (`sql`'s answers) as such text and
//! as CSV.
//! Names and ids the contract bounds (tenant, subject, metric, request_id, idempotency_key) never hold a control
//! character, since ingest quarantines them; event ids, sources, reasons, attributes and whatever an older ledger
//! recorded may, and a newline in them would forge a line of `status`, `audit` or a table, an escape sequence would
//! drive the reader's terminal.

use std::borrow::Cow;
use std::io::Write;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Schema};
use arrow::error::ArrowError;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use unicode_width::UnicodeWidthStr;

/// A text cell, safe to open in a spreadsheet (OWASP "CSV injection"): one that starts with `=`, `+`, `-`,
/// `@`, a tab or a carriage return is prefixed with `'`, so that it is shown as text and never run as a
/// formula; then quoted (RFC 4180) when it holds a comma, a quote or a line break.
pub fn csv_text(text: &str) -> String {
    let neutralised =
        if text.starts_with(['=', '+', '-', '@', '\t', '\r']) { format!("'{text}") } else { text.to_string() };
    if neutralised.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", neutralised.replace('"', "\"\""))
    } else {
        neutralised
    }
}

/// `text` with every control character written as an escape (`\n`, `\t`, `\r`, `\u{1b}`), so that it stays on its
/// line and cannot drive a terminal; text without one is borrowed as it is.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => shown.push_str("\\n"),
            '\t' => shown.push_str("\\t"),
            '\r' => shown.push_str("\\r"),
            c if c.is_control() => shown.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => shown.push(c),
        }
    }
    Cow::Owned(shown)
}

/// Writes rows as a table whose columns are aligned, the header first.
pub fn write_table(out: &mut dyn Write, header: &[&str], rows: &[Vec<String>]) -> std::io::Result<()> {
    let mut table = TableWriter::new(header);
    for row in rows {
        table.push(out, row.clone())?;
    }
    table.finish(out)
}

/// Rows a [`TableWriter`] holds before it prints them: a table of any length prints as it goes, in bounded memory.
pub const TABLE_CHUNK_ROWS: usize = 10_000;

/// A table written as its rows come, in chunks of [`TABLE_CHUNK_ROWS`]: each chunk is aligned on the widest cell of
/// every row so far (columns only ever move right), the header on the first chunk's. A table of at most one chunk
/// is aligned on all of its rows, as if printed at once. Widths are what a terminal shows (a CJK character or an
/// emoji takes two columns, a combining accent none): a count of characters would push the columns after a Japanese
/// tenant's name askew.
pub struct TableWriter {
    header: Vec<String>,
    widths: Vec<usize>,
    pending: Vec<Vec<String>>,
    header_written: bool,
}

impl TableWriter {
    /// A table of these columns.
    pub fn new(header: &[&str]) -> TableWriter {
        TableWriter {
            header: header.iter().map(|h| h.to_string()).collect(),
            widths: header.iter().map(|h| h.width()).collect(),
            pending: Vec::new(),
            header_written: false,
        }
    }

    /// Adds a row, its control characters escaped (a producer's newline would forge a row of the table).
    pub fn push(&mut self, out: &mut dyn Write, row: Vec<String>) -> std::io::Result<()> {
        let row = row
            .into_iter()
            .map(|cell| match printable(&cell) {
                std::borrow::Cow::Borrowed(_) => cell,
                std::borrow::Cow::Owned(shown) => shown,
            })
            .collect();
        self.pending.push(row);
        if self.pending.len() >= TABLE_CHUNK_ROWS { self.flush(out) } else { Ok(()) }
    }

    /// Prints what is pending, and the header when no row came.
    pub fn finish(mut self, out: &mut dyn Write) -> std::io::Result<()> {
        self.flush(out)
    }

    fn flush(&mut self, out: &mut dyn Write) -> std::io::Result<()> {
        for row in &self.pending {
            for (width, cell) in self.widths.iter_mut().zip(row) {
                *width = (*width).max(cell.width());
            }
        }
        let widths = &self.widths;
        let line = |cells: &mut dyn Iterator<Item = &str>| -> String {
            let mut line = String::new();
            for (column, (cell, width)) in cells.zip(widths).enumerate() {
                if column > 0 {
                    line.push_str("  ");
                }
                line.push_str(cell);
                // Padded by hand: a format width (`{cell:<width$}`) is a u16, and `sql` prints cells of any length.
                line.extend(std::iter::repeat_n(' ', width.saturating_sub(cell.width())));
            }
            line.trim_end().to_string()
        };
        if !self.header_written {
            writeln!(out, "{}", line(&mut self.header.iter().map(String::as_str)))?;
            self.header_written = true;
        }
        for row in self.pending.drain(..) {
            writeln!(out, "{}", line(&mut row.iter().map(String::as_str)))?;
        }
        Ok(())
    }
}

/// The names of a batch's columns, in order.
pub fn column_names(schema: &Schema) -> Vec<&str> {
    schema.fields().iter().map(|f| f.name().as_str()).collect()
}

/// A batch's rows as text, a cell per column, nulls empty.
pub fn batch_rows(batch: &RecordBatch) -> Result<Vec<Vec<String>>, ArrowError> {
    let options = FormatOptions::default().with_null("");
    let formatters: Vec<ArrayFormatter<'_>> =
        batch.columns().iter().map(|c| ArrayFormatter::try_new(c.as_ref(), &options)).collect::<Result<_, _>>()?;
    Ok((0..batch.num_rows()).map(|row| formatters.iter().map(|f| f.value(row).to_string()).collect()).collect())
}

/// The CSV header of a batch's columns: their names, each a safe CSV text cell.
pub fn write_csv_header(out: &mut dyn Write, schema: &Schema) -> std::io::Result<()> {
    let names: Vec<String> = column_names(schema).into_iter().map(csv_text).collect();
    writeln!(out, "{}", names.join(","))
}

/// A batch's rows as CSV, as the billing export writes it: text cells made safe with [`csv_text`], numbers as
/// numbers, nulls empty. The outer error is Arrow's, the inner one the output's.
pub fn write_csv_rows(out: &mut dyn Write, batch: &RecordBatch) -> Result<std::io::Result<()>, ArrowError> {
    let is_text: Vec<bool> = batch
        .schema()
        .fields()
        .iter()
        .map(|f| matches!(f.data_type(), DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View))
        .collect();
    for row in batch_rows(batch)? {
        let cells: Vec<String> =
            row.into_iter().zip(&is_text).map(|(cell, text)| if *text { csv_text(&cell) } else { cell }).collect();
        if let Err(e) = writeln!(out, "{}", cells.join(",")) {
            return Ok(Err(e));
        }
    }
    Ok(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_plain_text_borrowed() {
        assert!(matches!(printable("org-42 requests"), Cow::Borrowed(_)));
        assert_eq!(printable("a\nTOTAL 0"), "a\\nTOTAL 0");
        assert_eq!(printable("\u{1b}[2Jx\t\r\u{7f}"), "\\u{1b}[2Jx\\t\\r\\u{7f}");
    }

    // Proves the columns line up on a terminal: a tenant named in Japanese (two columns a character) and one with a
    // combining accent (none for the accent) pad the next column to where an ASCII name puts it.
    #[test]
    fn wide_and_combining_characters_align_on_what_a_terminal_shows() {
        let rows = vec![
            vec!["org-1".to_string(), "7".to_string()],
            vec!["株式会社".to_string(), "8".to_string()],
            vec!["cafe\u{301}".to_string(), "9".to_string()],
        ];
        let mut out = Vec::new();
        write_table(&mut out, &["tenant", "n"], &rows).unwrap();
        let text = String::from_utf8(out).unwrap();
        let columns: Vec<usize> = text.lines().map(|line| line[..line.rfind(' ').unwrap() + 1].width()).collect();
        assert_eq!(columns, [10, 10, 10, 10], "the second column starts at column 10 on every line:\n{text}");
    }
}
