//! `quota-ledger`: the command line of the quota and billing ledger (contract §7).

// Output goes through `cli::stdout()`: `println!` panics on a closed pipe (`quota-ledger status | head -1`).
#![deny(clippy::print_stdout)]

mod cli;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

/// Append-only quota and billing ledger: usage and decision events from Kafka, deduplicated, reconciled,
/// exported and audited.
#[derive(Debug, Parser)]
#[command(name = "quota-ledger", version, about)]
struct Cli {
    /// The ledger file (SQLite).
    #[arg(long, global = true, env = "QUOTA_LEDGER_PATH", default_value = "./quota-ledger.db")]
    ledger: PathBuf,
    /// A directory of shards, a ledger per Kafka partition (`shard-NNNN.db`, docs/contract.md §9.4), instead of one
    /// ledger file holding every partition.
    #[arg(long, global = true, env = "QUOTA_LEDGER_DATA", conflicts_with = "ledger", value_name = "DIR")]
    data: Option<PathBuf>,
    /// A TOML file of flags for every command (docs/operations.md, "Configuration"): a flag given, then its environment
    /// variable, win over it.
    #[arg(long, global = true, env = "QUOTA_LEDGER_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Log lines on stderr as `text` (the message and its fields) or `json` (one object per line: timestamp, level,
    /// target, message, fields), for a collector.
    #[arg(long, global = true, env = "QUOTA_LEDGER_LOG_FORMAT", value_enum, default_value = "text")]
    log_format: LogFormat,
    /// The least level logged of quota-ledger's own lines: error, warn, info, debug or trace (QUOTA_LEDGER_LOG, in
    /// RUST_LOG's syntax, refines it per crate).
    #[arg(long, global = true, env = "QUOTA_LEDGER_LOG_LEVEL", default_value = "info")]
    log_level: tracing::level_filters::LevelFilter,
    /// A directory of producers' writer schemas (`*.avsc`) added to the compiled catalog at start: each must be a
    /// record of the catalog's types that the current reader schema of its type can read, or nothing starts.
    #[arg(long, global = true, env = "QUOTA_LEDGER_SCHEMAS", value_name = "DIR")]
    schemas: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    /// The message, then its fields as `key=value`.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The Avro schema catalog: list, and JSON <-> single-object Avro for producer teams.
    #[command(subcommand)]
    Schemas(cli::schemas::SchemasCommand),
    /// Load events into the ledger: an Avro container file, or Kafka exactly once.
    Ingest(cli::ingest::IngestArgs),
    /// JSON lines to single-object Avro on the type's Kafka topic, the tenant as key.
    Produce(cli::produce::ProduceArgs),
    /// A realistic synthetic month of traffic, to Kafka or to Avro container files; prints what it made.
    Generate(cli::generate::GenerateArgs),
    /// A Kafka broker for a first run and tests: librdkafka's mock cluster.
    #[command(subcommand)]
    Broker(cli::broker::BrokerCommand),
    /// Kafka topics of docs/contract.md §2.
    #[command(subcommand)]
    Topics(cli::topics::TopicsCommand),
    /// A tenant's partition and its owner in the routing catalog (quota.routing).
    Route(cli::route::RouteArgs),
    /// The routing catalog read whole and checked against the nodes; repaired with --repair.
    Catalog(cli::catalog::CatalogArgs),
    /// A node's partitions moved to the other nodes now (it leaves the consumer group), before maintenance.
    Drain(cli::catalog::DrainArgs),
    /// What the ledger holds: counts, watermark, Kafka offsets.
    Status(cli::status::StatusArgs),
    /// Recompute the hash chain; exit 1 naming the first bad entry.
    Verify(cli::verify::VerifyArgs),
    /// A consistent copy of the ledger (or of every shard) while it runs, with a manifest of the head it covers.
    Backup(cli::backup::BackupArgs),
    /// A backup back into place (a new --ledger or --data), verified against its manifest first.
    Restore(cli::backup::RestoreArgs),
    /// The nightly job: judge windows, reservations, duplicates and late usage; record adjustments as deltas.
    Reconcile(cli::reconcile::ReconcileArgs),
    /// Billing exports (docs/contract.md §5, docs/contract.md §7).
    #[command(subcommand)]
    Export(cli::export::ExportCommand),
    /// Support's answers: why a request was decided so, a tenant's timeline (docs/contract.md §7).
    #[command(subcommand)]
    Audit(cli::audit::AuditCommand),
    /// A tenant's remaining quota per policy, as the hook counts it, without consuming (`quota show TENANT`).
    #[command(subcommand)]
    Quota(cli::quota::QuotaCommand),
    /// Read-only SQL over the ledger's tables (DataFusion); `sql --tables` lists them.
    Sql(cli::sql::SqlArgs),
    /// A tenant's policies: set a new version (validated, who and why recorded), list those in force, history.
    #[command(subcommand)]
    Policy(cli::policy::PolicyCommand),
    /// Named plans and the plan defaults (tenant `*`): set a policy version, as `policy set`; assign a tenant to a plan.
    #[command(subcommand)]
    Plan(cli::policy::PlanCommand),
    /// Grants: add one (validated, who and why recorded), list them.
    #[command(subcommand)]
    Grant(cli::grant::GrantCommand),
    /// Webhooks: register an endpoint for a tenant's alerts (signed, retried), list, remove, the delivery log.
    #[command(subcommand)]
    Webhook(cli::webhook::WebhookCommand),
    /// Meters: how a metric's usage aggregates (COUNT, UNIQUE_COUNT, MAX, LATEST, a gauge's integral; SUM by default).
    #[command(subcommand)]
    Meter(cli::meter::MeterCommand),
    /// Usage corrections: void a recorded usage event, or amend its amount (who and why recorded; never an edit).
    #[command(subcommand)]
    Usage(cli::usage::UsageCommand),
    /// The enforcement hook over HTTP: check, reserve, commit, release (docs/contract.md §6).
    Serve(cli::serve::ServeArgs),
    /// A node of a cluster: the partitions Kafka assigns it, ingested into their shards (--data) and served.
    Node(cli::node::NodeArgs),
    /// Messages that failed to decode or validate.
    #[command(subcommand)]
    Quarantine(cli::quarantine::QuarantineCommand),
    /// The whole product in one command on an embedded Kafka: traffic, ingest, hook, reconcile, close, export,
    /// late events, audit, and report.html (into --out; the global --ledger is not used).
    Demo(cli::demo::DemoArgs),
    /// Measure the ledger against its floor on this machine.
    #[command(subcommand)]
    Bench(cli::bench::BenchCommand),
    /// The config file (--config): check it and print what it resolves to, secrets masked.
    #[command(subcommand)]
    Config(cli::config::ConfigCommand),
    /// The completion script of a shell (bash, zsh, fish, elvish, powershell), on stdout.
    Completions(cli::manual::CompletionsArgs),
    /// The man pages of every command, written into a directory.
    Man(cli::manual::ManArgs),
}

