//! One module per subcommand. Exit codes: 0 ok, 1 found discrepancies (verify, reconcile), 2 error.

pub mod audit;
pub mod backup;
pub mod bench;
pub mod broker;
pub mod catalog;
pub mod cluster;
pub mod config;
pub mod demo;
pub mod export;
pub mod generate;
pub mod grant;
pub mod ingest;
pub mod kafka_args;
pub mod manual;
pub mod meter;
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
pub mod usage;
pub mod verify;
pub mod webhook;

use std::io::Write;
use std::process::ExitCode;
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

pub use usecases::Store;

/// A spinner with a message and the elapsed time, for long work on a terminal.
pub fn spinner() -> indicatif::ProgressBar {
    let style = indicatif::ProgressStyle::with_template("{spinner} {msg} [{elapsed}]").expect("a valid template");
    indicatif::ProgressBar::new_spinner().with_style(style)
}

/// Shows the [`Progress`](::generate::Progress) of a benchmark's or the demo's long steps on stderr: a bar in
/// `bar_style` for a step of known length, a spinner otherwise (indicatif draws nothing when stderr is not a
/// terminal); notes as lines.
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
    pub fn show(&self, progress: ::generate::Progress) {
        use ::generate::Progress;
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

/// Prints a value as pretty JSON on stdout (`--json`), or in the words `write` puts it in; exit 0.
pub fn print<T: serde::Serialize + ?Sized>(
    value: &T,
    json: bool,
    write: impl FnOnce(&mut dyn Write, &T) -> std::io::Result<()>,
) -> anyhow::Result<ExitCode> {
    match json {
        true => print_json(value)?,
        false => write(&mut stdout(), value)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints a value as pretty JSON on stdout.
pub fn print_json(value: &(impl serde::Serialize + ?Sized)) -> anyhow::Result<()> {
    // Serialized first, written second: a value that cannot be serialized prints nothing rather than half.
    let mut text = serde_json::to_vec_pretty(value).context("cannot serialize JSON")?;
    text.push(b'\n');
    stdout().write_all(&text)?;
    Ok(())
}

/// Prints rows as a table whose columns are aligned, the header first.
pub fn print_table(header: &[&str], rows: &[Vec<String>]) -> anyhow::Result<()> {
    Ok(reports::text::write_table(&mut stdout(), header, rows)?)
}
