//! A running cluster read and run (contract §9.4): the routing catalog names each shard's owner, each owner answers for
//! the shards it holds (`/v1/admin/...`, [`crate::shard`]), and the parts are joined as a directory's are. Every shard
//! must be answered by the owner the catalog names, else the use case fails naming the shard: never a partial answer. A
//! shard that moved while a read ran (a rebalance) is asked again of the owner the catalog names next, for a minute at
//! most. Owners serving TLS are asked at their `https://` URLs, trusting the system's roots or the roots given.

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
    /// What each owner answered besides its shards' parts (a node's `shard_states`), by URL.
    pub said: BTreeMap<String, serde_json::Value>,
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

/// How long a read asks again for shards that moved while it read: a rebalance moves a shard, and the catalog names
/// its new owner once that node has taken it (after the old owner's session timed out, 10 s, and the new owner caught
/// up from its warm copy). Past it the read fails naming the shard, and the operator runs it again later.
const MOVED_PATIENCE: Duration = Duration::from_secs(60);
/// The pause before the catalog is read again for shards that moved, doubled after each read up to
/// [`MOVED_PAUSE_MAX`]: a catalog that already names the new owner is read again soon, one that lags is not read twice
/// a second for a minute.
const MOVED_PAUSE_FIRST: Duration = Duration::from_millis(500);
/// The longest pause between two reads of the catalog for shards that moved.
const MOVED_PAUSE_MAX: Duration = Duration::from_secs(8);

fn ask_owners_to(cluster: &Cluster, path: &str, ask: Ask<'_>) -> Result<Answered> {
    // A read asked again answers the same. A run (`reconcile --cluster`) writes where the shards are, and a shard's new
    // owner asked again would run on every shard it holds: it fails as it did, for the operator to run again.
    let patience = match ask {
        Ask::Get(_) => MOVED_PATIENCE,
        Ask::Post(..) => Duration::ZERO,
    };
    ask_owners_within(cluster, path, &ask, patience)
}

/// Each shard's part of `ask`, asked of its owner in the catalog; the shards an owner no longer holds (they moved since
/// the catalog was read) asked again of the owner the catalog names next, for `patience` at most.
fn ask_owners_within(cluster: &Cluster, path: &str, ask: &Ask<'_>, patience: Duration) -> Result<Answered> {
    let started = std::time::Instant::now();
    let mut owner_of: BTreeMap<u32, String> = owners(&cluster.brokers)?.into_iter().collect();
    let mut shards = BTreeMap::new();
    let mut said = BTreeMap::new();
    let mut pause = MOVED_PAUSE_FIRST;
    loop {
        let unanswered: Vec<(u32, &str)> = owner_of
            .iter()
            .filter(|(partition, _)| !shards.contains_key(*partition))
            .map(|(partition, url)| (*partition, url.as_str()))
            .collect();
        let moved = ask_each_owner(cluster, path, ask, &unanswered, (&mut shards, &mut said))?;
        let Some((partition, url)) = moved.first() else { break };
        if started.elapsed() + pause > patience {
            return Err(Error::new(moved_away(*partition, url, patience)));
        }
        tracing::info!(shards = ?moved, pause = ?pause, "cluster: shards moved since the catalog was read: reading it again");
        std::thread::sleep(pause);
        pause = (pause * 2).min(MOVED_PAUSE_MAX);
        for (partition, url) in owners(&cluster.brokers)? {
            if !shards.contains_key(&partition) {
                owner_of.insert(partition, url);
            }
        }
    }
    let nodes = owner_of.values().collect::<std::collections::BTreeSet<_>>().len();
    Ok(Answered { shards, nodes, owners: owner_of, said })
}

