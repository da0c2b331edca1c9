//! What a running ingest has done so far, for the display.

use std::collections::BTreeMap;

use serde::Serialize;

/// Progress of a running ingest, for the display.
#[derive(Debug, Clone, Default, Serialize)]
pub struct KafkaIngestProgress {
    /// Messages consumed.
    pub messages: u64,
    /// Events recorded as new.
    pub recorded: u64,
    /// Exact duplicates of events recorded before.
    pub duplicates: u64,
    /// Conflicting duplicates: kept for audit, never counted.
    pub conflicts: u64,
    /// Messages quarantined (they failed to decode or validate).
    pub quarantined: u64,
    /// Messages quarantined, by reason code (`unknown_fingerprint`, `malformed_body`, ...), as read.
    pub quarantined_by_reason: BTreeMap<String, u64>,
    /// Ledger appends.
    pub batches: u64,
    /// The ledger's watermark after the last append; with shards, the sum of the shards' watermarks (their entries).
    pub watermark: u64,
    /// Times a partition's next message was past the offset expected (the seek position or the previous
    /// message plus one). Legitimate on compacted or transactional topics; otherwise the broker skipped
    /// messages, which the ledger cannot record.
    pub offset_gaps: u64,
    /// Times ingest left its group because an append outlasted `max.poll.interval.ms`, and rejoined.
    pub rejoins: u64,
    /// Events read in another tenant's partition and forwarded to their tenant's (shards only, contract §9.4).
    pub forwarded: u64,
    /// Plan defaults (tenant `*`) a producer sent to one partition, recorded and forwarded to every other partition
    /// (shards only, contract §9.4).
    pub plan_defaults_forwarded: u64,
    /// Per assigned partition: `(topic, partition)` -> messages behind the high watermark, when known.
    #[serde(skip)]
    pub lag: BTreeMap<(String, i32), i64>,
}

/// The final report of an ingest as its one line for people: the counts, what was forwarded to other partitions
/// (shards only) and the watermark.
impl std::fmt::Display for KafkaIngestProgress {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let forwarded = match self.forwarded {
            0 => String::new(),
            n => format!(", {n} forwarded to their tenant's partition"),
        };
        let plan_defaults = match self.plan_defaults_forwarded {
            0 => String::new(),
            n => format!(", {n} plan defaults forwarded to every partition"),
        };
        write!(
            out,
            "{} messages: {} recorded, {} duplicates, {} conflicting duplicates, {} quarantined{forwarded}{plan_defaults}; \
             watermark {}",
            self.messages, self.recorded, self.duplicates, self.conflicts, self.quarantined, self.watermark
        )
    }
}

impl KafkaIngestProgress {
    /// The progress of a running ingest as a line for people, at `messages_per_second`: the counts, offset gaps and
    /// rejoins when there were any, and each assigned partition's lag when known.
    pub fn live_line(&self, messages_per_second: f64) -> String {
        let lag = if self.lag.is_empty() {
            String::new()
        } else {
            let parts: Vec<String> = self.lag.iter().map(|((t, p), l)| format!("{t}[{p}]={l}")).collect();
            format!(", lag {} ({})", self.lag.values().sum::<i64>(), parts.join(" "))
        };
        let gaps = match self.offset_gaps {
            0 => String::new(),
            n => format!(", {n} offset gaps"),
        };
        let rejoins = match self.rejoins {
            0 => String::new(),
            n => format!(", {n} rejoins"),
        };
        format!(
            "{} messages ({messages_per_second:.0}/s), {} recorded, {} duplicates, {} conflicts, {} quarantined{gaps}\
             {rejoins}{lag}",
            self.messages, self.recorded, self.duplicates, self.conflicts, self.quarantined
        )
    }
}

pub(super) fn add_reasons(progress: &mut KafkaIngestProgress, reasons: BTreeMap<String, u64>) {
    for (reason, n) in reasons {
        *progress.quarantined_by_reason.entry(reason).or_insert(0) += n;
    }
}
