//! `quota show TENANT [--metric M] [--subject S] [--json]`: a tenant's remaining quota per policy that applies now,
//! read from the ledger (or from the tenant's shard with `--data`) as a hook starting on it would count it: the same
//! numbers `GET /v1/quotas` answers (`hook::quotas`). Reads only.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use hook::QuotaQuery;

#[derive(Debug, Subcommand)]
pub enum QuotaCommand {
    /// Remaining quota per policy that applies now: window, limit, grants, effective limit, consumed, held, leases,
    /// remaining, a throttled overage's rate, and the window's kind (a ROLLING one's length: its window ends now).
    Show(ShowArgs),
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The tenant.
    tenant: String,
    /// Only this metric's policies.
    #[arg(long)]
    metric: Option<String>,
    /// The subject SUBJECT-scope policies are counted for (without it: requests that carry no subject).
    #[arg(long)]
    subject: Option<String>,
    /// The project PROJECT-scope policies are counted for (without it: requests that name no project).
    #[arg(long)]
    project: Option<String>,
    /// The API key API_KEY-scope policies are counted for (without it: requests that name none).
    #[arg(long)]
    api_key: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(store: &super::Store, command: QuotaCommand) -> anyhow::Result<ExitCode> {
    let QuotaCommand::Show(args) = command;
    let who = schemas::Who { tenant: args.tenant, subject: args.subject, project: args.project, api_key: args.api_key };
    let query = QuotaQuery { who, metric: args.metric };
    super::print(&usecases::quota::show(store, &query)?, args.json, usecases::quota::write_quotas)
}
