//! Why ingest stopped ([`KafkaIngestError`]), with what the messages quote: the offsets the ledger never read, the
//! partitions other members hold that are behind.

use std::collections::BTreeSet;

use kafka::topics::PartitionCountError;
use ledger::{AppendError, GapRange};
use rdkafka::error::KafkaError;

use crate::shards::ShardWriterError;

/// Ingest stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KafkaIngestError {
    /// librdkafka refused the consumer's configuration (a bad `-X` setting, say).
    #[error("cannot create the Kafka consumer for {brokers}")]
    Consumer {
        /// `bootstrap.servers`.
        brokers: String,
        /// librdkafka's reason.
        source: KafkaError,
    },
    /// Subscribing to the topics failed.
    #[error("cannot subscribe to {topics}")]
    Subscribe {
        /// The topics, comma-separated.
        topics: String,
        /// librdkafka's reason.
        source: KafkaError,
    },
    /// The consumer failed for a reason librdkafka does not ride out.
    #[error("Kafka consumer failed")]
    Consume(#[source] KafkaError),
    /// The partitions a standby holds could not be assigned or unassigned.
    #[error("cannot change the partitions the standby consumes")]
    Standing(#[source] KafkaError),
    /// The brokers answer but lack subscribed topics.
    #[error("{}", kafka::topics::missing_topics_message(missing, brokers))]
    MissingTopics {
        /// The topics the brokers do not have.
        missing: BTreeSet<String>,
        /// `bootstrap.servers`.
        brokers: String,
    },
    /// With `until_caught_up`: the brokers stayed away for [`BROKERS_WAIT_MS`](super::BROKERS_WAIT_MS).
    #[error("the brokers at {brokers} did not answer for {waited_ms} ms: {last}")]
    Unreachable {
        /// `bootstrap.servers`.
        brokers: String,
        /// How long ingest waited.
        waited_ms: u64,
        /// The last reason librdkafka gave.
        last: String,
    },
    /// With `until_caught_up`: the group assigned no partition for [`ASSIGNMENT_WAIT_MS`](super::ASSIGNMENT_WAIT_MS).
    #[error(
        "no partition of {topics} was assigned to group {group} within {waited_ms} ms, although the brokers at \
         {brokers} have the topics: other members of the group may hold every partition (a group has at most as \
         many busy members as its topics have partitions); not assigned: {partitions}"
    )]
    NoAssignment {
        /// The topics, comma-separated.
        topics: String,
        /// `group.id`.
        group: String,
        /// `bootstrap.servers`.
        brokers: String,
        /// How long ingest waited.
        waited_ms: u64,
        /// The partitions, as `topic[partition]`, comma-separated.
        partitions: String,
    },
    /// With `until_caught_up`: partitions other members of the group hold are behind, so the ledger is not caught
    /// up although ingest read everything it was given.
    #[error(
        "the ledger did not reach the end of {}: group {group} assigned them to other members (still so after \
         {waited_ms} ms); the ledger holds what it was given, which is not every partition. Give each ledger its own \
         group (the default, derived from the ledger id) or stop the other members",
        describe_behind(behind)
    )]
    NotAssigned {
        /// `group.id`.
        group: String,
        /// The partitions not assigned whose end the ledger has not reached.
        behind: Vec<Behind>,
        /// How long ingest waited for them.
        waited_ms: u64,
    },
    /// Offsets the ledger never read are gone from the brokers (or below a topic recreated under its offsets).
    #[error("{}", describe_missing(missing))]
    OffsetsNeverRead {
        /// Each partition's missing range, with what the ledger and the brokers hold.
        missing: Vec<MissingOffsets>,
    },
    /// An `--accept-gap` that is not what is missing.
    #[error(
        "gap {asked} not accepted: {}",
        match missing {
            Some(missing) => format!("{missing}; --accept-gap takes exactly the range ingest names"),
            None => format!(
                "nothing is missing in {}[{}] (the ledger's next offset is {next}; the brokers hold offsets {low} to {})",
                asked.topic, asked.partition, high - 1
            ),
        }
    )]
    GapNotMissing {
        /// The range asked for.
        asked: GapRange,
        /// What is missing in that partition, if anything (boxed: the error stays small on the happy path).
        missing: Option<Box<MissingOffsets>>,
        /// The ledger's next offset of the partition.
        next: i64,
        /// The partition's first offset on the brokers.
        low: i64,
        /// The partition's end on the brokers.
        high: i64,
    },
    /// The ledger refused the accepted gap.
    #[error("recording the accepted gap failed")]
    Gap(#[from] ledger::GapError),
    /// With `until_caught_up`: a partition's high watermark could not be read.
    #[error("cannot read the high watermark of {topic}[{partition}]")]
    Watermark {
        /// The partition's topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// librdkafka's reason.
        source: KafkaError,
    },
    /// The ledger refused a batch; what was appended before stays appended.
    #[error("ledger append failed")]
    Append(#[from] AppendError),
    /// The ledger's offsets could not be read.
    #[error("cannot read the ledger's offsets")]
    Offsets(#[from] ledger::ReadError),
    /// The input topics do not share one partition count, which shards need (contract §9.4).
    #[error("cannot ingest into shards from {brokers}")]
    PartitionCount {
        /// `bootstrap.servers`.
        brokers: String,
        /// Which topics have which count, or why none was read.
        source: PartitionCountError,
    },
    /// A shard's writer failed, or a shard could not be opened or closed on a rebalance (boxed: the error stays
    /// small on the happy path).
    #[error(transparent)]
    Shard(Box<ShardWriterError>),
    /// A shard open for writing could not be read for its accepted gaps.
    #[error("cannot read the accepted gaps of shard {partition}")]
    ShardGaps {
        /// The partition.
        partition: u32,
        /// Why.
        source: ledger::OpenError,
    },
}

impl From<ShardWriterError> for KafkaIngestError {
    fn from(error: ShardWriterError) -> KafkaIngestError {
        KafkaIngestError::Shard(Box::new(error))
    }
}

/// Offsets of one partition the ledger never read and never will, as ingest found them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingOffsets {
    /// The range: what `--accept-gap` takes.
    pub range: GapRange,
    /// The ledger's next offset of the partition (0 when it never read it).
    pub next: i64,
    /// The partition's first offset on the brokers.
    pub low: i64,
    /// The partition's end (its high watermark) on the brokers.
    pub high: i64,
}

impl MissingOffsets {
    /// What is missing where the ledger is `next` and the brokers hold `low..high`: the offsets from `next` up to
    /// `low` (removed before they were read), or, when the partition ends below `next` (a topic deleted and
    /// recreated), every offset of it below `next` (the new topic's, which the ledger's offset has passed already).
    pub fn find(topic: &str, partition: i32, next: i64, low: i64, high: i64) -> Option<MissingOffsets> {
        let (from_offset, to_offset) = if next < low {
            (next, low - 1)
        } else if next > high {
            (low, next - 1)
        } else {
            return None;
        };
        let range = GapRange { topic: topic.to_string(), partition, from_offset, to_offset };
        Some(MissingOffsets { range, next, low, high })
    }
}

impl std::fmt::Display for MissingOffsets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let GapRange { topic, partition, from_offset, to_offset } = &self.range;
        if self.next < self.low {
            write!(
                f,
                "{topic}[{partition}] offsets {from_offset} to {to_offset} were never read: the ledger's next offset \
                 is {}, but the brokers now start the partition at {} (messages removed by retention or deleted \
                 before ingest read them)",
                self.next, self.low
            )
        } else {
            write!(
                f,
                "{topic}[{partition}] offsets {from_offset} to {to_offset} will never be read: the ledger's next \
                 offset is {}, but the partition now ends at {} (the topic was deleted and recreated, or the brokers \
                 lost messages), so its offsets below {} are not those the ledger read",
                self.next, self.high, self.next
            )
        }
    }
}

