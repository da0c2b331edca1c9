//! The plan over inputs held in vectors ([`Memory`]): each rule of contract §5 judged without a ledger file.

use std::collections::{BTreeMap, HashMap};

use ledger::{AdjustmentSummary, AllowedOpen, ConflictingCopy, PeriodClose, ReadError, SequencedReservation, UsageRow};
use rules::reservation::same_reservation;
use rustc_hash::FxHashMap;
use schemas::*;

use crate::inputs::PlanInputs;
use crate::plan::{Plan, plan_from};

const TENANT: &str = "org-1";
const METRIC: &str = "tokens";
/// Late enough that every window and reservation below is judged.
const AS_OF: &str = "2026-11-15T00:00:00Z";

fn at(text: &str) -> Timestamp {
    Timestamp::parse_rfc3339(text).unwrap()
}

fn header(event_id: &str, occurred_at: &str) -> Header {
    Header {
        event_id: event_id.into(),
        occurred_at: at(occurred_at),
        tenant: TENANT.into(),
        subject: None,
        metric: METRIC.into(),
        source: "plan-tests".into(),
        api_key: None,
        project: None,
    }
}

fn usage(event_id: &str, occurred_at: &str, quantity: i64) -> Event {
    Event::Usage(UsageEvent {
        header: header(event_id, occurred_at),
        quantity,
        request_id: None,
        attributes: BTreeMap::new(),
    })
}

fn reservation(event_id: &str, action: ReservationAction, occurred_at: &str, amount: i64) -> ReservationEvent {
    ReservationEvent {
        header: header(event_id, occurred_at),
        reservation_id: "r-1".into(),
        action,
        amount,
        expires_at: None,
        fencing_token: None,
    }
}

/// Version 1 of a TENANT-scope HARD DAY policy, effective since September.
fn hard_daily_limit(limit: i64) -> Event {
    Event::Policy(PolicyEvent::new(
        header("p-1-v1", "2026-09-01T00:00:00Z"),
        "p-1",
        limit,
        Window::DAY,
        Enforcement::HARD,
        at("2026-09-01T00:00:00Z"),
    ))
}

/// A ledger's entries in memory: each event with its sequence number (its place, from 1), and whether it is a
/// conflicting copy of an earlier one.
#[derive(Default)]
struct Memory {
    entries: Vec<(u64, Event, bool)>,
    closes: Vec<PeriodClose>,
}

impl Memory {
    fn record(&mut self, event: Event) -> u64 {
        self.push(event, false)
    }

    fn conflicting_copy(&mut self, event: Event) -> u64 {
        self.push(event, true)
    }

    fn push(&mut self, event: Event, conflicting: bool) -> u64 {
        let seq = self.entries.len() as u64 + 1;
        self.entries.push((seq, event, conflicting));
        seq
    }

    /// What a run records: its adjustments, then its alerts, as new entries.
    fn apply(&mut self, plan: &Plan) {
        for adjustment in &plan.adjustments {
            self.record(Event::Adjustment(adjustment.clone()));
        }
        for alert in &plan.alerts {
            self.record(Event::Alert(alert.clone()));
        }
    }

    fn recorded(&self) -> impl Iterator<Item = (u64, &Event)> {
        self.entries.iter().filter(|(_, _, conflicting)| !conflicting).map(|(seq, event, _)| (*seq, event))
    }
}

impl PlanInputs for Memory {
    fn watermark(&self) -> Result<u64, ReadError> {
        Ok(self.entries.len() as u64)
    }

    fn policies(&self) -> Result<Vec<PolicyEvent>, ReadError> {
        Ok(self.recorded().filter_map(|(_, e)| if let Event::Policy(p) = e { Some(p.clone()) } else { None }).collect())
    }

