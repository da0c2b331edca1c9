//! What an operator reads of every shard this server holds, one part per shard, the parts a command joins:
//! `GET /v1/admin/billing?period=YYYY-MM` (`export billing --cluster`), `GET /v1/admin/status` (`status --cluster`),
//! `GET /v1/admin/verify` (`verify --cluster`), `GET /v1/admin/audit/why?request_id=R` (`audit why --cluster`) and `GET /v1/admin/audit/tenant?tenant=T&from=&to=`
//! (`audit tenant --cluster`). The command finds each shard's owner in the routing catalog and asks it, so support
//! and finance read a running cluster without a copy of its shards. These answers name every tenant: only a token for
//! every tenant (`tenants = ["*"]`) may read them.

use std::path::PathBuf;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use hook::TenantScope;
use ledger::{Ledger, Period};
use schemas::Timestamp;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::Reports;
use crate::answer::error;
use crate::hooks::Hooks;
use crate::routes::App;

/// `GET /v1/admin/billing`'s query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BillingQuery {
    period: String,
}

/// `GET /v1/admin/status` takes no query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StatusQuery {}

/// `GET /v1/admin/verify` takes no query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct VerifyQuery {}

/// `GET /v1/admin/audit/why`'s query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WhyQuery {
    request_id: String,
}

/// `GET /v1/admin/audit/tenant`'s query: the range `[from, to)` in RFC 3339.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TenantQuery {
    tenant: String,
    from: String,
    to: String,
}

/// A read of one shard: its ledger and partition (none for a single ledger of every partition), answered as JSON or
/// refused with why.
type Read = Box<dyn Fn(&Ledger, Option<u32>, &dyn Reports) -> Result<serde_json::Value, String> + Send>;

pub(crate) async fn billing(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    query: Result<Query<BillingQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let query = match admitted(&app, &headers, query) {
        Ok(query) => query,
        Err(refused) => return *refused,
    };
    let period: Period = match query.period.parse() {
        Ok(period) => period,
        Err(e) => return error(StatusCode::BAD_REQUEST, "bad_request", format!("period: {e}")),
    };
    // A preview brings a shard's commit totals to its watermark, as the command does: it opens the shard to write.
    let read: Read = Box::new(move |ledger, partition, reports| reports.bill(ledger, partition, period));
    let answer = serde_json::json!({"period": period.to_string()});
    every_shard(&app, answer, true, read).await
}

pub(crate) async fn status(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    query: Result<Query<StatusQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    if let Err(refused) = admitted(&app, &headers, query) {
        return *refused;
    }
    // A shard knows its partition; a ledger of every partition answers the plain status.
    let read: Read = Box::new(|ledger, _, _| {
        let status = match ledger.shard().map_err(|e| ledger::causes(&e))? {
            Some(shard) => serde_json::to_value(ledger.shard_status(shard).map_err(|e| ledger::causes(&e))?),
            None => serde_json::to_value(ledger.status().map_err(|e| ledger::causes(&e))?),
        };
        status.map_err(|e| e.to_string())
    });
    every_shard(&app, serde_json::json!({}), false, read).await
}

pub(crate) async fn verify(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    query: Result<Query<VerifyQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    if let Err(refused) = admitted(&app, &headers, query) {
        return *refused;
    }
    // A shard's chain and the partition of its entries; a ledger of every partition, its chain.
    let read: Read = Box::new(|ledger, _, _| {
        let report = match ledger.shard().map_err(|e| ledger::causes(&e))? {
            Some(shard) => serde_json::to_value(ledger.verify_shard(shard).map_err(|e| ledger::causes(&e))?),
            None => serde_json::to_value(ledger.verify_against(&[]).map_err(|e| ledger::causes(&e))?),
        };
        report.map_err(|e| e.to_string())
    });
    every_shard(&app, serde_json::json!({}), false, read).await
}

pub(crate) async fn why(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    query: Result<Query<WhyQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let query = match admitted(&app, &headers, query) {
        Ok(query) => query,
        Err(refused) => return *refused,
    };
    let request_id = query.request_id;
    let answer = serde_json::json!({"request_id": request_id});
    let read: Read = Box::new(move |ledger, _, reports| reports.why(ledger, &request_id));
    every_shard(&app, answer, false, read).await
}

