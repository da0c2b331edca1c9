//! contract §5's billing export computed again from a ledger's tables, independently of `export billing`: what the
//! billing tests (one ledger, and a cluster's shards joined) compare the export with, row by row.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use chrono::{Datelike, NaiveDate, NaiveDateTime, TimeDelta, TimeZone, Timelike};
use rusqlite::Connection;
use schemas::{Timestamp, Tz};

/// The CSV header of `export billing`.
pub const HEADER: &str = "tenant,metric,period,consumption,policy_id,policy_version,limit,grants,effective_limit,overage,overshoot,late_adjustments,watermark,gaps,cycle_start,cycle_end,plan";

/// One reservation event as the independent computation reads it.
struct Reservation {
    seq: i64,
    occurred_at: i64,
    tenant: String,
    metric: String,
    /// The project the event names, for the breakdown by project.
    project: Option<String>,
    action: String,
    amount: i64,
    expires_at: Option<i64>,
}

/// A policy version as the independent computation keeps it: (effective_from, version, limit, enforcement).
type Version = (i64, i64, i64, String);

/// contract §5 "Reservations", written again from the text: the first RESERVE holds; the first COMMIT or RELEASE by
/// event time (ties by ledger order) at or before its expires_at closes it; a COMMIT's amount is consumption.
fn valid_commit(events: &[Reservation]) -> Option<&Reservation> {
    let mut sorted: Vec<&Reservation> = events.iter().collect();
    sorted.sort_by_key(|e| (e.occurred_at, e.seq));
    let reserve = sorted.iter().find(|e| e.action == "RESERVE")?;
    let expires_at = reserve.expires_at?;
    let close = sorted.iter().find(|e| e.action != "RESERVE" && e.occurred_at <= expires_at)?;
    (close.action == "COMMIT").then_some(*close)
}

/// Every recorded reservation, by (tenant, reservation_id) (README "Reconciliation"), its events unordered.
fn reservations(conn: &Connection) -> BTreeMap<(String, String), Vec<Reservation>> {
    let mut reservations: BTreeMap<(String, String), Vec<Reservation>> = BTreeMap::new();
    let mut statement = conn
        .prepare(
            "SELECT r.reservation_id, e.seq, e.occurred_at, e.tenant, e.metric, r.action, r.amount, r.expires_at,
                    e.project
             FROM reservation_events r JOIN entries e ON e.seq = r.seq WHERE e.status = 'recorded'",
        )
        .unwrap();
    let rows = statement
        .query_map([], |r| {
            let event = Reservation {
                seq: r.get(1)?,
                occurred_at: r.get(2)?,
                tenant: r.get(3)?,
                metric: r.get(4)?,
                project: r.get(8)?,
                action: r.get(5)?,
                amount: r.get(6)?,
                expires_at: r.get(7)?,
            };
            Ok((r.get::<_, String>(0)?, event))
        })
        .unwrap();
    for row in rows {
        let (id, event) = row.unwrap();
        reservations.entry((event.tenant.clone(), id)).or_default().push(event);
    }
    reservations
}

/// `export billing --by project` computed straight from the ledger's tables: the consumption of `[start, end)` per
/// (tenant, metric), then per project (`""` for the consumption naming none), of every project that counted usage
/// or a valid COMMIT of a non-zero amount names.
pub fn expected_by_project(
    ledger: &Path,
    (start, end): (i64, i64),
) -> BTreeMap<(String, String), BTreeMap<String, i64>> {
    let conn = Connection::open(ledger).unwrap();
    let mut found: BTreeMap<(String, String), BTreeMap<String, i64>> = BTreeMap::new();
    let mut usage = conn
        .prepare(
            "SELECT e.tenant, e.metric, COALESCE(e.project, ''), u.quantity FROM usage_events u
             JOIN entries e ON e.seq = u.seq WHERE e.status = 'recorded' AND e.occurred_at >= ? AND e.occurred_at < ?",
        )
        .unwrap();
    let rows = usage.query_map([start, end], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get::<_, i64>(3)?))).unwrap();
    for row in rows {
        let (tenant, metric, project, quantity) = row.unwrap();
        *found.entry((tenant, metric)).or_default().entry(project).or_default() += quantity;
    }
    for events in reservations(&conn).values() {
        let in_period = |c: &&Reservation| c.amount != 0 && c.occurred_at >= start && c.occurred_at < end;
        if let Some(commit) = valid_commit(events).filter(in_period) {
            let project = commit.project.clone().unwrap_or_default();
            let key = (commit.tenant.clone(), commit.metric.clone());
            *found.entry(key).or_default().entry(project).or_default() += commit.amount;
        }
    }
    found
}

