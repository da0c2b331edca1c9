//! The spill: where the hook keeps the decisions it made open (a policy with `on_failure: OPEN`, while the ledger
//! refused its groups) until the ledger takes them. A file beside the ledger (`LEDGER.spill`), its whole size
//! written at start, so that the disk whose filling stopped the ledger cannot stop the spill too: records overwrite
//! space the file owns already. Each record is synced before its request is answered.
//!
//! A record is a little-endian u32 length, the first 8 bytes of the SHA-256 of the payload, and the payload: an
//! event in Avro single-object encoding. A zero length ends the records. A record cut short or whose digest does not
//! match (a write a crash interrupted: its request was never answered) ends them too.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use schemas::{Catalog, Event};
use sha2::{Digest, Sha256};

/// Bytes before each record's payload: its length and its digest.
const RECORD_HEADER_BYTES: usize = 4 + 8;
/// Written at start in pieces of this size.
static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];

/// Why the spill cannot take a record, or cannot be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpillError {
    /// The spill's room is taken by decisions the ledger has not taken yet.
    #[error(
        "the spill {path} is full: {used} of its {capacity} bytes hold decisions made open the ledger has not taken yet"
    )]
    Full {
        /// The spill file.
        path: PathBuf,
        /// Bytes of records.
        used: u64,
        /// Its size.
        capacity: u64,
    },
    /// Reading, writing or syncing the file failed.
    #[error("the spill {path}: {source}")]
    Io {
        /// The spill file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// A record the digest vouches for does not decode: a spill written by another version, or a bug.
    #[error(
        "the spill {path} holds a record at byte {offset} that does not decode ({message}): move the file aside to start"
    )]
    Undecodable {
        /// The spill file.
        path: PathBuf,
        /// Where the record starts.
        offset: u64,
        /// Why it does not decode.
        message: String,
    },
}

/// The spill file and the records it holds.
#[derive(Debug)]
pub struct Spill {
    file: File,
    path: PathBuf,
    capacity: u64,
    /// Where the next record goes: the bytes of records held.
    end: u64,
    /// The events of the records held, in order: what the ledger has not taken yet.
    pending: Vec<Event>,
}

impl Spill {
    /// The spill of the ledger at `ledger` (`LEDGER.spill`).
    pub fn path_of(ledger: &Path) -> PathBuf {
        let mut name = ledger.as_os_str().to_owned();
        name.push(".spill");
        PathBuf::from(name)
    }

    /// Opens (or creates) the spill at `path`, `capacity` bytes long, reading the records it holds. A file shorter
    /// than `capacity` is grown to it with zeros and synced; a longer one keeps its size.
    pub fn open(path: &Path, capacity: u64) -> Result<Spill, SpillError> {
        let io = |source| SpillError::Io { path: path.to_path_buf(), source };
        let mut file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).map_err(io)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io)?;
        let (end, pending) = read_records(path, &bytes)?;
        let length = bytes.len() as u64;
        if length < capacity {
            file.seek(SeekFrom::Start(length)).map_err(io)?;
            let mut left = capacity - length;
            while left > 0 {
                let n = left.min(ZEROS.len() as u64) as usize;
                file.write_all(&ZEROS[..n]).map_err(io)?;
                left -= n as u64;
            }
            file.sync_all().map_err(io)?;
        }
        Ok(Spill { file, path: path.to_path_buf(), capacity: capacity.max(length), end, pending })
    }

    /// Appends `events` as records and syncs them, or nothing (the spill is full, or a write failed): a request is
    /// answered FAIL_OPEN only once its events are on the disk.
    pub fn push(&mut self, events: &[Event]) -> Result<(), SpillError> {
        let mut bytes = Vec::new();
        for event in events {
            let payload = Catalog::builtin().encode_single_object(event);
            bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            bytes.extend_from_slice(&Sha256::digest(&payload)[..8]);
            bytes.extend_from_slice(&payload);
        }
        // Room for the records and the zero length after them.
        let used = self.end + bytes.len() as u64;
        if used + 4 > self.capacity {
            return Err(SpillError::Full { path: self.path.clone(), used: self.end, capacity: self.capacity });
        }
        // The zero after the records: space before a record a crash cut short may hold an earlier record's bytes.
        bytes.extend_from_slice(&0u32.to_le_bytes());
        let io = |source| SpillError::Io { path: self.path.clone(), source };
        self.file.seek(SeekFrom::Start(self.end)).map_err(io)?;
        self.file.write_all(&bytes).map_err(io)?;
        self.file.sync_data().map_err(io)?;
        self.end = used;
        self.pending.extend_from_slice(events);
        Ok(())
    }

    /// The events the ledger has not taken yet, in the order they were spilled.
    pub fn pending(&self) -> &[Event] {
        &self.pending
    }

    /// Bytes of records held.
    pub fn used(&self) -> u64 {
        self.end
    }

    /// Empties the spill once the ledger has taken every pending event. Should writing the zero at its start fail,
    /// the records stay in the file: the next start appends them again, and the ledger keeps each event once.
    pub fn clear(&mut self) -> Result<(), SpillError> {
        self.pending.clear();
        let io = |source| SpillError::Io { path: self.path.clone(), source };
        self.file.seek(SeekFrom::Start(0)).map_err(io)?;
        self.file.write_all(&0u32.to_le_bytes()).map_err(io)?;
        self.file.sync_data().map_err(io)?;
        self.end = 0;
        Ok(())
    }
}

