//! `meter set`: a new version of how a metric's usage aggregates (docs/contract.md §7), judged and recorded by `control`.

use std::io::Write;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use schemas::{Aggregation, MeterField, Timestamp};

use super::policy::{parse_symbol, parse_time};

#[derive(Debug, Subcommand)]
pub enum MeterCommand {
    /// Declare how a metric aggregates: SUM (the default), COUNT, UNIQUE_COUNT --field, MAX, LATEST, TIME_WEIGHTED_SUM,
    /// TIME_WEIGHTED_AVERAGE.
    Set(MeterArgs),
}

#[derive(Debug, Args)]
pub struct MeterArgs {
    /// The tenant, or `*` for every tenant without a meter of its own for the metric.
    #[arg(long)]
    tenant: String,
    #[arg(long)]
    metric: String,
    #[arg(long, value_parser = parse_symbol::<Aggregation>)]
    aggregation: Aggregation,
    /// UNIQUE_COUNT: the field whose distinct values are counted (SUBJECT, PROJECT, API_KEY).
    #[arg(long, value_parser = parse_symbol::<MeterField>)]
    field: Option<MeterField>,
    /// The version (default: the next after the last recorded).
    #[arg(long)]
    version: Option<i32>,
    /// Windows starting at or after this instant aggregate so (default: now).
    #[arg(long, value_name = "INSTANT", value_parser = parse_time)]
    effective_from: Option<Timestamp>,
    /// Who makes the change (recorded in the event).
    #[arg(long, env = "QUOTA_LEDGER_ACTOR")]
    actor: String,
    /// Why (recorded in the event).
    #[arg(long)]
    reason: String,
    #[arg(long)]
    json: bool,
}

pub fn run(store: &super::Store, MeterCommand::Set(args): MeterCommand) -> anyhow::Result<ExitCode> {
    let change = control::MeterChange {
        tenant: args.tenant,
        metric: args.metric,
        aggregation: args.aggregation,
        field: args.field,
        version: args.version,
        effective_from: args.effective_from,
        actor: args.actor,
        reason: args.reason,
        source: "quota-ledger meter set".into(),
    };
    let changed = usecases::meter::set_meter(store, &change)?;
    match args.json {
        true => super::print_json(&changed.event)?,
        false => writeln!(super::stdout(), "{changed}")?,
    }
    Ok(ExitCode::SUCCESS)
}
