//! `verify`: exit 0 when the chain holds, 1 naming the first bad entry.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use clap::Args;
use ledger::Ledger;

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(ledger_path: &Path, args: VerifyArgs) -> anyhow::Result<ExitCode> {
    let ledger = Ledger::open_read_only(ledger_path)?;
    let report = ledger.verify()?;
    if args.json {
        super::print_json(&report)?;
    }
    match &report.first_bad {
        None => {
            if !args.json {
                writeln!(
                    super::stdout(),
                    "ok: {} entries, chain holds up to watermark {}",
                    report.entries_checked,
                    report.watermark
                )?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Some(bad) => {
            let event = if bad.event_id.is_empty() { String::new() } else { format!(" (event_id {})", bad.event_id) };
            eprintln!("verify: entry {}{event} does not hold: {}", bad.seq, bad.problem);
            eprintln!("verify: {} entries before it hold", report.entries_checked);
            Ok(ExitCode::from(super::EXIT_DISCREPANCIES))
        }
    }
}
