//! ROLLING windows (PolicyEvent v10; contract §5 "Rolling windows"): a limit on every interval of a length ending at
//! an instant. Reconcile judges them per UTC day, once the day ended by `--as-of`: at each instant of the day at which
//! a counted event of the member happened, the interval of the rolling version in force there holds the consumption
//! of the events in it, and its excess is that consumption above the interval's effective limit. The day's truth is
//! the greatest excess of the day, at its first instant: one adjustment per day and policy, so that a concern keeps
//! its identity across runs (the UTC day) whichever instant is the worst as late events arrive.
//!
//! The consumption of an interval ending at each instant is a difference of prefix sums over the member's events in
//! event-time order: a member's whole history is judged in one pass, whatever the length.

use std::collections::{BTreeMap, HashMap};

use rules::overshoot::{self, Consumed};
use rules::policy::{Applicable, Candidates};
use rules::window;
use rustc_hash::FxHashMap;
use schemas::{AdjustmentKind, GrantEvent, PolicyEvent, Scope, Timestamp, Window};

use crate::concern::{self, Concern, Members, Recorded, Truth};
use crate::error::ReconcileError;
use crate::inputs::PlanInputs;
use crate::names::{Interner, WindowKey};

/// The greatest excess of one day of a ROLLING policy for one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RollingDay<'p> {
    /// The version in force at the instant of the greatest excess (the first such instant).
    pub policy: &'p PolicyEvent,
    /// OVERSHOOT (HARD) or SHADOW_OVER_LIMIT (SHADOW).
    pub kind: AdjustmentKind,
    /// The UTC day, `[start, end)`.
    pub day: (Timestamp, Timestamp),
    /// The greatest excess of an interval ending in the day: 0 when none went beyond its limit.
    pub excess: i64,
    /// The interval with that excess, `[start, end)`, and its effective limit: its crossers are the events named.
    pub interval: (Timestamp, Timestamp),
    /// The interval's effective limit.
    pub limit: i64,
}

/// Judges one member's consumption (`items`, any order; sorted here) under the ROLLING policies `rolling_at` answers
/// in force at an instant, each with its interval's effective limit. Only days ended by `as_of` are judged.
pub(crate) fn judge_member<'p>(
    items: &mut [Consumed],
    as_of: Timestamp,
    mut rolling_at: impl FnMut(Timestamp) -> Vec<(Applicable<'p>, i64)>,
) -> Vec<RollingDay<'p>> {
    items.sort_by_key(|c| (c.occurred_at, c.seq));
    let mut prefix = Vec::with_capacity(items.len() + 1);
    prefix.push(0i64);
    for c in items.iter() {
        prefix.push(prefix[prefix.len() - 1].saturating_add(c.quantity));
    }
    // The consumption of the events at instants [start, end): a difference of prefix sums.
    let sum = |start: Timestamp, end: Timestamp| {
        let from = items.partition_point(|c| c.occurred_at < start);
        let to = items.partition_point(|c| c.occurred_at < end);
        prefix[to].saturating_sub(prefix[from])
    };
    let mut days: BTreeMap<(&'p str, AdjustmentKind, i64), RollingDay<'p>> = BTreeMap::new();
    let mut i = 0;
    while i < items.len() {
        let t = items[i].occurred_at;
        while i < items.len() && items[i].occurred_at == t {
            i += 1;
        }
        let day = window::bounds(Window::DAY, t);
        if day.1 > as_of {
            continue;
        }
        for (a, limit) in rolling_at(t) {
            let Some(kind) = overshoot::excess_kind(a.policy.enforcement) else { continue };
            let excess = overshoot::excess(sum(a.window_start, a.window_end), limit);
            let key = (a.policy.policy_id.as_str(), kind, day.0.micros());
            let judged =
                RollingDay { policy: a.policy, kind, day, excess, interval: (a.window_start, a.window_end), limit };
            match days.get_mut(&key) {
                Some(worst) if excess > worst.excess => *worst = judged,
                Some(_) => {}
                None => {
                    days.insert(key, judged);
                }
            }
        }
    }
    days.into_values().collect()
}