fn main() -> ExitCode {
    let args = match flagfile::with_config(&Cli::command(), std::env::args_os().collect()) {
        Ok(args) => args,
        Err(error) => {
            eprintln!("quota-ledger: error: {}", cli::error_line(&error.into()));
            return ExitCode::from(cli::EXIT_ERROR);
        }
    };
    let cli = Cli::parse_from(args);
    let log_format = cli.log_format;
    let format = match log_format {
        LogFormat::Text => telemetry::logs::Format::Text,
        LogFormat::Json => telemetry::logs::Format::Json,
    };
    telemetry::logs::init(format, cli.log_level);
    if let Some(dir) = &cli.schemas {
        match schemas::Catalog::install_with(dir) {
            Ok(added) => added.iter().for_each(|schema| {
                tracing::info!(
                    file = schema.file,
                    record = %schema.event_type,
                    fingerprint = %format!("{:016x}", schema.fingerprint),
                    "schemas: writer schema added to the catalog"
                )
            }),
            Err(error) => {
                say_error(log_format, &cli::error_line(&error.into()));
                return ExitCode::from(cli::EXIT_ERROR);
            }
        }
    }
    let store = match cli.data {
        Some(dir) => cli::Store::Shards(ledger::shards::ShardDir::new(dir)),
        None => cli::Store::File(cli.ledger),
    };
    let result = match cli.command {
        Command::Schemas(command) => cli::schemas::run(command),
        Command::Ingest(args) => cli::ingest::run(&store, args),
        Command::Produce(args) => cli::produce::run(args),
        Command::Generate(args) => cli::generate::run(args),
        Command::Topics(command) => cli::topics::run(command),
        Command::Broker(command) => cli::broker::run(command),
        Command::Route(args) => cli::route::run(args),
        Command::Catalog(args) => cli::catalog::run(args),
        Command::Drain(args) => cli::catalog::drain(args),
        Command::Status(args) => cli::status::run(&store, args),
        Command::Verify(args) => cli::verify::run(&store, args),
        Command::Backup(args) => cli::backup::backup(&store, args),
        Command::Restore(args) => cli::backup::restore(&store, args),
        Command::Reconcile(args) => cli::reconcile::run(&store, args),
        Command::Export(command) => cli::export::run(&store, command),
        Command::Audit(command) => cli::audit::run(&store, command),
        Command::Quota(command) => cli::quota::run(&store, command),
        Command::Sql(args) => cli::sql::run(&store, args),
        Command::Policy(command) => cli::policy::run(&store, command),
        Command::Plan(command) => cli::policy::run_plan(&store, command),
        Command::Grant(command) => cli::grant::run(&store, command),
        Command::Webhook(command) => cli::webhook::run(&store, command),
        Command::Usage(command) => cli::usage::run(&store, command),
        Command::Meter(command) => cli::meter::run(&store, command),
        Command::Serve(args) => cli::serve::run(&store, args),
        Command::Node(args) => cli::node::run(&store, args),
        Command::Quarantine(command) => cli::quarantine::run(&store, command),
        Command::Demo(args) => cli::demo::run(args),
        Command::Bench(command) => cli::bench::run(command),
        Command::Config(cli::config::ConfigCommand::Check(args)) => {
            cli::config::run(&Cli::command(), cli.config.as_deref(), args)
        }
        Command::Completions(args) => cli::manual::completions(Cli::command(), args),
        Command::Man(args) => cli::manual::man(Cli::command(), args),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            say_error(log_format, &cli::error_line(&error));
            ExitCode::from(cli::EXIT_ERROR)
        }
    }
}

