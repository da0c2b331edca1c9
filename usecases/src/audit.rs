//! Support's answers (contract §7) of a store: why a request was decided so, from the shard that holds it, and a
//! tenant's timeline over a time range, from its own. A request id or a tenant the store holds nothing of is answered
//! too: with the nearest known ones.

use ledger::shards::Shard;
use reports::audit::tenant::{Timeline, UnknownTenant};
use reports::audit::why::{Unknown, Why};
use schemas::Timestamp;

use crate::store::Opened;
use crate::{Result, Store, refuse};

/// Why `request_id` was decided so in `store`, with the shard that holds it for a directory of shards.
pub fn why(store: &Store, request_id: &str) -> Result<(Result<Why, Unknown>, Option<Shard>)> {
    Ok(match store.open_read()? {
        Opened::File(ledger) => (reports::audit::why::why(&ledger, request_id)?, None),
        Opened::Shards(set) => match reports::audit::why::why_in(&set, request_id)? {
            Ok((shard, answer)) => (Ok(answer), Some(shard)),
            Err(unknown) => (Err(unknown), None),
        },
    })
}

/// `tenant`'s timeline in `store` from `from` (inclusive) to `to` (exclusive): a directory's from the tenant's shard.
pub fn timeline(
    store: &Store,
    tenant: &str,
    from: Timestamp,
    to: Timestamp,
) -> Result<Result<Timeline, UnknownTenant>> {
    let opened = store.open_read()?;
    if from >= to {
        refuse!("--from {from} must be before --to {to}");
    }
    Ok(match opened {
        Opened::File(ledger) => reports::audit::tenant::timeline(&ledger, tenant, from, to)?,
        Opened::Shards(set) => reports::audit::tenant::timeline_in(&set, tenant, from, to)?,
    })
}

/// What `audit why --json` answers for a request id no ledger holds: the nearest known ones.
pub fn unknown_request_json(request_id: &str, nearest: &[String]) -> serde_json::Value {
    serde_json::json!({ "error": "unknown_request_id", "request_id": request_id, "nearest": nearest })
}

/// What `audit tenant --json` answers for a tenant no ledger holds an event of: the empty timeline's keys, as for a
/// known tenant (keys are added, never renamed), and why, with the nearest known tenants.
pub fn unknown_tenant_json(mut timeline: serde_json::Value, nearest: &[String]) -> serde_json::Value {
    if let Some(object) = timeline.as_object_mut() {
        object.insert("error".into(), "unknown_tenant".into());
        object.insert("nearest".into(), serde_json::json!(nearest));
    }
    timeline
}
