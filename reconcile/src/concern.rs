//! What an adjustment is about, and the delta rule (contract §5 "Adjustments are deltas").
//!
//! Each adjustment concerns one thing: a window of a policy for a tenant and a member of the policy's scope (a
//! subject, project or API key; none for TENANT), a closed period's late
//! usage for a tenant and metric, a reservation, a refused transition, or one conflicting copy of an event.
//! The amounts of a concern's adjustments add up to its current truth; a run writes only the difference, and a
//! concern that is a discrepancy now but was never reported is reported once even when its amount is 0 (a
//! refused RELEASE, a conflicting copy of a decision).

use std::collections::HashMap;

use ledger::{AdjustmentSummary, ReadError};
use schemas::{AdjustmentKind, Header, Scope, Timestamp, Who};
use sha2::{Digest, Sha256};

use crate::inputs::PlanInputs;

/// The `source` of every adjustment reconcile writes.
pub const ADJUSTMENT_SOURCE: &str = "reconcile";

/// The thing one adjustment is about: its identity across runs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Concern {
    /// OVERSHOOT (HARD) or SHADOW_OVER_LIMIT (SHADOW) of one window of a policy.
    #[allow(missing_docs)] // The AdjustmentEvent fields it is written with, by their contract §3 names.
    Window {
        kind: AdjustmentKind,
        policy_id: String,
        /// The policy's scope: a tenant's own SUBJECT policy and the plan's TENANT (or PROJECT) policy may share a
        /// policy_id, the window of what names no member has no member, as a TENANT window, and a subject and a
        /// project may have the same name.
        scope: Scope,
        tenant: String,
        /// The window's member of `scope`: the subject of a SUBJECT window, the project of a PROJECT one, the API key
        /// of an API_KEY one (none for the window of what names none); none for TENANT scope.
        member: Option<String>,
        metric: String,
        window_start: Timestamp,
        window_end: Timestamp,
    },
    /// LATE_USAGE: consumption of a closed period recorded after its close.
    LateUsage {
        /// The tenant.
        tenant: String,
        /// The metric.
        metric: String,
        /// The closed period's first instant.
        period_start: Timestamp,
        /// The first instant after it.
        period_end: Timestamp,
    },
    /// RESERVATION_EXPIRED, named by the RESERVE's event_id.
    Expiry {
        /// The event_id of the reservation's RESERVE.
        reserve_event_id: String,
    },
    /// REFUSED_TRANSITION, named by the refused event's event_id.
    Refused {
        /// The event_id of the refused COMMIT, RELEASE or RESERVE.
        event_id: String,
    },
    /// CONFLICTING_DUPLICATE: the `ordinal`-th conflicting copy (1, 2, ... in ledger order) of `event_id`.
    Conflict {
        /// The event_id the copies share.
        event_id: String,
        /// Which copy, from 1, in ledger order.
        ordinal: u32,
    },
}

impl Concern {
    /// The scope an adjustment of this concern is written with: a window's policy's, none for the other kinds.
    pub fn scope(&self) -> Option<Scope> {
        match self {
            Concern::Window { scope, .. } => Some(*scope),
            _ => None,
        }
    }

    /// The kind of adjustment written for it.
    pub fn kind(&self) -> AdjustmentKind {
        match self {
            Concern::Window { kind, .. } => *kind,
            Concern::LateUsage { .. } => AdjustmentKind::LATE_USAGE,
            Concern::Expiry { .. } => AdjustmentKind::RESERVATION_EXPIRED,
            Concern::Refused { .. } => AdjustmentKind::REFUSED_TRANSITION,
            Concern::Conflict { .. } => AdjustmentKind::CONFLICTING_DUPLICATE,
        }
    }

    /// The tenant of a window's or a closed period's concern; none for the concerns named by an event.
    pub fn tenant(&self) -> Option<&str> {
        match self {
            Concern::Window { tenant, .. } | Concern::LateUsage { tenant, .. } => Some(tenant),
            _ => None,
        }
    }

    /// The window an adjustment of this concern names (`window_start`, `window_end` of contract §3).
    pub fn window(&self) -> Option<(Timestamp, Timestamp)> {
        match self {
            Concern::Window { window_start, window_end, .. } => Some((*window_start, *window_end)),
            Concern::LateUsage { period_start, period_end, .. } => Some((*period_start, *period_end)),
            _ => None,
        }
    }
}

