//! Offsets the ledger never read: the gaps the operator accepts (`--accept-gap`), recorded before consuming; offsets a
//! broker skipped, counted; and a partition whose next offset the brokers no longer hold, found and named.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use ledger::shards::{Shard, ShardDir, ShardError};
use ledger::{GapRange, Ledger, ProcessLock};
use rdkafka::Offset;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;

use crate::shards::ShardWriterError;

use super::caught_up::{WATERMARK_TIMEOUT_MS, fetch_all_watermarks};
use super::error::{KafkaIngestError, MissingOffsets};
use super::progress::KafkaIngestProgress;
use super::rebalance::{IngestContext, Shared};
use super::settings::KafkaIngestSettings;

/// How often a partition whose accepted gap runs past its end (a recreated topic, shorter than the ledger's offset)
/// is asked again from the ledger's offset: the brokers answer "out of range" until the topic reaches it.
const PAST_END_ASK_MS: u64 = 5_000;

/// Records each gap of `gaps` (`--accept-gap`) that is exactly what is missing in its partition now (the ledger's
/// next offset against what the brokers hold); a gap recorded already is left as it is. Anything else is refused
/// before anything is recorded or consumed.
pub(super) fn accept_gaps(
    ledger: &mut Ledger,
    consumer: &BaseConsumer<IngestContext>,
    gaps: &[GapRange],
) -> Result<(), KafkaIngestError> {
    let recorded: Vec<GapRange> = ledger.offset_gaps()?.iter().map(|g| g.range()).collect();
    let offsets = ledger.offsets()?;
    for asked in gaps {
        let (topic, partition) = (asked.topic.as_str(), asked.partition);
        let next = offsets.iter().find(|o| o.topic == topic && o.partition == partition).map_or(0, |o| o.next_offset);
        let (low, high) = consumer
            .fetch_watermarks(topic, partition, Duration::from_millis(WATERMARK_TIMEOUT_MS))
            .map_err(|source| KafkaIngestError::Watermark { topic: topic.to_string(), partition, source })?;
        let missing = MissingOffsets::find(topic, partition, next, low, high);
        match &missing {
            _ if recorded.contains(asked) => {}
            Some(missing) if missing.range == *asked => {
                ledger.accept_gap(asked)?;
                tracing::warn!(
                    offsets = asked.len(),
                    %topic,
                    partition,
                    gap = %asked,
                    missing = %missing,
                    "ingest: offsets recorded as never read"
                );
            }
            _ => {
                let missing = missing.map(Box::new);
                return Err(KafkaIngestError::GapNotMissing { asked: asked.clone(), missing, next, low, high });
            }
        }
    }
    Ok(())
}

/// Records the accepted gaps of `settings` in the shards of their partitions, each opened for the moment.
pub(super) fn accept_shard_gaps(
    shards: &ShardDir,
    partitions: u32,
    consumer: &BaseConsumer<IngestContext>,
    settings: &KafkaIngestSettings,
) -> Result<(), KafkaIngestError> {
    let mut by_shard: BTreeMap<u32, Vec<GapRange>> = BTreeMap::new();
    for gap in &settings.accept_gaps {
        let partition = u32::try_from(gap.partition).ok().filter(|p| *p < partitions).ok_or_else(|| {
            KafkaIngestError::GapNotMissing { asked: gap.clone(), missing: None, next: 0, low: 0, high: 0 }
        })?;
        by_shard.entry(partition).or_default().push(gap.clone());
    }
    for (partition, gaps) in by_shard {
        let shard = Shard { partition, partitions };
        let shard_error = |source| ShardWriterError::Open { partition, source };
        let directory = |source| shard_error(ShardError::Directory { dir: shards.dir().to_path_buf(), source });
        std::fs::create_dir_all(shards.dir()).map_err(directory)?;
        let _lock = ProcessLock::acquire(&shards.path_of(partition), "ingest")
            .map_err(|source| ShardWriterError::Lock { partition, source })?;
        let mut ledger = shards.open(shard).map_err(shard_error)?;
        accept_gaps(&mut ledger, consumer, &gaps)?;
    }
    Ok(())
}

