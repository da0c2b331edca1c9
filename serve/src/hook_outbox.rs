//! `serve`'s outbox, as the outbox's publisher thread reads and records it.

use outbox::Outbox;

/// `serve`'s outbox: read through its own connection, written by the hook's writer. Recording acknowledgements
/// through a second writing connection made the publisher and the writer wait for each other's write lock (SQLite's
/// busy handler sleeps up to 100 ms between tries). At 8 clients the hook's p90 went from 1.9 to 40 ms; with that
/// connection's commits at durability normal and without automatic checkpoints it came back to 3.1 ms, but the
/// publisher then fell 100,000 entries behind in a minute.
pub(crate) struct HookOutbox {
    pub(crate) reader: ledger::Ledger,
    pub(crate) hook: hook::Hook,
}

impl Outbox for HookOutbox {
    fn pending(&self, after: Option<u64>, limit: u64) -> Result<Vec<ledger::OutboxEntry>, ledger::ReadError> {
        self.reader.outbox_pending_after(after, limit)
    }

    fn sync_log(&self) -> std::io::Result<()> {
        self.reader.sync_log()
    }

    fn record(&mut self, acknowledged: &[(u64, String)]) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        Ok(self.hook.record_published(acknowledged.to_vec())?)
    }

    fn pending_count(&self) -> Result<u64, ledger::ReadError> {
        self.reader.outbox_pending_count()
    }

    fn oldest_pending_at(&self) -> Result<Option<i64>, ledger::ReadError> {
        self.reader.outbox_oldest_pending_at()
    }
}
