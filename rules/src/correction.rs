//! Usage corrections: whether a CorrectionEvent may apply to the event it names, and what it changes. The ledger
//! judges each correction in the transaction that records it, against what it holds then; the control plane asks
//! the ledger to refuse, and ingest has it quarantined, with the same [`Refusal`].
//!
//! A usage event counts its quantity until it is corrected; then it counts what its latest correction says: 0 after a
//! VOID, the amended quantity after an AMEND. A correction is a delta against what the original counted just before
//! it, so the corrections of one original add up to its current count minus its quantity. A VOID is final; an AMEND
//! may be amended again or voided; a correction of a correction is refused (correct the usage event itself).
//!
//! ```
//! use rules::correction::{Original, judge};
//! use schemas::{CorrectionAction, EventType};
//!
//! let original = Original { event_type: EventType::UsageEvent, tenant: "org-1", metric: "tokens", counted: 120, voided_by: None };
//! let owner = ("org-1", "tokens");
//! assert_eq!(judge(Some(&original), owner, CorrectionAction::AMEND, Some(100), "u-1"), Ok(-20));
//! assert_eq!(judge(None, owner, CorrectionAction::VOID, None, "u-9").unwrap_err().code(), "unknown_original");
//! ```

use schemas::{CorrectionAction, EventType};

/// What a correction's judgement needs of the event it names: the counted entry of that event_id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Original<'a> {
    /// Its record type: only a UsageEvent may be corrected.
    pub event_type: EventType,
    /// Its tenant and metric: a correction repeats them.
    pub tenant: &'a str,
    /// See `tenant`.
    pub metric: &'a str,
    /// What it counts now: its quantity, or what its latest correction says.
    pub counted: i64,
    /// The event_id of the VOID that voided it, when one did.
    pub voided_by: Option<&'a str>,
}

/// Why a correction cannot apply. Each has a stable code: the quarantine's reason code when the correction came
/// through ingest, the `error` of the admin route's problem document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// No counted event of that event_id is recorded (yet: through ingest it is quarantined, and `quarantine replay`
    /// records it once the original is).
    #[error("original_event_id {0:?} is not recorded in this ledger")]
    UnknownOriginal(String),
    /// The event named is a correction.
    #[error(
        "original_event_id {0:?} is a correction: a correction of a correction is refused (correct the usage event it corrects)"
    )]
    CorrectionOfCorrection(String),
    /// The event named is of another type than UsageEvent.
    #[error("original_event_id {id:?} is a {event_type}, not a UsageEvent: only usage is corrected")]
    NotUsage {
        /// The event named.
        id: String,
        /// Its type.
        event_type: &'static str,
    },
    /// The correction's tenant or metric is not the original's: the names, in words (one string, so that a refusal
    /// stays small beside the errors that carry it).
    #[error("{0}")]
    OtherOwner(String),
    /// The original was voided already: a VOID is final.
    #[error("the usage event was voided already by {0:?}: a void is final")]
    AlreadyVoided(String),
    /// An AMEND to what the original counts already.
    #[error("the usage event counts {0} already: an amend to the same amount changes nothing")]
    Unchanged(i64),
}

impl Refusal {
    /// The stable code: a quarantine reason code, the admin route's `error`.
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::UnknownOriginal(_) => "unknown_original",
            Refusal::CorrectionOfCorrection(_) => "correction_of_correction",
            Refusal::NotUsage { .. } => "not_usage",
            Refusal::OtherOwner(_) => "inconsistent_fields",
            Refusal::AlreadyVoided(_) => "already_voided",
            Refusal::Unchanged(_) => "unchanged",
        }
    }
}

/// Every code [`Refusal::code`] answers.
pub const REFUSAL_CODES: &[&str] = &[
    "unknown_original",
    "correction_of_correction",
    "not_usage",
    "inconsistent_fields",
    "already_voided",
    "unchanged",
];

