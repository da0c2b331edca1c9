//! `produce --type T --file events.jsonl --brokers ...`: JSON lines to single-object Avro on Kafka, each to its
//! tenant's partition, a plan default (tenant `*`) to every partition (docs/contract.md §9.4).

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Args;
use kafka::topics::Topics;
use schemas::EventType;

use super::kafka_args::KafkaConnection;

#[derive(Debug, Args)]
pub struct ProduceArgs {
    /// The record type of every line: UsageEvent, DecisionEvent, ReservationEvent, GrantEvent, PolicyEvent.
    #[arg(long = "type")]
    record_type: String,
    /// JSON lines, one event per line (the form `schemas encode` reads); `-` for stdin.
    #[arg(long)]
    file: PathBuf,
    /// The topic (default: the type's topic in --topics, or of docs/contract.md §2).
    #[arg(long)]
    topic: Option<String>,
    /// The input topics under other names, as KIND=TOPIC (KIND: usage, decisions, reservations, grants,
    /// policies), as `ingest --topics` takes them: those the brokers have must share the topic's partition count
    /// (docs/contract.md §9.4). Default the six of docs/contract.md §2.
    #[arg(long, value_delimiter = ',')]
    topics: Vec<String>,
    #[command(flatten)]
    kafka: KafkaConnection,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: ProduceArgs) -> anyhow::Result<ExitCode> {
    let Some(event_type) = EventType::from_name(&args.record_type) else {
        bail!("unknown record type {:?}", args.record_type);
    };
    let inputs = if args.topics.is_empty() { Topics::defaults() } else { Topics::parse(&args.topics)? };
    let topic = args
        .topic
        .clone()
        .or_else(|| inputs.topic_of(event_type).map(str::to_string))
        .unwrap_or_else(|| event_type.default_topic().to_string());
    let input: Box<dyn BufRead> = if args.file.as_os_str() == "-" {
        Box::new(BufReader::new(std::io::stdin()))
    } else {
        let file = std::fs::File::open(&args.file).with_context(|| format!("cannot read {}", args.file.display()))?;
        Box::new(BufReader::new(file))
    };
    let events = kafka::produce::read_events(input, event_type, &args.file.display().to_string())?;
    let report = kafka::produce::produce_events(&args.kafka.brokers, &args.kafka.settings, &inputs, &topic, &events)?;
    if args.json {
        super::print_json(&report)?;
    } else {
        writeln!(super::stdout(), "{} {event_type}s produced to {topic} and acknowledged", report.delivered)?;
    }
    Ok(ExitCode::SUCCESS)
}
