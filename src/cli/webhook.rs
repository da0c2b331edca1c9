//! `webhook add|list|remove|deliveries`: the endpoints a tenant's alerts are POSTed to, and what each delivery came to
//! (docs/contract.md §7). Judged and recorded by `usecases::webhook`; this module parses, dispatches and prints.

use std::io::Write;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use schemas::AlertKind;
use webhooks::{Registration, Removal};

#[derive(Debug, Subcommand)]
pub enum WebhookCommand {
    /// Register an endpoint for a tenant's alerts; its signing secret is printed once.
    Add(Box<AddArgs>),
    /// The endpoints registered (never their secrets).
    List {
        /// Only this tenant's.
        #[arg(long)]
        tenant: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove an endpoint: its deliveries stop, retries included.
    Remove {
        /// The tenant.
        #[arg(long)]
        tenant: String,
        /// The endpoint (`webhook list` shows them).
        #[arg(long)]
        endpoint_id: String,
        /// Who removes it (recorded).
        #[arg(long, env = "QUOTA_LEDGER_ACTOR")]
        actor: String,
        /// Why (recorded).
        #[arg(long)]
        reason: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Every attempt to deliver an alert: delivered, failed (with the status or error) or given up.
    Deliveries {
        /// Only this tenant's.
        #[arg(long)]
        tenant: Option<String>,
        /// Only this endpoint's.
        #[arg(long)]
        endpoint_id: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct AddArgs {
    /// The tenant whose alerts it receives.
    #[arg(long)]
    tenant: String,
    /// Where alerts are POSTed: https://..., or http:// to a loopback address.
    #[arg(long)]
    url: String,
    /// The kinds of alert it wants, comma-separated (THRESHOLD, SUBJECT_SHARE, OPEN_TOO_LONG, DENY_RATE); default all.
    #[arg(long, value_delimiter = ',', value_parser = super::policy::parse_symbol::<AlertKind>)]
    kinds: Option<Vec<AlertKind>>,
    /// The endpoint's id, the tenant's own (default: ep- and random hex digits).
    #[arg(long)]
    endpoint_id: Option<String>,
    /// The signing secret, whsec_ and base64 of 24 to 64 bytes (default: a new random one, printed once).
    #[arg(long, env = "QUOTA_LEDGER_WEBHOOK_SECRET", hide_env_values = true)]
    secret: Option<String>,
    /// Who registers it (recorded).
    #[arg(long, env = "QUOTA_LEDGER_ACTOR")]
    actor: String,
    /// Why (recorded).
    #[arg(long)]
    reason: String,
    /// Print JSON (with the secret, once).
    #[arg(long)]
    json: bool,
}

pub fn run(store: &super::Store, command: WebhookCommand) -> anyhow::Result<ExitCode> {
    match command {
        WebhookCommand::Add(args) => {
            let AddArgs { tenant, url, kinds, endpoint_id, secret, actor, reason, json } = *args;
            let asked = Registration { tenant, endpoint_id, url, kinds, secret, actor, reason };
            changed(&usecases::webhook::add(store, &asked)?, json)
        }
        WebhookCommand::List { tenant, json } => {
            let rows = usecases::webhook::list(store, tenant.as_deref())?;
            super::print(&rows[..], json, usecases::webhook::write_endpoint_list)
        }
        WebhookCommand::Remove { tenant, endpoint_id, actor, reason, json } => {
            let asked = Removal { tenant, endpoint_id, actor, reason };
            changed(&usecases::webhook::remove(store, &asked)?, json)
        }
        WebhookCommand::Deliveries { tenant, endpoint_id, json } => {
            let rows = usecases::webhook::deliveries(store, tenant.as_deref(), endpoint_id.as_deref())?;
            super::print(&rows[..], json, usecases::webhook::write_deliveries)
        }
    }
}

fn changed(changed: &usecases::webhook::Changed, json: bool) -> anyhow::Result<ExitCode> {
    match json {
        true => super::print_json(changed)?,
        false => writeln!(super::stdout(), "{changed}")?,
    }
    Ok(ExitCode::SUCCESS)
}
