//! Reading a running cluster (`--cluster BROKERS`, contract §9.4): the routing catalog names each shard's owner, each
//! owner answers for the shards it holds (`/v1/admin/...`), and the command joins the parts as `--data` joins a
//! directory's. Every shard must be answered by the owner the catalog names, else the command fails naming the shard:
//! never a partial answer. Owners serving TLS are asked at their `https://` URLs, trusting the system's roots or
//! `--ca-file`. Also what a server answers those reads with ([`ShardReports`]).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use ledger::{Ledger, Period};
use reports::audit::{render, tenant, why};
use schemas::Timestamp;

/// How long an owner may take to answer for its shards.
const READ_TIMEOUT: Duration = Duration::from_secs(120);

/// The token a read of a cluster asks with: an admin one (`admin = true`) for every tenant (`tenants = ["*"]`).
pub(crate) fn token(token: Option<&str>) -> anyhow::Result<&str> {
    token.context("--cluster needs --token (or QUOTA_LEDGER_TOKEN), an admin token (admin = true) of every tenant")
}

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

/// A running cluster a command reads: where its routing catalog is, the token its nodes are asked with, and the roots
/// trusted for nodes serving TLS.
pub(crate) struct Cluster<'a> {
    /// Kafka bootstrap servers.
    pub(crate) brokers: &'a str,
    /// The bearer token.
    pub(crate) token: &'a str,
    /// The roots trusted.
    pub(crate) trust: trust::Trust,
}

impl Cluster<'_> {
    /// The cluster at `brokers`, asked with `token`, trusting the roots of `ca_file`.
    pub(crate) fn of<'a>(
        brokers: &'a str,
        token: Option<&'a str>,
        ca_file: &super::trust_args::CaFileArg,
    ) -> anyhow::Result<Cluster<'a>> {
        Ok(Cluster { brokers, token: self::token(token)?, trust: ca_file.trust()? })
    }
}

impl ClusterArgs {
    /// The cluster when the command reads one.
    pub(crate) fn asked(&self) -> anyhow::Result<Option<Cluster<'_>>> {
        match &self.cluster {
            Some(brokers) => Ok(Some(Cluster::of(brokers, self.token.as_deref(), &self.ca_file)?)),
            None => Ok(None),
        }
    }
}

/// What the owners of a cluster's shards answered for them.
pub(crate) struct Answered {
    /// Each shard's part, by partition: every partition of the cluster.
    pub(crate) shards: BTreeMap<u32, serde_json::Value>,
    /// How many nodes answered.
    pub(crate) nodes: usize,
    /// The URL of each shard's owner, by partition.
    pub(crate) owners: BTreeMap<u32, String>,
}

impl Answered {
    /// Each shard's part read as `T`, in partition order; a part this version cannot read fails naming its shard.
    pub(crate) fn parts<T: serde::de::DeserializeOwned>(&self, what: &str) -> anyhow::Result<Vec<T>> {
        self.shards
            .iter()
            .map(|(partition, part)| {
                T::deserialize(part)
                    .with_context(|| format!("shard {partition}: its owner answered {what} this version cannot read"))
            })
            .collect()
    }
}

