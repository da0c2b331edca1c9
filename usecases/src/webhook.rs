//! Webhooks registered, removed and read (contract §7, `webhook`): a change of an endpoint judged by the `webhooks`
//! crate against the endpoints the tenant's ledger records (the file, or the shard of its partition, where its alerts
//! are), and recorded there with who and why; the endpoints and the delivery log as the commands print them.

use std::io::Write;

use ledger::Ledger;
use ledger::webhooks::{Attempt, Endpoint, EndpointChange};
use serde::Serialize;
use webhooks::{Refused, Registration, Removal};

use crate::{Context, Result, Store};

/// An endpoint registered or removed: the change recorded, in the tenant's ledger after entry `from_seq`.
#[derive(Debug, Serialize)]
pub struct Changed {
    /// The tenant.
    pub tenant: String,
    /// The endpoint.
    pub endpoint_id: String,
    /// Where alerts go.
    pub url: String,
    /// The kinds it wants.
    pub kinds: Vec<String>,
    /// The signing secret: shown once, on registration; never on removal, never in a list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// Registered (true) or removed.
    pub enabled: bool,
    /// The ledger's last entry when recorded: alerts after it are delivered.
    pub from_seq: u64,
}

/// Registers an endpoint in the tenant's ledger of `store`.
pub fn add(store: &Store, asked: &Registration) -> Result<Changed> {
    let mut ledger = tenant_ledger(store, &asked.tenant)?;
    change(&mut ledger, |recorded| webhooks::registration(asked, recorded)).context("webhook not added")
}

/// Removes an endpoint from the tenant's ledger of `store`: its deliveries stop, pending retries included.
pub fn remove(store: &Store, asked: &Removal) -> Result<Changed> {
    let mut ledger = tenant_ledger(store, &asked.tenant)?;
    change(&mut ledger, |recorded| webhooks::removal(asked, recorded)).context("webhook not removed")
}

