//! A tenant's consumption over time, for customers' dashboards (`GET /v1/usage`): per metric and window (hour, day or
//! month of a time zone's calendar, or the billing cycles of the metric's BILLING_CYCLE quota), optionally of one
//! subject, project or API key and grouped by one of them. Consumption is counted as billing and reconcile count it:
//! the counted usage events that occurred in the window, plus the valid COMMITs of reservations made there (judged
//! on every event of the reservation, [`rules::reservation::judge`]).

use std::collections::BTreeMap;

use ledger::{Ledger, TenantUsage};
use rules::cycle::Schedule;
use rules::policy::PolicyIndex;
use schemas::{Header, ReservationAction, ReservationEvent, Timestamp, Tz, Window};

use crate::error::ReportError;

/// The most windows one query may span: a month of hours is 744; a year of days 366.
pub const WINDOWS_MAX: usize = 1_000;

/// How wide each window is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Granularity {
    /// An hour of the time zone's clock.
    Hour,
    /// A day of the time zone's calendar.
    Day,
    /// A month of the time zone's calendar.
    Month,
    /// The billing cycles of the metric's BILLING_CYCLE quota in force (the tenant's own, else the plan's), in its
    /// anchor's zone.
    Cycle,
}

impl Granularity {
    /// The granularity named `name` (`hour`, `day`, `month`, `cycle`, any case).
    pub fn named(name: &str) -> Option<Granularity> {
        match name.to_ascii_lowercase().as_str() {
            "hour" => Some(Granularity::Hour),
            "day" => Some(Granularity::Day),
            "month" => Some(Granularity::Month),
            "cycle" => Some(Granularity::Cycle),
            _ => None,
        }
    }
}

/// A member field usage may be narrowed to and grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Member {
    /// The subject (an end user).
    Subject,
    /// The project.
    Project,
    /// The API key.
    ApiKey,
}

impl Member {
    /// The member named `name` (`subject`, `project`, `api_key`).
    pub fn named(name: &str) -> Option<Member> {
        match name {
            "subject" => Some(Member::Subject),
            "project" => Some(Member::Project),
            "api_key" => Some(Member::ApiKey),
            _ => None,
        }
    }

    fn of<'a>(self, (subject, project, api_key): Members<'a>) -> &'a Option<String> {
        match self {
            Member::Subject => subject,
            Member::Project => project,
            Member::ApiKey => api_key,
        }
    }
}

/// What a usage query asks.
#[derive(Debug, Clone)]
pub struct UsageQuery {
    /// The tenant.
    pub tenant: String,
    /// The range `[from, to)` of event time.
    pub from: Timestamp,
    /// Its end, excluded.
    pub to: Timestamp,
    /// How wide each window is.
    pub granularity: Granularity,
    /// The zone whose clock and calendar hours, days and months follow (a cycle follows its anchor's zone).
    pub zone: Tz,
    /// One metric only; every metric without it. A `Cycle` query needs one.
    pub metric: Option<String>,
    /// Only the consumption naming these members (subject, project, API key), each when given.
    pub only: BTreeMap<Member, String>,
    /// Split each window's consumption by this member's value (none for what names none).
    pub group_by: Option<Member>,
}

/// A query that cannot be answered as asked, in words for the caller (a 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct Unanswerable {
    /// The query field at fault.
    pub field: &'static str,
    /// Why.
    pub message: String,
}

/// The consumption of one metric in one window (of one group's member value, when grouped).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageRow {
    /// The metric.
    pub metric: String,
    /// The window's first instant, or the query's `from` when the window began before it.
    pub window_start: Timestamp,
    /// The window's end, or the query's `to` when the window ends after it.
    pub window_end: Timestamp,
    /// The group's member value (`group_by`); null for consumption naming none. Absent without `group_by`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<Option<String>>,
    /// The consumption: `usage` plus `commits`.
    pub value: i64,
    /// The counted usage events' quantities.
    pub usage: i64,
    /// The valid COMMITs' amounts.
    pub commits: i64,
    /// How many usage events and COMMITs were counted.
    pub events: u64,
}

/// A usage query's answer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// The ledger's watermark the answer was computed at.
    pub watermark: u64,
    /// Each window with consumption, by metric, then window, then group; windows without any are left out.
    pub data: Vec<UsageRow>,
}

