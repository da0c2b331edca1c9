//! The answers of the HTTP layer: a decision as contract §6 spells it (status, `Retry-After`, `RateLimit-*` and the
//! draft's `RateLimit-Policy` and `RateLimit` headers, the JSON body), a reservation's close, and errors: built as
//! `{error, message, ...}` where they happen, and made RFC 9457 problem documents by one layer, [`problems`], so that
//! every error answer of every route is one, whoever wrote the route.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Json;
use axum::body::Body;
use axum::extract::Request;
use axum::extract::rejection::JsonRejection;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hook::{Closed, Decision, HookError, Refusal};
use schemas::{Reason, Timestamp};
use serde::Serialize;

/// An error answer: a status and `{error, message}`, which [`problems`] answers as a problem document.
pub(crate) fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    (status, Json(serde_json::json!({"error": code, "message": message.into()}))).into_response()
}

/// A 400 naming the request field at fault: `{error: "bad_request", message: "field: why", field}`.
pub(crate) fn bad_field(field: &str, message: impl std::fmt::Display) -> Response {
    let body = serde_json::json!({"error": "bad_request", "message": format!("{field}: {message}"), "field": field});
    (StatusCode::BAD_REQUEST, Json(body)).into_response()
}

/// A body that could not be read as JSON of the route's type: 415 without a JSON content type, else 400 with the
/// extractor's words (which name the field of a member of the wrong type).
pub(crate) fn bad_json(rejection: JsonRejection) -> Response {
    let status = match rejection {
        JsonRejection::MissingJsonContentType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        _ => StatusCode::BAD_REQUEST,
    };
    let code = match status {
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        _ => "bad_request",
    };
    error(status, code, rejection.body_text())
}

/// The media type of an RFC 9457 problem document.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// The prefix of every problem `type` this server answers, followed by the `error` code
/// (`urn:quota-ledger:problem:bad_request`). An identifier, not a locator: the project has no site of its own to
/// point at, and RFC 9457 has consumers compare the URI, never fetch it. docs/contract.md lists the codes.
pub const PROBLEM_TYPE_PREFIX: &str = "urn:quota-ledger:problem:";

/// Longest error body [`problems`] reads back: every error this server builds is a few hundred bytes.
const ERROR_BODY_BYTES_MAX: usize = 64 * 1024;

/// The one place every error answer (a status of 400 or above) becomes an RFC 9457 problem document
/// (`application/problem+json`): `type` from its `error` code ([`PROBLEM_TYPE_PREFIX`]), `title` the code's fixed
/// summary, `status` the answer's, `detail` its `message`; every member it had (`error`, `message`, `field`,
/// `decisionId`, `error_id`, ...) kept as an extension member, so a client written to them reads them as before. An
/// answer without a JSON `{error}` body (axum's own 404 of an unknown route, 405 of a wrong method, a rejection's
/// text) gets the code of its status and its text as `message`. A JSON answer of another shape is no error document and
/// stays as it is: a denial (429, a decision) and an unhealthy `/healthz` (503) are answers, not problems.
pub(crate) async fn problems(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    let is_problem =
        response.headers().get(header::CONTENT_TYPE).is_some_and(|t| t.as_bytes() == PROBLEM_JSON.as_bytes());
    if !(status.is_client_error() || status.is_server_error()) || is_problem {
        return response;
    }
    let json = response.headers().get(header::CONTENT_TYPE).is_some_and(|t| t.as_bytes() == b"application/json");
    let (mut parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, ERROR_BODY_BYTES_MAX).await.unwrap_or_default();
    let members = match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(serde_json::Value::Object(members)) if members.get("error").is_some_and(serde_json::Value::is_string) => {
            members
        }
        _ if json => return Response::from_parts(parts, Body::from(bytes)),
        _ => {
            let text = String::from_utf8_lossy(&bytes).trim().to_string();
            let message = match text.is_empty() {
                true => status.canonical_reason().unwrap_or("error").to_lowercase(),
                false => text,
            };
            let mut members = serde_json::Map::new();
            members.insert("error".into(), code_of_status(status).into());
            members.insert("message".into(), message.into());
            members
        }
    };
    let document = problem(status, members);
    parts.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(document.to_string()))
}

/// The problem document of an error body `{error, message, ...}` answered with `status`: `type`, `title`, `status` and
/// `detail` first, then every member of the body.
pub fn problem(status: StatusCode, members: serde_json::Map<String, serde_json::Value>) -> serde_json::Value {
    let code = members.get("error").and_then(serde_json::Value::as_str).unwrap_or("error").to_string();
    let mut document = serde_json::Map::new();
    document.insert("type".into(), format!("{PROBLEM_TYPE_PREFIX}{code}").into());
    let title =
        title_of(&code).map_or_else(|| status.canonical_reason().unwrap_or("Error").to_string(), str::to_string);
    document.insert("title".into(), title.into());
    document.insert("status".into(), status.as_u16().into());
    if let Some(message) = members.get("message") {
        document.insert("detail".into(), message.clone());
    }
    for (name, value) in members {
        // A member named as one of RFC 9457's would contradict it: the standard's own win.
        document.entry(name).or_insert(value);
    }
    serde_json::Value::Object(document)
}

