//! The meters folded, and what counting by them needs: the members each UNIQUE_COUNT window has seen. A metric
//! without a meter sums its usage as it always did; a COUNT window counts events, a UNIQUE_COUNT window the distinct
//! members of its field (a member's first event in the window adds 1, the next ones nothing), and a window of a
//! gauge's aggregation (MAX, LATEST, TIME_WEIGHTED_*) counts nothing: its levels are not consumption (a gauge quota
//! limits a level; the export bills it). Each window is counted by the meter in force at its start
//! (`rules::meter::in_force`), as the export bills it.

use rules::meter;
use rustc_hash::FxHashMap;

use super::Named;
use schemas::*;
use serde::{Deserialize, Serialize};

/// The members a window of a tenant's metric has seen, with how many counted events named each (an own event the
/// ledger did not record is taken back by its count).
type Seen = FxHashMap<(i64, i64), FxHashMap<String, u32>>;

#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct Meters {
    /// Every meter version folded, in ledger order.
    versions: Vec<MeterEvent>,
    /// The members seen per UNIQUE_COUNT window, by (tenant, metric).
    seen: FxHashMap<(String, String), Seen>,
}

impl Meters {
    /// Knowing `versions` (every recorded meter) from the start: usage folded after counts by them.
    pub(super) fn of(versions: Vec<MeterEvent>) -> Meters {
        Meters { versions, seen: FxHashMap::default() }
    }

    /// Every meter version known.
    pub(super) fn versions(&self) -> &[MeterEvent] {
        &self.versions
    }

    /// Notes a meter version; whether it is new to the state (usage folded before it may be counted otherwise by it:
    /// the state must be rebuilt knowing it).
    pub(super) fn note(&mut self, m: &MeterEvent) -> bool {
        if self.versions.iter().any(|known| known.header.event_id == m.header.event_id) {
            return false;
        }
        self.versions.push(m.clone());
        true
    }

    /// Whether any meter names `tenant`'s `metric` (its own or the plan's): whether its usage may count otherwise than
    /// summed. The common case, no meter, costs a scan of the few meters recorded.
    pub(super) fn is_metered(&self, tenant: &str, metric: &str) -> bool {
        self.versions.iter().any(|m| {
            m.header.metric == metric
                && (m.header.tenant == tenant || m.header.tenant == rules::policy::PLAN_DEFAULT_TENANT)
        })
    }

    /// The meter aggregating `tenant`'s `metric` in the window starting at `start`; none: SUM.
    pub(super) fn in_force(&self, tenant: &str, metric: &str, start: i64) -> Option<&MeterEvent> {
        meter::in_force(&self.versions, tenant, metric, Timestamp(start))
    }

    /// What an event of `quantity` (taken back when `back`) adds to the window `window` of its tenant's metric.
    pub(super) fn delta(&mut self, header: &Header, quantity: i64, back: bool, window: (i64, i64)) -> i64 {
        let sign = if back { -1 } else { 1 };
        let Some(m) = self.in_force(&header.tenant, &header.metric, window.0) else { return sign * quantity };
        match m.aggregation {
            Aggregation::SUM => sign * quantity,
            Aggregation::COUNT => sign,
            Aggregation::UNIQUE_COUNT => {
                let Some(member) = member(m.field, Named::of(header)) else { return 0 };
                let key = (header.tenant.clone(), header.metric.clone());
                let members = self.seen.entry(key).or_default().entry(window).or_default();
                match back {
                    false => {
                        let count = members.entry(member.to_string()).or_insert(0);
                        *count += 1;
                        i64::from(*count == 1)
                    }
                    true => match members.get_mut(member) {
                        Some(count) if *count > 1 => {
                            *count -= 1;
                            0
                        }
                        Some(_) => {
                            members.remove(member);
                            -1
                        }
                        None => 0,
                    },
                }
            }
            Aggregation::MAX
            | Aggregation::LATEST
            | Aggregation::TIME_WEIGHTED_SUM
            | Aggregation::TIME_WEIGHTED_AVERAGE => 0,
        }
    }

    /// What a request of `amount` naming `header`'s members would add to the window `[start, end)` of a policy: its
    /// amount (SUM), 1 (COUNT), 1 for a member the window has not seen and nothing otherwise (UNIQUE_COUNT), nothing
    /// for a gauge's aggregation.
    pub(super) fn cost(
        &self,
        (tenant, metric): (&str, &str),
        named: Named<'_>,
        amount: i64,
        (start, end): (i64, i64),
    ) -> i64 {
        let Some(m) = self.in_force(tenant, metric, start) else { return amount };
        match m.aggregation {
            Aggregation::SUM => amount,
            Aggregation::COUNT => 1,
            Aggregation::UNIQUE_COUNT => {
                let key = (tenant.to_string(), metric.to_string());
                let members = self.seen.get(&key).and_then(|seen| seen.get(&(start, end)));
                meter::unique_cost(|seen| members.is_some_and(|m| m.contains_key(seen)), member(m.field, named))
            }
            Aggregation::MAX
            | Aggregation::LATEST
            | Aggregation::TIME_WEIGHTED_SUM
            | Aggregation::TIME_WEIGHTED_AVERAGE => 0,
        }
    }

    /// Drops the members of windows that ended before `horizon`, as the window counters are dropped.
    pub(super) fn prune(&mut self, horizon: i64) {
        self.seen.retain(|_, windows| {
            windows.retain(|(_, end), _| *end >= horizon);
            !windows.is_empty()
        });
    }
}

/// The value of a UNIQUE_COUNT's field that an event or a request names.
fn member(field: Option<MeterField>, named: Named<'_>) -> Option<&str> {
    match field? {
        MeterField::SUBJECT => named.subject,
        MeterField::PROJECT => named.project,
        MeterField::API_KEY => named.api_key,
    }
}
