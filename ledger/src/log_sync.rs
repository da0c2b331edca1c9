//! The log's sync apart from the commit. At durability full a commit returns only once the write-ahead log is on
//! the disk, and the committing thread sits idle for the sync: in the enforcement hook the next group of requests
//! waits behind it, although deciding that group needs no disk. [`Ledger::sync_log_apart`] splits the two, as
//! MySQL's group commit runs its binary log's flush and sync as separate stages: commits return once their pages
//! are written to the log (`synchronous=NORMAL`), and a [`LogSync`] (usable from another thread) makes everything
//! committed before a [`LogSync::sync`] began durable when it returns. Whoever commits must not report a commit
//! durable before such a sync has returned.
//!
//! Nothing else changes: SQLite at `NORMAL` still syncs the log before each checkpoint and the database file after
//! it, and the log's header when the log restarts, so the log is never overwritten before the database file holds
//! its pages. What a power loss can take is the commits no sync covered yet: no one was told they are durable.
//! Other connections may read such a commit before its sync (they would at durability normal too).
//!
//! After a failed [`LogSync::sync`] the ledger's connections no longer checkpoint, neither its background thread
//! nor at close. The kernel may have dropped the log's pages that sync covered and report the next sync clean
//! (Linux tells each open descriptor of the file once), so a later checkpoint would sync the log, see no error,
//! and copy those pages from memory into the database file and sync it: after a power cut the log on the disk,
//! lacking them, ends before them, and its older copies of the same pages override the database file's newer
//! ones, a corrupt ledger ("database disk image is malformed", found by `tests/power_cut.rs`). Left in the log,
//! they are only lost with the groups no one was told were recorded. The next process to open the ledger
//! checkpoints it as usual.

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::{Ledger, OpenError};

/// Syncs a ledger's write-ahead log: [`Ledger::sync_log_apart`].
#[derive(Debug)]
pub struct LogSync {
    log: File,
    path: PathBuf,
    /// The ledger's: set when a sync fails.
    failed: Arc<AtomicBool>,
}

impl Ledger {
    /// From now on this connection's commits return once written to the write-ahead log; the returned handle
    /// makes them durable. Keep the ledger open while the handle is used: SQLite removes the log when the last
    /// connection closes.
    pub fn sync_log_apart(&self) -> Result<LogSync, OpenError> {
        let log = log_path(self);
        // The log exists once the connection has opened the ledger in WAL mode, which `Ledger::open` does.
        let file = open_log(&log).map_err(|source| OpenError::Log { path: log.clone(), source })?;
        self.set_durability(crate::Durability::Normal)?;
        Ok(LogSync { log: file, path: log, failed: Arc::clone(&self.log_sync_failed) })
    }

    /// Makes everything this ledger's connections committed so far durable, whatever their durability: a reader
    /// that publishes what it read (the outbox) calls it after reading and before publishing. A ledger whose log
    /// is gone holds everything in its database file, which every checkpoint syncs.
    pub fn sync_log(&self) -> std::io::Result<()> {
        match open_log(&log_path(self)) {
            Ok(log) => log.sync_data(),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(error) => Err(error),
        }
    }
}

impl Drop for Ledger {
    /// A ledger whose log could not be synced closes without the checkpoint SQLite runs when the last connection
    /// to it closes (see the module's doc).
    fn drop(&mut self) {
        if self.log_sync_failed.load(Ordering::Relaxed) {
            let _ = self.conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true);
        }
    }
}

impl LogSync {
    /// Returns once everything committed before it began is on the disk. `fdatasync`: the log's data and its
    /// length, which reading it back needs.
    /// A failure stops the ledger's checkpoints for good (see the module's doc).
    pub fn sync(&self) -> std::io::Result<()> {
        let synced = self.log.sync_data();
        if synced.is_err() {
            self.failed.store(true, Ordering::Relaxed);
        }
        synced
    }

    /// The write-ahead log's file, for messages.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

/// Opened for writing, never written: `fsync` of a descriptor opened read-only is not portable.
fn open_log(path: &std::path::Path) -> std::io::Result<File> {
    File::options().write(true).open(path)
}

/// SQLite's name for a database's write-ahead log: beside the database's real file, whatever symbolic links lead
/// to it (SQLite resolves them). The log beside the path as typed would not exist for a ledger reached through a
/// link, and `serve` at durability full would refuse it ("cannot open the ledger's write-ahead log").
fn log_path(ledger: &Ledger) -> PathBuf {
    let mut path = crate::lock::real_path(&ledger.path).into_os_string();
    path.push("-wal");
    PathBuf::from(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dedup::tests::usage;
    use crate::{Batch, Durability};

    #[test]
    fn apart_the_commits_stop_syncing_and_the_handle_syncs_the_log() {
        // Proves the split: the connection's commits no longer sync (synchronous=NORMAL) and the handle syncs the
        // very file SQLite writes the log to.
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = Ledger::open(dir.path().join("ledger.db")).unwrap();
        let level = |l: &Ledger| l.conn.query_row("PRAGMA synchronous", [], |r| r.get::<_, i64>(0)).unwrap();
        assert_eq!(level(&ledger), 2, "FULL before");
        let log = ledger.sync_log_apart().unwrap();
        assert_eq!(level(&ledger), 1, "NORMAL after: the commit only writes the log");
        let before = std::fs::metadata(log.path()).unwrap().len();
        ledger.append(&Batch { events: vec![usage("u-1")], ..Batch::default() }).unwrap();
        assert!(std::fs::metadata(log.path()).unwrap().len() > before, "the commit went to the synced file");
        log.sync().unwrap();
        ledger.sync_log().unwrap();
        ledger.set_durability(Durability::Full).unwrap();
        assert_eq!(level(&ledger), 2);
    }
}
