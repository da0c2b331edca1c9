//! `ingest --file`: an Avro object container file of any record type into the ledger.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use ledger::{AppendError, AppendReport, Batch, Incoming, Ledger, Origin, Rejected};
use schemas::catalog::ContainerRecords;
use schemas::{DecodeError, EventType};
use serde::Serialize;

/// Records per append. Large enough that the per-transaction fsync is amortised (about 1 ms on this disk
/// against about 5 µs per event), small enough that a batch's memory stays around a few MB.
pub const FILE_BATCH_EVENTS: usize = 5_000;

/// Ingesting a file failed. What was appended before the failure stays appended.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileIngestError {
    #[error("cannot read {path}")]
    Open { path: PathBuf, source: std::io::Error },
    #[error("{path} is not a readable Avro object container file of the catalog")]
    NotContainer { path: PathBuf, source: DecodeError },
    #[error("appending the records of {path} to the ledger failed")]
    Append { path: PathBuf, source: AppendError },
}

/// What an ingest of one file did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FileIngestReport {
    pub file: String,
    pub record_type: String,
    pub writer_fingerprint: String,
    pub records: u64,
    pub recorded: u64,
    pub duplicates: u64,
    pub conflicts: u64,
    pub quarantined: u64,
    /// Bad records the quarantine held already, from an earlier ingest of this file at the same place.
    pub already_quarantined: u64,
    pub watermark: u64,
    /// The file could not be read past this record (its index; quarantined as `malformed_container`, without
    /// bytes: the damage has none of its own to keep), and why. The records after it, whether sound or not, were
    /// not read: the file must be repaired and ingested again (what was recorded is then a duplicate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub damaged: Option<Damage>,
}

/// Where a container file stopped being readable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Damage {
    pub record: u64,
    pub message: String,
}

impl FileIngestReport {
    fn add(&mut self, report: &AppendReport) {
        self.recorded += report.recorded() as u64;
        self.duplicates += report.duplicates() as u64;
        self.conflicts += report.conflicts() as u64;
        self.quarantined += report.quarantined;
        self.already_quarantined += report.already_quarantined;
        self.records += (report.outcomes.len() as u64) + report.quarantined + report.already_quarantined;
        self.watermark = report.watermark;
    }
}

/// An Avro object container file, opened and its header read (the record type and the writer schema), not yet
/// appended. Opening it before the ledger means a missing or unreadable file fails before a new ledger file is
/// created: a typo in `--file` leaves no empty ledger behind.
pub struct ContainerFile {
    path: PathBuf,
    records: ContainerRecords<'static, BufReader<File>>,
}

impl ContainerFile {
    pub fn open(path: &Path) -> Result<ContainerFile, FileIngestError> {
        let file = File::open(path).map_err(|source| FileIngestError::Open { path: path.to_path_buf(), source })?;
        let records = schemas::Catalog::builtin()
            .read_container(BufReader::new(file))
            .map_err(|source| FileIngestError::NotContainer { path: path.to_path_buf(), source })?;
        Ok(ContainerFile { path: path.to_path_buf(), records })
    }

    /// Appends the file's records in batches of `batch_events`; records that fail to decode or validate are
    /// quarantined with their index in the file. `on_batch` sees each append's report (for progress).
    pub fn ingest(
        self,
        ledger: &mut Ledger,
        batch_events: usize,
        mut on_batch: impl FnMut(&FileIngestReport),
    ) -> Result<FileIngestReport, FileIngestError> {
        let ContainerFile { path, records } = self;
        let display = path.display().to_string();
        let mut report = FileIngestReport {
            file: display.clone(),
            record_type: records.event_type.name().to_string(),
            writer_fingerprint: format!("{:016x}", records.writer_fingerprint),
            ..FileIngestReport::default()
        };
        let expected_type: EventType = records.event_type;
        let mut batch = Batch::default();
        for record in records {
            let origin = Origin::File { path: display.clone(), record: record.index };
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
            if batch.events.len() + batch.rejected.len() >= batch_events {
                append(ledger, &path, &mut batch, &mut report)?;
                on_batch(&report);
            }
        }
        append(ledger, &path, &mut batch, &mut report)?;
        on_batch(&report);
        Ok(report)
    }
}

/// Reads `path` and appends its records ([`ContainerFile::open`], then [`ContainerFile::ingest`]).
pub fn ingest_file(
    ledger: &mut Ledger,
    path: &Path,
    batch_events: usize,
    on_batch: impl FnMut(&FileIngestReport),
) -> Result<FileIngestReport, FileIngestError> {
    ContainerFile::open(path)?.ingest(ledger, batch_events, on_batch)
}

fn append(
    ledger: &mut Ledger,
    path: &Path,
    batch: &mut Batch,
    report: &mut FileIngestReport,
) -> Result<(), FileIngestError> {
    if batch.events.is_empty() && batch.rejected.is_empty() {
        return Ok(());
    }
    let appended =
        ledger.append(batch).map_err(|source| FileIngestError::Append { path: path.to_path_buf(), source })?;
    report.add(&appended);
    *batch = Batch::default();
    Ok(())
}
