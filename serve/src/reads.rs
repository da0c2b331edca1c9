//! What an operator reads of every shard this server holds, one part per shard, the parts a command joins:
//! `GET /v1/admin/billing?period=YYYY-MM[&by_project=true]` (`export billing --cluster`), `GET
//! /v1/admin/billing/prepare` and `POST /v1/admin/billing/close` (`export billing --final --cluster`, its two phases), `GET /v1/admin/status` (`status --cluster`),
//! `POST /v1/admin/reconcile` (`reconcile --cluster`), `GET /v1/admin/verify` (`verify --cluster`), `GET /v1/admin/audit/why?request_id=R` (`audit why --cluster`) and `GET /v1/admin/audit/tenant?tenant=T&from=&to=`
//! (`audit tenant --cluster`), and `GET /v1/admin/backup` (`backup --cluster`). The command finds each shard's owner in
//! the routing catalog and asks it, so support and finance read a running cluster without a copy of its shards. These
//! answers name every tenant, and a backup is the whole ledger: only an admin token (`admin = true`) of every tenant
//! (`tenants = ["*"]`) may read them, as only an admin token may change policies. A service's token, which decides,
//! reads none of them.

use std::path::{Path, PathBuf};
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
use usecases::cluster::BACKUP_MANIFEST_HEADER;

use crate::answer::{bad_json, error};
use crate::app::{App, ClaimRefused};
use crate::hooks::Hooks;

/// `GET /v1/admin/billing`'s query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BillingQuery {
    period: String,
    /// Each shard's rows' consumption by project too (`export billing --by project --cluster`).
    #[serde(default)]
    by_project: bool,
}

/// `GET /v1/admin/billing/prepare`'s query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PrepareQuery {
    period: String,
}

/// `POST /v1/admin/billing/close`'s body: the period, the watermark each shard was prepared at by partition (its key
/// the partition in decimal, as JSON keys are text), and whether to answer each shard's consumption by project.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CloseBody {
    period: String,
    watermarks: std::collections::BTreeMap<u32, u64>,
    #[serde(default)]
    by_project: bool,
}

/// The body of `POST /v1/admin/routing/claim`: the partition whose catalog entry should name this node.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClaimBody {
    partition: u32,
}

/// `GET /v1/admin/status` takes no query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StatusQuery {}

/// `GET /v1/admin/verify` takes no query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct VerifyQuery {}

/// `GET /v1/admin/backup`'s query: the shard (none: the ledger of `serve --ledger`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BackupQuery {
    partition: Option<u32>,
}

/// `POST /v1/admin/reconcile`'s body: the instant every shard is reconciled as of, whether to record nothing, and
/// after how many seconds a held reservation is alerted (`reconcile --open-alert-after`, 3,600 when absent).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReconcileBody {
    as_of: String,
    #[serde(default)]
    dry_run: bool,
    // A number when given: null is no number, and the OpenAPI document says so.
    #[serde(default = "an_hour")]
    open_alert_after_s: u64,
}

/// The age of an OPEN_TOO_LONG alert a reconcile takes when its body names none.
fn an_hour() -> u64 {
    3_600
}

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

/// A read of one shard: its file and partition (none for a single ledger of every partition), answered as JSON or
/// refused with why.
type Read = Box<dyn Fn(&Path, Option<u32>) -> Result<serde_json::Value, String> + Send>;

/// A use case's answer as JSON, or its failure with its causes.
fn answered<T: serde::Serialize>(answer: usecases::Result<T>) -> Result<serde_json::Value, String> {
    serde_json::to_value(answer.map_err(|e| ledger::causes(&e))?).map_err(|e| e.to_string())
}

/// The ledger at `path`, read-only unless `write`.
fn open(path: &Path, write: bool) -> Result<Ledger, String> {
    let ledger = if write { Ledger::open(path) } else { Ledger::open_read_only(path) };
    ledger.map_err(|e| ledger::causes(&e))
}

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
    let by_project = query.by_project;
    // A preview brings a shard's commit totals to its watermark, as the command does: it opens the shard to write.
    let read: Read = Box::new(move |path, partition| {
        answered(usecases::shard::bill(&open(path, true)?, partition, period, by_project))
    });
    let answer = serde_json::json!({"period": period.to_string()});
    every_shard(&app, answer, read).await
}

/// `GET /v1/admin/billing/prepare?period=YYYY-MM` (`export billing --final --cluster`, first phase): whether each
/// shard this server holds can close the period now, and the watermark it would close at. Stores nothing: a shard
/// that cannot close answers why, and the command closes no shard anywhere.
pub(crate) async fn prepare(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    query: Result<Query<PrepareQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let query = match admitted(&app, &headers, query) {
        Ok(query) => query,
        Err(refused) => return *refused,
    };
    let period: Period = match query.period.parse() {
        Ok(period) => period,
        Err(e) => return error(StatusCode::BAD_REQUEST, "bad_request", format!("period: {e}")),
    };
    let read: Read = Box::new(move |path, partition| {
        answered(usecases::shard::prepare_close(&open(path, false)?, partition, period))
    });
    let answer = serde_json::json!({"period": period.to_string()});
    every_shard(&app, answer, read).await
}

