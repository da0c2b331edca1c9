//! `commit_totals`: valid COMMIT amounts per (tenant, metric, period), kept in step with the ledger so that a
//! billing export never judges a month of reservations (contract §5 "Reservations": validity is decided by event
//! time, so a late event can change an earlier COMMIT's verdict; only reservations touched since the last
//! catch-up are judged again, with `rules::reservation::judge`).
//!
//! A catch-up brings the totals from `commit_totals_state.through_seq` to a watermark: for every reservation
//! (tenant, reservation_id: `rules::reservation::same_reservation`) with an event in between, its verdict
//! before and after, the difference applied. It runs inside each append when the process keeps the totals
//! ([`Ledger::keep_commit_totals`]), and inside every export's transaction otherwise (a close, a preview), so the
//! totals are right whoever appended.

use std::collections::BTreeMap;

use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, named_params, params};
use schemas::{ReservationAction, Timestamp};

use crate::append_hook::AppendHook;
use crate::billing_reads::{MetricTotal, for_each_reservation_through, sequenced_reservation};
use crate::error::ReadError;
use crate::read::{SequencedReservation, watermark_param};
use crate::status::read_totals;
use crate::{Ledger, Period, STEP_PAUSE};

const TOUCHED: &str = include_str!("../queries/commit_totals_touched.sql");
const EVENTS_OF: &str = include_str!("../queries/reservation_events_of.sql");
const OF_PERIOD: &str = include_str!("../queries/commit_totals_of_period.sql");

/// Entries a step of [`Ledger::catch_up_commit_totals_in_steps`] brings the totals over, in a write transaction of
/// its own; and at most how far one append catches them up.
pub const CATCH_UP_STEP_ENTRIES: u64 = 20_000;

/// (tenant, metric, period) -> amount.
type Deltas = BTreeMap<(String, String, String), i64>;

/// What a catch-up did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CatchUp {
    /// The watermark the totals covered before.
    pub from_seq: u64,
    /// The watermark they cover now.
    pub to_seq: u64,
    /// Reservations judged (again) on the way.
    pub reservations_judged: u64,
}

/// Bringing the commit totals up to date failed; nothing of the failed transaction was recorded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TotalsError {
    /// A total would leave i64 (SQLite would turn it into a float).
    #[error("the committed amounts of {tenant} {metric} in {period} pass 2^63 - 1, commit totals not caught up")]
    Overflow {
        /// The tenant of the total.
        tenant: String,
        /// Its metric.
        metric: String,
        /// Its period (YYYY-MM).
        period: String,
    },
    /// SQLite failed.
    #[error("ledger write failed, commit totals not caught up")]
    Sqlite(#[from] rusqlite::Error),
}

/// The catch-up run inside every append of a ledger that keeps the totals.
struct CommitTotalsHook;

impl AppendHook for CommitTotalsHook {
    /// Catches up to the append's watermark, or [`CATCH_UP_STEP_ENTRIES`] further when more is behind (what `serve`
    /// appended, since it keeps no totals): judging a busy day's reservations inside one append would hold the write
    /// lock as long as an export's whole catch-up. What is left is caught up by the next appends and by every export,
    /// which catches up to its own watermark whatever the totals' position.
    fn after_append(&mut self, tx: &Transaction<'_>, watermark: u64) -> rusqlite::Result<()> {
        let through = through_seq(tx)?;
        let to = watermark.min(through.saturating_add(CATCH_UP_STEP_ENTRIES));
        catch_up(tx, to).map(|_| ()).map_err(|e| match e {
            TotalsError::Sqlite(e) => e,
            other => rusqlite::Error::ToSqlConversionFailure(Box::new(other)),
        })
    }
}

impl Ledger {
    /// Keeps the commit totals inside every later append's transaction (a step of them at most per append), so that
    /// an export judges only the reservations touched since. Without it the next export catches them up.
    pub fn keep_commit_totals(&mut self) {
        self.set_append_hook(Box::new(CommitTotalsHook));
    }

