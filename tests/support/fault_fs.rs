//! Power cuts under the real binary: builds the LD_PRELOAD shim of `fault_shim.c` (with `gcc`, at run time), reads
//! the journal it keeps of a process's writes, truncates and syncs under a directory, and, once that process has
//! been killed, puts the directory's files back to what a disk may hold after a power cut at that instant: every
//! write and truncate a successful sync covered stays; of the others, any subset (in order) or none.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const REC_PATH: u8 = 1;
const REC_WRITE: u8 = 2;
const REC_TRUNCATE: u8 = 3;
const REC_SYNC_OK: u8 = 4;
const REC_SYNC_FAILED: u8 = 5;
const REC_UNLINK: u8 = 6;
const REC_AMEND: u8 = 7;

/// The shim, compiled into a temporary directory (removed with it).
pub struct Shim {
    pub library: PathBuf,
    _dir: tempfile::TempDir,
}

/// Which syncs `QL_FAULT_FAIL_SYNC` counts: SQLite's (`fsync`: it is built without `HAVE_FDATASYNC`), Rust's
/// `File::sync_data` (`fdatasync`: the hook's own sync of the log), or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncCall {
    Fsync,
    Fdatasync,
    Any,
}

impl Shim {
    /// Compiles `fault_shim.c` with `gcc -shared -fPIC`; panics with gcc's complaint when it cannot.
    pub fn build() -> Shim {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let source = dir.path().join("fault_shim.c");
        std::fs::write(&source, include_str!("fault_shim.c")).expect("the shim's source is written");
        let library = dir.path().join("libqlfault.so");
        let output = Command::new("gcc")
            .args(["-shared", "-fPIC", "-O2", "-Wall", "-o"])
            .arg(&library)
            .arg(&source)
            .args(["-ldl", "-lpthread"])
            .output()
            .unwrap_or_else(|e| panic!("cannot run gcc to build the fault shim: {e}"));
        assert!(
            output.status.success(),
            "gcc failed to build the fault shim:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        Shim { library, _dir: dir }
    }

    /// The environment that puts a child under the shim, journaling the files under `watched` into `journal`
    /// (outside it), and failing the `fail_sync`th sync of `call` when given.
    pub fn env(
        &self,
        watched: &Path,
        journal: &Path,
        fail_sync: Option<(u64, SyncCall)>,
    ) -> Vec<(&'static str, OsString)> {
        assert!(!journal.starts_with(watched), "the journal must be outside the directory it journals");
        let mut env = vec![
            ("LD_PRELOAD", self.library.clone().into_os_string()),
            ("QL_FAULT_DIR", watched.canonicalize().expect("the watched directory exists").into_os_string()),
            ("QL_FAULT_JOURNAL", journal.as_os_str().to_owned()),
        ];
        if let Some((n, call)) = fail_sync {
            env.push(("QL_FAULT_FAIL_SYNC", n.to_string().into()));
            let call = match call {
                SyncCall::Fsync => "fsync",
                SyncCall::Fdatasync => "fdatasync",
                SyncCall::Any => "any",
            };
            env.push(("QL_FAULT_FAIL_SYNC_CALL", call.into()));
        }
        env
    }
}

/// A change to a file's bytes, with what it replaced.
#[derive(Debug, Clone)]
pub enum Change {
    Write { offset: u64, size_before: u64, new: Vec<u8>, old: Vec<u8> },
    Truncate { size_before: u64, size_after: u64, cut: Vec<u8> },
}

/// One record of the journal.
#[derive(Debug, Clone)]
pub enum Record {
    /// A file's path, the first time the shim meets it.
    Path { path: u32, name: PathBuf },
    /// The `number`th write or truncate.
    Change { path: u32, number: u64, change: Change },
    /// A sync of the file returned 0; it began when `began` changes had been journaled.
    SyncOk { path: u32, began: u64 },
    /// A sync failed (injected): what the file held unsynced then may be lost, whatever later syncs say.
    SyncFailed { path: u32, began: u64 },
    /// The file was removed.
    Unlink { path: u32 },
}

/// What the shim saw of one process: counts of the calls it intercepted on watched files.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Intercepted {
    pub files: u64,
    pub writes: u64,
    pub truncates: u64,
    pub syncs: u64,
    pub failed_syncs: u64,
    pub unlinks: u64,
}

