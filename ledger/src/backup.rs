//! Backups a running ledger can be copied into, and the checks a copy passes before it becomes a ledger again.
//!
//! [`Ledger::backup_to`] copies the file with SQLite's online backup API in one step: one read transaction, so the
//! copy is the ledger as of one commit while the writers (ingest, the hook) go on appending beside it in WAL mode.
//! The copy is written under a temporary name, synced, then renamed, and its manifest (`<backup>.manifest.json`)
//! records the chain head it covers, the ledger's id and the file's SHA-256. [`restore`] verifies the chain of a
//! backup against its manifest before it copies it into place, and never overwrites a ledger.
//!
//! A restored ledger resumes Kafka ingest from the offsets it stored in the same transactions as its events, so
//! everything after the backup is read again and nothing is counted twice (contract §4).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use rusqlite::Connection;
use rusqlite::backup::{Backup, StepResult};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::verify::ExpectedHead;
use crate::{Ledger, OpenError, ReadError, VerifyReport, links};

/// The suffix of a backup's manifest, after the backup's own name.
pub const MANIFEST_SUFFIX: &str = ".manifest.json";

/// What a backup holds, written beside it as `<backup>.manifest.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupManifest {
    /// The ledger's id (contract §9.3): a restored ledger keeps it.
    pub ledger_id: String,
    /// The chain head the backup covers: its last link's number.
    pub head_seq: u64,
    /// The last link's hash, in hexadecimal.
    pub head_hash: String,
    /// Events recorded in the backup.
    pub events_recorded: u64,
    /// The backup file's size in bytes.
    pub bytes: u64,
    /// The backup file's SHA-256, in hexadecimal.
    pub sha256: String,
    /// When the backup was taken (RFC 3339, UTC).
    pub taken_at: String,
    /// The ledger it was taken from, as it was named.
    pub source: String,
}

/// A backup could not be taken or restored; nothing was left under the final name.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackupError {
    /// The destination already exists: a backup or a ledger is never overwritten.
    #[error("{path} exists: {what} never overwrites a file (move it aside or choose another name)")]
    Exists {
        /// The file.
        path: PathBuf,
        /// `backup` or `restore`.
        what: &'static str,
    },
    /// Reading or writing a file failed.
    #[error("cannot {action} {path}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// SQLite failed to copy.
    #[error("cannot copy the ledger into {path}")]
    Copy {
        /// The copy being written.
        path: PathBuf,
        /// Why.
        source: rusqlite::Error,
    },
    /// The backup's manifest is missing or unreadable.
    #[error("the backup's manifest {path} {problem}")]
    Manifest {
        /// The manifest file.
        path: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// The backup does not hold what its manifest says, or its chain does not verify.
    #[error("the backup {path} does not hold: {problem}; nothing restored")]
    DoesNotHold {
        /// The backup file.
        path: PathBuf,
        /// What failed.
        problem: String,
    },
    /// The backup or the restored ledger cannot be opened.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The backup or the ledger cannot be read.
    #[error(transparent)]
    Read(#[from] ReadError),
}

/// What [`restore`] checked and wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RestoreReport {
    /// The backup's manifest (the restored ledger holds exactly this).
    pub manifest: BackupManifest,
    /// The backup's verification: every entry and link holds, and the manifest's head is a link of the chain.
    pub verify: VerifyReport,
    /// The ledger written.
    pub ledger: String,
}

/// The manifest's name of the backup at `path`.
pub fn manifest_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(MANIFEST_SUFFIX);
    PathBuf::from(name)
}

