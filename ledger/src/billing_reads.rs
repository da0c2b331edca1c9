//! The reads a billing export is computed from (contract §5 "Billing export"), beside those reconcile shares
//! (`Ledger::policies_through`, `Ledger::grants_through`): counted usage of a period, from the totals every append
//! keeps or, at a past watermark, from the usage events; the LATE_USAGE adjustments an export carries; and every
//! reservation's events, one reservation at a time, for judging its COMMITs.

use rules::reservation::same_reservation;
use rusqlite::{Row, named_params};
use schemas::{ReservationAction, ReservationEvent, Timestamp};

use crate::error::ReadError;
use crate::read::{SequencedReservation, header, symbol, watermark_param};
use crate::{CloseSnapshot, Ledger, Period};

const USAGE_TOTALS_OF_PERIOD: &str = include_str!("../queries/usage_totals_of_period.sql");
const USAGE_OF_PERIOD: &str = include_str!("../queries/usage_of_period.sql");
const USAGE_OF_PERIOD_BY_PROJECT: &str = include_str!("../queries/usage_of_period_by_project.sql");
const LATE_USAGE_CARRIED: &str = include_str!("../queries/late_usage_carried.sql");
const RESERVATIONS_BY_RESERVATION: &str = include_str!("../queries/reservation_events_by_reservation.sql");
const PERIODS_WITH_CONSUMPTION_BEFORE: &str = include_str!("../queries/periods_with_consumption_before.sql");
const USAGE_OF_KEY_BETWEEN: &str = include_str!("../queries/usage_of_key_between.sql");
const BILLED_THROUGH: &str = include_str!("../queries/billed_through.sql");

/// A sum for one (tenant, metric): of usage, of valid COMMITs, of late adjustments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricTotal {
    /// The tenant.
    pub tenant: String,
    /// The metric.
    pub metric: String,
    /// The sum, in the metric's unit.
    pub amount: i64,
}

/// A sum of usage for one (tenant, metric, project).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectTotal {
    /// The tenant.
    pub tenant: String,
    /// The metric.
    pub metric: String,
    /// The project; none for the usage naming no project.
    pub project: Option<String>,
    /// The sum, in the metric's unit.
    pub amount: i64,
}

impl Ledger {
    /// The months before `period` that hold consumption (usage, or committed reservations as far as the commit
    /// totals have caught up), oldest first: what a ledger's first close of `period` closes with it.
    pub fn periods_with_consumption_before(&self, period: Period) -> Result<Vec<Period>, ReadError> {
        let mut statement = self.conn.prepare_cached(PERIODS_WITH_CONSUMPTION_BEFORE)?;
        let periods = statement.query_map([period.to_string()], |r| r.get::<_, String>(0))?;
        let mut found = Vec::new();
        for text in periods {
            let text = text?;
            found.push(text.parse().map_err(|_| ReadError::Corrupt { seq: 0, message: format!("period {text:?}") })?);
        }
        Ok(found)
    }

