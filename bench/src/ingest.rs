//! `bench ingest`: a generated month appended into 1 shard and into N shards, in one process with a writer per shard
//! (ingest's [`ShardWriters`], contract §9.4), in one run: how ingest scales with shards on this machine.
//!
//! The month's messages are generated and encoded before the clock starts, each given the partition of its tenant
//! among N and an offset in it, as a consumer would receive them. Inside the clock: dispatching them in batches to
//! the writers (what the consumer thread does once polled), and in each writer decoding, validating, deduplicating,
//! hash-chaining and committing them. Kafka itself is left out: its fetches are another machine's work. A decode-only
//! pass over the same messages on one thread says how much of the time is decoding.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use ingest::ShardWriters;
use ingest::consumed::Consumed;
use ingest::shards::WriterSettings;
use kafka::topics::Topics;
use ledger::shards::ShardDir;
use schemas::Catalog;
use serde::Serialize;

use generate::{GenerateSettings, Generated, Generator, Progress};

/// What to ingest, into how many shards.
#[derive(Debug, Clone)]
pub struct IngestBenchSettings {
    /// Generated messages of the month (duplicates, conflicting copies and malformed ones included).
    pub events: u64,
    /// Tenants of the month.
    pub tenants: u32,
    /// Messages per append (per shard), as ingest's `--batch-max-events`.
    pub batch_events: usize,
    /// The shard counts measured, each into a fresh directory, in this order, every round.
    pub shards: Vec<u32>,
    /// How many times each shard count is measured.
    pub rounds: u32,
    /// Directory for the shards (a temporary directory when absent).
    pub dir: Option<PathBuf>,
}

/// One measurement: the month into `shards` shards.
#[derive(Debug, Clone, Serialize)]
pub struct IngestRun {
    /// The round it belongs to, from 1.
    pub round: u32,
    /// Shards, one writer thread each.
    pub shards: u32,
    /// Seconds from the first dispatch to the last commit.
    pub seconds: f64,
    /// Messages per second through all the shards.
    pub messages_per_second: f64,
    /// Per shard: messages it was given, and their rate over the run's seconds.
    pub per_shard: Vec<ShardFigures>,
}

/// One shard's share of a run.
#[derive(Debug, Clone, Serialize)]
pub struct ShardFigures {
    /// The shard's partition.
    pub partition: u32,
    /// Messages appended to it.
    pub messages: u64,
    /// Its messages per second over the run.
    pub messages_per_second: f64,
}

/// The figures of a benchmark run.
#[derive(Debug, Clone, Serialize)]
pub struct IngestFigures {
    /// Messages of the month.
    pub messages: u64,
    /// Tenants.
    pub tenants: u32,
    /// Messages per append.
    pub batch_events: usize,
    /// Seconds decoding and validating every message takes on one thread, nothing appended.
    pub decode_seconds: f64,
    /// Every measurement, in the order made.
    pub runs: Vec<IngestRun>,
    /// Per shard count, the median of its rounds' messages per second.
    pub median_messages_per_second: BTreeMap<u32, f64>,
    /// Per shard count, its median rate over the median rate of the first shard count measured.
    pub speedup: BTreeMap<u32, f64>,
}

/// The figures as lines for people: each run with its shards' shares, then each shard count's median and speedup.
impl std::fmt::Display for IngestFigures {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            out,
            "{} messages, {} tenants, {} per append; decoding them all on one thread: {:.2} s",
            self.messages, self.tenants, self.batch_events, self.decode_seconds
        )?;
        for run in &self.runs {
            let shares: Vec<String> =
                run.per_shard.iter().map(|s| format!("shard {} {:.0}/s", s.partition, s.messages_per_second)).collect();
            let (round, shards, seconds, rate) = (run.round, run.shards, run.seconds, run.messages_per_second);
            writeln!(
                out,
                "round {round} {shards:2} shards {seconds:8.2} s {rate:>10.0} messages/s  ({})",
                shares.join(", ")
            )?;
        }
        for (shards, rate) in &self.median_messages_per_second {
            writeln!(out, "median {shards:2} shards {rate:>10.0} messages/s  speedup {:.2}", self.speedup[shards])?;
        }
        Ok(())
    }
}

