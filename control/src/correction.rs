//! A usage correction (contract §7, `usage void|amend`): a VOID or an AMEND of a recorded usage event, turned into the
//! CorrectionEvent that records it. The event repeats the original's tenant, members and metric, so it lives in the
//! original's shard and counts where the original counts; whether it still applies (the original voided already, an
//! amend to the same amount) is judged by the ledger in the append that records it ([`rules::correction`]).

use ledger::{Ledger, ReadError};
use rules::correction::Refusal;
use schemas::{CorrectionAction, CorrectionEvent, Event, Header, Timestamp};

use crate::record::{RecordError, record};
use crate::refused::Refused;

/// A correction recorded, or found recorded already (a retry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corrected {
    /// The correction, as recorded (a retry's: the first copy's).
    pub event: CorrectionEvent,
    /// The ledger sequence number of each copy (one: the original's ledger or shard).
    pub seqs: Vec<u64>,
    /// Whether it was recorded already under its event_id: nothing was written.
    pub replayed: bool,
}

/// Why a correction was not recorded; nothing was written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CorrectError {
    /// It would be invalid, or cannot apply to the event it names.
    #[error("{0}")]
    Refused(#[from] Refused),
    /// Its event_id holds another event (or another correction) already.
    #[error("event_id {event_id:?} is recorded already as another event (entry {seq}): give the correction another id")]
    IdTaken {
        /// The correction's event_id.
        event_id: String,
        /// The entry holding it.
        seq: u64,
    },
    /// The ledger could not be read.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// The append failed.
    #[error(transparent)]
    Record(RecordError),
}

/// Records `change` at `now` into the ledger (or the shard) holding its original: a retry of a correction recorded
/// already under the same event_id (the same original, action and quantity) answers that one, writing nothing.
pub fn correct(ledgers: &mut [Ledger], change: &CorrectionChange, now: Timestamp) -> Result<Corrected, CorrectError> {
    let original = first_entry(ledgers, &change.original_event_id)?
        .map(|(_, event)| event)
        .filter(|event| change.tenant.as_ref().is_none_or(|tenant| event.header().tenant == *tenant));
    let event = correction_event(change, original.as_ref(), now)?;
    if let Some((seq, recorded)) = first_entry(ledgers, &event.header.event_id)? {
        return match recorded {
            Event::Correction(recorded) if is_same_correction(&Event::Correction(recorded.clone()), &event) => {
                Ok(Corrected { event: recorded, seqs: vec![seq], replayed: true })
            }
            _ => Err(CorrectError::IdTaken { event_id: event.header.event_id, seq }),
        };
    }
    let seqs = record(ledgers, &Event::Correction(event.clone())).map_err(|e| match e {
        RecordError::Refused(refusal) => CorrectError::Refused(Refused::Correction(refusal)),
        other => CorrectError::Record(other),
    })?;
    Ok(Corrected { event, seqs, replayed: false })
}

/// The first entry of `event_id` in `ledgers` (a tenant's events live in one shard).
fn first_entry(ledgers: &[Ledger], event_id: &str) -> Result<Option<(u64, Event)>, ReadError> {
    for ledger in ledgers {
        if let Some(found) = ledger.recorded_entry(event_id)? {
            return Ok(Some(found));
        }
    }
    Ok(None)
}

/// A correction asked for: of which usage event, what, who and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorrectionChange {
    /// The event_id of the usage event corrected.
    pub original_event_id: String,
    /// The tenant the caller may correct, when it may not correct every tenant's (an admin token of one tenant): an
    /// event of another tenant is answered as not recorded, as if this were the tenant's own ledger.
    pub tenant: Option<String>,
    /// VOID or AMEND.
    pub action: CorrectionAction,
    /// AMEND: what the original counts from now on.
    pub quantity: Option<i64>,
    /// The correction's own event_id (its idempotency key); derived from the original, the action and the quantity
    /// when none is given.
    pub correction_id: Option<String>,
    /// Who makes it.
    pub actor: String,
    /// Why, for people.
    pub reason: String,
    /// The producing service recorded in the event's `source`.
    pub source: String,
}

/// The event_id of a correction that names none: `correction/TENANT/ORIGINAL/void` or `.../amend-QUANTITY`, its parts
/// joined by [`schemas::ids::join`]. Deterministic, so that the same correction asked twice (a retry after a timeout)
/// is one correction.
pub fn default_correction_id(tenant: &str, change: &CorrectionChange) -> String {
    let what = match (change.action, change.quantity) {
        (CorrectionAction::AMEND, Some(quantity)) => format!("amend-{quantity}"),
        (action, _) => action.symbol().to_lowercase(),
    };
    schemas::ids::join(&["correction", tenant, &change.original_event_id, &what])
}

