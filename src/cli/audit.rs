//! `audit why REQUEST_ID [--json]` and `audit tenant TENANT --from RFC3339 --to RFC3339 [--json]` (contract §7):
//! support's answers, in words to paste to a customer or as JSON. An unknown request id, or a tenant the ledger
//! holds no event of, exits 1 with the nearest known ones.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;
use reports::audit::{render, why};
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
    match command {
        AuditCommand::Why { request_id, json, cluster } => {
            if let Some(cluster) = cluster.asked()? {
                return why_of_cluster(&cluster, &request_id, json);
            }
            let (answer, shard) = usecases::audit::why(store, &request_id)?;
            if let Some(shard) = shard {
                eprintln!("audit: request {request_id} is recorded in {shard}");
            }
            match answer {
                Ok(answer) => super::print(&answer, json, |out, answer| out.write_all(render::why(answer).as_bytes())),
                Err(unknown) if json => {
                    unknown_json(usecases::audit::unknown_request_json(&request_id, &unknown.nearest))
                }
                Err(unknown) => unknown_words(&render::unknown(&unknown)),
            }
        }
        AuditCommand::Tenant { tenant, from, to, json, cluster } => {
            if let Some(cluster) = cluster.asked()? {
                anyhow::ensure!(from < to, "--from {from} must be before --to {to}");
                return tenant_of_cluster(&cluster, &tenant, (from, to), json);
            }
            match usecases::audit::timeline(store, &tenant, from, to)? {
                Ok(timeline) => super::print(&timeline, json, |out, t| out.write_all(render::timeline(t).as_bytes())),
                Err(unknown) if json => {
                    let timeline = serde_json::to_value(&unknown.timeline)?;
                    unknown_json(usecases::audit::unknown_tenant_json(timeline, &unknown.nearest))
                }
                Err(unknown) => unknown_words(&render::unknown_tenant(&unknown)),
            }
        }
    }
}

/// What no ledger holds, as JSON: exit 1.
fn unknown_json(answer: serde_json::Value) -> anyhow::Result<ExitCode> {
    super::print_json(&answer)?;
    Ok(ExitCode::from(super::EXIT_DISCREPANCIES))
}

/// What no ledger holds, in words: exit 1.
fn unknown_words(text: &str) -> anyhow::Result<ExitCode> {
    print(text)?;
    Ok(ExitCode::from(super::EXIT_DISCREPANCIES))
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
    match json {
        true => unknown_json(usecases::audit::unknown_request_json(request_id, &nearest)),
        false => unknown_words(&render::unknown(&why::Unknown { request_id: request_id.to_string(), nearest })),
    }
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
    match json {
        true => unknown_json(usecases::audit::unknown_tenant_json(own["timeline"].clone(), &nearest)),
        false => unknown_words(&render::unknown_tenant_named(tenant, &nearest)),
    }
}

fn print(text: &str) -> anyhow::Result<()> {
    super::stdout().write_all(text.as_bytes())?;
    Ok(())
}
