//! A meter change (contract §7, `meter set`): a new version of how a tenant's (or every tenant's, `*`) metric
//! aggregates, turned into the MeterEvent that records it with the next version, or refused: pure, as a policy change.

use schemas::{Aggregation, Event, Header, MeterEvent, MeterField, Timestamp};

use crate::record::Recorded;
use crate::refused::Refused;

/// A meter version asked for: of which metric, how it aggregates, from when, who and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeterChange {
    /// The tenant, or `*` for every tenant without a meter of its own for the metric.
    pub tenant: String,
    /// The metric.
    pub metric: String,
    /// How its usage aggregates.
    pub aggregation: Aggregation,
    /// UNIQUE_COUNT: the field whose distinct values are counted.
    pub field: Option<MeterField>,
    /// The version; the next after the last recorded when none is given.
    pub version: Option<i32>,
    /// From when (windows starting at or after it); now when none is given.
    pub effective_from: Option<Timestamp>,
    /// Who makes it.
    pub actor: String,
    /// Why, for people.
    pub reason: String,
    /// The producing service recorded in the event's `source`.
    pub source: String,
}

/// The MeterEvent that records `change` at `now`, or why it is refused: a version not above the last recorded of the
/// tenant's metric, an effective_from in a closed period (its bill never changes), or a field out of the contract's
/// bounds (a UNIQUE_COUNT without its field, a field on another aggregation).
pub fn meter_event(change: &MeterChange, recorded: &Recorded, now: Timestamp) -> Result<MeterEvent, Refused> {
    let meter_id = format!("meter {}:{}", change.tenant, change.metric);
    let last = recorded.last_meter_version(&change.tenant, &change.metric);
    let version = match (change.version, last) {
        (Some(version), Some(last)) if version <= last => {
            return Err(Refused::VersionNotAbove { policy_id: meter_id, version, last });
        }
        (Some(version), _) => version,
        (None, None) => 1,
        (None, Some(last)) => last.checked_add(1).ok_or(Refused::VersionsExhausted { policy_id: meter_id })?,
    };
    let effective_from = change.effective_from.unwrap_or(now);
    recorded.check_after_close("effective_from", effective_from)?;
    let header = Header {
        event_id: schemas::ids::join(&["meter", &change.tenant, &change.metric, &format!("v{version}")]),
        occurred_at: now,
        tenant: change.tenant.clone(),
        subject: None,
        project: None,
        api_key: None,
        metric: change.metric.clone(),
        source: change.source.clone(),
    };
    let event = Event::Meter(MeterEvent {
        header,
        version,
        aggregation: change.aggregation,
        field: change.field,
        effective_from,
        actor: change.actor.clone(),
        reason: change.reason.clone(),
    });
    schemas::validate(&event)?;
    let Event::Meter(event) = event else { unreachable!("built as a meter") };
    Ok(event)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change() -> MeterChange {
        MeterChange {
            tenant: "acme".into(),
            metric: "seats".into(),
            aggregation: Aggregation::UNIQUE_COUNT,
            field: Some(MeterField::SUBJECT),
            version: None,
            effective_from: None,
            actor: "alice".into(),
            reason: "seats are billed".into(),
            source: "test".into(),
        }
    }

    // Proves the first version is 1, the next follows the last recorded, and a version not above it is refused.
    #[test]
    fn versions_grow_per_tenant_and_metric() {
        let now = Timestamp::parse_rfc3339("2026-12-04T10:00:00Z").unwrap();
        let first = meter_event(&change(), &Recorded::default(), now).unwrap();
        assert_eq!((first.version, first.effective_from), (1, now));
        let recorded = Recorded::default().with_meters(vec![first]);
        assert_eq!(meter_event(&change(), &recorded, now).unwrap().version, 2);
        let stale = MeterChange { version: Some(1), ..change() };
        assert!(matches!(meter_event(&stale, &recorded, now), Err(Refused::VersionNotAbove { last: 1, .. })));
    }

    // Proves a UNIQUE_COUNT names its field and no other aggregation does.
    #[test]
    fn a_unique_count_names_its_field_and_only_it() {
        let now = Timestamp::parse_rfc3339("2026-12-04T10:00:00Z").unwrap();
        let refused_field = |change: &MeterChange| match meter_event(change, &Recorded::default(), now) {
            Err(Refused::Invalid(schemas::Invalid::Inconsistent { field, .. })) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(refused_field(&MeterChange { field: None, ..change() }), "field");
        assert_eq!(refused_field(&MeterChange { aggregation: Aggregation::MAX, ..change() }), "field");
        let max = MeterChange { aggregation: Aggregation::MAX, field: None, ..change() };
        assert!(meter_event(&max, &Recorded::default(), now).is_ok());
    }
}
