//! Shards (contract §9.4): a ledger per Kafka partition. Shard p holds partition p of every input topic and what the
//! hook and reconcile recorded for that partition's tenants; its file says so in `shard_identity`, written once when
//! it is created. A `--data` directory holds shards as `shard-NNNN.db` (the partition, four digits or more), one
//! machine's share of them or a whole restored set; a ledger opened with `--ledger FILE` holds every partition and
//! has no shard identity.
//!
//! ```
//! use ledger::shards::{Shard, ShardDir};
//! let dir = tempfile::tempdir().unwrap();
//! let shards = ShardDir::new(dir.path());
//! for partition in 0..2 {
//!     shards.open(Shard { partition, partitions: 2 }).unwrap();
//! }
//! let all = shards.open_all_read_only().unwrap();
//! assert_eq!(all.iter().map(|(shard, _)| shard.partition).collect::<Vec<_>>(), [0, 1]);
//! ```

use std::path::{Path, PathBuf};

use rusqlite::{OptionalExtension, params};

use crate::{Ledger, OpenError, ReadError};

/// The partition a shard holds, of how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Shard {
    /// The partition of every input topic it holds.
    pub partition: u32,
    /// The input topics' common partition count P.
    pub partitions: u32,
}

impl Shard {
    /// Whether `tenant` belongs to this shard: its partition ([`schemas::partition::partition_of`]) is this one. The
    /// plan defaults (tenant `*`) belong to every shard.
    pub fn holds_tenant(&self, tenant: &str) -> bool {
        tenant.starts_with('*') || schemas::partition::partition_of(tenant, self.partitions) == self.partition
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "shard {} of {}", self.partition, self.partitions)
    }
}

/// A shard could not be opened, claimed or listed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShardError {
    /// The ledger file could not be opened.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// Reading the ledger failed.
    #[error("cannot read the shard identity of {path}")]
    Read {
        /// The ledger file.
        path: PathBuf,
        /// The failure.
        source: ReadError,
    },
    /// The file is a shard of another partition (or of another partition count) than asked.
    #[error("{path} holds {holds}, not {asked}")]
    Mismatch {
        /// The ledger file.
        path: PathBuf,
        /// What it holds.
        holds: Shard,
        /// What was asked.
        asked: Shard,
    },
    /// A ledger that already holds events of every partition cannot become a shard.
    #[error(
        "{path} is a ledger of every partition (it has events or offsets and no shard identity): it cannot become \
         {asked}; give shards a directory of their own"
    )]
    WholeLedger {
        /// The ledger file.
        path: PathBuf,
        /// What was asked.
        asked: Shard,
    },
    /// The directory could not be created or listed.
    #[error("cannot read or create the shard directory {dir}")]
    Directory {
        /// The directory.
        dir: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// The directory holds no shard.
    #[error("{dir} holds no shard (shard-NNNN.db files, made by ingest --data or node)")]
    Empty {
        /// The directory.
        dir: PathBuf,
    },
    /// The shards of the directory disagree on the partition count.
    #[error("{dir} mixes partition counts: {first} and {second}")]
    MixedCounts {
        /// The directory.
        dir: PathBuf,
        /// One shard.
        first: Shard,
        /// A shard counting other partitions.
        second: Shard,
    },
    /// A file's name says another partition than its identity.
    #[error("{path} is named for partition {named} but holds {holds}")]
    Misnamed {
        /// The file.
        path: PathBuf,
        /// The partition its name says.
        named: u32,
        /// What it holds.
        holds: Shard,
    },
    /// A partition count was asked that the shards of the directory do not have.
    #[error(
        "{dir} holds shards of {holds} partitions, not {asked}: a directory keeps the partition count it was made with"
    )]
    CountDiffers {
        /// The directory.
        dir: PathBuf,
        /// The count its shards have.
        holds: u32,
        /// The count asked.
        asked: u32,
    },
    /// A new directory of shards needs a partition count.
    #[error("{dir} holds no shard yet: say how many partitions the set has (--partitions P, the input topics' count)")]
    CountUnknown {
        /// The directory.
        dir: PathBuf,
    },
    /// Partitions without a shard in the directory: an answer from it would be partial.
    #[error(
        "{dir} lacks the shards of partitions {missing:?} of {partitions}: an answer without them would be partial"
    )]
    Missing {
        /// The directory.
        dir: PathBuf,
        /// The partitions without a shard.
        missing: Vec<u32>,
        /// The partition count.
        partitions: u32,
    },
}

