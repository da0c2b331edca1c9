//! What operators scrape: the figures of `ingest`, `serve` and `node` in the Prometheus text format (OpenMetrics), by
//! the Prometheus project's Rust client, `prometheus-client`. Every name starts with `quota_ledger_`, says its unit
//! (`_seconds`, `_messages`) and ends counters with `_total`, as Prometheus' naming conventions ask; the names are
//! listed in docs/operations.md ("What to monitor"), which ships alerting rules over them.
//!
//! Each process keeps one [`Registry`]; each part registers its families into it ([`IngestMetrics::register`],
//! [`HookMetrics::register`]) and [`encode`] renders it for `GET /metrics`: on `serve`'s own listener, or on a
//! listener of its own ([`MetricsServer`]) for `ingest --metrics-listen`.
//!
//! ```
//! let mut registry = telemetry::registry();
//! let hook = telemetry::HookMetrics::register(&mut registry);
//! hook.decided("OK", Some("requests"), Some(3));
//! hook.decided("OK", None, None); // a metric no policy names
//! let text = telemetry::encode(&registry);
//! assert!(text.contains(r#"quota_ledger_decisions_total{code="OK",metric="requests",policy_version="3"} 1"#));
//! assert!(text.contains(r#"quota_ledger_decisions_total{code="OK",metric="other",policy_version=""} 1"#));
//! ```

#![deny(missing_docs)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
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

/// A Kafka partition of an input topic.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PartitionLabels {
    /// The topic.
    pub topic: String,
    /// The partition's number.
    pub partition: String,
}

/// What became of a consumed message.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `recorded`, `duplicate`, `conflict`, `quarantined` or `forwarded`.
    pub outcome: &'static str,
}

/// The figures of a Kafka ingest (`ingest --brokers`, `node`).
#[derive(Debug)]
pub struct IngestMetrics {
    messages: Counter,
    events: Family<OutcomeLabels, Counter>,
    batches: Counter,
    lag: Family<PartitionLabels, Gauge>,
    quarantined: Family<ReasonLabels, Counter>,
    /// The cumulative figures last observed, whose increase the counters are given.
    seen: Mutex<Seen>,
}

/// Why a message was quarantined.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// The quarantine's reason code (`unknown_fingerprint`, `malformed_body`, `unknown_schema_id`, ...).
    pub reason: String,
}

#[derive(Debug, Default)]
struct Seen {
    messages: u64,
    recorded: u64,
    duplicates: u64,
    conflicts: u64,
    quarantined: u64,
    forwarded: u64,
    batches: u64,
    quarantined_by_reason: std::collections::BTreeMap<String, u64>,
}

impl IngestMetrics {
    /// Registers the ingest families into `registry`.
    pub fn register(registry: &mut Registry) -> Arc<IngestMetrics> {
        let metrics = IngestMetrics {
            messages: Counter::default(),
            events: Family::default(),
            batches: Counter::default(),
            lag: Family::default(),
            quarantined: Family::default(),
            seen: Mutex::new(Seen::default()),
        };
        registry.register("ingest_messages", "Kafka messages consumed", metrics.messages.clone());
        registry.register(
            "ingest_events",
            "Consumed messages by outcome: recorded (new), duplicate (counted once), conflict (same event_id, \
             another payload; kept, never counted), quarantined (failed to decode or validate), forwarded (read in \
             another tenant's partition)",
            metrics.events.clone(),
        );
        registry.register("ingest_batches", "Ledger appends (one transaction each)", metrics.batches.clone());
        registry.register(
            "ingest_quarantined",
            "Messages quarantined, by reason code (as read: a message read again after a crash counts again)",
            metrics.quarantined.clone(),
        );
        registry.register(
            "ingest_lag_messages",
            "Messages of a partition not yet in the ledger: the brokers' high watermark less the ledger's next offset",
            metrics.lag.clone(),
        );
        Arc::new(metrics)
    }