/// The consumption `query` asks for, read from `ledger` at its watermark.
pub fn usage(ledger: &Ledger, query: &UsageQuery) -> Result<Result<Usage, Unanswerable>, ReportError> {
    if query.from >= query.to {
        return Ok(Err(Unanswerable { field: "to", message: "must be after from".into() }));
    }
    let watermark = ledger.watermark()?;
    let windows = match windows_of(ledger, query, watermark)? {
        Ok(windows) => windows,
        Err(unanswerable) => return Ok(Err(unanswerable)),
    };
    let mut sums = Sums { query, windows, rows: BTreeMap::new() };
    let metric = query.metric.as_deref();
    ledger.for_each_usage_of(&query.tenant, metric, (query.from, query.to), watermark, |u: TenantUsage| {
        sums.add(&u.metric, u.occurred_at, (&u.subject, &u.project, &u.api_key), u.quantity, 0);
    })?;
    ledger.for_each_reservation_of(&query.tenant, metric, watermark, |group| {
        let events: Vec<(u64, &ReservationEvent)> = group.iter().map(|(s, e)| (*s, e)).collect();
        // Consumption counts a COMMIT as billing does: judged on every event; expiry is not consumption.
        let verdict = rules::reservation::judge(&events, query.to);
        if let Some((seq, ReservationAction::COMMIT, amount)) = verdict.close {
            let commit = &group.iter().find(|(s, _)| *s == seq).expect("the close is in its group").1;
            let Header { occurred_at, metric, subject, project, api_key, .. } = &commit.header;
            if amount != 0 && *occurred_at >= query.from && *occurred_at < query.to {
                sums.add(metric, *occurred_at, (subject, project, api_key), 0, amount);
            }
        }
    })?;
    Ok(Ok(Usage { watermark, data: sums.rows.into_values().collect() }))
}

/// The subject, project and API key an event names.
type Members<'a> = (&'a Option<String>, &'a Option<String>, &'a Option<String>);

/// A query's consumption summed so far, by (metric, window, group).
struct Sums<'q> {
    query: &'q UsageQuery,
    windows: Windows,
    rows: BTreeMap<(String, usize, Option<Option<String>>), UsageRow>,
}

impl Sums<'_> {
    /// Counts `usage` and `commits` of `metric` at `t`, naming `members`, when the query asks for it.
    fn add(&mut self, metric: &str, t: Timestamp, members: Members<'_>, usage: i64, commits: i64) {
        let query = self.query;
        if query.only.iter().any(|(member, value)| member.of(members).as_deref() != Some(value.as_str())) {
            return;
        }
        let Some(index) = self.windows.index_of(t) else { return };
        let group = query.group_by.map(|member| member.of(members).clone());
        let windows = &self.windows;
        let row = self.rows.entry((metric.to_string(), index, group.clone())).or_insert_with(|| {
            // The window's bounds are clipped once, when its row is made, not for every event counted in it.
            let (window_start, window_end) = windows.clipped(index, query);
            UsageRow {
                metric: metric.to_string(),
                window_start,
                window_end,
                group,
                value: 0,
                usage: 0,
                commits: 0,
                events: 0,
            }
        });
        row.usage = row.usage.saturating_add(usage);
        row.commits = row.commits.saturating_add(commits);
        row.value = row.usage.saturating_add(row.commits);
        row.events += 1;
    }
}

/// The windows of a query: their starts in order, the last one's end after them.
struct Windows {
    starts: Vec<Timestamp>,
    end: Timestamp,
}

impl Windows {
    /// The window containing `t`, when one does.
    fn index_of(&self, t: Timestamp) -> Option<usize> {
        if t >= self.end {
            return None;
        }
        self.starts.partition_point(|start| *start <= t).checked_sub(1)
    }

    /// `[start, end)` of window `index`, within the query's range.
    fn clipped(&self, index: usize, query: &UsageQuery) -> (Timestamp, Timestamp) {
        let end = self.starts.get(index + 1).copied().unwrap_or(self.end);
        (self.starts[index].max(query.from), end.min(query.to))
    }
}

