//! `quota show TENANT [--metric M] [--subject S] [--json]`: a tenant's remaining quota per policy that applies now,
//! read from the ledger (or from the tenant's shard with `--data`) as a hook starting on it would count it: the same
//! numbers `GET /v1/quotas` answers (`hook::quotas`). Reads only.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use hook::{QuotaQuery, Quotas};
use schemas::{Timestamp, Who};

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
    let who = Who { tenant: args.tenant, subject: args.subject, project: args.project, api_key: args.api_key };
    let query = QuotaQuery { who, metric: args.metric };
    let ledger = store.tenant_ledger(&query.who.tenant)?;
    let quotas = hook::quotas::from_ledger(&ledger, &query, Timestamp::now())?;
    if args.json {
        super::print_json(&quotas)?;
    } else {
        print(&quotas)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn print(quotas: &Quotas) -> anyhow::Result<()> {
    let header = [
        "metric",
        "policy_id",
        "version",
        "scope",
        "enforcement",
        "window_start",
        "window_end",
        "limit",
        "grants",
        "effective_limit",
        "consumed",
        "held",
        "leases",
        "remaining",
        "time_zone",
        "overage",
        "window",
    ];
    let cell = |value: Option<i64>| value.map_or(String::new(), |v| v.to_string());
    let rows: Vec<Vec<String>> = quotas
        .quotas
        .iter()
        .map(|q| {
            let policy = if q.plan_default { format!("{} (plan)", q.policy_id) } else { q.policy_id.clone() };
            let enforcement =
                if q.throttle { format!("{:?} throttle", q.enforcement) } else { format!("{:?}", q.enforcement) };
            vec![
                q.metric.clone(),
                policy,
                q.policy_version.to_string(),
                format!("{:?}", q.scope),
                enforcement,
                q.window_start.to_string(),
                q.window_end.to_string(),
                q.limit.to_string(),
                cell(q.grants),
                cell(q.effective_limit),
                cell(q.consumed),
                cell(q.held),
                cell(q.leases),
                cell(q.remaining),
                q.time_zone.clone(),
                // A throttled overage: its rate, and the tokens the serving process holds (none read from a ledger).
                match (q.overage_rate, q.overage_window) {
                    (Some(rate), Some(window)) => format!("{rate}/{}", window.symbol()),
                    _ => String::new(),
                },
                // The kind, and a ROLLING window's length: its window_start..window_end is the one ending now.
                q.window.label(q.window_seconds),
            ]
        })
        .collect();
    super::print_table(&header, &rows)
}
