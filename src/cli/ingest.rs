//! `ingest --file F.avro`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use ingest::file::{FILE_BATCH_EVENTS, ingest_file};
use ledger::Ledger;

#[derive(Debug, Args)]
pub struct IngestArgs {
    /// An Avro object container file of any record type (backfill); its writer schema is resolved to the
    /// current reader schema.
    #[arg(long)]
    file: PathBuf,
    /// Records per ledger transaction.
    #[arg(long, default_value_t = FILE_BATCH_EVENTS)]
    batch_events: usize,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(ledger_path: &Path, args: IngestArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(args.batch_events > 0, "--batch-events must be at least 1");
    let mut ledger = Ledger::open(ledger_path)?;
    let progress = ProgressBar::new_spinner()
        .with_style(ProgressStyle::with_template("{spinner} {msg} [{elapsed}]").expect("a valid template"));
    let report = ingest_file(&mut ledger, &args.file, args.batch_events, |so_far| {
        progress.set_message(format!("{} records read, {} recorded", so_far.records, so_far.recorded));
        progress.tick();
    })
    .with_context(|| format!("ingest of {} stopped", args.file.display()))?;
    progress.finish_and_clear();
    if args.json {
        super::print_json(&report)?;
    } else {
        println!(
            "{}: {} {} records: {} recorded, {} duplicates, {} conflicting duplicates, {} quarantined; watermark {}",
            report.file,
            report.records,
            report.record_type,
            report.recorded,
            report.duplicates,
            report.conflicts,
            report.quarantined,
            report.watermark
        );
    }
    Ok(ExitCode::SUCCESS)
}