/// The `error` code of an answer that has none of its own (axum's, or a rejection's): by its status.
fn code_of_status(status: StatusCode) -> &'static str {
    match status {
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::PAYLOAD_TOO_LARGE => "too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::REQUEST_TIMEOUT => "request_timeout",
        StatusCode::UNAUTHORIZED => "unauthorized",
        StatusCode::FORBIDDEN => "forbidden",
        s if s.is_server_error() => "internal",
        _ => "bad_request",
    }
}

/// Each `error` code's `title`: what kind of problem it is, the same for every occurrence (RFC 9457: the `detail`
/// says what happened this time). A code not listed here takes its status's reason phrase.
fn title_of(code: &str) -> Option<&'static str> {
    Some(match code {
        "bad_request" => "The request is malformed",
        "unauthorized" => "No valid token",
        "forbidden" => "The token does not allow this",
        "not_found" => "Not found",
        "method_not_allowed" => "Method not allowed",
        "request_timeout" => "The request body did not arrive in time",
        "too_large" => "The request body is too large",
        "unsupported_media_type" => "The request body is not JSON",
        "idempotency_key_reused" => "The idempotency key was used for another request",
        "refused" => "The close was refused",
        "overloaded" => "The hook is overloaded",
        "not_serving" => "This server does not serve the request's partition",
        "not_replicated" => "The decisions could not be replicated",
        "not_held" => "This server does not hold the shard",
        "invalid_change" => "The change is invalid",
        "refused_change" => "The ledger refuses the change",
        "ledger" | "ledger_error" => "The ledger failed",
        "internal" => "Internal error",
        _ => return None,
    })
}

/// The hook's error as an answer: 400 for a malformed request (naming the field), 409 for an idempotency key used
/// before with another request, 503 (retry in a second) when its queue is full, 500 when the ledger fails.
pub(crate) fn hook_error(e: HookError) -> Response {
    match e {
        HookError::BadRequest { field, .. } => {
            let body = serde_json::json!({"error": "bad_request", "message": e.to_string(), "field": field});
            (StatusCode::BAD_REQUEST, Json(body)).into_response()
        }
        HookError::IdempotencyKeyReused { .. } => key_reused(e, StatusCode::CONFLICT),
        HookError::Overloaded { .. } => {
            let mut response = error(StatusCode::SERVICE_UNAVAILABLE, "overloaded", e.to_string());
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            response
        }
        // Another node took the shard over, or this server does not hold the request's partition: the caller asks the
        // owner (the routing table names it).
        HookError::Fenced(_) | HookError::NotServing { .. } => {
            error(StatusCode::MISDIRECTED_REQUEST, "not_serving", e.to_string())
        }
        HookError::NotReplicated(_) => {
            let mut response = error(StatusCode::SERVICE_UNAVAILABLE, "not_replicated", e.to_string());
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            response
        }
        HookError::Stopped | HookError::Ledger(_) | HookError::NotDurable(_) => internal("ledger", &e),
        _ => internal("internal", &e),
    }
}

/// An idempotency key used before for another request, answered with `status`: today's 409 when the key came in the
/// body, the Idempotency-Key draft's 422 when it came in the header ([`crate::keys`]).
pub(crate) fn key_reused(e: HookError, status: StatusCode) -> Response {
    let (field, decision_id, message) = match e {
        HookError::IdempotencyKeyReused { field, decision_id, message } => (field, decision_id, message),
        other => return hook_error(other),
    };
    let body = serde_json::json!({
        "error": "idempotency_key_reused",
        "code": "IDEMPOTENCY_KEY_REUSED",
        "message": message,
        "field": field,
        "decisionId": decision_id,
    });
    (status, Json(body)).into_response()
}

/// Error ids of this process: one per 500 answered.
static ERRORS_ANSWERED: AtomicU64 = AtomicU64::new(0);

/// A 500: a generic message and an error id for the caller, the detail (a path, SQLite's words, a panic) in the
/// log under the same id, where the operator finds it. Retrying with the same idempotency key is always safe: a
/// decision that was recorded answers again.
fn internal(code: &str, e: &HookError) -> Response {
    let n = ERRORS_ANSWERED.fetch_add(1, Ordering::Relaxed);
    let error_id = format!("e-{:x}-{n}", Timestamp::now().micros());
    tracing::error!(%error_id, error = %e, "serve: a request failed");
    let message = format!(
        "the request could not be decided or recorded (error id {error_id}, in the server's log); retry with the \
         same idempotency key"
    );
    let body = serde_json::json!({"error": code, "message": message, "error_id": error_id});
    (StatusCode::INTERNAL_SERVER_ERROR, Json(body)).into_response()
}

