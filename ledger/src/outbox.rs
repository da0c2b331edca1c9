//! The outbox: entries this process wrote that must also reach Kafka (SPEC 6, issue "reconcile": adjustments
//! to `quota.adjustments`). An entry joins the outbox in the transaction that records it; a publisher reads the
//! pending ones in ledger order, sends them, and records each acknowledgement. A broker outage only delays.

use rusqlite::{Transaction, TransactionBehavior, params};
use schemas::EventType;
use serde::Serialize;

use crate::batch::AppendOutcome;
use crate::error::{OutboxError, ReadError};
use crate::{Ledger, now_micros};

/// An outbox entry not yet acknowledged by a broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEntry {
    pub seq: u64,
    pub event_type: EventType,
    pub event_id: String,
    /// The message key (SPEC 2): the tenant.
    pub tenant: String,
    /// Single-object encoding of the entry's payload, as ingest reads it back.
    pub message: Vec<u8>,
}

/// How far the outbox got.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct OutboxStatus {
    pub enqueued: u64,
    pub published: u64,
    pub pending: u64,
}

/// Puts the entries an append recorded into the outbox (called inside the append's transaction).
pub(crate) fn enqueue(tx: &Transaction<'_>, outcomes: &[AppendOutcome]) -> rusqlite::Result<()> {
    let mut insert = tx.prepare_cached("INSERT INTO outbox (seq) VALUES (?)")?;
    for outcome in outcomes {
        if let AppendOutcome::Recorded { seq } = outcome {
            insert.execute([*seq as i64])?;
        }
    }
    Ok(())
}

impl Ledger {
    /// Up to `limit` pending outbox entries, oldest first.
    pub fn outbox_pending(&self, limit: u64) -> Result<Vec<OutboxEntry>, ReadError> {
        let mut statement = self.conn.prepare_cached(
            "SELECT e.seq, e.event_type, e.event_id, e.tenant, e.payload_fingerprint, e.payload
             FROM outbox o JOIN entries e ON e.seq = o.seq
             WHERE NOT EXISTS (SELECT 1 FROM outbox_published p WHERE p.seq = o.seq)
             ORDER BY o.seq LIMIT ?",
        )?;
        let rows = statement.query_map([limit as i64], |r| {
            let seq = r.get::<_, i64>(0)? as u64;
            let type_name: String = r.get(1)?;
            let fingerprint = r.get::<_, i64>(4)? as u64;
            let payload: Vec<u8> = r.get(5)?;
            let mut message = Vec::with_capacity(schemas::catalog::SINGLE_OBJECT_HEADER_BYTES + payload.len());
            message.extend_from_slice(&schemas::catalog::SINGLE_OBJECT_MAGIC);
            message.extend_from_slice(&fingerprint.to_le_bytes());
            message.extend_from_slice(&payload);
            Ok((seq, type_name, r.get(2)?, r.get(3)?, message))
        })?;
        let mut pending = Vec::new();
        for row in rows {
            let (seq, type_name, event_id, tenant, message) = row?;
            let event_type = EventType::from_name(&type_name)
                .ok_or_else(|| ReadError::Corrupt { seq, message: format!("unknown event type {type_name:?}") })?;
            pending.push(OutboxEntry { seq, event_type, event_id, tenant, message });
        }
        Ok(pending)
    }

    /// Records that a broker acknowledged these entries on these topics, in one transaction.
    pub fn outbox_published(&mut self, acknowledged: &[(u64, String)]) -> Result<(), OutboxError> {
        let published_at = now_micros();
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        for (seq, topic) in acknowledged {
            let in_outbox: bool =
                tx.query_row("SELECT EXISTS (SELECT 1 FROM outbox WHERE seq = ?)", [*seq as i64], |r| r.get(0))?;
            if !in_outbox {
                return Err(OutboxError::NotInOutbox { seq: *seq });
            }
            tx.prepare_cached("INSERT OR IGNORE INTO outbox_published (seq, topic, published_at) VALUES (?, ?, ?)")?
                .execute(params![*seq as i64, topic, published_at])?;
        }
        tx.commit()?;
        Ok(())
    }

    pub fn outbox_status(&self) -> Result<OutboxStatus, ReadError> {
        let count = |sql: &str| self.conn.query_row(sql, [], |r| r.get::<_, i64>(0)).map(|n| n as u64);
        let enqueued = count("SELECT COUNT(*) FROM outbox")?;
        let published = count("SELECT COUNT(*) FROM outbox_published")?;
        Ok(OutboxStatus { enqueued, published, pending: enqueued - published })
    }
}
