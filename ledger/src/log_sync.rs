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

use std::fs::File;
use std::path::PathBuf;

use crate::{Ledger, OpenError};

/// Syncs a ledger's write-ahead log: [`Ledger::sync_log_apart`].
#[derive(Debug)]
pub struct LogSync {
    log: File,
    path: PathBuf,
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
        Ok(LogSync { log: file, path: log })
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

impl LogSync {
    /// Returns once everything committed before it began is on the disk. `fdatasync`: the log's data and its
    /// length, which reading it back needs.
    pub fn sync(&self) -> std::io::Result<()> {
        self.log.sync_data()
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
        let level = |l: &Ledger| l.connection().query_row("PRAGMA synchronous", [], |r| r.get::<_, i64>(0)).unwrap();
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
