//! `backup --to PATH` and `restore --from PATH`: a consistent copy of a running ledger (or of every shard of a
//! `--data` directory) with a manifest of the chain head it covers, and its return, verified before use.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use ledger::Ledger;
use ledger::backup::{BackupManifest, RestoreReport};
use ledger::shards::ShardDir;

#[derive(Debug, Args)]
pub struct BackupArgs {
    /// The backup to write: a new file (with --ledger), or a directory that will hold a `shard-NNNN.db` copy of each
    /// shard (with --data). Each copy's manifest is written beside it as `<copy>.manifest.json`.
    #[arg(long, value_name = "PATH")]
    to: PathBuf,
    /// Print the manifests as JSON.
    #[arg(long)]
    json: bool,
    // With --cluster, each shard's owner takes its copy and sends it (`GET /v1/admin/backup`), and `--to` is a
    // directory as with --data, which `restore --data`, `sql --data` and every read of a directory of shards take.
    #[command(flatten)]
    cluster: super::cluster::ClusterArgs,
}

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The backup to restore: a file `backup` wrote (into --ledger, which must not exist), or a directory of shard
    /// copies (into --data, none of whose shards may exist).
    #[arg(long, value_name = "PATH")]
    from: PathBuf,
    /// Print what was checked and restored as JSON.
    #[arg(long)]
    json: bool,
}

pub fn backup(store: &super::Store, args: BackupArgs) -> anyhow::Result<ExitCode> {
    let manifests = match store {
        _ if args.cluster.cluster.is_some() => {
            let cluster = args.cluster.asked()?.expect("--cluster is given");
            super::cluster::backup(&cluster, &args.to)?
        }
        super::Store::File(path) => {
            let ledger = Ledger::open_read_only(path)?;
            vec![ledger.backup_to(&args.to).with_context(|| format!("cannot back up {}", path.display()))?]
        }
        super::Store::Shards(shards) => {
            // The whole set or nothing: a directory missing a shard is refused before any copy is made.
            let all = shards.open_all_read_only()?;
            let into = ShardDir::new(&args.to);
            std::fs::create_dir_all(&args.to).with_context(|| format!("cannot create {}", args.to.display()))?;
            let mut manifests = Vec::with_capacity(all.len());
            for (shard, ledger) in &all {
                let manifest = ledger
                    .backup_to(&into.path_of(shard.partition))
                    .with_context(|| format!("cannot back up shard {}", shard.partition))?;
                manifests.push(manifest);
            }
            manifests
        }
    };
    if args.json {
        super::print_json(&manifests)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = super::stdout();
    for manifest in &manifests {
        writeln!(
            out,
            "backed up {} (ledger {}, {} events) at head {}:{}",
            manifest.source, manifest.ledger_id, manifest.events_recorded, manifest.head_seq, manifest.head_hash
        )?;
    }
    writeln!(
        out,
        "into {} (manifests beside each copy: <copy>{})",
        args.to.display(),
        ledger::backup::MANIFEST_SUFFIX
    )?;
    Ok(ExitCode::SUCCESS)
}

pub fn restore(store: &super::Store, args: RestoreArgs) -> anyhow::Result<ExitCode> {
    let reports = match store {
        super::Store::File(path) => vec![restore_one(&args.from, path)?],
        super::Store::Shards(shards) => restore_shards(&args.from, shards)?,
    };
    if args.json {
        super::print_json(&reports)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = super::stdout();
    for report in &reports {
        let m: &BackupManifest = &report.manifest;
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
    )?;
    Ok(ExitCode::SUCCESS)
}

fn restore_one(from: &Path, ledger_path: &Path) -> anyhow::Result<RestoreReport> {
    ledger::backup::restore(from, ledger_path)
        .with_context(|| format!("cannot restore {} from {}", ledger_path.display(), from.display()))
}

/// Every shard of the backup directory into `shards`: all the manifests are read and every destination checked free
/// before the first shard is copied, so a missing manifest or a shard already present stops it with nothing restored.
fn restore_shards(from: &Path, shards: &ShardDir) -> anyhow::Result<Vec<RestoreReport>> {
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
        anyhow::ensure!(
            !target.exists(),
            "{} exists: restore never overwrites a shard (move the directory's shards aside first); nothing restored",
            target.display()
        );
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
