//! The routing client of a quota-ledger cluster: it sends a tenant's hook request (`POST /v1/check`, reservations) to
//! the node that owns the tenant's partition, as the HBase client does with its region locations. It reads the
//! routing table (`GET /v1/routing`) from any node it knows, caches partition to URL, and computes a tenant's partition
//! as every producer does (Kafka's default partitioner, contract §9.4). The cache is corrected lazily: a node that
//! answers `421 Misdirected Request` names the owner in its body (used at once), and a node that refuses the connection
//! makes the client read the table again from any live node; either is retried at most [`MAX_REROUTES`] times.
//!
//! Nodes serving TLS are reached at their `https://` URLs, trusting the system's roots or the authorities of a CA
//! file ([`trust::Trust`]); a certificate that is not trusted is said to be ([`ClientError::Tls`]), never taken for
//! a node that is down.
//!
//! ```no_run
//! let trust = trust::Trust::of(Some(std::path::Path::new("/etc/quota-ledger/ca.pem"))).unwrap();
//! let seeds = ["https://10.0.0.5:8080", "https://10.0.0.6:8080"];
//! let client = client::Client::with_trust(&seeds, "secret-token", &trust).unwrap();
//! let body = serde_json::json!({"tenant": "org-42", "subject": "u", "metric": "tokens", "amount": 5,
//!                               "idempotency_key": "k-1"});
//! let answer = client.check("org-42", &body).unwrap();
//! println!("{} {}", answer.status, answer.body);
//! ```

#![deny(missing_docs)]

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How many times one request is sent again after a 421 or a refused connection: enough for an owner that moved
/// twice while the request was under way; more means the table is not settling, which the caller should hear.
pub const MAX_REROUTES: usize = 3;
/// How long one HTTP exchange may take, connection included.
pub const REQUEST_TIMEOUT_MS: u64 = 10_000;

/// The body of `GET /v1/routing`: the partition count and the owner of every partition that has one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Routing {
    /// P, the input topics' partition count.
    pub partitions: u32,
    /// The owners recorded in the routing catalog, by partition.
    pub owners: Vec<Owner>,
}

/// One partition's owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// The partition.
    pub partition: u32,
    /// The owning node's id.
    pub node_id: String,
    /// Where it answers.
    pub url: String,
    /// The consumer group's generation at its assignment.
    pub epoch: i64,
}

/// The body of a `421 Misdirected Request`: this node does not serve the partition; `owner` is the one it knows of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotServing {
    /// `NOT_SERVING`.
    pub code: String,
    /// The tenant's partition.
    pub partition: u32,
    /// The owner's URL, when the node knows one.
    #[serde(default)]
    pub owner: Option<String>,
}

/// A node's answer: its status and JSON body, whatever the status (a 429 or a 409 is the hook's answer, not an error
/// of routing).
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The JSON body (`null` when the body was empty or not JSON).
    pub body: serde_json::Value,
    /// The node that answered.
    pub url: String,
}

/// A request could not be routed or answered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// No known node answered `GET /v1/routing`.
    #[error("no node answered GET /v1/routing (tried {}): {last}", .tried.join(", "))]
    NoRouting {
        /// The URLs tried.
        tried: Vec<String>,
        /// The last failure.
        last: String,
    },
    /// The routing table names no owner for the tenant's partition.
    #[error("partition {partition} (of tenant {tenant:?}) has no owner in the routing table")]
    NoOwner {
        /// The tenant.
        tenant: String,
        /// Its partition.
        partition: u32,
    },
    /// The request was misdirected or refused more than [`MAX_REROUTES`] times.
    #[error("partition {partition} (of tenant {tenant:?}) was not served after {MAX_REROUTES} reroutes: {last}")]
    NotServed {
        /// The tenant.
        tenant: String,
        /// Its partition.
        partition: u32,
        /// The last node's answer or failure.
        last: String,
    },
    /// A body could not be read from the node or written where it was going.
    #[error("{url}: the transfer stopped: {source}")]
    Download {
        /// The URL asked.
        url: String,
        /// The failure.
        source: std::io::Error,
    },
    /// TLS with a node failed: its certificate is not trusted (the roots trusted and the way to trust another
    /// authority are named), or the handshake failed. Nothing was sent.
    #[error("{url}: {reason}")]
    Tls {
        /// The node's URL.
        url: String,
        /// Why, from [`trust::Trust::explain`].
        reason: String,
    },
    /// The exchange with a node failed after the request may have reached it (a reset, a timeout): not retried,
    /// as the node may have decided it (the caller retries with the same idempotency key).
    #[error("{url}: {source}")]
    Http {
        /// The node's URL.
        url: String,
        /// ureq's reason.
        source: ureq::Error,
    },
}

