//! A hook run inside every append's transaction, after the batch is written and before it commits: derived
//! data kept by another crate (the reports' `commit_totals`) stays exactly in step with the entries.

use rusqlite::Transaction;

/// Work done inside an append's transaction. An error aborts the append (nothing of the batch is recorded).
pub trait AppendHook: Send {
    /// Called with the transaction and the watermark the batch ends at.
    fn after_append(&mut self, tx: &Transaction<'_>, watermark: u64) -> rusqlite::Result<()>;
}
