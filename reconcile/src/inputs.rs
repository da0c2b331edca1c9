//! What a plan reads ([`PlanInputs`]): the small tables whole, the large ones (reservation events, usage) as
//! streams, so that a run's memory follows the number of windows and reservations, never the number of events.
//! The ledger provides them from one read snapshot ([`crate::plan()`]); a test provides them from vectors
//! ([`crate::plan_from()`]).

use std::collections::{HashMap, HashSet};

use ledger::{
    AdjustmentSummary, AllowedOpen, ConflictingCopy, DecisionTally, Ledger, PeriodClose, ReadError,
    SequencedReservation, UsageRow,
};
use rustc_hash::FxHashMap;
use schemas::{AlertEvent, GrantEvent, MeterEvent, PlanAssignmentEvent, PolicyEvent, Timestamp};

/// Everything [`crate::plan_from()`] reads, in the order and grouping the rules need.
pub trait PlanInputs {
    /// The last ledger sequence number the inputs hold (a run's id names it).
    fn watermark(&self) -> Result<u64, ReadError>;

    /// Every recorded policy version, in ledger order.
    fn policies(&self) -> Result<Vec<PolicyEvent>, ReadError>;

    /// Every recorded plan assignment, in ledger order (none by default: inputs without named plans).
    fn plan_assignments(&self) -> Result<Vec<PlanAssignmentEvent>, ReadError> {
        Ok(Vec::new())
    }

    /// Every recorded meter version, in ledger order (none by default: every metric sums).
    fn meters(&self) -> Result<Vec<MeterEvent>, ReadError> {
        Ok(Vec::new())
    }

    /// Every recorded grant, by (tenant, metric), in ledger order.
    fn grants(&self) -> Result<HashMap<(String, String), Vec<GrantEvent>>, ReadError>;

    /// Every period close, oldest first.
    fn period_closes(&self) -> Result<Vec<PeriodClose>, ReadError>;

    /// Calls `each` with what every recorded adjustment is about, in ledger order; answers how many there were.
    fn adjustment_summaries(&self, each: impl FnMut(AdjustmentSummary)) -> Result<u64, ReadError>;

    /// Calls `each` with the recorded events of every reservation, one (tenant, reservation_id) at a time
    /// ([`rules::reservation::same_reservation`]), its events in ledger order; answers how many events there
    /// were.
    fn for_each_reservation(&self, each: impl FnMut(&[SequencedReservation])) -> Result<u64, ReadError>;

    /// Every conflicting duplicate, in ledger order.
    fn conflicting_copies(&self) -> Result<Vec<ConflictingCopy>, ReadError>;

