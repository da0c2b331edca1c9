//! The consumer's context: what the rebalance callback and the loop share, the seek of every assigned partition to the
//! ledger's offset, and, with shards, the shards opened and closed as the group assigns and revokes their partitions
//! (or as a standby's wanted partitions change).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use kafka::topics::Topics;
use ledger::Ledger;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::listeners::{LagListener, PartitionListener, Standing};
use crate::shards::{ShardWriterError, ShardWriters};

use super::error::KafkaIngestError;
use super::settings::{KafkaIngestSettings, LAG_EVERY_MS};

/// What the rebalance callback and the loop share.
#[derive(Debug, Default)]
pub(super) struct Shared {
    /// Next offset per partition as committed in the ledger (the loop updates it after each append).
    pub(super) ledger_offsets: BTreeMap<(String, i32), i64>,
    pub(super) assigned: BTreeSet<(String, i32)>,
    /// Partitions revoked since the loop last looked: their pending messages are dropped, not appended.
    pub(super) revoked: BTreeSet<(String, i32)>,
    /// A shard that could not be opened or closed on a rebalance: the loop stops with it.
    pub(super) shard_failure: Option<ShardWriterError>,
}

/// Seeks every assigned partition to the ledger's offset; with shards, opens shard p when partition p is assigned
/// (its stored offsets are where consuming resumes) and closes it when p is revoked.
pub(super) struct IngestContext {
    shared: Arc<Mutex<Shared>>,
    writers: Option<Arc<ShardWriters>>,
    listener: Option<Arc<dyn PartitionListener>>,
    lag_listener: Option<Arc<dyn LagListener>>,
}

impl ClientContext for IngestContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        kafka::log_librdkafka("ingest", level, facility, message);
    }

    /// The lag of each assigned partition: its high watermark as the fetcher last saw it, less the ledger's next
    /// offset there (the partition's low watermark when the ledger never read it).
    fn stats(&self, statistics: rdkafka::Statistics) {
        let Some(listener) = &self.lag_listener else { return };
        let shared = self.shared.lock().expect("never poisoned");
        for (topic, stats) in &statistics.topics {
            for (&partition, stats) in &stats.partitions {
                let key = (topic.clone(), partition);
                if partition < 0 || stats.hi_offset < 0 || !shared.assigned.contains(&key) {
                    continue;
                }
                let next = shared.ledger_offsets.get(&key).copied().unwrap_or(stats.lo_offset.max(0));
                listener.lag(topic, partition, stats.hi_offset, next);
            }
        }
    }
}

impl IngestContext {
    /// Opens the shards of `partitions` and notes the offsets they store.
    fn open_shards(&self, shared: &mut Shared, partitions: &[(String, i32)]) {
        let Some(writers) = &self.writers else { return };
        let numbers: BTreeSet<i32> = partitions.iter().map(|(_, partition)| *partition).collect();
        for partition in numbers {
            if let (Some(listener), Ok(partition)) = (&self.listener, u32::try_from(partition)) {
                listener.opening(partition);
            }
            match u32::try_from(partition).map(|p| writers.assign(p)) {
                Ok(Ok(offsets)) => {
                    for offset in offsets {
                        shared.ledger_offsets.insert((offset.topic, offset.partition), offset.next_offset);
                    }
                    if let Some(listener) = &self.listener {
                        listener.assigned(partition as u32);
                    }
                }
                Ok(Err(error)) => {
                    shared.shard_failure.get_or_insert(error);
                }
                Err(_) => tracing::error!(partition, "ingest: a partition is negative"),
            }
        }
    }

    /// Closes the shards of `partitions` once what was queued for them is appended.
    fn close_shards(&self, shared: &mut Shared, partitions: &[(String, i32)]) {
        let Some(writers) = &self.writers else { return };
        let numbers: BTreeSet<u32> = partitions.iter().filter_map(|(_, p)| u32::try_from(*p).ok()).collect();
        for partition in numbers {
            if let Some(listener) = &self.listener {
                listener.revoked(partition);
            }
            if let Err(error) = writers.revoke(partition) {
                shared.shard_failure.get_or_insert(error);
            }
            if let Some(listener) = &self.listener {
                listener.closed(partition);
            }
        }
    }