/// What a command asks each owner.
pub(crate) enum Ask<'a> {
    /// A read: `GET path?query`.
    Get(&'a [(&'a str, &'a str)]),
    /// A run that writes where the shards are (`reconcile`): `POST path` with this body, waiting at most this long.
    Post(&'a serde_json::Value, Duration),
}

/// Each shard's part of `GET path?query`, asked of its owner in the routing catalog of `cluster`: the owner's answer
/// holds `shards`, one part per shard it holds, each with its `partition`.
pub(crate) fn ask_owners(cluster: &Cluster<'_>, path: &str, query: &[(&str, &str)]) -> anyhow::Result<Answered> {
    ask_owners_to(cluster, path, Ask::Get(query))
}

/// [`ask_owners`] with a GET or a POST.
pub(crate) fn ask_owners_to(cluster: &Cluster<'_>, path: &str, ask: Ask<'_>) -> anyhow::Result<Answered> {
    let Cluster { brokers, token, trust } = cluster;
    let owners: BTreeMap<u32, String> = owners(brokers)?.into_iter().collect();
    let mut by_url: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for (partition, url) in &owners {
        by_url.entry(url.clone()).or_default().push(*partition);
    }
    let mut shards = BTreeMap::new();
    for (url, owned) in &by_url {
        let about = |what: String| format!("shards {owned:?}: their owner {url} {what}");
        let asked = format!("{url}{path}");
        let answered = match ask {
            Ask::Get(query) => client::get_json(&asked, query, token, trust, READ_TIMEOUT),
            Ask::Post(body, timeout) => client::post_json(&asked, body, token, trust, timeout),
        };
        let client::Answer { status, body, .. } =
            answered.map_err(|e| anyhow::anyhow!(about(failed(&e, "did not answer"))))?;
        if status != 200 {
            anyhow::bail!(about(format!("answered {status}: {}", body["message"].as_str().unwrap_or_default())));
        }
        let parts = body["shards"].as_array().cloned().unwrap_or_default();
        for partition in owned {
            let part = parts.iter().find(|s| s["partition"] == serde_json::json!(partition)).with_context(|| {
                about(format!("does not hold shard {partition} now (it moved since the catalog was read): run again"))
            })?;
            shards.insert(*partition, part.clone());
        }
    }
    Ok(Answered { shards, nodes: by_url.len(), owners })
}

/// How an owner's failure is said: `did_not` do what it was asked, or, when TLS failed (a certificate not trusted),
/// that, since the owner may well be up.
fn failed(error: &client::ClientError, did_not: &str) -> String {
    match error {
        client::ClientError::Tls { reason, .. } => format!("could not be reached over TLS: {reason}"),
        _ => format!("{did_not}: {error}"),
    }
}

/// The owner's URL of every partition of the cluster at `brokers`, from its routing catalog read to its end; a
/// partition without an owner fails, naming it.
pub(crate) fn owners(brokers: &str) -> anyhow::Result<Vec<(u32, String)>> {
    let topics = kafka::topics::Topics::defaults();
    let (partitions, table) = kafka::routing::owners(brokers, &[], topics.names())
        .with_context(|| format!("cannot read the routing catalog at {brokers}"))?;
    (0..partitions)
        .map(|partition| {
            let owner = table.owner(partition).with_context(|| {
                format!("shard {partition} of {partitions} has no owner in the routing catalog: is every node up?")
            })?;
            Ok((partition, owner.url.trim_end_matches('/').to_string()))
        })
        .collect()
}

/// `backup --cluster --to DIR`: a copy of each shard of `cluster`, taken by its owner (`GET
/// /v1/admin/backup`) and written into `to` as `backup --data` writes a directory's, its manifest beside it; each copy
/// is checked as `restore` checks it (size, digest, chain) before it is kept. An owner that does not answer, or a copy
/// that does not hold, fails the command naming the shard; the copies taken before it stay.
pub(crate) fn backup(
    cluster: &Cluster<'_>,
    to: &std::path::Path,
) -> anyhow::Result<Vec<ledger::backup::BackupManifest>> {
    let Cluster { brokers, token, trust } = cluster;
    let owners = owners(brokers)?;
    std::fs::create_dir_all(to).with_context(|| format!("cannot create {}", to.display()))?;
    let into = ledger::shards::ShardDir::new(to);
    let mut manifests = Vec::with_capacity(owners.len());
    for (partition, url) in owners {
        let path = into.path_of(partition);
        let about = |what: String| format!("shard {partition}: its owner {url} {what}");
        anyhow::ensure!(!path.exists(), "{} exists: a backup never overwrites a file", path.display());
        let mut partial = path.clone().into_os_string();
        partial.push(".partial");
        let partial = std::path::PathBuf::from(partial);
        let mut file =
            std::fs::File::create(&partial).with_context(|| format!("cannot create {}", partial.display()))?;
        let asked = format!("{url}/v1/admin/backup");
        let p = partition.to_string();
        let got = client::download(
            &asked,
            &[("partition", &p)],
            token,
            trust,
            serve::BACKUP_MANIFEST_HEADER,
            READ_TIMEOUT,
            &mut file,
        )
        .map_err(|e| anyhow::anyhow!(about(failed(&e, "did not send its copy"))));
        let got = match got {
            Ok(got) if got.status == 200 => got,
            Ok(got) => {
                let _ = std::fs::remove_file(&partial);
                anyhow::bail!(about(format!(
                    "answered {}: {}",
                    got.status,
                    got.refusal["message"].as_str().unwrap_or_default()
                )));
            }
            Err(e) => {
                let _ = std::fs::remove_file(&partial);
                return Err(e);
            }
        };
        file.sync_all().with_context(|| format!("cannot write {}", partial.display()))?;
        drop(file);
        let manifest = got.header.with_context(|| about("sent its copy without a manifest".to_string()))?;
        std::fs::write(ledger::backup::manifest_path(&path), manifest)
            .with_context(|| format!("cannot write the manifest of {}", path.display()))?;
        std::fs::rename(&partial, &path).with_context(|| format!("cannot write {}", path.display()))?;
        match ledger::backup::check_backup(&path) {
            Ok((manifest, _)) => manifests.push(manifest),
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                let _ = std::fs::remove_file(ledger::backup::manifest_path(&path));
                anyhow::bail!(about(format!(
                    "sent a copy that does not hold ({} bytes received): {}",
                    got.bytes,
                    ledger::causes(&e)
                )));
            }
        }
    }
    Ok(manifests)
}

