//! What `report.html` shows, read from the demo's ledger: billing rows, decisions per day, adjustments by kind, the
//! largest overshoots.

use std::collections::BTreeMap;

use ledger::{Period, PeriodExportRow};
use reports::export::{BillingExport, Format};
use schemas::Timestamp;
use sql::LedgerSession;

use super::{DAY_MICROS, page};

pub(super) fn usage_of(rows: &[PeriodExportRow]) -> Vec<page::Usage> {
    rows.iter()
        .filter_map(|r| {
            Some(page::Usage {
                tenant: r.tenant.clone(),
                metric: r.metric.clone(),
                consumption: r.consumption,
                effective_limit: r.effective_limit.filter(|l| *l > 0)?,
            })
        })
        .collect()
}

/// The export as cells, header first, as in the CSV.
pub(super) fn billing_cells(export: &BillingExport) -> anyhow::Result<Vec<Vec<String>>> {
    let csv = String::from_utf8(export.to_bytes(Format::Csv)?)?;
    // No cell of these rows holds a comma or a quote (tenants and metrics are the generator's names).
    Ok(csv.lines().map(|line| line.split(',').map(String::from).collect()).collect())
}

/// One query's rows as text cells.
fn query_cells(session: &LedgerSession, sql: &str) -> anyhow::Result<Vec<Vec<String>>> {
    let mut rows = Vec::new();
    for batch in session.query(sql, Vec::new())? {
        for row in 0..batch.num_rows() {
            let cells = batch
                .columns()
                .iter()
                .map(|column| arrow::util::display::array_value_to_string(column, row))
                .collect::<Result<Vec<String>, _>>()?;
            rows.push(cells);
        }
    }
    Ok(rows)
}

fn number(cell: &str) -> i64 {
    cell.parse().unwrap_or(0)
}

pub(super) fn first_denial(session: &LedgerSession) -> anyhow::Result<Option<String>> {
    let sql = "SELECT request_id FROM decision_events WHERE outcome = 'DENIED' ORDER BY seq LIMIT 1";
    Ok(query_cells(session, sql)?.into_iter().next().and_then(|row| row.into_iter().next()))
}

/// The event_id of the largest usage event of requests in `month` recorded up to entry `through` (the first of them
/// by ledger order).
pub(super) fn largest_usage(session: &LedgerSession, month: Period, through: u64) -> anyhow::Result<Option<String>> {
    let sql = format!(
        "SELECT event_id FROM usage_events WHERE status = 'recorded' AND metric = 'requests' AND seq <= {through} \
         AND CAST(CAST(occurred_at AS DATE) AS VARCHAR) LIKE '{month}-%' ORDER BY quantity DESC, seq LIMIT 1"
    );
    Ok(query_cells(session, &sql)?.into_iter().next().and_then(|row| row.into_iter().next()))
}

pub(super) fn decisions_by_day(session: &LedgerSession, month: Period) -> anyhow::Result<Vec<page::DayDecisions>> {
    let sql = "SELECT CAST(CAST(occurred_at AS DATE) AS VARCHAR) AS day, outcome, count(*) AS decisions \
               FROM decision_events WHERE status = 'recorded' GROUP BY 1, 2 ORDER BY 1, 2";
    let mut days: BTreeMap<String, page::DayDecisions> = BTreeMap::new();
    let prefix = month.to_string();
    for row in query_cells(session, sql)? {
        let [day, outcome, n] = <[String; 3]>::try_from(row).map_err(|_| anyhow::anyhow!("three columns"))?;
        if !day.starts_with(&prefix) {
            continue;
        }
        let entry = days.entry(day.clone()).or_insert(page::DayDecisions { day, allowed: 0, denied: 0 });
        let n = number(&n) as u64;
        if outcome == "DENIED" {
            entry.denied += n;
        } else {
            entry.allowed += n;
        }
    }
    Ok(days.into_values().collect())
}

