//! Reads for a writer that keeps an in-memory fold of the ledger (the enforcement hook) and follows what other
//! connections append: whether anything changed since it last looked ([`Ledger::data_version`]), and the entries
//! after the watermark it has folded ([`Ledger::for_each_entry_after`]), decoded only when the fold wants them.

use schemas::{Event, EventType, Timestamp};

use crate::Ledger;
use crate::error::ReadError;
use crate::read::watermark_param;

/// Entries after a watermark (`?1`) that change a fold (usage, reservations, grants, policies), in order. Usage
/// that happened before the horizon (`?2`) is in no window that can contain now; a reservation's events count
/// whatever their date, since a reservation from another enforcer may hold for longer than a month and a close
/// dated long ago may still be valid (contract §5). Decisions and adjustments are read too, and skipped by type
/// before they are decoded.
const ENTRIES_AFTER: &str = "SELECT seq, event_type, payload_fingerprint, payload FROM entries
     WHERE seq > ?1 AND status = 'recorded'
       AND (occurred_at >= ?2 OR event_type IN ('PolicyEvent', 'GrantEvent', 'ReservationEvent', 'PlanAssignmentEvent'))
     ORDER BY seq";

/// The same at start, when every entry is after the watermark: of the reservations, only the events of those
/// whose RESERVE (or a lease's RENEW) expires after the horizon (it could still hold now, or be closed late), or that happened after
/// it, which keeps the fold of a large ledger from reading every reservation it ever held.
const ENTRIES_AT_START: &str = "SELECT seq, event_type, payload_fingerprint, payload FROM entries
     WHERE seq > ?1 AND status = 'recorded'
       AND (occurred_at >= ?2 OR event_type IN ('PolicyEvent', 'GrantEvent', 'PlanAssignmentEvent')
            OR (event_type = 'ReservationEvent' AND seq IN (
                SELECT seq FROM reservation_events WHERE reservation_id IN (
                    SELECT reservation_id FROM reservation_events
                    WHERE action IN ('RESERVE', 'RENEW') AND expires_at >= ?2))))
     ORDER BY seq";

/// The reservation events up to a watermark that a fold from a snapshot at it reads before the entries after it.
const RESERVATION_ENTRIES_BEFORE_TAIL: &str = include_str!("../queries/reservation_entries_before_tail.sql");

/// Which entries after a watermark a fold reads ([`Ledger::for_each_entry_after`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fold {
    /// A fold built from nothing: the reservations whose RESERVE expires after the horizon, or whose events
    /// happened after it, not every reservation the ledger ever held.
    AtStart,
    /// A fold catching up with what other writers appended after its watermark: every reservation event.
    After,
}

/// One recorded entry a fold reads: its sequence number and type, its event decoded only when asked (a fold
/// skips decisions and adjustments, and entries it appended itself).
pub struct FoldEntry<'r> {
    /// Its ledger sequence number.
    pub seq: u64,
    /// The type of its event.
    pub event_type: EventType,
    fingerprint: u64,
    payload: &'r [u8],
    ledger: &'r Ledger,
}

impl FoldEntry<'_> {
    /// Its event, decoded from the stored payload.
    pub fn event(&self) -> Result<Event, ReadError> {
        self.ledger
            .catalog
            .decode_payload(self.fingerprint, self.payload)
            .map_err(|e| ReadError::Corrupt { seq: self.seq, message: e.to_string() })
    }
}

impl Ledger {
    /// SQLite's `PRAGMA data_version`: it changes only when another connection commits, so while it stays the
    /// same a fold has nothing to catch up on and the tip need not be read.
    pub fn data_version(&self) -> Result<i64, ReadError> {
        Ok(self.conn.prepare_cached("PRAGMA data_version")?.query_row([], |r| r.get(0))?)
    }

    /// Calls `each` with the recorded entries after `watermark` that a fold of the state since `horizon` reads
    /// ([`Fold`]), in ledger order, until it fails. A read that fails halfway leaves the entries before it
    /// given: a fold that moves its watermark to each entry goes on from there next time.
    pub fn for_each_entry_after(
        &self,
        watermark: u64,
        horizon: Timestamp,
        fold: Fold,
        mut each: impl FnMut(FoldEntry<'_>) -> Result<(), ReadError>,
    ) -> Result<(), ReadError> {
        let query = match fold {
            Fold::AtStart => ENTRIES_AT_START,
            Fold::After => ENTRIES_AFTER,
        };
        let mut statement = self.conn.prepare_cached(query)?;
        let mut rows = statement.query(rusqlite::params![watermark_param(watermark), horizon.micros()])?;
        while let Some(row) = rows.next()? {
            let seq = row.get::<_, i64>(0)? as u64;
            let type_name = row.get_ref(1)?.as_str().map_err(rusqlite::Error::from)?;
            let event_type = EventType::from_name(type_name)
                .ok_or_else(|| ReadError::Corrupt { seq, message: format!("unknown event type {type_name:?}") })?;
            let fingerprint = row.get::<_, i64>(2)? as u64;
            let payload = row.get_ref(3)?.as_blob().map_err(rusqlite::Error::from)?;
            each(FoldEntry { seq, event_type, fingerprint, payload, ledger: self })?;
        }
        Ok(())
    }

    /// Calls `each` with the recorded reservation events up to `watermark` of the reservation ids that an entry after
    /// it names, of those a fold of the state since `horizon` reads, in ledger order: what a fold started from a
    /// snapshot at `watermark` reads of the reservations the entries after it go on with.
    pub fn for_each_reservation_entry_before_tail(
        &self,
        watermark: u64,
        horizon: Timestamp,
        mut each: impl FnMut(FoldEntry<'_>) -> Result<(), ReadError>,
    ) -> Result<(), ReadError> {
        let mut statement = self.conn.prepare_cached(RESERVATION_ENTRIES_BEFORE_TAIL)?;
        let mut rows = statement.query(rusqlite::params![watermark_param(watermark), horizon.micros()])?;
        while let Some(row) = rows.next()? {
            let seq = row.get::<_, i64>(0)? as u64;
            let fingerprint = row.get::<_, i64>(2)? as u64;
            let payload = row.get_ref(3)?.as_blob().map_err(rusqlite::Error::from)?;
            each(FoldEntry { seq, event_type: EventType::ReservationEvent, fingerprint, payload, ledger: self })?;
        }
        Ok(())
    }
}
