//! `POST /v1/admin/policies`, `POST /v1/admin/grants`, `POST /v1/admin/meters` and `POST /v1/admin/corrections`: the
//! control plane over HTTP, for tokens with
//! `admin = true` that cover the tenant (docs/services.md). A change is judged and recorded by the `control` crate,
//! as `policy set` and `grant add` do it, through a ledger connection of its own, one change at a time: changes are
//! rare (people change plans), and the hook's writer learns of them as of any other writer's append, by the ledger's
//! data version before its next group, so the next decision is made under them.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use control::{GrantChange, MeterChange, PolicyChange};
use schemas::{
    Aggregation, CorrectionAction, Enforcement, Event, MeterField, OnFailure, Scope, Timestamp, Violation, Who, Window,
};
use serde::Deserialize;

use crate::answer::{bad_json, error};
use crate::app::App;
use crate::changes::Answer;
use crate::tokens::Caller;

/// `POST /v1/admin/policies`: a new version of a policy (tenant `*`: a plan default).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PolicyBody {
    tenant: String,
    metric: String,
    limit: i64,
    window: Window,
    enforcement: Enforcement,
    #[serde(default = "tenant_scope")]
    scope: Scope,
    policy_id: Option<String>,
    version: Option<i32>,
    /// RFC 3339.
    effective_from: Option<String>,
    /// The IANA time zone of the HOUR, DAY and MONTH windows; none is UTC. An unknown name is a 400.
    time_zone: Option<String>,
    /// CLOSED (503 when the ledger cannot record) or OPEN (FAIL_OPEN under the emergency rate); none is CLOSED.
    on_failure: Option<OnFailure>,
    /// A HARD quota's throttled overage: beyond the limit, `rate` units per `window`; none is a wall.
    overage_throttle: Option<OverageThrottle>,
    /// A gauge quota: what it refuses while the tenant's level is above the limit (NO_INSERTS, NO_WRITES, DISABLE).
    violation: Option<Violation>,
    /// The length of a ROLLING window in seconds, 1 to 2,678,400: with window ROLLING only, and always with it.
    window_seconds: Option<i64>,
    /// The billing anchor of a BILLING_CYCLE window (RFC 3339): with window BILLING_CYCLE only, and always with it.
    cycle_anchor: Option<Timestamp>,
    /// The percents of a window's effective limit at which a THRESHOLD alert is written: at most 10, each 1 to 1,000,
    /// strictly increasing; none is 80, 90 and 100, `[]` no THRESHOLD alert.
    alert_thresholds: Option<Vec<i32>>,
    /// Of a TENANT policy, 1 to 99: the percent of the tenant's consumption in a window above which one subject's
    /// calls for a SUBJECT_SHARE alert; none for no such alert.
    alert_subject_share: Option<i32>,
    reason: String,
}

/// `overage_throttle` of [`PolicyBody`].
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct OverageThrottle {
    rate: i64,
    window: Window,
}

fn tenant_scope() -> Scope {
    Scope::TENANT
}

/// `POST /v1/admin/corrections`: a correction of a recorded usage event of `tenant`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CorrectionBody {
    /// The tenant of the usage event: the token must cover it.
    tenant: String,
    /// The event_id of the usage event corrected.
    original_event_id: String,
    /// VOID or AMEND.
    action: CorrectionAction,
    /// AMEND: what the event counts from now on; none on a VOID.
    quantity: Option<i64>,
    /// The correction's own event_id; none: derived from the event and the change.
    correction_id: Option<String>,
    reason: String,
}

/// `POST /v1/admin/meters`: a new version of how a tenant's (tenant `*`: every tenant's) metric aggregates.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MeterBody {
    tenant: String,
    metric: String,
    /// SUM, COUNT, UNIQUE_COUNT, MAX, LATEST, TIME_WEIGHTED_SUM or TIME_WEIGHTED_AVERAGE.
    aggregation: Aggregation,
    /// UNIQUE_COUNT: SUBJECT, PROJECT or API_KEY; none for the others.
    field: Option<MeterField>,
    version: Option<i32>,
    /// RFC 3339: windows starting at or after it aggregate so; none is now.
    effective_from: Option<String>,
    reason: String,
}

