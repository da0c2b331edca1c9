//! `status [--json]`.

use std::path::Path;
use std::process::ExitCode;

use clap::Args;
use ledger::Ledger;

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print JSON: events_recorded, duplicates, conflicts, quarantined, watermark, offsets.
    #[arg(long)]
    json: bool,
}

pub fn run(ledger_path: &Path, args: StatusArgs) -> anyhow::Result<ExitCode> {
    let ledger = Ledger::open_read_only(ledger_path)?;
    let status = ledger.status()?;
    if args.json {
        super::print_json(&status)?;
        return Ok(ExitCode::SUCCESS);
    }
    println!("ledger           {}", status.ledger);
    println!("events recorded  {}", status.events_recorded);
    println!("duplicates       {}", status.duplicates);
    println!("conflicts        {}", status.conflicts);
    println!("quarantined      {}", status.quarantined);
    println!("watermark        {}", status.watermark);
    println!("batches          {}", status.batches);
    if status.outbox_pending > 0 {
        println!("outbox pending   {} (published by reconcile or serve with --brokers)", status.outbox_pending);
    }
    if !status.offsets.is_empty() {
        println!();
        let rows: Vec<Vec<String>> = status
            .offsets
            .iter()
            .map(|o| vec![o.topic.clone(), o.partition.to_string(), o.next_offset.to_string()])
            .collect();
        super::print_table(&["TOPIC", "PARTITION", "NEXT OFFSET"], &rows)?;
    }
    Ok(ExitCode::SUCCESS)
}
