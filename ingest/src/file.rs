//! `ingest --file`: an Avro object container file of any record type into the ledger.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use ledger::{AppendError, AppendReport, Batch, FileProgress, Incoming, Ledger, Origin, ReadError, Rejected};
use schemas::catalog::{ContainerRecord, ContainerRecords};
use schemas::{DecodeError, EventType};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::bounds::BatchBounds;
pub use crate::bounds::FILE_BATCH_EVENTS;

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

/// What an ingest of one file into a set of shards did: per shard, and summed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ShardsIngestReport {
    /// The file, as given.
    pub file: String,
    /// The record type of its records.
    pub record_type: String,
    /// The CRC-64-AVRO fingerprint of its writer schema, in hex.
    pub writer_fingerprint: String,
    /// Records read from the file in this run (a plan default, recorded by every shard, is one record).
    pub records: u64,
    /// Events recorded as new, summed over the shards (a plan default counts once per shard).
    pub recorded: u64,
    /// Exact duplicates, summed over the shards.
    pub duplicates: u64,
    /// Conflicting duplicates, summed over the shards.
    pub conflicts: u64,
    /// Records quarantined, summed over the shards.
    pub quarantined: u64,
    /// Bad records the quarantines held already, summed over the shards.
    pub already_quarantined: u64,
    /// Each shard's part, in partition order.
    pub shards: Vec<ShardIngestReport>,
    /// Shards whose earlier progress this file does not begin with: they were given the file whole, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resume_refused: Vec<String>,
    /// Where the file stopped being readable (see [`FileIngestReport::damaged`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub damaged: Option<Damage>,
}

/// One shard's part of a [`ShardsIngestReport`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ShardIngestReport {
    /// The partition the shard holds.
    pub partition: u32,
    /// Records routed to it in this run.
    pub records: u64,
    /// Events recorded as new.
    pub recorded: u64,
    /// Exact duplicates.
    pub duplicates: u64,
    /// Conflicting duplicates.
    pub conflicts: u64,
    /// Records quarantined.
    pub quarantined: u64,
    /// Bad records its quarantine held already.
    pub already_quarantined: u64,
    /// The shard's watermark after its last append.
    pub watermark: u64,
    /// The records of the file it had taken already (its recorded progress), skipped for it in this run.
    pub resumed_after: u64,
}

/// The shards a record goes to: its tenant's ([`schemas::partition::partition_of`]); a plan default (tenant `*`) to
/// every shard; a record that does not decode, which has no tenant, to shard 0 (docs/decisions.md).
fn shards_of(result: &Result<schemas::catalog::Decoded, DecodeError>, partitions: u32) -> std::ops::Range<u32> {
    match result {
        Ok(decoded) if decoded.event.header().tenant == "*" => 0..partitions,
        Ok(decoded) => {
            let p = schemas::partition::partition_of(&decoded.event.header().tenant, partitions);
            p..p + 1
        }
        Err(_) => 0..1,
    }
}