/// The answer body of contract §6, plus identifiers (added, never renamed).
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
    /// The amount asked: a replay repeats the original's.
    amount: i64,
    decision_id: String,
    request_id: String,
    replayed: bool,
    /// `reservationId`, as the other identifiers of this body are spelled: kept for the clients written to it.
    #[serde(skip_serializing_if = "Option::is_none")]
    reservation_id: Option<String>,
    /// contract §7's spelling (`-> {reservation_id, ...}`), which the commit and release answers use too.
    #[serde(rename = "reservation_id", skip_serializing_if = "Option::is_none")]
    reservation_id_spec: Option<String>,
    /// An acquire's lease, in the spelling of its renew and release answers.
    #[serde(rename = "lease_id", skip_serializing_if = "Option::is_none")]
    lease_id: Option<String>,
    #[serde(rename = "fencing_token", skip_serializing_if = "Option::is_none")]
    fencing_token: Option<i64>,
    #[serde(rename = "expires_at", skip_serializing_if = "Option::is_none")]
    expires_at: Option<schemas::Timestamp>,
    /// A request of several metrics: what it asked of each.
    #[serde(skip_serializing_if = "Option::is_none")]
    amounts: Option<BTreeMap<String, i64>>,
    /// A request of several metrics: each metric's decision, sorted by metric (the fields above are the deciding
    /// one's: the metric that denied, or the one nearest its limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    decisions: Option<Vec<MetricDecisionBody>>,
    /// A gauge quota decided: what it refuses while its level (then in `limit`'s place `remaining` is 0) is above
    /// the limit: NO_INSERTS, NO_WRITES or DISABLE.
    #[serde(skip_serializing_if = "Option::is_none")]
    violation: Option<schemas::Violation>,
}

/// One metric's decision in the answer to a request of several metrics.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct MetricDecisionBody {
    metric: String,
    amount: i64,
    code: hook::Code,
    reason: Reason,
    scope: Option<schemas::Scope>,
    policy_id: Option<String>,
    policy_version: Option<i32>,
    limit: Option<i64>,
    remaining: Option<i64>,
    resets_at: Option<schemas::Timestamp>,
    decision_id: String,
    /// A reservation of several metrics, allowed: this metric's reservation, committed or released on its own
    /// (spelled both ways, as in the body around it).
    #[serde(skip_serializing_if = "Option::is_none")]
    reservation_id: Option<String>,
    #[serde(rename = "reservation_id", skip_serializing_if = "Option::is_none")]
    reservation_id_spec: Option<String>,
}

/// The answer to a request of several metrics: status and headers as the deciding decision's (the metric that denied,
/// or the one nearest its limit), its fields in the body, plus `amounts` and every metric's decision.
pub(crate) fn decisions_response(decisions: hook::Decisions) -> Response {
    let deciding = decisions.deciding().clone();
    let amounts = deciding.amounts.clone();
    let each = decisions
        .decisions
        .into_iter()
        .map(|d| MetricDecisionBody {
            code: d.code,
            reason: d.reason,
            scope: d.scope,
            policy_id: d.policy_id,
            policy_version: d.policy_version,
            limit: d.limit,
            remaining: d.remaining,
            resets_at: d.resets_at,
            decision_id: d.decision_id,
            amount: d.amount,
            metric: d.metric,
            reservation_id_spec: d.reservation_id.clone(),
            reservation_id: d.reservation_id,
        })
        .collect::<Vec<_>>();
    let amounts = match amounts.is_empty() {
        true => each.iter().map(|d| (d.metric.clone(), d.amount)).collect(),
        false => amounts,
    };
    respond(deciding, Some(amounts), Some(each))
}

pub(crate) fn decision_response(decision: Decision) -> Response {
    respond(decision, None, None)
}