    /// Holds the shards `standing` wants, by assignment: those no longer wanted are closed and unassigned (their
    /// pending messages dropped, as on a revocation), those newly wanted opened and assigned from their stored offsets.
    pub(super) fn stand(
        &self,
        consumer: &BaseConsumer<Self>,
        standing: &dyn Standing,
        topics: &Topics,
        partitions: u32,
    ) -> Result<(), KafkaIngestError> {
        let wanted: BTreeSet<u32> = standing.wanted().into_iter().filter(|p| *p < partitions).collect();
        let mut shared = self.shared.lock().expect("never poisoned");
        let held: BTreeSet<u32> = shared.assigned.iter().filter_map(|(_, p)| u32::try_from(*p).ok()).collect();
        if wanted == held {
            return Ok(());
        }
        let of = |numbers: &BTreeSet<u32>| -> Vec<(String, i32)> {
            numbers
                .iter()
                .flat_map(|p| topics.names().into_iter().map(move |topic| (topic.to_string(), *p as i32)))
                .collect()
        };
        let gone = of(&held.difference(&wanted).copied().collect());
        if !gone.is_empty() {
            for key in &gone {
                shared.assigned.remove(key);
                shared.revoked.insert(key.clone());
            }
            self.close_shards(&mut shared, &gone);
            consumer.incremental_unassign(&list_of(&gone, |_| Offset::Invalid)).map_err(KafkaIngestError::Standing)?;
            tracing::info!(partitions = %list(&gone), "ingest: no longer standing by");
        }
        let new = of(&wanted.difference(&held).copied().collect());
        if !new.is_empty() {
            self.open_shards(&mut shared, &new);
            let offsets = &shared.ledger_offsets;
            let assignment = list_of(&new, |key| Offset::Offset(offsets.get(key).copied().unwrap_or(0)));
            consumer.incremental_assign(&assignment).map_err(KafkaIngestError::Standing)?;
            tracing::info!(partitions = %list(&new), "ingest: standing by");
            shared.assigned.extend(new);
        }
        let holding = shared.assigned.iter().filter_map(|(_, p)| u32::try_from(*p).ok()).collect();
        drop(shared);
        standing.holding(&holding);
        Ok(())
    }
}

/// `partitions` as a librdkafka list, each at `offset_of` it.
fn list_of(partitions: &[(String, i32)], offset_of: impl Fn(&(String, i32)) -> Offset) -> TopicPartitionList {
    let mut list = TopicPartitionList::new();
    for key in partitions {
        // Only an offset librdkafka does not take fails, and every one given here is one it takes.
        let _ = list.add_partition_offset(&key.0, key.1, offset_of(key));
    }
    list
}

impl ConsumerContext for IngestContext {
    fn rebalance(&self, consumer: &BaseConsumer<Self>, err: RDKafkaRespErr, tpl: &mut TopicPartitionList) {
        let mut shared = self.shared.lock().expect("the ingest state is never poisoned: no code panics holding it");
        let partitions: Vec<(String, i32)> =
            tpl.elements().iter().map(|e| (e.topic().to_string(), e.partition())).collect();
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                self.open_shards(&mut shared, &partitions);
                for (topic, partition) in &partitions {
                    // A partition the ledger never read starts at offset 0, not at "the beginning": one whose first
                    // messages are gone is then named as a gap (auto.offset.reset is "error"), not skipped.
                    let next = shared.ledger_offsets.get(&(topic.clone(), *partition)).copied().unwrap_or(0);
                    let offset = Offset::Offset(next);
                    let _ = tpl.set_partition_offset(topic, *partition, offset);
                }
                if let Err(e) = consumer.assign(tpl) {
                    tracing::error!(partitions = ?partitions, error = %e, "ingest: assigning failed");
                }
                tracing::info!(assigned = %list(&partitions), "ingest: partitions assigned");
                shared.assigned.extend(partitions);
            }
            _ => {
                for key in &partitions {
                    shared.assigned.remove(key);
                    shared.revoked.insert(key.clone());
                }
                // Before the partitions may go to another member: what was queued for their shards is appended,
                // so that the next owner finds its offsets stored.
                self.close_shards(&mut shared, &partitions);
                tracing::info!(revoked = %list(&partitions), "ingest: partitions revoked");
                if let Err(e) = consumer.unassign() {
                    tracing::error!(error = %e, "ingest: unassigning failed");
                }
            }
        }
    }
}

/// Partitions as `topic[p],topic[q]`.
fn list(partitions: &[(String, i32)]) -> String {
    partitions.iter().map(|(topic, p)| format!("{topic}[{p}]")).collect::<Vec<_>>().join(",")
}

/// The consumer of a run, its rebalance callback opening and closing `writers`' shards when there are any.
pub(super) fn make_consumer(
    settings: &KafkaIngestSettings,
    shared: &Arc<Mutex<Shared>>,
    writers: Option<Arc<ShardWriters>>,
) -> Result<BaseConsumer<IngestContext>, KafkaIngestError> {
    let mut config = kafka::config::consumer(&settings.brokers, &settings.group, &settings.overrides);
    if settings.lag_listener.is_some() {
        config.set("statistics.interval.ms", LAG_EVERY_MS.to_string());
    }
    let context = IngestContext {
        shared: shared.clone(),
        writers,
        listener: settings.listener.clone(),
        lag_listener: settings.lag_listener.clone(),
    };
    config
        .create_with_context(context)
        .map_err(|source| KafkaIngestError::Consumer { brokers: settings.brokers.clone(), source })
}

pub(super) fn refresh_offsets(ledger: &Ledger, shared: &Mutex<Shared>) -> Result<(), ledger::ReadError> {
    let offsets = ledger.offsets()?;
    let mut shared = shared.lock().expect("never poisoned");
    for offset in offsets {
        shared.ledger_offsets.insert((offset.topic, offset.partition), offset.next_offset);
    }
    Ok(())
}
