//! `quarantine list [--json]`.

use std::path::Path;
use std::process::ExitCode;

use clap::Subcommand;
use ledger::Ledger;

#[derive(Debug, Subcommand)]
pub enum QuarantineCommand {
    /// Every quarantined message: where it came from, why, and (in JSON) its bytes.
    List {
        /// Print JSON, with the raw bytes in hexadecimal.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(ledger_path: &Path, command: QuarantineCommand) -> anyhow::Result<ExitCode> {
    let QuarantineCommand::List { json } = command;
    let ledger = Ledger::open_read_only(ledger_path)?;
    let messages = ledger.quarantined()?;
    if json {
        super::print_json(&messages)?;
        return Ok(ExitCode::SUCCESS);
    }
    let optional = |v: &Option<i64>| v.map(|n| n.to_string()).unwrap_or_default();
    let rows: Vec<Vec<String>> = messages
        .iter()
        .map(|m| {
            vec![
                m.id.to_string(),
                m.quarantined_at.clone(),
                m.topic.clone().unwrap_or_default(),
                optional(&m.partition),
                optional(&m.offset),
                m.raw_bytes.to_string(),
                m.reason_code.clone(),
                m.reason.clone(),
            ]
        })
        .collect();
    super::print_table(
        &["ID", "QUARANTINED AT", "TOPIC/FILE", "PARTITION", "OFFSET", "BYTES", "CODE", "REASON"],
        &rows,
    )?;
    Ok(ExitCode::SUCCESS)
}
