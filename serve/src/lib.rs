//! Serve: the enforcement hook over HTTP (contract §6, contract §7), for services that ask "may this request proceed?" from
//! another process or language. The [`hook`] decides and records in the ledger; this crate is the server around it.
//! JSON in and out; 200 when allowed, 429 when denied with `Retry-After` and `RateLimit-*` headers; 400 for malformed
//! input, 401 without a valid token, 403 for a tenant the token does not cover (nothing consumed in any of them);
//! 503 when the hook's queue is full; 408 for a body that has not all arrived [`ServeSettings::read_timeout_ms`]
//! after its header. With brokers, the outbox is published to Kafka every second ([`outbox::PublisherThread`]), and
//! `/healthz` says how much of it waits and why.
//!
//! On a network: HTTPS from a certificate and key ([`tls`]), and plain HTTP only on a loopback address unless the
//! operator says otherwise. Connections are bounded ([`ServeSettings::connections_max`], sized to the open-file
//! limit, which is raised at start); one that does not finish its TLS handshake or a request header within
//! [`ServeSettings::header_timeout_ms`] is closed, so idle ones cannot hold the places for long.
//!
//! Who may ask is in a token file ([`tokens`]), which only its owner may read, and each decision records which token
//! asked; [`run`] serves until SIGTERM or Ctrl-C, then stops cleanly: the requests in flight are answered and the
//! hook's writer closes the ledger.
//!
//! ```
//! # let dir = tempfile::tempdir().unwrap();
//! # let path = dir.path().join("tokens.toml");
//! let file = "[[token]]\nname = \"checkout\"\nsecret = \"0123456789abcdef\"\ntenants = [\"org-42\"]\n";
//! // Only its owner may read it (mode 600): it holds secrets.
//! serve::tokens::write_private(&path, file).unwrap();
//! let tokens = serve::tokens::Tokens::read(&path).unwrap();
//! let caller = tokens.caller_of("0123456789abcdef").unwrap();
//! assert!(caller.scope.covers("org-42") && caller.name == "checkout");
//! let settings = serve::ServeSettings::new("127.0.0.1:0".parse().unwrap(), path);
//! // serve::run(&dir.path().join("ledger.db"), settings, |address| Ok(println!("listening on {address}")))
//! //     serves until SIGTERM.
//! # drop(settings);
//! ```

#![deny(missing_docs)]

mod admin;
mod answer;
mod app;
mod casing;
mod changes;
mod connections;
mod events;
mod hook_outbox;
mod hooks;
mod keys;
mod limits;
pub mod metrics;
mod reads;
pub mod rls;
mod routes;
mod systemd;
pub mod tls;
pub mod tokens;
mod usage;
mod webhook_routes;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hook::{Hook, HookSettings, Shards, Stopped};
use ledger::Ledger;
use ledger::shards::ShardDir;
use outbox::PublisherThread;

use crate::app::{App, Outboxes};
use crate::hook_outbox::HookOutbox;
use crate::hooks::Hooks;
use crate::tls::{TlsError, TlsFiles};
use crate::tokens::{TokenFileError, Tokens};

pub use crate::app::{ClaimRefused, Routing};
pub use crate::events::{EVENTS_PER_REQUEST_MAX, EventsTo};
pub use crate::limits::{
    BODY_LIMIT_BYTES, CONNECTIONS_MAX_DEFAULT, EVENTS_BODY_LIMIT_BYTES, FILES_RESERVED, FILES_RESERVED_MIN,
};
pub use crate::metrics::stage_timer;
pub use usecases::cluster::BACKUP_MANIFEST_HEADER;

