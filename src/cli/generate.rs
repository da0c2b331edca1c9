//! `generate --tenants N --events M --seed S [--to-kafka BROKERS | --out DIR]`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use ingest::generate::{GenerateSettings, Generated, Generator};
use kafka::producer::KafkaProducer;
use schemas::{Catalog, EventType};

use super::kafka_args::parse_setting;

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("destination").args(["to_kafka", "out"]).required(true)))]
pub struct GenerateArgs {
    /// Tenants (org-1 ... org-N).
    #[arg(long, default_value_t = 100)]
    tenants: u32,
    /// Messages in all, duplicates and malformed ones included.
    #[arg(long, default_value_t = 100_000)]
    events: u64,
    /// The same seed gives the same stream.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Produce to Kafka (the topics of SPEC 2, the tenant as key).
    #[arg(long, value_name = "BROKERS")]
    to_kafka: Option<String>,
    /// Write one Avro object container file per record type into this directory (`UsageEvent.avro`, ...).
    /// Container files hold records, not bytes, so malformed messages are invalid values there.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// A librdkafka setting for --to-kafka, repeatable.
    #[arg(short = 'X', value_name = "KEY=VALUE", value_parser = parse_setting)]
    settings: Vec<(String, String)>,
}

pub fn run(args: GenerateArgs) -> anyhow::Result<ExitCode> {
    let mut settings = GenerateSettings::new(args.tenants, args.events, args.seed);
    settings.raw_malformed = args.to_kafka.is_some();
    let mut generator = Generator::new(settings);
    match (&args.to_kafka, &args.out) {
        (Some(brokers), _) => to_kafka(&mut generator, brokers, &args.settings)?,
        (None, Some(dir)) => to_files(&mut generator, dir)?,
        (None, None) => unreachable!("clap requires --to-kafka or --out"),
    }
    super::print_json(generator.report())?;
    Ok(ExitCode::SUCCESS)
}

fn to_kafka(generator: &mut Generator, brokers: &str, overrides: &[(String, String)]) -> anyhow::Result<()> {
    let catalog = Catalog::builtin();
    let mut producer = KafkaProducer::new(brokers, overrides)?;
    for generated in generator.by_ref() {
        send_generated(&mut producer, catalog, generated)?;
    }
    let report = producer.finish()?;
    eprintln!("generate: {} messages produced to {brokers} and acknowledged", report.delivered);
    Ok(())
}

/// Sends one generated message to its type's default topic (SPEC 2), the tenant as key; garbage as it is.
pub(crate) fn send_generated(
    producer: &mut KafkaProducer,
    catalog: &Catalog,
    generated: Generated,
) -> anyhow::Result<()> {
    let (event_type, key, bytes) = match generated {
        Generated::Event(event) | Generated::Invalid(event) => {
            (event.event_type(), event.header().tenant.clone(), catalog.encode_single_object(&event))
        }
        Generated::Garbage { event_type, key, bytes } => (event_type, key, bytes),
    };
    producer.send(event_type.default_topic(), &key, &bytes)?;
    Ok(())
}

fn to_files(generator: &mut Generator, dir: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let catalog = Catalog::builtin();
    let mut writers: BTreeMap<EventType, apache_avro::Writer<'static, std::io::BufWriter<std::fs::File>>> =
        BTreeMap::new();
    for generated in generator.by_ref() {
        let event = match generated {
            Generated::Event(event) | Generated::Invalid(event) => event,
            Generated::Garbage { .. } => unreachable!("raw_malformed is off for files"),
        };
        let event_type = event.event_type();
        let writer = match writers.entry(event_type) {
            std::collections::btree_map::Entry::Occupied(entry) => entry.into_mut(),
            std::collections::btree_map::Entry::Vacant(entry) => {
                let path = dir.join(format!("{}.avro", event_type.name()));
                let file = std::fs::File::create(&path).with_context(|| format!("cannot create {}", path.display()))?;
                let schema = &catalog.current(event_type).schema;
                entry.insert(apache_avro::Writer::new(schema, std::io::BufWriter::new(file))?)
            }
        };
        writer.append_value(schemas::avro::to_value(&event))?;
    }
    for (_, writer) in writers {
        writer.into_inner()?;
    }
    eprintln!("generate: files written to {}", dir.display());
    Ok(())
}
