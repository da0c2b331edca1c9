//! What the ledger holds that a change is judged against, and the append that records a change.

use std::collections::BTreeSet;

use ledger::{AppendError, AppendOutcome, Batch, Incoming, Ledger, Origin, ReadError};
use schemas::{Event, GrantEvent, MeterEvent, PolicyEvent, Timestamp, Window};

use crate::refused::Refused;

/// The origin name of the entries the control plane appends (`entries.origin_stream`).
pub const ORIGIN_NAME: &str = "control";

/// What the ledger (or every shard of it) holds that a change is judged against: every policy version, every grant,
/// and the last closed period. A plan default is in every shard: its copies count once.
#[derive(Debug, Clone, Default)]
pub struct Recorded {
    policies: Vec<PolicyEvent>,
    grants: Vec<GrantEvent>,
    meters: Vec<MeterEvent>,
    /// The last closed period (`YYYY-MM`) and its end: every earlier period is closed too.
    closed: Option<(String, Timestamp)>,
}

impl Recorded {
    /// Reads what `ledgers` hold (one ledger file, or every shard of a directory).
    pub fn read<'a>(ledgers: impl IntoIterator<Item = &'a Ledger>) -> Result<Recorded, ReadError> {
        let mut recorded = Recorded::default();
        let mut seen = BTreeSet::new();
        for ledger in ledgers {
            for policy in ledger.policies()? {
                if seen.insert(policy.header.event_id.clone()) {
                    recorded.policies.push(policy);
                }
            }
            for meter in ledger.meters()? {
                if seen.insert(meter.header.event_id.clone()) {
                    recorded.meters.push(meter);
                }
            }
            for grant in ledger.grants()?.into_values().flatten() {
                if seen.insert(grant.header.event_id.clone()) {
                    recorded.grants.push(grant);
                }
            }
            if let Some(last) = ledger.period_closes()?.into_iter().max_by_key(|close| close.period) {
                let end = last.period.end();
                if recorded.closed.as_ref().is_none_or(|(_, until)| *until < end) {
                    recorded.closed = Some((last.period.to_string(), end));
                }
            }
        }
        recorded.grants.sort_by_key(|grant| grant.header.occurred_at);
        Ok(recorded)
    }

    /// What a ledger holding only `policies` holds (tests, and callers that read policies themselves).
    pub fn from_policies(policies: Vec<PolicyEvent>) -> Recorded {
        Recorded { policies, ..Recorded::default() }
    }

    /// The same, holding `meters` too (tests).
    pub fn with_meters(self, meters: Vec<MeterEvent>) -> Recorded {
        Recorded { meters, ..self }
    }

    /// Every meter version, in ledger order (of the first shard holding it).
    pub fn meters(&self) -> &[MeterEvent] {
        &self.meters
    }

    /// The last meter version recorded for `tenant` (or `*`) and `metric`.
    pub fn last_meter_version(&self, tenant: &str, metric: &str) -> Option<i32> {
        self.meters.iter().filter(|m| m.header.tenant == tenant && m.header.metric == metric).map(|m| m.version).max()
    }

    /// Every policy version, in ledger order (of the first shard holding it).
    pub fn policies(&self) -> &[PolicyEvent] {
        &self.policies
    }

    /// Every grant, oldest change first.
    pub fn grants(&self) -> &[GrantEvent] {
        &self.grants
    }

    /// The last version recorded of `policy_id` for `tenant` (or `*`) and `metric`: a policy id is unique per owner
    /// and metric, as `audit why` reads it.
    pub fn last_version(&self, tenant: &str, metric: &str, policy_id: &str) -> Option<i32> {
        self.policies
            .iter()
            .filter(|p| p.policy_id == policy_id && p.header.tenant == tenant && p.header.metric == metric)
            .map(|p| p.version)
            .max()
    }

    /// Whether a grant of `grant_id` is recorded for `tenant`.
    pub fn has_grant(&self, tenant: &str, grant_id: &str) -> bool {
        self.grants.iter().any(|g| g.grant_id == grant_id && g.header.tenant == tenant)
    }

    /// Every version of `policy_id` (of any owner and metric), oldest change first: `policy history`.
    pub fn history(&self, policy_id: &str) -> Vec<&PolicyEvent> {
        self.policies.iter().filter(|p| p.policy_id == policy_id).collect()
    }

    /// The policies in force at `now` (contract §5, by the rules the hook decides with: a version governs the
    /// whole window its `effective_from` falls in): of `tenant`, its own and the plan defaults that apply to it; of
    /// every owner otherwise. Sorted by owner, metric and policy id.
    pub fn in_force(&self, tenant: Option<&str>, now: Timestamp) -> Vec<&PolicyEvent> {
        let mut owners: BTreeSet<(&str, &str)> = BTreeSet::new();
        for p in &self.policies {
            owners.insert((p.header.tenant.as_str(), p.header.metric.as_str()));
        }
        let mut in_force: Vec<&PolicyEvent> = match tenant {
            Some(tenant) => {
                let metrics: BTreeSet<&str> =
                    owners.iter().filter(|(o, _)| *o == tenant || *o == "*").map(|(_, m)| *m).collect();
                // Leases and levels are judged at an instant, windows of consumption over their window: all three.
                let index = rules::policy::PolicyIndex::new(self.policies.clone());
                // The index holds its own copy, in the same order: the copy found is ours at the same place.
                let ours = |a: rules::policy::Applicable<'_>| {
                    let at = index.policies().iter().position(|p| std::ptr::eq(p, a.policy));
                    &self.policies[at.expect("the index answers its own policies")]
                };
                let mut found: Vec<&PolicyEvent> = Vec::new();
                for metric in metrics {
                    found.extend(index.applicable(tenant, metric, now).into_iter().map(ours));
                    found.extend(index.concurrent(tenant, metric, now).into_iter().map(ours));
                }
                found.extend(index.gauges(tenant, now).into_iter().map(ours));
                found
            }
            None => owners.into_iter().flat_map(|(owner, metric)| self.in_force_of(owner, metric, now)).collect(),
        };
        in_force.sort_by(|a, b| owner_key(a).cmp(&owner_key(b)));
        in_force.dedup_by(|a, b| a.header.event_id == b.header.event_id);
        in_force
    }

    fn in_force_of(&self, owner: &str, metric: &str, now: Timestamp) -> Vec<&PolicyEvent> {
        let mut by_id: std::collections::BTreeMap<&str, Vec<&PolicyEvent>> = std::collections::BTreeMap::new();
        for p in self.policies.iter().filter(|p| p.header.tenant == owner && p.header.metric == metric) {
            by_id.entry(p.policy_id.as_str()).or_default().push(p);
        }
        by_id
            .values()
            .flat_map(|versions| {
                let mut found: Vec<&PolicyEvent> =
                    rules::policy::in_force(versions, now).into_iter().map(|a| a.policy).collect();
                // A CONCURRENT policy or a gauge quota is judged at an instant: the version in effect now, when it is
                // one (on a tie the later recorded, as everywhere).
                let latest = versions
                    .iter()
                    .rev()
                    .filter(|p| p.effective_from <= now)
                    .max_by_key(|p| (p.effective_from, p.version));
                found.extend(latest.filter(|p| p.window == Window::CONCURRENT || p.is_gauge()).copied());
                found
            })
            .collect()
    }

    /// Refuses a change dated before the end of the last closed period.
    pub(crate) fn check_after_close(&self, field: &'static str, value: Timestamp) -> Result<(), Refused> {
        match &self.closed {
            Some((period, closed_until)) if value < *closed_until => {
                Err(Refused::BeforeClose { field, value, period: period.clone(), closed_until: *closed_until })
            }
            _ => Ok(()),
        }
    }
}

