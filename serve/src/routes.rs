//! The HTTP layer of the hook: the routes of contract §7, each request's body read within its deadline and its size
//! limit (its camelCase members renamed, [`crate::casing`]), the caller's token checked, then the hook asked; every
//! error answer made a problem document by [`crate::answer::problems`].

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path as UrlPath, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use hook::{AcquireRequest, Asked, LeaseStep};
use schemas::ReservationAction;
use serde::Deserialize;

use crate::answer::{bad_json, close_response, error, hook_error};
use crate::app::{App, Outboxes};
use crate::keys::{KeyFrom, Keyed};
use crate::limits::{BODY_LIMIT_BYTES, EVENTS_BODY_LIMIT_BYTES};
use crate::tokens::Caller;

/// The routes, every body read first by [`read_body`].
pub(crate) fn router(app: Arc<App>, read_timeout: Duration) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/v1/routing", get(routing))
        .route("/v1/check", post(check))
        .route("/v1/quotas", get(quotas))
        .route("/v1/usage", get(crate::usage::usage))
        .route("/v1/reservations", post(reserve))
        .route("/v1/reservations/{id}/commit", post(commit))
        .route("/v1/reservations/{id}/release", post(release))
        .route("/v1/leases", post(acquire))
        .route("/v1/leases/{id}/renew", post(renew))
        .route("/v1/leases/{id}/release", post(release_lease))
        .route("/v1/events", post(crate::events::ingest))
        .route("/v1/admin/policies", post(crate::admin::policies))
        .route("/v1/admin/grants", post(crate::admin::grants))
        .route("/v1/admin/webhooks", post(crate::webhook_routes::add).get(crate::webhook_routes::list))
        .route("/v1/admin/webhooks/deliveries", get(crate::webhook_routes::deliveries))
        .route("/v1/admin/webhooks/{endpoint_id}/remove", post(crate::webhook_routes::remove))
        .route("/v1/admin/corrections", post(crate::admin::corrections))
        .route("/v1/admin/meters", post(crate::admin::meters))
        .route("/v1/admin/billing", get(crate::reads::billing))
        .route("/v1/admin/billing/prepare", get(crate::reads::prepare))
        .route("/v1/admin/billing/close", post(crate::reads::close))
        .route("/v1/admin/status", get(crate::reads::status))
        .route("/v1/admin/verify", get(crate::reads::verify))
        .route("/v1/admin/routing/claim", post(crate::reads::claim))
        .route("/v1/admin/drain", post(crate::reads::drain))
        .route("/v1/admin/shards", get(crate::reads::shards))
        .route("/v1/admin/reconcile", post(crate::reads::reconcile))
        .route("/v1/admin/backup", get(crate::reads::backup))
        .route("/v1/admin/audit/why", get(crate::reads::why))
        .route("/v1/admin/audit/tenant", get(crate::reads::tenant))
        .layer(axum::middleware::from_fn_with_state(app.clone(), timed))
        .layer(axum::middleware::from_fn(move |request, next| read_body(read_timeout, request, next)))
        // Outermost: every error answer, the layers' own (408, 413) and axum's (404, 405) among them.
        .layer(axum::middleware::from_fn(crate::answer::problems))
        .with_state(app)
}

/// Reads a request's body before its handler runs: all of it within `deadline` of the header (Go's
/// `http.Server.ReadTimeout` counts the same way), else 408 and the connection is closed. A deadline between
/// reads only (nginx's `client_body_timeout`) would let a client that sends a byte now and then hold the
/// connection for days. Above [`BODY_LIMIT_BYTES`] ([`EVENTS_BODY_LIMIT_BYTES`] for a batch of usage), 413. The body
/// arrives with its header in one packet from every ordinary client: then nothing waits and no timer is set. The
/// body's and the query's camelCase members are renamed here ([`crate::casing`]), before any route reads them.
async fn read_body(deadline: Duration, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    let limit = if parts.uri.path() == "/v1/events" { EVENTS_BODY_LIMIT_BYTES } else { BODY_LIMIT_BYTES };
    match tokio::time::timeout(deadline, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(bytes)) => {
            let (bytes, uri) = match (crate::casing::body(bytes), crate::casing::query(&parts.uri)) {
                (Ok(bytes), Ok(uri)) => (bytes, uri),
                (Err(refused), _) | (_, Err(refused)) => return *refused,
            };
            if let Some(uri) = uri {
                parts.uri = uri;
            }
            next.run(Request::from_parts(parts, Body::from(bytes))).await
        }
        Ok(Err(e)) if too_large(&e) => error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "bad_request",
            format!("the request body is larger than {limit} bytes"),
        ),
        Ok(Err(e)) => error(StatusCode::BAD_REQUEST, "bad_request", format!("cannot read the request body: {e}")),
        Err(_) => {
            let mut response = error(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                format!("the request body did not arrive within {} ms of its header", deadline.as_millis()),
            );
            response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
            response
        }
    }
}

