//! `backup --to PATH` and `restore --from PATH`: a consistent copy of a running ledger (or of every shard of a
//! `--data` directory) with a manifest of the chain head it covers, and its return, verified before use.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use ledger::backup::BackupManifest;

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
    let manifests = match args.cluster.asked()? {
        Some(cluster) => usecases::cluster::backup(&cluster, &args.to)?,
        None => usecases::backup::backup(store, &args.to)?,
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
    let reports = usecases::backup::restore(&args.from, store)?;
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
