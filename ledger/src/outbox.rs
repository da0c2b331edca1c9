//! The outbox: entries this process wrote that must also reach Kafka (contract §6; reconcile's adjustments
//! to `quota.adjustments`). An entry joins the outbox in the transaction that records it; a publisher reads the
//! pending ones in ledger order, sends them, and records each acknowledgement. A broker outage only delays.
//!
//! The pending entries start at the cursor (`outbox_cursor`, `ddl/011-outbox-cursor.sql`): every outbox entry below
//! it is published. Each transaction recording acknowledgements moves it to the first entry still pending, so
//! reading and counting what is pending costs what is pending, not the outbox's history.

use rusqlite::OptionalExtension;
use rusqlite::{Connection, Transaction, TransactionBehavior, params};
use schemas::EventType;
use serde::Serialize;

use crate::batch::AppendOutcome;
use crate::error::{OutboxError, ReadError};
use crate::{Ledger, now_micros};

/// What "not yet published" means, for an outbox row `o`; each query of pending entries says it with this.
macro_rules! unpublished {
    () => {
        "NOT EXISTS (SELECT 1 FROM outbox_published p WHERE p.seq = o.seq)"
    };
}
pub(crate) use unpublished;

/// An outbox entry not yet acknowledged by a broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEntry {
    /// Its ledger sequence number: what the broker's acknowledgement is recorded under.
    pub seq: u64,
    /// The type of its event, which names its topic.
    pub event_type: EventType,
    /// Its event_id.
    pub event_id: String,
    /// The message key (contract §2): the tenant.
    pub tenant: String,
    /// Single-object encoding of the entry's payload, as ingest reads it back.
    pub message: Vec<u8>,
}