/// The error a command ended with, on stderr: a line of text, or under `--log-format json` an object as the log lines
/// are (a collector parses every line), whatever `--log-level` filters out.
fn say_error(format: LogFormat, line: &str) {
    let message = format!("quota-ledger: error: {line}");
    match format {
        LogFormat::Text => eprintln!("{message}"),
        LogFormat::Json => {
            let timestamp = schemas::Timestamp::now().to_string();
            let object = serde_json::json!({"timestamp": timestamp, "level": "ERROR", "target": "quota_ledger",
                                            "message": message});
            eprintln!("{object}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every flag of `command` and its subcommands, with the path of commands that has it.
    fn flags(command: &clap::Command, path: &str, out: &mut Vec<(String, clap::Arg)>) {
        for arg in command.get_arguments() {
            out.push((path.to_string(), arg.clone()));
        }
        for sub in command.get_subcommands() {
            flags(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }

    // `config check` masks a flag's value when the flag declares a secret (`hide_env_values`): a flag named for a bearer
    // token or a password that forgot to would be printed in clear.
    #[test]
    fn every_flag_named_for_a_secret_declares_it() {
        let mut all = Vec::new();
        flags(&Cli::command(), "quota-ledger", &mut all);
        let named_secret = |long: &str| {
            let words: Vec<&str> = long.split('-').collect();
            words.iter().any(|w| ["token", "password", "secret", "credential", "credentials"].contains(w))
        };
        let secrets: Vec<_> = all.iter().filter(|(_, arg)| arg.get_long().is_some_and(named_secret)).collect();
        assert!(!secrets.is_empty(), "the cluster token at least is a secret flag");
        for (path, arg) in secrets {
            assert!(
                arg.is_hide_env_values_set(),
                "{path} --{} carries a secret and must set hide_env_values = true",
                arg.get_long().unwrap_or_default()
            );
        }
    }
}