impl Ledger {
    /// Copies the ledger, as of one commit, into a new file at `path` (SQLite's online backup API, in one step: the
    /// writers go on appending beside it), and writes its manifest beside it. Refuses an existing `path`.
    pub fn backup_to(&self, path: &Path) -> Result<BackupManifest, BackupError> {
        refuse_existing(path, "backup")?;
        let partial = partial_path(path);
        remove_if_present(&partial)?;
        let copy_error = |source| BackupError::Copy { path: partial.clone(), source };
        let (head, ledger_id, events_recorded) = {
            let mut copy = Connection::open(&partial).map_err(copy_error)?;
            copy_whole(&self.conn, &mut copy).map_err(copy_error)?;
            // A single file, without a write-ahead log beside it, so that its bytes are the backup and its digest
            // holds; a restore turns WAL on again when it opens the ledger.
            copy.pragma_update(None, "journal_mode", "DELETE").map_err(copy_error)?;
            let head = links::read_head(&copy).map_err(copy_error)?;
            let ledger_id = links::read_ledger_id(&copy).map_err(copy_error)?;
            let events_recorded = crate::status::read_totals(&copy).map_err(ReadError::from)?.events_recorded;
            (head, ledger_id, events_recorded)
        };
        sync_file(&partial)?;
        let (bytes, sha256) = digest(&partial)?;
        let manifest = BackupManifest {
            ledger_id,
            head_seq: head.seq,
            head_hash: head.hash_hex(),
            events_recorded,
            bytes,
            sha256,
            taken_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            source: self.path.display().to_string(),
        };
        let manifest_text = serde_json::to_vec_pretty(&manifest).expect("a manifest serializes");
        write_synced(&manifest_path(path), &manifest_text)?;
        rename_synced(&partial, path)?;
        Ok(manifest)
    }
}

/// Checks the backup at `backup` (its manifest's digest and ledger id, its chain, and the manifest's head in its
/// chain) and only then copies it to `ledger_path`, which must not exist, and opens it as a ledger (migrating a
/// backup of an older version). Nothing is written under `ledger_path` when a check fails.
pub fn restore(backup: &Path, ledger_path: &Path) -> Result<RestoreReport, BackupError> {
    refuse_existing(ledger_path, "restore")?;
    for suffix in ["-wal", "-shm"] {
        let mut name = ledger_path.as_os_str().to_os_string();
        name.push(suffix);
        refuse_existing(Path::new(&name), "restore")?;
    }
    let manifest = manifest_of_intact(backup)?;
    let does_not_hold = |problem: String| BackupError::DoesNotHold { path: backup.to_path_buf(), problem };
    // Copied first, checked second: the copy checked is the copy restored, whatever happens to the backup meanwhile.
    let partial = partial_path(ledger_path);
    remove_if_present(&partial)?;
    std::fs::copy(backup, &partial).map_err(|source| BackupError::Io {
        action: "copy the backup to",
        path: partial.clone(),
        source,
    })?;
    let checked = check_copy(&partial, &manifest).map_err(|error| {
        let _ = std::fs::remove_file(&partial);
        match error {
            Checked::DoesNotHold(problem) => does_not_hold(problem),
            Checked::Error(error) => error,
        }
    })?;
    sync_file(&partial)?;
    rename_synced(&partial, ledger_path)?;
    // Opened for writing once: migrations of an older backup run now, and the file is in WAL mode again.
    Ledger::open(ledger_path)?;
    Ok(RestoreReport { manifest, verify: checked, ledger: ledger_path.display().to_string() })
}

/// Checks the backup at `backup` in place, as [`restore`] checks it before use: its manifest's size and digest, its
/// ledger id, its chain, and the manifest's head in its chain. What a copy fetched over the network is checked with.
pub fn check_backup(backup: &Path) -> Result<(BackupManifest, VerifyReport), BackupError> {
    let manifest = manifest_of_intact(backup)?;
    let does_not_hold = |problem: String| BackupError::DoesNotHold { path: backup.to_path_buf(), problem };
    let report = check_copy(backup, &manifest).map_err(|error| match error {
        Checked::DoesNotHold(problem) => does_not_hold(problem),
        Checked::Error(error) => error,
    })?;
    Ok((manifest, report))
}

/// The manifest beside `backup`, once the backup's size and SHA-256 are the manifest's.
fn manifest_of_intact(backup: &Path) -> Result<BackupManifest, BackupError> {
    let manifest = read_manifest(backup)?;
    let (bytes, sha256) = digest(backup)?;
    if (bytes, sha256.as_str()) != (manifest.bytes, manifest.sha256.as_str()) {
        return Err(BackupError::DoesNotHold {
            path: backup.to_path_buf(),
            problem: format!(
                "its SHA-256 is {sha256} ({bytes} bytes), its manifest says {} ({} bytes): the file changed after it \
                 was taken",
                manifest.sha256, manifest.bytes
            ),
        });
    }
    Ok(manifest)
}

enum Checked {
    DoesNotHold(String),
    Error(BackupError),
}

impl<E: Into<BackupError>> From<E> for Checked {
    fn from(error: E) -> Checked {
        Checked::Error(error.into())
    }
}

