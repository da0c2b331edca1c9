//! Final billing exports (contract §5 "Closing a period"): closing a period stores the rows of its export in the
//! same transaction, so that re-exporting it reproduces them exactly whatever arrives later.

use rusqlite::{Connection, Transaction, TransactionBehavior, params};
use schemas::Timestamp;
use serde::{Deserialize, Serialize};

use crate::commit_totals::{self, TotalsError};
use crate::error::{CloseError, ReadError};
use crate::periods::{latest_close, read_close, read_covering_close};
use crate::status::read_totals;
use crate::{Ledger, Period, PeriodClose, now_micros};

/// One row of a billing export (contract §7 columns, less `period` and `watermark`, which the export has once).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)] // contract §7's columns, by their names there.
pub struct PeriodExportRow {
    pub tenant: String,
    pub metric: String,
    pub consumption: i64,
    pub policy_id: Option<String>,
    pub policy_version: Option<i32>,
    pub limit: Option<i64>,
    pub grants: Option<i64>,
    pub effective_limit: Option<i64>,
    pub overage: Option<i64>,
    pub overshoot: Option<i64>,
    pub late_adjustments: i64,
    /// The billing cycle the row bills, `[cycle_start, cycle_end)`: the period's month for a row of a calendar
    /// month, a tenant's cycle for a row of a BILLING_CYCLE policy (PolicyEvent v11).
    pub cycle_start: Timestamp,
    pub cycle_end: Timestamp,
    /// The named plan its tenant held over `[cycle_start, cycle_end)` (a row per plan when it changed within it);
    /// none without one.
    pub plan: Option<String>,
}

impl PeriodExportRow {
    /// The row of `tenant` and `metric` that no policy prices: its consumption and late adjustments alone, over the
    /// cycle `[start, end)`.
    pub fn unpriced(
        tenant: String,
        metric: String,
        consumption: i64,
        late_adjustments: i64,
        (cycle_start, cycle_end): (Timestamp, Timestamp),
    ) -> PeriodExportRow {
        PeriodExportRow {
            tenant,
            metric,
            consumption,
            policy_id: None,
            policy_version: None,
            limit: None,
            grants: None,
            effective_limit: None,
            overage: None,
            overshoot: None,
            late_adjustments,
            cycle_start,
            cycle_end,
            plan: None,
        }
    }
}

/// What an export is computed at: the watermark, and the watermark after which the late adjustments it carries were
/// recorded (up to the watermark): the last close's before it; the watermark itself for a preview that carries
/// none ([`Ledger::preview_period_export`] of a month after the next one to close).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CloseSnapshot {
    /// The last ledger sequence number the export sees.
    pub watermark: u64,
    /// Late adjustments recorded after this one (up to `watermark`) are carried.
    pub carried_after: u64,
}

/// A closed period's export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeriodExport {
    /// The close.
    pub close: PeriodClose,
    /// Its stored rows, in export order.
    pub rows: Vec<PeriodExportRow>,
}

/// The export rows computed for a close, or why they could not be.
pub type ComputeResult = Result<Vec<PeriodExportRow>, Box<dyn std::error::Error + Send + Sync>>;

