//! `route TENANT`: the tenant's partition and the node the routing catalog names as its owner.

use std::io::Write;
use std::process::ExitCode;

use clap::Args;
use kafka::topics::Topics;

use super::kafka_args::KafkaConnection;

#[derive(Debug, Args)]
pub struct RouteArgs {
    /// The tenant.
    pub tenant: String,
    #[command(flatten)]
    pub kafka: KafkaConnection,
    /// Input topics under other names, as KIND=TOPIC (as `ingest --topics` takes them): P is their partition count.
    #[arg(long, value_delimiter = ',')]
    pub topics: Vec<String>,
    /// One JSON object instead of lines for people.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: RouteArgs) -> anyhow::Result<ExitCode> {
    let topics = if args.topics.is_empty() { Topics::defaults() } else { Topics::parse(&args.topics)? };
    let route = kafka::routing::route(&args.kafka.brokers, &args.kafka.settings, topics.names(), &args.tenant)?;
    let mut out = super::stdout();
    if args.json {
        writeln!(out, "{}", serde_json::to_string(&route)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(out, "tenant     {}", route.tenant)?;
    writeln!(out, "partition  {} of {}", route.partition, route.partitions)?;
    match &route.owner {
        Some(owner) => {
            writeln!(out, "owner      {} at {} (epoch {}, since {})", owner.node_id, owner.url, owner.epoch, owner.at)?
        }
        None => writeln!(out, "owner      no owner recorded")?,
    }
    Ok(ExitCode::SUCCESS)
}
