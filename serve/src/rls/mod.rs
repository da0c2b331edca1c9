//! Envoy's global rate limit service (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`, gRPC) over the
//! hook, on a listener of its own (`--rls-listen`), as Limitador and Lyft's ratelimit serve it to Envoy, Istio,
//! Contour and Envoy Gateway. Each descriptor of a request that the mapping file ([`config`]) maps becomes one
//! [`hook::Request`] checked exactly as `POST /v1/check` checks it: the same token (gRPC metadata `authorization:
//! Bearer SECRET`) and tenant scope, the same hook call, so the decision is recorded, published and found by `audit
//! why` as any other. The request id Envoy puts in a descriptor entry makes a retried call replay its decision.
//!
//! What is not mapped is not limited, as Limitador answers a namespace or descriptor it has no limit for: OK, nothing
//! recorded. A request without a domain is answered UNKNOWN, as Limitador does.

pub mod config;
pub mod proto;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use hook::{Decision, HookError};
use schemas::Timestamp;
use schemas::Who;
use tonic::Status;

use crate::app::App;
use crate::rls::config::{Mapping, RlsConfig, Source};
use crate::rls::proto::{Code, DescriptorStatus, RateLimitDescriptor, RateLimitRequest, RateLimitResponse};
use crate::tokens::Caller;

/// What the method answers from: the server's app (hook, tokens, figures) and the mapping file.
pub(crate) struct Rls {
    pub(crate) app: Arc<App>,
    pub(crate) config: RlsConfig,
}

/// The routes of the rate limit listener: the one method, and gRPC's UNIMPLEMENTED for any other path.
pub(crate) fn router(rls: Arc<Rls>) -> Router {
    Router::new()
        .route(proto::SHOULD_RATE_LIMIT_PATH, axum::routing::post(should_rate_limit))
        .fallback(|request: Request| async move {
            Status::unimplemented(format!(
                "no method {}: this port serves {}",
                request.uri().path(),
                proto::SHOULD_RATE_LIMIT_PATH
            ))
            .into_http::<axum::body::Body>()
        })
        .with_state(rls)
}

async fn should_rate_limit(State(rls): State<Arc<Rls>>, request: Request) -> Response {
    let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::<RateLimitResponse, RateLimitRequest>::default());
    grpc.unary(Method(rls), request).await.into_response()
}

/// The method as tonic's unary service.
struct Method(Arc<Rls>);

impl tonic::server::UnaryService<RateLimitRequest> for Method {
    type Response = RateLimitResponse;
    type Future =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<tonic::Response<RateLimitResponse>, Status>> + Send>>;

    fn call(&mut self, request: tonic::Request<RateLimitRequest>) -> Self::Future {
        let rls = Arc::clone(&self.0);
        Box::pin(async move {
            let caller =
                rls.app.tokens.caller(request.metadata().as_ref()).map_err(|u| Status::unauthenticated(u.message()))?;
            let started = std::time::Instant::now();
            let answer = rls.decide(&caller, request.into_inner()).await;
            rls.app.metrics.hook.answered(started.elapsed());
            answer.map(tonic::Response::new)
        })
    }
}

/// A descriptor as the hook is asked about it: its place in the request and its request; `None` when unmapped.
type Asked = (usize, Option<hook::Request>);

impl Rls {
    /// The answer to `request` from `caller`: every mapped descriptor admitted (its fields read, its tenant covered
    /// by the token) before any is checked, so that a refusal consumes nothing; then each checked in order.
    async fn decide(&self, caller: &Caller, request: RateLimitRequest) -> Result<RateLimitResponse, Status> {
        if request.domain.is_empty() {
            return Ok(RateLimitResponse { overall_code: Code::Unknown.into(), ..RateLimitResponse::default() });
        }
        if request.descriptors.is_empty() {
            return Err(Status::invalid_argument("the request has no descriptor: Envoy sends at least one"));
        }
        let asked = self.admit(caller, &request)?;
        let mut decisions: Vec<Option<Decision>> = Vec::with_capacity(asked.len());
        for (_, asked) in asked {
            let Some(hook_request) = asked else {
                decisions.push(None);
                continue;
            };
            let partition = self.app.partition_of(&hook_request.who.tenant);
            let decision =
                self.app.hook.check_async_as(hook_request, &caller.name).await.map_err(|e| status_of(e, partition))?;
            self.app.count(&decision);
            decisions.push(Some(decision));
        }
        Ok(response_of(&decisions))
    }

