//! `audit tenant TENANT --from .. --to ..`: a tenant's decisions, consumption per UTC day, reservations and
//! adjustments over a time range, at one watermark.

use std::collections::BTreeMap;

use reconcile::window;
use schemas::{ReservationAction, ReservationEvent, Timestamp, Window};
use serde::Serialize;

use super::{frames, reservation_groups, text, time};
use crate::error::ReportError;
use crate::session::LedgerSession;

const DECISIONS: &str = include_str!("../../sql/tenant_decisions.sql");
const USAGE_PER_DAY: &str = include_str!("../../sql/tenant_usage_per_day.sql");
const ADJUSTMENTS: &str = include_str!("../../sql/tenant_adjustments.sql");

/// A tenant's history over `[from, to)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Timeline {
    pub tenant: String,
    pub from: Timestamp,
    pub to: Timestamp,
    pub watermark: u64,
    pub decisions: Vec<DecisionLine>,
    /// Per UTC day and metric.
    pub consumption: Vec<DayConsumption>,
    /// Reservations whose RESERVE occurred in the range.
    pub reservations: Vec<ReservationLine>,
    pub adjustments: Vec<AdjustmentLine>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DayConsumption {
    pub window_start: Timestamp,
    pub metric: String,
    pub usage: i64,
    /// Valid COMMITs of reservations.
    pub commits: i64,
    pub total: i64,
    /// Usage events and commits.
    pub events: u64,
}

impl DayConsumption {
    fn empty() -> DayConsumption {
        DayConsumption { window_start: Timestamp(0), metric: String::new(), usage: 0, commits: 0, total: 0, events: 0 }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReservationLine {
    pub reservation_id: String,
    pub metric: String,
    pub reserved_at: Option<Timestamp>,
    pub amount_held: Option<i64>,
    /// committed, released, expired or open, as of `to`; `+ N refused` when transitions were refused.
    pub state: String,
    pub committed: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AdjustmentLine {
    pub seq: u64,
    pub occurred_at: Timestamp,
    pub kind: String,
    pub metric: String,
    pub subject: Option<String>,
    pub policy_id: Option<String>,
    pub window_start: Option<Timestamp>,
    pub window_end: Option<Timestamp>,
    pub amount: i64,
}

/// The timeline of `tenant` over `[from, to)`.
pub fn timeline(
    session: &LedgerSession,
    tenant: &str,
    from: Timestamp,
    to: Timestamp,
) -> Result<Timeline, ReportError> {
    let range = vec![text(tenant), time(from), time(to)];
    let mut days: BTreeMap<(Timestamp, String), DayConsumption> = BTreeMap::new();
    for f in frames(session, USAGE_PER_DAY, range.clone())? {
        for r in 0..f.rows() {
            let day = days.entry((f.time("day", r), f.str("metric", r))).or_insert_with(DayConsumption::empty);
            day.usage = f.i64("usage", r);
            day.events += f.i64("events", r) as u64;
        }
    }
    let mut reservations = Vec::new();
    reservation_groups(session, tenant, None, |group| {
        let events: Vec<(u64, &ReservationEvent)> = group.iter().map(|(s, e)| (*s, e)).collect();
        let verdict = reconcile::reservation::judge(&events, to);
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
        let reserve = verdict.reserve.and_then(|s| group.iter().find(|(seq, _)| *seq == s)).map(|(_, e)| e);
        if reserve.is_some_and(|r| r.header.occurred_at >= from && r.header.occurred_at < to) {
            reservations.push(reservation_line(group, &verdict, reserve));
        }
    })?;
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
        watermark: session.watermark(),
        decisions: decisions(session, range.clone())?,
        consumption,
        reservations,
        adjustments: adjustments(session, range)?,
    })
}

fn reservation_line(
    group: &[(u64, ReservationEvent)],
    verdict: &reconcile::reservation::Verdict,
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

fn decisions(
    session: &LedgerSession,
    range: Vec<datafusion::common::ScalarValue>,
) -> Result<Vec<DecisionLine>, ReportError> {
    let mut lines = Vec::new();
    for f in frames(session, DECISIONS, range)? {
        for r in 0..f.rows() {
            lines.push(DecisionLine {
                seq: f.i64("seq", r) as u64,
                occurred_at: f.time("occurred_at", r),
                request_id: f.str("request_id", r),
                subject: f.opt_str("subject", r),
                metric: f.str("metric", r),
                amount: f.i64("amount", r),
                outcome: f.str("outcome", r),
                reason: f.str("reason", r),
                policy_id: f.opt_str("policy_id", r),
                policy_version: f.opt_i64("policy_version", r),
            });
        }
    }
    Ok(lines)
}

fn adjustments(
    session: &LedgerSession,
    range: Vec<datafusion::common::ScalarValue>,
) -> Result<Vec<AdjustmentLine>, ReportError> {
    let mut lines = Vec::new();
    for f in frames(session, ADJUSTMENTS, range)? {
        for r in 0..f.rows() {
            lines.push(AdjustmentLine {
                seq: f.i64("seq", r) as u64,
                occurred_at: f.time("occurred_at", r),
                kind: f.str("kind", r),
                metric: f.str("metric", r),
                subject: f.opt_str("subject", r),
                policy_id: f.opt_str("policy_id", r),
                window_start: f.opt_time("window_start", r),
                window_end: f.opt_time("window_end", r),
                amount: f.i64("amount", r),
            });
        }
    }
    Ok(lines)
}