/// The expected CSV rows of `period` computed straight from the ledger's tables with the rules of contract §5.
pub fn expected_rows(ledger: &Path, period: (&str, i64, i64), watermark: u64) -> Vec<String> {
    let conn = Connection::open(ledger).unwrap();
    let (name, start, end) = period;
    let mut consumption: BTreeMap<(String, String), i64> = BTreeMap::new();
    let mut usage = conn
        .prepare(
            "SELECT e.tenant, e.metric, u.quantity FROM usage_events u JOIN entries e ON e.seq = u.seq
             WHERE e.status = 'recorded' AND e.occurred_at >= ? AND e.occurred_at < ?",
        )
        .unwrap();
    for row in usage.query_map([start, end], |r| Ok((r.get(0)?, r.get(1)?, r.get::<_, i64>(2)?))).unwrap() {
        let (tenant, metric, quantity) = row.unwrap();
        *consumption.entry((tenant, metric)).or_default() += quantity;
    }
    for events in reservations(&conn).values() {
        // A COMMIT of 0 consumed nothing, as a RELEASE: no row of its own (README "export billing").
        let in_period = |c: &&Reservation| c.amount != 0 && c.occurred_at >= start && c.occurred_at < end;
        if let Some(commit) = valid_commit(events).filter(in_period) {
            *consumption.entry((commit.tenant.clone(), commit.metric.clone())).or_default() += commit.amount;
        }
    }
    // Policies: TENANT scope, MONTH window, quotas only (a throttle, with a burst, is never billed and does not
    // cover the plan's quota); per policy_id the version with the greatest (effective_from, version) effective
    // before the period ends; the tenant's own first, else the `*` plan default.
    let mut versions: BTreeMap<(String, String, String), Version> = BTreeMap::new();
    let mut statement = conn
        .prepare(
            "SELECT e.tenant, e.metric, p.policy_id, p.version, p.\"limit\", p.enforcement, p.effective_from
             FROM policy_events p JOIN entries e ON e.seq = p.seq
             WHERE e.status = 'recorded' AND p.scope = 'TENANT' AND p.window = 'MONTH' AND p.burst IS NULL
               AND p.effective_from < ?",
        )
        .unwrap();
    let rows = statement
        .query_map([end], |r| {
            Ok(((r.get(0)?, r.get(1)?, r.get(2)?), (r.get::<_, i64>(6)?, r.get::<_, i64>(3)?, r.get(4)?, r.get(5)?)))
        })
        .unwrap();
    for row in rows {
        let (key, version) = row.unwrap();
        let entry = versions.entry(key).or_insert(version.clone());
        if (version.0, version.1) > (entry.0, entry.1) {
            *entry = version;
        }
    }
    // Of several: a SOFT one, then a HARD one, then a SHADOW one, then the smallest policy_id.
    let policy_of = |tenant: &str, metric: &str| {
        let of = |owner: &str| {
            versions
                .iter()
                .filter(|((t, m, _), _)| t == owner && m == metric)
                .min_by_key(|((_, _, id), v)| (["SOFT", "HARD", "SHADOW"].iter().position(|e| *e == v.3), id.clone()))
        };
        of(tenant).or_else(|| of("*")).map(|((_, _, id), v)| (id.clone(), v.clone()))
    };
    let mut keys: BTreeSet<(String, String)> = consumption.keys().cloned().collect();
    keys.extend(versions.keys().filter(|(t, _, _)| t != "*").map(|(t, m, _)| (t.clone(), m.clone())));
    // A metric a gauge quota names (any version with a violation, the tenant's own or the plan's) is a level, not
    // consumption: no row.
    let mut gauges = conn
        .prepare(
            "SELECT DISTINCT e.tenant, e.metric FROM policy_events p JOIN entries e ON e.seq = p.seq
             WHERE e.status = 'recorded' AND p.violation IS NOT NULL",
        )
        .unwrap();
    let gauges: BTreeSet<(String, String)> =
        gauges.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(Result::unwrap).collect();
    keys.retain(|(tenant, metric)| {
        !gauges.contains(&(tenant.clone(), metric.clone())) && !gauges.contains(&("*".into(), metric.clone()))
    });
    let grants = |tenant: &str, metric: &str| grants_between(&conn, tenant, metric, (start, end));
    let month_bounds = format!("{},{}", Timestamp(start), Timestamp(end));
    let carried_after = carried_after(&conn, name, watermark);
    let late = late_usage_adjustments(&conn, carried_after, watermark);
    keys.extend(late.keys().filter(|(_, metric)| !gauges.contains(&("*".into(), metric.clone()))).cloned());
    let gaps = gaps_of_open_period(&conn, name, start);
    let cycle_policies = cycle_policies(&conn, end);
    keys.extend(cycle_policies.keys().cloned());
    let (cycle_keys, keys): (BTreeSet<_>, BTreeSet<_>) =
        keys.into_iter().partition(|(tenant, metric)| cycle_policies.contains_key(&(tenant.clone(), metric.clone())));
    let mut cycle_rows = BTreeMap::new();
    for (tenant, metric) in &cycle_keys {
        let policy = &cycle_policies[&(tenant.clone(), metric.clone())];
        // How far final exports of earlier months billed it: a cycle they reach into is not computed here.
        let billed_through: Option<i64> = conn
            .query_row(
                "SELECT MAX(COALESCE(x.cycle_end, c.period_end)) FROM period_exports x
                 JOIN period_closes c ON c.period = x.period WHERE x.period < ? AND x.tenant = ? AND x.metric = ?",
                [name, tenant.as_str(), metric.as_str()],
                |r| r.get(0),
            )
            .unwrap();
        let cycles = cycles_billed(policy, name);
        if let (Some(through), Some((first, _))) = (billed_through, cycles.first()) {
            assert!(through <= *first, "{tenant} {metric}: a cycle billed in part already is not computed here");
        }
        let rows = cycles
            .into_iter()
            .enumerate()
            .map(|(n, (cycle_start, cycle_end))| {
                // The first row of the month carries what was recorded late for before it (contract §5).
                let late = match n {
                    0 => usage_recorded_between(&conn, (tenant, metric), cycle_start, (carried_after, watermark)),
                    _ => 0,
                };
                let used = usage_between(&conn, tenant, metric, (cycle_start, cycle_end));
                let g = grants_between(&conn, tenant, metric, (cycle_start, cycle_end));
                let excess = (used - (policy.limit + g)).max(0);
                let (overage, overshoot) = match policy.enforcement.as_str() {
                    "SOFT" => (excess.to_string(), String::new()),
                    "HARD" => (String::new(), excess.to_string()),
                    _ => (String::new(), String::new()),
                };
                format!(
                    "{tenant},{metric},{name},{used},{},{},{},{g},{},{overage},{overshoot},{late},{watermark},{gaps},{},{},",
                    policy.id,
                    policy.version,
                    policy.limit,
                    policy.limit + g,
                    Timestamp(cycle_start),
                    Timestamp(cycle_end)
                )
            })
            .collect::<Vec<_>>();
        cycle_rows.insert((tenant.clone(), metric.clone()), rows);
    }
    let month_rows = keys
        .iter()
        .map(|(tenant, metric)| {
            let used = consumption.get(&(tenant.clone(), metric.clone())).copied().unwrap_or(0);
            let policy = match policy_of(tenant, metric) {
                None => ",,,,,,".to_string(),
                Some((id, (_, version, limit, enforcement))) => {
                    let g = grants(tenant, metric);
                    let excess = (used - (limit + g)).max(0);
                    let (overage, overshoot) = match enforcement.as_str() {
                        "SOFT" => (excess.to_string(), String::new()),
                        "HARD" => (String::new(), excess.to_string()),
                        _ => (String::new(), String::new()),
                    };
                    format!("{id},{version},{limit},{g},{},{overage},{overshoot}", limit + g)
                }
            };
            let late = late.get(&(tenant.clone(), metric.clone())).copied().unwrap_or(0);
            // No plan is assigned in these ledgers: the `plan` cell is empty.
            let row = format!("{tenant},{metric},{name},{used},{policy},{late},{watermark},{gaps},{month_bounds},");
            ((tenant.clone(), metric.clone()), vec![row])
        })
        .collect::<BTreeMap<_, _>>();
    // Rows by tenant then metric, a key's cycles in order.
    let mut all: BTreeMap<(String, String), Vec<String>> = month_rows;
    all.extend(cycle_rows);
    all.into_values().flatten().collect()
}