/// The records at the start of `bytes`: where they end, and their events.
fn read_records(path: &Path, bytes: &[u8]) -> Result<(u64, Vec<Event>), SpillError> {
    let mut events = Vec::new();
    let mut at = 0;
    while let Some(header) = bytes.get(at..at + RECORD_HEADER_BYTES) {
        let length = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
        let Some(payload) = bytes.get(at + RECORD_HEADER_BYTES..at + RECORD_HEADER_BYTES + length) else { break };
        if length == 0 || Sha256::digest(payload)[..8] != header[4..] {
            break;
        }
        let decoded = Catalog::builtin().decode_single_object(payload, None).map_err(|e| SpillError::Undecodable {
            path: path.to_path_buf(),
            offset: at as u64,
            message: e.to_string(),
        })?;
        events.push(decoded.event);
        at += RECORD_HEADER_BYTES + length;
    }
    Ok((at as u64, events))
}

#[cfg(test)]
mod tests {
    use schemas::{Header, Timestamp, UsageEvent};

    use super::*;

    fn usage(n: i64) -> Event {
        Event::Usage(UsageEvent {
            header: Header {
                event_id: format!("use-{n}"),
                occurred_at: Timestamp(1_790_000_000_000_000 + n),
                tenant: "org-1".into(),
                subject: None,
                metric: "requests".into(),
                source: "test".into(),
                api_key: None,
                project: None,
            },
            quantity: n,
            request_id: None,
            attributes: Default::default(),
        })
    }

    // Proves records survive a reopen in order, that the file is its whole size from the start, that a cleared spill
    // reopens empty, and that a full one refuses a record whole.
    #[test]
    fn records_survive_a_reopen_and_a_full_spill_refuses_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = Spill::path_of(&dir.path().join("ledger.db"));
        let mut spill = Spill::open(&path, 4096).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 4096);
        spill.push(&[usage(1), usage(2)]).unwrap();
        spill.push(&[usage(3)]).unwrap();
        drop(spill);
        let mut spill = Spill::open(&path, 4096).unwrap();
        assert_eq!(spill.pending(), &[usage(1), usage(2), usage(3)]);
        let used = spill.used();
        let many: Vec<Event> = (10..200).map(usage).collect();
        assert!(matches!(spill.push(&many), Err(SpillError::Full { .. })));
        assert_eq!((spill.used(), spill.pending().len()), (used, 3), "nothing of a refused push is kept");
        spill.clear().unwrap();
        drop(spill);
        assert!(Spill::open(&path, 4096).unwrap().pending().is_empty());
    }

    // Proves a record a crash cut short (its digest does not match) ends the records: what came before is kept.
    #[test]
    fn a_torn_record_ends_the_records() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db.spill");
        let mut spill = Spill::open(&path, 4096).unwrap();
        spill.push(&[usage(1)]).unwrap();
        let end = spill.used();
        spill.push(&[usage(2)]).unwrap();
        drop(spill);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[end as usize + RECORD_HEADER_BYTES + 3] ^= 0xff;
        std::fs::write(&path, bytes).unwrap();
        let spill = Spill::open(&path, 4096).unwrap();
        assert_eq!((spill.pending(), spill.used()), (&[usage(1)][..], end));
    }
}
