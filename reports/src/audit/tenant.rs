//! `audit tenant TENANT --from .. --to ..`: a tenant's decisions, consumption per UTC day, reservations and
//! adjustments over a time range, read at one watermark through the ledger's typed reads.

use std::collections::{BTreeMap, HashMap};

use ledger::{AdjustmentRecord, Ledger};
use rules::window;
use schemas::{AdjustmentKind, ReservationAction, ReservationEvent, Timestamp, Window};
use serde::Serialize;

use super::why::At;
use crate::error::ReportError;

/// A tenant's history over `[from, to)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Timeline {
    /// The tenant asked about.
    pub tenant: String,
    /// The range's start, included.
    pub from: Timestamp,
    /// The range's end, excluded.
    pub to: Timestamp,
    /// The ledger watermark the answer was computed at.
    pub watermark: u64,
    /// The tenant's decisions in the range, in event time.
    pub decisions: Vec<DecisionLine>,
    /// Per UTC day and metric.
    pub consumption: Vec<DayConsumption>,
    /// Reservations whose RESERVE occurred in the range.
    pub reservations: Vec<ReservationLine>,
    /// Adjustments whose window overlaps the range, and those without a window (expiries, refused transitions,
    /// conflicting duplicates) about an event that occurred in it.
    pub adjustments: Vec<AdjustmentLine>,
    /// Changes to its limits recorded in the range (event time): versions of its own policies and of the plan
    /// defaults, and its grants, with who made them and why.
    pub changes: Vec<ChangeLine>,
    /// The alerts written in the range: a window reaching a threshold of its limit, in ledger order.
    pub alerts: Vec<AlertLine>,
    /// The corrections of its usage whose original happened or which were made in the range, in ledger order, with
    /// who made them and why (absent from the JSON when there are none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub corrections: Vec<super::CorrectionLine>,
}

/// One alert of the timeline (contract §3 `AlertEvent`), with its ledger sequence number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AlertLine {
    /// Its ledger sequence number.
    pub seq: u64,
    /// When the threshold was reached.
    pub occurred_at: Timestamp,
    /// Its kind (`THRESHOLD`).
    pub kind: String,
    /// Its metric.
    pub metric: String,
    /// The member of the policy's scope (a subject, a project, an API key), when not the tenant's whole.
    pub member: Option<String>,
    /// The policy whose window reached it.
    pub policy_id: Option<String>,
    /// The window.
    pub window_start: Option<Timestamp>,
    /// Its end.
    pub window_end: Option<Timestamp>,
    /// The threshold reached, in percent of the effective limit.
    pub threshold_percent: i32,
    /// The effective limit then.
    pub limit: Option<i64>,
    /// The window's consumption and holds then.
    pub observed: i64,
    /// The request that reached it.
    pub request_id: Option<String>,
}

impl Timeline {
    fn is_empty(&self) -> bool {
        self.decisions.is_empty()
            && self.consumption.is_empty()
            && self.reservations.is_empty()
            && self.adjustments.is_empty()
            && self.alerts.is_empty()
            && self.corrections.is_empty()
    }
}

/// A tenant the ledger holds no event of, with the nearest tenants it has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnknownTenant {
    /// The tenant asked about.
    pub tenant: String,
    /// The nearest tenants the ledger holds, nearest first.
    pub nearest: Vec<String>,
    /// The (empty) timeline all the same: `--json` keeps every key a script reads for a known tenant.
    pub timeline: Timeline,
}

/// One decision of the timeline (contract §3 `DecisionEvent`), with its ledger sequence number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[allow(missing_docs)] // The DecisionEvent's own fields, by their contract §3 names.
pub struct DecisionLine {
    pub seq: u64,
    pub occurred_at: Timestamp,
    pub request_id: String,
    pub subject: Option<String>,
    pub metric: String,
    pub amount: i64,
    pub outcome: String,
    pub reason: String,
    pub policy_id: Option<String>,
    pub policy_version: Option<i64>,
    /// Whose copy of the policy the decision was made under: the tenant's own (its name) or the plan default (`*`),
    /// as `audit why` tells it; `None` without a policy, or when the ledger holds no such version.
    pub policy_owner: Option<String>,
}