impl Ledger {
    /// The partition this ledger holds, or `None` for a ledger of every partition.
    pub fn shard(&self) -> Result<Option<Shard>, ReadError> {
        let row = self
            .conn
            .prepare_cached("SELECT partition, partitions FROM shard_identity WHERE id = 1")?
            .query_row([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))
            .optional()?;
        row.map(|(partition, partitions)| match (u32::try_from(partition), u32::try_from(partitions)) {
            (Ok(partition), Ok(partitions)) => Ok(Shard { partition, partitions }),
            _ => Err(ReadError::Corrupt { seq: 0, message: format!("shard {partition} of {partitions}") }),
        })
        .transpose()
    }

    /// The entries up to `watermark` whose tenant is `*` (plan defaults): every shard of a set records each of them, so
    /// the set's entries counted once are the shards' watermarks less these entries of every shard but one.
    pub fn plan_default_entries_through(&self, watermark: u64) -> Result<u64, ReadError> {
        let count: i64 = self
            .conn
            .prepare_cached("SELECT COUNT(*) FROM entries WHERE tenant = '*' AND seq <= ?")?
            .query_row([crate::read::watermark_param(watermark)], |r| r.get(0))?;
        Ok(count as u64)
    }

    /// Makes a new (or still empty) ledger the shard `shard`; a shard already of `shard` is left as it is. Refuses a
    /// shard of another partition and a ledger of every partition that holds events or offsets.
    pub fn claim_shard(&mut self, shard: Shard) -> Result<(), ShardError> {
        let read = |source: ReadError| ShardError::Read { path: self.path.clone(), source };
        if let Some(holds) = self.shard().map_err(read)? {
            return if holds == shard {
                Ok(())
            } else {
                Err(ShardError::Mismatch { path: self.path.clone(), holds, asked: shard })
            };
        }
        let tx = self.conn.transaction().map_err(|e| ShardError::Read { path: self.path.clone(), source: e.into() })?;
        let holds_something: bool = tx
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM entries) OR EXISTS (SELECT 1 FROM offsets)
                     OR EXISTS (SELECT 1 FROM quarantine)",
                [],
                |r| r.get(0),
            )
            .map_err(|e| ShardError::Read { path: self.path.clone(), source: e.into() })?;
        if holds_something {
            return Err(ShardError::WholeLedger { path: self.path.clone(), asked: shard });
        }
        tx.execute(
            "INSERT INTO shard_identity (id, partition, partitions, created_at) VALUES (1, ?, ?, ?)",
            params![shard.partition, shard.partitions, crate::now_micros()],
        )
        .and_then(|_| tx.commit())
        .map_err(|e| ShardError::Read { path: self.path.clone(), source: e.into() })
    }
}

/// An entry recorded in a shard its tenant does not belong to (contract §9.4: a tenant's events live in one shard).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MisplacedEntry {
    /// The entry's sequence number in the shard.
    pub seq: u64,
    /// Its event id.
    pub event_id: String,
    /// Its tenant.
    pub tenant: String,
    /// The partition the tenant belongs to.
    pub belongs_to: u32,
}

/// `verify` of one shard: its chain ([`Ledger::verify_against`]) and that its entries are its partition's.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ShardVerifyReport {
    /// The partition.
    pub partition: u32,
    /// The partition count.
    pub partitions: u32,
    /// The shard file.
    pub path: String,
    /// The chain's report.
    #[serde(flatten)]
    pub chain: crate::VerifyReport,
    /// The first entry (smallest seq) whose tenant belongs to another partition; `None` when all are its own.
    pub first_misplaced: Option<MisplacedEntry>,
}

impl ShardVerifyReport {
    /// Whether the shard holds: its chain and the partition of every entry.
    pub fn holds(&self) -> bool {
        self.chain.first_bad.is_none() && self.first_misplaced.is_none()
    }
}

/// `status` of one shard.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ShardStatus {
    /// The partition.
    pub partition: u32,
    /// The partition count.
    pub partitions: u32,
    /// The shard's status.
    #[serde(flatten)]
    pub status: crate::Status,
}

/// Whether the shards of a set hold the same plan defaults (contract §9.4: each must hold every one, or its tenants are
/// billed and enforced without it), judged by the count and digest each shard's status gives
/// ([`crate::Status::plan_defaults_digest`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PlanDefaultsAgreement {
    /// The most plan defaults a shard records.
    pub most: u64,
    /// The shards holding `most` with one digest (the most of them, on a tie the first): what the others are
    /// compared with.
    pub fullest: Vec<u32>,
    /// The shards whose plan defaults are not those of `fullest`: fewer, others, or another payload of one. Empty
    /// when every shard holds the same.
    pub lacking: Vec<u32>,
}

