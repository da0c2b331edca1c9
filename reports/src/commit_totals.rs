//! `commit_totals`: valid COMMIT amounts per (tenant, metric, period), kept in step with the ledger so that a
//! billing export never judges a month of reservations (SPEC 5 "Reservations": validity is decided by event
//! time, so a late event can change an earlier COMMIT's verdict; only reservations touched since the last
//! catch-up are judged again, with reconcile's `judge`).
//!
//! [`catch_up`] brings the totals from `commit_totals_state.through_seq` to a watermark: for every reservation
//! (tenant, reservation_id: `rules::reservation::same_reservation`) with an event in between, its verdict
//! before and after, the difference applied. It runs inside each append when the process installed
//! [`CommitTotalsHook`], and inside every export otherwise, so the totals are right whoever appended.

use std::collections::BTreeMap;

use ledger::Period;
use ledger::append_hook::AppendHook;
use rusqlite::{Connection, OptionalExtension, Transaction, params};
use schemas::{ReservationAction, ReservationEvent, Timestamp};

use crate::billing::{self, Key};
use crate::error::ReportError;

const TOUCHED: &str = include_str!("../sql/commit_totals_touched.sql");
const EVENTS_OF: &str = include_str!("../sql/reservation_events_of.sql");
const OF_PERIOD: &str = include_str!("../sql/commit_totals_of_period.sql");

/// (tenant, metric, period) -> amount.
type Deltas = BTreeMap<(String, String, String), i64>;

/// What a catch-up did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CatchUp {
    pub from_seq: u64,
    pub to_seq: u64,
    pub reservations_judged: u64,
}

/// Installs the catch-up in every append of this process (the ledger's append hook).
pub struct CommitTotalsHook;

impl AppendHook for CommitTotalsHook {
    /// Catches up to the append's watermark, or [`CATCH_UP_STEP_ENTRIES`] further when more is behind (what `serve`
    /// appended, since it keeps no totals): the first ingest after a busy day judged every reservation of the day
    /// inside its append, holding the write lock as long as an export once did. What is left is caught up by the
    /// next appends and by every export, which catches up to its own watermark whatever the totals' position.
    fn after_append(&mut self, tx: &Transaction<'_>, watermark: u64) -> rusqlite::Result<()> {
        let through = through_seq(tx)?;
        let to = watermark.min(through.saturating_add(CATCH_UP_STEP_ENTRIES));
        catch_up(tx, to).map(|_| ()).map_err(|e| match e {
            ReportError::Sqlite(e) => e,
            other => rusqlite::Error::ToSqlConversionFailure(Box::new(other)),
        })
    }
}

/// Entries a step of [`catch_up_in_steps`] brings the totals over, in a write transaction of its own.
pub const CATCH_UP_STEP_ENTRIES: u64 = 20_000;

/// Brings the totals near the ledger's current watermark in write transactions of [`CATCH_UP_STEP_ENTRIES`]
/// entries each, before an export catches up the rest in its own: other writers wait for one step at most. The hook
/// (`serve`) keeps no totals, so after a busy day the catch-up judges every reservation it made, and did so in the
/// export's one transaction: 1.1 million reservations held the write lock 10 to 12 s in a review's debug build,
/// past the 10 s the hook waits before it fails a group of decisions (until 2026-12-03). Returns the steps taken.
pub fn catch_up_in_steps(conn: &Connection) -> Result<u64, ReportError> {
    let mut steps = 0;
    let mut target = None;
    loop {
        let tx = rusqlite::Transaction::new_unchecked(conn, rusqlite::TransactionBehavior::Immediate)?;
        let through = through_seq(&tx)?;
        // The watermark when the first step began (read once): appends made meanwhile are the export's own catch-up.
        let target = match target {
            Some(target) => target,
            None => *target.insert(ledger::Ledger::open_snapshot(&tx)?.watermark),
        };
        if target.saturating_sub(through) <= CATCH_UP_STEP_ENTRIES {
            return Ok(steps);
        }
        catch_up(&tx, through + CATCH_UP_STEP_ENTRIES)?;
        tx.commit()?;
        steps += 1;
        std::thread::sleep(ledger::STEP_PAUSE);
    }
}

fn through_seq(conn: &Connection) -> rusqlite::Result<u64> {
    let through = conn
        .query_row("SELECT through_seq FROM commit_totals_state WHERE id = 1", [], |r| r.get::<_, i64>(0))
        .optional()?;
    Ok(through.map_or(0, |s| s as u64))
}

/// Brings `commit_totals` to `watermark`. `conn` must hold the ledger's write transaction.
pub fn catch_up(conn: &Connection, watermark: u64) -> Result<CatchUp, ReportError> {
    let through = through_seq(conn)?;
    let mut done = CatchUp { from_seq: through, to_seq: watermark, reservations_judged: 0 };
    if through >= watermark {
        return Ok(done);
    }
    let mut deltas = Deltas::new();
    if through == 0 {
        // Nothing judged yet: one pass over every reservation, one group at a time.
        let mut overflow = None;
        billing::for_each_reservation(conn, watermark, |group| {
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
            let rows =
                statement.query_map(params![through as i64, watermark as i64], |r| Ok((r.get(0)?, r.get(1)?)))?;
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
fn contribution(group: &[(u64, ReservationEvent)], through: u64) -> Option<((String, String, String), i64)> {
    let events: Vec<(u64, &ReservationEvent)> =
        group.iter().filter(|(s, _)| *s <= through).map(|(s, e)| (*s, e)).collect();
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
) -> Result<(), ReportError> {
    if let Some((key, amount)) = contribution {
        let delta = deltas.entry(key.clone()).or_insert(0);
        *delta = delta.checked_add(sign * amount).ok_or_else(|| ReportError::TotalOverflow {
            what: "committed amounts",
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
) -> Result<Vec<(u64, ReservationEvent)>, ReportError> {
    let mut statement = conn.prepare_cached(EVENTS_OF)?;
    let rows = statement.query_map(params![reservation_id, tenant, watermark as i64], |r| {
        Ok((r.get::<_, i64>(0)? as u64, billing::reservation_event(r)?))
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

fn apply(conn: &Connection, deltas: &Deltas, watermark: u64) -> Result<(), ReportError> {
    let mut upsert = conn.prepare_cached(
        "INSERT INTO commit_totals (tenant, metric, period, amount) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (tenant, metric, period) DO UPDATE SET amount = amount + excluded.amount",
    )?;
    for ((tenant, metric, period), delta) in deltas.iter().filter(|(_, d)| **d != 0) {
        upsert.execute(params![tenant, metric, period, delta])?;
    }
    conn.execute("UPDATE commit_totals_state SET through_seq = ?1 WHERE id = 1", [watermark as i64])?;
    // After the write: no total is negative (a COMMIT taken back was added before).
    let negative: i64 = conn.query_row("SELECT COUNT(*) FROM commit_totals WHERE amount < 0", [], |r| r.get(0))?;
    assert_eq!(negative, 0, "commit totals never go below zero");
    Ok(())
}

/// The valid COMMIT amounts of `period` per (tenant, metric), as of the last catch-up.
pub fn of_period(conn: &Connection, period: Period) -> Result<BTreeMap<Key, i64>, ReportError> {
    let mut statement = conn.prepare_cached(OF_PERIOD)?;
    let rows = statement.query_map([period.to_string()], |r| Ok(((r.get(0)?, r.get(1)?), r.get(2)?)))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}
