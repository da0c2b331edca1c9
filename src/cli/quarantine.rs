//! `quarantine list [--json]` and `quarantine replay`.

use std::path::Path;
use std::process::ExitCode;

use clap::Subcommand;
use kafka::topics::Topics;

#[derive(Debug, Subcommand)]
pub enum QuarantineCommand {
    /// Every quarantined message: where it came from, why, and (in JSON) its bytes.
    List {
        /// Print JSON, with the raw bytes in hexadecimal.
        #[arg(long)]
        json: bool,
    },
    /// Decode quarantined messages again with this binary's catalog (after a fix: a schema added, a rule
    /// corrected) and record those that now decode, under their original coordinates. Each is replayed once.
    Replay {
        /// Replay only these quarantine ids (default: every one not replayed yet).
        #[arg(long = "id")]
        ids: Vec<i64>,
        /// Which record type each input topic carries, as given to `ingest` (`KIND=TOPIC`, repeatable; default
        /// the names of docs/contract.md §2): a message from a topic is recorded only if it is of that topic's type.
        #[arg(long, value_name = "KIND=TOPIC")]
        topics: Vec<String>,
        /// Kafka bootstrap servers whose schema registry topic (`--registry-topic`) resolves the schema ids of
        /// messages in the Confluent wire format quarantined as `unknown_schema_id`.
        #[arg(long, env = "QUOTA_LEDGER_BROKERS")]
        brokers: Option<String>,
        /// The schema registry's storage topic on --brokers.
        #[arg(long, value_name = "TOPIC", default_value = kafka::schema_registry::SCHEMAS_TOPIC)]
        registry_topic: String,
        /// The schema registry's REST API (`http://[user:secret@]host:8081`), asked for the schema ids of messages
        /// quarantined as `unknown_schema_id` instead of reading --registry-topic.
        #[arg(long, value_name = "URL", env = "QUOTA_LEDGER_REGISTRY_URL")]
        registry_url: Option<String>,
        #[command(flatten)]
        ca_file: super::trust_args::CaFileArg,
        /// A librdkafka setting for --brokers (SASL, TLS), repeatable.
        #[arg(short = 'X', value_name = "KEY=VALUE", value_parser = super::kafka_args::parse_setting)]
        settings: Vec<(String, String)>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(store: &super::Store, command: QuarantineCommand) -> anyhow::Result<ExitCode> {
    let ledger_path = store.file("quarantine")?;
    match command {
        QuarantineCommand::List { json } => list(ledger_path, json),
        QuarantineCommand::Replay { ids, topics, brokers, registry_topic, registry_url, ca_file, settings, json } => {
            let url = registry_url.as_deref();
            super::kafka_args::resolve_schema_ids(brokers.as_deref(), &settings, &registry_topic, url, &ca_file)?;
            replay(ledger_path, &ids, &topics, json)
        }
    }
}

fn replay(ledger_path: &Path, ids: &[i64], topics: &[String], json: bool) -> anyhow::Result<ExitCode> {
    let topics = if topics.is_empty() { Topics::defaults() } else { Topics::parse(topics)? };
    let report = usecases::quarantine::replay(ledger_path, ids, &topics)?;
    super::print(&report, json, usecases::quarantine::write_replay)
}

fn list(ledger_path: &Path, json: bool) -> anyhow::Result<ExitCode> {
    super::print(&usecases::quarantine::list(ledger_path)?[..], json, usecases::quarantine::write_list)
}
