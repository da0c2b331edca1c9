//! Named plans through the control plane (contract §7 `plan assign`, `plan assignments`): a tenant assigned to a plan
//! from an instant, judged by `control` against what the store holds and appended to the tenant's ledger; the
//! assignments recorded, in words and a table.

use std::io::Write;

use control::{PlanAssignment, Recorded};
use schemas::{Event, PlanAssignmentEvent, Timestamp};

use crate::change::{Changed, Destination};
use crate::{Context, Result, Store};

/// `change` judged against `store` and recorded in the ledger that holds its tenant.
pub fn assign_plan(store: &Store, change: &PlanAssignment) -> Result<Changed<PlanAssignmentEvent>> {
    let event = {
        let ledgers = store.read_all()?;
        let recorded = Recorded::read(&ledgers)?;
        control::plan_assignment_event(change, &recorded, Timestamp::now()).context("plan not assigned")?
    };
    let written = crate::change::write(store, Event::PlanAssignment(event.clone()), &Destination::Ledger)?;
    Ok(Changed { event, written })
}

/// Every assignment `store` holds (of `tenant` only, when given), in ledger order.
pub fn assignments(store: &Store, tenant: Option<&str>) -> Result<Vec<PlanAssignmentEvent>> {
    let mut all = Vec::new();
    for ledger in store.read_all()? {
        all.extend(ledger.plan_assignments_through(u64::MAX)?);
    }
    all.retain(|a| tenant.is_none_or(|t| a.header.tenant == t));
    Ok(all)
}

/// An assignment recorded, in a line: who moved which tenant to which plan from when, and where it was written.
impl std::fmt::Display for Changed<PlanAssignmentEvent> {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let PlanAssignmentEvent { header, plan, effective_from, actor, reason } = &self.event;
        let plan = plan.as_deref().map_or("no plan (the plan defaults alone)".to_string(), |p| format!("plan {p}"));
        write!(out, "{} assigned {plan} from {effective_from} by {actor}: {reason:?}; {}", header.tenant, self.written)
    }
}

/// The table of `plan assignments`.
pub fn write_assignments(out: &mut dyn Write, rows: &[PlanAssignmentEvent]) -> std::io::Result<()> {
    let header = ["tenant", "plan", "effective_from", "recorded_at", "actor", "reason"];
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|a| {
            let plan = a.plan.clone().unwrap_or_else(|| "-".into());
            let when = [a.effective_from.to_string(), a.header.occurred_at.to_string()];
            [a.header.tenant.clone(), plan].into_iter().chain(when).chain([a.actor.clone(), a.reason.clone()]).collect()
        })
        .collect();
    reports::text::write_table(out, &header, &table)
}