/// The windows `[from, to)` spans at the query's granularity, at most [`WINDOWS_MAX`].
fn windows_of(
    ledger: &Ledger,
    query: &UsageQuery,
    watermark: u64,
) -> Result<Result<Windows, Unanswerable>, ReportError> {
    let bounds: Box<dyn Fn(Timestamp) -> (Timestamp, Timestamp) + '_> = match query.granularity {
        Granularity::Hour => Box::new(|t| rules::window::bounds_in(Window::HOUR, query.zone, t)),
        Granularity::Day => Box::new(|t| rules::window::bounds_in(Window::DAY, query.zone, t)),
        Granularity::Month => Box::new(|t| rules::window::bounds_in(Window::MONTH, query.zone, t)),
        Granularity::Cycle => {
            let Some(metric) = &query.metric else {
                return Ok(Err(Unanswerable { field: "metric", message: "granularity cycle needs a metric".into() }));
            };
            let assignments = ledger.plan_assignments_through(watermark)?;
            let index = PolicyIndex::new(ledger.policies_through(watermark)?).with_assignments(&assignments);
            let Some(schedule) = cycle_schedule(&index, &query.tenant, metric) else {
                let message = format!("{} has no BILLING_CYCLE quota of {metric}, own or of the plan", query.tenant);
                return Ok(Err(Unanswerable { field: "granularity", message }));
            };
            Box::new(move |t| schedule.bounds(t))
        }
    };
    Ok(tiled((query.from, query.to), bounds))
}

/// The windows `bounds` tiles `[from, to)` with, at most [`WINDOWS_MAX`].
fn tiled(
    (from, to): (Timestamp, Timestamp),
    bounds: impl Fn(Timestamp) -> (Timestamp, Timestamp),
) -> Result<Windows, Unanswerable> {
    let mut starts = Vec::new();
    let mut t = from;
    while t < to {
        if starts.len() == WINDOWS_MAX {
            let message = format!("the range spans more than {WINDOWS_MAX} windows: a shorter range or wider windows");
            return Err(Unanswerable { field: "granularity", message });
        }
        let (start, end) = bounds(t);
        starts.push(start);
        t = end;
    }
    Ok(Windows { starts, end: t })
}

/// The billing cycles of `tenant`'s `metric`: those of its own BILLING_CYCLE quota, else the plan's.
fn cycle_schedule(index: &PolicyIndex, tenant: &str, metric: &str) -> Option<Schedule> {
    let of = |owner: &str| {
        let mut by_policy: BTreeMap<&str, Vec<&schemas::PolicyEvent>> = BTreeMap::new();
        for p in index.policies().iter().filter(|p| p.header.tenant == owner && p.header.metric == metric) {
            by_policy.entry(p.policy_id.as_str()).or_default().push(p);
        }
        by_policy.into_values().find_map(|versions| rules::policy::cycle_schedule(versions.into_iter()))
    };
    of(tenant).or_else(|| of(rules::policy::PLAN_DEFAULT_TENANT))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        testkit::fixtures::at(text)
    }

    fn windows(starts: &[&str], end: &str) -> Windows {
        Windows { starts: starts.iter().map(|s| at(s)).collect(), end: at(end) }
    }

    // Proves an instant falls in the window whose start is the last at or before it, and none past the end.
    #[test]
    fn an_instant_falls_in_its_window() {
        let w = windows(&["2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z"], "2026-11-03T00:00:00Z");
        assert_eq!(w.index_of(at("2026-10-31T23:59:59Z")), None);
        assert_eq!(w.index_of(at("2026-11-01T00:00:00Z")), Some(0));
        assert_eq!(w.index_of(at("2026-11-02T00:00:00Z")), Some(1));
        assert_eq!(w.index_of(at("2026-11-02T23:59:59Z")), Some(1));
        assert_eq!(w.index_of(at("2026-11-03T00:00:00Z")), None);
    }

    // Proves days of a zone's calendar follow its clock changes: Berlin's 25 October 2026 is 25 hours long (the
    // clocks go back at 03:00 CEST), and its days start at 22:00 UTC before it and 23:00 UTC after.
    #[test]
    fn days_of_a_zone_follow_its_clock_changes() {
        let zone: Tz = "Europe/Berlin".parse().unwrap();
        let day = |t| rules::window::bounds_in(Window::DAY, zone, t);
        let w = tiled((at("2026-10-24T12:00:00Z"), at("2026-10-26T12:00:00Z")), day).unwrap();
        let starts: Vec<String> = w.starts.iter().map(Timestamp::to_string).collect();
        assert_eq!(starts, ["2026-10-23T22:00:00Z", "2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z"]);
        assert_eq!(w.end, at("2026-10-26T23:00:00Z"));
        let hours = |t| rules::window::bounds_in(Window::HOUR, zone, t);
        let too_many = tiled((at("2026-01-01T00:00:00Z"), at("2026-03-01T00:00:00Z")), hours);
        assert_eq!(too_many.err().map(|e| e.field), Some("granularity"), "1,416 hours");
    }
}
