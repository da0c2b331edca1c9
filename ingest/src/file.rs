//! `ingest --file`: an Avro object container file of any record type into the ledger.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use ledger::{AppendError, AppendReport, Batch, FileProgress, Incoming, Ledger, Origin, ReadError, Rejected};
use schemas::catalog::{ContainerRecord, ContainerRecords};
use schemas::{DecodeError, EventType};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::BatchBounds;

/// Records per append. Large enough that the per-transaction fsync is amortised (about 1 ms on this disk
/// against about 5 µs per event), small enough that a batch's memory stays around a few MB.
pub const FILE_BATCH_EVENTS: usize = 5_000;

/// Ingesting a file failed. What was appended before the failure stays appended.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileIngestError {
    /// The file cannot be opened or read.
    #[error("cannot read {path}")]
    Open {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// The file's header is not an Avro object container file of a record type of the catalog.
    #[error("{path} is not a readable Avro object container file of the catalog")]
    NotContainer {
        /// The file.
        path: PathBuf,
        /// What was wrong with it.
        source: DecodeError,
    },
    /// The ledger refused a batch.
    #[error("appending the records of {path} to the ledger failed")]
    Append {
        /// The file.
        path: PathBuf,
        /// The ledger's reason.
        source: AppendError,
    },
    /// The progress of an earlier ingest of the file could not be read.
    #[error("reading how far an earlier ingest of {path} got failed")]
    Progress {
        /// The file.
        path: PathBuf,
        /// The ledger's reason.
        source: ReadError,
    },
}

/// What an ingest of one file did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FileIngestReport {
    /// The file, as given.
    pub file: String,
    /// The record type of its records.
    pub record_type: String,
    /// The CRC-64-AVRO fingerprint of its writer schema, in hex.
    pub writer_fingerprint: String,
    /// Records read in this run.
    pub records: u64,
    /// Events recorded as new.
    pub recorded: u64,
    /// Exact duplicates of events recorded before.
    pub duplicates: u64,
    /// Conflicting duplicates: kept for audit, never counted.
    pub conflicts: u64,
    /// Records quarantined (they failed to decode or validate).
    pub quarantined: u64,
    /// Bad records the quarantine held already, from an earlier ingest of this file at the same place.
    pub already_quarantined: u64,
    /// The ledger's watermark after the last append.
    pub watermark: u64,
    /// Records not appended again: an earlier ingest of this file (the same sync marker, the same records) had
    /// appended them, up to its last committed batch. `records` counts the others.
    pub resumed_after: u64,
    /// An earlier ingest of a file with this sync marker covered records this file does not hold: the file was
    /// ingested whole (what it repeats counts as duplicates). Says what was found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resume_refused: Option<String>,
    /// The file could not be read past this record (its index; quarantined as `malformed_container`, without
    /// bytes: the damage has none of its own to keep), and why. The records after it, whether sound or not, were
    /// not read: the file must be repaired and ingested again (it then resumes at this record, the progress recorded
    /// with the batches stopping before it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub damaged: Option<Damage>,
}

/// Where a container file stopped being readable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Damage {
    /// The index of the first record that could not be read.
    pub record: u64,
    /// Why.
    pub message: String,
}

impl FileIngestReport {
    fn add(&mut self, report: &AppendReport) {
        self.recorded += report.recorded() as u64;
        self.duplicates += report.duplicates() as u64;
        self.conflicts += report.conflicts() as u64;
        self.quarantined += report.quarantined;
        self.already_quarantined += report.already_quarantined;
        // Every event has an outcome; the events quarantined by the append are counted in the quarantine's counts too.
        let rejected = report.quarantined + report.already_quarantined - report.quarantined_events() as u64;
        self.records += report.outcomes.len() as u64 + rejected;
        self.watermark = report.watermark;
    }
}

