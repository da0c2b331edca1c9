//! `backup --to PATH` and `restore --from PATH`: a consistent copy of a running ledger (or of every shard of a
//! `--data` directory) with a manifest of the chain head it covers, and its return, verified before use.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

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
    super::print(&manifests[..], args.json, |out, m| usecases::backup::write_backups(out, m, &args.to))
}

pub fn restore(store: &super::Store, args: RestoreArgs) -> anyhow::Result<ExitCode> {
    super::print(&usecases::backup::restore(&args.from, store)?[..], args.json, usecases::backup::write_restored)
}