/// Asks each owner of `unanswered` (partition, owner URL) once, keeping in `shards` the parts it holds (and in `said`
/// the rest of its answer, by URL): the shards
/// an owner answered without (they moved since the catalog was read), with the owner that was asked. An owner that does
/// not answer, or refuses, fails the read naming its shards.
fn ask_each_owner(
    cluster: &Cluster,
    path: &str,
    ask: &Ask<'_>,
    unanswered: &[(u32, &str)],
    (shards, said): (&mut BTreeMap<u32, serde_json::Value>, &mut BTreeMap<String, serde_json::Value>),
) -> Result<Vec<(u32, String)>> {
    let Cluster { token, trust, .. } = cluster;
    let mut by_url: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for (partition, url) in unanswered {
        by_url.entry(url).or_default().push(*partition);
    }
    let mut moved = Vec::new();
    for (url, owned) in by_url {
        let about = |what: String| format!("shards {owned:?}: their owner {url} {what}");
        let asked = format!("{url}{path}");
        let answered = match ask {
            Ask::Get(query) => client::get_json(&asked, query, token, trust, READ_TIMEOUT),
            Ask::Post(body, timeout) => client::post_json(&asked, body, token, trust, *timeout),
        };
        let client::Answer { status, mut body, .. } =
            answered.map_err(|e| Error::new(about(failed(&e, "did not answer"))))?;
        if status != 200 {
            return Err(Error::new(about(format!(
                "answered {status}: {}",
                body["message"].as_str().unwrap_or_default()
            ))));
        }
        let parts = body.as_object_mut().and_then(|o| o.remove("shards"));
        let parts = parts.and_then(|p| p.as_array().cloned()).unwrap_or_default();
        said.insert(url.to_string(), body);
        for partition in owned {
            match parts.iter().find(|s| s["partition"] == serde_json::json!(partition)) {
                Some(part) => {
                    shards.insert(partition, part.clone());
                }
                None => moved.push((partition, url.to_string())),
            }
        }
    }
    Ok(moved)
}