    /// Calls `each` with every counted UsageEvent, in ledger order; answers how many there were. Called twice
    /// by a run that names the events that crossed a limit.
    fn for_each_usage(&self, each: impl FnMut(UsageRow<'_>)) -> Result<u64, ReadError>;

    /// The event_ids of the entries `seqs`, in their order; those in `known` (the COMMITs a run holds) are not
    /// read again.
    fn event_ids(&self, seqs: &[u64], known: &FxHashMap<u64, &str>) -> Result<Vec<String>, ReadError>;

    /// The decisions a hook made open (reason FAIL_OPEN: allowed while its ledger refused writes) that happened
    /// before `as_of`, per tenant and metric.
    fn allowed_open(&self, as_of: Timestamp) -> Result<Vec<AllowedOpen>, ReadError>;

    /// The alerts hooks wrote that occurred in `[from, to)`, in ledger order.
    fn alerts_between(&self, from: Timestamp, to: Timestamp) -> Result<Vec<AlertEvent>, ReadError>;

    /// The ids of every recorded alert.
    fn alert_ids(&self) -> Result<HashSet<String>, ReadError>;

    /// Per tenant with some, the decisions of `metric` of `tenant` (every tenant for `None`) in `[from, to)`, and how
    /// many of them `version` of `policy_id` denied ([`Ledger::decision_tallies`]).
    fn decision_tallies(
        &self,
        tenant: Option<&str>,
        metric: &str,
        span: (Timestamp, Timestamp),
        version: (&str, i32),
    ) -> Result<Vec<(String, DecisionTally)>, ReadError>;
}

/// The ledger's typed reads; [`crate::plan()`] holds one read snapshot across them.
impl PlanInputs for Ledger {
    fn watermark(&self) -> Result<u64, ReadError> {
        Ledger::watermark(self)
    }

    fn policies(&self) -> Result<Vec<PolicyEvent>, ReadError> {
        Ledger::policies(self)
    }

    fn plan_assignments(&self) -> Result<Vec<PlanAssignmentEvent>, ReadError> {
        Ledger::plan_assignments_through(self, u64::MAX)
    }

    fn meters(&self) -> Result<Vec<MeterEvent>, ReadError> {
        Ledger::meters(self)
    }

    fn grants(&self) -> Result<HashMap<(String, String), Vec<GrantEvent>>, ReadError> {
        Ledger::grants(self)
    }

    fn period_closes(&self) -> Result<Vec<PeriodClose>, ReadError> {
        Ledger::period_closes(self)
    }

    fn adjustment_summaries(&self, each: impl FnMut(AdjustmentSummary)) -> Result<u64, ReadError> {
        Ledger::adjustment_summaries(self, each)
    }

    fn for_each_reservation(&self, each: impl FnMut(&[SequencedReservation])) -> Result<u64, ReadError> {
        Ledger::for_each_reservation(self, each)
    }

    fn conflicting_copies(&self) -> Result<Vec<ConflictingCopy>, ReadError> {
        Ledger::conflicting_copies(self)
    }

    fn for_each_usage(&self, each: impl FnMut(UsageRow<'_>)) -> Result<u64, ReadError> {
        Ledger::for_each_usage(self, each)
    }

    fn event_ids(&self, seqs: &[u64], known: &FxHashMap<u64, &str>) -> Result<Vec<String>, ReadError> {
        Ledger::event_ids(self, seqs, known)
    }

    fn allowed_open(&self, as_of: Timestamp) -> Result<Vec<AllowedOpen>, ReadError> {
        Ledger::allowed_open(self, as_of)
    }

    fn alerts_between(&self, from: Timestamp, to: Timestamp) -> Result<Vec<AlertEvent>, ReadError> {
        Ok(Ledger::alerts_between(self, (from, to))?.into_iter().map(|(_, alert)| alert).collect())
    }

    fn alert_ids(&self) -> Result<HashSet<String>, ReadError> {
        Ledger::alert_ids(self)
    }

    fn decision_tallies(
        &self,
        tenant: Option<&str>,
        metric: &str,
        span: (Timestamp, Timestamp),
        version: (&str, i32),
    ) -> Result<Vec<(String, DecisionTally)>, ReadError> {
        Ledger::decision_tallies(self, tenant, metric, span, version)
    }
}

/// The ledger's reads restricted to some tenants: their usage and reservation streams alone, each read through the
/// index of a tenant's entries; everything else as the ledger holds it. What an incremental run plans from
/// ([`crate::incremental`]).
pub(crate) struct TenantsOf<'l> {
    /// The ledger, in the caller's read snapshot.
    pub(crate) ledger: &'l Ledger,
    /// The tenants read, by name.
    pub(crate) tenants: &'l std::collections::BTreeSet<String>,
}

impl PlanInputs for TenantsOf<'_> {
    fn watermark(&self) -> Result<u64, ReadError> {
        self.ledger.watermark()
    }

    fn policies(&self) -> Result<Vec<PolicyEvent>, ReadError> {
        self.ledger.policies()
    }

    fn plan_assignments(&self) -> Result<Vec<PlanAssignmentEvent>, ReadError> {
        self.ledger.plan_assignments_through(u64::MAX)
    }

    fn meters(&self) -> Result<Vec<MeterEvent>, ReadError> {
        self.ledger.meters()
    }

    fn grants(&self) -> Result<HashMap<(String, String), Vec<GrantEvent>>, ReadError> {
        self.ledger.grants()
    }

    fn period_closes(&self) -> Result<Vec<PeriodClose>, ReadError> {
        self.ledger.period_closes()
    }

    fn adjustment_summaries(&self, each: impl FnMut(AdjustmentSummary)) -> Result<u64, ReadError> {
        self.ledger.adjustment_summaries(each)
    }

    fn for_each_reservation(&self, mut each: impl FnMut(&[SequencedReservation])) -> Result<u64, ReadError> {
        let watermark = self.ledger.watermark()?;
        let mut events = 0;
        for tenant in self.tenants {
            events += self.ledger.for_each_reservation_of(tenant, None, watermark, &mut each)?;
        }
        Ok(events)
    }

    fn conflicting_copies(&self) -> Result<Vec<ConflictingCopy>, ReadError> {
        self.ledger.conflicting_copies()
    }

    fn for_each_usage(&self, mut each: impl FnMut(UsageRow<'_>)) -> Result<u64, ReadError> {
        let mut events = 0;
        for tenant in self.tenants {
            events += self.ledger.for_each_usage_of_tenant(tenant, &mut each)?;
        }
        Ok(events)
    }

    fn event_ids(&self, seqs: &[u64], known: &FxHashMap<u64, &str>) -> Result<Vec<String>, ReadError> {
        self.ledger.event_ids(seqs, known)
    }

    fn allowed_open(&self, as_of: Timestamp) -> Result<Vec<AllowedOpen>, ReadError> {
        self.ledger.allowed_open(as_of)
    }

    fn alerts_between(&self, from: Timestamp, to: Timestamp) -> Result<Vec<AlertEvent>, ReadError> {
        PlanInputs::alerts_between(self.ledger, from, to)
    }

    fn alert_ids(&self) -> Result<HashSet<String>, ReadError> {
        self.ledger.alert_ids()
    }

    fn decision_tallies(
        &self,
        tenant: Option<&str>,
        metric: &str,
        span: (Timestamp, Timestamp),
        version: (&str, i32),
    ) -> Result<Vec<(String, DecisionTally)>, ReadError> {
        self.ledger.decision_tallies(tenant, metric, span, version)
    }
}