/// A change to a tenant's limits: a policy version (its own or the plan default's) or a grant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChangeLine {
    /// When it was recorded (the event's `occurred_at`).
    pub occurred_at: Timestamp,
    /// `policy` or `grant`.
    pub kind: String,
    /// The tenant whose policy or grant it is; `*` for the plan default.
    pub owner: String,
    /// The metric.
    pub metric: String,
    /// The policy_id or grant_id.
    pub id: String,
    /// A policy's version.
    pub version: Option<i64>,
    /// What it says, in words: `limit 200 per DAY, HARD, TENANT scope, effective from ...`, `+25 from ... until ...`.
    pub change: String,
    /// Who made it, when recorded (PolicyEvent v3, GrantEvent v2).
    pub actor: Option<String>,
    /// Why.
    pub reason: Option<String>,
}

/// The consumption of one UTC day and metric.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DayConsumption {
    /// The day's first instant.
    pub window_start: Timestamp,
    /// The metric.
    pub metric: String,
    /// Counted usage.
    pub usage: i64,
    /// Valid COMMITs of reservations.
    pub commits: i64,
    /// Usage and commits.
    pub total: i64,
    /// Usage events and commits.
    pub events: u64,
}

impl DayConsumption {
    fn empty() -> DayConsumption {
        DayConsumption { window_start: Timestamp(0), metric: String::new(), usage: 0, commits: 0, total: 0, events: 0 }
    }
}

/// One reservation of the timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReservationLine {
    /// Its reservation_id.
    pub reservation_id: String,
    /// Its metric.
    pub metric: String,
    /// When its RESERVE occurred.
    pub reserved_at: Option<Timestamp>,
    /// What its RESERVE held.
    pub amount_held: Option<i64>,
    /// committed, released, expired or open, as of `to` (judged on the events before it); `+ N refused` when
    /// transitions before `to` were refused.
    pub state: String,
    /// What its valid COMMIT consumed.
    pub committed: Option<i64>,
}

/// One adjustment of the timeline (contract §3 `AdjustmentEvent`), with its ledger sequence number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AdjustmentLine {
    /// Its ledger sequence number.
    pub seq: u64,
    /// The `--as-of` of the reconcile run that wrote it.
    pub occurred_at: Timestamp,
    /// Its kind, as stored.
    pub kind: String,
    /// Its metric.
    pub metric: String,
    /// The subject of a SUBJECT window.
    pub subject: Option<String>,
    /// The policy whose window it is about.
    pub policy_id: Option<String>,
    /// The window it is about.
    pub window_start: Option<Timestamp>,
    /// Its end.
    pub window_end: Option<Timestamp>,
    /// Its amount (a delta).
    pub amount: i64,
    /// The event_ids it is about.
    pub refs: Vec<String>,
    /// Without a window: when the event it is about occurred (the reservation's RESERVE, the refused event, the
    /// conflicting copy), which puts it in the range.
    pub event_occurred_at: Option<Timestamp>,
}

/// The timeline of `tenant` over `[from, to)`; for a tenant the ledger holds no event of at all (a typo, most
/// likely), the nearest tenants it has instead. A known tenant with nothing in the range gets its empty timeline.
pub fn timeline(
    ledger: &Ledger,
    tenant: &str,
    from: Timestamp,
    to: Timestamp,
) -> Result<Result<Timeline, UnknownTenant>, ReportError> {
    let at = At { ledger, watermark: ledger.watermark()? };
    let timeline = read_timeline(&at, tenant, from, to)?;
    // Only an empty timeline asks whether the tenant is known: a tenant with events in the range is.
    if !timeline.is_empty() || ledger.holds_tenant(tenant, at.watermark)? {
        return Ok(Ok(timeline));
    }
    let nearest = super::nearest(tenant, |offer| Ok(ledger.for_each_tenant(at.watermark, offer)?))?;
    Ok(Err(UnknownTenant { tenant: tenant.to_string(), nearest, timeline }))
}