/// What a read says of a shard that moved since the catalog was read, asked again for `patience`.
fn moved_away(partition: u32, url: &str, patience: Duration) -> String {
    let again = match patience.as_secs() {
        0 => String::new(),
        secs => format!(", and the catalog named no owner that holds it within {secs} s"),
    };
    format!(
        "shard {partition}: its owner {url} does not hold it now (it moved since the catalog was read{again}): run \
         again"
    )
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

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::sync::{Arc, Mutex};

    use kafka::routing::{RoutingEntry, publish_owner};

    use super::*;

    /// A node over HTTP that answers every request with the parts of the shards `holds` names for its n-th request
    /// (from 0), each part naming the node; it keeps the request line of each request it was asked.
    struct StubOwner {
        url: String,
        asked: Arc<Mutex<Vec<String>>>,
    }

    impl StubOwner {
        fn start(name: &'static str, holds: impl Fn(usize) -> Vec<u32> + Send + 'static) -> StubOwner {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let url = format!("http://{}", listener.local_addr().unwrap());
            let asked: Arc<Mutex<Vec<String>>> = Arc::default();
            let kept = Arc::clone(&asked);
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    let mut stream = stream.unwrap();
                    let request = read_request(&mut stream);
                    let n = {
                        let mut kept = kept.lock().unwrap();
                        kept.push(request);
                        kept.len() - 1
                    };
                    let parts: Vec<serde_json::Value> =
                        holds(n).into_iter().map(|p| serde_json::json!({"partition": p, "node": name})).collect();
                    let body = serde_json::json!({ "shards": parts }).to_string();
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: \
                         close\r\n\r\n",
                        body.len()
                    );
                    stream.write_all(head.as_bytes()).unwrap();
                    stream.write_all(body.as_bytes()).unwrap();
                }
            });
            StubOwner { url, asked }
        }

        fn asked(&self) -> Vec<String> {
            self.asked.lock().unwrap().clone()
        }
    }

    /// The request line of the request on `stream`, its headers and body read.
    fn read_request(stream: &mut std::net::TcpStream) -> String {
        let mut reader = BufReader::new(stream);
        let mut request = String::new();
        reader.read_line(&mut request).unwrap();
        let mut length = 0;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if line.trim().is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap();
            }
        }
        reader.read_exact(&mut vec![0; length]).unwrap();
        request.trim_end().to_string()
    }

    /// A cluster of two partitions on the embedded broker whose catalog names `owner` for both.
    fn cluster_owned_by(broker: &kafka::admin::EmbeddedBroker, owner: &StubOwner) -> Cluster {
        let brokers = broker.bootstrap_servers();
        for partition in [0, 1] {
            publish_owner(&brokers, &[], &RoutingEntry::now(partition, "a", &owner.url, 1)).unwrap();
        }
        Cluster { brokers, token: "a token".to_string(), trust: trust::Trust::system() }
    }

    // Proves that a read meeting a shard that moved (its owner answers without it) asks the catalog again until it
    // names the new owner, then asks that owner for that shard alone, and answers every shard.
    #[test]
    fn a_read_asks_the_next_owner_of_a_shard_that_moved() {
        let broker = kafka::admin::EmbeddedBroker::start(2).unwrap();
        let b = StubOwner::start("b", |_| vec![1]);
        let (brokers, b_url) = (broker.bootstrap_servers(), b.url.clone());
        // Shard 1 moves to b: a answers without it from the start, and b names itself in the catalog only while a
        // answers the second time, as a new owner does once it has taken the shard.
        let a = StubOwner::start("a", move |n| {
            if n == 1 {
                publish_owner(&brokers, &[], &RoutingEntry::now(1, "b", &b_url, 2)).unwrap();
            }
            vec![0]
        });
        let cluster = cluster_owned_by(&broker, &a);
        let answered = cluster.ask_owners("/v1/admin/status", &[]).unwrap();
        let nodes: Vec<&serde_json::Value> = answered.shards.values().map(|part| &part["node"]).collect();
        assert_eq!(nodes, ["a", "b"], "shard 0 answered by a, shard 1 by b: {:?}", answered.shards);
        assert_eq!(answered.owners.values().collect::<Vec<_>>(), [&a.url, &b.url]);
        assert_eq!(answered.nodes, 2);
        assert_eq!(a.asked(), ["GET /v1/admin/status HTTP/1.1"; 2], "a asked again while the catalog named it");
        assert_eq!(b.asked(), ["GET /v1/admin/status HTTP/1.1"], "b asked once, for shard 1");
    }

    // Proves that a shard no owner in the catalog holds fails the read once its patience is spent, saying it moved and
    // to run again; and that a run (a POST) is never asked again.
    #[test]
    fn a_shard_that_stays_away_fails_the_read_and_a_run_is_not_asked_again() {
        let broker = kafka::admin::EmbeddedBroker::start(2).unwrap();
        let a = StubOwner::start("a", |_| vec![0]);
        let cluster = cluster_owned_by(&broker, &a);
        let failed = ask_owners_within(&cluster, "/v1/admin/status", &Ask::Get(&[]), Duration::from_secs(2));
        let said = failed.err().expect("shard 1 is held by no owner").to_string();
        let expected = format!(
            "shard 1: its owner {} does not hold it now (it moved since the catalog was read, and the catalog named no \
             owner that holds it within 2 s): run again",
            a.url
        );
        assert_eq!(said, expected);
        assert!(a.asked().len() >= 2, "asked again before giving up: {:?}", a.asked());

        let before = a.asked().len();
        let run = serde_json::json!({"dry_run": true});
        let failed = cluster.ask_owners_to("/v1/admin/reconcile", Ask::Post(&run, Duration::from_secs(10)));
        let said = failed.err().expect("shard 1 is held by no owner").to_string();
        let expected = format!(
            "shard 1: its owner {} does not hold it now (it moved since the catalog was read): run again",
            a.url
        );
        assert_eq!(said, expected);
        assert_eq!(a.asked()[before..], ["POST /v1/admin/reconcile HTTP/1.1"], "a run is asked once");
    }
}
