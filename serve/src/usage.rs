//! `GET /v1/usage`: a tenant's consumption per metric and window between two instants, for customers' dashboards
//! (`reports::usage`), with the quotas in force now (`/v1/quotas`'s answer) beside it. Any token covering the tenant
//! reads it, as it reads the quotas: a tenant's own dashboard reads its own usage. Answered from the tenant's shard.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use schemas::{Timestamp, Tz, Who};
use serde::Deserialize;
use usecases::usage::{Granularity, Member, Unanswerable, UsageQuery};

use crate::answer::{bad_field, error};
use crate::app::App;
use crate::hooks::Hooks;

/// `GET /v1/usage`'s query: `[from, to)` in RFC 3339.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UsageParams {
    tenant: String,
    from: String,
    to: String,
    /// `hour`, `day` (the default), `month` or `cycle`.
    granularity: Option<String>,
    /// The IANA zone of hours, days and months (UTC by default).
    time_zone: Option<String>,
    metric: Option<String>,
    subject: Option<String>,
    project: Option<String>,
    api_key: Option<String>,
    /// `subject`, `project` or `api_key`.
    group_by: Option<String>,
}

/// The query a dashboard asked, read: each field's fault named.
fn read(params: UsageParams) -> Result<UsageQuery, Unanswerable> {
    let bad = |field: &'static str, message: String| Unanswerable { field, message };
    let instant = |field: &'static str, text: &str| {
        Timestamp::parse_rfc3339(text).map_err(|e| bad(field, format!("{text:?} is not an RFC 3339 instant: {e}")))
    };
    let granularity = match params.granularity.as_deref() {
        None => Granularity::Day,
        Some(name) => {
            Granularity::named(name).ok_or_else(|| bad("granularity", "is hour, day, month or cycle".into()))?
        }
    };
    let zone = match params.time_zone.as_deref() {
        None => Tz::UTC,
        Some(name) => name.parse::<Tz>().map_err(|_| bad("time_zone", format!("{name:?} is not an IANA zone")))?,
    };
    let group_by = match params.group_by.as_deref() {
        None => None,
        Some(name) => {
            Some(Member::named(name).ok_or_else(|| bad("group_by", "is subject, project or api_key".into()))?)
        }
    };
    let mut only = BTreeMap::new();
    for (member, value) in
        [(Member::Subject, params.subject), (Member::Project, params.project), (Member::ApiKey, params.api_key)]
    {
        if let Some(value) = value {
            only.insert(member, value);
        }
    }
    Ok(UsageQuery {
        from: instant("from", &params.from)?,
        to: instant("to", &params.to)?,
        tenant: params.tenant,
        granularity,
        zone,
        metric: params.metric,
        only,
        group_by,
    })
}

pub(crate) async fn usage(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    params: Result<Query<UsageParams>, QueryRejection>,
) -> Response {
    let caller = match app.tokens.caller(&headers) {
        Ok(caller) => caller,
        Err(unauthorized) => return unauthorized.into_response(),
    };
    let Query(params) = match params {
        Ok(params) => params,
        Err(rejection) => return error(StatusCode::BAD_REQUEST, "bad_request", rejection.body_text()),
    };
    if !caller.scope.covers(&params.tenant) {
        let message = format!("this token does not cover tenant {:?}", params.tenant);
        return error(StatusCode::FORBIDDEN, "forbidden", message);
    }
    let query = match read(params) {
        Ok(query) => query,
        Err(unanswerable) => return bad_field(unanswerable.field, unanswerable.message),
    };
    // The quotas first: a tenant whose shard this server does not hold is answered 421 naming its owner.
    let partition = app.partition_of(&query.tenant);
    let who = Who {
        tenant: query.tenant.clone(),
        subject: query.only.get(&Member::Subject).cloned(),
        project: query.only.get(&Member::Project).cloned(),
        api_key: query.only.get(&Member::ApiKey).cloned(),
    };
    let quotas = match app.hook.quotas_async(hook::QuotaQuery { who, metric: query.metric.clone() }).await {
        Ok(quotas) => quotas.quotas,
        Err(e) => return app.refused(partition, e),
    };
    let path = match (&app.hook, partition) {
        (Hooks::Shards(shards), Some(partition)) => shards.dir().path_of(partition),
        _ => match app.admin.ledger_file() {
            Some(path) => path.to_path_buf(),
            None => return error(StatusCode::INTERNAL_SERVER_ERROR, "ledger_error", "no ledger file to read"),
        },
    };
    let read = tokio::task::spawn_blocking(move || {
        let answered = usecases::usage::of_tenant(&path, &query).map_err(|e| ledger::causes(&e))?;
        Ok::<_, String>((query, answered))
    })
    .await;
    match read {
        Ok(Ok((query, Ok(usage)))) => {
            let body = serde_json::json!({
                "tenant": query.tenant,
                "from": query.from,
                "to": query.to,
                "granularity": query.granularity,
                "timeZone": query.zone.name(),
                "watermark": usage.watermark,
                "data": usage.data,
                "quotas": quotas,
            });
            (StatusCode::OK, Json(body)).into_response()
        }
        Ok(Ok((_, Err(unanswerable)))) => bad_field(unanswerable.field, unanswerable.message),
        Ok(Err(message)) => error(StatusCode::INTERNAL_SERVER_ERROR, "ledger_error", message),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "ledger_error", format!("the read stopped: {e}")),
    }
}
