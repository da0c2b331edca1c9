//! The figures of a Kafka ingest (`ingest --brokers`, `node`) and of a node's standby copies, registered into the
//! process's registry (`telemetry`): what was consumed, by outcome and quarantine reason, and the lag per partition.

use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use telemetry::Registry;

use crate::{KafkaIngestProgress, LagListener};

/// A Kafka partition of an input topic.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PartitionLabels {
    /// The topic.
    pub topic: String,
    /// The partition's number.
    pub partition: String,
}

/// What became of a consumed message.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `recorded`, `duplicate`, `conflict`, `quarantined` or `forwarded`.
    pub outcome: &'static str,
}

/// The figures of a Kafka ingest (`ingest --brokers`, `node`).
#[derive(Debug)]
pub struct IngestMetrics {
    messages: Counter,
    events: Family<OutcomeLabels, Counter>,
    batches: Counter,
    lag: Family<PartitionLabels, Gauge>,
    quarantined: Family<ReasonLabels, Counter>,
    /// The cumulative figures last observed, whose increase the counters are given.
    seen: Mutex<Seen>,
}

/// Why a message was quarantined.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// The quarantine's reason code (`unknown_fingerprint`, `malformed_body`, `unknown_schema_id`, ...).
    pub reason: String,
}

#[derive(Debug, Default)]
struct Seen {
    messages: u64,
    recorded: u64,
    duplicates: u64,
    conflicts: u64,
    quarantined: u64,
    forwarded: u64,
    batches: u64,
    quarantined_by_reason: std::collections::BTreeMap<String, u64>,
}

impl IngestMetrics {
    /// Registers the ingest families into `registry`.
    pub fn register(registry: &mut Registry) -> Arc<IngestMetrics> {
        let metrics = IngestMetrics {
            messages: Counter::default(),
            events: Family::default(),
            batches: Counter::default(),
            lag: Family::default(),
            quarantined: Family::default(),
            seen: Mutex::new(Seen::default()),
        };
        registry.register("ingest_messages", "Kafka messages consumed", metrics.messages.clone());
        registry.register(
            "ingest_events",
            "Consumed messages by outcome: recorded (new), duplicate (counted once), conflict (same event_id, \
             another payload; kept, never counted), quarantined (failed to decode or validate), forwarded (read in \
             another tenant's partition)",
            metrics.events.clone(),
        );
        registry.register("ingest_batches", "Ledger appends (one transaction each)", metrics.batches.clone());
        registry.register(
            "ingest_quarantined",
            "Messages quarantined, by reason code (as read: a message read again after a crash counts again)",
            metrics.quarantined.clone(),
        );
        registry.register(
            "ingest_lag_messages",
            "Messages of a partition not yet in the ledger: the brokers' high watermark less the ledger's next offset",
            metrics.lag.clone(),
        );
        Arc::new(metrics)
    }

    /// Observes ingest's progress (cumulative since it started): the counters grow by what it added.
    pub fn observe(&self, progress: &KafkaIngestProgress) {
        let mut seen = self.seen.lock().expect("never poisoned");
        let grow = |counter: &Counter, seen: &mut u64, now: u64| {
            counter.inc_by(now.saturating_sub(*seen));
            *seen = (*seen).max(now);
        };
        grow(&self.messages, &mut seen.messages, progress.messages);
        grow(&self.batches, &mut seen.batches, progress.batches);
        let outcome = |outcome| self.events.get_or_create(&OutcomeLabels { outcome }).clone();
        grow(&outcome("recorded"), &mut seen.recorded, progress.recorded);
        grow(&outcome("duplicate"), &mut seen.duplicates, progress.duplicates);
        grow(&outcome("conflict"), &mut seen.conflicts, progress.conflicts);
        grow(&outcome("quarantined"), &mut seen.quarantined, progress.quarantined);
        grow(&outcome("forwarded"), &mut seen.forwarded, progress.forwarded);
        for (reason, now) in &progress.quarantined_by_reason {
            let counter = self.quarantined.get_or_create(&ReasonLabels { reason: reason.clone() }).clone();
            grow(&counter, seen.quarantined_by_reason.entry(reason.clone()).or_insert(0), *now);
        }
    }
}

impl LagListener for IngestMetrics {
    fn lag(&self, topic: &str, partition: i32, high: i64, next: i64) {
        let labels = PartitionLabels { topic: topic.to_string(), partition: partition.to_string() };
        self.lag.get_or_create(&labels).set((high - next).max(0));
    }
}

/// How far a node's standby copies (`node --standby`) are behind their partitions: whether a takeover would start
/// warm.
#[derive(Debug, Default)]
pub struct StandbyMetrics {
    lag: Family<PartitionLabels, Gauge>,
}

impl StandbyMetrics {
    /// Registers the standby's family into `registry`.
    pub fn register(registry: &mut Registry) -> Arc<StandbyMetrics> {
        let metrics = StandbyMetrics::default();
        registry.register(
            "standby_lag_messages",
            "Messages of a partition not yet in this node's standby copy of its shard: the brokers' high watermark \
             less the copy's next offset",
            metrics.lag.clone(),
        );
        Arc::new(metrics)
    }

    /// The copy of `partition` is no longer held: its series go, rather than stay at their last value.
    pub fn forget(&self, topics: &[&str], partition: u32) {
        for topic in topics {
            self.lag.remove(&PartitionLabels { topic: topic.to_string(), partition: partition.to_string() });
        }
    }
}

impl LagListener for StandbyMetrics {
    fn lag(&self, topic: &str, partition: i32, high: i64, next: i64) {
        let labels = PartitionLabels { topic: topic.to_string(), partition: partition.to_string() };
        self.lag.get_or_create(&labels).set((high - next).max(0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ingest_counters_grow_by_what_progress_added() {
        let mut registry = telemetry::registry();
        let metrics = IngestMetrics::register(&mut registry);
        let mut progress =
            KafkaIngestProgress { messages: 10, recorded: 7, duplicates: 2, quarantined: 1, ..Default::default() };
        metrics.observe(&progress);
        progress.messages = 15;
        progress.recorded = 12;
        metrics.observe(&progress);
        metrics.observe(&progress);
        LagListener::lag(&*metrics, "quota.usage", 2, 40, 25);
        let text = telemetry::encode(&registry);
        assert!(text.contains("quota_ledger_ingest_messages_total 15"), "{text}");
        assert!(text.contains(r#"quota_ledger_ingest_events_total{outcome="recorded"} 12"#), "{text}");
        assert!(text.contains(r#"quota_ledger_ingest_events_total{outcome="duplicate"} 2"#), "{text}");
        assert!(text.contains(r#"quota_ledger_ingest_lag_messages{topic="quota.usage",partition="2"} 15"#), "{text}");
    }
}