/// An agent trusting `trust`, statuses answered rather than errors, every exchange bounded by `timeout`.
fn agent(trust: &trust::Trust, timeout: Duration) -> ureq::Agent {
    let config = ureq::Agent::config_builder()
        .tls_config(trust.tls_config())
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .build();
    config.into()
}

/// `source`, an error of an exchange with `url`, as the client's: TLS's said as such.
fn error_of(url: &str, trust: &trust::Trust, source: ureq::Error) -> ClientError {
    match trust.explain(&source) {
        Some(reason) => ClientError::Tls { url: url.to_string(), reason },
        None => ClientError::Http { url: url.to_string(), source },
    }
}

/// `GET url?query` (each pair percent-encoded) with `token` as bearer, trusting `trust` for an `https://` URL,
/// waiting at most `timeout`: the status and the JSON answered (`Null` when the body is not JSON). What a read across
/// a cluster asks each shard's owner with (`export billing --cluster`, `audit why --cluster`).
pub fn get_json(
    url: &str,
    query: &[(&str, &str)],
    token: &str,
    trust: &trust::Trust,
    timeout: Duration,
) -> Result<Answer, ClientError> {
    let response = agent(trust, timeout)
        .get(url)
        .query_pairs(query.iter().copied())
        .header("authorization", format!("Bearer {token}"))
        .call()
        .map_err(|source| error_of(url, trust, source))?;
    answer_of(url, response)
}

/// The status and JSON body (`Null` when not JSON) of `url`'s `response`.
fn answer_of(url: &str, mut response: ureq::http::Response<ureq::Body>) -> Result<Answer, ClientError> {
    let status = response.status().as_u16();
    let text =
        response.body_mut().read_to_string().map_err(|source| ClientError::Http { url: url.to_string(), source })?;
    let body = serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
    Ok(Answer { status, body, url: url.to_string() })
}

/// `POST url` of the JSON `body` with `token` as bearer, trusting `trust` for an `https://` URL, waiting at most
/// `timeout`: the status and the JSON answered. What `reconcile --cluster` asks each shard's owner with.
pub fn post_json(
    url: &str,
    body: &serde_json::Value,
    token: &str,
    trust: &trust::Trust,
    timeout: Duration,
) -> Result<Answer, ClientError> {
    let response = agent(trust, timeout)
        .post(url)
        .header("authorization", format!("Bearer {token}"))
        .send_json(body)
        .map_err(|source| error_of(url, trust, source))?;
    answer_of(url, response)
}

/// What [`download`] fetched.
#[derive(Debug)]
pub struct Downloaded {
    /// The HTTP status.
    pub status: u16,
    /// The header asked for, when the node sent it.
    pub header: Option<String>,
    /// Bytes written (only for 200).
    pub bytes: u64,
    /// The JSON body of an answer other than 200 (`null` when not JSON).
    pub refusal: serde_json::Value,
}

