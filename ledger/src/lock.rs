//! One process per role and ledger file: an exclusive advisory lock on `<ledger>.<role>.lock`.
//!
//! - `ingest`: offsets live in the ledger, so two processes of one consumer group appending to the same file
//!   would each seek to the ledger's offsets and could both record a partition's messages (as duplicates, but
//!   with work and quarantine entries doubled); the group then gives every partition to the first.
//! - `reconcile`: two runs planned from the same state would record the same deltas twice.
//! - `hook`: the hook decides against its own state of the ledger and appends afterwards, so two hooks on one
//!   file (two `serve` processes) would each allow what one HARD limit fits, and both publish the outbox.
//!
//! The second process is refused at once, naming the holder. The lock goes with the process, however it dies
//! (even SIGKILL), or with the [`ProcessLock`] when it is dropped.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// Held while it lives.
#[derive(Debug)]
pub struct ProcessLock {
    _file: File,
    /// The lock file, `<ledger>.<role>.lock` beside the ledger's real file.
    pub path: PathBuf,
}

/// Another process holds the lock, or the lock file cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Another process holds the lock.
    #[error("another {role} ({holder}) is writing to this ledger (lock {path}); one {role} process per ledger file")]
    Held {
        /// The role the lock is for (`hook`, ...).
        role: String,
        /// The lock file.
        path: PathBuf,
        /// Who holds it, as the lock file says (`pid 1234`).
        holder: String,
    },
    /// The lock file cannot be created or locked.
    #[error("cannot use the lock file {path}")]
    Io {
        /// The lock file.
        path: PathBuf,
        /// The error using it.
        source: std::io::Error,
    },
}

impl ProcessLock {
    /// Takes the lock `<ledger>.<role>.lock` without waiting: one holder of that role per ledger file. The lock
    /// sits beside the ledger's real file, whatever symbolic links lead to it: a `serve` reached through a link
    /// takes the same lock as a `serve` on the file, not one of its own.
    pub fn acquire(ledger_path: &Path, role: &str) -> Result<ProcessLock, LockError> {
        let mut name = real_path(ledger_path).into_os_string();
        name.push(format!(".{role}.lock"));
        let path = PathBuf::from(name);
        let io = |source| LockError::Io { path: path.clone(), source };
        let mut file =
            OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path).map_err(io)?;
        // SAFETY: flock on a descriptor this function owns; no memory is shared with the call.
        let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
        if !locked {
            // The holder writes its pid just after taking the lock: a process refused in between reads nothing yet
            // (3 of 10 simultaneous starts said "unknown process" without this), so it reads again for a moment.
            let mut holder = String::new();
            for _ in 0..50 {
                holder.clear();
                let _ = file.rewind().and_then(|()| file.read_to_string(&mut holder));
                if !holder.trim().is_empty() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            let holder = if holder.trim().is_empty() { "unknown process".into() } else { holder.trim().to_string() };
            return Err(LockError::Held { role: role.to_string(), path, holder });
        }
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        write!(file, "pid {}", std::process::id()).map_err(io)?;
        Ok(ProcessLock { _file: file, path })
    }
}

/// The ledger's path with every symbolic link resolved, as SQLite resolves it to name the ledger's log: of a ledger
/// not created yet, its directory's real path and its name.
pub fn real_path(ledger_path: &Path) -> PathBuf {
    if let Ok(real) = std::fs::canonicalize(ledger_path) {
        return real;
    }
    let directory = ledger_path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    match (std::fs::canonicalize(directory), ledger_path.file_name()) {
        (Ok(real), Some(name)) => real.join(name),
        _ => ledger_path.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves one lock per ledger file: a symbolic link to the ledger, or to its directory, leads to the same lock,
    // which refuses a second holder however the path was spelled; a ledger not created yet is locked beside its name.
    #[test]
    fn a_link_to_the_ledger_finds_the_same_lock() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = dir.path().join("ledger.db");
        std::fs::write(&ledger, b"").unwrap();
        std::os::unix::fs::symlink(&ledger, dir.path().join("link.db")).unwrap();
        std::os::unix::fs::symlink(dir.path(), dir.path().join("dir-link")).unwrap();
        let held = ProcessLock::acquire(&dir.path().join("link.db"), "hook").unwrap();
        assert_eq!(held.path, real_path(&ledger).with_file_name("ledger.db.hook.lock"));
        for spelled in [ledger.clone(), dir.path().join("dir-link/link.db"), dir.path().join("dir-link/./ledger.db")] {
            let refused = ProcessLock::acquire(&spelled, "hook").unwrap_err();
            assert!(matches!(refused, LockError::Held { .. }), "{}: {refused:?}", spelled.display());
        }
        let new = dir.path().join("dir-link/new.db");
        assert_eq!(ProcessLock::acquire(&new, "hook").unwrap().path, real_path(dir.path()).join("new.db.hook.lock"));
    }
}
