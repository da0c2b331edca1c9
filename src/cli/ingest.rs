//! `ingest --file F.avro` and `ingest --brokers LIST [--group G] [--topics ...] [--until-caught-up]
//! [--accept-gap TOPIC:PARTITION:FROM-TO ...]`.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use indicatif::ProgressBar;
use ingest::BatchBounds;
use ingest::consumer::{BATCH_WAIT_MS, KafkaIngestProgress, KafkaIngestSettings, default_group, default_shards_group};
use kafka::topics::{ClientRole, Topics};
use ledger::shards::ShardDir;

use super::kafka_args::parse_setting;

/// Seconds between two progress lines when stderr is not a terminal.
const LOG_EVERY_SECONDS: u64 = 5;

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("source").args(["file", "brokers"]).required(true).multiple(true)))]
pub struct IngestArgs {
    /// An Avro object container file of any record type (backfill); its writer schema is resolved to the
    /// current reader schema.
    #[arg(long)]
    file: Option<PathBuf>,
    /// Kafka bootstrap servers: consume the input topics in a consumer group.
    #[arg(long, env = "QUOTA_LEDGER_BROKERS")]
    brokers: Option<String>,
    /// Consumer group; default the ledger's own, `quota-ledger-LEDGER_ID`, so that two ledgers on the same brokers
    /// never split the partitions between them.
    #[arg(long, env = "QUOTA_LEDGER_GROUP")]
    group: Option<String>,
    /// Topics to consume as KIND=TOPIC (KIND: usage, decisions, reservations, grants, policies, alerts); default the
    /// six of docs/contract.md §2 (quota.usage, quota.decisions, quota.reservations, quota.grants, quota.policies,
    /// quota.alerts).
    #[arg(long, value_delimiter = ',')]
    topics: Vec<String>,
    /// Exit 0 once the ledger reached the end of every partition of every topic (for nightly jobs); exit 2 naming
    /// the partitions other members of the group hold when they are behind.
    #[arg(long)]
    until_caught_up: bool,
    /// Offsets the ledger never read, accepted as lost, as TOPIC:PARTITION:FROM-TO (repeatable): exactly a range
    /// ingest named when it stopped. Recorded in the ledger (status lists it, billing exports name it) before
    /// consuming.
    #[arg(long, value_name = "TOPIC:PARTITION:FROM-TO")]
    accept_gap: Vec<ledger::GapRange>,
    /// A librdkafka setting, repeatable: -X security.protocol=SASL_SSL.
    #[arg(short = 'X', value_name = "KEY=VALUE", value_parser = parse_setting)]
    settings: Vec<(String, String)>,
    /// Most messages (Kafka) or records (file) per ledger transaction.
    #[arg(long)]
    batch_max_events: Option<usize>,
    /// Most bytes of messages or records (as received) per ledger transaction; a larger message is appended alone.
    #[arg(long, default_value_t = ingest::BATCH_MAX_BYTES)]
    batch_max_bytes: usize,
    /// Longest a Kafka message waits in a partial batch, in milliseconds.
    #[arg(long, default_value_t = BATCH_WAIT_MS)]
    batch_wait_ms: u64,
    /// With --data and --file: the partition count P of a new directory of shards (the input topics' count); a
    /// directory that holds shards keeps theirs, and a different P is an error.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    partitions: Option<u32>,
    /// Print the final report as JSON.
    #[arg(long)]
    json: bool,
    /// With --brokers: answer `GET /metrics` (Prometheus) on this address: messages, events by outcome, appends and
    /// each partition's lag (docs/operations.md, "What to monitor").
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<String>,
    /// With --brokers: the schema registry's storage topic, read for the writer schemas of messages in the Confluent
    /// wire format (a zero byte and a 4-byte schema id); absent, no message may use it.
    #[arg(long, value_name = "TOPIC", default_value = kafka::schema_registry::SCHEMAS_TOPIC)]
    registry_topic: String,
    /// The schema registry's REST API (`http://[user:secret@]host:8081`), asked `GET /schemas/ids/{id}` for the
    /// writer schemas of messages in the Confluent wire format instead of reading --registry-topic.
    #[arg(long, value_name = "URL", env = "QUOTA_LEDGER_REGISTRY_URL")]
    registry_url: Option<String>,
    #[command(flatten)]
    ca_file: super::trust_args::CaFileArg,
}