/// `GET url?query` with `token` as bearer, trusting `trust` for an `https://` URL, a 200's body written to `out` as it
/// arrives (a shard's copy, too large to hold in memory) with the value of `header`; another status's JSON body kept
/// instead. `wait` bounds the wait for the answer to start (the node takes the copy first), not the transfer.
pub fn download(
    url: &str,
    query: &[(&str, &str)],
    token: &str,
    trust: &trust::Trust,
    header: &str,
    wait: Duration,
    out: &mut dyn std::io::Write,
) -> Result<Downloaded, ClientError> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .tls_config(trust.tls_config())
        .http_status_as_error(false)
        .timeout_recv_response(Some(wait))
        .build()
        .into();
    let http = |source| error_of(url, trust, source);
    let mut response = agent
        .get(url)
        .query_pairs(query.iter().copied())
        .header("authorization", format!("Bearer {token}"))
        .call()
        .map_err(http)?;
    let status = response.status().as_u16();
    let header = response.headers().get(header).and_then(|v| v.to_str().ok()).map(str::to_string);
    if status != 200 {
        let text = response.body_mut().read_to_string().map_err(http)?;
        let refusal = serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
        return Ok(Downloaded { status, header, bytes: 0, refusal });
    }
    let mut reader = response.body_mut().with_config().limit(u64::MAX).reader();
    let bytes =
        std::io::copy(&mut reader, out).map_err(|source| ClientError::Download { url: url.to_string(), source })?;
    Ok(Downloaded { status, header, bytes, refusal: serde_json::Value::Null })
}

/// The cached table.
#[derive(Debug, Default)]
struct Routes {
    partitions: u32,
    owners: BTreeMap<u32, String>,
}

/// What one send came to.
enum Sent {
    Answered(Answer),
    Misdirected { owner: Option<String>, answer: String },
    Refused(String),
}

/// A client of a cluster's nodes, shared by threads (its cache behind a mutex, its connections pooled by ureq).
pub struct Client {
    seeds: Vec<String>,
    token: String,
    trust: trust::Trust,
    agent: ureq::Agent,
    routes: Mutex<Routes>,
}

impl Client {
    /// A client that knows the nodes `seed_urls` (`http://host:port` or `https://host:port`) and sends `token` as
    /// bearer, trusting the system's roots for nodes serving TLS; reads the routing table from the first seed that
    /// answers.
    pub fn new(seed_urls: &[&str], token: &str) -> Result<Client, ClientError> {
        Client::with_trust(seed_urls, token, &trust::Trust::system())
    }

    /// [`Client::new`] trusting `trust` (a cluster's own certificate authority, say) for nodes serving TLS.
    pub fn with_trust(seed_urls: &[&str], token: &str, trust: &trust::Trust) -> Result<Client, ClientError> {
        let client = Client {
            seeds: seed_urls.iter().map(|url| url.trim_end_matches('/').to_string()).collect(),
            token: token.to_string(),
            trust: trust.clone(),
            agent: agent(trust, Duration::from_millis(REQUEST_TIMEOUT_MS)),
            routes: Mutex::default(),
        };
        client.refresh()?;
        Ok(client)
    }

    /// Reads the routing table again from any live node (the owners known, then the seeds) and replaces the cache.
    pub fn refresh(&self) -> Result<Routing, ClientError> {
        let known: Vec<String> = self.lock().owners.values().cloned().collect();
        let mut tried: Vec<String> = Vec::new();
        let mut last = String::from("no node known");
        for url in known.into_iter().chain(self.seeds.iter().cloned()) {
            if tried.contains(&url) {
                continue;
            }
            tried.push(url.clone());
            match self.routing_of(&url) {
                Ok(routing) => {
                    let mut routes = self.lock();
                    routes.partitions = routing.partitions;
                    routes.owners = routing.owners.iter().map(|o| (o.partition, o.url.clone())).collect();
                    return Ok(routing);
                }
                Err(reason) => last = format!("{url}: {reason}"),
            }
        }
        Err(ClientError::NoRouting { tried, last })
    }

    /// The tenant's partition and the URL cached for it.
    pub fn owner_of(&self, tenant: &str) -> (u32, Option<String>) {
        let routes = self.lock();
        let partition = schemas::partition::partition_of(tenant, routes.partitions.max(1));
        (partition, routes.owners.get(&partition).cloned())
    }

    /// `POST /v1/check` for `tenant` with `body`.
    pub fn check(&self, tenant: &str, body: &serde_json::Value) -> Result<Answer, ClientError> {
        self.post(tenant, "/v1/check", body)
    }

