//! `produce --type T --file events.jsonl --brokers ...`: JSON lines to single-object Avro on Kafka.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Args;
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
    /// The topic (default: the type's topic of docs/contract.md §2).
    #[arg(long)]
    topic: Option<String>,
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
    let topic = args.topic.clone().unwrap_or_else(|| event_type.default_topic().to_string());
    let input: Box<dyn BufRead> = if args.file.as_os_str() == "-" {
        Box::new(BufReader::new(std::io::stdin()))
    } else {
        let file = std::fs::File::open(&args.file).with_context(|| format!("cannot read {}", args.file.display()))?;
        Box::new(BufReader::new(file))
    };
    let events = tools::produce::read_events(input, event_type, &args.file.display().to_string())?;
    let report = tools::produce::produce_events(&args.kafka.brokers, &args.kafka.settings, &topic, &events)?;
    if args.json {
        super::print_json(&report)?;
    } else {
        writeln!(super::stdout(), "{} {event_type}s produced to {topic} and acknowledged", report.delivered)?;
    }
    Ok(ExitCode::SUCCESS)
}