/// What `serve` and `node` answer `/v1/admin/billing` and `/v1/admin/audit/...` with, per shard: the parts
/// [`ask_owners`] collects.
#[derive(Debug, Default)]
pub(crate) struct ShardReports {
    /// Where a reconcile on a shard publishes its adjustments (the server's brokers), with their settings.
    pub(crate) brokers: Option<(String, Vec<(String, String)>)>,
}

impl serve::Reports for ShardReports {
    fn reconcile(
        &self,
        path: &std::path::Path,
        as_of: Timestamp,
        dry_run: bool,
        open_alert_after_s: u64,
    ) -> Result<serde_json::Value, String> {
        let brokers = self.brokers.as_ref().map(|(b, settings)| (b.as_str(), settings.as_slice()));
        super::reconcile::of_shard(path, (as_of, open_alert_after_s), dry_run, brokers).map_err(|e| format!("{e:#}"))
    }

    fn bill(&self, ledger: &Ledger, partition: Option<u32>, period: Period) -> Result<serde_json::Value, String> {
        let part = reports::export::ShardBilling::of(ledger, partition, period).map_err(|e| ledger::causes(&e))?;
        serde_json::to_value(part).map_err(|e| e.to_string())
    }

    fn why(&self, ledger: &Ledger, request_id: &str) -> Result<serde_json::Value, String> {
        Ok(match why::why(ledger, request_id).map_err(|e| ledger::causes(&e))? {
            Ok(answer) => serde_json::json!({"words": render::why(&answer), "why": answer}),
            Err(unknown) => serde_json::json!({"nearest": unknown.nearest}),
        })
    }

    fn timeline(
        &self,
        ledger: &Ledger,
        tenant: &str,
        from: Timestamp,
        to: Timestamp,
    ) -> Result<serde_json::Value, String> {
        Ok(match tenant::timeline(ledger, tenant, from, to).map_err(|e| ledger::causes(&e))? {
            Ok(timeline) => serde_json::json!({"words": render::timeline(&timeline), "timeline": timeline}),
            Err(unknown) => serde_json::json!({"timeline": unknown.timeline, "nearest": unknown.nearest}),
        })
    }
}

/// The nearest names of every shard's `nearest`, ranked again over the whole cluster.
pub(crate) fn nearest_of(wanted: &str, shards: &BTreeMap<u32, serde_json::Value>) -> Vec<String> {
    let offered: Vec<String> = shards
        .values()
        .flat_map(|part| part["nearest"].as_array().cloned().unwrap_or_default())
        .filter_map(|name| name.as_str().map(str::to_string))
        .collect();
    reports::audit::nearest_among(wanted, &offered)
}
