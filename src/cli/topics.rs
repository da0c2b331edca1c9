//! `topics create`: the topics of contract §2, for brokers that do not create topics on first use (Tansu).

use std::io::Write;
use std::process::ExitCode;

use clap::Subcommand;
use kafka::topics::Topics;

use super::kafka_args::KafkaConnection;

#[derive(Debug, Subcommand)]
pub enum TopicsCommand {
    /// Create the six input topics (quota.alerts among them), quota.adjustments, quota.checkpoints and quota.routing (existing ones are left as
    /// they are).
    Create {
        #[command(flatten)]
        kafka: KafkaConnection,
        /// Partitions per topic: the unit of scale (one ledger shard per group of partitions).
        #[arg(long, default_value_t = 3)]
        partitions: i32,
        /// Input topics under other names, as KIND=TOPIC (KIND: usage, decisions, reservations, grants,
        /// policies), as `ingest --topics` takes them; default the six of docs/contract.md §2.
        #[arg(long, value_delimiter = ',')]
        topics: Vec<String>,
        /// The topic reconcile publishes adjustments to.
        #[arg(long, default_value = "quota.adjustments")]
        adjustments_topic: String,
    },
}

pub fn run(command: TopicsCommand) -> anyhow::Result<ExitCode> {
    let TopicsCommand::Create { kafka, partitions, topics, adjustments_topic } = command;
    let inputs = if topics.is_empty() { Topics::defaults() } else { Topics::parse(&topics)? };
    let mut names = inputs.names();
    names.push(&adjustments_topic);
    // Where ingest and serve publish the ledger's checkpoints (contract §9.3).
    names.push(kafka::checkpoints::CHECKPOINTS_TOPIC);
    // The routing catalog of a cluster's nodes (one partition, compacted).
    names.push(kafka::routing::ROUTING_TOPIC);
    let created = kafka::admin::create_topics(&kafka.brokers, &names, partitions, &kafka.settings)?;
    for name in &names {
        let state = if created.iter().any(|c| c == name) { "created" } else { "exists" };
        writeln!(super::stdout(), "{name}  {state}")?;
    }
    Ok(ExitCode::SUCCESS)
}