/// The time a request for a decision (a check, a reservation) takes from its body read to its answer.
async fn timed(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let decision = path == "/v1/check" || path == "/v1/reservations";
    let started = std::time::Instant::now();
    let response = next.run(request).await;
    if decision {
        app.metrics.hook.answered(started.elapsed());
    }
    response
}

/// `GET /metrics`: the server's figures in the Prometheus text format (OpenMetrics), without a token, as `/healthz`.
async fn metrics(State(app): State<Arc<App>>) -> Response {
    if let Some(outbox) = &app.outbox {
        let latest: Vec<outbox::OutboxHealth> = match outbox {
            Outboxes::One(watch) => vec![watch.latest()],
            Outboxes::Shards(shards) => shards.iter().map(|(_, watch)| watch.latest()).collect(),
        };
        let pending = latest.iter().map(|h| h.pending).sum();
        // The oldest entry any shard still waits to publish; RFC 3339 in UTC with fixed digits orders as text.
        let oldest = latest.iter().filter_map(|h| h.oldest_pending_at.as_deref()).min();
        let age = oldest
            .and_then(|at| schemas::Timestamp::parse_rfc3339(at).ok())
            .map_or(0.0, |at| (schemas::Timestamp::now().micros() - at.micros()).max(0) as f64 / 1e6);
        app.metrics.hook.outbox_pending(pending, age);
    }
    let (queued, failed_groups) = app.hook.load();
    app.metrics.hook.writer(queued, failed_groups);
    // A writer that cannot answer now (stopped, overloaded) leaves the last figures as they were.
    if let Ok(figures) = app.hook.figures().await {
        let now = schemas::Timestamp::now();
        let age =
            |at: Option<schemas::Timestamp>| at.map_or(0.0, |at| (now.micros() - at.micros()).max(0) as f64 / 1e6);
        let (reservations, leases) = (age(figures.oldest_reservation_at), age(figures.oldest_lease_at));
        app.metrics.hook.state(
            figures.open_reservations,
            reservations,
            figures.tenants_near_limit,
            figures.tenants_at_limit,
        );
        app.metrics.hook.leases(figures.open_leases, leases);
    }
    ([(header::CONTENT_TYPE, telemetry::CONTENT_TYPE)], telemetry::encode(&app.metrics.registry)).into_response()
}

/// Whether reading a body failed on [`BODY_LIMIT_BYTES`], rather than on the connection.
fn too_large(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(error) = source {
        if error.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = error.source();
    }
    false
}

/// `GET /healthz`: "ok" while the server answers; the hook's recording ([`hook::health::HealthReport`]: `failing`
/// while the ledger refuses its groups, a full disk, say); with `--brokers`, the outbox too ([`outbox::OutboxHealth`]).
/// The status stays "ok" through those: a restart would not bring the disk or the broker back, and would cost a
/// state rebuild. A failed sync of the log (durability full) answers 503, status "not_durable", and a writer stopped
/// on a panic 503, status "stopped": every request fails from then on, and a restart is what ends it. Over shards
/// (`--data`), `hook` is the worst shard's with every shard's under `hook.shards`: one shard failing is the server's.
async fn healthz(State(app): State<Arc<App>>) -> (axum::http::StatusCode, Json<serde_json::Value>) {
    let (recording, hook) = app.hook.health();
    let (code, status) = match recording {
        "not_durable" => (axum::http::StatusCode::SERVICE_UNAVAILABLE, "not_durable"),
        // The writer is gone: nothing is decided any more, and `serve` is exiting so that it is restarted.
        "stopped" => (axum::http::StatusCode::SERVICE_UNAVAILABLE, "stopped"),
        _ => (axum::http::StatusCode::OK, "ok"),
    };
    let body = match &app.outbox {
        Some(outbox) => {
            serde_json::json!({"status": status, "hook": hook, "outbox": outbox.report()})
        }
        None => serde_json::json!({"status": status, "hook": hook}),
    };
    (code, Json(body))
}