/// `POST /v1/admin/billing/close` (`export billing --final --cluster`, second phase, once every shard of the cluster
/// prepared): closes the period in each shard the body names that this server holds, at the watermark it was prepared
/// at ([`usecases::shard::close_at`]), and answers their stored exports; the shards it holds that the body does not
/// name are left as they are and out of the answer, and a shard named that it does not hold is missing from it (the
/// command says it moved). A shard that fails fails the answer (409 `not_closed`) naming it; the shards closed before
/// it stay closed, and the command run again completes the close.
pub(crate) async fn close(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Json<CloseBody>, axum::extract::rejection::JsonRejection>,
) -> Response {
    if let Err(refused) = of_every_tenant(&app, &headers) {
        return *refused;
    }
    let body = match body {
        Ok(Json(body)) => body,
        Err(rejection) => return error(StatusCode::BAD_REQUEST, "bad_request", rejection.body_text()),
    };
    let period: Period = match body.period.parse() {
        Ok(period) => period,
        Err(e) => return error(StatusCode::BAD_REQUEST, "bad_request", format!("period: {e}")),
    };
    // A ledger of every partition is named 0, the one shard of its set.
    let named: std::collections::BTreeSet<u32> = body.watermarks.keys().copied().collect();
    let (watermarks, by_project) = (body.watermarks, body.by_project);
    let read: Read = Box::new(move |path, partition| {
        let prepared = watermarks[&partition.unwrap_or(0)];
        answered(usecases::shard::close_at(&mut open(path, true)?, partition, period, prepared, by_project))
    });
    let answer = serde_json::json!({"period": period.to_string()});
    // A close refused (the shard behind its prepared watermark, the period not over) or failed is the caller's to
    // finish by running the command again, not a server fault: 409, naming the shard.
    let named = move |partition: Option<u32>| named.contains(&partition.unwrap_or(0));
    every_shard_of(&app, answer, read, named, (StatusCode::CONFLICT, "not_closed")).await
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
    let read: Read = Box::new(|path, _| answered(usecases::shard::status(&open(path, false)?)));
    // A node says too which of its shards are in transition: those it holds no hook for yet (or any more).
    let answer = match &app.routing {
        Some(routing) => serde_json::json!({"shard_states": routing.shard_states(), "draining": routing.draining()}),
        None => serde_json::json!({}),
    };
    every_shard(&app, answer, read).await
}

/// `POST /v1/admin/routing/claim` (`catalog --repair`): a node records again in the routing catalog that it owns a
/// partition it serves, at an epoch above the entry there; 409 `not_serving` when it does not serve it, 404 on a
/// server that is not a node.
pub(crate) async fn claim(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Json<ClaimBody>, axum::extract::rejection::JsonRejection>,
) -> Response {
    if let Err(refused) = of_every_tenant(&app, &headers) {
        return *refused;
    }
    let partition = match body {
        Ok(Json(body)) => body.partition,
        Err(rejection) => return error(StatusCode::BAD_REQUEST, "bad_request", rejection.body_text()),
    };
    let Some(routing) = app.routing.clone() else {
        return error(StatusCode::NOT_FOUND, "not_found", "this server is not a node of a cluster: it has no routing");
    };
    // Publishing waits for the brokers' acknowledgement: off the async workers.
    match tokio::task::spawn_blocking(move || routing.claim(partition)).await {
        Ok(Ok(epoch)) => Json(serde_json::json!({"partition": partition, "epoch": epoch})).into_response(),
        Ok(Err(ClaimRefused::NotServing(reason))) => error(StatusCode::CONFLICT, "not_serving", reason),
        Ok(Err(ClaimRefused::Failed(reason))) => error(StatusCode::SERVICE_UNAVAILABLE, "not_published", reason),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "internal", format!("the claim failed: {e}")),
    }
}

/// `GET /v1/admin/shards` (`catalog`, `drain`): the shards a node holds and the state of each, from memory (no ledger
/// is opened, unlike `status`): what the catalog check asks every node, and a drain as often as it looks. 404 on a
/// server that is not a node.
pub(crate) async fn shards(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Err(refused) = of_every_tenant(&app, &headers) {
        return *refused;
    }
    match &app.routing {
        Some(routing) => {
            Json(serde_json::json!({"shard_states": routing.shard_states(), "draining": routing.draining()}))
                .into_response()
        }
        None => error(StatusCode::NOT_FOUND, "not_found", "this server is not a node of a cluster: it has no shards"),
    }
}

