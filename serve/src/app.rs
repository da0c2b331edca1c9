//! What every handler of the server shares ([`App`]): the hook (one, or a shard per partition), the callers' tokens,
//! the outboxes' health, the routing of a cluster, the figures, where admin changes are recorded and where a
//! reconcile publishes; and how a decision is answered and counted.

use std::sync::Arc;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use hook::{Decision, HookError};

use crate::answer::{decision_response, decisions_response, hook_error};
use crate::hooks::Hooks;
use crate::tokens::Tokens;

/// Who owns each partition of a cluster, as a `node` knows it from the routing catalog: what `GET /v1/routing`
/// answers and the owner a 421 names.
pub trait Routing: Send + Sync {
    /// The URL of `partition`'s owner, if the catalog names one.
    fn owner_url(&self, partition: u32) -> Option<String>;
    /// The body of `GET /v1/routing`: `{partitions, owners: [{partition, node_id, url, epoch}]}`.
    fn table(&self) -> serde_json::Value;
    /// This node's shards and the state each is in (`[{partition, state, since, seconds}]`), for `GET
    /// /v1/admin/status`: the ones in transition are what `status --cluster` shows an operator.
    fn shard_states(&self) -> serde_json::Value {
        serde_json::Value::Array(Vec::new())
    }
    /// Leaves the consumer group (`POST /v1/admin/drain`): the group gives this node's partitions to the others now.
    /// Answers whether this server can (a node can; a `serve` is in no group).
    fn drain(&self) -> bool {
        false
    }
    /// Whether [`Routing::drain`] was asked.
    fn draining(&self) -> bool {
        false
    }
    /// Records `partition` in the catalog again, naming this node, if it serves it (`POST
    /// /v1/admin/routing/claim`, which `catalog --repair` asks): the epoch published, or why not.
    fn claim(&self, partition: u32) -> Result<i64, ClaimRefused> {
        Err(ClaimRefused::NotServing(format!("this server does not serve partition {partition}")))
    }
}

/// Why a node did not record a partition again ([`Routing::claim`]).
#[derive(Debug)]
pub enum ClaimRefused {
    /// It does not serve the partition: the reason.
    NotServing(String),
    /// Publishing the entry failed: the reason.
    Failed(String),
}

/// What every handler shares.
pub(crate) struct App {
    pub(crate) hook: Hooks,
    pub(crate) tokens: Tokens,
    /// With brokers: the outbox as the publisher last saw it, for `/healthz`; one per shard with `--data`, by
    /// partition.
    pub(crate) outbox: Option<Outboxes>,
    /// In a cluster (`node`): who owns each partition, for `GET /v1/routing` and the owner a 421 names.
    pub(crate) routing: Option<Arc<dyn Routing>>,
    /// What `GET /metrics` answers.
    pub(crate) metrics: Metrics,
    /// Where `POST /v1/admin/...` records changes.
    pub(crate) admin: crate::changes::Admin,
    /// Where `POST /v1/admin/reconcile` publishes a shard's adjustments: the server's brokers.
    pub(crate) publish: Option<usecases::run::Publish>,
    /// What `POST /v1/events` sends usage with, when the server has brokers.
    pub(crate) events: Option<crate::events::EventsSender>,
}

/// The server's figures (`GET /metrics`, docs/operations.md "What to monitor").
pub(crate) struct Metrics {
    pub(crate) registry: telemetry::Registry,
    pub(crate) hook: Arc<crate::metrics::HookMetrics>,
    /// The webhooks' deliverers' attempts, by outcome.
    pub(crate) webhooks: Arc<webhooks::metrics::WebhookMetrics>,
}

impl Metrics {
    pub(crate) fn new() -> Metrics {
        Metrics::with(telemetry::registry())
    }

    /// The server's figures registered beside those `registry` holds.
    pub(crate) fn with(mut registry: telemetry::Registry) -> Metrics {
        let hook = crate::metrics::HookMetrics::register(&mut registry);
        let webhooks = webhooks::metrics::WebhookMetrics::register(&mut registry);
        Metrics { registry, hook, webhooks }
    }

    /// The figures of `registry`, where the hook's (`hook`) are registered already.
    pub(crate) fn registered(mut registry: telemetry::Registry, hook: Arc<crate::metrics::HookMetrics>) -> Metrics {
        let webhooks = webhooks::metrics::WebhookMetrics::register(&mut registry);
        Metrics { registry, hook, webhooks }
    }