/// Why a change was not recorded: refused, or the ledger failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChangeError {
    /// The change would be invalid; nothing recorded.
    #[error(transparent)]
    Refused(#[from] Refused),
    /// The ledger failed to read or record.
    #[error("the ledger failed")]
    Ledger(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Judges the change `judge` makes of the endpoints `ledger` records, and records it (`serve`'s admin routes call
/// this with their own connection). Answers what was recorded; a registration's secret is in it, once.
pub fn change(
    ledger: &mut Ledger,
    judge: impl FnOnce(&[Endpoint]) -> std::result::Result<EndpointChange, Refused>,
) -> std::result::Result<Changed, ChangeError> {
    let recorded = ledger.webhook_endpoints().map_err(|e| ChangeError::Ledger(Box::new(e)))?;
    let change = judge(&recorded)?;
    let from_seq = ledger.record_webhook_endpoint(&change).map_err(|e| ChangeError::Ledger(Box::new(e)))?;
    Ok(Changed {
        secret: change.enabled.then_some(change.secret),
        tenant: change.tenant,
        endpoint_id: change.endpoint_id,
        url: change.url,
        kinds: change.kinds,
        enabled: change.enabled,
        from_seq,
    })
}

fn tenant_ledger(store: &Store, tenant: &str) -> Result<Ledger> {
    let ledgers = store.append_all()?;
    for ledger in ledgers {
        if ledger.shard()?.is_none_or(|shard| shard.holds_tenant(tenant)) {
            return Ok(ledger);
        }
    }
    crate::refuse!("no ledger given holds tenant {tenant:?}")
}

/// The endpoints registered (removed ones left out), of `tenant` when given, by tenant and id: no secret.
pub fn list(store: &Store, tenant: Option<&str>) -> Result<Vec<EndpointRow>> {
    let mut rows = Vec::new();
    for ledger in store.read_all()? {
        rows.extend(endpoint_rows(&ledger, tenant)?);
    }
    rows.sort_by(|a, b| (&a.tenant, &a.endpoint_id).cmp(&(&b.tenant, &b.endpoint_id)));
    Ok(rows)
}

/// The endpoints `ledger` records as registered, of `tenant` when given: no secret.
pub fn endpoint_rows(ledger: &Ledger, tenant: Option<&str>) -> Result<Vec<EndpointRow>> {
    let endpoints = ledger.webhook_endpoints()?;
    let mine = endpoints.into_iter().filter(|e| e.enabled && tenant.is_none_or(|t| e.tenant == t));
    Ok(mine.map(EndpointRow::from).collect())
}

/// The attempts recorded, of `tenant` and `endpoint_id` when given, oldest first within each ledger.
pub fn deliveries(store: &Store, tenant: Option<&str>, endpoint_id: Option<&str>) -> Result<Vec<Attempt>> {
    let mut attempts = Vec::new();
    for ledger in store.read_all()? {
        attempts.extend(ledger.webhook_attempts(tenant, endpoint_id)?);
    }
    Ok(attempts)
}

/// An endpoint as `webhook list` shows it: its secret never.
#[derive(Debug, Serialize)]
pub struct EndpointRow {
    /// The tenant.
    pub tenant: String,
    /// The endpoint.
    pub endpoint_id: String,
    /// Where alerts go.
    pub url: String,
    /// The kinds it wants.
    pub kinds: Vec<String>,
    /// Its alerts are those after this ledger entry.
    pub from_seq: u64,
    /// When it was registered.
    pub recorded_at: String,
    /// Who registered it.
    pub actor: String,
    /// Why.
    pub reason: String,
}

impl From<Endpoint> for EndpointRow {
    fn from(e: Endpoint) -> EndpointRow {
        EndpointRow {
            tenant: e.tenant,
            endpoint_id: e.endpoint_id,
            url: e.url,
            kinds: e.kinds,
            from_seq: e.from_seq,
            recorded_at: e.recorded_at.to_string(),
            actor: e.actor,
            reason: e.reason,
        }
    }
}

/// An endpoint registered or removed, in a line; a registration's secret on a line of its own, said to be shown once.
impl std::fmt::Display for Changed {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Changed { tenant, endpoint_id, url, kinds, .. } = self;
        match &self.secret {
            Some(secret) => write!(
                out,
                "webhook {endpoint_id} of {tenant}: alerts {} to {url}, those recorded after ledger seq {}\n\
                 signing secret (shown once, keep it now): {secret}",
                kinds.join(","),
                self.from_seq
            ),
            None => write!(out, "webhook {endpoint_id} of {tenant} removed: no more alerts to {url}"),
        }
    }
}

/// The table of `webhook list`.
pub fn write_endpoint_list(out: &mut dyn Write, rows: &[EndpointRow]) -> std::io::Result<()> {
    let header = ["tenant", "endpoint_id", "url", "kinds", "recorded_at", "actor", "reason"];
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let who = [r.recorded_at.clone(), r.actor.clone(), r.reason.clone()];
            [r.tenant.clone(), r.endpoint_id.clone(), r.url.clone(), r.kinds.join(",")].into_iter().chain(who).collect()
        })
        .collect();
    reports::text::write_table(out, &header, &table)
}

/// The table of `webhook deliveries`: every attempt, oldest first.
pub fn write_deliveries(out: &mut dyn Write, rows: &[Attempt]) -> std::io::Result<()> {
    let header = ["attempted_at", "tenant", "endpoint_id", "alert_id", "kind", "webhook_id", "attempt", "outcome"];
    let header: Vec<&str> = header.into_iter().chain(["status", "error", "next_attempt_at"]).collect();
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|a| {
            let what = [a.attempted_at.to_string(), a.tenant.clone(), a.endpoint_id.clone(), a.alert_id.clone()];
            let how = [a.kind.clone(), a.webhook_id.clone(), a.attempt.to_string(), a.outcome.symbol().into()];
            let status = a.status.map_or("-".into(), |s| s.to_string());
            let next = a.next_attempt_at.map_or("-".into(), |t| t.to_string());
            let last = [status, a.error.clone().unwrap_or_else(|| "-".into()), next];
            what.into_iter().chain(how).chain(last).collect()
        })
        .collect();
    reports::text::write_table(out, &header, &table)
}
