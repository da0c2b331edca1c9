//! Policies and grants recorded after a month they change was closed. A closed month's bill never changes (contract
//! §5 "Closing a period", §9.5): a raise granted for October but recorded after October's close does not lower
//! October's overage. Reconcile lists each such event, and the closed months it would have changed, so that finance
//! can settle them by hand (a credit note, a corrected invoice); they are not adjustments and change no exit code.

use std::collections::HashSet;

use ledger::{Ledger, Period, PeriodClose, ReadError};
use schemas::Timestamp;
use serde::Serialize;

/// A policy version or a grant recorded after the close of a month it changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AfterClose {
    /// `policy` or `grant`.
    pub kind: &'static str,
    /// The event's event_id.
    pub event_id: String,
    /// Its tenant (`*` for a plan default).
    pub tenant: String,
    /// Its metric.
    pub metric: String,
    /// Its policy_id or grant_id.
    pub id: String,
    /// The policy's version; none for a grant.
    pub version: Option<i32>,
    /// The first closed month it changes.
    pub from_period: Period,
    /// The last closed month it changes.
    pub to_period: Period,
}

/// Every policy version and grant recorded after the close of a month it would change, in ledger order (policies
/// first). A policy version changes every month from the one containing its `effective_from` on; a grant every
/// month its `[valid_from, valid_until)` overlaps.
pub fn after_close(ledger: &Ledger) -> Result<Vec<AfterClose>, ReadError> {
    let mut closes = ledger.period_closes()?;
    if closes.is_empty() {
        return Ok(Vec::new());
    }
    closes.sort_by_key(|close| close.period);
    let recorded = Recorded::read(ledger, &closes)?;
    let mut found = Vec::new();
    for policy in ledger.policies()? {
        let first = Period::containing(policy.effective_from);
        if let Some((from_period, to_period)) = recorded.late_months(&policy.header.event_id, first, None) {
            found.push(AfterClose {
                kind: "policy",
                event_id: policy.header.event_id.clone(),
                tenant: policy.header.tenant.clone(),
                metric: policy.header.metric.clone(),
                id: policy.policy_id.clone(),
                version: Some(policy.version),
                from_period,
                to_period,
            });
        }
    }
    let mut grants: Vec<_> = ledger.grants()?.into_values().flatten().collect();
    grants.sort_by(|a, b| a.header.event_id.cmp(&b.header.event_id));
    for grant in grants {
        let first = Period::containing(grant.valid_from);
        let last = Period::containing(Timestamp(grant.valid_until.micros().saturating_sub(1)));
        if let Some((from_period, to_period)) = recorded.late_months(&grant.header.event_id, first, Some(last)) {
            found.push(AfterClose {
                kind: "grant",
                event_id: grant.header.event_id.clone(),
                tenant: grant.header.tenant.clone(),
                metric: grant.header.metric.clone(),
                id: grant.grant_id.clone(),
                version: None,
                from_period,
                to_period,
            });
        }
    }
    Ok(found)
}

/// Which policy and grant events each close saw: the event_ids recorded up to its watermark.
struct Recorded<'c> {
    closes: &'c [PeriodClose],
    seen: Vec<HashSet<String>>,
}

impl<'c> Recorded<'c> {
    fn read(ledger: &Ledger, closes: &'c [PeriodClose]) -> Result<Recorded<'c>, ReadError> {
        let seen = closes
            .iter()
            .map(|close| {
                let policies = ledger.policies_through(close.watermark)?.into_iter().map(|p| p.header.event_id);
                let grants = ledger.grants_through(close.watermark)?.into_values().flatten().map(|g| g.header.event_id);
                Ok(policies.chain(grants).collect())
            })
            .collect::<Result<_, ReadError>>()?;
        Ok(Recorded { closes, seen })
    }

    /// The closed months from `first` to `last` (open-ended: to the last month closed) whose close did not see
    /// `event_id`. Closes go in order and each sees what the one before saw, so those months are the ones up to the
    /// last close that missed it; the months before the first close are closed with it.
    fn late_months(&self, event_id: &str, first: Period, last: Option<Period>) -> Option<(Period, Period)> {
        let missed_by = self.closes.iter().zip(&self.seen).rfind(|(_, seen)| !seen.contains(event_id))?;
        let to = last.map_or(missed_by.0.period, |last| last.min(missed_by.0.period));
        (first <= to).then_some((first, to))
    }
}