impl Intercepted {
    pub fn of(records: &[Record]) -> Intercepted {
        let mut seen = Intercepted::default();
        for record in records {
            match record {
                Record::Path { .. } => seen.files += 1,
                Record::Change { change: Change::Write { .. }, .. } => seen.writes += 1,
                Record::Change { change: Change::Truncate { .. }, .. } => seen.truncates += 1,
                Record::SyncOk { .. } => seen.syncs += 1,
                Record::SyncFailed { .. } => seen.failed_syncs += 1,
                Record::Unlink { .. } => seen.unlinks += 1,
            }
        }
        seen
    }

    pub fn calls(&self) -> u64 {
        self.writes + self.truncates + self.syncs + self.failed_syncs + self.unlinks
    }
}

/// Reads a journal the shim wrote. A missing journal is empty: the process was killed before the shim's first
/// call. A last record cut short is dropped: the process was killed while journaling a change it had not begun.
pub fn read_journal(journal: &Path) -> Vec<Record> {
    let bytes = match std::fs::read(journal) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(error) => panic!("cannot read the journal {}: {error}", journal.display()),
    };
    let mut reader = Reader { bytes: &bytes, at: 0 };
    let mut records = Vec::new();
    while reader.at < bytes.len() {
        let Some(record) = reader.record() else { break };
        match record {
            // A call that did less than journaled: the change it amends is one of the last of its file.
            Amend { path, number, done } => {
                let change = records.iter_mut().rev().find_map(|r| match r {
                    Record::Change { path: p, number: n, change } if *p == path && *n == number => Some(change),
                    _ => None,
                });
                match change.unwrap_or_else(|| panic!("an amend of change {number}, which is not journaled")) {
                    Change::Write { new, .. } => new.truncate(done as usize),
                    Change::Truncate { size_before, size_after, cut } => {
                        *size_after = *size_before;
                        cut.clear();
                    }
                }
            }
            Parsed(record) => records.push(record),
        }
    }
    records
}

/// A record as read: most stand alone, an amend changes one read before it.
enum Read {
    Parsed(Record),
    Amend { path: u32, number: u64, done: u64 },
}
use Read::{Amend, Parsed};

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    /// The next record, or `None` if the journal ends inside it.
    fn record(&mut self) -> Option<Read> {
        let (kind, path, number) = (self.u8()?, self.u32()?, self.u64()?);
        Some(match kind {
            REC_PATH => {
                let length = self.u32()? as usize;
                let name = String::from_utf8(self.take(length)?.to_vec()).expect("a UTF-8 path");
                Parsed(Record::Path { path, name: PathBuf::from(name) })
            }
            REC_WRITE => {
                let (offset, size_before) = (self.u64()?, self.u64()?);
                let (new_length, old_length) = (self.u32()? as usize, self.u32()? as usize);
                let new = self.take(new_length)?.to_vec();
                let old = self.take(old_length)?.to_vec();
                Parsed(Record::Change { path, number, change: Change::Write { offset, size_before, new, old } })
            }
            REC_TRUNCATE => {
                let (size_before, size_after) = (self.u64()?, self.u64()?);
                let cut_length = self.u32()? as usize;
                let cut = self.take(cut_length)?.to_vec();
                Parsed(Record::Change { path, number, change: Change::Truncate { size_before, size_after, cut } })
            }
            REC_SYNC_OK => Parsed(Record::SyncOk { path, began: number }),
            REC_SYNC_FAILED => Parsed(Record::SyncFailed { path, began: number }),
            REC_UNLINK => Parsed(Record::Unlink { path }),
            REC_AMEND => Amend { path, number, done: self.u64()? },
            other => panic!("record kind {other} at byte {} of the journal", self.at),
        })
    }

    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let end = self.at.checked_add(n).filter(|end| *end <= self.bytes.len())?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Some(taken)
    }

    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
}

/// Where a change stood at the instant of the cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Standing {
    /// A sync that began after it returned 0: on the disk.
    Durable,
    /// Not synced yet: written back or not, at the kernel's whim.
    Unsynced,
    /// Written before a sync that failed: the kernel may have dropped it, and no later sync writes it again.
    Dropped,
}