/// An Avro object container file, opened and its header read (the record type, the writer schema and the sync
/// marker), not yet appended. Opening it before the ledger means a missing or unreadable file fails before a new
/// ledger file is created: a typo in `--file` leaves no empty ledger behind.
pub struct ContainerFile {
    path: PathBuf,
    sync_marker: [u8; 16],
    records: ContainerRecords<'static, BufReader<File>>,
}

/// The running digest of a file's first records (`file_progress.digest`): each record's length, 8 bytes
/// little-endian, then its single-object bytes.
#[derive(Clone, Default)]
struct Prefix {
    records: u64,
    hasher: Sha256,
}

impl Prefix {
    fn add(&mut self, record: &ContainerRecord) {
        self.hasher.update((record.raw.len() as u64).to_le_bytes());
        self.hasher.update(&record.raw);
        self.records += 1;
    }

    fn digest(&self) -> [u8; 32] {
        self.hasher.clone().finalize().into()
    }
}

impl ContainerFile {
    /// Opens the file at `path` and reads its header: a missing or unreadable file fails here.
    pub fn open(path: &Path) -> Result<ContainerFile, FileIngestError> {
        let open = || File::open(path).map_err(|source| FileIngestError::Open { path: path.to_path_buf(), source });
        let not_container = |source| FileIngestError::NotContainer { path: path.to_path_buf(), source };
        let sync_marker = schemas::catalog::container_sync_marker(BufReader::new(open()?)).map_err(not_container)?;
        let records = schemas::Catalog::builtin().read_container(BufReader::new(open()?)).map_err(not_container)?;
        Ok(ContainerFile { path: path.to_path_buf(), sync_marker, records })
    }

    /// Appends the file's records in batches within `bounds`; records that fail to decode or validate are
    /// quarantined with their index in the file. `on_batch` sees each append's report (for progress). Each batch
    /// records how far into the file it reaches (`file_progress`, in its transaction): a rerun after a kill skips
    /// the records an earlier run appended, once it has checked that this file begins with them.
    pub fn ingest(
        self,
        ledger: &mut Ledger,
        bounds: BatchBounds,
        mut on_batch: impl FnMut(&FileIngestReport),
    ) -> Result<FileIngestReport, FileIngestError> {
        let path = self.path.clone();
        let earlier = ledger
            .file_progress(&self.sync_marker)
            .map_err(|source| FileIngestError::Progress { path: path.clone(), source })?;
        let found = match self.ingest_from(ledger, bounds, earlier.as_ref(), &mut on_batch)? {
            Resumed::Done(report) => return Ok(report),
            Resumed::Differs(found) => found,
        };
        let earlier = earlier.expect("only an ingest resuming after an earlier one finds the file differs");
        let Resumed::Done(mut report) = ContainerFile::open(&path)?.ingest_from(ledger, bounds, None, &mut on_batch)?
        else {
            unreachable!("an ingest from the first record has nothing to differ from")
        };
        report.resume_refused = Some(format!(
            "an earlier ingest of a file with the same sync marker ({}) appended its first {} records, and this file \
             {found}: it was ingested whole",
            earlier.path, earlier.records
        ));
        Ok(report)
    }