fn respond(
    decision: Decision,
    amounts: Option<BTreeMap<String, i64>>,
    decisions: Option<Vec<MetricDecisionBody>>,
) -> Response {
    let waits = waits(&decision);
    let retry_after_seconds = waits.0;
    let status = if decision.allowed() { StatusCode::OK } else { StatusCode::TOO_MANY_REQUESTS };
    let mut headers = HeaderMap::new();
    for (name, value) in rate_limit_headers(&decision, waits) {
        headers.insert(HeaderName::from_static(name), HeaderValue::from(value));
    }
    // The draft's fields, beside: not for a SHADOW policy either (see rate_limit_headers).
    if decision.reason != Reason::SHADOW_DENIED {
        draft_ratelimit(&mut headers, &decision, waits.1);
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
        amount: decision.amount,
        decision_id: decision.decision_id,
        request_id: decision.request_id,
        replayed: decision.replayed,
        reservation_id_spec: decision.reservation_id.clone(),
        reservation_id: decision.reservation_id,
        lease_id: decision.lease.as_ref().map(|l| l.lease_id.clone()),
        fencing_token: decision.lease.as_ref().map(|l| l.fencing_token),
        expires_at: decision.lease.as_ref().map(|l| l.expires_at),
        amounts,
        decisions,
        violation: decision.violation,
    };
    (status, headers, Json(body)).into_response()
}

/// The fields of draft-ietf-httpapi-ratelimit-headers (its -10, the latest), beside the `RateLimit-Limit`,
/// `-Remaining` and `-Reset` of its earlier versions that today's clients read: the deciding policy as
/// `RateLimit-Policy: "tokens-day";q=10;w=86400` (its quota and, when the window's start and end are known, its length
/// in seconds) and its state as `RateLimit: "tokens-day";r=4;t=3600` (what remains, and the seconds until the window
/// resets). The policy is named by its id, an sf-string; an id that is not printable ASCII (an sf-string cannot hold
/// it) is named `"quota"`. A decision without a limit (no policy applied) carries neither.
fn draft_ratelimit(headers: &mut HeaderMap, decision: &Decision, reset_seconds: Option<i64>) {
    let (Some(limit), Some(remaining)) = (decision.limit, decision.remaining) else { return };
    let name =
        decision.policy_id.as_deref().filter(|id| !id.is_empty() && id.bytes().all(|b| (0x20..=0x7e).contains(&b)));
    let name = sf_string(name.unwrap_or("quota"));
    // The draft's quota and remaining are non-negative: a SOFT policy beyond its limit has none left.
    let mut policy = format!("{name};q={}", limit.max(0));
    let window_seconds =
        decision.window_start.zip(decision.resets_at).map(|(s, e)| (e.micros() - s.micros()) / 1_000_000);
    if let Some(seconds) = window_seconds.filter(|s| *s > 0) {
        policy.push_str(&format!(";w={seconds}"));
    }
    let mut state = format!("{name};r={}", remaining.max(0));
    if let Some(seconds) = reset_seconds {
        state.push_str(&format!(";t={seconds}"));
    }
    for (header, value) in [("ratelimit-policy", policy), ("ratelimit", state)] {
        let value = HeaderValue::try_from(value).expect("an sf-string and numbers are a header value");
        headers.insert(HeaderName::from_static(header), value);
    }
}

/// `text` as an sf-string: quoted, `"` and `\` escaped (RFC 9651 §4.1.6); `text` is printable ASCII.
fn sf_string(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Seconds until a denied request may be retried, and until the deciding window resets, counted from now for a
/// replay (its waits count from when it is answered, not from when it was first decided).
pub(crate) fn waits(decision: &Decision) -> (Option<i64>, Option<i64>) {
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
    (retry_after_seconds, reset_seconds)
}

/// The headers a decision is answered with (contract §6), lower-case: `retry-after` when denied, and the
/// `ratelimit-*` figures; the same over HTTP and over Envoy's rate limit service (its headers to add).
/// `waits` are the decision's [`waits`].
pub(crate) fn rate_limit_headers(decision: &Decision, waits: (Option<i64>, Option<i64>)) -> Vec<(&'static str, i64)> {
    let (retry_after_seconds, reset_seconds) = waits;
    let mut headers = Vec::with_capacity(4);
    let mut set = |name: &'static str, value: Option<i64>| {
        if let Some(value) = value {
            headers.push((name, value));
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
    headers
}

/// A reservation's commit or release: 200 with what was closed, or why not (404, 409, 410, 403).
pub(crate) fn close_response(result: Result<Result<Closed, Refusal>, HookError>) -> Response {
    match result {
        Ok(Ok(closed)) => (StatusCode::OK, Json(closed)).into_response(),
        Ok(Err(refusal)) => {
            let status = match refusal {
                Refusal::NotFound { .. } => StatusCode::NOT_FOUND,
                Refusal::AlreadyClosed { .. } => StatusCode::CONFLICT,
                Refusal::Expired { .. } => StatusCode::GONE,
                Refusal::Forbidden { .. } => StatusCode::FORBIDDEN,
                // A stale holder, or a lease closed as a reservation (or the reverse): the request conflicts with
                // what the lease or reservation is.
                Refusal::StaleToken { .. } | Refusal::WrongKind { .. } => StatusCode::CONFLICT,
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