/// What the ledger already holds for a concern: how many adjustments, and the sum of their amounts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recorded {
    /// How many adjustments.
    pub count: u64,
    /// The sum of their amounts.
    pub sum: i64,
}

impl Recorded {
    /// Counts one more adjustment of `amount`.
    pub fn add(&mut self, amount: i64) {
        self.count += 1;
        self.sum = self.sum.checked_add(amount).expect("adjustment sums fit in i64");
    }
}

/// The members an adjustment is written under: its header's subject, project and API key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Members {
    /// The subject (`header.subject`).
    pub subject: Option<String>,
    /// The project (`header.project`).
    pub project: Option<String>,
    /// The API key (`header.api_key`).
    pub api_key: Option<String>,
}

impl Members {
    /// A window's: its member in the field of its scope, the others none (contract §3: the window's subject for a
    /// SUBJECT window, and likewise its project, its API key). Read back, the scope picks the same field
    /// ([`recorded`]), so a rerun finds the concern it wrote.
    pub fn of_window(scope: Scope, member: Option<String>) -> Members {
        match scope {
            Scope::TENANT => Members::default(),
            Scope::SUBJECT => Members { subject: member, ..Members::default() },
            Scope::PROJECT => Members { project: member, ..Members::default() },
            Scope::API_KEY => Members { api_key: member, ..Members::default() },
        }
    }

    /// An event's own, for the concerns about one event (expiry, refused transition, conflicting copy).
    pub fn of_event(header: &Header) -> Members {
        Members { subject: header.subject.clone(), project: header.project.clone(), api_key: header.api_key.clone() }
    }
}

/// The current truth about a concern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truth {
    /// What it is about.
    pub concern: Concern,
    /// What the concern's adjustments must add up to now.
    pub amount: i64,
    /// Whether it is a discrepancy now (reported at least once, whatever its amount).
    pub present: bool,
    /// The tenant the adjustment is written under.
    pub tenant: String,
    /// The subject, project and API key it is written under.
    pub members: Members,
    /// The metric it is written under.
    pub metric: String,
    /// The policy a window concern is judged under.
    pub policy_id: Option<String>,
    /// The events that justify the amount (contract §3 `refs`): for a window, the events that crossed the limit.
    pub refs: Vec<String>,
}

/// The delta a run must write for a concern, if any: `truth - recorded`, or the first report of a discrepancy
/// whose amount is 0.
pub fn delta(truth: &Truth, recorded: Recorded) -> Option<i64> {
    let delta = truth.amount.checked_sub(recorded.sum).expect("adjustment deltas fit in i64");
    (delta != 0 || (truth.present && recorded.count == 0)).then_some(delta)
}

/// A deterministic adjustment id: from the concern, how many adjustments it already has, and the delta. The
/// same ledger and `--as-of` give the same ids; a rerun that finds nothing new writes nothing.
pub fn adjustment_id(concern: &Concern, recorded: Recorded, delta: i64) -> String {
    let mut hasher = Sha256::new();
    // A window's member is hashed under the name `subject`, which ids of TENANT and SUBJECT windows have always
    // hashed: the same concern keeps its id across versions, so a newer binary rerunning a run an older one published
    // (to Kafka, not yet in the ledger) writes the same event, which the ledger takes once.
    let text = format!("{concern:?}").replacen(", member: ", ", subject: ", 1);
    hasher.update(format!("{text}|{}|{delta}", recorded.count).as_bytes());
    let digest = hasher.finalize();
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("adj-{hex}")
}

/// What the recorded adjustments add up to, per concern, and how many adjustments there are.
///
/// A window adjustment's member is its header's field of its scope (the subject of a SUBJECT window's, the project of
/// a PROJECT window's, ...: [`Members::of_window`]). One written before AdjustmentEvent v2 has no scope: one with a
/// subject is a SUBJECT window's, one without takes `legacy_scope(tenant, metric, policy_id)`, the scope of the
/// policies of that id.
pub fn recorded(
    inputs: &impl PlanInputs,
    legacy_scope: &dyn Fn(&str, &str, &str) -> Scope,
) -> Result<(HashMap<Concern, Recorded>, u64), ReadError> {
    let mut conflict_ordinals: HashMap<String, u32> = HashMap::new();
    let mut recorded: HashMap<Concern, Recorded> = HashMap::new();
    let count = inputs.adjustment_summaries(|summary| {
        let amount = summary.amount;
        if let Some(concern) = concern_of(summary, legacy_scope, &mut conflict_ordinals) {
            recorded.entry(concern).or_default().add(amount);
        }
    })?;
    Ok((recorded, count))
}

