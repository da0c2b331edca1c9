//! Billing periods and their close (contract §5 "Closing a period"): a period is a calendar month in UTC; closing it
//! records the watermark its final export is computed at, once and for ever.

use std::fmt;
use std::str::FromStr;

use chrono::{Datelike, TimeZone, Utc};
use rusqlite::{OptionalExtension, TransactionBehavior, params};
use schemas::Timestamp;
use serde::Serialize;

use crate::error::{CloseError, ReadError};
use crate::status::read_totals;
use crate::{Ledger, now_micros};

/// A billing period: one calendar month, UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Period {
    /// The calendar year.
    pub year: i32,
    /// 1 to 12.
    pub month: u32,
}

/// A period that is not `YYYY-MM`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("period {0:?} is not a month written YYYY-MM (for example 2026-11) between 2000 and 2099")]
pub struct PeriodParseError(pub String);

impl FromStr for Period {
    type Err = PeriodParseError;
    fn from_str(text: &str) -> Result<Period, PeriodParseError> {
        let error = || PeriodParseError(text.to_string());
        let (year, month) = text.split_once('-').ok_or_else(error)?;
        if year.len() != 4 || month.len() != 2 {
            return Err(error());
        }
        let year: i32 = year.parse().map_err(|_| error())?;
        let month: u32 = month.parse().map_err(|_| error())?;
        if !(2000..=2099).contains(&year) || !(1..=12).contains(&month) {
            return Err(error());
        }
        Ok(Period { year, month })
    }
}

impl fmt::Display for Period {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}", self.year, self.month)
    }
}

impl Serialize for Period {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl Period {
    /// The period containing `t`.
    pub fn containing(t: Timestamp) -> Period {
        let date = t.to_datetime().expect("validated timestamps lie within chrono's range");
        Period { year: date.year(), month: date.month() }
    }

    /// First instant of the period.
    pub fn start(self) -> Timestamp {
        let start = Utc.with_ymd_and_hms(self.year, self.month, 1, 0, 0, 0).single().expect("the first of a month");
        Timestamp::from_datetime(start)
    }

    /// First instant after the period.
    pub fn end(self) -> Timestamp {
        self.next().start()
    }

    /// The month after.
    pub fn next(self) -> Period {
        if self.month == 12 {
            Period { year: self.year + 1, month: 1 }
        } else {
            Period { month: self.month + 1, ..self }
        }
    }

    /// The month before.
    pub fn previous(self) -> Period {
        if self.month == 1 {
            Period { year: self.year - 1, month: 12 }
        } else {
            Period { month: self.month - 1, ..self }
        }
    }
}

/// A closed period.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PeriodClose {
    /// The period closed.
    pub period: Period,
    /// The last ledger sequence number the close covers.
    pub watermark: u64,
    /// Microseconds since the epoch.
    pub closed_at: Timestamp,
}

/// The close `period` is judged by, among `closes`: its own, or, for a month before the earliest month closed, that
/// close's watermark and time. The ledger's first close closes every month before it too (choice where the contract is
/// silent): closes go in order, so those months can never close on their own, and their late usage would otherwise
/// never be billed; closed with the first, it is carried into the next close like any closed month's.
pub fn covering_close(closes: &[PeriodClose], period: Period) -> Option<PeriodClose> {
    if let Some(own) = closes.iter().find(|c| c.period == period) {
        return Some(own.clone());
    }
    let first = closes.iter().min_by_key(|c| c.period)?;
    (period < first.period).then(|| PeriodClose { period, ..first.clone() })
}

