//! `status [--json]`.

use std::io::Write;
use std::process::ExitCode;

use clap::Args;
use ledger::Ledger;

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print JSON: events_recorded, duplicates, conflicts, quarantined, watermark, offsets, ledger_id, head_seq,
    /// head_hash, gaps, misrouted.
    #[arg(long)]
    json: bool,
}

pub fn run(store: &super::Store, args: StatusArgs) -> anyhow::Result<ExitCode> {
    let ledger_path = store.file("status")?;
    let ledger = Ledger::open_read_only(ledger_path)?;
    let status = ledger.status()?;
    if args.json {
        super::print_json(&status)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = super::stdout();
    writeln!(out, "ledger           {}", status.ledger)?;
    writeln!(out, "ledger id        {}", status.ledger_id)?;
    writeln!(out, "head             {}:{}", status.head_seq, status.head_hash)?;
    writeln!(out, "events recorded  {}", status.events_recorded)?;
    writeln!(out, "duplicates       {}", status.duplicates)?;
    writeln!(out, "conflicts        {}", status.conflicts)?;
    writeln!(out, "quarantined      {} ({} not replayed)", status.quarantined, status.quarantine_pending)?;
    writeln!(out, "watermark        {}", status.watermark)?;
    writeln!(out, "batches          {}", status.batches)?;
    if status.outbox_pending > 0 {
        writeln!(out, "outbox pending   {} (published by reconcile or serve with --brokers)", status.outbox_pending)?;
    }
    for (topic, count) in &status.misrouted {
        writeln!(out, "misrouted        {count} of {topic} (read in another tenant's partition, forwarded to theirs)")?;
    }
    if !status.gaps.is_empty() {
        writeln!(out)?;
        let rows: Vec<Vec<String>> = status
            .gaps
            .iter()
            .map(|g| {
                vec![
                    g.topic.clone(),
                    g.partition.to_string(),
                    format!("{}-{}", g.from_offset, g.to_offset),
                    g.accepted_at.clone(),
                ]
            })
            .collect();
        super::write_table(&mut out, &["GAP TOPIC", "PARTITION", "OFFSETS NEVER READ", "ACCEPTED AT"], &rows)?;
    }
    if !status.offsets.is_empty() {
        writeln!(out)?;
        let rows: Vec<Vec<String>> = status
            .offsets
            .iter()
            .map(|o| vec![o.topic.clone(), o.partition.to_string(), o.next_offset.to_string()])
            .collect();
        super::write_table(&mut out, &["TOPIC", "PARTITION", "NEXT OFFSET"], &rows)?;
    }
    Ok(ExitCode::SUCCESS)
}
