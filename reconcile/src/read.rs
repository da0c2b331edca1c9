//! Ledger reads for a reconciliation: the small tables whole (policies, grants, adjustments, period closes),
//! the large ones as streams (reservation events grouped by reservation_id, usage in ledger order), so that
//! memory follows the number of windows and reservations, never the number of events.

use std::collections::HashMap;

use rusqlite::{Connection, Row};
use schemas::*;

use crate::concern::{Concern, Recorded};

fn header(row: &Row<'_>, first: usize) -> rusqlite::Result<Header> {
    Ok(Header {
        event_id: row.get(first)?,
        occurred_at: Timestamp(row.get(first + 1)?),
        tenant: row.get(first + 2)?,
        subject: row.get(first + 3)?,
        metric: row.get(first + 4)?,
        source: row.get(first + 5)?,
    })
}

const HEADER_COLUMNS: &str = "e.event_id, e.occurred_at, e.tenant, e.subject, e.metric, e.source";

fn symbol<T>(row: &Row<'_>, index: usize, parse: fn(&str) -> Option<T>) -> rusqlite::Result<T> {
    let text: String = row.get(index)?;
    parse(&text).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            index,
            rusqlite::types::Type::Text,
            format!("unknown symbol {text:?}").into(),
        )
    })
}

/// Every recorded policy version.
pub fn policies(conn: &Connection) -> rusqlite::Result<Vec<PolicyEvent>> {
    let sql = format!(
        "SELECT {HEADER_COLUMNS}, p.policy_id, p.version, p.scope, p.\"limit\", p.window, p.enforcement, p.effective_from,
                p.burst
         FROM policy_events p JOIN entries e ON e.seq = p.seq WHERE e.status = 'recorded' ORDER BY e.seq"
    );
    let mut statement = conn.prepare(&sql)?;
    let rows = statement.query_map([], |r| {
        Ok(PolicyEvent {
            header: header(r, 0)?,
            policy_id: r.get(6)?,
            version: r.get(7)?,
            scope: symbol(r, 8, Scope::from_symbol)?,
            limit: r.get(9)?,
            window: symbol(r, 10, Window::from_symbol)?,
            enforcement: symbol(r, 11, Enforcement::from_symbol)?,
            effective_from: Timestamp(r.get(12)?),
            burst: r.get(13)?,
        })
    })?;
    rows.collect()
}

/// Every recorded grant, by (tenant, metric).
pub fn grants(conn: &Connection) -> rusqlite::Result<HashMap<(String, String), Vec<GrantEvent>>> {
    let sql = format!(
        "SELECT {HEADER_COLUMNS}, g.grant_id, g.amount, g.valid_from, g.valid_until, g.reason
         FROM grant_events g JOIN entries e ON e.seq = g.seq WHERE e.status = 'recorded' ORDER BY e.seq"
    );
    let mut statement = conn.prepare(&sql)?;
    let rows = statement.query_map([], |r| {
        Ok(GrantEvent {
            header: header(r, 0)?,
            grant_id: r.get(6)?,
            amount: r.get(7)?,
            valid_from: Timestamp(r.get(8)?),
            valid_until: Timestamp(r.get(9)?),
            reason: r.get(10)?,
        })
    })?;
    let mut by_tenant: HashMap<(String, String), Vec<GrantEvent>> = HashMap::new();
    for grant in rows {
        let grant = grant?;
        by_tenant.entry((grant.header.tenant.clone(), grant.header.metric.clone())).or_default().push(grant);
    }
    Ok(by_tenant)
}

/// Every recorded adjustment, in ledger order.
pub fn adjustments(conn: &Connection) -> rusqlite::Result<Vec<AdjustmentEvent>> {
    let sql = format!(
        "SELECT {HEADER_COLUMNS}, a.adjustment_id, a.kind, a.policy_id, a.window_start, a.window_end, a.amount,
                a.refs, a.run_id
         FROM adjustment_events a JOIN entries e ON e.seq = a.seq WHERE e.status = 'recorded' ORDER BY e.seq"
    );
    let mut statement = conn.prepare(&sql)?;
    let rows = statement.query_map([], |r| {
        let refs: String = r.get(12)?;
        let refs: Vec<String> = serde_json::from_str(&refs)
            .map_err(|e| rusqlite::Error::FromSqlConversionFailure(12, rusqlite::types::Type::Text, Box::new(e)))?;
        Ok(AdjustmentEvent {
            header: header(r, 0)?,
            adjustment_id: r.get(6)?,
            kind: symbol(r, 7, AdjustmentKind::from_symbol)?,
            policy_id: r.get(8)?,
            window_start: r.get::<_, Option<i64>>(9)?.map(Timestamp),
            window_end: r.get::<_, Option<i64>>(10)?.map(Timestamp),
            amount: r.get(11)?,
            refs,
            run_id: r.get(13)?,
        })
    })?;
    rows.collect()
}

