//! Point reads by an id, for a writer answering one request (the enforcement hook): the event recorded under an
//! event_id (an idempotency key seen before the writer started), and the events of one reservation (why a close
//! is refused). Each is a few index probes, prepared once per connection.

use rules::reservation::Facts;
use schemas::{Event, ReservationAction, Timestamp};

use crate::Ledger;
use crate::dedup;
use crate::error::ReadError;
use crate::read::symbol;

/// The stored payload of one entry, to decode.
const PAYLOAD_OF_ENTRY: &str = "SELECT payload_fingerprint, payload FROM entries WHERE seq = ?";

/// Whether any event of a reservation_id is stored (recorded or a conflicting copy).
const RESERVATION_HAS_EVENTS: &str = "SELECT 1 FROM reservation_events WHERE reservation_id = ? LIMIT 1";

/// The recorded events of a reservation_id, of every tenant, with what judging reads of them.
const RESERVATION_EVENTS: &str =
    "SELECT e.seq, r.action, r.amount, r.expires_at, e.tenant, e.occurred_at, r.fencing_token
         FROM reservation_events r JOIN entries e ON e.seq = r.seq
         WHERE r.reservation_id = ? AND e.status = 'recorded'";

/// The greatest fencing token of a lease's RESERVE per tenant and metric (any entry: a token seen once is never
/// granted again).
const GREATEST_FENCING_TOKENS: &str = "SELECT e.tenant, e.metric, MAX(r.fencing_token)
         FROM reservation_events r INDEXED BY reservation_events_of_leases JOIN entries e ON e.seq = r.seq
         WHERE r.fencing_token IS NOT NULL AND r.action = 'RESERVE'
         GROUP BY e.tenant, e.metric";

/// The latest recorded usage event of a metric per tenant, by event time (of two at the same instant the later
/// entry): a gauge's level (PolicyEvent v8). Read at a hook's start, for levels reported longer ago than its fold
/// reaches; the scan is of the metric's usage alone.
const LATEST_LEVELS: &str = "SELECT tenant, occurred_at, quantity FROM (
             SELECT e.tenant, e.occurred_at, u.quantity,
                    ROW_NUMBER() OVER (PARTITION BY e.tenant ORDER BY e.occurred_at DESC, e.seq DESC) AS n
             FROM usage_events u JOIN entries e ON e.seq = u.seq
             WHERE e.metric = ? AND e.status = 'recorded' AND e.event_type = 'UsageEvent')
         WHERE n = 1";

/// One recorded event of a reservation_id, as judging a close reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservationFacts {
    /// Its ledger sequence number.
    pub seq: u64,
    /// The tenant whose reservation it is about: reservations of two tenants may share an id.
    pub tenant: String,
    /// What judging reads of it.
    pub facts: Facts,
}

impl Ledger {
    /// The event recorded under `event_id` (the first entry holding it; later ones are conflicting copies), if
    /// any. An id the key filter (when kept) has never seen is answered at once, without a probe.
    pub fn recorded_event(&self, event_id: &str) -> Result<Option<Event>, ReadError> {
        Ok(self.recorded_entry(event_id)?.map(|(_, event)| event))
    }

    /// [`Ledger::recorded_event`] with the sequence number of its entry.
    pub fn recorded_entry(&self, event_id: &str) -> Result<Option<(u64, Event)>, ReadError> {
        if !self.may_hold(event_id) {
            return Ok(None);
        }
        let Some((seq, ..)) = dedup::entries_of(&self.conn, event_id)?.into_iter().next() else { return Ok(None) };
        let (fingerprint, payload): (i64, Vec<u8>) =
            self.conn.prepare_cached(PAYLOAD_OF_ENTRY)?.query_row([seq as i64], |r| Ok((r.get(0)?, r.get(1)?)))?;
        let event = self
            .catalog
            .decode_payload(fingerprint as u64, &payload)
            .map_err(|e| ReadError::Corrupt { seq, message: e.to_string() })?;
        Ok(Some((seq, event)))
    }

    /// Whether the ledger stores any event of `reservation_id` (recorded or a conflicting copy, of any tenant).
    pub fn has_reservation_events(&self, reservation_id: &str) -> Result<bool, ReadError> {
        let mut statement = self.conn.prepare_cached(RESERVATION_HAS_EVENTS)?;
        Ok(statement.exists([reservation_id])?)
    }

    /// The greatest fencing token each tenant's metric granted a lease, as (tenant, metric, token): what a hook's next
    /// lease must exceed, whatever it folds.
    pub fn greatest_fencing_tokens(&self) -> Result<Vec<(String, String, i64)>, ReadError> {
        let mut statement = self.conn.prepare_cached(GREATEST_FENCING_TOKENS)?;
        let rows = statement.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The level of the gauge `metric` each tenant last reported, as (tenant, event time, level): the quantity of its
    /// latest usage event of the metric.
    pub fn latest_levels(&self, metric: &str) -> Result<Vec<(String, Timestamp, i64)>, ReadError> {
        let mut statement = self.conn.prepare_cached(LATEST_LEVELS)?;
        let rows = statement.query_map([metric], |r| Ok((r.get(0)?, Timestamp(r.get(1)?), r.get(2)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The recorded events of `reservation_id`, of every tenant, in no particular order.
    pub fn reservation_facts(&self, reservation_id: &str) -> Result<Vec<ReservationFacts>, ReadError> {
        let mut statement = self.conn.prepare_cached(RESERVATION_EVENTS)?;
        let rows = statement.query_map([reservation_id], |r| {
            let facts = Facts {
                action: symbol(r, 1, ReservationAction::from_symbol)?,
                amount: r.get(2)?,
                expires_at: r.get::<_, Option<i64>>(3)?.map(Timestamp),
                occurred_at: Timestamp(r.get(5)?),
                fencing_token: r.get(6)?,
            };
            Ok(ReservationFacts { seq: r.get::<_, i64>(0)? as u64, tenant: r.get(4)?, facts })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}