pub fn run(store: &super::Store, args: IngestArgs) -> anyhow::Result<ExitCode> {
    match (store, &args.file, &args.brokers) {
        (super::Store::Shards(shards), Some(file), None) => return run_file_shards(shards, file, &args),
        (super::Store::Shards(shards), None, Some(brokers)) => return run_kafka_shards(shards, brokers, &args),
        _ => {}
    }
    if args.partitions.is_some() {
        anyhow::bail!("--partitions is the partition count of a directory of shards: use it with --data and --file");
    }
    let ledger_path = store.file("ingest")?;
    match (&args.file, &args.brokers) {
        // QUOTA_LEDGER_BROKERS, set for the Kafka commands, must not stop a backfill from a file.
        (Some(_), Some(brokers)) if std::env::var("QUOTA_LEDGER_BROKERS").ok().as_ref() != Some(brokers) => {
            anyhow::bail!("--file and --brokers cannot be used together: ingest reads a file or consumes Kafka")
        }
        (Some(_), _) if !args.accept_gap.is_empty() => {
            anyhow::bail!("--accept-gap is about Kafka offsets: use it with --brokers, not --file")
        }
        (Some(file), _) => run_file(ledger_path, file, &args),
        (None, Some(brokers)) => run_kafka(ledger_path, brokers, &args),
        (None, None) => unreachable!("clap requires --file or --brokers"),
    }
}

/// `defaults` with what `--batch-max-events` and `--batch-max-bytes` say.
fn batch_bounds(defaults: BatchBounds, args: &IngestArgs) -> anyhow::Result<BatchBounds> {
    let bounds = BatchBounds { events: args.batch_max_events.unwrap_or(defaults.events), bytes: args.batch_max_bytes };
    anyhow::ensure!(bounds.events > 0, "--batch-max-events must be at least 1");
    anyhow::ensure!(bounds.bytes > 0, "--batch-max-bytes must be at least 1");
    Ok(bounds)
}

fn run_file(ledger_path: &Path, file: &Path, args: &IngestArgs) -> anyhow::Result<ExitCode> {
    let bounds = batch_bounds(BatchBounds::file(), args)?;
    let progress = super::spinner();
    let report =
        usecases::ingest::file(ledger_path, file, bounds, |so_far| tick(&progress, so_far.records, so_far.recorded))?;
    progress.finish_and_clear();
    print_file(&report, usecases::ingest::words_of_file(&report), args.json)
}

/// `ingest --file F --data DIR`: each record into its tenant's shard (contract §9.4).
fn run_file_shards(shards: &ShardDir, file: &Path, args: &IngestArgs) -> anyhow::Result<ExitCode> {
    let bounds = batch_bounds(BatchBounds::file(), args)?;
    let progress = super::spinner();
    let report = usecases::ingest::file_into_shards(shards, args.partitions, file, bounds, |so_far| {
        tick(&progress, so_far.records, so_far.recorded)
    })?;
    progress.finish_and_clear();
    print_file(&report, usecases::ingest::words_of_shards(&report, shards), args.json)
}

fn tick(progress: &ProgressBar, records: u64, recorded: u64) {
    progress.set_message(format!("{records} records read, {recorded} recorded"));
    progress.tick();
}

/// A file's report as JSON or in words, its warnings and its damage on stderr; a damaged file exits 2.
fn print_file(
    report: &impl serde::Serialize,
    words: usecases::ingest::FileWords,
    json: bool,
) -> anyhow::Result<ExitCode> {
    match json {
        true => super::print_json(report)?,
        false => super::stdout().write_all(words.summary.as_bytes())?,
    }
    words.warnings.iter().for_each(|warning| eprintln!("warning: {warning}"));
    match words.damaged {
        Some(damage) => {
            eprintln!("error: {damage}");
            Ok(ExitCode::from(super::EXIT_ERROR))
        }
        None => Ok(ExitCode::SUCCESS),
    }
}

/// The settings of `ingest --brokers`, the group aside.
fn kafka_settings(brokers: &str, args: &IngestArgs) -> anyhow::Result<KafkaIngestSettings> {
    let mut settings = KafkaIngestSettings::new(brokers, args.group.clone().unwrap_or_default());
    if !args.topics.is_empty() {
        settings.topics = Topics::parse(&args.topics)?;
    }
    settings.until_caught_up = args.until_caught_up;
    settings.batch = batch_bounds(BatchBounds::kafka(), args)?;
    settings.batch_wait_ms = args.batch_wait_ms;
    settings.overrides = args.settings.clone();
    settings.accept_gaps = args.accept_gap.clone();
    Ok(settings)
}