    /// Counted usage of `period` per (tenant, metric), as every append keeps it (`usage_totals`): at the ledger's
    /// current watermark only. By tenant, then metric.
    pub fn usage_totals_of_period(&self, period: Period) -> Result<Vec<MetricTotal>, ReadError> {
        let mut statement = self.conn.prepare_cached(USAGE_TOTALS_OF_PERIOD)?;
        let rows = statement.query_map(named_params! { ":period": period.to_string() }, metric_total)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Counted usage with occurred_at in `period` per (tenant, metric), of the entries up to `watermark`: a scan of
    /// every usage event, for an export at a past watermark. By tenant, then metric.
    pub fn usage_of_period(&self, period: Period, watermark: u64) -> Result<Vec<MetricTotal>, ReadError> {
        let mut statement = self.conn.prepare_cached(USAGE_OF_PERIOD)?;
        let params = named_params! {
            ":start": period.start().micros(),
            ":end": period.end().micros(),
            ":watermark": watermark_param(watermark),
        };
        let rows = statement.query_map(params, metric_total)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Counted usage with occurred_at in `period` per (tenant, metric, project), of the entries up to `watermark`: the
    /// scan of [`Ledger::usage_of_period`] split by project (the usage naming none apart), for `export billing --by
    /// project`. By tenant, metric, then project (none first).
    pub fn usage_of_period_by_project(&self, period: Period, watermark: u64) -> Result<Vec<ProjectTotal>, ReadError> {
        let mut statement = self.conn.prepare_cached(USAGE_OF_PERIOD_BY_PROJECT)?;
        let params = named_params! {
            ":start": period.start().micros(),
            ":end": period.end().micros(),
            ":watermark": watermark_param(watermark),
        };
        let rows = statement.query_map(params, |r| {
            Ok(ProjectTotal { tenant: r.get(0)?, metric: r.get(1)?, project: r.get(2)?, amount: r.get(3)? })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The LATE_USAGE adjustments an export computed at `snapshot` carries (recorded after
    /// `snapshot.carried_after`, up to its watermark), summed per (tenant, metric). By tenant, then metric.
    pub fn late_usage_carried(&self, snapshot: CloseSnapshot) -> Result<Vec<MetricTotal>, ReadError> {
        let mut statement = self.conn.prepare_cached(LATE_USAGE_CARRIED)?;
        let params = named_params! {
            ":after": watermark_param(snapshot.carried_after),
            ":watermark": watermark_param(snapshot.watermark),
        };
        let rows = statement.query_map(params, metric_total)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Counted usage of `tenant` and `metric` with occurred_at in `[from, until)`, of the entries after `after` up to
    /// `watermark`: what a billing cycle consumed (`after` 0), or what was recorded late since the last close for what
    /// was billed before (PolicyEvent v11).
    pub fn usage_of_key_between(
        &self,
        (tenant, metric): (&str, &str),
        (from, until): (Timestamp, Timestamp),
        after: u64,
        watermark: u64,
    ) -> Result<i64, ReadError> {
        let mut statement = self.conn.prepare_cached(USAGE_OF_KEY_BETWEEN)?;
        let params = named_params! {
            ":tenant": tenant,
            ":metric": metric,
            ":from": from.micros(),
            ":until": until.micros(),
            ":after": watermark_param(after),
            ":watermark": watermark_param(watermark),
        };
        Ok(statement.query_row(params, |r| r.get(0))?)
    }

    /// How far each (tenant, metric) was billed by the stored final exports of the periods before `period`: the
    /// latest end of the cycles their rows bill (a month's row bills the month). By tenant, then metric.
    pub fn billed_through(&self, period: Period) -> Result<Vec<(String, String, Timestamp)>, ReadError> {
        let mut statement = self.conn.prepare_cached(BILLED_THROUGH)?;
        let rows = statement.query_map(named_params! { ":period": period.to_string() }, |r| {
            Ok((r.get(0)?, r.get(1)?, Timestamp(r.get(2)?)))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Calls `each` with the recorded events of every reservation up to `watermark`, one (tenant, reservation_id)
    /// at a time ([`rules::reservation::same_reservation`]), its events in ledger order; answers how many events
    /// there were. Memory follows the largest reservation, not the ledger.
    pub fn for_each_reservation_through(
        &self,
        watermark: u64,
        each: impl FnMut(&[SequencedReservation]),
    ) -> Result<u64, ReadError> {
        Ok(for_each_reservation_through(&self.conn, watermark, each)?)
    }
}

fn metric_total(row: &Row<'_>) -> rusqlite::Result<MetricTotal> {
    Ok(MetricTotal { tenant: row.get(0)?, metric: row.get(1)?, amount: row.get(2)? })
}

/// A reservation event from a row of `seq, event_id, occurred_at, tenant, subject, metric, source,
/// reservation_id, action, amount, expires_at, fencing_token`, with its seq.
pub(crate) fn sequenced_reservation(row: &Row<'_>) -> rusqlite::Result<SequencedReservation> {
    let event = ReservationEvent {
        header: header(row, 1)?,
        reservation_id: row.get(7)?,
        action: symbol(row, 8, ReservationAction::from_symbol)?,
        amount: row.get(9)?,
        expires_at: row.get::<_, Option<i64>>(10)?.map(Timestamp),
        fencing_token: row.get(11)?,
    };
    Ok((row.get::<_, i64>(0)? as u64, event))
}

/// Hands `each` the rows of a query over reservation events, ordered by reservation, one (tenant, reservation_id)
/// at a time; answers how many events there were.
pub(crate) fn group_reservations(
    rows: &mut rusqlite::Rows<'_>,
    mut each: impl FnMut(&[SequencedReservation]),
) -> rusqlite::Result<u64> {
    let mut group: Vec<SequencedReservation> = Vec::new();
    let mut events = 0;
    while let Some(row) = rows.next()? {
        let (seq, event) = sequenced_reservation(row)?;
        if group.first().is_some_and(|(_, first)| !same_reservation(first, &event)) {
            each(&group);
            group.clear();
        }
        group.push((seq, event));
        events += 1;
    }
    if !group.is_empty() {
        each(&group);
    }
    Ok(events)
}

/// [`Ledger::for_each_reservation_through`] on a connection (the commit totals' catch-up reads it inside an
/// append's transaction).
pub(crate) fn for_each_reservation_through(
    conn: &rusqlite::Connection,
    watermark: u64,
    each: impl FnMut(&[SequencedReservation]),
) -> rusqlite::Result<u64> {
    let mut statement = conn.prepare_cached(RESERVATIONS_BY_RESERVATION)?;
    let mut rows = statement.query(named_params! { ":watermark": watermark_param(watermark) })?;
    group_reservations(&mut rows, each)
}