    fn admit(&self, caller: &Caller, request: &RateLimitRequest) -> Result<Vec<Asked>, Status> {
        let mut asked = Vec::with_capacity(request.descriptors.len());
        for (index, descriptor) in request.descriptors.iter().enumerate() {
            let keys: BTreeSet<&str> = descriptor.entries.iter().map(|e| e.key.as_str()).collect();
            let Some(mapping) = self.config.mapping(&request.domain, &keys) else {
                tracing::debug!("serve: rls: domain {:?}, descriptor {index}: no mapping; not limited", request.domain);
                asked.push((index, None));
                continue;
            };
            let hook_request = request_of(mapping, &request.domain, index, descriptor, request.hits_addend)
                .map_err(|what| Status::invalid_argument(format!("descriptor {index}: {what}")))?;
            if !caller.scope.covers(&hook_request.who.tenant) {
                let tenant = &hook_request.who.tenant;
                return Err(Status::permission_denied(format!("this token does not cover tenant {tenant:?}")));
            }
            asked.push((index, Some(hook_request)));
        }
        Ok(asked)
    }
}

/// Idempotency keys of descriptors without a request id: unique in this process (and across restarts, by the time).
static UNKEYED: AtomicU64 = AtomicU64::new(0);

/// The hook's request for `descriptor` (the `index`th of a request of `domain`), by `mapping`.
fn request_of(
    mapping: &Mapping,
    domain: &str,
    index: usize,
    descriptor: &RateLimitDescriptor,
    hits_addend: u32,
) -> Result<hook::Request, String> {
    let value = |source: &Source| -> String {
        match source {
            Source::Value(value) => value.clone(),
            // Present: the mapping matched the descriptor's keys.
            Source::Key(key) => {
                descriptor.entries.iter().find(|e| &e.key == key).map(|e| e.value.clone()).unwrap_or_default()
            }
        }
    };
    let who = Who {
        tenant: value(&mapping.tenant),
        subject: mapping.subject.as_ref().map(value),
        project: mapping.project.as_ref().map(value),
        api_key: mapping.api_key.as_ref().map(value),
    };
    // Envoy: a descriptor's own hits_addend overrides the request's; unset (0) means 1.
    let addend = descriptor.hits_addend.map_or(hits_addend, |h| h.value);
    let amount = match &mapping.amount {
        Some(source) => {
            let text = value(source);
            text.parse::<i64>().map_err(|_| format!("amount {text:?} is not a whole number"))?
        }
        None => i64::from(addend.max(1)),
    };
    let request_id = mapping
        .request_id
        .as_ref()
        .and_then(|key| descriptor.entries.iter().find(|e| &e.key == key))
        .map(|e| e.value.clone());
    // One key per descriptor of the request: Envoy's retry of the same call replays each descriptor's decision.
    let idempotency_key = match &request_id {
        Some(id) => format!("rls/{domain}/{index}/{id}"),
        None => {
            let n = UNKEYED.fetch_add(1, Ordering::Relaxed);
            format!("rls/{domain}/{index}/unkeyed-{:x}-{n}", Timestamp::now().micros())
        }
    };
    let mut request = hook::Request::one(who, value(&mapping.metric), amount, idempotency_key);
    request.request_id = request_id;
    Ok(request)
}