pub(super) fn adjustments_by_kind(session: &LedgerSession) -> anyhow::Result<Vec<page::KindTotal>> {
    let sql = "SELECT kind, count(*), sum(amount) FROM adjustment_events GROUP BY kind ORDER BY kind";
    Ok(query_cells(session, sql)?
        .into_iter()
        .map(|row| page::KindTotal {
            kind: row[0].clone(),
            adjustments: number(&row[1]) as u64,
            amount: number(&row[2]),
        })
        .collect())
}

/// The windows most over their limit now: each concern's adjustments add up to its current overshoot.
pub(super) fn largest_overshoots(session: &LedgerSession) -> anyhow::Result<Vec<page::Overshoot>> {
    let sql = format!(
        "SELECT tenant, subject, metric, policy_id, CAST(window_start AS BIGINT), CAST(window_end AS BIGINT), \
         sum(amount) AS overshoot FROM adjustment_events WHERE kind = 'OVERSHOOT' \
         GROUP BY tenant, subject, metric, policy_id, window_start, window_end HAVING sum(amount) > 0 \
         ORDER BY overshoot DESC, tenant, metric LIMIT {}",
        page::OVERSHOOTS_SHOWN
    );
    Ok(query_cells(session, &sql)?
        .into_iter()
        .map(|row| page::Overshoot {
            tenant: row[0].clone(),
            subject: Some(row[1].clone()).filter(|s| !s.is_empty()),
            metric: row[2].clone(),
            policy_id: row[3].clone(),
            window: window_label(Timestamp(number(&row[4])), Timestamp(number(&row[5]))),
            amount: number(&row[6]),
        })
        .collect())
}

/// The alerts the hook and reconcile wrote, as the page's table rows: tenant, metric, kind, policy,
/// window, threshold, what was found, and who wrote it; the kinds reconcile finds first (few beside the thresholds),
/// then by tenant, metric, policy and threshold.
pub(super) fn alerts(session: &LedgerSession) -> anyhow::Result<Vec<Vec<String>>> {
    let sql = format!(
        "SELECT tenant, metric, kind, policy_id, CAST(window_start AS BIGINT) AS start_micros, \
         CAST(window_end AS BIGINT) AS end_micros, threshold_percent, observed, \"limit\", subject, request_id, \
         policy_version, source, CASE WHEN kind = 'THRESHOLD' THEN 1 ELSE 0 END AS threshold_last FROM alert_events \
         ORDER BY threshold_last, tenant, metric, policy_id, start_micros, threshold_percent LIMIT {}",
        page::ALERTS_SHOWN
    );
    Ok(query_cells(session, &sql)?
        .into_iter()
        .map(|row| {
            let window = window_label(Timestamp(number(&row[4])), Timestamp(number(&row[5])));
            let (observed, limit) = (&row[7], &row[8]);
            let found = match row[2].as_str() {
                "SUBJECT_SHARE" => format!("{}: {observed} of the tenant's {limit}", row[9]),
                "OPEN_TOO_LONG" => format!("{} held {observed} s", row[10]),
                "DENY_RATE" => format!("v{} denied {observed}%, {limit}% before", row[11]),
                _ => format!("{observed} of {limit}"),
            };
            let threshold = format!("{}%", row[6]);
            vec![
                row[0].clone(),
                row[1].clone(),
                row[2].clone(),
                row[3].clone(),
                window,
                threshold,
                found,
                row[12].clone(),
            ]
        })
        .collect())
}

/// A window as people name it: the month, the day, or its start.
fn window_label(start: Timestamp, end: Timestamp) -> String {
    let period = Period::containing(start);
    let text = start.to_string();
    match end.micros() - start.micros() {
        _ if period.start() == start && period.end() == end => period.to_string(),
        DAY_MICROS => text.get(..10).unwrap_or_default().to_string(),
        _ => text.get(..16).unwrap_or_default().to_string(),
    }
}