/// How long a client may take to send a request's body once its header arrived (Go's `http.Server.ReadTimeout` counts
/// the same way): hyper's default for a header, kept for the body, which an ordinary client sends with its header.
pub const READ_TIMEOUT_MS: u64 = 30_000;
/// How long a client may take to finish its TLS handshake, then to send each request header, and how long a
/// kept-alive connection may idle (hyper times the idle wait for the next header as the header itself). Short, since
/// every connection waiting for a header holds a place in the bound of connections: a client that opens
/// connections and sends nothing is closed after this, so a new client waits at most this long for a place. An
/// ordinary client sends its header in one packet right after connecting; 10 s leaves room for a slow link and a
/// TLS handshake across the world, and keeps a pooled connection for a client that asks at least every 10 s (Node's
/// default keep-alive is 5 s; hyper's default header timeout, 30 s, would keep a new client waiting three times as
/// long for a place).
pub const HEADER_TIMEOUT_MS: u64 = 10_000;
/// How long `serve` waits, on SIGTERM or Ctrl-C, for the requests in flight before it exits, and then for the hook's
/// writer to close the ledger (contract §9.5).
pub const SHUTDOWN_WAIT_MS: u64 = 10_000;
/// How long `serve` goes on answering once the hook's writer stopped on a panic (every request then fails, and
/// `/healthz` answers 503 `stopped`) before it stops and exits 2: long enough for a probe or a load balancer to
/// see why and take it out, short enough that a supervisor restarts it at once.
pub const WRITER_STOPPED_EXIT_MS: u64 = 1_000;

/// Where to listen, who may ask, and how the hook records.
#[derive(Debug, Clone)]
pub struct ServeSettings {
    /// Address to listen on (port 0 picks one: [`run`] says which).
    pub listen: SocketAddr,
    /// The token file (contract §7, [`tokens::Tokens::read`]).
    pub tokens: PathBuf,
    /// How the hook groups requests and how durable its commits are.
    pub hook: HookSettings,
    /// Kafka bootstrap servers to publish decisions and usage to (the outbox); without them they wait.
    pub brokers: Option<String>,
    /// librdkafka settings of the outbox producer (`-X key=value`).
    pub overrides: Vec<(String, String)>,
    /// Where `POST /v1/events` sends the usage it takes (`serve --brokers`, a node's brokers); without it the route
    /// answers 503, saying so.
    pub events_to: Option<EventsTo>,
    /// How the outbox's entries are written on their topics (single-object encoding, or the Confluent wire format).
    pub outbox_format: outbox::OutboxFormat,
    /// Milliseconds a client may take to send a request's body once its header arrived; then it is answered 408 and
    /// the connection is closed. At least 1.
    pub read_timeout_ms: u64,
    /// Milliseconds a client may take to finish its TLS handshake, then each request header, or leave a kept-alive
    /// connection idle; then the connection is closed ([`HEADER_TIMEOUT_MS`]). At least 1.
    pub header_timeout_ms: u64,
    /// Connections open at once at most; beyond, new ones wait in the backlog until one closes. `None`: the
    /// open-file limit (raised to its hard limit at start) less a quarter of it (between [`FILES_RESERVED_MIN`] and
    /// [`FILES_RESERVED`]), at most
    /// [`CONNECTIONS_MAX_DEFAULT`].
    pub connections_max: Option<usize>,
    /// Serve HTTPS with this certificate and key; plain HTTP without.
    pub tls: Option<TlsFiles>,
    /// Listen without TLS on an address other machines can reach (behind a TLS-terminating proxy, say): refused
    /// otherwise, since every request carries a bearer secret.
    pub insecure_listen: bool,
    /// Also serve Envoy's rate limit service (gRPC) on a listener of its own ([`rls`]).
    pub rls: Option<RlsSettings>,
    /// How the alerts are delivered to the webhooks tenants register: a deliverer per ledger ([`webhooks::Deliverer`]).
    pub webhooks: webhooks::DeliverySettings,
}

/// Where Envoy's rate limit service listens, and how its descriptors map to the hook's requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RlsSettings {
    /// Address of its listener (port 0 picks one: [`Listening::rls`] says which). Same TLS, tokens and rule on
    /// plain listening as the HTTP listener's.
    pub listen: SocketAddr,
    /// The mapping file ([`rls::config::RlsConfig::read`]).
    pub config: PathBuf,
}