/// The answer: a status per descriptor in its order, OVER_LIMIT when any is, and the `ratelimit-*` headers (and
/// `retry-after`) of the deciding decision (the first denied, else the one with least remaining) to add to Envoy's
/// response, as `/v1/check` answers them.
fn response_of(decisions: &[Option<Decision>]) -> RateLimitResponse {
    let statuses = decisions.iter().map(|d| d.as_ref().map_or_else(not_limited, status_of_decision)).collect();
    let decided = decisions.iter().flatten();
    let denied = decided.clone().find(|d| !d.allowed());
    let deciding = denied.or_else(|| decided.filter(|d| d.remaining.is_some()).min_by_key(|d| d.remaining));
    let overall_code = if denied.is_some() { Code::OverLimit } else { Code::Ok };
    let response_headers_to_add = deciding
        .map(|d| crate::answer::rate_limit_headers(d, crate::answer::waits(d)))
        .unwrap_or_default()
        .into_iter()
        .map(|(key, value)| proto::HeaderValue { key: key.to_string(), value: value.to_string() })
        .collect();
    RateLimitResponse {
        overall_code: overall_code.into(),
        statuses,
        response_headers_to_add,
        ..RateLimitResponse::default()
    }
}

fn not_limited() -> DescriptorStatus {
    DescriptorStatus { code: Code::Ok.into(), ..DescriptorStatus::default() }
}

fn status_of_decision(decision: &Decision) -> DescriptorStatus {
    let code = if decision.allowed() { Code::Ok } else { Code::OverLimit };
    let clamp = |n: i64| u32::try_from(n.max(0)).unwrap_or(u32::MAX);
    let current_limit = decision.limit.map(|limit| proto::RateLimit {
        name: decision.policy_id.clone().unwrap_or_default(),
        requests_per_unit: clamp(limit),
        unit: unit_of(decision).into(),
    });
    let (_, reset_seconds) = crate::answer::waits(decision);
    DescriptorStatus {
        code: code.into(),
        current_limit,
        limit_remaining: decision.remaining.map_or(0, clamp),
        duration_until_reset: reset_seconds.map(|seconds| proto::Duration { seconds, nanos: 0 }),
    }
}

/// The unit of the deciding window, when its length is one of Envoy's units; UNKNOWN otherwise (a window of 10
/// seconds is not "per second").
fn unit_of(decision: &Decision) -> proto::Unit {
    let (Some(start), Some(end)) = (decision.window_start, decision.resets_at) else {
        return proto::Unit::Unknown;
    };
    const DAY: i64 = 86_400;
    match (end.micros() - start.micros()) / 1_000_000 {
        1 => proto::Unit::Second,
        60 => proto::Unit::Minute,
        3_600 => proto::Unit::Hour,
        DAY => proto::Unit::Day,
        604_800 => proto::Unit::Week,
        seconds if (28 * DAY..=31 * DAY).contains(&seconds) => proto::Unit::Month,
        seconds if seconds == 365 * DAY || seconds == 366 * DAY => proto::Unit::Year,
        _ => proto::Unit::Unknown,
    }
}

/// The hook's error as a gRPC status. What Envoy does with an error is its `failure_mode_deny`'s to say, so every
/// failure of this side (a full queue, the ledger, a shard this node does not hold) is UNAVAILABLE, as Limitador
/// answers its storage's errors; a malformed request is INVALID_ARGUMENT and a request id reused for another request
/// ALREADY_EXISTS, as `/v1/check` answers them 400 and 409.
fn status_of(e: HookError, partition: Option<u32>) -> Status {
    match e {
        HookError::BadRequest { .. } => Status::invalid_argument(e.to_string()),
        HookError::IdempotencyKeyReused { message, .. } => Status::already_exists(message),
        HookError::Overloaded { .. } | HookError::NotReplicated(_) => Status::unavailable(e.to_string()),
        HookError::Fenced(_) | HookError::NotServing { .. } => {
            Status::unavailable(format!("{e} (partition {partition:?}: ask its owner, GET /v1/routing names it)"))
        }
        _ => {
            tracing::error!("serve: rls: {e}");
            Status::unavailable("the request could not be decided or recorded (the server's log says why); retry")
        }
    }
}
