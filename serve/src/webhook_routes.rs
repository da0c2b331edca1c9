//! `/v1/admin/webhooks`: the endpoints a tenant's alerts are delivered to, registered, listed and removed over HTTP
//! as `webhook add|list|remove` does it, and the delivery log (`webhook deliveries`), for admin tokens that cover the
//! tenant. The actor recorded is the token's name. A registration answers its signing secret, once; nothing else
//! ever shows it.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use schemas::AlertKind;
use serde::Deserialize;
use webhooks::{Registration, Removal};

use crate::answer::error;
use crate::app::App;
use crate::changes::Answer;
use crate::tokens::Caller;

/// `POST /v1/admin/webhooks`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AddBody {
    tenant: String,
    /// `https://...`, or `http://` to a loopback address.
    url: String,
    /// None: every kind.
    kinds: Option<Vec<AlertKind>>,
    /// None: `ep-` and random hex digits.
    endpoint_id: Option<String>,
    /// `whsec_` and base64; none: a new random one.
    secret: Option<String>,
    reason: String,
}

/// `POST /v1/admin/webhooks/{endpoint_id}/remove`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RemoveBody {
    tenant: String,
    reason: String,
}

/// `GET /v1/admin/webhooks` and `GET /v1/admin/webhooks/deliveries`: of a tenant, or of every tenant (a token of
/// every tenant).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadQuery {
    tenant: Option<String>,
    endpoint_id: Option<String>,
}

/// The caller's name when its admin token covers `tenant` (none: every tenant).
fn covering(app: &App, headers: &HeaderMap, tenant: Option<&str>) -> Result<String, Box<Response>> {
    let caller: Caller = crate::admin::admin_of(app, headers)?;
    let covers = match tenant {
        Some(tenant) => caller.scope.covers(tenant),
        None => caller.scope == hook::TenantScope::All,
    };
    if !covers {
        let message = match tenant {
            Some(tenant) => format!("this token does not cover tenant {tenant:?}"),
            None => "this answer names every tenant: this token does not cover them all (give tenant)".into(),
        };
        return Err(Box::new(error(StatusCode::FORBIDDEN, "forbidden", message)));
    }
    Ok(caller.name)
}

fn body_of<T>(body: Result<Json<T>, JsonRejection>) -> Result<T, Box<Response>> {
    body.map(|Json(body)| body).map_err(|rejection| Box::new(crate::answer::bad_json(rejection)))
}

pub(crate) async fn add(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Json<AddBody>, JsonRejection>,
) -> Response {
    let admitted = crate::admin::admin_of(&app, &headers)
        .and_then(|_| body_of(body))
        .and_then(|body| Ok((covering(&app, &headers, Some(&body.tenant))?, body)));
    let (actor, body) = match admitted {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let AddBody { tenant, url, kinds, endpoint_id, secret, reason } = body;
    let asked = Registration { tenant, endpoint_id, url, kinds, secret, actor, reason };
    let admin = app.clone();
    let done = tokio::task::spawn_blocking(move || {
        admin.admin.webhook(&asked.tenant, |recorded| webhooks::registration(&asked, recorded))
    });
    answer(done.await, StatusCode::CREATED)
}

pub(crate) async fn remove(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(endpoint_id): Path<String>,
    body: Result<Json<RemoveBody>, JsonRejection>,
) -> Response {
    let admitted = crate::admin::admin_of(&app, &headers)
        .and_then(|_| body_of(body))
        .and_then(|body| Ok((covering(&app, &headers, Some(&body.tenant))?, body)));
    let (actor, body) = match admitted {
        Ok(admitted) => admitted,
        Err(refused) => return *refused,
    };
    let asked = Removal { tenant: body.tenant, endpoint_id, actor, reason: body.reason };
    let admin = app.clone();
    let done = tokio::task::spawn_blocking(move || {
        admin.admin.webhook(&asked.tenant, |recorded| webhooks::removal(&asked, recorded))
    });
    answer(done.await, StatusCode::OK)
}

fn answer(
    done: Result<Result<usecases::webhook::Changed, Answer>, tokio::task::JoinError>,
    status: StatusCode,
) -> Response {
    match done {
        Ok(Ok(changed)) => (status, Json(serde_json::json!({ "endpoint": changed }))).into_response(),
        Ok(Err(refused)) => refused.into_response(),
        Err(panicked) => error(StatusCode::INTERNAL_SERVER_ERROR, "ledger_error", panicked.to_string()),
    }
}

/// `GET /v1/admin/webhooks?tenant=T`: `{endpoints: [...]}`, as `webhook list --json` prints them (no secret).
pub(crate) async fn list(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    query: Result<Query<ReadQuery>, QueryRejection>,
) -> Response {
    read(
        app,
        headers,
        query,
        |ledger, q| {
            let rows = usecases::webhook::endpoint_rows(ledger, q.tenant.as_deref()).map_err(|e| ledger::causes(&e))?;
            let rows = rows.into_iter().filter(|r| q.endpoint_id.as_ref().is_none_or(|id| *id == r.endpoint_id));
            Ok(rows.map(|r| serde_json::to_value(r).expect("a row serializes")).collect())
        },
        "endpoints",
    )
    .await
}

/// `GET /v1/admin/webhooks/deliveries?tenant=T[&endpoint_id=E]`: `{deliveries: [...]}`, every attempt as `webhook
/// deliveries --json` prints it.
pub(crate) async fn deliveries(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    query: Result<Query<ReadQuery>, QueryRejection>,
) -> Response {
    read(
        app,
        headers,
        query,
        |ledger, q| {
            let attempts = ledger.webhook_attempts(q.tenant.as_deref(), q.endpoint_id.as_deref());
            let attempts = attempts.map_err(|e| ledger::causes(&e))?;
            Ok(attempts.into_iter().map(|a| serde_json::to_value(a).expect("an attempt serializes")).collect())
        },
        "deliveries",
    )
    .await
}

type Rows = fn(&ledger::Ledger, &ReadQuery) -> Result<Vec<serde_json::Value>, String>;

async fn read(
    app: Arc<App>,
    headers: HeaderMap,
    query: Result<Query<ReadQuery>, QueryRejection>,
    rows: Rows,
    key: &'static str,
) -> Response {
    let query = match query {
        Ok(Query(query)) => query,
        Err(rejection) => return error(StatusCode::BAD_REQUEST, "bad_request", rejection.body_text()),
    };
    // A name no registration could hold is a mistake to say, not a filter that matches nothing.
    let names = [("tenant", &query.tenant), ("endpoint_id", &query.endpoint_id)];
    for (field, value) in names.into_iter().filter_map(|(field, value)| Some((field, value.as_deref()?))) {
        if let Err(invalid) = schemas::validate::check_name(field, value) {
            return error(StatusCode::BAD_REQUEST, "bad_request", invalid.to_string());
        }
    }
    if let Err(refused) = covering(&app, &headers, query.tenant.as_deref()) {
        return *refused;
    }
    let done = tokio::task::spawn_blocking(move || {
        let mut all = Vec::new();
        for ledger in app.admin.read_all()? {
            all.extend(rows(&ledger, &query).map_err(Answer::Ledger)?);
        }
        Ok::<_, Answer>(all)
    });
    match done.await {
        Ok(Ok(all)) => {
            let answer: serde_json::Map<String, serde_json::Value> =
                [(key.to_string(), all.into())].into_iter().collect();
            Json(answer).into_response()
        }
        Ok(Err(refused)) => refused.into_response(),
        Err(panicked) => error(StatusCode::INTERNAL_SERVER_ERROR, "ledger_error", panicked.to_string()),
    }
}