impl ServeSettings {
    /// Listening on `listen` for the callers of the token file `tokens`, with the hook's defaults, no brokers and
    /// [`READ_TIMEOUT_MS`].
    pub fn new(listen: SocketAddr, tokens: PathBuf) -> ServeSettings {
        ServeSettings {
            listen,
            tokens,
            hook: HookSettings::default(),
            brokers: None,
            overrides: Vec::new(),
            events_to: None,
            outbox_format: outbox::OutboxFormat::SingleObject,
            read_timeout_ms: READ_TIMEOUT_MS,
            header_timeout_ms: HEADER_TIMEOUT_MS,
            connections_max: None,
            tls: None,
            insecure_listen: false,
            rls: None,
            webhooks: webhooks::DeliverySettings::default(),
        }
    }
}

/// The routes `serve` answers over `hook` for the callers of `tokens`, without a listener: the same handlers, body
/// limits and token checks as [`run`]'s server ([`READ_TIMEOUT_MS`] for a body, no brokers), for a caller that drives
/// requests in its own process (the fuzz targets of the request bodies). The admin endpoints record changes in
/// `changes`, the ledger file the hook decides on, as `serve --ledger` does; with `None` they answer that there is no
/// ledger to record in.
pub fn router(hook: Hook, tokens: Tokens, changes: Option<std::path::PathBuf>) -> axum::Router {
    let admin = crate::changes::Admin::new(
        changes.map_or(crate::changes::AdminLedgers::None, crate::changes::AdminLedgers::File),
    );
    let app = App {
        hook: Hooks::One(hook),
        tokens,
        outbox: None,
        routing: None,
        metrics: app::Metrics::new(),
        admin,
        publish: None,
        events: None,
    };
    routes::router(Arc::new(app), Duration::from_millis(READ_TIMEOUT_MS))
}

/// Where a reconcile of a shard this server holds publishes its adjustments (`POST /v1/admin/reconcile`): the server's
/// own brokers, as its outbox publisher does; without them they wait in the shard's outbox.
fn publish_of(settings: &ServeSettings) -> Option<usecases::run::Publish> {
    let format = &settings.outbox_format;
    settings.brokers.as_deref().map(|brokers| usecases::run::Publish::to(brokers, &settings.overrides, format.clone()))
}

/// The producer of `POST /v1/events`, when the settings say where it sends.
fn events_sender(settings: &ServeSettings) -> Result<Option<events::EventsSender>, ServeError> {
    settings.events_to.as_ref().map(events::EventsSender::new).transpose().map_err(ServeError::Events)
}

/// Where the server listens, as the first line of `serve` says it: `http://ADDR` or `https://ADDR`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listening {
    /// The address (port 0 asked: the port picked).
    pub address: SocketAddr,
    /// Whether it speaks TLS.
    pub tls: bool,
    /// Where Envoy's rate limit service listens, with `--rls-listen` (its TLS is the same).
    pub rls: Option<SocketAddr>,
}

impl std::fmt::Display for Listening {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        write!(f, "{scheme}://{}", self.address)
    }
}

