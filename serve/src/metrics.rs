//! The figures of the enforcement hook over HTTP (`serve`, `node`), registered into the process's registry
//! (`telemetry`): decisions by code, metric and policy version, their durations and the writer's stages, queue depth,
//! open reservations and leases, tenants near and at their limits, and the outbox's backlog.
//!
//! ```
//! let mut registry = telemetry::registry();
//! let hook = serve::metrics::HookMetrics::register(&mut registry);
//! hook.decided("OK", Some("requests"), Some(3));
//! hook.decided("OK", None, None); // a metric no policy names
//! let text = telemetry::encode(&registry);
//! assert!(text.contains(r#"quota_ledger_decisions_total{code="OK",metric="requests",policy_version="3"} 1"#));
//! assert!(text.contains(r#"quota_ledger_decisions_total{code="OK",metric="other",policy_version=""} 1"#));
//! ```

use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use telemetry::Registry;

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

/// Times the stages of a hook's decisions (`hook::Stage`) into `metrics`' `hook_stage_duration_seconds`.
pub fn stage_timer(metrics: &Arc<HookMetrics>) -> hook::StageTimer {
    let metrics = Arc::clone(metrics);
    hook::StageTimer::new(move |stage, took| metrics.stage(stage.name(), took))
}
