//! One module per subcommand. Exit codes: 0 ok, 1 found discrepancies (verify, reconcile), 2 error.

pub mod audit;
pub mod backup;
pub mod bench;
pub mod broker;
pub mod cluster;
pub mod config;
pub mod demo;
pub mod export;
pub mod generate;
pub mod grant;
pub mod ingest;
pub mod kafka_args;
pub mod node;
pub mod policy;
pub mod produce;
pub mod quarantine;
pub mod quota;
pub mod reconcile;
pub mod route;
pub mod schemas;
pub mod serve;
pub mod sql;
pub mod status;
pub mod topics;
pub mod trust_args;
pub mod verify;

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;

/// Exit code of a command that found discrepancies (a broken chain, adjustments to make).
pub const EXIT_DISCREPANCIES: u8 = 1;
/// Exit code of a command that failed.
pub const EXIT_ERROR: u8 = 2;

/// An error and its causes on one line, as `{:#}` prints them, less each cause that the line already ends with:
/// DataFusion's errors (and tempfile's) print their source and answer it from `source()` too, which made "query
/// failed: Error during planning: table 'x' not found: Error during planning: table 'x' not found".
pub fn error_line(error: &anyhow::Error) -> String {
    let mut line = ledger::causes(error.as_ref());
    if error.chain().any(ledger::is_busy) {
        line.push_str(" (");
        line.push_str(ledger::BUSY_HINT);
        line.push(')');
    }
    line
}

/// Set once a write to stdout met a closed pipe.
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Where every command writes its output (`println!` would panic on a closed pipe). A closed stdout
/// (`quota-ledger status | head -1`) is not an error, as in ripgrep: the rest of the output is dropped, the
/// command runs to its end and exits with its own code, so reconcile still exits 1 when it wrote adjustments
/// whoever stopped reading its report.
pub fn stdout() -> Stdout {
    Stdout(std::io::stdout().lock())
}

/// Whether a write to stdout already met a closed pipe: later writes are dropped without trying, and output
/// produced piece by piece (`sql`'s batches) can stop being produced.
pub fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(Ordering::Relaxed)
}

