//! The answers of the HTTP layer: a decision as contract §6 spells it (status, `Retry-After` and `RateLimit-*`
//! headers, the JSON body), a reservation's close, and errors as `{error, message}`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Json;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hook::{Closed, Decision, HookError, Refusal};
use schemas::{Reason, Timestamp};
use serde::Serialize;

/// An error answer: a status and `{error, message}`.
pub(crate) fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    (status, Json(serde_json::json!({"error": code, "message": message.into()}))).into_response()
}

/// The hook's error as an answer: 400 for a malformed request (naming the field), 409 for an idempotency key used
/// before with another request, 503 (retry in a second) when its queue is full, 500 when the ledger fails.
pub(crate) fn hook_error(e: HookError) -> Response {
    match e {
        HookError::BadRequest { field, .. } => {
            let body = serde_json::json!({"error": "bad_request", "message": e.to_string(), "field": field});
            (StatusCode::BAD_REQUEST, Json(body)).into_response()
        }
        HookError::IdempotencyKeyReused { field, ref decision_id, ref message } => {
            let body = serde_json::json!({
                "error": "idempotency_key_reused",
                "code": "IDEMPOTENCY_KEY_REUSED",
                "message": message,
                "field": field,
                "decisionId": decision_id,
            });
            (StatusCode::CONFLICT, Json(body)).into_response()
        }
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

/// Error ids of this process: one per 500 answered.
static ERRORS_ANSWERED: AtomicU64 = AtomicU64::new(0);

/// A 500: a generic message and an error id for the caller, the detail (a path, SQLite's words, a panic) in the
/// log under the same id, where the operator finds it. Retrying with the same idempotency key is always safe: a
/// decision that was recorded answers again.
fn internal(code: &str, e: &HookError) -> Response {
    let n = ERRORS_ANSWERED.fetch_add(1, Ordering::Relaxed);
    let error_id = format!("e-{:x}-{n}", Timestamp::now().micros());
    tracing::error!("serve: error {error_id}: {e}");
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