    /// Observes ingest's progress (cumulative since it started): the counters grow by what it added.
    pub fn observe(&self, progress: &ingest::KafkaIngestProgress) {
        let mut seen = self.seen.lock().expect("never poisoned");
        let grow = |counter: &Counter, seen: &mut u64, now: u64| {
            counter.inc_by(now.saturating_sub(*seen));
            *seen = (*seen).max(now);
        };
        grow(&self.messages, &mut seen.messages, progress.messages);
        grow(&self.batches, &mut seen.batches, progress.batches);
        let outcome = |outcome| self.events.get_or_create(&OutcomeLabels { outcome }).clone();
        grow(&outcome("recorded"), &mut seen.recorded, progress.recorded);
        grow(&outcome("duplicate"), &mut seen.duplicates, progress.duplicates);
        grow(&outcome("conflict"), &mut seen.conflicts, progress.conflicts);
        grow(&outcome("quarantined"), &mut seen.quarantined, progress.quarantined);
        grow(&outcome("forwarded"), &mut seen.forwarded, progress.forwarded);
        for (reason, now) in &progress.quarantined_by_reason {
            let counter = self.quarantined.get_or_create(&ReasonLabels { reason: reason.clone() }).clone();
            grow(&counter, seen.quarantined_by_reason.entry(reason.clone()).or_insert(0), *now);
        }
    }
}

impl ingest::LagListener for IngestMetrics {
    fn lag(&self, topic: &str, partition: i32, high: i64, next: i64) {
        let labels = PartitionLabels { topic: topic.to_string(), partition: partition.to_string() };
        self.lag.get_or_create(&labels).set((high - next).max(0));
    }
}

/// How far a node's standby copies (`node --standby`) are behind their partitions: whether a takeover would start
/// warm.
#[derive(Debug, Default)]
pub struct StandbyMetrics {
    lag: Family<PartitionLabels, Gauge>,
}

impl StandbyMetrics {
    /// Registers the standby's family into `registry`.
    pub fn register(registry: &mut Registry) -> Arc<StandbyMetrics> {
        let metrics = StandbyMetrics::default();
        registry.register(
            "standby_lag_messages",
            "Messages of a partition not yet in this node's standby copy of its shard: the brokers' high watermark \
             less the copy's next offset",
            metrics.lag.clone(),
        );
        Arc::new(metrics)
    }

    /// The copy of `partition` is no longer held: its series go, rather than stay at their last value.
    pub fn forget(&self, topics: &[&str], partition: u32) {
        for topic in topics {
            self.lag.remove(&PartitionLabels { topic: topic.to_string(), partition: partition.to_string() });
        }
    }
}

impl ingest::LagListener for StandbyMetrics {
    fn lag(&self, topic: &str, partition: i32, high: i64, next: i64) {
        let labels = PartitionLabels { topic: topic.to_string(), partition: partition.to_string() };
        self.lag.get_or_create(&labels).set((high - next).max(0));
    }
}

/// The `metric` label of a decision of a metric no policy names: one series for every such name, whatever callers
/// send.
pub const OTHER_METRIC: &str = "other";

/// A decision's code, metric and the version of the policy that decided. Every value is bounded by what operators
/// configure, never by what callers send: a label value is a series for as long as the process runs.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// `OK`, `QUOTA_EXCEEDED`, `RATE_LIMITED`, `CONCURRENCY_LIMITED`, `FAIL_OPEN` (contract §6).
    pub code: String,
    /// The metric asked for when a policy names it; [`OTHER_METRIC`] otherwise.
    pub metric: String,
    /// The deciding policy's version (a version the hook's policies hold); empty when no policy applied, and for
    /// [`OTHER_METRIC`].
    pub policy_version: String,
}

/// A stage of a decision's way through the hook's writer (`hook::Stage`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabels {
    /// `queue_wait`, `replicate`, `group_commit` or `sync`.
    pub stage: &'static str,
}

/// A histogram of a stage's durations: 10 µs (a queue wait behind nothing) to 5.2 s (a stalled disk or broker),
/// doubling.
fn stage_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_01, 2.0, 20))
}