impl Ledger {
    /// Closes `period` at the current watermark, or answers the close already recorded (closing twice is a
    /// no-op: the first close stands).
    pub fn close_period(&mut self, period: Period) -> Result<PeriodClose, CloseError> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        if let Some(existing) = read_close(&tx, period)? {
            return Ok(existing);
        }
        let now = Timestamp(now_micros());
        if now < period.end() {
            return Err(CloseError::NotOver { period, ends: period.end() });
        }
        let watermark = read_totals(&tx)?.watermark;
        tx.execute(
            "INSERT INTO period_closes (period, period_start, period_end, watermark, closed_at) VALUES (?, ?, ?, ?, ?)",
            params![period.to_string(), period.start().micros(), period.end().micros(), watermark as i64, now.micros()],
        )?;
        let close = read_close(&tx, period)?.expect("the close just inserted");
        crate::links::seal(&tx, crate::links::LinkKind::Close, false)?;
        tx.commit()?;
        Ok(close)
    }

    /// The close of `period`, when it is closed.
    pub fn period_close(&self, period: Period) -> Result<Option<PeriodClose>, ReadError> {
        Ok(read_close(&self.conn, period)?)
    }

    /// Every closed period, oldest first.
    pub fn period_closes(&self) -> Result<Vec<PeriodClose>, ReadError> {
        let mut statement =
            self.conn.prepare("SELECT period, watermark, closed_at FROM period_closes ORDER BY period")?;
        let rows = statement.query_map([], close_from_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

pub(crate) fn read_close(conn: &rusqlite::Connection, period: Period) -> rusqlite::Result<Option<PeriodClose>> {
    conn.query_row(
        "SELECT period, watermark, closed_at FROM period_closes WHERE period = ?",
        [period.to_string()],
        close_from_row,
    )
    .optional()
}

/// The close `period` is judged by ([`covering_close`]), read from the ledger.
pub(crate) fn read_covering_close(
    conn: &rusqlite::Connection,
    period: Period,
) -> rusqlite::Result<Option<PeriodClose>> {
    if let Some(own) = read_close(conn, period)? {
        return Ok(Some(own));
    }
    let earliest = conn
        .query_row("SELECT period, watermark, closed_at FROM period_closes ORDER BY period LIMIT 1", [], close_from_row)
        .optional()?;
    Ok(earliest.and_then(|first| covering_close(&[first], period)))
}

/// The close of the latest period closed, if any.
pub(crate) fn latest_close(conn: &rusqlite::Connection) -> rusqlite::Result<Option<PeriodClose>> {
    conn.query_row(
        "SELECT period, watermark, closed_at FROM period_closes ORDER BY period DESC LIMIT 1",
        [],
        close_from_row,
    )
    .optional()
}

fn close_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<PeriodClose> {
    let text: String = row.get(0)?;
    let period = text
        .parse()
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e)))?;
    Ok(PeriodClose { period, watermark: row.get::<_, i64>(1)? as u64, closed_at: Timestamp(row.get(2)?) })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves periods parse only as YYYY-MM and know their calendar bounds.
    #[test]
    fn periods_are_calendar_months() {
        let p: Period = "2026-12".parse().unwrap();
        assert_eq!(
            (p.start().to_string(), p.end().to_string()),
            ("2026-12-01T00:00:00Z".into(), "2027-01-01T00:00:00Z".into())
        );
        assert_eq!(p.next().to_string(), "2027-01");
        assert_eq!("2026-01".parse::<Period>().unwrap().previous().to_string(), "2025-12");
        for bad in ["2026-13", "2026-1", "26-11", "2026/11", "", "2026-00"] {
            assert!(bad.parse::<Period>().is_err(), "{bad}");
        }
    }

    // Proves a close is recorded once, at the watermark of its moment, and a second close answers the first.
    #[test]
    fn a_period_closes_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = Ledger::open(dir.path().join("l.db")).unwrap();
        let period: Period = "2026-10".parse().unwrap();
        let first = ledger.close_period(period).unwrap();
        assert_eq!(first.watermark, 0);
        assert_eq!(ledger.close_period(period).unwrap(), first);
        assert_eq!(ledger.period_closes().unwrap(), [first]);
        let future: Period = "2099-01".parse().unwrap();
        assert!(matches!(ledger.close_period(future), Err(CloseError::NotOver { .. })));
    }
}