/// Judges a correction of `(tenant, metric)` with `action` (and `quantity`, an AMEND's) against the event its
/// `original_event_id` names (`None`: none is recorded): the delta it adds to the original's count, or why it cannot
/// apply. `quantity` was validated (>= 0 on an AMEND).
pub fn judge(
    original: Option<&Original<'_>>,
    (tenant, metric): (&str, &str),
    action: CorrectionAction,
    quantity: Option<i64>,
    original_event_id: &str,
) -> Result<i64, Refusal> {
    let original = original.ok_or_else(|| Refusal::UnknownOriginal(original_event_id.to_string()))?;
    match original.event_type {
        EventType::UsageEvent => {}
        EventType::CorrectionEvent => return Err(Refusal::CorrectionOfCorrection(original_event_id.to_string())),
        other => return Err(Refusal::NotUsage { id: original_event_id.to_string(), event_type: other.name() }),
    }
    if original.tenant != tenant || original.metric != metric {
        return Err(Refusal::OtherOwner(format!(
            "the correction names tenant {tenant:?} and metric {metric:?}, the original {:?} and {:?}",
            original.tenant, original.metric
        )));
    }
    if let Some(void) = original.voided_by {
        return Err(Refusal::AlreadyVoided(void.to_string()));
    }
    let after = match action {
        CorrectionAction::VOID => 0,
        CorrectionAction::AMEND => quantity.unwrap_or(0),
    };
    if action == CorrectionAction::AMEND && after == original.counted {
        return Err(Refusal::Unchanged(after));
    }
    // Both are at most 2^53 - 1 and at least 0 (validated): the difference cannot overflow.
    Ok(after - original.counted)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(counted: i64, voided_by: Option<&str>) -> Original<'_> {
        Original { event_type: EventType::UsageEvent, tenant: "org-1", metric: "tokens", counted, voided_by }
    }

    const OWNER: (&str, &str) = ("org-1", "tokens");

    // Proves a void takes back what the original counts, and an amend the difference, either way.
    #[test]
    fn a_correction_is_the_difference_to_what_the_original_counts() {
        assert_eq!(judge(Some(&usage(120, None)), OWNER, CorrectionAction::VOID, None, "u-1"), Ok(-120));
        assert_eq!(judge(Some(&usage(120, None)), OWNER, CorrectionAction::AMEND, Some(100), "u-1"), Ok(-20));
        assert_eq!(judge(Some(&usage(100, None)), OWNER, CorrectionAction::AMEND, Some(130), "u-1"), Ok(30));
        assert_eq!(judge(Some(&usage(0, None)), OWNER, CorrectionAction::VOID, None, "u-1"), Ok(0));
    }

    // Proves every refusal and its stable code.
    #[test]
    fn what_cannot_be_corrected_is_refused_with_its_code() {
        let refused = |original: Option<&Original<'_>>, owner, action, quantity| {
            judge(original, owner, action, quantity, "u-1").unwrap_err().code()
        };
        assert_eq!(refused(None, OWNER, CorrectionAction::VOID, None), "unknown_original");
        let correction = Original { event_type: EventType::CorrectionEvent, ..usage(0, None) };
        assert_eq!(refused(Some(&correction), OWNER, CorrectionAction::VOID, None), "correction_of_correction");
        let grant = Original { event_type: EventType::GrantEvent, ..usage(0, None) };
        assert_eq!(refused(Some(&grant), OWNER, CorrectionAction::VOID, None), "not_usage");
        assert_eq!(
            refused(Some(&usage(5, None)), ("org-2", "tokens"), CorrectionAction::VOID, None),
            "inconsistent_fields"
        );
        assert_eq!(refused(Some(&usage(0, Some("c-1"))), OWNER, CorrectionAction::AMEND, Some(3)), "already_voided");
        assert_eq!(refused(Some(&usage(5, None)), OWNER, CorrectionAction::AMEND, Some(5)), "unchanged");
        for code in [
            "unknown_original",
            "correction_of_correction",
            "not_usage",
            "inconsistent_fields",
            "already_voided",
            "unchanged",
        ] {
            assert!(REFUSAL_CODES.contains(&code));
        }
    }
}