/// `POST /v1/admin/drain` (`drain`): a node leaves the consumer group, which gives its partitions to the other nodes
/// at once; it answers 421 naming their new owners until it is stopped. 202, or 404 on a server that is not a node.
pub(crate) async fn drain(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Err(refused) = of_every_tenant(&app, &headers) {
        return *refused;
    }
    match &app.routing {
        Some(routing) if routing.drain() => {
            (StatusCode::ACCEPTED, Json(serde_json::json!({"draining": true}))).into_response()
        }
        _ => error(StatusCode::NOT_FOUND, "not_found", "this server is not a node of a cluster: it is in no group"),
    }
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
    let read: Read = Box::new(|path, _| answered(usecases::shard::verify(&open(path, false)?)));
    every_shard(&app, serde_json::json!({}), read).await
}

/// `POST /v1/admin/reconcile` (`reconcile --cluster`): `reconcile --as-of` of every shard this server holds, as the
/// command runs it on a directory of shards (its adjustments recorded and published where the shard is), for an admin
/// token of every tenant as every read here.
pub(crate) async fn reconcile(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Json<ReconcileBody>, axum::extract::rejection::JsonRejection>,
) -> Response {
    if let Err(refused) = of_every_tenant(&app, &headers) {
        return *refused;
    }
    let body = match body {
        Ok(Json(body)) => body,
        Err(rejection) => return bad_json(rejection),
    };
    let as_of = match Timestamp::parse_rfc3339(&body.as_of) {
        Ok(t) if (schemas::validate::TIMESTAMP_MIN..schemas::validate::TIMESTAMP_MAX).contains(&t) => t,
        Ok(_) => {
            return error(StatusCode::BAD_REQUEST, "bad_request", "as_of: outside the accepted range [2000, 2100)");
        }
        Err(e) => {
            let message = format!("as_of: {:?} is not an RFC 3339 instant: {e}", body.as_of);
            return error(StatusCode::BAD_REQUEST, "bad_request", message);
        }
    };
    let dry_run = body.dry_run;
    let open_alert_after_s = match body.open_alert_after_s {
        seconds @ 1..=31_622_400 => seconds,
        _ => return error(StatusCode::BAD_REQUEST, "bad_request", "open_alert_after_s: from 1 to 31622400 (366 days)"),
    };
    let answer = serde_json::json!({"as_of": as_of.to_string(), "dry_run": dry_run});
    let settings =
        usecases::run::RunSettings { as_of, open_alert_after_s, dry_run, full: false, publish: app.publish.clone() };
    let read: Read = Box::new(move |path, _| answered(usecases::shard::reconcile(path, &settings)));
    every_shard(&app, answer, read).await
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
    let read: Read = Box::new(move |path, _| answered(usecases::shard::why(&open(path, false)?, &request_id)));
    every_shard(&app, answer, read).await
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
    let read: Read =
        Box::new(move |path, _| answered(usecases::shard::timeline(&open(path, false)?, &tenant, from, to)));
    every_shard(&app, answer, read).await
}

/// Bytes of a copy read and sent at a time.
const BACKUP_CHUNK_BYTES: usize = 1 << 20;