    /// Brings the commit totals to `watermark` (a watermark at or below theirs changes nothing): inside the
    /// transaction open on this ledger when there is one, which must be a write transaction (a close's, a
    /// preview's), else in a write transaction of its own.
    pub fn catch_up_commit_totals(&self, watermark: u64) -> Result<CatchUp, TotalsError> {
        if !self.conn.is_autocommit() {
            return catch_up(&self.conn, watermark);
        }
        let tx = Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate)?;
        let done = catch_up(&tx, watermark)?;
        tx.commit()?;
        Ok(done)
    }

    /// Brings the commit totals near the ledger's current watermark in write transactions of
    /// [`CATCH_UP_STEP_ENTRIES`] entries each, pausing [`STEP_PAUSE`] between them, before an export catches up the
    /// rest in its own: other writers wait for one step at most. The hook (`serve`) keeps no totals, so after a busy
    /// day the catch-up judges every reservation it made; in one transaction, 1.1 million reservations held the write
    /// lock 10 to 12 s in a debug build, past the 10 s the hook waits before it fails a group of decisions. Answers
    /// the steps taken.
    pub fn catch_up_commit_totals_in_steps(&self) -> Result<u64, TotalsError> {
        let mut steps = 0;
        let mut target = None;
        loop {
            let tx = Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate)?;
            let through = through_seq(&tx)?;
            // The watermark when the first step began (read once): appends made meanwhile are the export's own
            // catch-up.
            let target = match target {
                Some(target) => target,
                None => *target.insert(read_totals(&tx)?.watermark),
            };
            if target.saturating_sub(through) <= CATCH_UP_STEP_ENTRIES {
                return Ok(steps);
            }
            catch_up(&tx, through + CATCH_UP_STEP_ENTRIES)?;
            tx.commit()?;
            steps += 1;
            std::thread::sleep(STEP_PAUSE);
        }
    }

    /// The valid COMMIT amounts of `period` per (tenant, metric), as of the last catch-up, without the zeros. By
    /// tenant, then metric.
    pub fn commit_totals_of_period(&self, period: Period) -> Result<Vec<MetricTotal>, ReadError> {
        let mut statement = self.conn.prepare_cached(OF_PERIOD)?;
        let rows = statement.query_map(named_params! { ":period": period.to_string() }, |r| {
            Ok(MetricTotal { tenant: r.get(0)?, metric: r.get(1)?, amount: r.get(2)? })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The watermark the commit totals cover.
    pub fn commit_totals_through(&self) -> Result<u64, ReadError> {
        Ok(through_seq(&self.conn)?)
    }
}

fn through_seq(conn: &Connection) -> rusqlite::Result<u64> {
    let through = conn
        .prepare_cached("SELECT through_seq FROM commit_totals_state WHERE id = 1")?
        .query_row([], |r| r.get::<_, i64>(0))
        .optional()?;
    Ok(through.map_or(0, |s| s as u64))
}

/// Brings `commit_totals` to `watermark`. `conn` must hold the ledger's write transaction.
pub(crate) fn catch_up(conn: &Connection, watermark: u64) -> Result<CatchUp, TotalsError> {
    let through = through_seq(conn)?;
    let mut done = CatchUp { from_seq: through, to_seq: watermark, reservations_judged: 0 };
    if through >= watermark {
        return Ok(done);
    }
    let mut deltas = Deltas::new();
    if through == 0 {
        // Nothing judged yet: one pass over every reservation, one group at a time.
        let mut overflow = None;
        for_each_reservation_through(conn, watermark, |group| {
            done.reservations_judged += 1;
            if let Err(e) = add(&mut deltas, contribution(group, u64::MAX), 1) {
                overflow.get_or_insert(e);
            }
        })?;
        if let Some(e) = overflow {
            return Err(e);
        }
    } else {
        let touched: Vec<(String, String)> = {
            let mut statement = conn.prepare_cached(TOUCHED)?;
            let params = named_params! { ":after": watermark_param(through), ":watermark": watermark_param(watermark) };
            let rows = statement.query_map(params, |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect::<rusqlite::Result<_>>()?
        };
        for (reservation_id, tenant) in touched {
            let group = events_of(conn, &reservation_id, &tenant, watermark)?;
            done.reservations_judged += 1;
            add(&mut deltas, contribution(&group, through), -1)?;
            add(&mut deltas, contribution(&group, u64::MAX), 1)?;
        }
    }
    apply(conn, &deltas, watermark)?;
    Ok(done)
}

/// The valid COMMIT of a reservation judged on its events up to `through`: (tenant, metric, period), amount.
fn contribution(group: &[SequencedReservation], through: u64) -> Option<((String, String, String), i64)> {
    let events: Vec<_> = group.iter().filter(|(s, _)| *s <= through).map(|(s, e)| (*s, e)).collect();
    // `as_of` only decides expiry, which is never consumption.
    let verdict = rules::reservation::judge(&events, Timestamp(i64::MAX));
    let (seq, ReservationAction::COMMIT, amount) = verdict.close? else { return None };
    let commit = &group.iter().find(|(s, _)| *s == seq).expect("the close is one of the group").1;
    let h = &commit.header;
    Some(((h.tenant.clone(), h.metric.clone(), Period::containing(h.occurred_at).to_string()), amount))
}

/// Adds a reservation's contribution to the deltas; a sum past i64 is an error naming its key, not a panic (every
/// append would panic again: migration 015 refuses a total that leaves i64 too).
fn add(
    deltas: &mut Deltas,
    contribution: Option<((String, String, String), i64)>,
    sign: i64,
) -> Result<(), TotalsError> {
    if let Some((key, amount)) = contribution {
        let delta = deltas.entry(key.clone()).or_insert(0);
        *delta = delta.checked_add(sign * amount).ok_or_else(|| TotalsError::Overflow {
            tenant: key.0,
            metric: key.1,
            period: key.2,
        })?;
    }
    Ok(())
}

/// The recorded events of one reservation (its reservation_id and tenant) up to `watermark`.
fn events_of(
    conn: &Connection,
    reservation_id: &str,
    tenant: &str,
    watermark: u64,
) -> rusqlite::Result<Vec<SequencedReservation>> {
    let mut statement = conn.prepare_cached(EVENTS_OF)?;
    let params = named_params! {
        ":reservation_id": reservation_id,
        ":tenant": tenant,
        ":watermark": watermark_param(watermark),
    };
    let rows = statement.query_map(params, sequenced_reservation)?;
    rows.collect()
}

fn apply(conn: &Connection, deltas: &Deltas, watermark: u64) -> rusqlite::Result<()> {
    let mut upsert = conn.prepare_cached(
        "INSERT INTO commit_totals (tenant, metric, period, amount) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (tenant, metric, period) DO UPDATE SET amount = amount + excluded.amount",
    )?;
    for ((tenant, metric, period), delta) in deltas.iter().filter(|(_, d)| **d != 0) {
        upsert.execute(params![tenant, metric, period, delta])?;
    }
    conn.prepare_cached("UPDATE commit_totals_state SET through_seq = ?1 WHERE id = 1")?
        .execute([watermark_param(watermark)])?;
    // After the write: no total is negative (a COMMIT taken back was added before).
    let negative: i64 =
        conn.prepare_cached("SELECT COUNT(*) FROM commit_totals WHERE amount < 0")?.query_row([], |r| r.get(0))?;
    assert_eq!(negative, 0, "commit totals never go below zero");
    Ok(())
}
