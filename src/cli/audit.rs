//! `audit why REQUEST_ID [--json]` and `audit tenant TENANT --from RFC3339 --to RFC3339 [--json]` (contract §7):
//! support's answers, in words to paste to a customer or as JSON. An unknown request id, or a tenant the ledger
//! holds no event of, exits 1 with the nearest known ones.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;
use reports::audit::{render, tenant, why};
use schemas::Timestamp;

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Why a request was allowed or denied: decision, policy, counter, consumption, grants, adjustments.
    Why {
        /// The request id the decision was recorded with.
        request_id: String,
        /// Print JSON instead of words.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        cluster: super::cluster::ClusterArgs,
    },
    /// A tenant's decisions, consumption per day, reservations and adjustments over a time range.
    Tenant {
        tenant: String,
        /// Start of the range, inclusive (RFC 3339).
        #[arg(long, value_parser = parse_instant)]
        from: Timestamp,
        /// End of the range, exclusive (RFC 3339).
        #[arg(long, value_parser = parse_instant)]
        to: Timestamp,
        /// Print JSON instead of words.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        cluster: super::cluster::ClusterArgs,
    },
}

fn parse_instant(text: &str) -> Result<Timestamp, String> {
    Timestamp::parse_rfc3339(text)
        .map_err(|e| format!("{text:?} is not an RFC 3339 instant such as 2026-11-01T00:00:00Z: {e}"))
}

pub fn run(store: &super::Store, command: AuditCommand) -> anyhow::Result<ExitCode> {
    match &command {
        AuditCommand::Why { request_id, json, cluster } => {
            if let Some(cluster) = cluster.asked()? {
                return why_of_cluster(&cluster, request_id, *json);
            }
        }
        AuditCommand::Tenant { tenant, from, to, json, cluster } => {
            if let Some(cluster) = cluster.asked()? {
                anyhow::ensure!(from < to, "--from {from} must be before --to {to}");
                return tenant_of_cluster(&cluster, tenant, (*from, *to), *json);
            }
        }
    }
    // A set of shards answers as one ledger would: the request from the shard holding it, the tenant from its own.
    let (ledger, set) = match store.open_read()? {
        usecases::store::Opened::File(ledger) => (Some(*ledger), Vec::new()),
        usecases::store::Opened::Shards(set) => (None, set),
    };
    match command {
        AuditCommand::Why { request_id, json, .. } => match match &ledger {
            Some(ledger) => why::why(ledger, &request_id)?,
            None => why::why_in(&set, &request_id)?.map(|(shard, answer)| {
                eprintln!("audit: request {request_id} is recorded in {shard}");
                answer
            }),
        } {
            Ok(answer) if json => super::print_json(&answer).map(|()| ExitCode::SUCCESS),
            Ok(answer) => print(&render::why(&answer)).map(|()| ExitCode::SUCCESS),
            Err(unknown) => {
                if json {
                    super::print_json(&serde_json::json!({
                        "error": "unknown_request_id",
                        "request_id": unknown.request_id,
                        "nearest": unknown.nearest,
                    }))?;
                } else {
                    print(&render::unknown(&unknown))?;
                }
                Ok(ExitCode::from(super::EXIT_DISCREPANCIES))
            }
        },
        AuditCommand::Tenant { tenant, from, to, json, .. } => {
            anyhow::ensure!(from < to, "--from {from} must be before --to {to}");
            let answer = match &ledger {
                Some(ledger) => tenant::timeline(ledger, &tenant, from, to)?,
                None => tenant::timeline_in(&set, &tenant, from, to)?,
            };
            match answer {
                Ok(timeline) if json => super::print_json(&timeline).map(|()| ExitCode::SUCCESS),
                Ok(timeline) => print(&render::timeline(&timeline)).map(|()| ExitCode::SUCCESS),
                Err(unknown) => {
                    if json {
                        // The empty timeline's keys, as for a known tenant (add, never rename), and why.
                        let mut answer = serde_json::to_value(&unknown.timeline)?;
                        if let Some(object) = answer.as_object_mut() {
                            object.insert("error".into(), "unknown_tenant".into());
                            object.insert("nearest".into(), serde_json::json!(unknown.nearest));
                        }
                        super::print_json(&answer)?;
                    } else {
                        print(&render::unknown_tenant(&unknown))?;
                    }
                    Ok(ExitCode::from(super::EXIT_DISCREPANCIES))
                }
            }
        }
    }
}

/// `audit why --cluster`: every owner looks for the request in the shards it holds (a request's decisions are its
/// tenant's, in one shard); the shard holding it answers, else the nearest request ids of every shard.
fn why_of_cluster(cluster: &usecases::cluster::Cluster, request_id: &str, json: bool) -> anyhow::Result<ExitCode> {
    let answered = cluster.ask_owners("/v1/admin/audit/why", &[("request_id", request_id)])?;
    if let Some((partition, part)) = answered.shards.iter().find(|(_, part)| part.get("why").is_some()) {
        eprintln!("audit: request {request_id} is recorded in shard {partition} of {}", answered.shards.len());
        return print_part(part, "why", json);
    }
    let nearest = usecases::cluster::nearest_of(request_id, &answered.shards);
    if json {
        super::print_json(&serde_json::json!({
            "error": "unknown_request_id",
            "request_id": request_id,
            "nearest": nearest,
        }))?;
    } else {
        print(&render::unknown(&why::Unknown { request_id: request_id.to_string(), nearest }))?;
    }
    Ok(ExitCode::from(super::EXIT_DISCREPANCIES))
}

/// A shard's answer as the local command prints it: its `key` as JSON, or the words its owner rendered.
fn print_part(part: &serde_json::Value, key: &str, json: bool) -> anyhow::Result<ExitCode> {
    match json {
        true => super::print_json(&part[key]),
        false => print(part["words"].as_str().unwrap_or_default()),
    }
    .map(|()| ExitCode::SUCCESS)
}

/// `audit tenant --cluster`: the timeline from the tenant's shard, which holds all of its events; a tenant unknown there
/// gets the nearest tenants of every shard (a mistyped tenant hashes to another shard).
fn tenant_of_cluster(
    cluster: &usecases::cluster::Cluster,
    tenant: &str,
    (from, to): (Timestamp, Timestamp),
    json: bool,
) -> anyhow::Result<ExitCode> {
    let (from_text, to_text) = (from.to_string(), to.to_string());
    let query = [("tenant", tenant), ("from", from_text.as_str()), ("to", to_text.as_str())];
    let answered = cluster.ask_owners("/v1/admin/audit/tenant", &query)?;
    let partitions = u32::try_from(answered.shards.len()).context("more shards than partitions")?;
    let own = &answered.shards[&schemas::partition::partition_of(tenant, partitions)];
    if own.get("nearest").is_none() {
        return print_part(own, "timeline", json);
    }
    let nearest = usecases::cluster::nearest_of(tenant, &answered.shards);
    if json {
        // The empty timeline's keys, as for a known tenant (add, never rename), and why.
        let mut answer = own["timeline"].clone();
        if let Some(object) = answer.as_object_mut() {
            object.insert("error".into(), "unknown_tenant".into());
            object.insert("nearest".into(), serde_json::json!(nearest));
        }
        super::print_json(&answer)?;
    } else {
        print(&render::unknown_tenant_named(tenant, &nearest))?;
    }
    Ok(ExitCode::from(super::EXIT_DISCREPANCIES))
}

fn print(text: &str) -> anyhow::Result<()> {
    super::stdout().write_all(text.as_bytes())?;
    Ok(())
}
