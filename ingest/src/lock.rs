//! One ingest process per ledger: an exclusive advisory lock on `<ledger>.ingest.lock`.
//!
//! Offsets live in the ledger, so two processes of one consumer group appending to the same file would each
//! seek to the ledger's offsets and could both record a partition's messages (as duplicates, but with work
//! and quarantine entries doubled). The second process is refused at once, naming the holder; the group then
//! gives every partition to the first. The lock goes with the process, however it dies (even SIGKILL).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// Held while it lives.
#[derive(Debug)]
pub struct IngestLock {
    _file: File,
    pub path: PathBuf,
}

/// Another process holds the lock, or the lock file cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    #[error("another {role} ({holder}) is writing to this ledger (lock {path}); one {role} process per ledger file")]
    Held { role: String, path: PathBuf, holder: String },
    #[error("cannot use the lock file {path}")]
    Io { path: PathBuf, source: std::io::Error },
}

impl IngestLock {
    /// Takes the lock of the ledger at `ledger_path` without waiting.
    pub fn acquire(ledger_path: &Path) -> Result<IngestLock, LockError> {
        IngestLock::acquire_for(ledger_path, "ingest")
    }

    /// Takes the lock `<ledger>.<role>.lock` without waiting: one process of that role per ledger (`reconcile`
    /// too, since two runs planned from the same state would record the same deltas twice).
    pub fn acquire_for(ledger_path: &Path, role: &str) -> Result<IngestLock, LockError> {
        let mut name = ledger_path.as_os_str().to_owned();
        name.push(format!(".{role}.lock"));
        let path = PathBuf::from(name);
        let io = |source| LockError::Io { path: path.clone(), source };
        let mut file =
            OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path).map_err(io)?;
        // SAFETY: flock on a descriptor this function owns; no memory is shared with the call.
        let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
        if !locked {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = if holder.trim().is_empty() { "unknown process".into() } else { holder.trim().to_string() };
            return Err(LockError::Held { role: role.to_string(), path, holder });
        }
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        write!(file, "pid {}", std::process::id()).map_err(io)?;
        Ok(IngestLock { _file: file, path })
    }
}
