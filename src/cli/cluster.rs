//! `--cluster BROKERS [--token T] [--ca-file FILE]` of a command that reads or runs every shard of a running cluster
//! (`usecases::cluster`): each shard's owner, found in the routing catalog, answers for its shards.

use anyhow::Context;
use clap::Args;
use usecases::cluster::Cluster;

/// `--cluster BROKERS [--token T] [--ca-file FILE]` of a command that reads every shard.
#[derive(Debug, Args)]
pub struct ClusterArgs {
    /// Read the running cluster at these brokers instead of local ledgers: each shard's owner, found in the routing
    /// catalog, answers for its shards over HTTP(S) (`/v1/admin/...`), joined as `--data` joins a directory's. An
    /// owner that does not answer fails the command naming its shards.
    #[arg(long, value_name = "BROKERS")]
    pub cluster: Option<String>,
    /// With --cluster: the token to ask the nodes with, one for every tenant (`tenants = ["*"]`).
    #[arg(long, env = "QUOTA_LEDGER_TOKEN", hide_env_values = true, requires = "cluster")]
    pub token: Option<String>,
    #[command(flatten)]
    pub ca_file: super::trust_args::CaFileArg,
}

impl ClusterArgs {
    /// The cluster when the command reads one.
    pub fn asked(&self) -> anyhow::Result<Option<Cluster>> {
        match &self.cluster {
            Some(brokers) => Ok(Some(of(brokers, self.token.as_deref(), &self.ca_file)?)),
            None => Ok(None),
        }
    }
}

/// The cluster at `brokers`, asked with `token` (an admin token, `admin = true`, of every tenant), trusting the roots
/// of `ca_file`.
pub fn of(brokers: &str, token: Option<&str>, ca_file: &super::trust_args::CaFileArg) -> anyhow::Result<Cluster> {
    let token = token
        .context("--cluster needs --token (or QUOTA_LEDGER_TOKEN), an admin token (admin = true) of every tenant")?;
    Ok(Cluster { brokers: brokers.to_string(), token: token.to_string(), trust: ca_file.trust()? })
}