/// Verifies the copy at `path` against `manifest`: its id, every entry and link, and the manifest's head as a link.
fn check_copy(path: &Path, manifest: &BackupManifest) -> Result<VerifyReport, Checked> {
    let copy = Ledger::open_read_only(path)?;
    let ledger_id = copy.ledger_id()?;
    if ledger_id != manifest.ledger_id {
        return Err(Checked::DoesNotHold(format!(
            "it is ledger {ledger_id}, its manifest names ledger {}",
            manifest.ledger_id
        )));
    }
    let head = format!("{}:{}", manifest.head_seq, manifest.head_hash).parse().map_err(|_| {
        Checked::DoesNotHold(format!("its manifest's head {}:{} is not a head", manifest.head_seq, manifest.head_hash))
    })?;
    let report = copy.verify_against(&[ExpectedHead { head, at: None }])?;
    if let Some(bad) = &report.first_bad {
        return Err(Checked::DoesNotHold(format!("entry {} does not hold: {}", bad.seq, bad.problem)));
    }
    if let Some(bad) = &report.first_bad_checkpoint {
        return Err(Checked::DoesNotHold(format!("the head its manifest records does not hold: {}", bad.problem)));
    }
    if report.head_seq != manifest.head_seq {
        return Err(Checked::DoesNotHold(format!(
            "its head is link {}, its manifest says {}",
            report.head_seq, manifest.head_seq
        )));
    }
    Ok(report)
}

/// The manifest beside the backup at `backup`.
pub fn read_manifest(backup: &Path) -> Result<BackupManifest, BackupError> {
    let path = manifest_path(backup);
    let problem = |problem: String| BackupError::Manifest { path: path.clone(), problem };
    if !backup.exists() {
        return Err(BackupError::Io {
            action: "read the backup",
            path: backup.to_path_buf(),
            source: std::io::ErrorKind::NotFound.into(),
        });
    }
    let text = match std::fs::read(&path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(problem(
                "is missing: `backup` writes it beside the copy; without it the copy cannot be checked".into(),
            ));
        }
        Err(error) => return Err(problem(format!("cannot be read: {error}"))),
    };
    serde_json::from_slice(&text).map_err(|error| problem(format!("is not a backup manifest: {error}")))
}

/// Copies every page of `from` into `to` in one step of the backup API, retrying while a writer holds a lock the
/// step needs (WAL readers rarely wait; a checkpoint's or a recovery's lock is brief).
fn copy_whole(from: &Connection, to: &mut Connection) -> rusqlite::Result<()> {
    let backup = Backup::new(from, to)?;
    loop {
        match backup.step(-1)? {
            StepResult::Done => return Ok(()),
            // One step copies every page; More cannot follow a step of -1, but is answered like Busy.
            StepResult::More | StepResult::Busy | StepResult::Locked => {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            _ => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
    }
}

fn refuse_existing(path: &Path, what: &'static str) -> Result<(), BackupError> {
    if path.symlink_metadata().is_ok() {
        return Err(BackupError::Exists { path: path.to_path_buf(), what });
    }
    Ok(())
}

fn partial_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(".partial");
    PathBuf::from(name)
}

fn remove_if_present(path: &Path) -> Result<(), BackupError> {
    match std::fs::remove_file(path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
            Err(BackupError::Io { action: "remove the unfinished copy", path: path.to_path_buf(), source: error })
        }
        _ => Ok(()),
    }
}

fn sync_file(path: &Path) -> Result<(), BackupError> {
    let io = |source| BackupError::Io { action: "sync", path: path.to_path_buf(), source };
    std::fs::OpenOptions::new().write(true).open(path).and_then(|f| f.sync_all()).map_err(io)
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), BackupError> {
    let partial = partial_path(path);
    let io = |source| BackupError::Io { action: "write", path: partial.clone(), source };
    let mut file = std::fs::File::create(&partial).map_err(io)?;
    file.write_all(bytes).and_then(|()| file.sync_all()).map_err(io)?;
    rename_synced(&partial, path)
}

/// Renames `from` to `to` and syncs their directory, so the new name survives a power cut.
fn rename_synced(from: &Path, to: &Path) -> Result<(), BackupError> {
    std::fs::rename(from, to).map_err(|source| BackupError::Io {
        action: "rename into",
        path: to.to_path_buf(),
        source,
    })?;
    let dir = match to.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|source| BackupError::Io {
        action: "sync the directory",
        path: dir.to_path_buf(),
        source,
    })
}

