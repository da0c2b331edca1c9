//! `serve --listen ADDR --tokens FILE`: the enforcement hook over HTTP (SPEC 6, SPEC 7). JSON in and out;
//! 200 when allowed, 429 when denied with `Retry-After` and `RateLimit-*` headers; 400 for malformed input,
//! 401 without a valid token, 403 for a tenant the token does not cover (nothing consumed in any of them);
//! 503 when the hook's queue is full; 408 for a body that has not all arrived `--read-timeout-ms` after its
//! header, and a connection that does not finish its request header in that time is closed. With `--brokers`, the outbox is published
//! to Kafka every second, and `/healthz` says how much of it waits and why.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::body::Body;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path as UrlPath, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Args;
use hook::{CheckRequest, Closed, Decision, Hook, HookError, HookSettings, Refusal, ReserveRequest, TenantScope};
use ledger::{Durability, Ledger};
use outbox::Outbox;
use schemas::{Reason, ReservationAction, Timestamp};
use serde::{Deserialize, Serialize};

use super::kafka_args::parse_setting;

/// Largest request body accepted: a check is about 200 bytes.
pub const BODY_LIMIT_BYTES: usize = 16 * 1024;
/// How long a client may take to send a request's header, then its body, or leave a kept-alive connection
/// idle: a client that opens connections and never finishes a request would otherwise hold each for
/// ever, until `serve` runs out of file descriptors. hyper's default for the header.
pub const READ_TIMEOUT_MS: u64 = 30_000;
/// How long `serve` waits, on SIGTERM or Ctrl-C, for the requests in flight before it exits.
const SHUTDOWN_WAIT_MS: u64 = 10_000;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// TOML file of `[[token]]` tables with `secret` and `tenants` (SPEC 7).
    #[arg(long)]
    tokens: PathBuf,
    /// Commit durability: `full` (fsync per group, survives power loss) or `normal` (survives a crash of the
    /// process; a power loss may lose the last groups).
    #[arg(long, default_value = "full", value_parser = ["full", "normal"])]
    durability: String,
    /// Requests decided in one ledger transaction at most.
    #[arg(long, default_value_t = HookSettings::default().group_max_requests)]
    group_max_requests: usize,
    /// Microseconds the writer waits for more requests after the first of a group (0: only what is queued).
    #[arg(long, default_value_t = HookSettings::default().group_wait_us)]
    group_wait_us: u64,
    /// Kafka bootstrap servers to publish decisions and usage to (the outbox); without them they wait.
    #[arg(long, env = "QUOTA_LEDGER_BROKERS")]
    brokers: Option<String>,
    /// A librdkafka setting for the outbox producer, repeatable.
    #[arg(short = 'X', value_name = "KEY=VALUE", value_parser = parse_setting)]
    settings: Vec<(String, String)>,
    /// Milliseconds a client may take to send a request's header, then its body, or leave a kept-alive
    /// connection idle; then the connection is closed (a late body is answered 408 first).
    #[arg(long, default_value_t = READ_TIMEOUT_MS)]
    read_timeout_ms: u64,
}

/// The token file (SPEC 7).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenFile {
    token: Vec<Token>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Token {
    /// Sent as `Authorization: Bearer SECRET`.
    secret: String,
    /// Tenant names, or `["*"]` for every tenant.
    tenants: Vec<String>,
}

fn read_tokens(path: &Path) -> anyhow::Result<Vec<(String, TenantScope)>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read the token file {}", path.display()))?;
    let file: TokenFile =
        toml::from_str(&text).with_context(|| format!("token file {} is not valid", path.display()))?;
    anyhow::ensure!(!file.token.is_empty(), "token file {} has no [[token]]", path.display());
    file.token
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            anyhow::ensure!(
                t.secret.len() >= 16,
                "token {} of {}: a secret has at least 16 characters",
                i + 1,
                path.display()
            );
            let scope =
                if t.tenants.iter().any(|x| x == "*") { TenantScope::All } else { TenantScope::Only(t.tenants) };
            Ok((t.secret, scope))
        })
        .collect()
}

