//! Quarantined messages (contract §3): listed, and replayed once the cause is fixed (a schema registered since, a
//! reader that now understands them). A replay records what now decodes and validates, as ingest would have, and
//! leaves the rest quarantined with the reason. Both in the words the commands print.

use std::io::Write;
use std::path::Path;

use kafka::topics::Topics;
use ledger::{Ledger, Origin, ProcessLock, QuarantinedMessage, ReplayReport};

use crate::Result;

/// The messages quarantined in the ledger at `path`.
pub fn list(path: &Path) -> Result<Vec<QuarantinedMessage>> {
    Ok(Ledger::open_read_only(path)?.quarantined()?)
}

/// Replays the quarantined messages `ids` (every one when empty) of the ledger at `path`, read from `topics` (the
/// input topics ingest used: a topic carries one record type, and a message of another is not recorded by a replay
/// either).
pub fn replay(path: &Path, ids: &[i64], topics: &Topics) -> Result<ReplayReport> {
    if !path.exists() {
        Ledger::open_read_only(path)?;
    }
    // One replay at a time: two read the same candidates, and the second's append was refused by the
    // append-only trigger of quarantine_replays, in words that read like tampering (nothing was lost).
    let _lock = ProcessLock::acquire(path, "replay")?;
    let mut ledger = crate::store::open_for_append(path)?;
    let expected = |origin: &Origin| match origin {
        Origin::Kafka { topic, .. } => topics.event_type(topic).map(Some).ok_or_else(|| {
            format!("topic {topic:?} is not among the input topics {topics}; pass the --topics that ingest used")
        }),
        Origin::File { .. } | Origin::Local { .. } => Ok(None),
    };
    Ok(ledger.replay_quarantined(ids, expected)?)
}

/// The quarantined messages as `quarantine list` prints them: a table, the reasons' control characters escaped.
pub fn write_list(out: &mut dyn Write, messages: &[QuarantinedMessage]) -> std::io::Result<()> {
    let optional = |v: &Option<i64>| v.map(|n| n.to_string()).unwrap_or_default();
    let rows: Vec<Vec<String>> = messages
        .iter()
        .map(|m| {
            let from = [m.topic.clone().unwrap_or_default(), optional(&m.partition), optional(&m.offset)];
            let replayed = m.replayed.as_ref().map_or_else(String::new, |r| format!("{} (entry {})", r.outcome, r.seq));
            let what = [m.raw_bytes.to_string(), m.reason_code.clone(), replayed, m.reason.clone()];
            [m.id.to_string(), m.quarantined_at.clone()].into_iter().chain(from).chain(what).collect()
        })
        .collect();
    let header = ["ID", "QUARANTINED AT", "TOPIC/FILE", "PARTITION", "OFFSET", "BYTES", "CODE", "REPLAYED", "REASON"];
    reports::text::write_table(out, &header, &rows)
}

/// A replay as `quarantine replay` prints it: the counts, then each message still quarantined with its reason.
pub fn write_replay(out: &mut dyn Write, report: &ReplayReport) -> std::io::Result<()> {
    writeln!(
        out,
        "{} quarantined messages replayed: {} recorded, {} duplicates, {} conflicting duplicates, {} still quarantined; \
         watermark {}",
        report.examined,
        report.recorded,
        report.duplicates,
        report.conflicts,
        report.still_quarantined.len(),
        report.watermark
    )?;
    for still in &report.still_quarantined {
        writeln!(out, "  {}  {}  {}", still.id, still.reason_code, reports::text::printable(&still.reason))?;
    }
    Ok(())
}