    /// `POST path` (`/v1/reservations`, `/v1/reservations/ID/commit`, ...) for `tenant` with `body`, sent to the owner
    /// of the tenant's partition.
    pub fn post(&self, tenant: &str, path: &str, body: &serde_json::Value) -> Result<Answer, ClientError> {
        let mut last = String::new();
        for attempt in 0..=MAX_REROUTES {
            let (partition, url) = self.owner_of(tenant);
            let url = match url {
                Some(url) => url,
                None if attempt == 0 => {
                    self.refresh()?;
                    self.owner_of(tenant).1.ok_or(ClientError::NoOwner { tenant: tenant.to_string(), partition })?
                }
                None => return Err(ClientError::NoOwner { tenant: tenant.to_string(), partition }),
            };
            match self.send(&url, path, body)? {
                Sent::Answered(answer) => return Ok(answer),
                Sent::Misdirected { owner: Some(owner), answer } if owner.trim_end_matches('/') != url => {
                    tracing::debug!(%url, partition, %owner, "client: a node does not serve the partition; it names the owner");
                    self.lock().owners.insert(partition, owner.trim_end_matches('/').to_string());
                    last = answer;
                }
                Sent::Misdirected { answer, .. } => {
                    last = answer;
                    self.forget_and_refresh(partition, &url);
                }
                Sent::Refused(reason) => {
                    tracing::debug!(%url, %reason, "client: a node refused the connection; reading the routing table again");
                    last = format!("{url}: {reason}");
                    self.forget_and_refresh(partition, &url);
                }
            }
        }
        let (partition, _) = self.owner_of(tenant);
        Err(ClientError::NotServed { tenant: tenant.to_string(), partition, last })
    }

    /// The cached owner of `partition` was wrong: drop it and read the table again (a failure to read leaves the
    /// partition without an owner, which the next attempt reports).
    fn forget_and_refresh(&self, partition: u32, url: &str) {
        {
            let mut routes = self.lock();
            if routes.owners.get(&partition).is_some_and(|cached| cached == url) {
                routes.owners.remove(&partition);
            }
        }
        if let Err(error) = self.refresh() {
            tracing::debug!(%error, "client: a request failed");
        }
    }

    fn send(&self, url: &str, path: &str, body: &serde_json::Value) -> Result<Sent, ClientError> {
        let response = self
            .agent
            .post(format!("{url}{path}"))
            .header("authorization", format!("Bearer {}", self.token))
            .send_json(body);
        let mut response = match response {
            Ok(response) => response,
            Err(error) if refused(&error) => return Ok(Sent::Refused(error.to_string())),
            Err(source) => return Err(error_of(url, &self.trust, source)),
        };
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().unwrap_or_default();
        if status == 421 {
            let owner = serde_json::from_str::<NotServing>(&text).ok().and_then(|n| n.owner);
            return Ok(Sent::Misdirected { owner, answer: format!("{url} answered 421 {text}") });
        }
        let body = serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
        Ok(Sent::Answered(Answer { status, body, url: url.to_string() }))
    }

    fn routing_of(&self, url: &str) -> Result<Routing, String> {
        let mut response = self
            .agent
            .get(format!("{url}/v1/routing"))
            .header("authorization", format!("Bearer {}", self.token))
            .call()
            .map_err(|e| self.trust.explain(&e).unwrap_or_else(|| e.to_string()))?;
        if response.status() != 200 {
            return Err(format!("answered {}", response.status()));
        }
        let routing: Routing = response.body_mut().read_json().map_err(|e| e.to_string())?;
        if routing.partitions == 0 {
            return Err("answered a table of 0 partitions".to_string());
        }
        Ok(routing)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Routes> {
        self.routes.lock().expect("never poisoned: nothing panics holding it")
    }
}

/// Whether the request never reached a node (so sending it elsewhere cannot count it twice).
fn refused(error: &ureq::Error) -> bool {
    match error {
        ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => true,
        ureq::Error::Io(io) => io.kind() == std::io::ErrorKind::ConnectionRefused,
        _ => false,
    }
}