/// Which of the changes no sync covered a power cut keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// None of them: the disk holds exactly what was synced.
    None,
    /// Each with this probability (in percent), drawn from the seed.
    Some(u64),
    /// All of them: what a crash of the process alone leaves.
    All,
}

/// What a simulated power cut did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CutReport {
    /// Changes no successful sync covered (written back or not, at random).
    pub unsynced: u64,
    /// Of those, the changes the cut lost.
    pub lost: u64,
    /// Changes written before a failed sync and not covered by an earlier one.
    pub dropped_by_failed_sync: u64,
}

/// Puts the files the journal names back to a state a disk may hold after a power cut at the instant the
/// journaling process died: per file, every change after the first one no sync covered is taken back (newest
/// first), then those changes are made again in order, the durable ones always and the others as `keep` and
/// `random` decide. A file removed at the end is left alone (its removal is taken as durable).
pub fn power_cut(records: &[Record], keep: Keep, random: &mut impl FnMut() -> u64) -> CutReport {
    let mut names = BTreeMap::new();
    let mut changes: BTreeMap<u32, Vec<(u64, &Change, Standing)>> = BTreeMap::new();
    for record in records {
        match record {
            Record::Path { path, name } => {
                names.insert(*path, name.clone());
            }
            Record::Change { path, number, change } => {
                changes.entry(*path).or_default().push((*number, change, Standing::Unsynced))
            }
            Record::SyncOk { path, began } => settle(changes.entry(*path).or_default(), *began, Standing::Durable),
            Record::SyncFailed { path, began } => settle(changes.entry(*path).or_default(), *began, Standing::Dropped),
            // What came before belongs to a file that is gone; a file made again under the name starts afresh.
            Record::Unlink { path } => drop(changes.remove(path)),
        }
    }
    let mut report = CutReport::default();
    for (path, changes) in &changes {
        let name = &names[path];
        let Some(first) = changes.iter().position(|(_, _, standing)| *standing != Standing::Durable) else {
            continue;
        };
        if !name.exists() {
            continue;
        }
        let file =
            File::options().read(true).write(true).open(name).unwrap_or_else(|e| panic!("{}: {e}", name.display()));
        for (_, change, _) in changes[first..].iter().rev() {
            take_back(&file, change);
        }
        for (_, change, standing) in &changes[first..] {
            let kept = match (standing, keep) {
                (Standing::Durable, _) => true,
                (_, Keep::None) => false,
                (_, Keep::All) => true,
                (_, Keep::Some(percent)) => random() % 100 < percent,
            };
            if *standing != Standing::Durable {
                report.unsynced += 1;
                report.dropped_by_failed_sync += u64::from(*standing == Standing::Dropped);
                report.lost += u64::from(!kept);
            }
            if kept {
                make(&file, change);
            }
        }
        file.sync_all().expect("the files after the cut reach the disk");
    }
    report
}

/// A sync that began once `began` changes were journaled settles those still unsynced.
fn settle(changes: &mut [(u64, &Change, Standing)], began: u64, to: Standing) {
    for (number, _, standing) in changes.iter_mut() {
        if *number < began && *standing == Standing::Unsynced {
            *standing = to;
        }
    }
}

fn take_back(file: &File, change: &Change) {
    match change {
        Change::Write { offset, size_before, new, old } => {
            file.write_all_at(old, *offset).expect("the old bytes are written back");
            if offset + new.len() as u64 > *size_before {
                file.set_len(*size_before).expect("the file is cut back to its size before the write");
            }
        }
        Change::Truncate { size_before, size_after, cut } => {
            if size_after < size_before {
                file.write_all_at(cut, *size_after).expect("the cut bytes are written back");
            } else {
                file.set_len(*size_before).expect("the file is cut back to its size before it grew");
            }
        }
    }
}

fn make(file: &File, change: &Change) {
    match change {
        Change::Write { offset, new, .. } => file.write_all_at(new, *offset).expect("the write is made again"),
        Change::Truncate { size_after, .. } => file.set_len(*size_after).expect("the truncate is made again"),
    }
}

/// splitmix64: seeded, the same sequence everywhere.
pub fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