/// `POST /v1/admin/grants`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GrantBody {
    /// The tenant, and the subject (project, API key) whose SUBJECT (PROJECT, API_KEY) windows it raises: at most one
    /// of subject, project, api_key.
    #[serde(flatten)]
    who: Who,
    metric: String,
    amount: i64,
    /// RFC 3339.
    valid_from: String,
    /// RFC 3339, exclusive.
    valid_until: String,
    grant_id: Option<String>,
    reason: String,
}

fn time(field: &str, text: &str) -> Result<Timestamp, Box<Response>> {
    Timestamp::parse_rfc3339(text).map_err(|e| {
        let message = format!("{field} {text:?} is not an RFC 3339 time: {e}");
        Box::new(error(StatusCode::BAD_REQUEST, "invalid_change", message))
    })
}

/// The caller when its token is an admin token: 401 without a known token, 403 without `admin = true`, asked before
/// the body is read, as every route asks the token first. Every `/v1/admin/*` route asks it: changes, and the reads
/// of every tenant (a copy of the ledger, bills, audits) that only an operator makes. The actor recorded is the
/// token's name, from the token file: a body cannot claim to be another.
pub(crate) fn admin_of(app: &App, headers: &HeaderMap) -> Result<Caller, Box<Response>> {
    let caller = app.tokens.caller(headers).map_err(|u| Box::new(u.into_response()))?;
    if !caller.admin {
        let message = "this token is not an admin token (admin = true)";
        return Err(Box::new(error(StatusCode::FORBIDDEN, "forbidden", message)));
    }
    Ok(caller)
}

/// The body, and the caller's name when its token covers the body's tenant (a plan default, `*`, needs a token of
/// every tenant).
fn admitted<T>(
    caller: Caller,
    body: Result<Json<T>, JsonRejection>,
    tenant: impl Fn(&T) -> &str,
) -> Result<(String, T), Box<Response>> {
    let Json(body) = body.map_err(|rejection| Box::new(bad_json(rejection)))?;
    let covers = match tenant(&body) {
        "*" => caller.scope == hook::TenantScope::All,
        tenant => caller.scope.covers(tenant),
    };
    if !covers {
        let message = format!("this token does not cover tenant {:?}", tenant(&body));
        return Err(Box::new(error(StatusCode::FORBIDDEN, "forbidden", message)));
    }
    Ok((caller.name, body))
}

/// What a recorded change answers: 201 with the event and the ledger entries that hold it.
fn recorded(event: Event, seqs: Vec<u64>) -> Response {
    let body = serde_json::json!({"event": event.to_json(), "seqs": seqs});
    (StatusCode::CREATED, Json(body)).into_response()
}