struct App {
    hook: Hook,
    tokens: Vec<(String, TenantScope)>,
    /// With `--brokers`: the outbox as the publisher last saw it, for `/healthz`.
    outbox: Option<outbox::HealthWatch>,
}

pub fn run(ledger_path: &Path, args: ServeArgs) -> anyhow::Result<ExitCode> {
    // A hook on a ledger that is not there would create an empty one, find no policy, and allow everything: a
    // mistyped --ledger, a start from the wrong directory, an empty file or a ledger not created yet must stop
    // here instead. An older ledger is fine: the hook migrates it.
    match Ledger::open_read_only(ledger_path) {
        Ok(_) | Err(ledger::OpenError::NotMigrated { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    let tokens = read_tokens(&args.tokens)?;
    let settings = HookSettings {
        group_max_requests: args.group_max_requests.max(1),
        group_wait_us: args.group_wait_us,
        durability: if args.durability == "normal" { Durability::Normal } else { Durability::Full },
        ..HookSettings::default()
    };
    let hook = Hook::start(ledger_path, settings).context("cannot start the hook")?;
    let stopped = hook.stopped();
    let publisher = match &args.brokers {
        Some(brokers) => {
            // Read through a connection of its own, the acknowledgements recorded by the hook's writer.
            let outbox = HookOutbox { reader: Ledger::open(ledger_path)?, hook: hook.clone() };
            let path = ledger_path.to_path_buf();
            Some(outbox::PublisherThread::spawn("serve", path, brokers, &args.settings, outbox)?)
        }
        None => None,
    };
    let outbox = publisher.as_ref().map(outbox::PublisherThread::health);
    let app = Arc::new(App { hook, tokens, outbox });
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let read_timeout = Duration::from_millis(args.read_timeout_ms.max(1));
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        // The first line says where it listens (port 0 picks one), for scripts and tests.
        writeln!(super::stdout(), "listening on http://{}", listener.local_addr()?)?;
        serve_connections(listener, router(app, read_timeout), read_timeout).await;
        anyhow::Ok(())
    })?;
    // Stopping: the runtime's tasks hold the last handles to the hook, the publisher one more. Once all are dropped
    // the writer records what was queued and closes the ledger, and SQLite folds the write-ahead log into the ledger
    // file and removes it: the file alone then holds every decision (a backup copying only it loses none). Exiting
    // without waiting left the log beside it, about 70 MB under load.
    drop(runtime);
    if let Some(publisher) = publisher {
        publisher.stop();
    }
    if !stopped.wait(Duration::from_millis(SHUTDOWN_WAIT_MS)) {
        eprintln!("serve: the hook's writer had not stopped after {SHUTDOWN_WAIT_MS} ms; exiting without it");
    }
    Ok(ExitCode::SUCCESS)
}

/// Accepts and serves HTTP/1 connections until SIGTERM or Ctrl-C, then lets the requests in flight finish (for
/// [`SHUTDOWN_WAIT_MS`] at most). What `axum::serve` does, plus a timeout on the request header, which needs a
/// timer that `axum::serve` does not give hyper.
async fn serve_connections(listener: tokio::net::TcpListener, router: Router, header_timeout: Duration) {
    use hyper_util::rt::{TokioIo, TokioTimer};

    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(header_timeout);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut stop = std::pin::pin!(shutdown());
    // Out of file descriptors, accept fails ten times a second until one is closed: said once, not each time.
    let mut said = kafka::Said::default();
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // Out of file descriptors, or a connection reset before it was accepted: the next may work.
                    let error = error.to_string();
                    if said.again(&error) {
                        eprintln!("serve: cannot accept a connection: {error}");
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = &mut stop => break,
        };
        if said.over() {
            eprintln!("serve: accepting connections again");
        }
        // Answers leave at once: without TCP_NODELAY a small answer may wait for the client's delayed ACK.
        if let Err(error) = stream.set_nodelay(true) {
            eprintln!("serve: cannot set TCP_NODELAY on a connection: {error}");
        }
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        let connection = builder.serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            // A client that goes away or times out ends its connection; nothing to tell the operator.
            let _ = connection.await;
        });
    }
    if tokio::time::timeout(Duration::from_millis(SHUTDOWN_WAIT_MS), graceful.shutdown()).await.is_err() {
        eprintln!("serve: requests still in flight after {SHUTDOWN_WAIT_MS} ms; exiting without them");
    }
}

