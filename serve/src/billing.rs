//! `GET /v1/admin/billing?period=YYYY-MM`: the billing export of a month from every shard this server holds, as
//! `export billing` without `--final` computes it, one part per shard. `export billing --cluster` asks each shard's
//! owner for it and joins the parts (`BillingExport::union`), so finance reads a running cluster's bill without a
//! copy of its shards. Bills name every tenant: only a token for every tenant (`tenants = ["*"]`) may read them.

use std::path::PathBuf;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use hook::TenantScope;
use ledger::{Ledger, Period};
use serde::Deserialize;

use crate::answer::error;
use crate::hooks::Hooks;
use crate::routes::App;

/// The query: the month.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BillingQuery {
    period: String,
}

/// The ledgers a read of every tenant answers from, with their partition: the file of `serve --ledger` (none), each
/// shard of `serve --data`, and each shard a node holds now.
fn ledgers(app: &App) -> Vec<(Option<u32>, PathBuf)> {
    match &app.hook {
        Hooks::One(_) => app.admin.ledger_file().map(|path| vec![(None, path.to_path_buf())]).unwrap_or_default(),
        Hooks::Shards(shards) => shards.held().into_iter().map(|p| (Some(p), shards.dir().path_of(p))).collect(),
    }
}

pub(crate) async fn billing(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    query: Result<Query<BillingQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let caller = match app.tokens.caller(&headers) {
        Ok(caller) => caller,
        Err(unauthorized) => return unauthorized.into_response(),
    };
    if !matches!(caller.scope, TenantScope::All) {
        return error(
            StatusCode::FORBIDDEN,
            "forbidden",
            "a bill names every tenant: this token does not cover them all",
        );
    }
    let Query(query) = match query {
        Ok(query) => query,
        Err(rejection) => return error(StatusCode::BAD_REQUEST, "bad_request", rejection.body_text()),
    };
    let period: Period = match query.period.parse() {
        Ok(period) => period,
        Err(e) => return error(StatusCode::BAD_REQUEST, "bad_request", format!("period: {e}")),
    };
    let Some(bills) = app.bills.clone() else {
        return error(StatusCode::NOT_IMPLEMENTED, "not_implemented", "this server computes no bills");
    };
    let ledgers = ledgers(&app);
    // A preview holds a shard's write lock while it brings the commit totals to its watermark, as the command does:
    // off the async workers.
    let computed = tokio::task::spawn_blocking(move || {
        ledgers
            .into_iter()
            .map(|(partition, path)| {
                let named = |e: &(dyn std::error::Error + 'static)| match partition {
                    Some(p) => format!("shard {p} ({}): {}", path.display(), ledger::causes(e)),
                    None => format!("{}: {}", path.display(), ledger::causes(e)),
                };
                let ledger = Ledger::open(&path).map_err(|e| named(&e))?;
                bills.shard(&ledger, partition, period).map_err(|cause| match partition {
                    Some(p) => format!("shard {p} ({}): {cause}", path.display()),
                    None => format!("{}: {cause}", path.display()),
                })
            })
            .collect::<Result<Vec<serde_json::Value>, String>>()
    })
    .await;
    match computed {
        Ok(Ok(shards)) => {
            (StatusCode::OK, Json(serde_json::json!({"period": period.to_string(), "shards": shards}))).into_response()
        }
        Ok(Err(message)) => error(StatusCode::INTERNAL_SERVER_ERROR, "ledger_error", message),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "ledger_error", format!("the export stopped: {e}")),
    }
}