/// [`timeline`] over a set of shards (contract §9.4): read in the tenant's shard only, which holds all of its events;
/// a tenant unknown there gets the nearest tenants of every shard (a mistyped tenant hashes to another shard).
pub fn timeline_in(
    shards: &[(ledger::shards::Shard, Ledger)],
    tenant: &str,
    from: Timestamp,
    to: Timestamp,
) -> Result<Result<Timeline, UnknownTenant>, ReportError> {
    let Some((_, ledger)) = shards.iter().find(|(shard, _)| shard.holds_tenant(tenant)) else {
        unreachable!("a complete set of shards holds every tenant")
    };
    let mut unknown = match timeline(ledger, tenant, from, to)? {
        Ok(known) => return Ok(Ok(known)),
        Err(unknown) => unknown,
    };
    unknown.nearest = super::nearest(tenant, |offer| {
        for (_, ledger) in shards {
            ledger.for_each_tenant(ledger.watermark()?, &mut *offer)?;
        }
        Ok(())
    })?;
    Ok(Err(unknown))
}

fn read_timeline(at: &At<'_>, tenant: &str, from: Timestamp, to: Timestamp) -> Result<Timeline, ReportError> {
    let mut days: BTreeMap<(Timestamp, String), DayConsumption> = BTreeMap::new();
    for usage in at.ledger.tenant_usage_per_day(tenant, (from, to), at.watermark)? {
        let day = days.entry((usage.day, usage.metric)).or_insert_with(DayConsumption::empty);
        day.usage = usage.quantity;
        day.events += usage.events;
    }
    let mut adjustments = Adjustments::new(at.ledger.tenant_adjustments(tenant, (from, to), at.watermark)?);
    let mut reservations = Vec::new();
    at.ledger.for_each_reservation_of(tenant, None, at.watermark, |group| {
        adjustments.note_reservation_events(group);
        let events: Vec<(u64, &ReservationEvent)> = group.iter().map(|(s, e)| (*s, e)).collect();
        // Consumption counts a COMMIT as reconcile does, judged on every event; the state is as of `to`.
        let verdict = rules::reservation::judge(&events, to);
        if let Some((seq, ReservationAction::COMMIT, amount)) = verdict.close {
            let commit = &group.iter().find(|(s, _)| *s == seq).expect("the close is in its group").1;
            let t = commit.header.occurred_at;
            if t >= from && t < to {
                let day = days
                    .entry((window::bounds(Window::DAY, t).0, commit.header.metric.clone()))
                    .or_insert_with(DayConsumption::empty);
                day.commits += amount;
                day.events += 1;
            }
        }
        let before_to: Vec<(u64, &ReservationEvent)> =
            events.into_iter().filter(|(_, e)| e.header.occurred_at < to).collect();
        let as_of_to = rules::reservation::judge(&before_to, to);
        let reserve = as_of_to.reserve.and_then(|s| group.iter().find(|(seq, _)| *seq == s)).map(|(_, e)| e);
        if reserve.is_some_and(|r| r.header.occurred_at >= from) {
            reservations.push(reservation_line(group, &as_of_to, reserve));
        }
    })?;
    if adjustments.wants_conflicting_copies() {
        for copy in at.ledger.conflicting_copies_of(tenant, at.watermark)? {
            adjustments.note_conflicting_copy(copy.header.event_id, copy.header.occurred_at);
        }
    }
    reservations.sort_by(|a, b| (a.reserved_at, &a.reservation_id).cmp(&(b.reserved_at, &b.reservation_id)));
    let consumption = days
        .into_iter()
        .map(|((day, metric), mut c)| {
            c.window_start = day;
            c.metric = metric;
            c.total = c.usage + c.commits;
            c
        })
        .collect();
    Ok(Timeline {
        tenant: tenant.to_string(),
        from,
        to,
        watermark: at.watermark,
        decisions: decisions(at, tenant, (from, to))?,
        consumption,
        reservations,
        adjustments: adjustments.in_range(from, to),
        changes: changes(at, tenant, (from, to))?,
        alerts: at
            .ledger
            .tenant_alerts(tenant, (from, to), at.watermark)?
            .into_iter()
            .map(|(seq, a)| AlertLine {
                seq,
                occurred_at: a.header.occurred_at,
                kind: a.kind.symbol().to_string(),
                member: a.header.subject.or(a.header.project).or(a.header.api_key),
                metric: a.header.metric,
                policy_id: a.policy_id,
                window_start: a.window_start,
                window_end: a.window_end,
                threshold_percent: a.threshold_percent,
                limit: a.limit,
                observed: a.observed,
                request_id: a.request_id,
            })
            .collect(),
        corrections: at
            .ledger
            .tenant_corrections(tenant, (from, to), at.watermark)?
            .into_iter()
            .map(super::CorrectionLine::from)
            .collect(),
    })
}

