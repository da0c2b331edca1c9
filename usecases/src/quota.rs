//! A tenant's remaining quota per policy that applies now (`quota show`): read from the ledger, or from the tenant's
//! shard, as a hook starting on it would count it, the same numbers `GET /v1/quotas` answers. Reads only.

use std::io::Write;

use hook::{QuotaQuery, Quotas};
use schemas::Timestamp;

use crate::{Result, Store};

/// The quotas of `query`'s tenant, counted now in the ledger of `store` that holds its events.
pub fn show(store: &Store, query: &QuotaQuery) -> Result<Quotas> {
    let ledger = store.tenant_ledger(&query.who.tenant)?;
    Ok(hook::quotas::from_ledger(&ledger, query, Timestamp::now())?)
}

/// The quotas as `quota show` prints them: a table, a row per policy.
pub fn write_quotas(out: &mut dyn Write, quotas: &Quotas) -> std::io::Result<()> {
    let header = ["metric", "policy_id", "version", "scope", "enforcement", "window_start", "window_end", "limit"];
    let header = header.into_iter().chain(["grants", "effective_limit", "consumed", "held", "leases", "remaining"]);
    let header: Vec<&str> = header.chain(["time_zone", "overage", "window"]).collect();
    let cell = |value: Option<i64>| value.map_or(String::new(), |v| v.to_string());
    let rows: Vec<Vec<String>> = quotas
        .quotas
        .iter()
        .map(|q| {
            let policy = if q.plan_default { format!("{} (plan)", q.policy_id) } else { q.policy_id.clone() };
            let enforcement =
                if q.throttle { format!("{:?} throttle", q.enforcement) } else { format!("{:?}", q.enforcement) };
            let policy =
                [q.metric.clone(), policy, q.policy_version.to_string(), format!("{:?}", q.scope), enforcement];
            let window = [q.window_start.to_string(), q.window_end.to_string(), q.limit.to_string()];
            let counts = [q.grants, q.effective_limit, q.consumed, q.held, q.leases, q.remaining].map(cell);
            // A throttled overage: its rate, and the tokens the serving process holds (none read from a ledger).
            let overage = match (q.overage_rate, q.overage_window) {
                (Some(rate), Some(window)) => format!("{rate}/{}", window.symbol()),
                _ => String::new(),
            };
            // The kind, and a ROLLING window's length: its window_start..window_end is the one ending now.
            let last = [q.time_zone.clone(), overage, q.window.label(q.window_seconds)];
            policy.into_iter().chain(window).chain(counts).chain(last).collect()
        })
        .collect();
    reports::text::write_table(out, &header, &rows)
}