async fn shutdown() {
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
}

fn router(app: Arc<App>, read_timeout: Duration) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/v1/check", post(check))
        .route("/v1/reservations", post(reserve))
        .route("/v1/reservations/{id}/commit", post(commit))
        .route("/v1/reservations/{id}/release", post(release))
        .layer(axum::middleware::from_fn(move |request, next| read_body(read_timeout, request, next)))
        .with_state(app)
}

/// Reads a request's body before its handler runs: all of it within `deadline` of the header (Go's
/// `http.Server.ReadTimeout` counts the same way), else 408 and the connection is closed. A deadline between
/// reads only (nginx's `client_body_timeout`) would let a client that sends a byte now and then hold the
/// connection for days. Above [`BODY_LIMIT_BYTES`], 413. The body arrives with its header in one packet from
/// every ordinary client: then nothing waits and no timer is set.
async fn read_body(deadline: Duration, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    match tokio::time::timeout(deadline, axum::body::to_bytes(body, BODY_LIMIT_BYTES)).await {
        Ok(Ok(bytes)) => next.run(Request::from_parts(parts, Body::from(bytes))).await,
        Ok(Err(e)) if too_large(&e) => error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "bad_request",
            format!("the request body is larger than {BODY_LIMIT_BYTES} bytes"),
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
/// state rebuild. Only a failed sync of the log (durability full) answers 503, status "not_durable": every request
/// fails from then on, and a restart is what ends it.
async fn healthz(State(app): State<Arc<App>>) -> (axum::http::StatusCode, Json<serde_json::Value>) {
    let hook = app.hook.health();
    let (code, status) = match hook.recording {
        "not_durable" => (axum::http::StatusCode::SERVICE_UNAVAILABLE, "not_durable"),
        _ => (axum::http::StatusCode::OK, "ok"),
    };
    let body = match &app.outbox {
        Some(outbox) => {
            serde_json::json!({"status": status, "hook": hook, "outbox": outbox.latest()})
        }
        None => serde_json::json!({"status": status, "hook": hook}),
    };
    (code, Json(body))
}

/// `serve`'s outbox: read through its own connection, written by the hook's writer. Recording acknowledgements
/// through a second writing connection made the publisher and the writer wait for each other's write lock (SQLite's
/// busy handler sleeps up to 100 ms between tries). At 8 clients the hook's p90 went from 1.9 to 40 ms; with that
/// connection's commits at durability normal and without automatic checkpoints it came back to 3.1 ms, but the
/// publisher then fell 100,000 entries behind in a minute.
struct HookOutbox {
    reader: ledger::Ledger,
    hook: Hook,
}

impl Outbox for HookOutbox {
    fn pending(&self, after: Option<u64>, limit: u64) -> Result<Vec<ledger::OutboxEntry>, ledger::ReadError> {
        self.reader.outbox_pending_after(after, limit)
    }

    fn sync_log(&self) -> std::io::Result<()> {
        self.reader.sync_log()
    }

    fn record(&mut self, acknowledged: &[(u64, String)]) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        Ok(self.hook.record_published(acknowledged.to_vec())?)
    }

    fn pending_count(&self) -> Result<u64, ledger::ReadError> {
        self.reader.outbox_pending_count()
    }
}

/// An error answer: a status and `{error, message}`.
fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    (status, Json(serde_json::json!({"error": code, "message": message.into()}))).into_response()
}

/// Why a request is not authenticated: answered 401 with `WWW-Authenticate: Bearer`.
#[derive(Debug, Clone, Copy)]
enum Unauthorized {
    Missing,
    Unknown,
}