/// The versions of the tenant's policies and of the plan defaults, and its grants, recorded in `[from, to)`.
fn changes(at: &At<'_>, tenant: &str, (from, to): (Timestamp, Timestamp)) -> Result<Vec<ChangeLine>, ReportError> {
    let in_range = |t: Timestamp| t >= from && t < to;
    let mut lines: Vec<ChangeLine> = Vec::new();
    let owners = [tenant, rules::policy::PLAN_DEFAULT_TENANT];
    for p in at.ledger.policies_through(at.watermark)? {
        if !owners.contains(&p.header.tenant.as_str()) || !in_range(p.header.occurred_at) {
            continue;
        }
        let burst = p.burst.map_or(String::new(), |b| format!(", burst {b}"));
        let change = format!(
            "limit {} per {}{burst}, {}, {} scope, effective from {}",
            p.limit,
            p.window.label(p.window_seconds),
            p.enforcement.symbol(),
            p.scope.symbol(),
            p.effective_from
        );
        lines.push(ChangeLine {
            occurred_at: p.header.occurred_at,
            kind: "policy".into(),
            owner: p.header.tenant,
            metric: p.header.metric,
            id: p.policy_id,
            version: Some(i64::from(p.version)),
            change,
            actor: p.actor,
            reason: p.reason,
        });
    }
    let grants = at.ledger.grants_through(at.watermark)?.into_iter().filter(|((t, _), _)| t == tenant);
    for g in grants.flat_map(|(_, grants)| grants).filter(|g| in_range(g.header.occurred_at)) {
        let subject = g.header.subject.as_deref().map_or(String::new(), |s| format!(" for subject {s}"));
        lines.push(ChangeLine {
            occurred_at: g.header.occurred_at,
            kind: "grant".into(),
            owner: g.header.tenant,
            metric: g.header.metric,
            id: g.grant_id,
            version: None,
            change: format!("+{}{subject} from {} until {}", g.amount, g.valid_from, g.valid_until),
            actor: g.actor,
            reason: Some(g.reason),
        });
    }
    lines.sort_by(|a, b| (a.occurred_at, &a.kind, &a.id).cmp(&(b.occurred_at, &b.kind, &b.id)));
    Ok(lines)
}

fn reservation_line(
    group: &[(u64, ReservationEvent)],
    verdict: &rules::reservation::Verdict,
    reserve: Option<&ReservationEvent>,
) -> ReservationLine {
    let (mut state, committed) = match (verdict.close, verdict.expired) {
        (Some((_, ReservationAction::COMMIT, amount)), _) => ("committed".to_string(), Some(amount)),
        (Some(_), _) => ("released".to_string(), None),
        (None, Some(_)) => ("expired".to_string(), None),
        (None, None) => ("open".to_string(), None),
    };
    if !verdict.refused.is_empty() {
        state.push_str(&format!(" + {} refused", verdict.refused.len()));
    }
    ReservationLine {
        reservation_id: group[0].1.reservation_id.clone(),
        metric: group[0].1.header.metric.clone(),
        reserved_at: reserve.map(|r| r.header.occurred_at),
        amount_held: reserve.map(|r| r.amount),
        state,
        committed,
    }
}

/// The tenant's decisions in the range, each with the owner of the policy copy it was made under (the versions of
/// each policy_id read once).
fn decisions(at: &At<'_>, tenant: &str, range: (Timestamp, Timestamp)) -> Result<Vec<DecisionLine>, ReportError> {
    let mut lines = Vec::new();
    let mut versions: HashMap<(String, String), Vec<schemas::PolicyEvent>> = HashMap::new();
    for d in at.ledger.tenant_decisions(tenant, range, at.watermark)? {
        let mut line = DecisionLine {
            seq: d.seq,
            occurred_at: d.header.occurred_at,
            request_id: d.request_id,
            subject: d.header.subject,
            metric: d.header.metric,
            amount: d.amount,
            outcome: d.outcome,
            reason: d.reason,
            policy_id: d.policy_id,
            policy_version: d.policy_version.map(i64::from),
            policy_owner: None,
        };
        if let Some(policy_id) = &line.policy_id {
            let key = (policy_id.clone(), line.metric.clone());
            let versions = match versions.entry(key) {
                std::collections::hash_map::Entry::Occupied(known) => known.into_mut(),
                std::collections::hash_map::Entry::Vacant(new) => {
                    new.insert(super::why::policy_versions(at, policy_id, Some(&line.metric), tenant)?.0)
                }
            };
            let named = super::why::Named {
                tenant,
                metric: &line.metric,
                occurred_at: line.occurred_at,
                version: line.policy_version,
                window_start: d.window_start,
                window_end: d.window_end,
            };
            line.policy_owner = super::why::copy_applied(versions, &named).map(|i| versions[i].header.tenant.clone());
        }
        lines.push(line);
    }
    Ok(lines)
}

