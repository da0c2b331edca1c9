//! `topics create`: the topics of SPEC 2, for brokers that do not create topics on first use (Tansu).

use std::process::ExitCode;

use clap::Subcommand;
use ingest::topics::all_default_topic_names;

use super::kafka_args::KafkaConnection;

#[derive(Debug, Subcommand)]
pub enum TopicsCommand {
    /// Create the five input topics and quota.adjustments (existing ones are left as they are).
    Create {
        #[command(flatten)]
        kafka: KafkaConnection,
        /// Partitions per topic: the unit of scale (one ledger shard per group of partitions).
        #[arg(long, default_value_t = 3)]
        partitions: i32,
    },
}

pub fn run(command: TopicsCommand) -> anyhow::Result<ExitCode> {
    let TopicsCommand::Create { kafka, partitions } = command;
    let names = all_default_topic_names();
    let created = ingest::admin::create_topics(&kafka.brokers, &names, partitions, &kafka.settings)?;
    for name in &names {
        let state = if created.iter().any(|c| c == name) { "created" } else { "exists" };
        println!("{name}  {state}");
    }
    Ok(ExitCode::SUCCESS)
}