impl IntoResponse for Unauthorized {
    fn into_response(self) -> Response {
        let message = match self {
            Unauthorized::Missing => "send Authorization: Bearer SECRET",
            Unauthorized::Unknown => "unknown token",
        };
        let mut response = error(StatusCode::UNAUTHORIZED, "unauthorized", message);
        response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        response
    }
}

fn caller(app: &App, headers: &HeaderMap) -> Result<TenantScope, Unauthorized> {
    let secret = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .ok_or(Unauthorized::Missing)?;
    // Compared in constant time per token, so that timing does not reveal a secret's prefix.
    app.tokens
        .iter()
        .find(|(s, _)| constant_time_eq(s.as_bytes(), secret.as_bytes()))
        .map(|(_, scope)| scope.clone())
        .ok_or(Unauthorized::Unknown)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn forbidden(tenant: &str) -> Response {
    error(StatusCode::FORBIDDEN, "forbidden", format!("this token does not cover tenant {tenant:?}"))
}

fn bad_json(rejection: JsonRejection) -> Response {
    error(StatusCode::BAD_REQUEST, "bad_request", rejection.body_text())
}

fn hook_error(e: HookError) -> Response {
    match e {
        HookError::BadRequest { .. } => error(StatusCode::BAD_REQUEST, "bad_request", e.to_string()),
        HookError::Overloaded { .. } => {
            let mut response = error(StatusCode::SERVICE_UNAVAILABLE, "overloaded", e.to_string());
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            response
        }
        HookError::Stopped | HookError::Ledger(_) | HookError::NotDurable(_) => {
            error(StatusCode::INTERNAL_SERVER_ERROR, "ledger", e.to_string())
        }
        _ => error(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()),
    }
}

/// The answer body of SPEC 6, plus identifiers (added, never renamed).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct DecisionBody {
    code: hook::Code,
    metric: String,
    scope: Option<schemas::Scope>,
    limit: Option<i64>,
    remaining: Option<i64>,
    resets_at: Option<schemas::Timestamp>,
    retry_after_seconds: Option<i64>,
    policy_version: Option<i32>,
    policy_id: Option<String>,
    reason: Reason,
    decision_id: String,
    request_id: String,
    replayed: bool,
    /// `reservationId`, as the other identifiers of this body are spelled: kept for the clients written to it.
    #[serde(skip_serializing_if = "Option::is_none")]
    reservation_id: Option<String>,
    /// SPEC 7's spelling (`-> {reservation_id, ...}`), which the commit and release answers use too.
    #[serde(rename = "reservation_id", skip_serializing_if = "Option::is_none")]
    reservation_id_spec: Option<String>,
}

fn decision_response(decision: Decision) -> Response {
    // A replay answers now: its waits count from now, not from when it was first decided.
    let at = match decision.replayed {
        true => Timestamp::now().max(decision.decided_at),
        false => decision.decided_at,
    };
    let since_ms = (at.micros() - decision.decided_at.micros()) / 1_000;
    // Saturating: a producer's recorded decision, replayed, may carry any retry.
    let retry_after_seconds =
        decision.retry_after_ms.map(|ms| ms.saturating_sub(since_ms).max(0).saturating_add(999) / 1_000);
    let reset_seconds =
        decision.resets_at.map(|r| r.micros().saturating_sub(at.micros()).max(0).saturating_add(999_999) / 1_000_000);
    let status = if decision.allowed() { StatusCode::OK } else { StatusCode::TOO_MANY_REQUESTS };
    let mut headers = HeaderMap::new();
    let mut set = |name: &'static str, value: Option<i64>| {
        if let Some(value) = value {
            headers.insert(HeaderName::from_static(name), HeaderValue::from(value));
        }
    };
    if !decision.allowed() {
        set("retry-after", retry_after_seconds);
    }
    // A SHADOW policy limits nobody: its numbers are in the body, as in the DecisionEvent, but not in the headers
    // that client libraries act on (a client read `RateLimit-Remaining: 0` of a dry run and backed off).
    if decision.reason != Reason::SHADOW_DENIED {
        set("ratelimit-limit", decision.limit);
        set("ratelimit-remaining", decision.remaining);
        set("ratelimit-reset", reset_seconds);
    }
    let body = DecisionBody {
        code: decision.code,
        metric: decision.metric,
        scope: decision.scope,
        limit: decision.limit,
        remaining: decision.remaining,
        resets_at: decision.resets_at,
        retry_after_seconds,
        policy_version: decision.policy_version,
        policy_id: decision.policy_id,
        reason: decision.reason,
        decision_id: decision.decision_id,
        request_id: decision.request_id,
        replayed: decision.replayed,
        reservation_id_spec: decision.reservation_id.clone(),
        reservation_id: decision.reservation_id,
    };
    (status, headers, Json(body)).into_response()
}

