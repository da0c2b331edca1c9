//! One module per subcommand. Exit codes: 0 ok, 1 found discrepancies (verify, reconcile), 2 error.

pub mod audit;
pub mod bench;
pub mod bench_export;
pub mod bench_hook;
pub mod bench_reconcile;
pub mod broker;
pub mod demo;
pub mod export;
pub mod generate;
pub mod ingest;
pub mod kafka_args;
pub mod produce;
pub mod quarantine;
pub mod reconcile;
pub mod schemas;
pub mod serve;
pub mod sql;
pub mod status;
pub mod topics;
pub mod verify;

use std::io::Write;

use anyhow::Context;

/// Exit code of a command that found discrepancies (a broken chain, adjustments to make).
pub const EXIT_DISCREPANCIES: u8 = 1;
/// Exit code of a command that failed.
pub const EXIT_ERROR: u8 = 2;

/// Whether an error is a closed stdout (`quota-ledger status | head`): not a failure, as in ripgrep.
pub fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error
        .chain()
        .any(|cause| cause.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe))
}

/// Opens a ledger for appending, with the reports' commit totals kept inside every append's transaction (an
/// export then judges only reservations touched since; without the hook the next export catches up).
pub fn open_for_append(path: &std::path::Path) -> anyhow::Result<ledger::Ledger> {
    let mut ledger = ledger::Ledger::open(path)?;
    ledger.set_append_hook(Box::new(reports::commit_totals::CommitTotalsHook));
    Ok(ledger)
}

/// A spinner with a message and the elapsed time, for long work on a terminal.
pub fn spinner() -> indicatif::ProgressBar {
    let style = indicatif::ProgressStyle::with_template("{spinner} {msg} [{elapsed}]").expect("a valid template");
    indicatif::ProgressBar::new_spinner().with_style(style)
}

/// Prints a value as pretty JSON on stdout.
pub fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    // Serialized first, written second: a serde_json::Error hides the io::Error it wraps from `source()`, so a
    // broken pipe met while serializing into stdout would not be seen by `is_broken_pipe` and would exit 2.
    let mut text = serde_json::to_vec_pretty(value).context("cannot serialize JSON")?;
    text.push(b'\n');
    std::io::stdout().lock().write_all(&text)?;
    Ok(())
}

/// Prints rows as a table whose columns are aligned, the header first.
pub fn print_table(header: &[&str], rows: &[Vec<String>]) -> anyhow::Result<()> {
    write_table(&mut std::io::stdout().lock(), header, rows)
}

/// Writes rows as a table whose columns are aligned, the header first.
pub fn write_table(out: &mut dyn Write, header: &[&str], rows: &[Vec<String>]) -> anyhow::Result<()> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| -> String {
        let cells: Vec<String> = cells.zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        cells.join("  ").trim_end().to_string()
    };
    writeln!(out, "{}", line(&mut header.iter().copied()))?;
    for row in rows {
        writeln!(out, "{}", line(&mut row.iter().map(String::as_str)))?;
    }
    Ok(())
}