/// `GET /v1/admin/backup?partition=P` (`backup --cluster`): a consistent copy of a shard this server holds, taken as
/// `backup` takes one (SQLite's online backup, the writers going on beside it) and streamed as it is read, with its
/// manifest in [`BACKUP_MANIFEST_HEADER`]; the caller checks the bytes against it. The copy is taken beside the shard
/// (the same disk, not a small temporary directory) and unlinked once open, so nothing is left if the caller goes.
pub(crate) async fn backup(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    query: Result<Query<BackupQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let query = match admitted(&app, &headers, query) {
        Ok(query) => query,
        Err(refused) => return *refused,
    };
    let Some((_, path)) = ledgers(&app).into_iter().find(|(partition, _)| *partition == query.partition) else {
        let which = query.partition.map_or("a ledger of every partition".to_string(), |p| format!("shard {p}"));
        return error(StatusCode::NOT_FOUND, "not_held", format!("this server does not hold {which} now"));
    };
    let taken = tokio::task::spawn_blocking(move || -> Result<(String, std::fs::File), String> {
        static TAKEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = TAKEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut name = path.clone().into_os_string();
        name.push(format!(".backup-{}-{n}", std::process::id()));
        let copy = PathBuf::from(name);
        let named = |e: &dyn std::error::Error| format!("{}: {}", path.display(), e);
        let ledger = Ledger::open_read_only(&path).map_err(|e| named(&e))?;
        let manifest = ledger.backup_to(&copy).map_err(|e| named(&e));
        let opened = manifest.and_then(|m| {
            let file = std::fs::File::open(&copy).map_err(|e| named(&e))?;
            Ok((ascii_json(&serde_json::to_string(&m).map_err(|e| e.to_string())?), file))
        });
        let _ = std::fs::remove_file(&copy);
        let _ = std::fs::remove_file(ledger::backup::manifest_path(&copy));
        opened
    })
    .await;
    let (manifest, file) = match taken {
        Ok(Ok(taken)) => taken,
        Ok(Err(message)) => return error(StatusCode::INTERNAL_SERVER_ERROR, "ledger_error", message),
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, "ledger_error", format!("the copy stopped: {e}")),
    };
    let (mut sender, body) = http_body_util::channel::Channel::<axum::body::Bytes, std::io::Error>::new(4);
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut file = file;
        loop {
            let mut chunk = vec![0; BACKUP_CHUNK_BYTES];
            match file.read(&mut chunk) {
                Ok(0) => return,
                Ok(n) => {
                    chunk.truncate(n);
                    // The caller went away: stop reading.
                    if runtime.block_on(sender.send_data(chunk.into())).is_err() {
                        return;
                    }
                }
                Err(e) => return sender.abort(e),
            }
        }
    });
    let mut answer = axum::body::Body::new(body).into_response();
    let headers = answer.headers_mut();
    headers.insert(axum::http::header::CONTENT_TYPE, axum::http::HeaderValue::from_static("application/octet-stream"));
    match axum::http::HeaderValue::from_str(&manifest) {
        Ok(value) => headers.insert(BACKUP_MANIFEST_HEADER, value),
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, "ledger_error", format!("the manifest: {e}")),
    };
    answer
}

/// `json` with every character beyond ASCII escaped (`\uXXXX`, surrogate pairs beyond the first plane): the same JSON,
/// fit for an HTTP header.
fn ascii_json(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}

/// The query of a caller with an admin token of every tenant, or the answer refusing them (boxed: an answer is
/// large).
fn admitted<Q: DeserializeOwned>(
    app: &App,
    headers: &HeaderMap,
    query: Result<Query<Q>, axum::extract::rejection::QueryRejection>,
) -> Result<Q, Box<Response>> {
    of_every_tenant(app, headers)?;
    query.map(|Query(query)| query).map_err(|r| Box::new(error(StatusCode::BAD_REQUEST, "bad_request", r.body_text())))
}

/// Nothing when the caller's token is an admin token (401 without a known token, 403 without `admin = true`, as the
/// admin changes answer) covering every tenant (403 otherwise): these routes read or write every tenant's entries.
fn of_every_tenant(app: &App, headers: &HeaderMap) -> Result<(), Box<Response>> {
    let caller = crate::admin::admin_of(app, headers)?;
    if !matches!(caller.scope, TenantScope::All) {
        let message = "this answer names every tenant: this token does not cover them all";
        return Err(Box::new(error(StatusCode::FORBIDDEN, "forbidden", message)));
    }
    Ok(())
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
/// month takes a while); the first shard that fails fails the answer, naming it.
async fn every_shard(app: &Arc<App>, answer: serde_json::Value, read: Read) -> Response {
    every_shard_of(app, answer, read, |_| true, (StatusCode::INTERNAL_SERVER_ERROR, "ledger_error")).await
}

/// [`every_shard`] of the shards held that `named` keeps (by partition), the others left out of the answer; a shard
/// that fails answers `failed` (status and error).
async fn every_shard_of(
    app: &Arc<App>,
    mut answer: serde_json::Value,
    read: Read,
    named: impl Fn(Option<u32>) -> bool,
    failed: (StatusCode, &'static str),
) -> Response {
    let ledgers: Vec<_> = ledgers(app).into_iter().filter(|(partition, _)| named(*partition)).collect();
    let computed = tokio::task::spawn_blocking(move || {
        ledgers
            .into_iter()
            .map(|(partition, path)| {
                let named = |cause: String| match partition {
                    Some(p) => format!("shard {p} ({}): {cause}", path.display()),
                    None => format!("{}: {cause}", path.display()),
                };
                let mut part = read(&path, partition).map_err(named)?;
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
        Ok(Err(message)) => error(failed.0, failed.1, message),
        Err(e) => error(failed.0, failed.1, format!("the read stopped: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves a manifest naming a path beyond ASCII becomes a header value that parses back to the same JSON.
    #[test]
    fn manifest_header_is_ascii_json() {
        let json = serde_json::json!({"source": "/données/shard-0001.db", "emoji": "𝄞", "quote": "a\"b"}).to_string();
        let header = ascii_json(&json);
        assert!(header.is_ascii(), "{header}");
        assert!(axum::http::HeaderValue::from_str(&header).is_ok());
        let back: serde_json::Value = serde_json::from_str(&header).unwrap();
        assert_eq!(back.to_string(), json);
    }
}