/// With `--metrics-listen`: the ingest figures, served on their own listener and told the lag.
fn start_metrics(
    args: &IngestArgs,
    settings: &mut KafkaIngestSettings,
) -> anyhow::Result<Option<Arc<ingest::metrics::IngestMetrics>>> {
    let Some(listen) = &args.metrics_listen else { return Ok(None) };
    let mut registry = telemetry::registry();
    let metrics = ingest::metrics::IngestMetrics::register(&mut registry);
    let server = telemetry::MetricsServer::start(listen, Arc::new(std::sync::Mutex::new(registry)))?;
    tracing::info!(metrics = %format_args!("http://{}/metrics", server.address), "ingest: metrics served");
    settings.lag_listener = Some(metrics.clone());
    Ok(Some(metrics))
}

/// SIGINT and SIGTERM set the flag returned. Installed before anything that takes time (the lock, the ledger's
/// migrations, the key filter): a SIGTERM then stops ingest cleanly, where it killed the process while it was
/// starting.
fn stop_on_signals() -> anyhow::Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, stop.clone()).context("cannot install the signal handler")?;
    }
    Ok(stop)
}

/// `ingest --data DIR --brokers LIST`: partition p of every input topic into shard p (docs/contract.md §9.4).
fn run_kafka_shards(shards: &ShardDir, brokers: &str, args: &IngestArgs) -> anyhow::Result<ExitCode> {
    let mut settings = kafka_settings(brokers, args)?;
    let stop = stop_on_signals()?;
    if args.group.is_none() {
        settings.group = default_shards_group(shards.dir())
            .with_context(|| format!("cannot name the consumer group of {}", shards.dir().display()))?;
    }
    let metrics = start_metrics(args, &mut settings)?;
    resolve_schema_ids(brokers, &settings, args)?;
    let mut display = Display::new();
    let report = usecases::ingest::kafka_into_shards(shards, &settings, &stop, |progress| {
        display.show(progress);
        metrics.iter().for_each(|m| m.observe(progress));
    })?;
    display.finish();
    print_report(&report, args.json)?;
    Ok(ExitCode::SUCCESS)
}

/// The producers' schema ids of the registry (its `_schemas` topic, or its REST API), known before the first message.
fn resolve_schema_ids(brokers: &str, settings: &KafkaIngestSettings, args: &IngestArgs) -> anyhow::Result<()> {
    let url = args.registry_url.as_deref();
    super::kafka_args::resolve_schema_ids(Some(brokers), &settings.overrides, &args.registry_topic, url, &args.ca_file)
}

fn run_kafka(ledger_path: &Path, brokers: &str, args: &IngestArgs) -> anyhow::Result<ExitCode> {
    let mut settings = kafka_settings(brokers, args)?;
    let stop = stop_on_signals()?;
    super::kafka_args::check_partition_count(brokers, &settings.overrides, ClientRole::Consumer, &settings.topics)?;
    let mut consumer = usecases::ingest::Consumer::open(ledger_path)?;
    if args.group.is_none() {
        settings.group = default_group(&consumer.ledger_id()?);
    }
    let metrics = start_metrics(args, &mut settings)?;
    resolve_schema_ids(brokers, &settings, args)?;
    let mut display = Display::new();
    let report = consumer.run(&settings, &stop, |progress| {
        display.show(progress);
        metrics.iter().for_each(|m| m.observe(progress));
    })?;
    display.finish();
    print_report(&report, args.json)?;
    Ok(ExitCode::SUCCESS)
}

fn print_report(report: &KafkaIngestProgress, json: bool) -> anyhow::Result<()> {
    match json {
        true => super::print_json(report),
        false => Ok(writeln!(super::stdout(), "{report}")?),
    }
}

/// Events per second, lag and quarantined count: a live line on a terminal, a log line every few seconds
/// otherwise.
struct Display {
    bar: Option<ProgressBar>,
    started: Instant,
    last_line: Instant,
}

impl Display {
    fn new() -> Display {
        let bar = std::io::stderr().is_terminal().then(super::spinner);
        Display { bar, started: Instant::now(), last_line: Instant::now() }
    }

    fn line(&self, progress: &KafkaIngestProgress) -> String {
        progress.live_line(progress.messages as f64 / self.started.elapsed().as_secs_f64().max(0.001))
    }

    fn show(&mut self, progress: &KafkaIngestProgress) {
        match &self.bar {
            Some(bar) => {
                bar.set_message(self.line(progress));
                bar.tick();
            }
            // A log line (a JSON object under --log-format json), not a bare one: a collector parses every line.
            None if self.last_line.elapsed() >= Duration::from_secs(LOG_EVERY_SECONDS) => {
                tracing::info!(
                    messages = progress.messages,
                    recorded = progress.recorded,
                    duplicates = progress.duplicates,
                    conflicts = progress.conflicts,
                    quarantined_total = progress.quarantined,
                    lag = progress.lag.values().sum::<i64>(),
                    "ingest: {}",
                    self.line(progress)
                );
                self.last_line = Instant::now();
            }
            None => {}
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