/// The events that carried `interval` past `limit`, by ledger sequence: those of `items` (sorted by event time, as
/// [`judge_member`] leaves them) in the interval with a positive quantity finding the running consumption above it.
pub(crate) fn crossers(items: &[Consumed], interval: (Timestamp, Timestamp), limit: i64) -> Vec<u64> {
    let from = items.partition_point(|c| c.occurred_at < interval.0);
    let to = items.partition_point(|c| c.occurred_at < interval.1);
    overshoot::crossing_seqs(&mut items[from..to].to_vec(), limit)
}

/// What judging the ROLLING days reads of the run: names interned, the policy groups of each (tenant, metric), the
/// grants, the calendar windows summed (a day that is one of them is judged as that window), and the adjustments
/// recorded.
pub(crate) struct Judging<'a, 'p> {
    pub(crate) as_of: Timestamp,
    pub(crate) names: &'a mut Interner,
    pub(crate) candidates: &'a FxHashMap<(u32, u32), Candidates<'p>>,
    pub(crate) grants: &'a HashMap<(String, String), Vec<GrantEvent>>,
    pub(crate) windows: &'a FxHashMap<WindowKey, (i64, &'p PolicyEvent)>,
    pub(crate) recorded: &'a HashMap<Concern, Recorded>,
}

/// Truths of the days of ROLLING policies, of each member's stream of consumption in `streams` (by tenant, metric,
/// scope and member): per member, the greatest excess of each day ended by `as_of`, naming the events that carried
/// that interval past its limit ([`crossers`], by `commit_ids` for COMMITs). A day that is also the policy's UTC DAY
/// window (a version change between DAY and ROLLING that day) is judged as that window.
pub(crate) fn judge(
    streams: FxHashMap<(u32, u32, Scope, Option<u32>), Vec<Consumed>>,
    judging: Judging<'_, '_>,
    inputs: &impl PlanInputs,
    commit_ids: &FxHashMap<u64, &str>,
) -> Result<Vec<Truth>, ReconcileError> {
    let Judging { as_of, names, candidates, grants, windows, recorded: recorded_all } = judging;
    let mut truths = Vec::new();
    let mut streams: Vec<_> = streams.into_iter().collect();
    streams.sort_by_key(|(key, _)| *key);
    for ((tenant_id, metric_id, scope, member_id), mut items) in streams {
        let candidates = candidates[&(tenant_id, metric_id)];
        let (tenant, metric) = (names.name(tenant_id).to_string(), names.name(metric_id).to_string());
        let member = names.member(member_id);
        let grants = grants.get(&(tenant.clone(), metric.clone())).map_or(&[][..], Vec::as_slice);
        let days = judge_member(&mut items, as_of, |t| {
            candidates
                .applicable(t)
                .into_iter()
                .filter(|a| a.policy.window == Window::ROLLING && a.policy.scope == scope && !a.policy.is_throttle())
                .map(|a| {
                    let limit = overshoot::effective_limit(
                        a.policy.limit,
                        scope,
                        member.as_deref(),
                        grants,
                        a.window_start,
                        a.window_end,
                    );
                    (a, limit)
                })
                .collect()
        });
        for day in days {
            let key = WindowKey {
                tenant: tenant_id,
                metric: metric_id,
                policy_id: names.id(&day.policy.policy_id),
                scope,
                member: member_id,
                start: day.day.0.micros(),
                end: day.day.1.micros(),
            };
            if windows.contains_key(&key) {
                continue;
            }
            let concern = key.concern(names, day.kind);
            let recorded = recorded_all.get(&concern).copied().unwrap_or_default();
            let mut truth = Truth {
                concern,
                amount: day.excess,
                present: day.excess > 0,
                tenant: tenant.clone(),
                members: Members::of_window(scope, member.clone()),
                metric: metric.clone(),
                policy_id: Some(day.policy.policy_id.clone()),
                refs: Vec::new(),
            };
            if day.excess > 0 && concern::delta(&truth, recorded).is_some() {
                let seqs = crossers(&items, day.interval, day.limit);
                truth.refs = inputs.event_ids(&seqs, commit_ids)?;
            }
            truths.push(truth);
        }
    }
    Ok(truths)
}