    fn grants(&self) -> Result<HashMap<(String, String), Vec<GrantEvent>>, ReadError> {
        let mut grants: HashMap<(String, String), Vec<GrantEvent>> = HashMap::new();
        for (_, event) in self.recorded() {
            if let Event::Grant(g) = event {
                grants.entry((g.header.tenant.clone(), g.header.metric.clone())).or_default().push(g.clone());
            }
        }
        Ok(grants)
    }

    fn period_closes(&self) -> Result<Vec<PeriodClose>, ReadError> {
        Ok(self.closes.clone())
    }

    fn adjustment_summaries(&self, mut each: impl FnMut(AdjustmentSummary)) -> Result<u64, ReadError> {
        let mut count = 0;
        for (_, event) in self.recorded() {
            if let Event::Adjustment(a) = event {
                count += 1;
                each(AdjustmentSummary {
                    who: a.header.who(),
                    metric: a.header.metric.clone(),
                    kind: a.kind,
                    policy_id: a.policy_id.clone(),
                    window_start: a.window_start,
                    window_end: a.window_end,
                    amount: a.amount,
                    first_ref: a.refs.first().cloned(),
                    scope: a.scope,
                });
            }
        }
        Ok(count)
    }

    fn for_each_reservation(&self, mut each: impl FnMut(&[SequencedReservation])) -> Result<u64, ReadError> {
        let mut events: Vec<SequencedReservation> = self
            .recorded()
            .filter_map(|(seq, e)| if let Event::Reservation(r) = e { Some((seq, r.clone())) } else { None })
            .collect();
        events.sort_by(|(a_seq, a), (b_seq, b)| {
            (&a.reservation_id, &a.header.tenant, a_seq).cmp(&(&b.reservation_id, &b.header.tenant, b_seq))
        });
        for group in events.chunk_by(|(_, a), (_, b)| same_reservation(a, b)) {
            each(group);
        }
        Ok(events.len() as u64)
    }

    fn conflicting_copies(&self) -> Result<Vec<ConflictingCopy>, ReadError> {
        let copies = self.entries.iter().filter(|(_, _, conflicting)| *conflicting);
        Ok(copies
            .map(|(seq, event, _)| ConflictingCopy {
                seq: *seq,
                header: event.header().clone(),
                quantity: if let Event::Usage(u) = event { u.quantity } else { 0 },
            })
            .collect())
    }