/// The concern a recorded adjustment is about; none for one that names no window or event it could be about.
fn concern_of(
    summary: AdjustmentSummary,
    legacy_scope: &dyn Fn(&str, &str, &str) -> Scope,
    conflict_ordinals: &mut HashMap<String, u32>,
) -> Option<Concern> {
    let AdjustmentSummary {
        who: Who { tenant, subject, project, api_key },
        metric,
        kind,
        policy_id,
        window_start,
        window_end,
        first_ref,
        scope,
        ..
    } = summary;
    let concern = match (kind, window_start.zip(window_end), first_ref) {
        (AdjustmentKind::OVERSHOOT | AdjustmentKind::SHADOW_OVER_LIMIT, Some((start, end)), _) => {
            let policy_id = policy_id?;
            let scope = match scope {
                Some(scope) => scope,
                None if subject.is_some() => Scope::SUBJECT,
                None => legacy_scope(&tenant, &metric, &policy_id),
            };
            let member = match scope {
                Scope::TENANT => None,
                Scope::SUBJECT => subject,
                Scope::PROJECT => project,
                Scope::API_KEY => api_key,
            };
            Concern::Window { kind, policy_id, scope, tenant, member, metric, window_start: start, window_end: end }
        }
        (AdjustmentKind::LATE_USAGE, Some((start, end)), _) => {
            Concern::LateUsage { tenant, metric, period_start: start, period_end: end }
        }
        (AdjustmentKind::RESERVATION_EXPIRED, _, Some(id)) => Concern::Expiry { reserve_event_id: id },
        (AdjustmentKind::REFUSED_TRANSITION, _, Some(id)) => Concern::Refused { event_id: id },
        (AdjustmentKind::CONFLICTING_DUPLICATE, _, Some(id)) => {
            let ordinal = conflict_ordinals.entry(id.clone()).or_insert(0);
            *ordinal += 1;
            Concern::Conflict { event_id: id, ordinal: *ordinal }
        }
        _ => return None,
    };
    Some(concern)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn truth(amount: i64, present: bool) -> Truth {
        Truth {
            concern: Concern::Refused { event_id: "c-1".into() },
            amount,
            present,
            tenant: "org-1".into(),
            members: Members::default(),
            metric: "tokens".into(),
            policy_id: None,
            refs: vec!["c-1".into()],
        }
    }

    // contract §5 "Adjustments are deltas": only the difference from what is recorded is written.
    #[test]
    fn a_run_writes_only_the_difference() {
        assert_eq!(delta(&truth(30, true), Recorded::default()), Some(30));
        assert_eq!(delta(&truth(30, true), Recorded { count: 1, sum: 30 }), None);
        assert_eq!(delta(&truth(45, true), Recorded { count: 1, sum: 30 }), Some(15));
        assert_eq!(delta(&truth(0, false), Recorded { count: 2, sum: 45 }), Some(-45), "a discrepancy taken back");
        assert_eq!(delta(&truth(0, false), Recorded::default()), None);
    }

    // contract §5 "Reported once each": a discrepancy of amount 0 is reported once, then never again.
    #[test]
    fn a_zero_amount_discrepancy_is_reported_once() {
        assert_eq!(delta(&truth(0, true), Recorded::default()), Some(0));
        assert_eq!(delta(&truth(0, true), Recorded { count: 1, sum: 0 }), None);
    }

    // Proves ids are deterministic and differ with the concern, the count before, and the delta.
    #[test]
    fn adjustment_ids_are_deterministic() {
        let c = Concern::Refused { event_id: "c-1".into() };
        let r = Recorded::default();
        assert_eq!(adjustment_id(&c, r, 5), adjustment_id(&c, r, 5));
        assert_ne!(adjustment_id(&c, r, 5), adjustment_id(&c, r, 6));
        assert_ne!(adjustment_id(&c, r, 5), adjustment_id(&c, Recorded { count: 1, sum: 5 }, 5));
        assert_ne!(adjustment_id(&c, r, 5), adjustment_id(&Concern::Refused { event_id: "c-2".into() }, r, 5));
    }
}