/// Counts and reports a message whose offset is past the one expected in its partition: the ledger's offset
/// for the first message after an assignment, the previous offset plus one after that.
pub(super) fn check_gap(
    shared: &Mutex<Shared>,
    expected: &mut BTreeMap<(String, i32), i64>,
    message: &rdkafka::message::BorrowedMessage<'_>,
    progress: &mut KafkaIngestProgress,
) {
    let key = (message.topic().to_string(), message.partition());
    let want = match expected.get(&key) {
        Some(next) => Some(*next),
        None => shared.lock().expect("never poisoned").ledger_offsets.get(&key).copied(),
    };
    if let Some(want) = want.filter(|w| message.offset() > *w) {
        progress.offset_gaps += 1;
        tracing::warn!(
            topic = %key.0,
            partition = key.1,
            from = want,
            to = message.offset(),
            skipped = message.offset() - want,
            "ingest: the broker returned no message for some offsets (expected only on compacted or transactional \
             topics)"
        );
    }
    expected.insert(key, message.offset() + 1);
}

/// After librdkafka said a partition's offset is out of range: finds which, from each assigned partition's ends and
/// the ledger's next offset. A range the operator accepted already (a recreated topic, still shorter than the
/// ledger's offset) is asked again later; any other stops ingest, named. When none is out of range any more, every
/// assigned partition is asked again from the ledger's offset (librdkafka stops fetching the one that failed).
pub(super) fn offsets_out_of_range(
    accepted: &[GapRange],
    consumer: &BaseConsumer<IngestContext>,
    shared: &Mutex<Shared>,
    past_end: &mut BTreeMap<(String, i32), Instant>,
) -> Result<(), KafkaIngestError> {
    let (assigned, offsets) = {
        let shared = shared.lock().expect("never poisoned");
        (shared.assigned.iter().cloned().collect::<Vec<_>>(), shared.ledger_offsets.clone())
    };
    let mut missing = Vec::new();
    for (key, ends) in assigned.iter().zip(fetch_all_watermarks(consumer, &assigned)) {
        let (low, high) =
            ends.map_err(|source| KafkaIngestError::Watermark { topic: key.0.clone(), partition: key.1, source })?;
        let next = offsets.get(key).copied().unwrap_or(0);
        match MissingOffsets::find(&key.0, key.1, next, low, high) {
            Some(found) if accepted.iter().any(|a| a.covers(&found.range)) => {
                past_end.entry(key.clone()).or_insert_with(Instant::now);
            }
            Some(found) => missing.push(found),
            None => {}
        }
    }
    if !missing.is_empty() {
        return Err(KafkaIngestError::OffsetsNeverRead { missing });
    }
    if past_end.is_empty() {
        tracing::warn!(
            "ingest: the brokers said an offset was out of range, but every partition's is in range now; asking again"
        );
        for (topic, partition) in &assigned {
            let next = offsets.get(&(topic.clone(), *partition)).copied().unwrap_or(0);
            seek(consumer, topic, *partition, next);
        }
    }
    Ok(())
}

/// Asks again, from the ledger's offset, each partition waiting for its recreated topic to reach that offset, every
/// [`PAST_END_ASK_MS`]. Out of range again, it comes back to [`offsets_out_of_range`].
pub(super) fn ask_past_end_again(
    consumer: &BaseConsumer<IngestContext>,
    shared: &Mutex<Shared>,
    past_end: &mut BTreeMap<(String, i32), Instant>,
) {
    let due: Vec<(String, i32)> = past_end
        .iter()
        .filter(|(_, since)| since.elapsed() >= Duration::from_millis(PAST_END_ASK_MS))
        .map(|(key, _)| key.clone())
        .collect();
    for key in due {
        past_end.remove(&key);
        let (assigned, next) = {
            let shared = shared.lock().expect("never poisoned");
            (shared.assigned.contains(&key), shared.ledger_offsets.get(&key).copied().unwrap_or(0))
        };
        if assigned {
            seek(consumer, &key.0, key.1, next);
        }
    }
}

fn seek(consumer: &BaseConsumer<IngestContext>, topic: &str, partition: i32, next: i64) {
    if let Err(error) = consumer.seek(topic, partition, Offset::Offset(next), Duration::from_millis(1_000)) {
        tracing::warn!(%topic, partition, offset = next, %error, "ingest: cannot ask a partition again from an offset");
    }
}