/// Generates the month, then appends it into each shard count of `settings`, `rounds` times.
pub fn run(settings: &IngestBenchSettings, progress: &dyn Fn(Progress)) -> anyhow::Result<IngestFigures> {
    anyhow::ensure!(settings.batch_events > 0, "--batch-events must be at least 1");
    anyhow::ensure!(!settings.shards.is_empty() && !settings.shards.contains(&0), "--shards takes counts from 1");
    let temporary = tempfile::tempdir().context("cannot create a temporary directory")?;
    let dir = settings.dir.clone().unwrap_or_else(|| temporary.path().to_path_buf());
    progress(Progress::Note(format!("generating {} messages for {} tenants ...", settings.events, settings.tenants)));
    let month = generate(settings.tenants, settings.events);
    let decode_seconds = time_decode(&month).as_secs_f64();
    let mut runs = Vec::new();
    for round in 1..=settings.rounds.max(1) {
        for &shards in &settings.shards {
            let messages = partitioned(&month, shards);
            let shard_dir = dir.join(format!("bench-ingest-{shards}"));
            let _ = std::fs::remove_dir_all(&shard_dir);
            progress(Progress::Begin { step: format!("{shards} shards, round {round}"), total: None });
            let elapsed = time_shards(&shard_dir, shards, messages.clone(), settings.batch_events)?;
            progress(Progress::End);
            runs.push(figures_of(round, shards, &messages, elapsed));
            let _ = std::fs::remove_dir_all(&shard_dir);
        }
    }
    let median_messages_per_second: BTreeMap<u32, f64> = settings
        .shards
        .iter()
        .map(|&shards| {
            let mut rates: Vec<f64> =
                runs.iter().filter(|r| r.shards == shards).map(|r| r.messages_per_second).collect();
            rates.sort_by(f64::total_cmp);
            (shards, rates[rates.len() / 2])
        })
        .collect();
    let base = median_messages_per_second[&settings.shards[0]];
    let speedup = median_messages_per_second.iter().map(|(shards, rate)| (*shards, rate / base)).collect();
    Ok(IngestFigures {
        messages: month.len() as u64,
        tenants: settings.tenants,
        batch_events: settings.batch_events,
        decode_seconds,
        runs,
        median_messages_per_second,
        speedup,
    })
}

/// A generated message as produced: its topic, key and bytes.
#[derive(Clone)]
struct Produced {
    topic: &'static str,
    key: String,
    payload: Vec<u8>,
}

fn generate(tenants: u32, events: u64) -> Vec<Produced> {
    let catalog = Catalog::builtin();
    Generator::new(GenerateSettings::new(tenants, events, 35))
        .map(|generated| match generated {
            Generated::Event(event) | Generated::Invalid(event) => Produced {
                topic: event.event_type().default_topic(),
                key: event.header().tenant.clone(),
                payload: catalog.encode_single_object(&event),
            },
            Generated::Garbage { event_type, key, bytes } => {
                Produced { topic: event_type.default_topic(), key, payload: bytes }
            }
        })
        .collect()
}

/// The messages as a consumer of `shards` partitions receives them: each in its tenant's partition, at the next
/// offset there.
fn partitioned(month: &[Produced], shards: u32) -> Vec<Consumed> {
    let mut next: BTreeMap<(&str, u32), i64> = BTreeMap::new();
    month
        .iter()
        .map(|m| {
            let partition = schemas::partition::partition_of(&m.key, shards);
            let offset = next.entry((m.topic, partition)).or_insert(0);
            *offset += 1;
            Consumed {
                topic: m.topic.to_string(),
                partition: partition as i32,
                offset: *offset - 1,
                key: Some(m.key.clone().into_bytes()),
                payload: m.payload.clone(),
                plan_default_copy: false,
            }
        })
        .collect()
}

fn time_decode(month: &[Produced]) -> Duration {
    let catalog = Catalog::builtin();
    let started = Instant::now();
    let decoded = month.iter().filter(|m| catalog.decode_single_object(&m.payload, None).is_ok()).count();
    let elapsed = started.elapsed();
    std::hint::black_box(decoded);
    elapsed
}

/// Dispatches `messages` in batches of `batch_events` per shard to a writer per shard, as the consumer does, and
/// waits for the last commit.
fn time_shards(
    dir: &std::path::Path,
    shards: u32,
    messages: Vec<Consumed>,
    batch_events: usize,
) -> anyhow::Result<Duration> {
    let writers = ShardWriters::new(ShardDir::new(dir), shards, WriterSettings::new(Topics::defaults()));
    for partition in 0..shards {
        writers.assign(partition)?;
    }
    let started = Instant::now();
    let mut gathering: BTreeMap<u32, Vec<Consumed>> = BTreeMap::new();
    for message in messages {
        let partition = message.partition as u32;
        let batch = gathering.entry(partition).or_default();
        batch.push(message);
        if batch.len() >= batch_events {
            writers.send(partition, std::mem::take(batch))?;
        }
    }
    for (partition, batch) in gathering {
        if !batch.is_empty() {
            writers.send(partition, batch)?;
        }
    }
    writers.close_all()?;
    let elapsed = started.elapsed();
    writers.take_appended()?;
    Ok(elapsed)
}

fn figures_of(round: u32, shards: u32, messages: &[Consumed], elapsed: Duration) -> IngestRun {
    let seconds = elapsed.as_secs_f64();
    let per_shard = (0..shards)
        .map(|partition| {
            let count = messages.iter().filter(|m| m.partition as u32 == partition).count() as u64;
            ShardFigures { partition, messages: count, messages_per_second: count as f64 / seconds }
        })
        .collect();
    IngestRun { round, shards, seconds, messages_per_second: messages.len() as f64 / seconds, per_shard }
}
