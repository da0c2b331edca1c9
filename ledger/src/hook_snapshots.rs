//! Snapshots of the enforcement hook's state (contract §6): the hook encodes its state and the ledger keeps the
//! latest, tied to the entry at its watermark and to the ledger's id, so that a start reads it and the entries after
//! it instead of the last month of entries. The body is the hook's: the ledger stores and returns it as bytes, and
//! tells whether the snapshot still belongs to this ledger as it is now.

use rusqlite::{OptionalExtension, TransactionBehavior, params};
use schemas::Timestamp;

use crate::Ledger;
use crate::error::{ReadError, SnapshotError};

const LATEST: &str = include_str!("../queries/hook_snapshot_latest.sql");
const LATEST_WATERMARK: &str = include_str!("../queries/hook_snapshot_watermark.sql");
const ENTRY_HASH: &str = include_str!("../queries/entry_hash.sql");
const INSERT: &str = include_str!("../queries/hook_snapshot_insert.sql");

/// A snapshot of the hook's state as the hook writes it: the watermark it covers, when it was taken, and its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookSnapshot {
    /// The last entry the state folded.
    pub watermark: u64,
    /// The version of the body's format.
    pub format_version: i64,
    /// The instant the state was pruned at.
    pub taken_at: Timestamp,
    /// SHA-256 of `body`.
    pub checksum: Vec<u8>,
    /// The state, encoded by the hook.
    pub body: Vec<u8>,
}

/// Why the latest snapshot does not belong to this ledger as it is now: a start folds the ledger instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotMismatch {
    /// No snapshot was written.
    #[error("no snapshot was written")]
    None,
    /// It was written in another ledger (a file copied under another's snapshot).
    #[error("written in ledger {written_in}, not in this ledger {this}")]
    OtherLedger {
        /// The ledger id it names.
        written_in: String,
        /// This ledger's id.
        this: String,
    },
    /// Its watermark is past the ledger's last entry (a ledger restored from an older copy).
    #[error("its watermark {watermark} is past the ledger's last entry {tip}")]
    AheadOfLedger {
        /// The snapshot's watermark.
        watermark: u64,
        /// The ledger's last sequence number.
        tip: u64,
    },
    /// The entry at its watermark is not the one it folded (the ledger was replaced by another history).
    #[error("entry {watermark} is not the entry the snapshot folded")]
    EntryChanged {
        /// The snapshot's watermark.
        watermark: u64,
    },
}

impl Ledger {
    /// Records a snapshot of the hook's state, tied to this ledger's id and to the entry at its watermark, in a
    /// transaction of its own that deletes the snapshots before it. Refused, with nothing written, when the
    /// watermark is past the last entry.
    pub fn record_hook_snapshot(&mut self, snapshot: &HookSnapshot) -> Result<(), SnapshotError> {
        let ledger_id = self.ledger_id()?;
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let entry_hash = read_entry_hash(&tx, snapshot.watermark)?
            .ok_or(SnapshotError::PastLastEntry { watermark: snapshot.watermark })?;
        tx.prepare_cached(INSERT)?.execute(params![
            snapshot.watermark as i64,
            entry_hash,
            ledger_id,
            snapshot.format_version,
            snapshot.taken_at.micros(),
            snapshot.checksum,
            snapshot.body,
        ])?;
        tx.execute("DELETE FROM hook_snapshots WHERE watermark < ?1", [snapshot.watermark as i64])?;
        tx.commit()?;
        Ok(())
    }

    /// The watermark of the latest snapshot of the hook's state, if any (its body is not read).
    pub fn hook_snapshot_watermark(&self) -> Result<Option<u64>, ReadError> {
        let watermark: Option<i64> = self.conn.prepare_cached(LATEST_WATERMARK)?.query_row([], |r| r.get(0))?;
        Ok(watermark.map(|w| w as u64))
    }

    /// The latest snapshot of the hook's state, when it still belongs to this ledger as it is now: written in it, at
    /// a watermark it holds, whose entry is the one the snapshot folded. Read in one read transaction.
    pub fn hook_snapshot(&self) -> Result<Result<HookSnapshot, SnapshotMismatch>, ReadError> {
        let _snapshot = self.conn.unchecked_transaction()?;
        let row = self
            .conn
            .prepare_cached(LATEST)?
            .query_row([], |r| {
                let snapshot = HookSnapshot {
                    watermark: r.get::<_, i64>(0)? as u64,
                    format_version: r.get(3)?,
                    taken_at: Timestamp(r.get(4)?),
                    checksum: r.get(5)?,
                    body: r.get(6)?,
                };
                Ok((snapshot, r.get::<_, Vec<u8>>(1)?, r.get::<_, String>(2)?))
            })
            .optional()?;
        let Some((snapshot, entry_hash, written_in)) = row else { return Ok(Err(SnapshotMismatch::None)) };
        let this = self.ledger_id()?;
        if written_in != this {
            return Ok(Err(SnapshotMismatch::OtherLedger { written_in, this }));
        }
        let tip = self.watermark()?;
        if snapshot.watermark > tip {
            return Ok(Err(SnapshotMismatch::AheadOfLedger { watermark: snapshot.watermark, tip }));
        }
        if read_entry_hash(&self.conn, snapshot.watermark)? != Some(entry_hash) {
            return Ok(Err(SnapshotMismatch::EntryChanged { watermark: snapshot.watermark }));
        }
        Ok(Ok(snapshot))
    }
}

/// The entry_hash of entry `seq` (an empty hash for 0, before the first entry), if the ledger holds it.
fn read_entry_hash(conn: &rusqlite::Connection, seq: u64) -> rusqlite::Result<Option<Vec<u8>>> {
    if seq == 0 {
        return Ok(Some(Vec::new()));
    }
    conn.prepare_cached(ENTRY_HASH)?.query_row([seq as i64], |r| r.get(0)).optional()
}