/// Stdout, locked, whose broken pipe is swallowed (see [`stdout`]). Writers that wrap it (Arrow's CSV and JSON
/// writers, which turn an io::Error into text) therefore never see one either.
pub struct Stdout(std::io::StdoutLock<'static>);

impl Stdout {
    /// `result` unless it is a broken pipe, which is remembered and answered with `closed`.
    fn unless_closed<T>(result: std::io::Result<T>, closed: T) -> std::io::Result<T> {
        match result {
            Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => {
                STDOUT_CLOSED.store(true, Ordering::Relaxed);
                Ok(closed)
            }
            other => other,
        }
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if stdout_closed() {
            return Ok(buf.len());
        }
        Stdout::unless_closed(self.0.write(buf), buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if stdout_closed() {
            return Ok(());
        }
        Stdout::unless_closed(self.0.flush(), ())
    }
}

/// Where the ledger is: one file holding every partition (`--ledger`), or a directory of shards (`--data`).
pub enum Store {
    /// One ledger file.
    File(std::path::PathBuf),
    /// A directory of shards, one ledger per partition.
    Shards(ledger::shards::ShardDir),
}

impl Store {
    /// The ledger file, for a command that reads or writes one ledger: `command` refuses a directory of shards.
    pub fn file(&self, command: &str) -> anyhow::Result<&std::path::Path> {
        match self {
            Store::File(path) => Ok(path),
            Store::Shards(shards) => anyhow::bail!(
                "{command} does not take a directory of shards (--data {}) yet: give it one ledger file with --ledger",
                shards.dir().display()
            ),
        }
    }
}

/// Opens a ledger for appending, with the reports' commit totals kept inside every append's transaction (an
/// export then judges only reservations touched since; without the hook the next export catches up).
pub fn open_for_append(path: &std::path::Path) -> anyhow::Result<ledger::Ledger> {
    let mut ledger = ledger::Ledger::open(path)?;
    ledger.keep_commit_totals();
    Ok(ledger)
}

/// A spinner with a message and the elapsed time, for long work on a terminal.
pub fn spinner() -> indicatif::ProgressBar {
    let style = indicatif::ProgressStyle::with_template("{spinner} {msg} [{elapsed}]").expect("a valid template");
    indicatif::ProgressBar::new_spinner().with_style(style)
}

/// Shows the [`tools::Progress`] of a tool's long steps on stderr: a bar in `bar_style` for a step of known length,
/// a spinner otherwise (indicatif draws nothing when stderr is not a terminal); notes as lines.
pub struct ProgressDisplay {
    bar_style: indicatif::ProgressStyle,
    shown: std::cell::RefCell<Option<indicatif::ProgressBar>>,
}

impl ProgressDisplay {
    /// Steps of known length drawn with `bar_template` (indicatif's template syntax).
    pub fn new(bar_template: &str) -> ProgressDisplay {
        let bar_style = indicatif::ProgressStyle::with_template(bar_template).expect("a valid template");
        ProgressDisplay { bar_style, shown: std::cell::RefCell::new(None) }
    }

    /// The same, the bar drawn with `chars` (filled, tip, empty).
    pub fn with_chars(mut self, chars: &str) -> ProgressDisplay {
        self.bar_style = self.bar_style.progress_chars(chars);
        self
    }

    /// Shows one report of a step's progress.
    pub fn show(&self, progress: tools::Progress) {
        use tools::Progress;
        let mut shown = self.shown.borrow_mut();
        match progress {
            Progress::Begin { step, total: Some(total) } => {
                let bar = indicatif::ProgressBar::new(total).with_style(self.bar_style.clone()).with_message(step);
                replace(&mut shown, bar);
            }
            Progress::Begin { step, total: None } => {
                let bar = spinner();
                bar.enable_steady_tick(std::time::Duration::from_millis(200));
                bar.set_message(step);
                replace(&mut shown, bar);
            }
            Progress::At(done) => shown.iter().for_each(|bar| bar.set_position(done)),
            Progress::Doing(text) => shown.iter().for_each(|bar| bar.set_message(text.clone())),
            Progress::End => shown.take().iter().for_each(|bar| bar.finish_and_clear()),
            Progress::Note(text) => eprintln!("{text}"),
            _ => {}
        }
    }
}

/// Clears the bar shown, if any, and shows `bar` instead.
fn replace(shown: &mut Option<indicatif::ProgressBar>, bar: indicatif::ProgressBar) {
    if let Some(old) = shown.replace(bar) {
        old.finish_and_clear();
    }
}

/// Prints a value as pretty JSON on stdout.
pub fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    // Serialized first, written second: a value that cannot be serialized prints nothing rather than half.
    let mut text = serde_json::to_vec_pretty(value).context("cannot serialize JSON")?;
    text.push(b'\n');
    stdout().write_all(&text)?;
    Ok(())
}

/// Prints rows as a table whose columns are aligned, the header first.
pub fn print_table(header: &[&str], rows: &[Vec<String>]) -> anyhow::Result<()> {
    write_table(&mut stdout(), header, rows)
}

/// Writes rows as a table whose columns are aligned, the header first.
pub fn write_table(out: &mut dyn Write, header: &[&str], rows: &[Vec<String>]) -> anyhow::Result<()> {
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
/// is aligned on all of its rows, as if printed at once.
pub struct TableWriter {
    header: Vec<String>,
    widths: Vec<usize>,
    pending: Vec<Vec<String>>,
    header_written: bool,
}

impl TableWriter {
    pub fn new(header: &[&str]) -> TableWriter {
        TableWriter {
            header: header.iter().map(|h| h.to_string()).collect(),
            widths: header.iter().map(|h| h.chars().count()).collect(),
            pending: Vec::new(),
            header_written: false,
        }
    }

    /// Adds a row, its control characters escaped (a producer's newline would forge a row of the table).
    pub fn push(&mut self, out: &mut dyn Write, row: Vec<String>) -> std::io::Result<()> {
        let row = row
            .into_iter()
            .map(|cell| match reports::text::printable(&cell) {
                std::borrow::Cow::Borrowed(_) => cell,
                std::borrow::Cow::Owned(shown) => shown,
            })
            .collect();
        self.pending.push(row);
        if self.pending.len() >= TABLE_CHUNK_ROWS { self.flush(out) } else { Ok(()) }
    }

    /// Prints what is pending, and the header when no row came.
    pub fn finish(mut self, out: &mut dyn Write) -> anyhow::Result<()> {
        Ok(self.flush(out)?)
    }

    fn flush(&mut self, out: &mut dyn Write) -> std::io::Result<()> {
        for row in &self.pending {
            for (width, cell) in self.widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
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
                line.extend(std::iter::repeat_n(' ', width.saturating_sub(cell.chars().count())));
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