/// The server did not start, or stopped on an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The ledger is not there or cannot be opened: a hook on a new, empty ledger would allow everything.
    #[error(transparent)]
    Ledger(#[from] ledger::OpenError),
    /// The token file cannot be used.
    #[error(transparent)]
    Tokens(#[from] TokenFileError),
    /// Plain HTTP on an address other machines can reach, without [`ServeSettings::insecure_listen`].
    #[error(
        "refusing to listen on {address} without TLS: every request carries a bearer secret, readable by anyone on \
         the network path; give --tls-cert FILE --tls-key FILE, listen on 127.0.0.1 behind a TLS proxy, or say \
         --insecure-listen to serve plain HTTP there anyway"
    )]
    InsecureListen {
        /// The address asked for.
        address: SocketAddr,
    },
    /// The certificate or key cannot be used.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The rate limit service's mapping file cannot be used.
    #[error(transparent)]
    RlsConfig(#[from] rls::config::RlsConfigError),
    /// More connections asked for than the open-file limit allows.
    #[error(
        "--connections-max {asked} needs {needed} open files (a descriptor per connection and {reserved} for the \
         ledger, Kafka and the runtime), and the limit is {limit}: raise the hard limit (`ulimit -Hn`, systemd's \
         LimitNOFILE=) or ask for fewer"
    )]
    TooManyConnections {
        /// The bound asked for.
        asked: usize,
        /// What it needs.
        needed: u64,
        /// What is kept for the rest of the server.
        reserved: u64,
        /// The open-file limit after raising it.
        limit: u64,
    },
    /// The directory of shards cannot be served (no shard in it and no partition count given, a shard missing).
    #[error("cannot serve the shards of {dir}")]
    Shards {
        /// The directory.
        dir: PathBuf,
        /// Why.
        source: Box<hook::StartError>,
    },
    /// The hook did not start (another hook decides on this ledger, say).
    #[error("cannot start the hook")]
    Hook(#[source] hook::StartError),
    /// The outbox's publisher did not start.
    #[error(transparent)]
    Outbox(#[from] outbox::StartError),
    /// The webhooks' deliverer did not start.
    #[error("cannot start the webhooks' deliverer")]
    Webhooks(#[source] webhooks::StartError),
    /// The producer of `POST /v1/events` could not be made (a bad `-X` setting, say).
    #[error("cannot make the producer of POST /v1/events")]
    Events(#[source] kafka::producer::ProduceError),
    /// The server's threads did not start.
    #[error("cannot start the server's runtime")]
    Runtime(#[source] std::io::Error),
    /// The address cannot be listened on (in use, not this machine's, a privileged port).
    #[error("cannot listen on {address}")]
    Listen {
        /// The address asked for.
        address: SocketAddr,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// Saying where the server listens failed.
    #[error("cannot say where the server listens")]
    Announce(#[source] std::io::Error),
    /// The hook's writer stopped on a panic: nothing could be decided any more, so the server stopped, to be
    /// restarted (the ledger holds everything answered).
    #[error("{0}; serve stopped so that it can be restarted")]
    WriterStopped(String),
    /// The node serving through it asked it to stop.
    #[error("{0}")]
    Stopped(String),
}

/// Serves the hook on the ledger at `ledger_path` until SIGTERM or Ctrl-C. `listening` is told where once the server
/// listens (for scripts and tests, since port 0 picks one). On the signal, the requests in flight are answered (for
/// [`SHUTDOWN_WAIT_MS`] at most), the outbox's publisher ends its pass, and the hook's writer records what was
/// queued and closes the ledger.
pub fn run(
    ledger_path: &Path,
    settings: ServeSettings,
    listening: impl FnOnce(Listening) -> std::io::Result<()>,
) -> Result<(), ServeError> {
    let prepared = prepare(&settings)?;
    // A hook on a ledger that is not there would create an empty one, find no policy, and allow everything: a
    // mistyped --ledger, a start from the wrong directory, an empty file or a ledger not created yet must stop
    // here instead. An older ledger is fine: the hook migrates it.
    match Ledger::open_read_only(ledger_path) {
        Ok(_) | Err(ledger::OpenError::NotMigrated { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    let tokens = Tokens::read(&settings.tokens)?;
    let prepared = Prepared { tls: settings.tls.as_ref().map(tls::acceptor).transpose()?, ..prepared };
    let metrics = app::Metrics::new();
    let hook = Hook::start(ledger_path, metrics.timing(&settings.hook)).map_err(ServeError::Hook)?;
    let writers = vec![hook.stopped()];
    let publisher = match &settings.brokers {
        Some(brokers) => Some(start_publisher("serve", ledger_path, &hook, brokers, &settings)?),
        None => None,
    };
    let outbox = publisher.as_ref().map(|p| Outboxes::One(p.health()));
    let deliverer = start_deliverer("serve", ledger_path, &settings, &metrics)?;
    let admin = changes::Admin::new(changes::AdminLedgers::File(ledger_path.to_path_buf()));
    let app = App {
        hook: Hooks::One(hook),
        tokens,
        outbox,
        routing: None,
        metrics,
        admin,
        publish: publish_of(&settings),
        events: events_sender(&settings)?,
    };
    let background = Background { publishers: publisher.into_iter().collect(), deliverers: vec![deliverer] };
    serve(app, writers, background, prepared, &settings, listening, None)
}

/// [`run`] over every shard of `dir` (contract §9.4), each request in its tenant's shard ([`hook::Shards`]):
/// `partitions` creates the shards missing; without it the directory's shards must all be there. With brokers, each
/// shard's outbox has a publisher thread of its own; `/healthz` answers for every shard.
pub fn run_shards(
    dir: &ShardDir,
    partitions: Option<u32>,
    settings: ServeSettings,
    listening: impl FnOnce(Listening) -> std::io::Result<()>,
) -> Result<(), ServeError> {
    let prepared = prepare(&settings)?;
    let tokens = Tokens::read(&settings.tokens)?;
    let prepared = Prepared { tls: settings.tls.as_ref().map(tls::acceptor).transpose()?, ..prepared };
    let metrics = app::Metrics::new();
    let shards = Shards::start_all(dir.clone(), partitions, metrics.timing(&settings.hook))
        .map_err(|e| ServeError::Shards { dir: dir.dir().to_path_buf(), source: Box::new(e) })?;
    let held: Vec<(u32, Hook)> = shards.held().into_iter().filter_map(|p| Some((p, shards.hook(p)?))).collect();
    let writers = held.iter().map(|(_, hook)| hook.stopped()).collect();
    let mut publishers = Vec::new();
    if let Some(brokers) = &settings.brokers {
        for (partition, hook) in &held {
            let name = format!("serve shard {partition}");
            let path = dir.path_of(*partition);
            publishers.push((*partition, start_publisher(&name, &path, hook, brokers, &settings)?));
        }
    }
    let mut deliverers = Vec::new();
    for (partition, _) in &held {
        let name = format!("serve shard {partition}");
        deliverers.push(start_deliverer(&name, &dir.path_of(*partition), &settings, &metrics)?);
    }
    drop(held);
    let outbox = (!publishers.is_empty())
        .then(|| Outboxes::Shards(publishers.iter().map(|(p, publisher)| (*p, publisher.health())).collect()));
    let admin = changes::Admin::new(changes::AdminLedgers::Shards(dir.clone()));
    let app = App {
        hook: Hooks::Shards(Arc::new(shards)),
        tokens,
        outbox,
        routing: None,
        metrics,
        admin,
        publish: publish_of(&settings),
        events: events_sender(&settings)?,
    };
    let publishers = publishers.into_iter().map(|(_, publisher)| publisher).collect();
    serve(app, writers, Background { publishers, deliverers }, prepared, &settings, listening, None)
}

/// Why a `node` asks its server to stop (its consumer failed, say): said in [`ServeError::Stopped`].
pub type StopAsked = std::pin::Pin<Box<dyn std::future::Future<Output = String> + Send>>;

/// [`run_shards`] for a node of a cluster: the router `shards` holds the partitions Kafka gives the node and changes
/// while it serves (the node adds and removes them); `routing` names the owners of the others; `registry` holds the
/// node's other figures (its ingest's), which `/metrics` answers beside the server's, and `hook_metrics` there
/// (registered by [`crate::metrics::HookMetrics::register`] before the shards' hooks start, whose stages
/// [`stage_timer`] times into them). Serves until SIGTERM or
/// Ctrl-C, a writer stopped on a panic, or `stop` answers. Waiting for the shards' writers to close is the node's.
pub fn run_node(
    shards: Arc<Shards>,
    routing: Arc<dyn Routing>,
    settings: ServeSettings,
    listening: impl FnOnce(Listening) -> std::io::Result<()>,
    stop: StopAsked,
    registry: telemetry::Registry,
    hook_metrics: Arc<crate::metrics::HookMetrics>,
) -> Result<(), ServeError> {
    let prepared = prepare(&settings)?;
    let tokens = Tokens::read(&settings.tokens)?;
    let prepared = Prepared { tls: settings.tls.as_ref().map(tls::acceptor).transpose()?, ..prepared };
    let app = App {
        hook: Hooks::Shards(shards),
        tokens,
        outbox: None,
        routing: Some(routing),
        metrics: app::Metrics::registered(registry, hook_metrics),
        admin: changes::Admin::new(changes::AdminLedgers::None),
        publish: publish_of(&settings),
        events: events_sender(&settings)?,
    };
    serve(app, Vec::new(), Background::default(), prepared, &settings, listening, Some(stop))
}

/// What is checked and made before a hook starts: the listening address allowed, the bound of connections, and
/// (after the token file is read) TLS.
struct Prepared {
    connections_max: usize,
    tls: Option<tokio_rustls::TlsAcceptor>,
    /// With `--rls-listen`: its mapping, and its TLS acceptor (ALPN `h2`).
    rls: Option<(rls::config::RlsConfig, Option<tokio_rustls::TlsAcceptor>)>,
}

fn prepare(settings: &ServeSettings) -> Result<Prepared, ServeError> {
    let listens = std::iter::once(settings.listen).chain(settings.rls.as_ref().map(|rls| rls.listen));
    for address in listens {
        if settings.tls.is_none() && !settings.insecure_listen && !tls::is_loopback(&address) {
            return Err(ServeError::InsecureListen { address });
        }
    }
    let files_limit = limits::raise_open_files();
    let connections_max = limits::connections_max(settings.connections_max, files_limit)?;
    let rls = match &settings.rls {
        Some(rls) => {
            let grpc_tls = settings.tls.as_ref().map(tls::grpc_acceptor).transpose()?;
            Some((rls::config::RlsConfig::read(&rls.config)?, grpc_tls))
        }
        None => None,
    };
    Ok(Prepared { connections_max, tls: None, rls })
}

/// The threads a server runs beside the hook: the outboxes' publishers and the webhooks' deliverers.
#[derive(Default)]
struct Background {
    publishers: Vec<PublisherThread>,
    deliverers: Vec<webhooks::Deliverer>,
}

/// Serves `app` until SIGTERM or Ctrl-C (or a writer stopped on a panic), then stops the publishers and deliverers
/// and waits for the `writers` to close their ledgers.
fn serve(
    app: App,
    writers: Vec<Stopped>,
    background: Background,
    prepared: Prepared,
    settings: &ServeSettings,
    listening: impl FnOnce(Listening) -> std::io::Result<()>,
    stop: Option<StopAsked>,
) -> Result<(), ServeError> {
    let watched = app.hook.clone();
    let stop_reason = Arc::new(std::sync::Mutex::new(None));
    let said = Arc::clone(&stop_reason);
    let app = Arc::new(app);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(ServeError::Runtime)?;
    let read_timeout = Duration::from_millis(settings.read_timeout_ms.max(1));
    let accepting = connections::Accepting {
        connections_max: prepared.connections_max,
        places: Arc::new(tokio::sync::Semaphore::new(prepared.connections_max)),
        header_timeout: Duration::from_millis(settings.header_timeout_ms.max(1)),
        tls: prepared.tls,
    };
    let address = settings.listen;
    let rls_address = settings.rls.as_ref().map(|rls| rls.listen);
    let served = runtime.block_on(async move {
        let listener =
            tokio::net::TcpListener::bind(address).await.map_err(|source| ServeError::Listen { address, source })?;
        let rls_listener = match rls_address {
            Some(address) => Some(
                tokio::net::TcpListener::bind(address)
                    .await
                    .map_err(|source| ServeError::Listen { address, source })?,
            ),
            None => None,
        };
        let at = Listening {
            address: listener.local_addr().map_err(ServeError::Announce)?,
            tls: accepting.tls.is_some(),
            rls: rls_listener.as_ref().map(|l| l.local_addr()).transpose().map_err(ServeError::Announce)?,
        };
        let signals = connections::Signals::listen().map_err(ServeError::Runtime)?;
        listening(at).map_err(ServeError::Announce)?;
        systemd::ready(&watched);
        let writer_stopped = async move {
            watched.writer_stopped().await;
            tracing::error!(
                exit_in_ms = WRITER_STOPPED_EXIT_MS,
                "serve: the hook's writer stopped: every request fails and /healthz answers 503; stopping, to be \
                 restarted"
            );
            tokio::time::sleep(Duration::from_millis(WRITER_STOPPED_EXIT_MS)).await;
        };
        let asked = async move {
            let stop = async move {
                match stop {
                    Some(stop) => stop.await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = writer_stopped => {}
                why = stop => *said.lock().unwrap_or_else(|e| e.into_inner()) = Some(why),
            }
        };
        let stop = connections::stop_watch(signals, asked);
        let rls_served = match (rls_listener, prepared.rls) {
            (Some(listener), Some((config, tls))) => {
                let router = rls::router(Arc::new(rls::Rls { app: Arc::clone(&app), config }));
                let accepting = connections::Accepting { tls, ..accepting.clone() };
                let serving = connections::serve_connections(
                    listener,
                    router,
                    accepting,
                    connections::Protocol::Http2,
                    stop.clone(),
                );
                Some(tokio::spawn(serving))
            }
            _ => None,
        };
        let router = routes::router(Arc::clone(&app), read_timeout);
        let stopped =
            connections::serve_connections(listener, router, accepting, connections::Protocol::Http1, stop).await;
        if let Some(rls_served) = rls_served {
            // It stops on the same signal, its requests in flight answered within the same wait.
            let _ = rls_served.await;
        }
        systemd::stopping();
        Ok::<_, ServeError>((stopped, app.hook.last_failure()))
    });
    let (stopped, last_failure) = served?;
    // Stopping: the runtime's tasks hold the last handles to the hooks, the publishers one more. Once all are dropped
    // each writer records what was queued and closes its ledger, and SQLite folds the write-ahead log into the
    // ledger file and removes it: the file alone then holds every decision (a backup copying only it loses none).
    // Exiting without waiting left the log beside it, about 70 MB under load.
    drop(runtime);
    for publisher in background.publishers {
        publisher.stop();
    }
    for deliverer in background.deliverers {
        deliverer.stop();
    }
    let until = std::time::Instant::now() + Duration::from_millis(SHUTDOWN_WAIT_MS);
    for writer in writers {
        if !writer.wait(until.saturating_duration_since(std::time::Instant::now())) {
            tracing::warn!(
                wait_ms = SHUTDOWN_WAIT_MS,
                "serve: a hook's writer had not stopped in time; exiting without it"
            );
            break;
        }
    }
    match stopped {
        connections::Stop::Signal => Ok(()),
        connections::Stop::Asked => {
            if let Some(why) = stop_reason.lock().unwrap_or_else(|e| e.into_inner()).take() {
                return Err(ServeError::Stopped(why));
            }
            let why = last_failure.unwrap_or_else(|| "the hook's writer stopped".to_string());
            Err(ServeError::WriterStopped(why))
        }
    }
}

/// The webhooks' deliverer of the ledger at `ledger_path`: its connection its own, its attempts counted in the
/// server's figures.
fn start_deliverer(
    name: &str,
    ledger_path: &Path,
    settings: &ServeSettings,
    metrics: &app::Metrics,
) -> Result<webhooks::Deliverer, ServeError> {
    let (settings, figures) = (settings.webhooks, Arc::clone(&metrics.webhooks));
    webhooks::Deliverer::spawn(name, ledger_path.to_path_buf(), settings, figures).map_err(ServeError::Webhooks)
}

/// The outbox's publisher thread: the outbox read through a connection of its own, the acknowledgements recorded
/// by the hook's writer ([`HookOutbox`]); published to `brokers` with the producer settings and format of `settings`.
fn start_publisher(
    name: &str,
    ledger_path: &Path,
    hook: &Hook,
    brokers: &str,
    settings: &ServeSettings,
) -> Result<PublisherThread, ServeError> {
    let outbox = HookOutbox { reader: Ledger::open(ledger_path)?, hook: hook.clone() };
    let (overrides, format) = (&settings.overrides, settings.outbox_format.clone());
    Ok(PublisherThread::spawn(name, ledger_path.to_path_buf(), brokers, overrides, format, outbox)?)
}