/// The CorrectionEvent that records `change` at `now`, given the event its original id names in the ledger (`None`:
/// none), or why it is refused: no such event, a correction (a correction of a correction is refused), another type
/// than usage, or a field out of the contract's bounds.
pub fn correction_event(
    change: &CorrectionChange,
    original: Option<&Event>,
    now: Timestamp,
) -> Result<CorrectionEvent, Refused> {
    let id = &change.original_event_id;
    let usage = match original {
        None => return Err(Refusal::UnknownOriginal(id.clone()).into()),
        Some(Event::Usage(usage)) => usage,
        Some(Event::Correction(_)) => return Err(Refusal::CorrectionOfCorrection(id.clone()).into()),
        Some(other) => {
            return Err(Refusal::NotUsage { id: id.clone(), event_type: other.event_type().name() }.into());
        }
    };
    let original = &usage.header;
    let event_id = change.correction_id.clone().unwrap_or_else(|| default_correction_id(&original.tenant, change));
    let header = Header { event_id, occurred_at: now, source: change.source.clone(), ..original.clone() };
    let event = Event::Correction(CorrectionEvent {
        header,
        original_event_id: id.clone(),
        action: change.action,
        quantity: change.quantity,
        actor: change.actor.clone(),
        reason: change.reason.clone(),
    });
    schemas::validate(&event)?;
    let Event::Correction(event) = event else { unreachable!("built as a correction") };
    Ok(event)
}

/// Whether `recorded`, an event already holding the correction's event_id, is that same correction (a retry): the
/// same original, action and quantity.
pub fn is_same_correction(recorded: &Event, event: &CorrectionEvent) -> bool {
    matches!(recorded, Event::Correction(c)
        if c.original_event_id == event.original_event_id && c.action == event.action && c.quantity == event.quantity)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(action: CorrectionAction, quantity: Option<i64>) -> CorrectionChange {
        CorrectionChange {
            original_event_id: "u/1".into(),
            tenant: None,
            action,
            quantity,
            correction_id: None,
            actor: "carol".into(),
            reason: "double-counted".into(),
            source: "test".into(),
        }
    }

    fn usage(json_rest: &str) -> Event {
        let json = format!(
            r#"{{"event_id":"u/1","occurred_at":"2026-11-02T10:00:00Z","tenant":"org-1","subject":"ann","project":"p-1","metric":"tokens","source":"gw"{json_rest}}}"#
        );
        Event::from_json(schemas::EventType::UsageEvent, &json).unwrap()
    }

    fn now() -> Timestamp {
        Timestamp::parse_rfc3339("2026-12-03T09:00:00Z").unwrap()
    }

    // Proves a correction repeats the original's owner and members, is dated now and gets a deterministic id.
    #[test]
    fn a_correction_repeats_the_original_and_is_dated_now() {
        let original = usage(r#","quantity":120"#);
        let event = correction_event(&change(CorrectionAction::AMEND, Some(100)), Some(&original), now()).unwrap();
        assert_eq!(event.header.event_id, "correction/org-1/u%2F1/amend-100");
        assert_eq!((event.header.tenant.as_str(), event.header.metric.as_str()), ("org-1", "tokens"));
        assert_eq!((event.header.subject.as_deref(), event.header.project.as_deref()), (Some("ann"), Some("p-1")));
        assert_eq!(event.header.occurred_at, now());
        let void = correction_event(&change(CorrectionAction::VOID, None), Some(&original), now()).unwrap();
        assert_eq!(void.header.event_id, "correction/org-1/u%2F1/void");
        assert!(is_same_correction(&Event::Correction(void.clone()), &void));
        assert!(!is_same_correction(&Event::Correction(void), &event));
    }

    // Proves an unknown original, a correction of a correction and bad fields are refused with what is wrong.
    #[test]
    fn what_cannot_be_a_correction_is_refused() {
        let void = change(CorrectionAction::VOID, None);
        let refused = correction_event(&void, None, now()).unwrap_err().to_string();
        assert_eq!(refused, "original_event_id \"u/1\" is not recorded in this ledger");
        let original = usage(r#","quantity":120"#);
        let correction = Event::Correction(correction_event(&void, Some(&original), now()).unwrap());
        let refused = correction_event(&void, Some(&correction), now()).unwrap_err().to_string();
        assert!(refused.contains("a correction of a correction is refused"), "{refused}");
        let negative = change(CorrectionAction::AMEND, Some(-1));
        let refused = correction_event(&negative, Some(&original), now()).unwrap_err().to_string();
        assert_eq!(refused, "quantity is -1, must be at least 0");
        let mut anonymous = void.clone();
        anonymous.actor = String::new();
        assert_eq!(correction_event(&anonymous, Some(&original), now()).unwrap_err().to_string(), "actor is empty");
    }
}