/// Computing the export of an open period failed; nothing was exported (commit totals caught up meanwhile stay).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PreviewError {
    /// The commit totals could not be brought to the export's watermark.
    #[error("bringing the commit totals to the ledger's watermark failed, nothing exported")]
    Totals(#[from] TotalsError),
    /// The computation failed.
    #[error("computing the export of period {period} failed")]
    Export {
        /// The period.
        period: Period,
        /// Why.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// SQLite failed.
    #[error("ledger read failed, nothing exported")]
    Sqlite(#[from] rusqlite::Error),
}

impl Ledger {
    /// Closes `period` and stores its export, computed by `compute` at the close's watermark, in one
    /// transaction: appends wait meanwhile, so the export sees exactly the entries the close covers, its commit
    /// totals brought to that watermark first. `compute` reads through the ledger it is given. A period already
    /// closed answers its stored export (`rows` empty if it was closed without one) and computes nothing.
    pub fn close_period_with_export(
        &mut self,
        period: Period,
        compute: impl FnOnce(&Ledger, CloseSnapshot) -> ComputeResult,
    ) -> Result<PeriodExport, CloseError> {
        let ledger: &Ledger = self;
        let tx = Transaction::new_unchecked(&ledger.conn, TransactionBehavior::Immediate)?;
        // Closed already, or before the first close and closed with it (no rows stored: computed at its watermark).
        if let Some(close) = read_covering_close(&tx, period)? {
            let rows = read_rows(&tx, period)?;
            return Ok(PeriodExport { close, rows });
        }
        refuse_close(&tx, period)?;
        let now = Timestamp(now_micros());
        let snapshot = open_snapshot(&tx)?;
        let failed = |source: Box<dyn std::error::Error + Send + Sync>| CloseError::Export { period, source };
        commit_totals::catch_up(&tx, snapshot.watermark).map_err(|e| failed(Box::new(e)))?;
        let rows = compute(ledger, snapshot).map_err(failed)?;
        tx.execute(
            "INSERT INTO period_closes (period, period_start, period_end, watermark, closed_at) VALUES (?, ?, ?, ?, ?)",
            params![
                period.to_string(),
                period.start().micros(),
                period.end().micros(),
                snapshot.watermark as i64,
                now.micros()
            ],
        )?;
        for (index, row) in rows.iter().enumerate() {
            insert_row(&tx, period, index, row)?;
        }
        // After the write: the stored export reads back exactly as computed.
        let stored = read_rows(&tx, period)?;
        assert_eq!(stored, rows, "the stored export is the computed one");
        let close = read_close(&tx, period)?.expect("the close just inserted");
        crate::links::seal(&tx, crate::links::LinkKind::Close, false)?;
        tx.commit()?;
        Ok(PeriodExport { close, rows })
    }

    /// Computes the export of `period` (open) at the ledger's current watermark, and answers it with the snapshot it
    /// was computed at. The commit totals are brought near the watermark in short steps first
    /// ([`Ledger::catch_up_commit_totals_in_steps`]), then `compute` runs in one write transaction with them caught
    /// up to it: appends wait meanwhile, so that every read `compute` makes through the ledger it is given sees that
    /// one state. The late adjustments not carried yet go into the next month to close only: a later month's preview
    /// carries none, so that previews added up count each once.
    pub fn preview_period_export(
        &self,
        period: Period,
        compute: impl FnOnce(&Ledger, CloseSnapshot) -> ComputeResult,
    ) -> Result<(CloseSnapshot, Vec<PeriodExportRow>), PreviewError> {
        self.catch_up_commit_totals_in_steps()?;
        let tx = Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate)?;
        let snapshot = preview_snapshot(&tx, period)?;
        commit_totals::catch_up(&tx, snapshot.watermark)?;
        let rows = compute(self, snapshot).map_err(|source| PreviewError::Export { period, source })?;
        tx.commit()?;
        Ok((snapshot, rows))
    }

    /// Refuses a close of `period`, not closed yet, that `close_period_with_export` would refuse now (not over, or
    /// out of order), before work that must not be done for a refused close. The close checks again in its own
    /// transaction.
    pub fn refuse_close(&self, period: Period) -> Result<(), CloseError> {
        refuse_close(&self.conn, period)
    }

    /// The stored export of a closed period; `None` when the period is open. A period closed without an export
    /// (`close_period`), or before the ledger's first close and closed with it ([`crate::covering_close`]), answers
    /// `Some` with no rows.
    pub fn period_export(&self, period: Period) -> Result<Option<PeriodExport>, ReadError> {
        let tx = self.conn.unchecked_transaction()?;
        let Some(close) = read_covering_close(&tx, period)? else { return Ok(None) };
        let rows = read_rows(&tx, period)?;
        tx.finish()?;
        Ok(Some(PeriodExport { close, rows }))
    }
}

/// The snapshot an export of an open period is computed at now: the current watermark, and the last close's.
fn open_snapshot(conn: &Connection) -> rusqlite::Result<CloseSnapshot> {
    Ok(CloseSnapshot { watermark: read_totals(conn)?.watermark, carried_after: last_close_watermark(conn)? })
}

/// [`open_snapshot`] for the preview of `period` (open): the late adjustments not carried yet go into the next month
/// to close only, so the preview of a later month carries none (shown in every open month, they would count several
/// times in previews added up).
fn preview_snapshot(conn: &Connection, period: Period) -> rusqlite::Result<CloseSnapshot> {
    let snapshot = open_snapshot(conn)?;
    Ok(match latest_close(conn)? {
        Some(last) if period != last.period.next() => CloseSnapshot { carried_after: snapshot.watermark, ..snapshot },
        _ => snapshot,
    })
}

/// A close of `period` refused: not over yet, or not the month after the last one closed. In order, one after
/// another: each final export carries the late adjustments recorded since the close before it, which are the
/// previous month's only when that close was of the previous month.
fn refuse_close(conn: &Connection, period: Period) -> Result<(), CloseError> {
    if Timestamp(now_micros()) < period.end() {
        return Err(CloseError::NotOver { period, ends: period.end() });
    }
    if let Some(last) = latest_close(conn)?.map(|c| c.period) {
        // Defensive: a month before the last close is closed, or covered by the first close, unless closes were
        // made out of order below this check (`close_period`).
        if period < last {
            return Err(CloseError::AfterLater { period, last });
        }
        if period > last.next() {
            return Err(CloseError::Skips { period, next: last.next(), last });
        }
    }
    Ok(())
}

/// The watermark of the latest close, 0 when none: late adjustments recorded after it are not carried yet.
fn last_close_watermark(conn: &Connection) -> rusqlite::Result<u64> {
    conn.query_row("SELECT COALESCE(MAX(watermark), 0) FROM period_closes", [], |r| {
        r.get::<_, i64>(0).map(|w| w as u64)
    })
}

fn insert_row(conn: &Connection, period: Period, index: usize, row: &PeriodExportRow) -> rusqlite::Result<()> {
    // A row of the month itself keeps its cycle null, as every row stored before cycles did.
    let cycle = (row.cycle_start, row.cycle_end) != (period.start(), period.end());
    let (cycle_start, cycle_end) = match cycle {
        true => (Some(row.cycle_start.micros()), Some(row.cycle_end.micros())),
        false => (None, None),
    };
    conn.prepare_cached(
        "INSERT INTO period_exports (period, row_index, tenant, metric, consumption, policy_id, policy_version,
             \"limit\", grants, effective_limit, overage, overshoot, late_adjustments, cycle_start, cycle_end, plan)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )?
    .execute(params![
        period.to_string(),
        index as i64,
        row.tenant,
        row.metric,
        row.consumption,
        row.policy_id,
        row.policy_version,
        row.limit,
        row.grants,
        row.effective_limit,
        row.overage,
        row.overshoot,
        row.late_adjustments,
        cycle_start,
        cycle_end,
        row.plan
    ])?;
    Ok(())
}

fn read_rows(conn: &Connection, period: Period) -> rusqlite::Result<Vec<PeriodExportRow>> {
    let mut statement = conn.prepare_cached(
        "SELECT tenant, metric, consumption, policy_id, policy_version, \"limit\", grants, effective_limit, overage,
                overshoot, late_adjustments, cycle_start, cycle_end, plan
         FROM period_exports WHERE period = ? ORDER BY row_index",
    )?;
    let rows = statement.query_map([period.to_string()], |r| {
        Ok(PeriodExportRow {
            tenant: r.get(0)?,
            metric: r.get(1)?,
            consumption: r.get(2)?,
            policy_id: r.get(3)?,
            policy_version: r.get(4)?,
            limit: r.get(5)?,
            grants: r.get(6)?,
            effective_limit: r.get(7)?,
            overage: r.get(8)?,
            overshoot: r.get(9)?,
            late_adjustments: r.get(10)?,
            cycle_start: r.get::<_, Option<i64>>(11)?.map_or(period.start(), Timestamp),
            cycle_end: r.get::<_, Option<i64>>(12)?.map_or(period.end(), Timestamp),
            plan: r.get(13)?,
        })
    })?;
    rows.collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(tenant: &str, consumption: i64) -> PeriodExportRow {
        let september: Period = "2026-09".parse().unwrap();
        PeriodExportRow::unpriced(
            tenant.into(),
            "requests".into(),
            consumption,
            0,
            (september.start(), september.end()),
        )
    }

    // Proves a close stores its export once: a second close answers the stored rows and computes nothing.
    #[test]
    fn a_close_stores_its_export_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = Ledger::open(dir.path().join("l.db")).unwrap();
        let period: Period = "2026-09".parse().unwrap();
        assert_eq!(ledger.period_export(period).unwrap(), None);
        let rows = vec![row("org-1", 5), row("org-2", 0)];
        let first = ledger
            .close_period_with_export(period, |_, snapshot| {
                assert_eq!(snapshot, CloseSnapshot { watermark: 0, carried_after: 0 });
                Ok(rows.clone())
            })
            .unwrap();
        assert_eq!(first.rows, rows);
        let second =
            ledger.close_period_with_export(period, |_, _| panic!("a closed period computes nothing")).unwrap();
        assert_eq!(second, first);
        assert_eq!(ledger.period_export(period).unwrap(), Some(first));
        let refused = ledger.conn.execute("UPDATE period_exports SET consumption = 1", []);
        assert!(refused.unwrap_err().to_string().contains("append-only"));
    }

    // Proves billing periods close in order, one after another: a skipped month could never close, and a month
    // before the first close was closed with it (an earlier month closed after a later one would carry the later
    // month's late usage).
    #[test]
    fn periods_close_one_after_another() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = Ledger::open(dir.path().join("l.db")).unwrap();
        let close = |ledger: &mut Ledger, period: &str| {
            ledger.close_period_with_export(period.parse().unwrap(), |_, _| Ok(vec![row("org-1", 1)]))
        };
        let first = close(&mut ledger, "2026-08").unwrap();
        let earlier = close(&mut ledger, "2026-07").unwrap();
        assert_eq!(earlier.close, PeriodClose { period: "2026-07".parse().unwrap(), ..first.close.clone() });
        assert!(earlier.rows.is_empty(), "closed with the first close, with no export of its own stored");
        assert_eq!(ledger.period_export("2026-07".parse().unwrap()).unwrap(), Some(earlier));
        let skipping = close(&mut ledger, "2026-10").unwrap_err();
        assert!(matches!(skipping, CloseError::Skips { .. }), "{skipping}");
        assert!(skipping.to_string().contains("cannot be closed before 2026-09"), "{skipping}");
        close(&mut ledger, "2026-09").unwrap();
        close(&mut ledger, "2026-10").unwrap();
        assert_eq!(close(&mut ledger, "2026-08").unwrap().rows, [row("org-1", 1)], "a closed one answers its export");
        let closed: Vec<String> = ledger.period_closes().unwrap().iter().map(|c| c.period.to_string()).collect();
        assert_eq!(closed, ["2026-08", "2026-09", "2026-10"]);
    }

    // Proves a failed computation closes nothing.
    #[test]
    fn a_failed_export_leaves_the_period_open() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = Ledger::open(dir.path().join("l.db")).unwrap();
        let period: Period = "2026-09".parse().unwrap();
        let failed = ledger.close_period_with_export(period, |_, _| Err("no".into()));
        assert!(matches!(failed, Err(CloseError::Export { .. })));
        assert_eq!(ledger.period_export(period).unwrap(), None);
    }
}