    /// The hook's settings with the stages of its decisions timed into these figures.
    pub(crate) fn timing(&self, settings: &hook::HookSettings) -> hook::HookSettings {
        hook::HookSettings { stages: Some(crate::metrics::stage_timer(&self.hook)), ..settings.clone() }
    }
}

impl App {
    /// The hook's answer, a request of `partition` (when known) that this server does not serve answered 421 with
    /// the owner the routing catalog names (docs/services.md, "Routing"), so that a client corrects its cache at once.
    pub(crate) fn decided_for(&self, partition: Option<u32>, result: Result<Decision, HookError>) -> Response {
        match result {
            Ok(decision) => {
                self.count(&decision);
                decision_response(decision)
            }
            Err(e) => self.refused(partition, e),
        }
    }

    /// The hook's answer to a request of several metrics, each metric's decision counted.
    pub(crate) fn several_decided(
        &self,
        partition: Option<u32>,
        result: Result<hook::Decisions, HookError>,
    ) -> Response {
        match result {
            Ok(decisions) => {
                for decision in &decisions.decisions {
                    self.count(decision);
                }
                decisions_response(decisions)
            }
            Err(e) => self.refused(partition, e),
        }
    }

    /// Counts `decision` in `/metrics`, its metric named only when a policy names it: the label's values are then the
    /// operators' metrics, not any name a caller sends.
    pub(crate) fn count(&self, decision: &Decision) {
        let code = format!("{:?}", decision.code);
        let metric = decision.metric_named.then_some(decision.metric.as_str());
        self.metrics.hook.decided(&code, metric, decision.policy_version);
    }

    pub(crate) fn refused(&self, partition: Option<u32>, e: HookError) -> Response {
        let partition = match &e {
            HookError::NotServing { partition, .. } => Some(*partition),
            HookError::Fenced(_) => partition,
            _ => return hook_error(e),
        };
        let owner = match (&self.routing, partition) {
            (Some(routing), Some(partition)) => routing.owner_url(partition),
            _ => None,
        };
        let body = serde_json::json!({
            "error": "not_serving",
            "code": "NOT_SERVING",
            "message": e.to_string(),
            "partition": partition,
            "owner": owner,
        });
        (StatusCode::MISDIRECTED_REQUEST, Json(body)).into_response()
    }

    /// The partition of `tenant` when this server routes by partition.
    pub(crate) fn partition_of(&self, tenant: &str) -> Option<u32> {
        match &self.hook {
            Hooks::One(_) => None,
            Hooks::Shards(shards) => Some(shards.partition_of(tenant)),
        }
    }
}

/// The outbox publishers' health: the ledger's one, or each shard's.
pub(crate) enum Outboxes {
    /// The publisher of the one ledger.
    One(outbox::HealthWatch),
    /// Each shard's publisher, by partition.
    Shards(Vec<(u32, outbox::HealthWatch)>),
}

impl Outboxes {
    /// What `/healthz` says under `outbox`: one ledger's as it is; the shards' as one outbox (`pending` summed,
    /// `as_of` the oldest pass, the first `last_error` naming its shard), so that an alert on `outbox.pending` reads
    /// both the same way, and each shard's under `shards`.
    pub(crate) fn report(&self) -> serde_json::Value {
        let shards = match self {
            Outboxes::One(watch) => return serde_json::json!(watch.latest()),
            Outboxes::Shards(shards) => shards,
        };
        let latest: Vec<(u32, outbox::OutboxHealth)> = shards.iter().map(|(p, w)| (*p, w.latest())).collect();
        let pending: u64 = latest.iter().map(|(_, h)| h.pending).sum();
        // RFC 3339 in UTC with a fixed number of digits: the text's order is the time's.
        let as_of = latest.iter().map(|(_, h)| h.as_of.clone()).min();
        let last_error =
            latest.iter().find_map(|(p, h)| h.last_error.as_ref().map(|error| format!("shard {p}: {error}")));
        let each: serde_json::Map<String, serde_json::Value> =
            latest.into_iter().map(|(p, h)| (p.to_string(), serde_json::json!(h))).collect();
        serde_json::json!({"pending": pending, "as_of": as_of, "last_error": last_error, "shards": each})
    }
}
