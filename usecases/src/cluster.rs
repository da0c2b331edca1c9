//! A running cluster read and run (contract §9.4): the routing catalog names each shard's owner, each owner answers for
//! the shards it holds (`/v1/admin/...`, [`crate::shard`]), and the parts are joined as a directory's are. Every shard
//! must be answered by the owner the catalog names, else the use case fails naming the shard: never a partial answer.
//! Owners serving TLS are asked at their `https://` URLs, trusting the system's roots or the roots given.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::{Context, Error, Result, refuse};

/// How long an owner may take to answer for its shards.
const READ_TIMEOUT: Duration = Duration::from_secs(120);

/// A running cluster: where its routing catalog is, the token its nodes are asked with (an admin token, `admin =
/// true`, of every tenant, `tenants = ["*"]`), and the roots trusted for nodes serving TLS.
#[derive(Debug)]
pub struct Cluster {
    /// Kafka bootstrap servers.
    pub brokers: String,
    /// The bearer token.
    pub token: String,
    /// The roots trusted.
    pub trust: trust::Trust,
}

/// What the owners of a cluster's shards answered for them.
pub struct Answered {
    /// Each shard's part, by partition: every partition of the cluster.
    pub shards: BTreeMap<u32, serde_json::Value>,
    /// How many nodes answered.
    pub nodes: usize,
    /// The URL of each shard's owner, by partition.
    pub owners: BTreeMap<u32, String>,
}

impl Answered {
    /// Each shard's part read as `T`, in partition order; a part this version cannot read fails naming its shard.
    pub fn parts<T: serde::de::DeserializeOwned>(&self, what: &str) -> Result<Vec<T>> {
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
pub enum Ask<'a> {
    /// A read: `GET path?query`.
    Get(&'a [(&'a str, &'a str)]),
    /// A run that writes where the shards are (`reconcile`): `POST path` with this body, waiting at most this long.
    Post(&'a serde_json::Value, Duration),
}

impl Cluster {
    /// Each shard's part of `GET path?query`, asked of its owner in the routing catalog: the owner's answer holds
    /// `shards`, one part per shard it holds, each with its `partition`.
    pub fn ask_owners(&self, path: &str, query: &[(&str, &str)]) -> Result<Answered> {
        self.ask_owners_to(path, Ask::Get(query))
    }

    /// [`Cluster::ask_owners`] with a GET or a POST.
    pub fn ask_owners_to(&self, path: &str, ask: Ask<'_>) -> Result<Answered> {
        ask_owners_to(self, path, ask)
    }

    /// The owner's URL of every partition of the cluster, from its routing catalog read to its end; a partition
    /// without an owner fails, naming it.
    pub fn owners(&self) -> Result<Vec<(u32, String)>> {
        owners(&self.brokers)
    }
}

fn ask_owners_to(cluster: &Cluster, path: &str, ask: Ask<'_>) -> Result<Answered> {
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
            answered.map_err(|e| Error::new(about(failed(&e, "did not answer"))))?;
        if status != 200 {
            return Err(Error::new(about(format!(
                "answered {status}: {}",
                body["message"].as_str().unwrap_or_default()
            ))));
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
fn owners(brokers: &str) -> Result<Vec<(u32, String)>> {
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

/// A backup of a cluster: a copy of each shard of `cluster`, taken by its owner (`GET
/// /v1/admin/backup`) and written into `to` as `backup --data` writes a directory's, its manifest beside it; each copy
/// is checked as `restore` checks it (size, digest, chain) before it is kept. An owner that does not answer, or a copy
/// that does not hold, fails the command naming the shard; the copies taken before it stay.
pub fn backup(cluster: &Cluster, to: &std::path::Path) -> Result<Vec<ledger::backup::BackupManifest>> {
    let Cluster { brokers, token, trust } = cluster;
    let owners = owners(brokers)?;
    std::fs::create_dir_all(to).with_context(|| format!("cannot create {}", to.display()))?;
    let into = ledger::shards::ShardDir::new(to);
    let mut manifests = Vec::with_capacity(owners.len());
    for (partition, url) in owners {
        let path = into.path_of(partition);
        let about = |what: String| format!("shard {partition}: its owner {url} {what}");
        if path.exists() {
            refuse!("{} exists: a backup never overwrites a file", path.display());
        }
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
            BACKUP_MANIFEST_HEADER,
            READ_TIMEOUT,
            &mut file,
        )
        .map_err(|e| Error::new(about(failed(&e, "did not send its copy"))));
        let got = match got {
            Ok(got) if got.status == 200 => got,
            Ok(got) => {
                let _ = std::fs::remove_file(&partial);
                return Err(Error::new(about(format!(
                    "answered {}: {}",
                    got.status,
                    got.refusal["message"].as_str().unwrap_or_default()
                ))));
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
                return Err(Error::new(about(format!(
                    "sent a copy that does not hold ({} bytes received): {}",
                    got.bytes,
                    ledger::causes(&e)
                ))));
            }
        }
    }
    Ok(manifests)
}

/// The nearest names of every shard's `nearest`, ranked again over the whole cluster.
pub fn nearest_of(wanted: &str, shards: &BTreeMap<u32, serde_json::Value>) -> Vec<String> {
    let offered: Vec<String> = shards
        .values()
        .flat_map(|part| part["nearest"].as_array().cloned().unwrap_or_default())
        .filter_map(|name| name.as_str().map(str::to_string))
        .collect();
    reports::audit::nearest_among(wanted, &offered)
}

/// The header of `GET /v1/admin/backup` carrying the copy's manifest (`ledger::backup::BackupManifest`), JSON in ASCII.
pub const BACKUP_MANIFEST_HEADER: &str = "x-quota-ledger-manifest";