pub(crate) async fn tenant(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    query: Result<Query<TenantQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let query = match admitted(&app, &headers, query) {
        Ok(query) => query,
        Err(refused) => return *refused,
    };
    let instant = |name: &str, text: &str| {
        Timestamp::parse_rfc3339(text).map_err(|e| format!("{name}: {text:?} is not an RFC 3339 instant: {e}"))
    };
    let (from, to) = match (instant("from", &query.from), instant("to", &query.to)) {
        (Ok(from), Ok(to)) if from < to => (from, to),
        (Ok(from), Ok(to)) => {
            return error(StatusCode::BAD_REQUEST, "bad_request", format!("from {from} must be before to {to}"));
        }
        (Err(why), _) | (_, Err(why)) => return error(StatusCode::BAD_REQUEST, "bad_request", why),
    };
    let tenant = query.tenant;
    let answer = serde_json::json!({"tenant": tenant});
    let read: Read = Box::new(move |ledger, _, reports| reports.timeline(ledger, &tenant, from, to));
    every_shard(&app, answer, false, read).await
}

/// The query of a caller whose token covers every tenant, or the answer refusing them (boxed: an answer is large).
fn admitted<Q: DeserializeOwned>(
    app: &App,
    headers: &HeaderMap,
    query: Result<Query<Q>, axum::extract::rejection::QueryRejection>,
) -> Result<Q, Box<Response>> {
    let caller = app.tokens.caller(headers).map_err(|unauthorized| Box::new(unauthorized.into_response()))?;
    if !matches!(caller.scope, TenantScope::All) {
        return Err(Box::new(error(
            StatusCode::FORBIDDEN,
            "forbidden",
            "this answer names every tenant: this token does not cover them all",
        )));
    }
    query.map(|Query(query)| query).map_err(|r| Box::new(error(StatusCode::BAD_REQUEST, "bad_request", r.body_text())))
}

/// The ledgers a read of every tenant answers from, with their partition: the file of `serve --ledger` (none), each
/// shard of `serve --data`, and each shard a node holds now.
fn ledgers(app: &App) -> Vec<(Option<u32>, PathBuf)> {
    match &app.hook {
        Hooks::One(_) => app.admin.ledger_file().map(|path| vec![(None, path.to_path_buf())]).unwrap_or_default(),
        Hooks::Shards(shards) => shards.held().into_iter().map(|p| (Some(p), shards.dir().path_of(p))).collect(),
    }
}

/// `answer` with `shards`: `read` of each shard held, each with its `partition`, off the async workers (a read of a
/// month takes a while); the first shard that fails fails the answer, naming it. `write` opens the shards to write.
async fn every_shard(app: &Arc<App>, mut answer: serde_json::Value, write: bool, read: Read) -> Response {
    let Some(reports) = app.reports.clone() else {
        return error(StatusCode::NOT_IMPLEMENTED, "not_implemented", "this server reads no reports");
    };
    let ledgers = ledgers(app);
    let computed = tokio::task::spawn_blocking(move || {
        ledgers
            .into_iter()
            .map(|(partition, path)| {
                let named = |cause: String| match partition {
                    Some(p) => format!("shard {p} ({}): {cause}", path.display()),
                    None => format!("{}: {cause}", path.display()),
                };
                let ledger = if write { Ledger::open(&path) } else { Ledger::open_read_only(&path) };
                let ledger = ledger.map_err(|e| named(ledger::causes(&e)))?;
                let mut part = read(&ledger, partition, reports.as_ref()).map_err(named)?;
                if let Some(object) = part.as_object_mut() {
                    object.insert("partition".into(), serde_json::json!(partition));
                }
                Ok(part)
            })
            .collect::<Result<Vec<serde_json::Value>, String>>()
    })
    .await;
    match computed {
        Ok(Ok(shards)) => {
            answer["shards"] = serde_json::Value::Array(shards);
            (StatusCode::OK, Json(answer)).into_response()
        }
        Ok(Err(message)) => error(StatusCode::INTERNAL_SERVER_ERROR, "ledger_error", message),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "ledger_error", format!("the read stopped: {e}")),
    }
}
