//! What operators read and scrape, and how. Logs: [`logs::init`], text or JSON lines on stderr. Metrics: the
//! Prometheus text format (OpenMetrics) by the Prometheus project's Rust client, `prometheus-client`, for every
//! process. Each stage owns its families (`ingest::metrics`, `serve::metrics`) and
//! registers them into the process's one [`Registry`]; [`encode`] renders it for `GET /metrics`, on `serve`'s own
//! listener or on a listener of its own ([`MetricsServer`]) for `ingest --metrics-listen`; and a job's run writes its
//! figures for the node exporter's textfile collector ([`Textfile`]). A leaf: it knows no stage. Every name starts
//! with `quota_ledger_`, says its unit (`_seconds`, `_messages`) and ends counters with `_total`, as Prometheus'
//! naming conventions ask; the names are listed in docs/operations.md ("What to monitor"), which ships alerting rules
//! over them.
//!
//! ```
//! use prometheus_client::metrics::counter::Counter;
//!
//! let mut registry = telemetry::registry();
//! let runs = Counter::<u64>::default();
//! registry.register("runs", "Runs", runs.clone());
//! runs.inc();
//! assert!(telemetry::encode(&registry).contains("quota_ledger_runs_total 1"));
//! ```

#![deny(missing_docs)]

pub mod logs;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
pub use prometheus_client::registry::Registry;

/// The `Content-Type` of [`encode`]'s text: OpenMetrics, which Prometheus reads.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A registry whose every name starts with `quota_ledger_`.
pub fn registry() -> Registry {
    Registry::with_prefix("quota_ledger")
}

/// The registry's families in the OpenMetrics text format.
pub fn encode(registry: &Registry) -> String {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry).expect("writing to a String cannot fail");
    text
}

/// `GET /metrics` on a listener of its own, for a process without an HTTP server (`ingest --metrics-listen`),
/// answered by a thread of its own until the process ends.
#[derive(Debug)]
pub struct MetricsServer {
    /// The address it listens on (the port chosen when 0 was asked).
    pub address: SocketAddr,
}

/// The metrics listener could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen for /metrics on {address}")]
pub struct ListenError {
    /// The address asked for.
    pub address: String,
    /// Why.
    pub source: std::io::Error,
}

impl MetricsServer {
    /// Listens on `address` and answers `GET /metrics` with `registry` rendered at each scrape.
    pub fn start(address: &str, registry: Arc<Mutex<Registry>>) -> Result<MetricsServer, ListenError> {
        let error = |source| ListenError { address: address.to_string(), source };
        let listener = std::net::TcpListener::bind(address).map_err(error)?;
        listener.set_nonblocking(true).map_err(error)?;
        let bound = listener.local_addr().map_err(error)?;
        let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build().map_err(error)?;
        std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(listener) => listener,
                        Err(error) => return tracing::error!(%error, "metrics: cannot listen"),
                    };
                    let app = axum::Router::new().route(
                        "/metrics",
                        axum::routing::get(move || {
                            let registry = registry.clone();
                            async move {
                                let text = encode(&registry.lock().expect("never poisoned"));
                                ([(axum::http::header::CONTENT_TYPE, CONTENT_TYPE)], text)
                            }
                        }),
                    );
                    if let Err(error) = axum::serve(listener, app).await {
                        tracing::error!(%error, "metrics: the listener stopped");
                    }
                })
            })
            .map_err(error)?;
        Ok(MetricsServer { address: bound })
    }
}

/// The figures of one run of a job (`reconcile`, `export billing`) for the node exporter's textfile collector
/// (`--metrics-file`): gauges only, in the Prometheus text format, written whole under a temporary name and renamed,
/// as the collector asks, so that it never reads half a file.
#[derive(Debug)]
pub struct Textfile {
    registry: Registry,
}

impl Default for Textfile {
    fn default() -> Textfile {
        Textfile { registry: registry() }
    }
}

impl Textfile {
    /// A gauge `quota_ledger_NAME` of `value`.
    pub fn gauge(&mut self, name: &str, help: &str, value: f64) {
        let gauge = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        gauge.set(value);
        self.registry.register(name, help, gauge);
    }

    /// A family of gauges `quota_ledger_NAME{label="..."}`, one per `(label value, value)`.
    pub fn gauges(&mut self, name: &str, help: &str, label: &str, values: &[(String, f64)]) {
        let family = Family::<Vec<(String, String)>, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        for (labelled, value) in values {
            family.get_or_create(&vec![(label.to_string(), labelled.clone())]).set(*value);
        }
        self.registry.register(name, help, family);
    }

    /// The text: OpenMetrics without its `# EOF` line, which is the Prometheus text format for gauges.
    pub fn text(&self) -> String {
        encode(&self.registry).trim_end_matches("# EOF\n").to_string()
    }

    /// Writes the text to `path` through `path.tmp` and a rename.
    pub fn write(&self, path: &std::path::Path) -> std::io::Result<()> {
        let mut partial = path.as_os_str().to_os_string();
        partial.push(".tmp");
        std::fs::write(&partial, self.text())?;
        std::fs::rename(&partial, path)
    }
}

/// Seconds since the Unix epoch, now: the `_timestamp_seconds` of a job's figures.
pub fn now_seconds() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}