impl PlanDefaultsAgreement {
    /// The agreement of `statuses`, one per shard. A status without a digest (an owner of an older version, which
    /// does not count them) is left out of the comparison.
    pub fn of(statuses: &[ShardStatus]) -> PlanDefaultsAgreement {
        let known: Vec<&ShardStatus> = statuses.iter().filter(|s| !s.status.plan_defaults_digest.is_empty()).collect();
        let most = known.iter().map(|s| s.status.plan_defaults).max().unwrap_or(0);
        let mut by_digest: Vec<(&str, Vec<u32>)> = Vec::new();
        for shard in known.iter().filter(|s| s.status.plan_defaults == most) {
            let digest = shard.status.plan_defaults_digest.as_str();
            match by_digest.iter_mut().find(|(d, _)| *d == digest) {
                Some((_, shards)) => shards.push(shard.partition),
                None => by_digest.push((digest, vec![shard.partition])),
            }
        }
        // The most shards; on a tie the first found, since `max_by_key` would take the last.
        let chosen = by_digest.iter().rev().max_by_key(|(_, shards)| shards.len());
        let Some((digest, fullest)) = chosen else {
            return PlanDefaultsAgreement { most, fullest: Vec::new(), lacking: Vec::new() };
        };
        let lacking = known.iter().filter(|s| s.status.plan_defaults_digest != *digest).map(|s| s.partition).collect();
        PlanDefaultsAgreement { most, fullest: fullest.clone(), lacking }
    }
}

impl Ledger {
    /// The entry of smallest seq whose tenant is not of `shard` ([`Shard::holds_tenant`]): read per tenant, from the
    /// tenant index.
    pub fn first_misplaced_entry(&self, shard: Shard) -> Result<Option<MisplacedEntry>, ReadError> {
        let mut statement = self.conn.prepare_cached("SELECT tenant, MIN(seq) FROM entries GROUP BY tenant")?;
        let mut rows = statement.query([])?;
        let mut first: Option<(i64, String)> = None;
        while let Some(row) = rows.next()? {
            let (tenant, seq): (String, i64) = (row.get(0)?, row.get(1)?);
            if !shard.holds_tenant(&tenant) && first.as_ref().is_none_or(|(s, _)| seq < *s) {
                first = Some((seq, tenant));
            }
        }
        let Some((seq, tenant)) = first else { return Ok(None) };
        let event_id: String =
            self.conn.prepare_cached("SELECT event_id FROM entries WHERE seq = ?")?.query_row([seq], |r| r.get(0))?;
        let belongs_to = schemas::partition::partition_of(&tenant, shard.partitions);
        Ok(Some(MisplacedEntry { seq: seq as u64, event_id, tenant, belongs_to }))
    }

    /// `verify` of this ledger as the shard `shard`: its chain, then the partition of its entries.
    pub fn verify_shard(&self, shard: Shard) -> Result<ShardVerifyReport, ReadError> {
        Ok(ShardVerifyReport {
            partition: shard.partition,
            partitions: shard.partitions,
            path: self.path.display().to_string(),
            chain: self.verify_against(&[])?,
            first_misplaced: self.first_misplaced_entry(shard)?,
        })
    }

    /// `status` of this ledger as the shard `shard`.
    pub fn shard_status(&self, shard: Shard) -> Result<ShardStatus, ReadError> {
        Ok(ShardStatus { partition: shard.partition, partitions: shard.partitions, status: self.status()? })
    }
}

/// A directory of shards.
#[derive(Debug, Clone)]
pub struct ShardDir {
    dir: PathBuf,
}