/// A tenant's own BILLING_CYCLE quota, as the independent computation takes it: one version, TENANT scope.
pub struct CyclePolicy {
    id: String,
    version: i64,
    limit: i64,
    enforcement: String,
    anchor: i64,
    zone: Tz,
}

/// The own TENANT-scope BILLING_CYCLE quotas effective before `end`, per (tenant, metric): one version each (the
/// tests that compare with this computation change no anchor; those of anchor changes are computed by hand).
fn cycle_policies(conn: &Connection, end: i64) -> BTreeMap<(String, String), CyclePolicy> {
    let mut statement = conn
        .prepare(
            "SELECT e.tenant, e.metric, p.policy_id, p.version, p.\"limit\", p.enforcement, p.cycle_anchor,
                    COALESCE(p.time_zone, 'UTC')
             FROM policy_events p JOIN entries e ON e.seq = p.seq
             WHERE e.status = 'recorded' AND p.scope = 'TENANT' AND p.window = 'BILLING_CYCLE' AND e.tenant != '*'
               AND p.effective_from < ?",
        )
        .unwrap();
    let rows = statement
        .query_map([end], |r| {
            let zone: String = r.get(7)?;
            let policy = CyclePolicy {
                id: r.get(2)?,
                version: r.get(3)?,
                limit: r.get(4)?,
                enforcement: r.get(5)?,
                anchor: r.get(6)?,
                zone: zone.parse().unwrap(),
            };
            Ok(((r.get(0)?, r.get(1)?), policy))
        })
        .unwrap();
    let mut found = BTreeMap::new();
    for row in rows {
        let (key, policy) = row.unwrap();
        assert!(found.insert(key, policy).is_none(), "the independent computation takes one version per policy");
    }
    found
}

