//! Audit answers for support (contract §1): `audit why REQUEST_ID` ([`why`]) and `audit tenant` ([`tenant`]), each a
//! few of the ledger's typed reads at one watermark, then words a support engineer can paste ([`render`]) or JSON.

pub mod render;
pub mod tenant;
pub mod why;

use ledger::CorrectionRecord;
use schemas::Timestamp;
use serde::Serialize;

use crate::error::ReportError;

/// A correction of a usage event (contract §3 `CorrectionEvent`), as `audit why` and `audit tenant` show it: what it
/// changed, who made it and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CorrectionLine {
    /// Its ledger sequence number.
    pub seq: u64,
    /// Its own event_id.
    pub event_id: String,
    /// When it was made.
    pub corrected_at: Timestamp,
    /// The usage event it corrects.
    pub original_event_id: String,
    /// The original's event time: the month and windows the change counts in.
    pub original_occurred_at: Timestamp,
    /// The original's metric.
    pub metric: String,
    /// VOID or AMEND.
    pub action: String,
    /// What the original counted before it, and after.
    pub quantity_before: i64,
    /// See `quantity_before`.
    pub quantity_after: i64,
    /// The difference, added where the original counts.
    pub delta: i64,
    /// Who made it.
    pub actor: String,
    /// Why.
    pub reason: String,
}

impl From<CorrectionRecord> for CorrectionLine {
    fn from(c: CorrectionRecord) -> CorrectionLine {
        CorrectionLine {
            seq: c.seq,
            event_id: c.event_id,
            corrected_at: c.corrected_at,
            original_event_id: c.original_event_id,
            original_occurred_at: c.original_occurred_at,
            metric: c.metric,
            action: c.action,
            quantity_before: c.quantity_before,
            quantity_after: c.quantity_after,
            delta: c.delta,
            actor: c.actor,
            reason: c.reason,
        }
    }
}

/// Nearest names (request ids, tenants) offered for an unknown one.
pub const NEAREST_SHOWN: usize = 5;

/// The names of `offered` nearest to `wanted`, as [`nearest`] ranks them: how a read across a cluster ranks again the
/// nearest names each shard answered.
pub fn nearest_among(wanted: &str, offered: &[String]) -> Vec<String> {
    nearest(wanted, |offer| {
        offered.iter().for_each(|name| offer(name));
        Ok(())
    })
    .expect("names offered from memory cannot fail")
}

/// The names `known` offers (every known request id, every tenant) nearest to `wanted`, nearest first, at most
/// [`NEAREST_SHOWN`]: those within an edit distance of a third of its length (at least 2), or that contain it.
/// Compared without case, so that `REQ-DEMO-1-1` finds `req-demo-1-1` (ids are typed by hand, read over the phone).
fn nearest(
    wanted: &str,
    known: impl FnOnce(&mut dyn FnMut(&str)) -> Result<(), ReportError>,
) -> Result<Vec<String>, ReportError> {
    let wanted_folded = wanted.to_lowercase();
    let budget = (wanted_folded.chars().count() / 3).max(2);
    let mut candidates = Candidates::new(NEAREST_SHOWN);
    known(&mut |name: &str| {
        let known_folded = name.to_lowercase();
        let distance = edit_distance(&wanted_folded, &known_folded);
        if distance <= budget || known_folded.contains(&wanted_folded) {
            candidates.offer(distance, name.to_string());
        }
    })?;
    Ok(candidates.into_sorted())
}

/// The `limit` best (smallest distance, then alphabetical) distinct candidates offered.
struct Candidates {
    limit: usize,
    best: Vec<(usize, String)>,
}

impl Candidates {
    fn new(limit: usize) -> Candidates {
        Candidates { limit, best: Vec::new() }
    }

    fn offer(&mut self, distance: usize, name: String) {
        if self.best.iter().any(|(_, n)| *n == name) {
            return;
        }
        self.best.push((distance, name));
        self.best.sort();
        self.best.truncate(self.limit);
    }

    fn into_sorted(self) -> Vec<String> {
        self.best.into_iter().map(|(_, n)| n).collect()
    }
}

/// Levenshtein distance over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        previous = current;
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves the nearest candidates are the closest by edit distance, distinct, at most the limit.
    #[test]
    fn nearest_candidates_by_edit_distance() {
        assert_eq!(edit_distance("req-81f3", "req-81f3"), 0);
        assert_eq!(edit_distance("req-81f3", "req-81f4"), 1);
        assert_eq!(edit_distance("req-81f3", "req-8f3"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        let mut c = Candidates::new(2);
        for (d, n) in [(3, "c"), (1, "b"), (1, "a"), (1, "a"), (2, "d")] {
            c.offer(d, n.to_string());
        }
        assert_eq!(c.into_sorted(), ["a", "b"]);
    }
}