impl ShardDir {
    /// The shards in `dir` (nothing is read or created yet).
    pub fn new(dir: impl Into<PathBuf>) -> ShardDir {
        ShardDir { dir: dir.into() }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of `partition`'s shard: `shard-0003.db`.
    pub fn path_of(&self, partition: u32) -> PathBuf {
        self.dir.join(format!("shard-{partition:04}.db"))
    }

    /// Opens the shard `shard` for writing, creating the directory and the file as needed; refuses a file holding
    /// another partition.
    pub fn open(&self, shard: Shard) -> Result<Ledger, ShardError> {
        std::fs::create_dir_all(&self.dir).map_err(|source| ShardError::Directory { dir: self.dir.clone(), source })?;
        let mut ledger = Ledger::open(self.path_of(shard.partition))?;
        ledger.claim_shard(shard)?;
        Ok(ledger)
    }

    /// Opens every shard of the directory for writing, in partition order, after the checks of
    /// [`ShardDir::open_all_read_only`]: a command that writes to every shard (a close) or needs write transactions to
    /// read (a preview of an open month) never works on a partial set, and creates no shard.
    pub fn open_all(&self) -> Result<Vec<(Shard, Ledger)>, ShardError> {
        let shards: Vec<Shard> = self.open_all_read_only()?.into_iter().map(|(shard, _)| shard).collect();
        shards.into_iter().map(|shard| Ok((shard, self.open(shard)?))).collect()
    }

    /// Opens every shard of the set for writing, in partition order (index p is partition p), creating those missing.
    /// The partition count is the one the shards present have; `partitions`, when given, must agree with it, and is
    /// needed for a directory that holds no shard yet.
    pub fn open_set(&self, partitions: Option<u32>) -> Result<Vec<Ledger>, ShardError> {
        let files = match self.files() {
            Err(ShardError::Directory { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            other => other?,
        };
        let mut holds = None;
        for (named, path) in &files {
            let ledger = Ledger::open_read_only(path)?;
            let shard =
                ledger.shard().map_err(|source| ShardError::Read { path: path.clone(), source })?.ok_or_else(|| {
                    ShardError::WholeLedger {
                        path: path.clone(),
                        asked: Shard { partition: *named, partitions: partitions.unwrap_or(0) },
                    }
                })?;
            if shard.partition != *named {
                return Err(ShardError::Misnamed { path: path.clone(), named: *named, holds: shard });
            }
            match holds {
                Some(first) if first != shard.partitions => {
                    let first = Shard { partition: files[0].0, partitions: first };
                    return Err(ShardError::MixedCounts { dir: self.dir.clone(), first, second: shard });
                }
                _ => holds = Some(shard.partitions),
            }
        }
        let partitions = match (holds, partitions) {
            (Some(holds), Some(asked)) if holds != asked => {
                return Err(ShardError::CountDiffers { dir: self.dir.clone(), holds, asked });
            }
            (Some(count), _) | (None, Some(count)) => count,
            (None, None) => return Err(ShardError::CountUnknown { dir: self.dir.clone() }),
        };
        (0..partitions).map(|partition| self.open(Shard { partition, partitions })).collect()
    }

    /// The shard files present, by the partition their name says, in partition order.
    pub fn files(&self) -> Result<Vec<(u32, PathBuf)>, ShardError> {
        let directory = |source| ShardError::Directory { dir: self.dir.clone(), source };
        let mut files = Vec::new();
        for entry in std::fs::read_dir(&self.dir).map_err(directory)? {
            let entry = entry.map_err(directory)?;
            let name = entry.file_name();
            let Some(partition) = name.to_str().and_then(partition_named) else { continue };
            files.push((partition, entry.path()));
        }
        files.sort();
        Ok(files)
    }

    /// Opens every shard of the directory read-only, in partition order, after checking that they are one complete
    /// set: each file holds the partition its name says, all count the same partitions, and none is missing.
    pub fn open_all_read_only(&self) -> Result<Vec<(Shard, Ledger)>, ShardError> {
        let files = self.files()?;
        if files.is_empty() {
            return Err(ShardError::Empty { dir: self.dir.clone() });
        }
        let mut shards: Vec<(Shard, Ledger)> = Vec::with_capacity(files.len());
        for (named, path) in files {
            let ledger = Ledger::open_read_only(&path)?;
            let read = |source| ShardError::Read { path: path.clone(), source };
            let holds = ledger.shard().map_err(read)?.ok_or_else(|| ShardError::WholeLedger {
                path: path.clone(),
                asked: Shard { partition: named, partitions: 0 },
            })?;
            if holds.partition != named {
                return Err(ShardError::Misnamed { path, named, holds });
            }
            if let Some((first, _)) = shards.first()
                && first.partitions != holds.partitions
            {
                return Err(ShardError::MixedCounts { dir: self.dir.clone(), first: *first, second: holds });
            }
            shards.push((holds, ledger));
        }
        let partitions = shards[0].0.partitions;
        let missing: Vec<u32> =
            (0..partitions).filter(|p| !shards.iter().any(|(shard, _)| shard.partition == *p)).collect();
        if !missing.is_empty() {
            return Err(ShardError::Missing { dir: self.dir.clone(), missing, partitions });
        }
        Ok(shards)
    }
}

/// The partition a shard file's name says: `shard-0003.db` is 3.
fn partition_named(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("shard-")?.strip_suffix(".db")?;
    if digits.len() < 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_keeps_its_partition() {
        let dir = tempfile::tempdir().unwrap();
        let shards = ShardDir::new(dir.path());
        let two_of_four = Shard { partition: 2, partitions: 4 };
        drop(shards.open(two_of_four).unwrap());
        let mut reopened = shards.open(two_of_four).unwrap();
        assert_eq!(reopened.shard().unwrap(), Some(two_of_four));
        let other = Shard { partition: 2, partitions: 6 };
        assert!(matches!(reopened.claim_shard(other), Err(ShardError::Mismatch { .. })));
    }

    #[test]
    fn a_partial_set_is_refused_naming_what_lacks() {
        let dir = tempfile::tempdir().unwrap();
        let shards = ShardDir::new(dir.path());
        for partition in [0, 2] {
            drop(shards.open(Shard { partition, partitions: 4 }).unwrap());
        }
        match shards.open_all_read_only() {
            Err(ShardError::Missing { missing, partitions: 4, .. }) => assert_eq!(missing, [1, 3]),
            other => panic!("expected the missing shards named, got {:?}", other.map(|s| s.len())),
        }
    }

    #[test]
    fn a_renamed_shard_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let shards = ShardDir::new(dir.path());
        drop(shards.open(Shard { partition: 1, partitions: 2 }).unwrap());
        std::fs::rename(shards.path_of(1), shards.path_of(0)).unwrap();
        assert!(matches!(shards.open_all_read_only(), Err(ShardError::Misnamed { named: 0, .. })));
    }

    #[test]
    fn a_set_keeps_its_count() {
        let dir = tempfile::tempdir().unwrap();
        let shards = ShardDir::new(dir.path().join("new"));
        assert!(matches!(shards.open_set(None), Err(ShardError::CountUnknown { .. })));
        assert_eq!(shards.open_set(Some(3)).unwrap().len(), 3);
        assert_eq!(shards.open_set(None).unwrap().len(), 3);
        assert!(matches!(shards.open_set(Some(4)), Err(ShardError::CountDiffers { holds: 3, asked: 4, .. })));
        std::fs::remove_file(shards.path_of(1)).unwrap();
        let reopened = shards.open_set(None).unwrap();
        assert_eq!(reopened[1].shard().unwrap(), Some(Shard { partition: 1, partitions: 3 }));
    }

    /// A shard's status holding `plan_defaults` plan defaults with `digest`.
    fn with_plan_defaults(partition: u32, plan_defaults: u64, digest: &str) -> ShardStatus {
        let dir = tempfile::tempdir().unwrap();
        let mut status = Ledger::open(dir.path().join("l.db")).unwrap().status().unwrap();
        status.plan_defaults = plan_defaults;
        status.plan_defaults_digest = digest.to_string();
        ShardStatus { partition, partitions: 4, status }
    }

    #[test]
    fn shards_lacking_plan_defaults_are_named() {
        let agree = [with_plan_defaults(0, 2, "a"), with_plan_defaults(1, 2, "a")];
        assert_eq!(
            PlanDefaultsAgreement::of(&agree),
            PlanDefaultsAgreement { most: 2, fullest: vec![0, 1], lacking: vec![] }
        );
        let one_short = [
            with_plan_defaults(0, 1, "b"),
            with_plan_defaults(1, 2, "a"),
            with_plan_defaults(2, 2, "a"),
            with_plan_defaults(3, 0, "c"),
        ];
        assert_eq!(
            PlanDefaultsAgreement::of(&one_short),
            PlanDefaultsAgreement { most: 2, fullest: vec![1, 2], lacking: vec![0, 3] }
        );
        // As many, not the same: every shard of the other digest is named.
        let other_payload =
            [with_plan_defaults(0, 2, "a"), with_plan_defaults(1, 2, "d"), with_plan_defaults(2, 2, "d")];
        assert_eq!(PlanDefaultsAgreement::of(&other_payload).lacking, [0]);
        // An owner too old to say is not counted as lacking.
        let old_owner = [with_plan_defaults(0, 2, "a"), with_plan_defaults(1, 0, "")];
        assert!(PlanDefaultsAgreement::of(&old_owner).lacking.is_empty());
    }

    #[test]
    fn names() {
        assert_eq!(partition_named("shard-0003.db"), Some(3));
        assert_eq!(partition_named("shard-12345.db"), Some(12_345));
        assert_eq!(partition_named("shard-3.db"), None);
        assert_eq!(partition_named("shard-0003.db-wal"), None);
    }
}