/// What the recorded adjustments add up to, per concern.
pub fn recorded_by_concern(adjustments: &[AdjustmentEvent]) -> HashMap<Concern, Recorded> {
    let mut conflict_ordinals: HashMap<&str, u32> = HashMap::new();
    let mut recorded: HashMap<Concern, Recorded> = HashMap::new();
    for adjustment in adjustments {
        let mut ordinal = 0;
        if adjustment.kind == AdjustmentKind::CONFLICTING_DUPLICATE
            && let Some(first) = adjustment.refs.first()
        {
            let next = conflict_ordinals.entry(first.as_str()).or_insert(0);
            *next += 1;
            ordinal = *next;
        }
        if let Some(concern) = Concern::of_adjustment(adjustment, ordinal) {
            recorded.entry(concern).or_default().add(adjustment.amount);
        }
    }
    recorded
}

/// One reservation event with its ledger sequence number.
pub type SequencedReservation = (u64, ReservationEvent);

/// Calls `each` with the recorded events of every reservation_id, one reservation_id at a time.
pub fn for_each_reservation(
    conn: &Connection,
    mut each: impl FnMut(&[SequencedReservation]) -> rusqlite::Result<()>,
) -> rusqlite::Result<u64> {
    let sql = format!(
        "SELECT e.seq, {HEADER_COLUMNS}, r.reservation_id, r.action, r.amount, r.expires_at
         FROM reservation_events r JOIN entries e ON e.seq = r.seq
         WHERE e.status = 'recorded' ORDER BY r.reservation_id, e.seq"
    );
    let mut statement = conn.prepare(&sql)?;
    let mut rows = statement.query([])?;
    let mut group: Vec<SequencedReservation> = Vec::new();
    let mut events = 0;
    while let Some(r) = rows.next()? {
        let event = ReservationEvent {
            header: header(r, 1)?,
            reservation_id: r.get(7)?,
            action: symbol(r, 8, ReservationAction::from_symbol)?,
            amount: r.get(9)?,
            expires_at: r.get::<_, Option<i64>>(10)?.map(Timestamp),
        };
        if group.first().is_some_and(|(_, first)| first.reservation_id != event.reservation_id) {
            each(&group)?;
            group.clear();
        }
        group.push((r.get::<_, i64>(0)? as u64, event));
        events += 1;
    }
    if !group.is_empty() {
        each(&group)?;
    }
    Ok(events)
}

/// A conflicting copy of an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConflictingCopy {
    pub seq: u64,
    pub header: Header,
    /// Its quantity when it is a UsageEvent, else 0 (SPEC 5 "amount = its quantity or 0").
    pub quantity: i64,
}

/// Every conflicting duplicate, in ledger order.
pub fn conflicting_copies(conn: &Connection) -> rusqlite::Result<Vec<ConflictingCopy>> {
    let sql = format!(
        "SELECT e.seq, {HEADER_COLUMNS}, COALESCE(u.quantity, 0)
         FROM entries e LEFT JOIN usage_events u ON u.seq = e.seq
         WHERE e.status = 'conflicting_duplicate' ORDER BY e.seq"
    );
    let mut statement = conn.prepare(&sql)?;
    let rows = statement.query_map([], |r| {
        Ok(ConflictingCopy { seq: r.get::<_, i64>(0)? as u64, header: header(r, 1)?, quantity: r.get(7)? })
    })?;
    rows.collect()
}

/// One counted UsageEvent, as the consumption stream reads it (strings borrowed from the row).
pub struct UsageRow<'r> {
    pub seq: u64,
    pub tenant: &'r str,
    pub subject: Option<&'r str>,
    pub metric: &'r str,
    pub occurred_at: Timestamp,
    pub quantity: i64,
    pub event_id: &'r str,
}

/// Calls `each` with every counted UsageEvent, in ledger order.
pub fn for_each_usage(conn: &Connection, mut each: impl FnMut(UsageRow<'_>)) -> rusqlite::Result<u64> {
    let mut statement = conn.prepare(
        "SELECT e.seq, e.tenant, e.subject, e.metric, e.occurred_at, u.quantity, e.event_id
         FROM usage_events u JOIN entries e ON e.seq = u.seq WHERE e.status = 'recorded'",
    )?;
    let mut rows = statement.query([])?;
    let mut count = 0;
    while let Some(r) = rows.next()? {
        each(UsageRow {
            seq: r.get::<_, i64>(0)? as u64,
            tenant: r.get_ref(1)?.as_str()?,
            subject: r.get_ref(2)?.as_str_or_null()?,
            metric: r.get_ref(3)?.as_str()?,
            occurred_at: Timestamp(r.get(4)?),
            quantity: r.get(5)?,
            event_id: r.get_ref(6)?.as_str()?,
        });
        count += 1;
    }
    Ok(count)
}