/// The figures of the enforcement hook over HTTP (`serve`, `node`).
#[derive(Debug)]
pub struct HookMetrics {
    decisions: Family<DecisionLabels, Counter>,
    duration: Histogram,
    stages: Family<StageLabels, Histogram>,
    outbox_pending: Gauge,
    outbox_oldest_age: Gauge<f64, std::sync::atomic::AtomicU64>,
    queue_depth: Gauge,
    reservations_open: Gauge,
    reservation_oldest_age: Gauge<f64, std::sync::atomic::AtomicU64>,
    leases_open: Gauge,
    lease_oldest_age: Gauge<f64, std::sync::atomic::AtomicU64>,
    tenants_near_limit: Gauge,
    tenants_at_limit: Gauge,
    failed_groups: Counter,
    /// The failed groups last observed, whose increase the counter is given.
    failed_seen: Mutex<u64>,
}

impl HookMetrics {
    /// Registers the hook's families into `registry`.
    pub fn register(registry: &mut Registry) -> Arc<HookMetrics> {
        // 100 µs to 3.3 s, doubling: a group commit with fsync is about a millisecond, a stalled disk seconds.
        let duration = Histogram::new(exponential_buckets(0.0001, 2.0, 16));
        let metrics = HookMetrics {
            decisions: Family::default(),
            duration,
            stages: Family::new_with_constructor(stage_histogram),
            outbox_pending: Gauge::default(),
            outbox_oldest_age: Gauge::default(),
            queue_depth: Gauge::default(),
            reservations_open: Gauge::default(),
            reservation_oldest_age: Gauge::default(),
            leases_open: Gauge::default(),
            lease_oldest_age: Gauge::default(),
            tenants_near_limit: Gauge::default(),
            tenants_at_limit: Gauge::default(),
            failed_groups: Counter::default(),
            failed_seen: Mutex::new(0),
        };
        registry.register(
            "decisions",
            "Decisions answered (checks and reservations; replays included), by code, metric (other: every metric no \
             policy names) and policy version",
            metrics.decisions.clone(),
        );
        registry.register(
            "decision_duration_seconds",
            "Time from a check's or reservation's request read to its answer: queue wait, group commit and sync",
            metrics.duration.clone(),
        );
        registry.register(
            "hook_stage_duration_seconds",
            "Time a decision spends in each stage of the hook's writer: queue_wait per request; replicate (publish to \
             Kafka, durability replicated), group_commit (the ledger transaction) and sync (the wait for the log's \
             fsync, durability full) per group",
            metrics.stages.clone(),
        );
        registry.register(
            "hook_queue_depth_requests",
            "Requests queued for the hook's writers now (8,192 per writer refuses more: 503 overloaded)",
            metrics.queue_depth.clone(),
        );
        registry.register(
            "reservations_open",
            "Reservations open now, holding against limits until committed, released or expired",
            metrics.reservations_open.clone(),
        );
        registry.register(
            "reservation_oldest_age_seconds",
            "How long the oldest open reservation has been open (0 when none is): a worker that never closes",
            metrics.reservation_oldest_age.clone(),
        );
        registry.register(
            "leases_open",
            "Leases active now, each holding a slot of a CONCURRENT policy until released or expired",
            metrics.leases_open.clone(),
        );
        registry.register(
            "lease_oldest_age_seconds",
            "How long ago the oldest active lease was acquired (0 when none is): a worker renewing and never releasing",
            metrics.lease_oldest_age.clone(),
        );
        registry.register(
            "tenants_near_limit",
            "Tenants at 80% or more of an effective limit (HARD or SOFT) now",
            metrics.tenants_near_limit.clone(),
        );
        registry.register(
            "tenants_at_limit",
            "Tenants at or beyond 100% of an effective limit (HARD or SOFT) now",
            metrics.tenants_at_limit.clone(),
        );
        registry.register(
            "hook_failed_groups",
            "Groups of requests the ledger could not record (a full disk, an I/O error): each request answered 500",
            metrics.failed_groups.clone(),
        );
        registry.register(
            "outbox_pending_events",
            "Events the hook recorded that are not yet acknowledged by Kafka",
            metrics.outbox_pending.clone(),
        );
        registry.register(
            "outbox_oldest_pending_age_seconds",
            "How long the oldest hook event not yet acknowledged by Kafka has waited (0 when none waits)",
            metrics.outbox_oldest_age.clone(),
        );
        Arc::new(metrics)
    }

