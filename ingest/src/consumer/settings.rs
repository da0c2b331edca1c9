//! Where and how to consume: [`KafkaIngestSettings`], its defaults and the bounds of a run `until_caught_up`, and the
//! consumer group a ledger or a directory of shards gets when given none.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use kafka::topics::Topics;
use ledger::GapRange;

use crate::bounds::BatchBounds;
use crate::listeners::{LagListener, PartitionListener, Standing};

/// Longest a message waits in a partial batch before it is appended: bounds the delay a quiet topic adds.
pub const BATCH_WAIT_MS: u64 = 500;

/// `--until-caught-up` gives up when the group assigns no partition for this long.
pub const ASSIGNMENT_WAIT_MS: u64 = 60_000;

/// `--until-caught-up` gives up when the brokers stay away this long. A running ingest waits for them as long as
/// it takes: librdkafka reconnects on its own.
pub const BROKERS_WAIT_MS: u64 = 60_000;

/// `--until-caught-up` gives up when partitions it was not assigned (other members of the group hold them) are still
/// behind this long after it caught up with its own. Longer than the session timeout (10 s), so that the partitions
/// of a member that died have had the time to come to this one.
pub const UNASSIGNED_WAIT_MS: u64 = 15_000;

/// Where and how to consume.
#[derive(Debug, Clone)]
pub struct KafkaIngestSettings {
    /// `bootstrap.servers`.
    pub brokers: String,
    /// `group.id`.
    pub group: String,
    /// The topics consumed, and the record type each carries.
    pub topics: Topics,
    /// Exit once every assigned partition is at its high watermark (a nightly job), instead of running on.
    pub until_caught_up: bool,
    /// Most messages and bytes in one ledger append ([`BatchBounds::kafka`] by default).
    pub batch: BatchBounds,
    /// Longest a message waits in a partial batch ([`BATCH_WAIT_MS`] by default).
    pub batch_wait_ms: u64,
    /// librdkafka settings given with `-X key=value` (SASL, TLS, tuning); applied last, so they win.
    pub overrides: Vec<(String, String)>,
    /// Offsets the ledger never read that the operator accepts as lost (`--accept-gap`): each must be exactly a
    /// range ingest names when it stops ([`KafkaIngestError::OffsetsNeverRead`](super::KafkaIngestError::OffsetsNeverRead)); recorded before consuming.
    pub accept_gaps: Vec<GapRange>,
    /// Publish the ledger's head to `quota.checkpoints` as it moves ([`kafka::checkpoints`]).
    pub publish_checkpoints: bool,
    /// Told when a shard's partition is assigned (its shard open) and before it is revoked (its shard still open): a
    /// `node` starts and stops serving the partition. Shards only.
    pub listener: Option<Arc<dyn PartitionListener>>,
    /// Told each assigned partition's lag every [`LAG_EVERY_MS`] (librdkafka's statistics, turned on for it).
    pub lag_listener: Option<Arc<dyn LagListener>>,
    /// Consume the partitions this names, by assignment, without joining the group (a node's standby shards). Shards
    /// only.
    pub standing: Option<Arc<dyn Standing>>,
    /// Once set, the consumer leaves the group at its next turn and stays out, holding no partition (a node drained
    /// before maintenance): the group gives its partitions to the other members at once, with no session timeout to
    /// wait, and ingest runs on without them until stopped.
    pub leave_group: Option<Arc<AtomicBool>>,
}

/// How often an ingest with [`KafkaIngestSettings::standing`] asks which partitions to hold.
pub const STANDING_ASK_MS: u64 = 500;

/// How often a [`KafkaIngestSettings::lag_listener`] is told the lag (`statistics.interval.ms`).
pub const LAG_EVERY_MS: u64 = 1_000;

/// The consumer group of a ledger that is given none: its own, named after its id, so that two ledgers consuming
/// the same brokers never split the partitions between them (each would then hold a part of the events, and both
/// would look complete).
pub fn default_group(ledger_id: &str) -> String {
    format!("quota-ledger-{ledger_id}")
}

/// The consumer group of a directory of shards given none: named after the directory's real path (created if need
/// be), so that two directories on one machine never split the partitions between them, and one directory gets the
/// same group at every start.
pub fn default_shards_group(dir: &std::path::Path) -> std::io::Result<String> {
    use sha2::Digest;
    std::fs::create_dir_all(dir)?;
    let real = std::fs::canonicalize(dir)?;
    let digest = sha2::Sha256::digest(real.as_os_str().as_encoded_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("quota-ledger-shards-{hex}"))
}

impl KafkaIngestSettings {
    /// Consuming contract §2's six input topics from `brokers` in group `group`, running on, with the default batches.
    pub fn new(brokers: impl Into<String>, group: impl Into<String>) -> KafkaIngestSettings {
        KafkaIngestSettings {
            brokers: brokers.into(),
            group: group.into(),
            topics: Topics::defaults(),
            until_caught_up: false,
            batch: BatchBounds::kafka(),
            batch_wait_ms: BATCH_WAIT_MS,
            overrides: Vec::new(),
            accept_gaps: Vec::new(),
            publish_checkpoints: true,
            listener: None,
            lag_listener: None,
            standing: None,
            leave_group: None,
        }
    }
}