/// contract §5 "Billing cycles", written again from the text: a cycle starts on the anchor's day of month, or the
/// month's last day when it has fewer, at the anchor's local time; a local time the clock skips starts when the
/// clock shows a later one (found a minute at a time), one it repeats at its first occurrence.
fn cycle_start(policy: &CyclePolicy, year: i32, month: u32) -> i64 {
    let anchor = policy.zone.timestamp_micros(policy.anchor).unwrap();
    let (next_year, next_month) = if month == 12 { (year + 1, 1) } else { (year, month + 1) };
    let last_day = NaiveDate::from_ymd_opt(next_year, next_month, 1).unwrap().pred_opt().unwrap().day();
    let date = NaiveDate::from_ymd_opt(year, month, anchor.day().min(last_day)).unwrap();
    let mut local: NaiveDateTime = date.and_time(anchor.time());
    loop {
        if let Some(at) = policy.zone.from_local_datetime(&local).earliest() {
            return at.timestamp_micros();
        }
        local += TimeDelta::minutes(1);
        local = local.with_second(0).unwrap().with_nanosecond(0).unwrap();
    }
}

/// The cycles of `policy` whose last instant lies in the month `name` (YYYY-MM) of its zone's calendar.
fn cycles_billed(policy: &CyclePolicy, name: &str) -> Vec<(i64, i64)> {
    let (year, month): (i32, u32) = (name[..4].parse().unwrap(), name[5..].parse().unwrap());
    let months: Vec<(i32, u32)> = (-3i32..=2)
        .map(|delta| {
            let index = year * 12 + month as i32 - 1 + delta;
            (index.div_euclid(12), index.rem_euclid(12) as u32 + 1)
        })
        .collect();
    let starts: Vec<i64> = months.iter().map(|(y, m)| cycle_start(policy, *y, *m)).collect();
    starts
        .windows(2)
        .map(|pair| (pair[0], pair[1]))
        .filter(|(_, end)| {
            let last = policy.zone.timestamp_micros(end - 1).unwrap();
            (last.year(), last.month()) == (year, month)
        })
        .collect()
}

fn usage_between(conn: &Connection, tenant: &str, metric: &str, (start, end): (i64, i64)) -> i64 {
    let usage: i64 = conn
        .query_row(
            "SELECT COALESCE(SUM(u.quantity), 0) FROM usage_events u JOIN entries e ON e.seq = u.seq
             WHERE e.status = 'recorded' AND e.tenant = ? AND e.metric = ? AND e.occurred_at >= ? AND e.occurred_at < ?",
            rusqlite::params![tenant, metric, start, end],
            |r| r.get(0),
        )
        .unwrap();
    let commits: i64 = reservations(conn)
        .values()
        .filter_map(|events| valid_commit(events))
        .filter(|c| c.tenant == tenant && c.metric == metric && c.occurred_at >= start && c.occurred_at < end)
        .map(|c| c.amount)
        .sum();
    usage + commits
}