impl ContainerFile {
    /// Appends the file's records to a set of shards (contract §9.4): `shards[p]` is the shard of partition p of
    /// `shards.len()`. Each record goes to its tenant's shard ([`shards_of`]). Each shard records its own progress in
    /// the file with the batches it appends, so a rerun after a kill gives each shard only the records it lacks; a
    /// shard whose progress this file does not begin with is given the file whole (its copies count as duplicates).
    pub fn ingest_shards(
        self,
        shards: &mut [Ledger],
        bounds: BatchBounds,
        mut on_batch: impl FnMut(&ShardsIngestReport),
    ) -> Result<ShardsIngestReport, FileIngestError> {
        let path = self.path.clone();
        let partitions = u32::try_from(shards.len()).expect("fewer than 2^32 shards");
        let progress_error = |source| FileIngestError::Progress { path: path.clone(), source };
        let mut skips = Vec::with_capacity(shards.len());
        let mut earlier = Vec::with_capacity(shards.len());
        for shard in shards.iter() {
            let progress = shard.file_progress(&self.sync_marker).map_err(progress_error)?;
            skips.push(progress.as_ref().map_or(0, |p| p.records));
            earlier.push(progress);
        }
        // Before appending anything: does the file begin with what each shard took from it? A shard for which it
        // does not is given the whole file.
        let mut resume_refused = Vec::new();
        if skips.iter().any(|&skip| skip > 0) {
            let found = ContainerFile::open(&path)?.differs_from(&earlier);
            for (partition, found) in found.into_iter().enumerate() {
                let Some(found) = found else { continue };
                let taken = earlier[partition].as_ref().expect("only a shard with progress differs");
                resume_refused.push(format!(
                    "shard {partition}: an earlier ingest of a file with the same sync marker ({}) appended its first \
                     {} records, and this file {found}: it was ingested whole into this shard",
                    taken.path, taken.records
                ));
                skips[partition] = 0;
            }
        }
        let ContainerFile { path, sync_marker, records } = self;
        let display = path.display().to_string();
        let mut parts: Vec<FileIngestReport> = Vec::with_capacity(shards.len());
        for shard in shards.iter() {
            let watermark = shard.watermark().map_err(progress_error)?;
            parts.push(FileIngestReport { watermark, ..FileIngestReport::default() });
        }
        let mut report = ShardsIngestReport {
            file: display.clone(),
            record_type: records.event_type.name().to_string(),
            writer_fingerprint: format!("{:016x}", records.writer_fingerprint),
            resume_refused,
            ..ShardsIngestReport::default()
        };
        let expected_type: EventType = records.event_type;
        let first = skips.iter().copied().min().unwrap_or(0);
        let mut prefix = Prefix::default();
        let mut damaged = false;
        let mut batches: Vec<Batch> = shards.iter().map(|_| Batch::default()).collect();
        let (mut batch_records, mut batch_bytes) = (0, 0);
        for record in records {
            if matches!(record.result, Err(DecodeError::Container { .. })) {
                damaged = true;
            }
            if !damaged {
                prefix.add(&record);
            }
            if record.index < first {
                continue;
            }
            report.records += 1;
            batch_records += 1;
            batch_bytes += record.raw.len();
            let targets = shards_of(&record.result, partitions);
            if let Err(DecodeError::Container { message }) = &record.result {
                report.damaged = Some(Damage { record: record.index, message: message.clone() });
            }
            let origin = Origin::File { path: display.clone(), record: record.index };
            let item = match record.result {
                Ok(decoded) if decoded.event.event_type() == expected_type => Ok(decoded.event),
                Ok(decoded) => {
                    Err(DecodeError::WrongType { expected: expected_type, found: decoded.event.event_type() })
                }
                Err(error) => Err(error),
            };
            let mut takers = targets.filter(|&p| record.index >= skips[p as usize]).peekable();
            // Moved into its one shard; copied only for a plan default, which every shard records.
            let mut held = Some((item, record.raw));
            while let Some(p) = takers.next() {
                let (item, raw) = if takers.peek().is_none() { held.take() } else { held.clone() }.expect("taken last");
                let batch = &mut batches[p as usize];
                match item {
                    Ok(event) => batch.events.push(Incoming { event, origin: origin.clone(), raw: Some(raw) }),
                    Err(error) => batch.rejected.push(Rejected::new(origin.clone(), raw, &error)),
                }
            }
            if bounds.reached(batch_records, batch_bytes) {
                let progress = progress_of(&sync_marker, &display, &prefix);
                for (p, shard) in shards.iter_mut().enumerate() {
                    // A shard that took nothing of this batch records its progress with its next batch (or the last).
                    batches[p].file_progress = Some(progress.clone());
                    append(shard, &path, &mut batches[p], &mut parts[p])?;
                }
                (batch_records, batch_bytes) = (0, 0);
                report.sum(&parts, &skips);
                on_batch(&report);
            }
        }
        // Every shard records how far it got, even with nothing of the file's last records to append: a rerun then
        // says it resumed, rather than reading the file again for that shard.
        let progress = progress_of(&sync_marker, &display, &prefix);
        for (p, shard) in shards.iter_mut().enumerate() {
            if prefix.records > skips[p] || !batches[p].events.is_empty() || !batches[p].rejected.is_empty() {
                batches[p].file_progress = Some(progress.clone());
                let appended = shard
                    .append(&batches[p])
                    .map_err(|source| FileIngestError::Append { path: path.to_path_buf(), source })?;
                parts[p].add(&appended);
            }
        }
        report.sum(&parts, &skips);
        on_batch(&report);
        Ok(report)
    }

    /// For each shard's earlier progress, `None` when this file begins with the records it covers, else what the file
    /// holds instead.
    fn differs_from(self, earlier: &[Option<FileProgress>]) -> Vec<Option<String>> {
        let mut found: Vec<Option<String>> = vec![None; earlier.len()];
        let last = earlier.iter().flatten().map(|e| e.records).max().unwrap_or(0);
        let mut prefix = Prefix::default();
        let mut unreadable = None;
        for record in self.records {
            if prefix.records >= last {
                break;
            }
            if matches!(record.result, Err(DecodeError::Container { .. })) {
                unreadable = Some(record.index);
                break;
            }
            prefix.add(&record);
            for (shard, progress) in earlier.iter().enumerate() {
                if let Some(progress) = progress
                    && progress.records == prefix.records
                    && progress.digest != prefix.digest()
                {
                    found[shard] = Some("begins with other records".into());
                }
            }
        }
        for (shard, progress) in earlier.iter().enumerate() {
            if let Some(progress) = progress
                && progress.records > prefix.records
            {
                found[shard] = Some(match unreadable {
                    Some(index) => format!("cannot be read past record {index}"),
                    None => format!("holds {} records", prefix.records),
                });
            }
        }
        found
    }
}

impl ShardsIngestReport {
    /// The sums and each shard's part from the shards' reports.
    fn sum(&mut self, parts: &[FileIngestReport], skips: &[u64]) {
        self.shards = parts
            .iter()
            .zip(skips)
            .enumerate()
            .map(|(partition, (part, &resumed_after))| ShardIngestReport {
                partition: partition as u32,
                records: part.records,
                recorded: part.recorded,
                duplicates: part.duplicates,
                conflicts: part.conflicts,
                quarantined: part.quarantined,
                already_quarantined: part.already_quarantined,
                watermark: part.watermark,
                resumed_after,
            })
            .collect();
        self.recorded = parts.iter().map(|p| p.recorded).sum();
        self.duplicates = parts.iter().map(|p| p.duplicates).sum();
        self.conflicts = parts.iter().map(|p| p.conflicts).sum();
        self.quarantined = parts.iter().map(|p| p.quarantined).sum();
        self.already_quarantined = parts.iter().map(|p| p.already_quarantined).sum();
    }
}
