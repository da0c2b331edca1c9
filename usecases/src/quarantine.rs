//! Quarantined messages (contract §3): listed, and replayed once the cause is fixed (a schema registered since, a
//! reader that now understands them). A replay records what now decodes and validates, as ingest would have, and
//! leaves the rest quarantined with the reason.

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
