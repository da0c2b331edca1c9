//! A tenant assigned to a named plan (`plan assign`): judged against what the ledger holds (the plan has policies, the
//! instant is after the last close) into the PlanAssignmentEvent that records it, as a pure function.

use schemas::partition::plan_owner;
use schemas::{Event, Header, PlanAssignmentEvent, Timestamp};

use crate::record::Recorded;
use crate::refused::Refused;

/// A tenant assigned to a plan from an instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanAssignment {
    /// The tenant.
    pub tenant: String,
    /// The plan's name; none: back to the plan defaults alone.
    pub plan: Option<String>,
    /// From when (default: now).
    pub effective_from: Option<Timestamp>,
    /// Who assigns it.
    pub actor: String,
    /// Why.
    pub reason: String,
    /// The event's source (`quota-ledger plan assign`).
    pub source: String,
}

/// The PlanAssignmentEvent that records `change`, at `now`, or why it would be invalid: a plan with no policy recorded
/// (a name mistyped would leave the tenant on the plan defaults without a word), an instant before the end of the last
/// closed period (a closed bill never changes), a name, actor or reason the contract refuses.
pub fn plan_assignment_event(
    change: &PlanAssignment,
    recorded: &Recorded,
    now: Timestamp,
) -> Result<PlanAssignmentEvent, Refused> {
    let effective_from = change.effective_from.unwrap_or(now);
    recorded.check_after_close("effective_from", effective_from)?;
    if let Some(plan) = &change.plan {
        let owner = plan_owner(plan);
        if !recorded.policies().iter().any(|p| p.header.tenant == owner) {
            return Err(Refused::UnknownPlan { plan: plan.clone() });
        }
    }
    let header = Header {
        event_id: schemas::ids::join(&["plan-assignment", &change.tenant, &now.micros().to_string()]),
        occurred_at: now,
        tenant: change.tenant.clone(),
        subject: None,
        metric: "*".into(),
        source: change.source.clone(),
        api_key: None,
        project: None,
    };
    let event = Event::PlanAssignment(PlanAssignmentEvent {
        header,
        plan: change.plan.clone(),
        effective_from,
        actor: change.actor.clone(),
        reason: change.reason.clone(),
    });
    schemas::validate(&event)?;
    let Event::PlanAssignment(event) = event else { unreachable!("built as an assignment") };
    Ok(event)
}

#[cfg(test)]
mod tests {
    use schemas::{Enforcement, PolicyEvent, Window};
    use testkit::fixtures::{at, header};

    use super::*;

    fn change(plan: Option<&str>) -> PlanAssignment {
        PlanAssignment {
            tenant: "org-1".into(),
            plan: plan.map(str::to_string),
            effective_from: Some(at("2026-11-20T00:00:00Z")),
            actor: "ops@example.com".into(),
            reason: "upgraded".into(),
            source: "test".into(),
        }
    }

    // Proves an assignment names a plan that has policies, never a tenant starting with `*`, and may assign none.
    #[test]
    fn an_assignment_names_a_recorded_plan() {
        let pro = PolicyEvent::new(
            header("p-1", "2026-11-01T00:00:00Z", "*pro", "requests"),
            "pro:requests",
            100,
            Window::MONTH,
            Enforcement::SOFT,
            at("2026-01-01T00:00:00Z"),
        );
        let recorded = Recorded::from_policies(vec![pro]);
        let now = at("2026-11-10T00:00:00Z");
        let event = plan_assignment_event(&change(Some("pro")), &recorded, now).unwrap();
        assert_eq!((event.plan.as_deref(), event.effective_from), (Some("pro"), at("2026-11-20T00:00:00Z")));
        assert_eq!(
            plan_assignment_event(&change(Some("free")), &recorded, now),
            Err(Refused::UnknownPlan { plan: "free".into() })
        );
        assert!(plan_assignment_event(&change(None), &recorded, now).is_ok());
        let star = PlanAssignment { tenant: "*pro".into(), ..change(Some("pro")) };
        assert!(matches!(plan_assignment_event(&star, &recorded, now), Err(Refused::Invalid(_))));
    }
}
