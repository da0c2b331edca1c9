//! `grant add|list`: the control plane's grants (docs/contract.md §7), judged by the `control` crate.

use std::io::Write;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use control::GrantChange;
use schemas::{GrantEvent, Timestamp};
use usecases::change::Changed;

use super::policy::{Target, parse_time};

#[derive(Debug, Subcommand)]
pub enum GrantCommand {
    /// Record a grant: an amount added to a tenant's limit over a validity interval.
    Add(Box<AddArgs>),
    /// Every grant recorded, with who gave it and why.
    List {
        /// Only this tenant's.
        #[arg(long)]
        tenant: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct AddArgs {
    /// The tenant.
    #[arg(long)]
    tenant: String,
    /// The subject whose SUBJECT-policy windows it raises (default: the tenant's TENANT-policy windows).
    #[arg(long, conflicts_with_all = ["project", "api_key"])]
    subject: Option<String>,
    /// The project whose PROJECT-policy windows it raises.
    #[arg(long, conflicts_with = "api_key")]
    project: Option<String>,
    /// The API key whose API_KEY-policy windows it raises.
    #[arg(long)]
    api_key: Option<String>,
    /// The metric, e.g. requests.
    #[arg(long)]
    metric: String,
    /// What it adds to the limit, in the metric's unit (1 or more).
    #[arg(long, allow_negative_numbers = true)]
    amount: i64,
    /// When it starts to count, RFC 3339.
    #[arg(long, value_parser = parse_time)]
    valid_from: Timestamp,
    /// When it stops (exclusive), RFC 3339; after --valid-from.
    #[arg(long, value_parser = parse_time)]
    valid_until: Timestamp,
    /// The grant (default TENANT:METRIC:the time of the change); refused when recorded already.
    #[arg(long)]
    grant_id: Option<String>,
    /// Who gives it (recorded in the event).
    #[arg(long, env = "QUOTA_LEDGER_ACTOR")]
    actor: String,
    /// Why (recorded in the event).
    #[arg(long)]
    reason: String,
    #[command(flatten)]
    target: Target,
}

pub fn run(store: &super::Store, command: GrantCommand) -> anyhow::Result<ExitCode> {
    match command {
        GrantCommand::Add(args) => add(store, *args),
        GrantCommand::List { tenant, json } => list(store, tenant.as_deref(), json),
    }
}

fn add(store: &super::Store, args: AddArgs) -> anyhow::Result<ExitCode> {
    let change = GrantChange {
        tenant: args.tenant,
        subject: args.subject,
        project: args.project,
        api_key: args.api_key,
        metric: args.metric,
        amount: args.amount,
        valid_from: args.valid_from,
        valid_until: args.valid_until,
        grant_id: args.grant_id,
        actor: args.actor,
        reason: args.reason,
        source: "quota-ledger grant add".into(),
    };
    let Changed { event, written } = usecases::change::add_grant(store, &change, &args.target.destination())?;
    if args.target.json {
        super::print_json(&event)?;
    } else {
        let GrantEvent { grant_id, amount, valid_from, valid_until, .. } = &event;
        let (tenant, metric) = (&event.header.tenant, &event.header.metric);
        writeln!(
            super::stdout(),
            "grant {grant_id} of {tenant}: {amount} {metric} from {valid_from} until {valid_until}; {written}"
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// One row of `grant list`.
#[derive(Debug, serde::Serialize)]
struct GrantRow<'a> {
    tenant: &'a str,
    subject: Option<&'a str>,
    metric: &'a str,
    grant_id: &'a str,
    amount: i64,
    valid_from: String,
    valid_until: String,
    recorded_at: String,
    actor: Option<&'a str>,
    reason: &'a str,
    source: &'a str,
    /// The project (API key) whose PROJECT (API_KEY) windows it raises: added last, as columns are.
    #[serde(skip_serializing_if = "Option::is_none")]
    project: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    api_key: Option<&'a str>,
}

fn list(store: &super::Store, tenant: Option<&str>, json: bool) -> anyhow::Result<ExitCode> {
    let recorded = usecases::change::recorded(store)?;
    let rows: Vec<GrantRow> = recorded
        .grants()
        .iter()
        .filter(|g| tenant.is_none_or(|t| g.header.tenant == t))
        .map(|g| GrantRow {
            tenant: &g.header.tenant,
            subject: g.header.subject.as_deref(),
            metric: &g.header.metric,
            grant_id: &g.grant_id,
            amount: g.amount,
            valid_from: g.valid_from.to_string(),
            valid_until: g.valid_until.to_string(),
            recorded_at: g.header.occurred_at.to_string(),
            actor: g.actor.as_deref(),
            reason: &g.reason,
            source: &g.header.source,
            project: g.header.project.as_deref(),
            api_key: g.header.api_key.as_deref(),
        })
        .collect();
    if json {
        super::print_json(&rows)?;
        return Ok(ExitCode::SUCCESS);
    }
    let header = ["tenant", "metric", "grant_id", "amount", "valid_from", "valid_until", "actor", "reason"];
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let names = [r.tenant, r.metric, r.grant_id].map(str::to_string);
            let validity = [r.amount.to_string(), r.valid_from.clone(), r.valid_until.clone()];
            names.into_iter().chain(validity).chain([r.actor.unwrap_or("-").into(), r.reason.into()]).collect()
        })
        .collect();
    super::print_table(&header, &table)?;
    Ok(ExitCode::SUCCESS)
}
