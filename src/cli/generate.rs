//! `generate --tenants N --events M --seed S [--to-kafka BROKERS | --out DIR]`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use generate::{self, GenerateSettings, Generator};

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
    /// Produce to Kafka (the topics of docs/contract.md §2, the tenant as key).
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
        (Some(brokers), _) => {
            let report = generate::to_kafka(&mut generator, brokers, &args.settings)?;
            eprintln!("generate: {} messages produced to {brokers} and acknowledged", report.delivered);
        }
        (None, Some(dir)) => {
            generate::to_files(&mut generator, dir)?;
            eprintln!("generate: files written to {}", dir.display());
        }
        (None, None) => unreachable!("clap requires --to-kafka or --out"),
    }
    super::print_json(generator.report())?;
    Ok(ExitCode::SUCCESS)
}