/// The file's size and SHA-256 in hexadecimal.
fn digest(path: &Path) -> Result<(u64, String), BackupError> {
    let io = |source| BackupError::Io { action: "read", path: path.to_path_buf(), source };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let n = file.read(&mut buffer).map_err(io)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
        bytes += n as u64;
    }
    let hash: [u8; 32] = hasher.finalize().into();
    Ok((bytes, hash.iter().map(|b| format!("{b:02x}")).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Batch, Incoming, Origin};
    use schemas::{Event, EventType};

    fn ledger_with(dir: &Path, events: usize) -> Ledger {
        let mut ledger = Ledger::open(dir.join("ledger.db")).unwrap();
        let events = (0..events)
            .map(|i| {
                let json = format!(
                    r#"{{"event_id":"u-{i}","occurred_at":"2026-11-02T10:00:00Z","tenant":"org-{}","metric":"requests","source":"api","quantity":3}}"#,
                    i % 7
                );
                let event = Event::from_json(EventType::UsageEvent, &json).unwrap();
                Incoming { event, origin: Origin::Local { name: "test".into() }, raw: None }
            })
            .collect();
        ledger.append(&Batch { events, ..Batch::default() }).unwrap();
        ledger
    }

    #[test]
    fn a_backup_restores_to_the_same_ledger_and_head() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = ledger_with(dir.path(), 50);
        let backup = dir.path().join("backup.db");
        let manifest = ledger.backup_to(&backup).unwrap();
        assert_eq!(manifest.head_seq, ledger.head().unwrap().seq);
        assert_eq!(manifest.head_hash, ledger.head().unwrap().hash_hex());
        assert_eq!(manifest.events_recorded, 50);
        assert_eq!(read_manifest(&backup).unwrap(), manifest);

        let restored_path = dir.path().join("restored.db");
        let report = restore(&backup, &restored_path).unwrap();
        assert!(report.verify.first_bad.is_none());
        let restored = Ledger::open_read_only(&restored_path).unwrap();
        assert_eq!(restored.ledger_id().unwrap(), ledger.ledger_id().unwrap());
        assert_eq!(restored.head().unwrap(), ledger.head().unwrap());
        assert_eq!(restored.status().unwrap().events_recorded, 50);
    }

    #[test]
    fn neither_a_backup_nor_a_restore_overwrites_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = ledger_with(dir.path(), 3);
        let backup = dir.path().join("backup.db");
        ledger.backup_to(&backup).unwrap();
        let again = ledger.backup_to(&backup).unwrap_err();
        assert!(matches!(again, BackupError::Exists { .. }), "{again}");
        let onto_ledger = restore(&backup, ledger.path()).unwrap_err();
        assert!(matches!(onto_ledger, BackupError::Exists { .. }), "{onto_ledger}");
        assert_eq!(ledger.status().unwrap().events_recorded, 3);
    }

    #[test]
    fn a_changed_backup_or_manifest_is_refused_and_nothing_is_restored() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = ledger_with(dir.path(), 20);
        let backup = dir.path().join("backup.db");
        let manifest = ledger.backup_to(&backup).unwrap();
        let target = dir.path().join("restored.db");

        // A byte flipped in the last page: the digest differs.
        let mut bytes = std::fs::read(&backup).unwrap();
        let last = bytes.len() - 100;
        bytes[last] ^= 0x40;
        std::fs::write(&backup, &bytes).unwrap();
        let flipped = restore(&backup, &target).unwrap_err();
        assert!(matches!(flipped, BackupError::DoesNotHold { .. }), "{flipped}");
        assert!(!target.exists() && !partial_path(&target).exists());

        // The file intact, its manifest claiming another head: the chain does not hold that head.
        bytes[last] ^= 0x40;
        std::fs::write(&backup, &bytes).unwrap();
        let claimed = BackupManifest { head_hash: "00".repeat(32), ..manifest.clone() };
        std::fs::write(manifest_path(&backup), serde_json::to_vec(&claimed).unwrap()).unwrap();
        let wrong_head = restore(&backup, &target).unwrap_err();
        assert!(wrong_head.to_string().contains("head its manifest records"), "{wrong_head}");
        assert!(!target.exists());

        // Without a manifest there is nothing to check the copy against.
        std::fs::remove_file(manifest_path(&backup)).unwrap();
        let missing = restore(&backup, &target).unwrap_err();
        assert!(missing.to_string().contains("is missing"), "{missing}");
        assert!(!target.exists());
    }
}
