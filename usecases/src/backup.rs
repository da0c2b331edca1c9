//! Backups (contract §4): a consistent copy of a running ledger, or of every shard of a directory, each with a
//! manifest of the chain head it covers; and their return, verified against the manifest before use. A cluster's are
//! taken by each shard's owner ([`crate::cluster::backup`]). Both in the words the commands print.

use std::io::Write;
use std::path::Path;

use ledger::Ledger;
use ledger::backup::{BackupManifest, RestoreReport};
use ledger::shards::ShardDir;

use crate::{Context, Result, Store, refuse};

/// A copy of `store` at `to`: a new file for one ledger, a directory of `shard-NNNN.db` copies for a directory of
/// shards (the whole set or nothing: a directory missing a shard is refused before any copy is made).
pub fn backup(store: &Store, to: &Path) -> Result<Vec<BackupManifest>> {
    match store {
        Store::File(path) => {
            let ledger = Ledger::open_read_only(path)?;
            Ok(vec![ledger.backup_to(to).with_context(|| format!("cannot back up {}", path.display()))?])
        }
        Store::Shards(shards) => {
            let all = shards.open_all_read_only()?;
            let into = ShardDir::new(to);
            std::fs::create_dir_all(to).with_context(|| format!("cannot create {}", to.display()))?;
            let mut manifests = Vec::with_capacity(all.len());
            for (shard, ledger) in &all {
                let manifest = ledger
                    .backup_to(&into.path_of(shard.partition))
                    .with_context(|| format!("cannot back up shard {}", shard.partition))?;
                manifests.push(manifest);
            }
            Ok(manifests)
        }
    }
}

/// The backup at `from` restored into `store` (whose ledger, or shards, must not exist), each copy checked against its
/// manifest first.
pub fn restore(from: &Path, store: &Store) -> Result<Vec<RestoreReport>> {
    match store {
        Store::File(path) => Ok(vec![restore_one(from, path)?]),
        Store::Shards(shards) => restore_shards(from, shards),
    }
}

fn restore_one(from: &Path, ledger_path: &Path) -> Result<RestoreReport> {
    ledger::backup::restore(from, ledger_path)
        .with_context(|| format!("cannot restore {} from {}", ledger_path.display(), from.display()))
}

/// Every shard of the backup directory into `shards`: all the manifests are read and every destination checked free
/// before the first shard is copied, so a missing manifest or a shard already present stops it with nothing restored.
fn restore_shards(from: &Path, shards: &ShardDir) -> Result<Vec<RestoreReport>> {
    let backups = ShardDir::new(from);
    // A complete set, each copy holding the partition its name says.
    let set = backups
        .open_all_read_only()
        .with_context(|| format!("{} is not a backup of a set of shards", from.display()))?;
    let partitions: Vec<u32> = set.iter().map(|(shard, _)| shard.partition).collect();
    drop(set);
    for &partition in &partitions {
        ledger::backup::read_manifest(&backups.path_of(partition))?;
        let target = shards.path_of(partition);
        if target.exists() {
            refuse!(
                "{} exists: restore never overwrites a shard (move the directory's shards aside first); nothing \
                 restored",
                target.display()
            );
        }
    }
    std::fs::create_dir_all(shards.dir()).with_context(|| format!("cannot create {}", shards.dir().display()))?;
    let mut reports = Vec::with_capacity(partitions.len());
    for partition in partitions {
        let report = restore_one(&backups.path_of(partition), &shards.path_of(partition)).with_context(|| {
            let done: Vec<String> = reports.iter().map(|r: &RestoreReport| r.ledger.clone()).collect();
            format!(
                "shard {partition} failed; restored before it: {}",
                if done.is_empty() { "none".into() } else { done.join(", ") }
            )
        })?;
        reports.push(report);
    }
    Ok(reports)
}

/// The copies taken, as `backup` prints them: each copy's source and head, then where they are.
pub fn write_backups(out: &mut dyn Write, manifests: &[BackupManifest], to: &Path) -> std::io::Result<()> {
    for m in manifests {
        let (source, ledger_id, events) = (&m.source, &m.ledger_id, m.events_recorded);
        writeln!(
            out,
            "backed up {source} (ledger {ledger_id}, {events} events) at head {}:{}",
            m.head_seq, m.head_hash
        )?;
    }
    let suffix = ledger::backup::MANIFEST_SUFFIX;
    writeln!(out, "into {} (manifests beside each copy: <copy>{suffix})", to.display())
}

/// The copies restored, as `restore` prints them: each with the backup it came from, then where ingest resumes.
pub fn write_restored(out: &mut dyn Write, reports: &[RestoreReport]) -> std::io::Result<()> {
    for report in reports {
        let m = &report.manifest;
        writeln!(
            out,
            "restored {} from a backup taken at {} (ledger {}, {} events, head {}:{}; {} entries verified)",
            report.ledger,
            m.taken_at,
            m.ledger_id,
            m.events_recorded,
            m.head_seq,
            m.head_hash,
            report.verify.entries_checked
        )?;
    }
    writeln!(
        out,
        "ingest resumes from the Kafka offsets the backup stored: what came after it is read again, counted once"
    )
}