pub(crate) async fn policies(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Json<PolicyBody>, JsonRejection>,
) -> Response {
    let admitted = admin_of(&app, &headers).and_then(|caller| admitted(caller, body, |b: &PolicyBody| &b.tenant));
    let (actor, body) = match admitted {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let effective_from = match body.effective_from.as_deref().map(|t| time("effective_from", t)).transpose() {
        Ok(t) => t,
        Err(refused) => return *refused,
    };
    let change = PolicyChange {
        tenant: body.tenant,
        metric: body.metric,
        limit: body.limit,
        window: body.window,
        enforcement: body.enforcement,
        scope: body.scope,
        policy_id: body.policy_id,
        version: body.version,
        effective_from,
        time_zone: body.time_zone,
        on_failure: body.on_failure,
        overage: body.overage_throttle.map(|o| (o.rate, o.window)),
        violation: body.violation,
        window_seconds: body.window_seconds,
        cycle_anchor: body.cycle_anchor,
        alert_thresholds: body.alert_thresholds,
        alert_subject_share: body.alert_subject_share,
        actor,
        reason: body.reason,
        source: "serve /v1/admin/policies".into(),
    };
    let admin = app.clone();
    let done = tokio::task::spawn_blocking(move || {
        admin.admin.change(|recorded, now| control::policy_event(&change, recorded, now).map(Event::Policy))
    });
    answer(done.await)
}

pub(crate) async fn grants(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Json<GrantBody>, JsonRejection>,
) -> Response {
    let admitted = admin_of(&app, &headers).and_then(|caller| admitted(caller, body, |b: &GrantBody| &b.who.tenant));
    let (actor, body) = match admitted {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let validity =
        time("valid_from", &body.valid_from).and_then(|from| Ok((from, time("valid_until", &body.valid_until)?)));
    let (valid_from, valid_until) = match validity {
        Ok(validity) => validity,
        Err(refused) => return *refused,
    };
    let Who { tenant, subject, project, api_key } = body.who;
    let change = GrantChange {
        tenant,
        subject,
        project,
        api_key,
        metric: body.metric,
        amount: body.amount,
        valid_from,
        valid_until,
        grant_id: body.grant_id,
        actor,
        reason: body.reason,
        source: "serve /v1/admin/grants".into(),
    };
    let admin = app.clone();
    let done = tokio::task::spawn_blocking(move || {
        admin.admin.change(|recorded, now| control::grant_event(&change, recorded, now).map(Event::Grant))
    });
    answer(done.await)
}

/// `POST /v1/admin/meters`: 201 with the meter version recorded; 409 for a version not above the last or a closed
/// period, 400 for a field out of bounds (a UNIQUE_COUNT without its field).
pub(crate) async fn meters(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Json<MeterBody>, JsonRejection>,
) -> Response {
    let admitted = admin_of(&app, &headers).and_then(|caller| admitted(caller, body, |b: &MeterBody| &b.tenant));
    let (actor, body) = match admitted {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let effective_from = match body.effective_from.as_deref().map(|t| time("effective_from", t)).transpose() {
        Ok(effective_from) => effective_from,
        Err(refused) => return *refused,
    };
    let change = MeterChange {
        tenant: body.tenant,
        metric: body.metric,
        aggregation: body.aggregation,
        field: body.field,
        version: body.version,
        effective_from,
        actor,
        reason: body.reason,
        source: "serve /v1/admin/meters".into(),
    };
    let admin = app.clone();
    let done = tokio::task::spawn_blocking(move || {
        admin.admin.change(|recorded, now| control::meter_event(&change, recorded, now).map(Event::Meter))
    });
    answer(done.await)
}

/// `POST /v1/admin/corrections`: 201 with the correction recorded, 200 with the one recorded already under its
/// event_id (a retry); 404 `unknown_original`, 409 with the refusal's code, 400 for a field out of bounds.
pub(crate) async fn corrections(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Json<CorrectionBody>, JsonRejection>,
) -> Response {
    let admitted = admin_of(&app, &headers).and_then(|caller| admitted(caller, body, |b: &CorrectionBody| &b.tenant));
    let (actor, body) = match admitted {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let change = control::CorrectionChange {
        original_event_id: body.original_event_id,
        tenant: Some(body.tenant),
        action: body.action,
        quantity: body.quantity,
        correction_id: body.correction_id,
        actor,
        reason: body.reason,
        source: "serve /v1/admin/corrections".into(),
    };
    let admin = app.clone();
    match tokio::task::spawn_blocking(move || admin.admin.correct(&change)).await {
        Ok(Ok(corrected)) => {
            let status = if corrected.replayed { StatusCode::OK } else { StatusCode::CREATED };
            let event = Event::Correction(corrected.event).to_json();
            let body = serde_json::json!({"event": event, "seqs": corrected.seqs, "replayed": corrected.replayed});
            (status, Json(body)).into_response()
        }
        Ok(Err(refused)) => refused.into_response(),
        Err(panicked) => error(StatusCode::INTERNAL_SERVER_ERROR, "ledger_error", panicked.to_string()),
    }
}

fn answer(done: Result<Result<(Event, Vec<u64>), Answer>, tokio::task::JoinError>) -> Response {
    match done {
        Ok(Ok((event, seqs))) => recorded(event, seqs),
        Ok(Err(refused)) => refused.into_response(),
        Err(panicked) => error(StatusCode::INTERNAL_SERVER_ERROR, "ledger_error", panicked.to_string()),
    }
}