/// `GET /v1/routing`: the partition count and each partition's owner (docs/services.md, "Routing"), for any valid
/// token; 404 on a server that is not a node of a cluster.
async fn routing(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Err(unauthorized) = app.tokens.caller(&headers) {
        return unauthorized.into_response();
    }
    match &app.routing {
        Some(routing) => (StatusCode::OK, Json(routing.table())).into_response(),
        None => error(StatusCode::NOT_FOUND, "not_found", "this server is not a node of a cluster: it has no routing"),
    }
}

fn forbidden(tenant: &str) -> Response {
    error(StatusCode::FORBIDDEN, "forbidden", format!("this token does not cover tenant {tenant:?}"))
}

/// Who may ask, and what: the caller's token, a well-formed body, a tenant the token covers. Nothing reaches the
/// hook (nothing is consumed or recorded) otherwise. The caller's token name comes from the token file, never from
/// the body (whose unknown fields are refused): a caller cannot claim to be another token.
fn admit<T>(
    app: &App,
    headers: &HeaderMap,
    body: Result<(T, KeyFrom), Response>,
    tenant: impl Fn(&T) -> &str,
) -> Result<(Caller, T, KeyFrom), Box<Response>> {
    let caller = app.tokens.caller(headers).map_err(|u| Box::new(u.into_response()))?;
    let (request, key_from) = body.map_err(Box::new)?;
    if !caller.scope.covers(tenant(&request)) {
        return Err(Box::new(forbidden(tenant(&request))));
    }
    Ok((caller, request, key_from))
}

/// `POST /v1/check`: the body a [`hook::Request`], of one metric (`metric` and `amount`, contract §7) or of several
/// (`amounts`), never both.
async fn check(State(app): State<Arc<App>>, headers: HeaderMap, Keyed(body): Keyed<hook::Request>) -> Response {
    let (caller, request, key_from) = match admit(&app, &headers, body, |r: &hook::Request| &r.who.tenant) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let partition = app.partition_of(&request.who.tenant);
    match request.asked() {
        Ok(Asked::One { .. }) => {
            let decided = app.hook.check_async_as(request, &caller.name).await;
            key_from.answer(decided, |decided| app.decided_for(partition, decided))
        }
        Ok(Asked::Several(_)) => {
            let decided = app.hook.check_amounts_async(request, &caller.name).await;
            key_from.answer(decided, |decided| app.several_decided(partition, decided))
        }
        Err(refused) => hook_error(refused),
    }
}

/// `GET /v1/quotas?tenant=T[&metric=M][&subject=S]`: the tenant's remaining quota per policy that applies now
/// ([`hook::quotas`]), for a token covering the tenant; nothing is consumed or recorded.
async fn quotas(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    query: Result<Query<hook::QuotaQuery>, QueryRejection>,
) -> Response {
    let caller = match app.tokens.caller(&headers) {
        Ok(caller) => caller,
        Err(unauthorized) => return unauthorized.into_response(),
    };
    let Query(query) = match query {
        Ok(query) => query,
        Err(rejection) => return error(StatusCode::BAD_REQUEST, "bad_request", rejection.body_text()),
    };
    if !caller.scope.covers(&query.who.tenant) {
        return forbidden(&query.who.tenant);
    }
    let partition = app.partition_of(&query.who.tenant);
    match app.hook.quotas_async(query).await {
        Ok(quotas) => (StatusCode::OK, Json(quotas)).into_response(),
        Err(e) => app.refused(partition, e),
    }
}