fn describe_missing(missing: &[MissingOffsets]) -> String {
    let lines: Vec<String> = missing.iter().map(|m| m.to_string()).collect();
    let accept: Vec<String> = missing.iter().map(|m| format!("--accept-gap {}", m.range)).collect();
    format!(
        "offsets the ledger never read: {}. Nothing of them can be recorded. Find the messages elsewhere if you can \
         (a backup of the topic, the producer), then `ingest {}` records them as lost and goes on; the billing \
         export of every period open now names them (column gaps)",
        lines.join("; "),
        accept.join(" ")
    )
}

/// A partition this ingest was not assigned, whose end the ledger has not reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Behind {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The ledger's next offset of it (0 when it never read it).
    pub next_offset: i64,
    /// Its end on the brokers (the high watermark).
    pub end: i64,
}

pub(super) fn describe_behind(behind: &[Behind]) -> String {
    let parts: Vec<String> = behind
        .iter()
        .map(|b| format!("{}[{}] (next offset {}, end {})", b.topic, b.partition, b.next_offset, b.end))
        .collect();
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(next: i64, low: i64, high: i64) -> Option<String> {
        MissingOffsets::find("quota.usage", 1, next, low, high).map(|m| m.range.to_string())
    }

    // Proves what is missing, from the ledger's next offset and the partition's ends: nothing while the offset lies
    // within them (at the end included: nothing new yet); the offsets up to the new start when messages were removed
    // before they were read; every offset below the ledger's when the partition ends before it (a recreated topic).
    #[test]
    fn missing_offsets_are_what_the_ledger_can_no_longer_read() {
        assert_eq!(found(3, 0, 10), None);
        assert_eq!(found(10, 0, 10), None, "at the end");
        assert_eq!(found(0, 0, 0), None, "an empty partition");
        assert_eq!(found(3, 5, 12), Some("quota.usage:1:3-4".into()), "removed before read");
        assert_eq!(found(0, 5, 12), Some("quota.usage:1:0-4".into()), "never read, the head expired");
        assert_eq!(found(7, 0, 2), Some("quota.usage:1:0-6".into()), "recreated, shorter");
        assert_eq!(found(7, 0, 0), Some("quota.usage:1:0-6".into()), "recreated, empty");
        let removed = MissingOffsets::find("quota.usage", 1, 3, 5, 12).unwrap();
        assert!(removed.to_string().contains("offsets 3 to 4 were never read"), "{removed}");
        let recreated = MissingOffsets::find("quota.usage", 1, 7, 0, 2).unwrap();
        assert!(recreated.to_string().contains("the partition now ends at 2"), "{recreated}");
    }
}