/// How far the outbox got.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct OutboxStatus {
    /// Entries ever put in the outbox.
    pub enqueued: u64,
    /// Of those, the ones a broker acknowledged.
    pub published: u64,
    /// The ones still waiting for a broker.
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
        self.outbox_pending_after(None, limit)
    }

    /// Up to `limit` pending outbox entries after `after` (from the first when `None`), oldest first: a publisher
    /// that leaves some entries pending reads on past them.
    pub fn outbox_pending_after(&self, after: Option<u64>, limit: u64) -> Result<Vec<OutboxEntry>, ReadError> {
        let from = cursor(&self.conn)?.max(after.map_or(0, |seq| seq as i64 + 1));
        let mut statement = self.conn.prepare_cached(concat!(
            "SELECT e.seq, e.event_type, e.event_id, e.tenant, e.payload_fingerprint, e.payload
             FROM outbox o JOIN entries e ON e.seq = o.seq
             WHERE o.seq >= ?1 AND ",
            unpublished!(),
            " ORDER BY o.seq LIMIT ?2"
        ))?;
        let rows = statement.query_map(params![from, limit as i64], |r| {
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
        if !acknowledged.is_empty() {
            advance_cursor(&tx, published_at)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Entries not yet acknowledged, counted from the cursor: what `status` and every publish report.
    pub fn outbox_pending_count(&self) -> Result<u64, ReadError> {
        let from = cursor(&self.conn)?;
        let pending: i64 = self.conn.query_row(
            concat!("SELECT COUNT(*) FROM outbox o WHERE o.seq >= ?1 AND ", unpublished!()),
            [from],
            |r| r.get(0),
        )?;
        Ok(pending as u64)
    }

    /// When the oldest entry not yet acknowledged was recorded (microseconds since the epoch, UTC); `None` when
    /// none waits.
    pub fn outbox_oldest_pending_at(&self) -> Result<Option<i64>, ReadError> {
        let from = cursor(&self.conn)?;
        let oldest = self
            .conn
            .query_row(
                concat!(
                    "SELECT e.recorded_at FROM outbox o JOIN entries e ON e.seq = o.seq WHERE o.seq >= ?1 AND ",
                    unpublished!(),
                    " ORDER BY o.seq LIMIT 1"
                ),
                [from],
                |r| r.get(0),
            )
            .optional()?;
        Ok(oldest)
    }

    /// Every entry ever enqueued and published, counted (reads both tables whole), and what is pending.
    pub fn outbox_status(&self) -> Result<OutboxStatus, ReadError> {
        let count = |sql: &str| self.conn.query_row(sql, [], |r| r.get::<_, i64>(0)).map(|n| n as u64);
        let enqueued = count("SELECT COUNT(*) FROM outbox")?;
        let published = count("SELECT COUNT(*) FROM outbox_published")?;
        Ok(OutboxStatus { enqueued, published, pending: enqueued - published })
    }
}

/// Where the pending entries start: every outbox entry below it is published.
pub(crate) fn cursor(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("SELECT COALESCE(MAX(next_seq), 0) FROM outbox_cursor", [], |r| r.get(0))
}

/// Moves the cursor to the first entry still pending, or past the last entry when none is. The scan covers only
/// what was published since the cursor last moved (all of it, while an entry the broker keeps refusing holds the
/// cursor back).
fn advance_cursor(tx: &Transaction<'_>, recorded_at: i64) -> rusqlite::Result<()> {
    let from = cursor(tx)?;
    let next: i64 = tx.query_row(
        concat!(
            "SELECT COALESCE((SELECT o.seq FROM outbox o WHERE o.seq >= ?1 AND ",
            unpublished!(),
            " ORDER BY o.seq LIMIT 1), (SELECT MAX(seq) + 1 FROM outbox), 0)"
        ),
        [from],
        |r| r.get(0),
    )?;
    if next > from {
        tx.prepare_cached("INSERT INTO outbox_cursor (next_seq, recorded_at) VALUES (?, ?)")?
            .execute(params![next, recorded_at])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use crate::dedup::tests::usage;
    use crate::{Batch, Ledger};

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        // Proves that, whatever the broker acknowledges in whatever order, the pending entries and their count are
        // exactly those enqueued and not acknowledged (entries outside the outbox never among them), that those read
        // after any sequence number are exactly the pending ones above it, that the cursor never passes a pending
        // entry, and that it reaches past the last entry once all are published.
        #[test]
        fn pending_is_what_was_enqueued_and_not_acknowledged(
            rounds in prop::collection::vec(
                (1usize..6, any::<bool>(), prop::collection::vec(any::<prop::sample::Index>(), 0..6),
                 any::<prop::sample::Index>()), 1..12),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let mut ledger = Ledger::open(dir.path().join("ledger.db")).unwrap();
            let mut enqueued = BTreeSet::new();
            let mut published = BTreeSet::new();
            let mut next_id = 0;
            for (events, outbox, acks, after) in rounds {
                let incoming = (0..events).map(|_| { next_id += 1; usage(&format!("e-{next_id}")) }).collect();
                let report = ledger.append(&Batch { events: incoming, outbox, ..Batch::default() }).unwrap();
                if outbox {
                    enqueued.extend((report.watermark - events as u64 + 1)..=report.watermark);
                }
                let pending: Vec<u64> = enqueued.difference(&published).copied().collect();
                let acknowledged: Vec<(u64, String)> = acks.iter().filter(|_| !pending.is_empty())
                    .map(|i| (pending[i.index(pending.len())], "quota.usage".to_string())).collect();
                ledger.outbox_published(&acknowledged).unwrap();
                published.extend(acknowledged.iter().map(|(seq, _)| *seq));

                let expected: Vec<u64> = enqueued.difference(&published).copied().collect();
                let read: Vec<u64> = ledger.outbox_pending(1_000).unwrap().iter().map(|e| e.seq).collect();
                prop_assert_eq!(&read, &expected);
                // Read on past any sequence number: what is pending after it, whether or not it is pending itself.
                let after = after.index(next_id as usize + 1) as u64;
                let read_after: Vec<u64> =
                    ledger.outbox_pending_after(Some(after), 1_000).unwrap().iter().map(|e| e.seq).collect();
                let expected_after: Vec<u64> = expected.iter().copied().filter(|seq| *seq > after).collect();
                prop_assert_eq!(read_after, expected_after);
                prop_assert_eq!(ledger.outbox_pending_count().unwrap(), expected.len() as u64);
                prop_assert_eq!(ledger.outbox_status().unwrap().pending, expected.len() as u64);
                let cursor = super::cursor(&ledger.conn).unwrap() as u64;
                prop_assert!(expected.first().is_none_or(|first| cursor <= *first), "cursor {} passed {:?}", cursor, expected);
            }
            let rest: Vec<(u64, String)> =
                enqueued.difference(&published).map(|seq| (*seq, "quota.usage".to_string())).collect();
            ledger.outbox_published(&rest).unwrap();
            prop_assert_eq!(ledger.outbox_pending_count().unwrap(), 0);
            if let Some(last) = enqueued.last() {
                prop_assert_eq!(super::cursor(&ledger.conn).unwrap() as u64, last + 1);
            }
        }
    }
}