/// Who may ask, and what: the caller's token, a well-formed body, a tenant the token covers. Nothing reaches the
/// hook (nothing is consumed or recorded) otherwise.
fn admit<T>(
    app: &App,
    headers: &HeaderMap,
    body: Result<Json<T>, JsonRejection>,
    tenant: impl Fn(&T) -> &str,
) -> Result<T, Box<Response>> {
    let scope = caller(app, headers).map_err(|u| Box::new(u.into_response()))?;
    let Json(request) = body.map_err(|r| Box::new(bad_json(r)))?;
    if !scope.covers(tenant(&request)) {
        return Err(Box::new(forbidden(tenant(&request))));
    }
    Ok(request)
}

fn answer(result: Result<Decision, HookError>) -> Response {
    match result {
        Ok(decision) => decision_response(decision),
        Err(e) => hook_error(e),
    }
}

async fn check(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Json<CheckRequest>, JsonRejection>,
) -> Response {
    match admit(&app, &headers, body, |r: &CheckRequest| &r.tenant) {
        Ok(request) => answer(app.hook.check_async(request).await),
        Err(refused) => *refused,
    }
}

async fn reserve(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Json<ReserveRequest>, JsonRejection>,
) -> Response {
    match admit(&app, &headers, body, |r: &ReserveRequest| &r.tenant) {
        Ok(request) => answer(app.hook.reserve_async(request).await),
        Err(refused) => *refused,
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
    let scope = match caller(&app, &headers) {
        Ok(scope) => scope,
        Err(unauthorized) => return unauthorized.into_response(),
    };
    let Json(body) = match body {
        Ok(body) => body,
        Err(rejection) => return bad_json(rejection),
    };
    close_response(app.hook.close_async(&id, ReservationAction::COMMIT, body.amount, scope).await)
}

async fn release(State(app): State<Arc<App>>, UrlPath(id): UrlPath<String>, headers: HeaderMap) -> Response {
    let scope = match caller(&app, &headers) {
        Ok(scope) => scope,
        Err(unauthorized) => return unauthorized.into_response(),
    };
    close_response(app.hook.close_async(&id, ReservationAction::RELEASE, 0, scope).await)
}

fn close_response(result: Result<Result<Closed, Refusal>, HookError>) -> Response {
    match result {
        Ok(Ok(closed)) => (StatusCode::OK, Json(closed)).into_response(),
        Ok(Err(refusal)) => {
            let status = match refusal {
                Refusal::NotFound { .. } => StatusCode::NOT_FOUND,
                Refusal::AlreadyClosed { .. } => StatusCode::CONFLICT,
                Refusal::Expired { .. } => StatusCode::GONE,
                Refusal::Forbidden { .. } => StatusCode::FORBIDDEN,
            };
            let message = refusal.to_string();
            let mut body = serde_json::to_value(&refusal).expect("a refusal serializes");
            body["error"] = serde_json::json!("refused");
            body["message"] = serde_json::json!(message);
            (status, Json(body)).into_response()
        }
        Err(e) => hook_error(e),
    }
}