/// `POST /v1/reservations`: the body a [`hook::Request`] with `ttl_ms`, of one metric (`metric` and `amount`, contract §7)
/// or of several at once (`amounts`, a reservation per metric), never both.
async fn reserve(State(app): State<Arc<App>>, headers: HeaderMap, Keyed(body): Keyed<hook::Request>) -> Response {
    let (caller, request, key_from) = match admit(&app, &headers, body, |r: &hook::Request| &r.who.tenant) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let partition = app.partition_of(&request.who.tenant);
    match request.asked() {
        Ok(Asked::One { .. }) => {
            let decided = app.hook.reserve_async_as(request, &caller.name).await;
            key_from.answer(decided, |decided| app.decided_for(partition, decided))
        }
        Ok(Asked::Several(_)) => {
            let decided = app.hook.reserve_amounts_async(request, &caller.name).await;
            key_from.answer(decided, |decided| app.several_decided(partition, decided))
        }
        Err(refused) => hook_error(refused),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CommitBody {
    amount: i64,
}

async fn commit(
    State(app): State<Arc<App>>,
    UrlPath(id): UrlPath<String>,
    headers: HeaderMap,
    body: Result<Json<CommitBody>, JsonRejection>,
) -> Response {
    let (scope, body) = match scope_and_body(&app, &headers, body) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    match app.hook.close_async(&id, ReservationAction::COMMIT, body.amount, scope).await {
        Err(e) => app.refused(None, e),
        closed => close_response(closed),
    }
}

async fn release(State(app): State<Arc<App>>, UrlPath(id): UrlPath<String>, headers: HeaderMap) -> Response {
    let scope = match app.tokens.caller(&headers) {
        Ok(caller) => caller.scope,
        Err(unauthorized) => return unauthorized.into_response(),
    };
    match app.hook.close_async(&id, ReservationAction::RELEASE, 0, scope).await {
        Err(e) => app.refused(None, e),
        closed => close_response(closed),
    }
}

/// The caller's tenants and the JSON body of a close (a commit, a lease's renewal or release): 401 without a valid
/// token, then 400 for a body that does not parse.
fn scope_and_body<T>(
    app: &App,
    headers: &HeaderMap,
    body: Result<Json<T>, JsonRejection>,
) -> Result<(hook::TenantScope, T), Box<Response>> {
    let scope = app.tokens.caller(headers).map_err(|unauthorized| Box::new(unauthorized.into_response()))?.scope;
    let Json(body) = body.map_err(|rejection| Box::new(bad_json(rejection)))?;
    Ok((scope, body))
}

/// `POST /v1/leases`: the body an [`AcquireRequest`], a slot of every CONCURRENT policy of `metric` for `ttl_ms`.
async fn acquire(State(app): State<Arc<App>>, headers: HeaderMap, Keyed(body): Keyed<AcquireRequest>) -> Response {
    let (caller, request, key_from) = match admit(&app, &headers, body, |r: &AcquireRequest| &r.who.tenant) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let partition = app.partition_of(&request.who.tenant);
    let decided = app.hook.acquire_async(request, Some(&caller.name)).await;
    key_from.answer(decided, |decided| app.decided_for(partition, decided))
}

/// `POST /v1/leases/{id}/renew`' body: the lease's fencing token and how long it holds from now.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RenewBody {
    fencing_token: i64,
    ttl_ms: i64,
}

/// `POST /v1/leases/{id}/release`' body: the lease's fencing token.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReleaseLeaseBody {
    fencing_token: i64,
}

async fn renew(
    State(app): State<Arc<App>>,
    UrlPath(id): UrlPath<String>,
    headers: HeaderMap,
    body: Result<Json<RenewBody>, JsonRejection>,
) -> Response {
    let (scope, body) = match scope_and_body(&app, &headers, body) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let step = LeaseStep { fencing_token: body.fencing_token, ttl_ms: Some(body.ttl_ms) };
    match app.hook.lease_step_async(&id, ReservationAction::RENEW, step, scope).await {
        Err(e) => app.refused(None, e),
        renewed => close_response(renewed),
    }
}

async fn release_lease(
    State(app): State<Arc<App>>,
    UrlPath(id): UrlPath<String>,
    headers: HeaderMap,
    body: Result<Json<ReleaseLeaseBody>, JsonRejection>,
) -> Response {
    let (scope, body) = match scope_and_body(&app, &headers, body) {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let step = LeaseStep { fencing_token: body.fencing_token, ttl_ms: None };
    match app.hook.lease_step_async(&id, ReservationAction::RELEASE, step, scope).await {
        Err(e) => app.refused(None, e),
        released => close_response(released),
    }
}