/// The adjustments a timeline may show, and the event times of the events those without a window are about.
/// Reconcile dates an adjustment at its run's `--as-of` (a month-end run exactly at the month's end), so
/// without a window only the events it names (`refs`) place it in time: a RESERVATION_EXPIRED or
/// REFUSED_TRANSITION names a reservation event of the tenant (found in the scan of its reservations the
/// timeline makes anyway), a CONFLICTING_DUPLICATE the event_id of a conflicting copy (found by the ledger's
/// small index of them).
struct Adjustments {
    lines: Vec<AdjustmentLine>,
    /// event_id -> event time, for the refs of adjustments without a window; `None` until found.
    reservation_events: HashMap<String, Option<Timestamp>>,
    /// event_id -> the event times of its conflicting copies.
    conflicting_copies: HashMap<String, Vec<Timestamp>>,
}

impl Adjustments {
    fn new(records: Vec<AdjustmentRecord>) -> Adjustments {
        let lines: Vec<AdjustmentLine> = records
            .into_iter()
            .map(|a| AdjustmentLine {
                seq: a.seq,
                occurred_at: a.header.occurred_at,
                kind: a.kind,
                metric: a.header.metric,
                subject: a.header.subject,
                policy_id: a.policy_id,
                window_start: a.window_start,
                window_end: a.window_end,
                amount: a.amount,
                refs: a.refs,
                event_occurred_at: None,
            })
            .collect();
        let (mut reservation_events, mut conflicting_copies) = (HashMap::new(), HashMap::new());
        for line in lines.iter().filter(|l| l.window_start.is_none()) {
            for event_id in &line.refs {
                if is_conflict(line) {
                    conflicting_copies.insert(event_id.clone(), Vec::new());
                } else {
                    reservation_events.insert(event_id.clone(), None);
                }
            }
        }
        Adjustments { lines, reservation_events, conflicting_copies }
    }

    fn note_reservation_events(&mut self, group: &[(u64, ReservationEvent)]) {
        for (_, event) in group {
            if let Some(time) = self.reservation_events.get_mut(&event.header.event_id) {
                *time = Some(event.header.occurred_at);
            }
        }
    }

    fn wants_conflicting_copies(&self) -> bool {
        !self.conflicting_copies.is_empty()
    }

    fn note_conflicting_copy(&mut self, event_id: String, occurred_at: Timestamp) {
        if let Some(times) = self.conflicting_copies.get_mut(&event_id) {
            times.push(occurred_at);
        }
    }

    /// The adjustments whose window overlaps `[from, to)`, or, without a window, about an event in it, in
    /// ledger order.
    fn in_range(self, from: Timestamp, to: Timestamp) -> Vec<AdjustmentLine> {
        let within = |t: &Timestamp| *t >= from && *t < to;
        let mut kept = Vec::new();
        for mut line in self.lines {
            if line.window_start.is_some() {
                kept.push(line);
                continue;
            }
            let times: Vec<Timestamp> = line
                .refs
                .iter()
                .flat_map(|id| match is_conflict(&line) {
                    // Several copies of one event_id are told apart by nothing the adjustment holds: any will do.
                    true => self.conflicting_copies.get(id).cloned().unwrap_or_default(),
                    false => self.reservation_events.get(id).copied().flatten().into_iter().collect(),
                })
                .collect();
            let found = times.iter().copied().find(within).or(times.first().copied());
            // No event found (a kind this version does not know): the time the run wrote it for.
            if within(&found.unwrap_or(line.occurred_at)) {
                line.event_occurred_at = found;
                kept.push(line);
            }
        }
        kept
    }
}

fn is_conflict(line: &AdjustmentLine) -> bool {
    line.kind == AdjustmentKind::CONFLICTING_DUPLICATE.symbol()
}
