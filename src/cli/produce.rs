//! `produce --type T --file events.jsonl --brokers ...`: JSON lines to single-object Avro on Kafka.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Args;
use kafka::producer::KafkaProducer;
use schemas::{Catalog, Event, EventType};

use super::kafka_args::KafkaConnection;

#[derive(Debug, Args)]
pub struct ProduceArgs {
    /// The record type of every line: UsageEvent, DecisionEvent, ReservationEvent, GrantEvent, PolicyEvent.
    #[arg(long = "type")]
    record_type: String,
    /// JSON lines, one event per line (the form `schemas encode` reads); `-` for stdin.
    #[arg(long)]
    file: PathBuf,
    /// The topic (default: the type's topic of SPEC 2).
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
    // Every line is checked before the first is sent: a bad line stops the whole file, naming it.
    let mut events = Vec::new();
    for (index, line) in input.lines().enumerate() {
        let line = line.with_context(|| format!("cannot read {}", args.file.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let place = || format!("{} line {}", args.file.display(), index + 1);
        let event =
            Event::from_json(event_type, &line).with_context(|| format!("{} is not a {event_type}", place()))?;
        schemas::validate(&event).with_context(|| format!("{} is not a valid {event_type}", place()))?;
        events.push(event);
    }
    let catalog = Catalog::builtin();
    let mut producer = KafkaProducer::new(&args.kafka.brokers, &args.kafka.settings)?;
    for event in &events {
        producer.send(&topic, &event.header().tenant, &catalog.encode_single_object(event))?;
    }
    let report = producer.finish()?;
    if args.json {
        super::print_json(&report)?;
    } else {
        writeln!(super::stdout(), "{} {event_type}s produced to {topic} and acknowledged", report.delivered)?;
    }
    Ok(ExitCode::SUCCESS)
}
