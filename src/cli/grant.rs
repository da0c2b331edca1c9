//! `grant add|list`: the control plane's grants (docs/contract.md §7), judged by the `control` crate.

use std::io::Write;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use control::GrantChange;
use schemas::Timestamp;
use usecases::change::GrantRow;

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
    let changed = usecases::change::add_grant(store, &change, &args.target.destination())?;
    match args.target.json {
        true => super::print_json(&changed.event)?,
        false => writeln!(super::stdout(), "{changed}")?,
    }
    Ok(ExitCode::SUCCESS)
}

fn list(store: &super::Store, tenant: Option<&str>, json: bool) -> anyhow::Result<ExitCode> {
    let recorded = usecases::change::recorded(store)?;
    let grants = recorded.grants().iter().filter(|g| tenant.is_none_or(|t| g.header.tenant == t));
    let rows: Vec<GrantRow> = grants.map(GrantRow::from).collect();
    super::print(&rows[..], json, usecases::change::write_grant_list)
}