    /// A decision answered `code` for `metric` (`None`: a metric no policy names, counted under [`OTHER_METRIC`])
    /// under `policy_version`. A caller may send any metric name, and each name made a label would be a series kept
    /// until the process ends: callers could grow the server's memory and every scrape's size without end. The names
    /// policies give are the operators' to bound, and a deciding policy's version is one of theirs too.
    pub fn decided(&self, code: &str, metric: Option<&str>, policy_version: Option<i32>) {
        let (metric, policy_version) = match metric {
            Some(metric) => (metric, policy_version.map(|v| v.to_string()).unwrap_or_default()),
            // A gauge quota refuses requests of any metric: its version beside `other` would split `other` by version
            // for no reader's use.
            None => (OTHER_METRIC, String::new()),
        };
        let labels = DecisionLabels { code: code.to_string(), metric: metric.to_string(), policy_version };
        self.decisions.get_or_create(&labels).inc();
    }

    /// A request for a decision (a check or a reservation) answered `took` after its body was read.
    pub fn answered(&self, took: Duration) {
        self.duration.observe(took.as_secs_f64());
    }

    /// A stage of the hook's writer (`hook::Stage::name`) took `took`.
    pub fn stage(&self, stage: &'static str, took: Duration) {
        self.stages.get_or_create(&StageLabels { stage }).observe(took.as_secs_f64());
    }

    /// The writers' queue depth now, and the groups failed since the start.
    pub fn writer(&self, queued: usize, failed_groups: u64) {
        self.queue_depth.set(i64::try_from(queued).unwrap_or(i64::MAX));
        let mut seen = self.failed_seen.lock().expect("never poisoned");
        self.failed_groups.inc_by(failed_groups.saturating_sub(*seen));
        *seen = (*seen).max(failed_groups);
    }

    /// The state's figures: open reservations, the oldest's age, tenants near (80%) and at (100%) a limit.
    pub fn state(&self, open: u64, oldest_age_seconds: f64, near: u64, at: u64) {
        let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.reservations_open.set(gauge(open));
        self.reservation_oldest_age.set(oldest_age_seconds);
        self.tenants_near_limit.set(gauge(near));
        self.tenants_at_limit.set(gauge(at));
    }

    /// The state's leases: how many are active, and how long ago the oldest was acquired (seconds).
    pub fn leases(&self, open: u64, oldest_age_seconds: f64) {
        self.leases_open.set(i64::try_from(open).unwrap_or(i64::MAX));
        self.lease_oldest_age.set(oldest_age_seconds);
    }

    /// The outbox's pending events, as its publisher last saw them, and how long the oldest has waited (seconds).
    pub fn outbox_pending(&self, pending: u64, oldest_age_seconds: f64) {
        self.outbox_pending.set(i64::try_from(pending).unwrap_or(i64::MAX));
        self.outbox_oldest_age.set(oldest_age_seconds);
    }
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
                        Err(error) => return tracing::error!("metrics: cannot listen: {error}"),
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
                        tracing::error!("metrics: the listener stopped: {error}");
                    }
                })
            })
            .map_err(error)?;
        Ok(MetricsServer { address: bound })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ingest_counters_grow_by_what_progress_added() {
        let mut registry = registry();
        let metrics = IngestMetrics::register(&mut registry);
        let mut progress = ingest::KafkaIngestProgress {
            messages: 10,
            recorded: 7,
            duplicates: 2,
            quarantined: 1,
            ..Default::default()
        };
        metrics.observe(&progress);
        progress.messages = 15;
        progress.recorded = 12;
        metrics.observe(&progress);
        metrics.observe(&progress);
        ingest::LagListener::lag(&*metrics, "quota.usage", 2, 40, 25);
        let text = encode(&registry);
        assert!(text.contains("quota_ledger_ingest_messages_total 15"), "{text}");
        assert!(text.contains(r#"quota_ledger_ingest_events_total{outcome="recorded"} 12"#), "{text}");
        assert!(text.contains(r#"quota_ledger_ingest_events_total{outcome="duplicate"} 2"#), "{text}");
        assert!(text.contains(r#"quota_ledger_ingest_lag_messages{topic="quota.usage",partition="2"} 15"#), "{text}");
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