    /// The ingest, skipping the records `earlier` covers if this file begins with them (answers `Differs`, having
    /// appended nothing, if it does not).
    fn ingest_from(
        self,
        ledger: &mut Ledger,
        bounds: BatchBounds,
        earlier: Option<&FileProgress>,
        on_batch: &mut impl FnMut(&FileIngestReport),
    ) -> Result<Resumed, FileIngestError> {
        let ContainerFile { path, sync_marker, records } = self;
        let display = path.display().to_string();
        let mut report = FileIngestReport {
            file: display.clone(),
            record_type: records.event_type.name().to_string(),
            writer_fingerprint: format!("{:016x}", records.writer_fingerprint),
            // Where the ledger ends if nothing is left to append (each append moves it).
            watermark: ledger.watermark().map_err(|source| FileIngestError::Progress { path: path.clone(), source })?,
            ..FileIngestReport::default()
        };
        let expected_type: EventType = records.event_type;
        let skip = earlier.map_or(0, |e| e.records);
        let mut prefix = Prefix::default();
        // Once a record is damaged, the progress stays before it: a repaired file then resumes there.
        let mut damaged = false;
        let mut batch = Batch::default();
        let mut batch_bytes = 0;
        for record in records {
            if record.index < skip {
                if matches!(record.result, Err(DecodeError::Container { .. })) {
                    return Ok(Resumed::Differs(format!("cannot be read past record {}", record.index)));
                }
                prefix.add(&record);
                if prefix.records == skip && earlier.is_some_and(|e| e.digest != prefix.digest()) {
                    return Ok(Resumed::Differs("begins with other records".into()));
                }
                continue;
            }
            if matches!(record.result, Err(DecodeError::Container { .. })) {
                damaged = true;
            }
            if !damaged {
                prefix.add(&record);
            }
            let origin = Origin::File { path: display.clone(), record: record.index };
            batch_bytes += record.raw.len();
            match record.result {
                Ok(decoded) if decoded.event.event_type() == expected_type => {
                    batch.events.push(Incoming { event: decoded.event, origin, raw: Some(record.raw) })
                }
                Ok(decoded) => {
                    let error = DecodeError::WrongType { expected: expected_type, found: decoded.event.event_type() };
                    batch.rejected.push(Rejected::new(origin, record.raw, &error));
                }
                Err(error) => {
                    if let DecodeError::Container { message } = &error {
                        report.damaged = Some(Damage { record: record.index, message: message.clone() });
                    }
                    batch.rejected.push(Rejected::new(origin, record.raw, &error))
                }
            }
            if bounds.reached(batch.events.len() + batch.rejected.len(), batch_bytes) {
                batch.file_progress = Some(progress_of(&sync_marker, &display, &prefix));
                append(ledger, &path, &mut batch, &mut report)?;
                batch_bytes = 0;
                on_batch(&report);
            }
        }
        if prefix.records < skip {
            return Ok(Resumed::Differs(format!("holds {} records", prefix.records)));
        }
        report.resumed_after = skip;
        batch.file_progress = Some(progress_of(&sync_marker, &display, &prefix));
        append(ledger, &path, &mut batch, &mut report)?;
        on_batch(&report);
        Ok(Resumed::Done(report))
    }
}

/// What an ingest resuming after an earlier one found.
enum Resumed {
    Done(FileIngestReport),
    /// The file does not begin with the records the earlier ingest appended; nothing was appended.
    Differs(String),
}

fn progress_of(sync_marker: &[u8; 16], path: &str, prefix: &Prefix) -> FileProgress {
    FileProgress { sync_marker: *sync_marker, path: path.to_string(), records: prefix.records, digest: prefix.digest() }
}

/// Reads `path` and appends its records ([`ContainerFile::open`], then [`ContainerFile::ingest`]).
pub fn ingest_file(
    ledger: &mut Ledger,
    path: &Path,
    bounds: BatchBounds,
    on_batch: impl FnMut(&FileIngestReport),
) -> Result<FileIngestReport, FileIngestError> {
    ContainerFile::open(path)?.ingest(ledger, bounds, on_batch)
}

fn append(
    ledger: &mut Ledger,
    path: &Path,
    batch: &mut Batch,
    report: &mut FileIngestReport,
) -> Result<(), FileIngestError> {
    if batch.events.is_empty() && batch.rejected.is_empty() {
        // Nothing to append, and nothing the progress could gain: the records before are appended already.
        return Ok(());
    }
    let appended =
        ledger.append(batch).map_err(|source| FileIngestError::Append { path: path.to_path_buf(), source })?;
    report.add(&appended);
    *batch = Batch::default();
    Ok(())
}