/// The change could not be appended.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// A correction the ledger judged, in the append's transaction, not to apply (the original voided already, an
    /// amend to what it counts): nothing was recorded.
    #[error("{0}")]
    Refused(rules::correction::Refusal),
    /// The append failed; nothing was recorded in that ledger.
    #[error("cannot append {event_id} to {path}")]
    Append {
        /// The event.
        event_id: String,
        /// The ledger file.
        path: String,
        /// The failure.
        source: ledger::AppendError,
    },
    /// The ledger holds another event of that id (a change racing this one for the same version): nothing of this
    /// change was recorded in that ledger.
    #[error("{event_id} is not recorded in {path}: the ledger holds another event of that id (entry {of})")]
    Conflicting {
        /// The event.
        event_id: String,
        /// The ledger file.
        path: String,
        /// The entry it conflicts with.
        of: u64,
    },
    /// No ledger holds the tenant (a directory of shards without its shard).
    #[error("no ledger given holds tenant {tenant}")]
    NoShard {
        /// The tenant.
        tenant: String,
    },
    /// Reading a shard's identity failed.
    #[error(transparent)]
    Read(#[from] ReadError),
}

/// Appends `event` into every ledger of `ledgers` that holds its tenant (a plan default: every shard; a tenant: its
/// shard; one ledger file holds every tenant). Answers the ledger sequence number of each copy recorded; an exact
/// copy recorded before (the same change retried) counts as recorded.
pub fn record(ledgers: &mut [Ledger], event: &Event) -> Result<Vec<u64>, RecordError> {
    let tenant = &event.header().tenant;
    let mut seqs = Vec::new();
    for ledger in ledgers.iter_mut() {
        if ledger.shard()?.is_some_and(|shard| !shard.holds_tenant(tenant)) {
            continue;
        }
        let incoming = Incoming { event: event.clone(), origin: Origin::Local { name: ORIGIN_NAME.into() }, raw: None };
        let event_id = event.header().event_id.clone();
        let path = ledger.path().display().to_string();
        // Refused in the append's transaction, not kept as a conflicting copy: a refused change records nothing.
        let report = match ledger.append_unless_conflicting(&Batch { events: vec![incoming], ..Batch::default() }) {
            Ok(report) => report,
            Err(AppendError::Conflicting { of, .. }) => return Err(RecordError::Conflicting { event_id, path, of }),
            Err(AppendError::CorrectionRefused { refusal, .. }) => return Err(RecordError::Refused(*refusal)),
            Err(source) => return Err(RecordError::Append { event_id, path, source }),
        };
        match report.outcomes.first() {
            Some(AppendOutcome::Recorded { seq }) => seqs.push(*seq),
            Some(AppendOutcome::Duplicate { of }) => seqs.push(*of),
            other => unreachable!(
                "one policy, grant or meter appended without conflict is recorded or a copy, not {other:?}"
            ),
        }
    }
    if seqs.is_empty() {
        return Err(RecordError::NoShard { tenant: tenant.clone() });
    }
    Ok(seqs)
}

fn owner_key(p: &PolicyEvent) -> (&str, &str, &str, i32) {
    (p.header.tenant.as_str(), p.header.metric.as_str(), p.policy_id.as_str(), p.version)
}
