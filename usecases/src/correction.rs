//! A usage correction (contract §7, `usage void|amend`): a VOID or an AMEND of a recorded usage event, recorded as a
//! CorrectionEvent in the ledger (or the shard) holding the original, and what it changed, in the line the command
//! prints.

use control::{Corrected, CorrectionChange};
use schemas::{CorrectionAction, Timestamp};

use crate::{Context, Result, Store};

/// Records `change` into `store`, judged against what it holds now; a retry of a correction recorded already answers
/// that one (`replayed`). A refused correction records nothing: `usage not corrected: ` and why.
pub fn correct(store: &Store, change: &CorrectionChange) -> Result<Corrected> {
    let mut ledgers = store.append_all()?;
    control::correct(&mut ledgers, change, Timestamp::now()).context("usage not corrected")
}

/// A correction in a line: what it did to which event, who and why, and where it is recorded.
pub fn words_of(corrected: &Corrected) -> String {
    let event = &corrected.event;
    let what = match event.action {
        CorrectionAction::VOID => "voided".to_string(),
        CorrectionAction::AMEND => format!("amended to {}", event.quantity.unwrap_or(0)),
    };
    let seqs: Vec<String> = corrected.seqs.iter().map(u64::to_string).collect();
    let written = match corrected.replayed {
        true => format!("recorded already at ledger seq {}", seqs.join(", ")),
        false => format!("recorded at ledger seq {}", seqs.join(", ")),
    };
    format!(
        "usage event {} of {} ({}) {what} by {}: {:?}; correction {}; {written}",
        event.original_event_id,
        event.header.tenant,
        event.header.metric,
        event.actor,
        event.reason,
        event.header.event_id
    )
}