/// contract §5, written again from the text: an export carries what was recorded late after the close before it. A
/// closed month's, what came after the close before its own; an open month's, what came after the last close if it
/// is the month right after it (the next to close), and nothing otherwise (a later month will not carry it).
fn carried_after(conn: &Connection, name: &str, watermark: u64) -> i64 {
    let closes: Vec<(String, i64)> = conn
        .prepare("SELECT period, watermark FROM period_closes ORDER BY period")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    if let Some((_, own)) = closes.iter().find(|(period, _)| period == name) {
        return closes.iter().map(|(_, w)| *w).filter(|w| w < own).max().unwrap_or(0);
    }
    match closes.last() {
        None => 0,
        Some((last, at)) if next_month(last) == name => *at,
        Some(_) => watermark as i64,
    }
}

/// The month after `name` (YYYY-MM).
fn next_month(name: &str) -> String {
    let (year, month): (i32, u32) = (name[..4].parse().unwrap(), name[5..].parse().unwrap());
    if month == 12 { format!("{}-01", year + 1) } else { format!("{year}-{:02}", month + 1) }
}

/// The LATE_USAGE adjustments recorded after `after` up to `watermark`, summed per (tenant, metric): what an export
/// at `watermark` carries (contract §5).
fn late_usage_adjustments(conn: &Connection, after: i64, watermark: u64) -> BTreeMap<(String, String), i64> {
    let mut statement = conn
        .prepare(
            "SELECT e.tenant, e.metric, a.amount FROM adjustment_events a JOIN entries e ON e.seq = a.seq
             WHERE e.status = 'recorded' AND a.kind = 'LATE_USAGE' AND a.seq > ? AND a.seq <= ?",
        )
        .unwrap();
    let mut late = BTreeMap::new();
    let rows = statement.query_map(rusqlite::params![after, watermark as i64], |r| {
        Ok(((r.get::<_, String>(0)?, r.get::<_, String>(1)?), r.get::<_, i64>(2)?))
    });
    for row in rows.unwrap() {
        let (key, amount) = row.unwrap();
        *late.entry(key).or_default() += amount;
    }
    late
}

/// Usage and valid COMMITs of a key recorded after `after` up to `watermark` whose event time is before `before`:
/// what a billing cycle's first row carries, recorded late for what was billed before it.
fn usage_recorded_between(
    conn: &Connection,
    (tenant, metric): (&str, &str),
    before: i64,
    (after, watermark): (i64, u64),
) -> i64 {
    let usage: i64 = conn
        .query_row(
            "SELECT COALESCE(SUM(u.quantity), 0) FROM usage_events u JOIN entries e ON e.seq = u.seq
             WHERE e.status = 'recorded' AND e.tenant = ? AND e.metric = ? AND e.occurred_at < ?
               AND e.seq > ? AND e.seq <= ?",
            rusqlite::params![tenant, metric, before, after, watermark as i64],
            |r| r.get(0),
        )
        .unwrap();
    let commits: i64 = reservations(conn)
        .values()
        .filter_map(|events| valid_commit(events))
        .filter(|c| c.tenant == tenant && c.metric == metric && c.occurred_at < before)
        .filter(|c| c.seq > after && c.seq <= watermark as i64)
        .map(|c| c.amount)
        .sum();
    usage + commits
}

/// The gaps an export of the open period `name` names: every offset gap accepted since the period began, as
/// `TOPIC:PARTITION:FROM-TO` separated by `;` (contract §7). A closed period's are not computed here.
fn gaps_of_open_period(conn: &Connection, name: &str, start: i64) -> String {
    let closed: bool =
        conn.query_row("SELECT COUNT(*) > 0 FROM period_closes WHERE period = ?", [name], |r| r.get(0)).unwrap();
    let mut statement = conn
        .prepare("SELECT topic, partition, from_offset, to_offset FROM offset_gaps WHERE accepted_at >= ? ORDER BY id")
        .unwrap();
    let gaps: Vec<String> = statement
        .query_map([start], |r| {
            Ok(format!(
                "{}:{}:{}-{}",
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, i64>(3)?
            ))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(!closed || gaps.is_empty(), "{name} is closed: its gaps are those of its close, not computed here");
    gaps.join(";")
}

/// The grants without a subject, project or API key of `tenant`'s `metric` that overlap `[start, end)`, summed.
fn grants_between(conn: &Connection, tenant: &str, metric: &str, (start, end): (i64, i64)) -> i64 {
    conn.query_row(
        "SELECT COALESCE(SUM(g.amount), 0) FROM grant_events g JOIN entries e ON e.seq = g.seq
         WHERE e.status = 'recorded' AND e.tenant = ? AND e.metric = ? AND e.subject IS NULL
           AND e.project IS NULL AND e.api_key IS NULL AND g.valid_from < ? AND g.valid_until > ?",
        rusqlite::params![tenant, metric, end, start],
        |r| r.get(0),
    )
    .unwrap()
}