#[cfg(test)]
mod tests {
    use schemas::{Enforcement, Header};

    use super::*;
    use testkit::fixtures::at;

    fn consumed(seq: u64, time: &str, quantity: i64) -> Consumed {
        Consumed { occurred_at: at(time), seq, quantity, event_id: String::new() }
    }

    fn rolling(seconds: i64, limit: i64, enforcement: Enforcement) -> PolicyEvent {
        PolicyEvent {
            window_seconds: Some(seconds),
            ..PolicyEvent::new(
                Header {
                    event_id: "p-v1".into(),
                    occurred_at: at("2026-11-01T00:00:00Z"),
                    tenant: "org-1".into(),
                    subject: None,
                    project: None,
                    api_key: None,
                    metric: "requests".into(),
                    source: "test".into(),
                },
                "p",
                limit,
                Window::ROLLING,
                enforcement,
                at("2026-11-01T00:00:00Z"),
            )
        }
    }

    fn judge<'p>(items: &mut [Consumed], policy: &'p PolicyEvent, as_of: &str) -> Vec<RollingDay<'p>> {
        judge_member(items, at(as_of), |t| {
            let (window_start, window_end) = window::rolling(policy.rolling_micros().expect("a ROLLING policy"), t);
            vec![(Applicable { policy, window_start, window_end, plan_default: false }, policy.limit)]
        })
    }

    // contract §5 "Rolling windows": the limit holds over every interval of the length ending at an instant, across
    // calendar boundaries; the day's truth is its worst interval, whose crossers are named.
    #[test]
    fn the_worst_interval_of_each_day_is_its_excess_across_midnight() {
        let policy = rolling(3_600, 10, Enforcement::HARD);
        let mut items = vec![
            consumed(1, "2026-11-10T23:30:00Z", 6),
            consumed(2, "2026-11-11T00:10:00Z", 3),
            consumed(3, "2026-11-11T00:20:00Z", 4),
            // 23:30 has aged out by 00:30 (one hour is [00:30:00.000001, 00:30]): 3 + 4 + 2 = 9.
            consumed(4, "2026-11-11T00:30:00Z", 2),
        ];
        let days = judge(&mut items, &policy, "2026-11-12T00:00:00Z");
        assert_eq!(days.len(), 2);
        assert_eq!((days[0].day.0, days[0].excess), (at("2026-11-10T00:00:00Z"), 0));
        assert_eq!((days[1].day.0, days[1].excess), (at("2026-11-11T00:00:00Z"), 3), "6 + 3 + 4 at 00:20");
        assert_eq!(days[1].interval, (at("2026-11-10T23:20:00.000001Z"), at("2026-11-11T00:20:00.000001Z")));
        assert_eq!(crossers(&items, days[1].interval, days[1].limit), [3]);
    }

    // A day not ended by --as-of is not judged yet; an event exactly one length before an instant has aged out.
    #[test]
    fn unended_days_wait_and_the_window_excludes_its_start() {
        let policy = rolling(60, 1, Enforcement::SHADOW);
        let mut items = vec![consumed(1, "2026-11-11T10:00:00Z", 1), consumed(2, "2026-11-11T10:01:00Z", 1)];
        assert_eq!(judge(&mut items, &policy, "2026-11-11T23:59:59Z"), []);
        let days = judge(&mut items, &policy, "2026-11-12T00:00:00Z");
        assert_eq!((days[0].kind, days[0].excess), (AdjustmentKind::SHADOW_OVER_LIMIT, 0));
        let mut closer = vec![consumed(1, "2026-11-11T10:00:00Z", 1), consumed(2, "2026-11-11T10:00:59Z", 1)];
        assert_eq!(judge(&mut closer, &policy, "2026-11-12T00:00:00Z")[0].excess, 1);
    }
}