    fn for_each_usage(&self, mut each: impl FnMut(UsageRow<'_>)) -> Result<u64, ReadError> {
        let mut count = 0;
        for (seq, event) in self.recorded() {
            if let Event::Usage(u) = event {
                count += 1;
                each(UsageRow {
                    seq,
                    tenant: &u.header.tenant,
                    subject: u.header.subject.as_deref(),
                    project: u.header.project.as_deref(),
                    api_key: u.header.api_key.as_deref(),
                    metric: &u.header.metric,
                    occurred_at: u.header.occurred_at,
                    quantity: u.quantity,
                    event_id: &u.header.event_id,
                    correction: false,
                });
            }
        }
        Ok(count)
    }

    fn event_ids(&self, seqs: &[u64], known: &FxHashMap<u64, &str>) -> Result<Vec<String>, ReadError> {
        Ok(seqs
            .iter()
            .map(|seq| match known.get(seq) {
                Some(id) => id.to_string(),
                None => self.entries[*seq as usize - 1].1.header().event_id.clone(),
            })
            .collect())
    }

    fn allowed_open(&self, as_of: Timestamp) -> Result<Vec<AllowedOpen>, ReadError> {
        let mut open: BTreeMap<(String, String), (u64, i64)> = BTreeMap::new();
        for (_, event) in self.recorded() {
            if let Event::Decision(d) = event
                && d.reason == Reason::FAIL_OPEN
                && d.header.occurred_at < as_of
            {
                let sum = open.entry((d.header.tenant.clone(), d.header.metric.clone())).or_default();
                *sum = (sum.0 + 1, sum.1 + d.amount);
            }
        }
        Ok(open
            .into_iter()
            .map(|((tenant, metric), (decisions, amount))| AllowedOpen { tenant, metric, decisions, amount })
            .collect())
    }

    fn alerts_between(&self, from: Timestamp, to: Timestamp) -> Result<Vec<AlertEvent>, ReadError> {
        let in_range = |a: &&AlertEvent| a.header.occurred_at >= from && a.header.occurred_at < to;
        let alerts = self.recorded().filter_map(|(_, e)| if let Event::Alert(a) = e { Some(a) } else { None });
        Ok(alerts.filter(in_range).cloned().collect())
    }

    fn alert_ids(&self) -> Result<std::collections::HashSet<String>, ReadError> {
        let alerts = self.recorded().filter_map(|(_, e)| if let Event::Alert(a) = e { Some(a) } else { None });
        Ok(alerts.map(|a| a.alert_id.clone()).collect())
    }

    fn decision_tallies(
        &self,
        tenant: Option<&str>,
        metric: &str,
        (from, to): (Timestamp, Timestamp),
        (policy_id, version): (&str, i32),
    ) -> Result<Vec<(String, ledger::DecisionTally)>, ReadError> {
        let mut tallies: BTreeMap<String, ledger::DecisionTally> = BTreeMap::new();
        for (_, event) in self.recorded() {
            if let Event::Decision(d) = event
                && tenant.is_none_or(|t| t == d.header.tenant)
                && d.header.metric == metric
                && d.header.occurred_at >= from
                && d.header.occurred_at < to
            {
                let tally = tallies.entry(d.header.tenant.clone()).or_default();
                tally.decisions += 1;
                let by_it = d.policy_id.as_deref() == Some(policy_id) && d.policy_version == Some(version);
                if by_it && (d.outcome == Outcome::DENIED || d.reason == Reason::SHADOW_DENIED) {
                    tally.denied += 1;
                }
            }
        }
        Ok(tallies.into_iter().collect())
    }
}

fn plan(memory: &Memory) -> Plan {
    plan_from(memory, at(AS_OF), &mut |_| {}).unwrap()
}

/// (kind, amount, refs) of each adjustment, in the plan's order.
fn adjustments(plan: &Plan) -> Vec<(AdjustmentKind, i64, Vec<&str>)> {
    plan.adjustments.iter().map(|a| (a.kind, a.amount, a.refs.iter().map(String::as_str).collect())).collect()
}

// Proves contract §5 "Overshoot": a HARD window's consumption above its limit is one OVERSHOOT of the difference,
// naming the event that crossed the limit.
#[test]
fn a_window_over_its_hard_limit_is_an_overshoot_naming_the_crosser() {
    let mut memory = Memory::default();
    memory.record(hard_daily_limit(10));
    memory.record(usage("u-1", "2026-10-03T09:00:00Z", 6));
    memory.record(usage("u-2", "2026-10-03T10:00:00Z", 6));
    memory.record(usage("u-3", "2026-10-04T10:00:00Z", 6));
    let plan = plan(&memory);
    assert_eq!(adjustments(&plan), [(AdjustmentKind::OVERSHOOT, 2, vec!["u-2"])]);
    let overshoot = &plan.adjustments[0];
    assert_eq!(
        (overshoot.window_start, overshoot.window_end),
        (Some(at("2026-10-03T00:00:00Z")), Some(at("2026-10-04T00:00:00Z")))
    );
    assert_eq!(plan.counts.usage_events, 3);
    assert_eq!(plan.counts.windows_judged, 2);
    assert_eq!(plan.watermark, 4);
}

// Proves that a HARD quota of 10 a day with its overage throttled at 2 a minute is no overshoot for what
// went beyond the limit at that rate (a bucket of 2 plus 2 a minute from the first event beyond it, 23:57, to the
// day's end: 8); only what passed that is, naming the events beyond it. A late event that passes it adds the delta.
#[test]
fn a_throttled_overage_is_an_overshoot_only_beyond_its_allowance() {
    let mut memory = Memory::default();
    let Event::Policy(mut throttled) = hard_daily_limit(10) else { unreachable!("a policy") };
    (throttled.overage_rate, throttled.overage_window) = (Some(2), Some(Window::MINUTE));
    memory.record(Event::Policy(throttled));
    memory.record(usage("u-1", "2026-10-03T09:00:00Z", 10));
    memory.record(usage("u-2", "2026-10-03T23:57:00Z", 4));
    memory.record(usage("u-3", "2026-10-03T23:59:00Z", 4));
    let within = plan(&memory);
    assert_eq!(adjustments(&within), [], "18 of 10 + 8 allowed");
    memory.record(usage("u-4", "2026-10-03T23:59:30Z", 3));
    let beyond = plan(&memory);
    assert_eq!(adjustments(&beyond), [(AdjustmentKind::OVERSHOOT, 3, vec!["u-4"])]);
    memory.apply(&beyond);
    assert_eq!(adjustments(&plan(&memory)), [], "a rerun adds nothing");
    memory.record(usage("u-5", "2026-10-03T23:59:40Z", 1));
    assert_eq!(adjustments(&plan(&memory)), [(AdjustmentKind::OVERSHOOT, 1, vec!["u-4", "u-5"])]);
}

// Proves contract §5 "Reservations": a RESERVE with no valid close by its expiry is expired, for the amount it held,
// and a COMMIT after the expiry is a refused transition, not consumption.
#[test]
fn a_reservation_never_closed_in_time_expires() {
    let mut memory = Memory::default();
    memory.record(hard_daily_limit(10));
    let reserve = reservation("res-1", ReservationAction::RESERVE, "2026-10-03T09:00:00Z", 8);
    memory.record(Event::Reservation(ReservationEvent { expires_at: Some(at("2026-10-03T09:05:00Z")), ..reserve }));
    memory.record(Event::Reservation(reservation("com-1", ReservationAction::COMMIT, "2026-10-03T09:10:00Z", 20)));
    let plan = plan(&memory);
    assert_eq!(
        adjustments(&plan),
        [
            (AdjustmentKind::RESERVATION_EXPIRED, 8, vec!["res-1"]),
            (AdjustmentKind::REFUSED_TRANSITION, 20, vec!["com-1"]),
        ]
    );
    assert_eq!((plan.counts.reservation_events, plan.counts.valid_commits), (2, 0));
}

// A lease that expired unreleased (as its renewal moved it) is reported per tenant and adjusted as an
// expired reservation of its one slot; one released in time, and one whose renewal outlives `as_of`, are not; a stale
// holder's release is a refused transition.
#[test]
fn leases_expired_unreleased_are_reported_per_tenant() {
    let mut memory = Memory::default();
    let lease = |event_id: &str, id: &str, action, occurred_at: &str, expires_at: Option<&str>, token: i64| {
        let amount = i64::from(action == ReservationAction::RESERVE);
        let event = ReservationEvent {
            reservation_id: id.into(),
            expires_at: expires_at.map(at),
            fencing_token: Some(token),
            ..reservation(event_id, action, occurred_at, amount)
        };
        Event::Reservation(event)
    };
    use ReservationAction::{RELEASE, RENEW, RESERVE};
    memory.record(lease("l1", "lease-1", RESERVE, "2026-10-03T09:00:00Z", Some("2026-10-03T09:01:00Z"), 1));
    memory.record(lease("l1-renew", "lease-1", RENEW, "2026-10-03T09:00:30Z", Some("2026-10-03T09:05:00Z"), 1));
    memory.record(lease("l1-stale", "lease-1", RELEASE, "2026-10-03T09:02:00Z", None, 9));
    memory.record(lease("l2", "lease-2", RESERVE, "2026-10-03T09:00:00Z", Some("2026-10-03T09:01:00Z"), 2));
    memory.record(lease("l2-release", "lease-2", RELEASE, "2026-10-03T09:00:40Z", None, 2));
    memory.record(lease("l3", "lease-3", RESERVE, "2026-10-03T09:00:00Z", Some("2026-10-03T09:01:00Z"), 3));
    memory.record(lease("l3-renew", "lease-3", RENEW, "2026-10-03T09:00:50Z", Some("2099-01-01T00:00:00Z"), 3));
    let plan = plan(&memory);
    assert_eq!(
        adjustments(&plan),
        [
            (AdjustmentKind::RESERVATION_EXPIRED, 1, vec!["l1"]),
            (AdjustmentKind::REFUSED_TRANSITION, 0, vec!["l1-stale"])
        ]
    );
    assert_eq!(plan.counts.leases_expired, BTreeMap::from([("org-1".to_string(), 1)]));
}

// Proves contract §4.3 and 5 "Reported once each": a conflicting copy is reported with its quantity and never counted,
// so it pushes no window over its limit.
#[test]
fn a_conflicting_duplicate_is_reported_not_counted() {
    let mut memory = Memory::default();
    memory.record(hard_daily_limit(10));
    memory.record(usage("u-1", "2026-10-03T09:00:00Z", 6));
    memory.conflicting_copy(usage("u-1", "2026-10-03T09:00:00Z", 9));
    let plan = plan(&memory);
    assert_eq!(adjustments(&plan), [(AdjustmentKind::CONFLICTING_DUPLICATE, 9, vec!["u-1"])]);
    assert_eq!(plan.counts.conflicting_copies, 1);
}

// Proves contract §3 "a rerun writes nothing new": once a run's adjustments are recorded, the same inputs and as_of
// plan nothing, and a new event adds only its delta.
#[test]
fn a_rerun_writes_nothing_and_a_later_event_only_its_delta() {
    let mut memory = Memory::default();
    memory.record(hard_daily_limit(10));
    memory.record(usage("u-1", "2026-10-03T09:00:00Z", 12));
    memory.conflicting_copy(usage("u-1", "2026-10-03T09:00:00Z", 1));
    let first = plan(&memory);
    assert_eq!(first.adjustments.len(), 2);
    memory.apply(&first);
    let rerun = plan(&memory);
    assert!(rerun.is_clean(), "{:?}", rerun.adjustments);
    assert_eq!(rerun.counts.adjustments_before, 2);

    memory.record(usage("u-2", "2026-10-03T11:00:00Z", 3));
    // The adjustment names every event over the limit: the crosser, and the new one above it.
    assert_eq!(adjustments(&plan(&memory)), [(AdjustmentKind::OVERSHOOT, 3, vec!["u-1", "u-2"])]);
}

// A gauge metric's usage events are levels, not consumption. The tenant's gauge of `tokens` reports
// the hours its level stood above the limit, as a count and no adjustment (the run stays clean); the plan's HARD quota
// of the same metric, which the gauge does not cover, sums none of the readings (it would be 300 over 10), and nothing
// of the metric counts as late usage of a closed month either.
#[test]
fn gauge_readings_are_levels_reported_over_their_limit_never_an_overshoot() {
    let mut memory = Memory::default();
    let Event::Policy(quota) = hard_daily_limit(10) else { unreachable!("a policy") };
    let gauge = PolicyEvent {
        header: Header { event_id: "g-1-v1".into(), ..quota.header.clone() },
        policy_id: "g-1".into(),
        limit: 100,
        violation: Some(Violation::NO_WRITES),
        window_seconds: None,
        cycle_anchor: None,
        alert_thresholds: None,
        alert_subject_share: None,
        ..quota.clone()
    };
    memory
        .record(Event::Policy(PolicyEvent { header: Header { tenant: "*".into(), ..quota.header.clone() }, ..quota }));
    memory.record(Event::Policy(gauge));
    memory.record(usage("level-1", "2026-10-03T09:00:00Z", 150));
    memory.record(usage("level-2", "2026-10-03T12:00:00Z", 50));
    memory.record(usage("level-3", "2026-10-03T22:00:00Z", 120));
    let closed_at = at("2026-11-01T00:00:00Z");
    memory.closes.push(PeriodClose { period: "2026-10".parse().unwrap(), watermark: 5, closed_at });
    memory.record(usage("level-late", "2026-10-31T23:00:00Z", 80));
    let plan = plan(&memory);
    assert!(plan.is_clean(), "{:?}", plan.adjustments);
    let over: Vec<(&str, Timestamp, i64, i64, u64)> = plan
        .counts
        .gauges_over_limit
        .iter()
        .map(|g| (g.policy_id.as_str(), g.window_start, g.limit, g.peak, g.over_ms))
        .collect();
    // 150 from 09:00 to 12:00, 120 from 22:00 to the day's end, and on to the late reading of 80 at 23:00 on the 31st.
    let hour = 3_600_000;
    let mut expected = vec![("g-1", at("2026-10-03T00:00:00Z"), 100, 150, 5 * hour)];
    for day in 4..=30 {
        expected.push(("g-1", at(&format!("2026-10-{day:02}T00:00:00Z")), 100, 120, 24 * hour));
    }
    expected.push(("g-1", at("2026-10-31T00:00:00Z"), 100, 120, 23 * hour));
    assert_eq!(over, expected);
    assert_eq!(plan.counts.usage_events, 4);
    assert_eq!(plan.counts.windows_judged, 0, "no window sums a level");
}

/// (kind, threshold_percent, observed, window_start) of each alert a plan writes, in its order.
fn alerts(plan: &Plan) -> Vec<(AlertKind, i32, i64, Option<Timestamp>)> {
    plan.alerts.iter().map(|a| (a.kind, a.threshold_percent, a.observed, a.window_start)).collect()
}

// Proves that a window whose usage came only through ingest (no request the hook allowed reached its
// thresholds) is alerted by the run, at each threshold reached, once: a rerun writes none, one the hook recorded is
// not written again, and the next threshold reached is written alone. Windows ended more than a day before `as_of`
// (October's) are history, not alerted.
#[test]
fn thresholds_no_request_reached_are_alerted_once_by_the_run() {
    let mut memory = Memory::default();
    memory.record(hard_daily_limit(10));
    memory.record(usage("u-old", "2026-10-03T09:00:00Z", 10));
    memory.record(usage("u-1", "2026-11-14T09:00:00Z", 9));
    let day = (at("2026-11-14T00:00:00Z"), at("2026-11-15T00:00:00Z"));
    let hook_alert = {
        let id = rules::alert::alert_id(AlertKind::THRESHOLD, TENANT, "p-1", (Scope::TENANT, None), day, 90);
        AlertEvent {
            header: Header { source: "hook".into(), ..header(&id, "2026-11-14T09:30:00Z") },
            alert_id: id,
            kind: AlertKind::THRESHOLD,
            policy_id: Some("p-1".into()),
            policy_version: Some(1),
            scope: Some(Scope::TENANT),
            window_start: Some(day.0),
            window_end: Some(day.1),
            threshold_percent: 90,
            limit: Some(10),
            observed: 9,
            request_id: Some("req-1".into()),
        }
    };
    memory.record(Event::Alert(hook_alert));
    let first = plan(&memory);
    assert_eq!(alerts(&first), [(AlertKind::THRESHOLD, 80, 9, Some(day.0))], "90% was the hook's");
    assert!(first.is_clean(), "an alert is no adjustment");
    let written = &first.alerts[0];
    assert_eq!(
        (written.header.occurred_at, written.header.source.as_str()),
        (at("2026-11-14T23:59:59.999999Z"), "reconcile")
    );
    assert_eq!(first.counts.alerts.len(), 2, "the hook's of the day, and the run's");
    memory.apply(&first);
    assert_eq!(alerts(&plan(&memory)), [], "a rerun writes none");
    memory.record(usage("u-2", "2026-11-14T10:00:00Z", 2));
    assert_eq!(alerts(&plan(&memory)), [(AlertKind::THRESHOLD, 100, 11, Some(day.0))]);
}

// Proves OPEN_TOO_LONG: a reservation held two hours before its COMMIT and a lease renewed for ever
// are alerted once each, when they had been held an hour; one committed in half an hour is not, until a run is set to
// alert after 20 minutes, which alerts it alone.
#[test]
fn reservations_and_leases_held_past_an_hour_are_alerted_once() {
    let mut memory = Memory::default();
    memory.record(hard_daily_limit(1_000));
    let held = |id: &str, event_id: &str, action, occurred_at: &str, expires_at: Option<&str>, token| {
        Event::Reservation(ReservationEvent {
            reservation_id: id.into(),
            expires_at: expires_at.map(at),
            fencing_token: token,
            ..reservation(event_id, action, occurred_at, 1)
        })
    };
    use ReservationAction::{COMMIT, RENEW, RESERVE};
    memory.record(held("slow", "slow-r", RESERVE, "2026-11-14T10:00:00Z", Some("2026-11-14T13:00:00Z"), None));
    memory.record(held("slow", "slow-c", COMMIT, "2026-11-14T12:00:00Z", None, None));
    memory.record(held("quick", "quick-r", RESERVE, "2026-11-14T10:00:00Z", Some("2026-11-14T13:00:00Z"), None));
    memory.record(held("quick", "quick-c", COMMIT, "2026-11-14T10:30:00Z", None, None));
    memory.record(held("job", "job-r", RESERVE, "2026-11-14T20:00:00Z", Some("2026-11-14T20:01:00Z"), Some(1)));
    memory.record(held("job", "job-renew", RENEW, "2026-11-14T20:00:30Z", Some("2099-01-01T00:00:00Z"), Some(1)));
    let first = plan(&memory);
    let mut open: Vec<_> =
        first.alerts.iter().map(|a| (a.request_id.as_deref(), a.observed, a.header.occurred_at)).collect();
    open.sort();
    let held_for = |hours: i64| hours * 3_600;
    assert_eq!(
        open,
        [
            (Some("job"), held_for(4), at("2026-11-14T21:00:00Z")),
            (Some("slow"), held_for(2), at("2026-11-14T11:00:00Z"))
        ]
    );
    assert!(first.alerts.iter().all(|a| a.kind == AlertKind::OPEN_TOO_LONG && a.limit == Some(3_600)));
    memory.apply(&first);
    assert_eq!(alerts(&plan(&memory)), [], "a rerun writes none");
    let shorter = crate::AlertSettings { open_too_long_micros: 20 * 60 * 1_000_000 };
    let with = |memory: &Memory| crate::plan_from_with(memory, at(AS_OF), shorter, &mut |_| {}).unwrap();
    let quick: Vec<_> = with(&memory).alerts.iter().map(|a| (a.request_id.clone(), a.limit)).collect();
    assert_eq!(
        quick,
        [(Some("quick".to_string()), Some(1_200))],
        "held 30 minutes, past 20: alerted; the others not again"
    );
}

// Proves DENY_RATE: version 2 of a policy, effective at 10:00, denied 20 of the tenant's 30 requests
// in its first hour (66%), against 1 of 30 under version 1 in the hour before (3%): one alert, once. A version whose
// first hour saw fewer than 20 decisions says nothing.
#[test]
fn a_version_that_denies_far_more_in_its_first_hour_is_alerted_once() {
    let mut memory = Memory::default();
    memory.record(hard_daily_limit(1_000));
    let Event::Policy(v1) = hard_daily_limit(1_000) else { unreachable!("a policy") };
    let v2 = PolicyEvent {
        header: header("p-1-v2", "2026-11-14T09:59:00Z"),
        version: 2,
        limit: 5,
        effective_from: at("2026-11-14T10:00:00Z"),
        ..v1
    };
    memory.record(Event::Policy(v2));
    let decide = |n: usize, hour: u32, version: i32, denied: usize| {
        (0..n).map(move |i| {
            let (outcome, reason) = if i < denied {
                (Outcome::DENIED, Reason::QUOTA_EXCEEDED)
            } else {
                (Outcome::ALLOWED, Reason::WITHIN_LIMIT)
            };
            Event::Decision(DecisionEvent {
                header: header(&format!("d-{hour}-{i}"), &format!("2026-11-14T{hour:02}:{:02}:00Z", i)),
                request_id: format!("req-{hour}-{i}"),
                idempotency_key: format!("key-{hour}-{i}"),
                amount: 1,
                outcome,
                reason,
                policy_id: Some("p-1".into()),
                policy_version: Some(version),
                window_start: None,
                window_end: None,
                limit: None,
                used_before: None,
                remaining: None,
                retry_after_ms: None,
                token_name: None,
            })
        })
    };
    for event in decide(30, 9, 1, 1).chain(decide(30, 10, 2, 20)) {
        memory.record(event);
    }
    let first = plan(&memory);
    assert_eq!(alerts(&first), [(AlertKind::DENY_RATE, 13, 66, Some(at("2026-11-14T10:00:00Z")))], "3% + 10 needed");
    assert_eq!((first.alerts[0].policy_version, first.alerts[0].limit), (Some(2), Some(3)));
    memory.apply(&first);
    assert_eq!(alerts(&plan(&memory)), [], "a rerun writes none");

    let mut few = Memory::default();
    few.record(hard_daily_limit(1_000));
    few.entries.push((2, memory.entries[1].1.clone(), false));
    for event in decide(30, 9, 1, 1).chain(decide(19, 10, 2, 19)) {
        few.record(event);
    }
    assert_eq!(alerts(&plan(&few)), [], "19 decisions are too few to say");
}

// Proves SUBJECT_SHARE: in a window of a TENANT policy that sets a share of 50%, alice's 7 of the
// tenant's 10 is alerted, once; bob's 2 is not, nor usage naming no subject. A window where alice consumed alone is no
// share.
#[test]
fn a_subject_above_its_policys_share_of_the_tenant_is_alerted_once() {
    let mut memory = Memory::default();
    let Event::Policy(mut policy) = hard_daily_limit(1_000) else { unreachable!("a policy") };
    policy.alert_subject_share = Some(50);
    memory.record(Event::Policy(policy));
    let of = |subject: Option<&str>, event_id: &str, occurred_at: &str, quantity| {
        let Event::Usage(mut u) = usage(event_id, occurred_at, quantity) else { unreachable!("usage") };
        u.header.subject = subject.map(String::from);
        Event::Usage(u)
    };
    memory.record(of(Some("alice"), "u-1", "2026-11-14T09:00:00Z", 7));
    memory.record(of(Some("bob"), "u-2", "2026-11-14T10:00:00Z", 2));
    memory.record(of(None, "u-3", "2026-11-14T11:00:00Z", 1));
    let first = plan(&memory);
    let day = at("2026-11-14T00:00:00Z");
    assert_eq!(alerts(&first), [(AlertKind::SUBJECT_SHARE, 50, 7, Some(day))]);
    let alert = &first.alerts[0];
    assert_eq!(
        (alert.header.subject.as_deref(), alert.limit, alert.scope),
        (Some("alice"), Some(10), Some(Scope::TENANT))
    );
    memory.apply(&first);
    assert_eq!(alerts(&plan(&memory)), [], "a rerun writes none");

    let mut alone = Memory::default();
    alone.record(memory.entries[0].1.clone());
    alone.record(of(Some("alice"), "u-1", "2026-11-14T09:00:00Z", 7));
    assert_eq!(alerts(&plan(&alone)), [], "one subject");
}
