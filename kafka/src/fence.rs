//! Fencing a shard's writes by the brokers: a node that owns partition p publishes through a transactional producer
//! whose `transactional.id` names the cluster and the partition ([`ShardFence::transactional_id`]). The next owner's
//! [`ShardFence::acquire`] calls `init_transactions` with the same id, which bumps the producer epoch at the
//! transaction coordinator and ends whatever the previous owner left open; from then on the brokers refuse every
//! produce (and commit) of the previous owner (`PRODUCER_FENCED`, `INVALID_PRODUCER_EPOCH`). A node paused past its
//! session (SIGSTOP, then SIGCONT) therefore cannot write for a partition that moved: its next
//! [`ShardFence::publish`] answers [`FenceError::Fenced`], and stays so.
//!
//! How a publish runs depends on what the brokers serve ([`FenceMode`], learned at acquire from the API versions
//! the brokers announce, [`ShardFence::mode`]):
//!
//! - [`FenceMode::Transactions`] (Apache Kafka, and every broker that serves `EndTxn`): each publish is a
//!   transaction of its own, begun, produced, flushed and committed before it answers; this is Kafka Streams'
//!   exactly-once fence. A `read_committed` reader (ingest) sees a group whole or not at all, and the takeover
//!   aborts what the previous owner produced without committing.
//! - [`FenceMode::EpochOnly`] (Tansu 0.6.0, which bumps the epoch at `init_transactions` and refuses the old epoch on
//!   produce, but does not serve `EndTxn`): the transaction begun at acquire stays open, each publish is produced in
//!   it and answers once the brokers acknowledged every record. The fence is the epoch check on produce. Such
//!   brokers hold no reader back at an open transaction, so an acknowledged record is readable at once, also by
//!   `read_committed` readers, and stays readable after the next owner's takeover. A group is not atomic there:
//!   of a publish that failed, what was acknowledged before the failure is readable; and since no transaction can
//!   be aborted, a publish that failed leaves the producer unusable ([`FenceError::Unrecoverable`]).
//!
//! librdkafka's mock cluster serves `EndTxn` but gives every `init_transactions` a new producer id, so it fences
//! nothing (the tests inject its refusals).
//!
//! ```
//! use kafka::fence::{FenceMode, FencedRecord, ShardFence};
//!
//! let cluster = rdkafka::mocking::MockCluster::new(1).unwrap();
//! cluster.create_topic("quota.decisions", 2, 1).unwrap();
//! let brokers = cluster.bootstrap_servers();
//! let mut fence = ShardFence::acquire(&brokers, "main", 1, &[]).unwrap();
//! assert_eq!(fence.transactional_id(), "quota-ledger.main.shard-1");
//! assert_eq!(fence.mode(), FenceMode::Transactions);
//! let record = FencedRecord { topic: "quota.decisions", key: "org-42", payload: b"single-object Avro" };
//! fence.publish(&[record]).unwrap(); // answers once the brokers acknowledged the record and the commit
//! ```

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};

use crate::config::{SHARD_PUBLISH_TIMEOUT_MS, api_versions_reader, shard_producer};

/// The Kafka protocol's key of `EndTxn`, the request that commits or aborts a transaction.
const END_TXN_API_KEY: i16 = 26;

/// One record to publish in a shard's transaction: it goes to the shard's partition of `topic`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FencedRecord<'a> {
    /// The topic.
    pub topic: &'a str,
    /// The key: the tenant (contract §2).
    pub key: &'a str,
    /// The value: single-object Avro.
    pub payload: &'a [u8],
}

/// How the brokers hold a shard's fence, learned at [`ShardFence::acquire`] from whether the brokers announce
/// `EndTxn` (see the module).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceMode {
    /// The brokers commit transactions: each publish is one transaction, committed before it answers. The previous
    /// owner's produce and commit are refused after a takeover, which aborts its open transaction; `read_committed`
    /// readers see only committed groups, each whole.
    Transactions,
    /// The brokers check the producer epoch on produce but do not end transactions (no `EndTxn`, as Tansu 0.6.0):
    /// one transaction stays open from acquire on, and a publish answers once its records are acknowledged. The
    /// previous owner's produce is refused after a takeover; every acknowledged record is readable at once and stays
    /// so. A group is not atomic, and a publish that failed leaves the fence unusable.
    EpochOnly,
}

impl FenceMode {
    /// The mode's name in logs and documentation: `transactions` or `epoch-only`.
    pub fn name(self) -> &'static str {
        match self {
            FenceMode::Transactions => "transactions",
            FenceMode::EpochOnly => "epoch-only",
        }
    }
}

/// A shard's publish (or its acquisition) failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FenceError {
    /// librdkafka refused the producer's configuration (a bad `-X` setting, say).
    #[error("cannot create the producer of {transactional_id} for {brokers}: {reason}")]
    Create {
        /// `bootstrap.servers`.
        brokers: String,
        /// The shard's transactional id.
        transactional_id: String,
        /// librdkafka's reason.
        reason: String,
    },
    /// Another owner acquired the shard since (the brokers refused this producer's epoch): final, nothing this
    /// fence publishes from now on reaches the topics.
    #[error("{transactional_id} was acquired by another owner; this one is fenced: {reason}")]
    Fenced {
        /// The shard's transactional id.
        transactional_id: String,
        /// The brokers' or librdkafka's reason.
        reason: String,
    },
    /// The brokers do not run transactions (no `InitProducerId`, or `EndTxn` missing where it was announced):
    /// final, this fence cannot publish on these brokers.
    #[error("the brokers do not support transactions, which fencing {transactional_id} needs: {reason}")]
    Unsupported {
        /// The shard's transactional id.
        transactional_id: String,
        /// librdkafka's reason.
        reason: String,
    },
    /// A publish failed in [`FenceMode::EpochOnly`]: the brokers cannot abort the transaction it failed in, so
    /// librdkafka's producer cannot publish again. Final; the records of that publish acknowledged before the failure
    /// are readable. The shard is written again after a new [`ShardFence::acquire`].
    #[error(
        "a publish of {transactional_id} failed and the brokers cannot abort its transaction (no EndTxn), so this \
         fence cannot publish again: {reason}"
    )]
    Unrecoverable {
        /// The shard's transactional id.
        transactional_id: String,
        /// The brokers' or librdkafka's reason.
        reason: String,
    },
    /// The brokers did not answer in time, or refused this transaction: nothing of it is visible to `read_committed`
    /// readers; the next publish tries again. (An acquire that failed so may be tried again.)
    #[error("the brokers did not take the transaction of {transactional_id}: {reason}")]
    Unavailable {
        /// The shard's transactional id.
        transactional_id: String,
        /// The brokers' or librdkafka's reason.
        reason: String,
    },
}

/// librdkafka's log lines and delivery reports of a shard's producer.
#[derive(Default)]
struct FenceContext {
    /// The first record of the current publish the brokers did not acknowledge.
    undelivered: Mutex<Option<KafkaError>>,
}

impl ClientContext for FenceContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        crate::log_librdkafka("shard", level, facility, message);
    }
}

impl ProducerContext for FenceContext {
    type DeliveryOpaque = ();
    fn delivery(&self, delivered: &DeliveryResult<'_>, _: ()) {
        if let Err((error, _)) = delivered {
            self.undelivered.lock().expect("never poisoned").get_or_insert_with(|| error.clone());
        }
    }
}

/// What became of one attempt, before it is named with the shard.
enum Failure {
    Fenced(String),
    Unsupported(String),
    Unavailable(String),
}

/// The broker-enforced right to write partition `p`'s records: a transactional producer whose id names the shard.
pub struct ShardFence {
    producer: BaseProducer<FenceContext>,
    transactional_id: String,
    partition: i32,
    mode: FenceMode,
    /// Set, for good, once fenced, unsupported or unrecoverable: librdkafka's producer is unusable after each.
    failed: Option<FenceError>,
}

impl ShardFence {
    /// The transactional id of partition `partition`'s shard in cluster `cluster` (the consumer group of its nodes):
    /// `quota-ledger.CLUSTER.shard-P`.
    pub fn transactional_id_of(cluster: &str, partition: u32) -> String {
        format!("quota-ledger.{cluster}.shard-{partition}")
    }

    /// Acquires partition `partition`'s shard of `cluster`: learns the brokers' [`FenceMode`], then
    /// `init_transactions`, which fences the previous owner and ends its open transaction (and in
    /// [`FenceMode::EpochOnly`] begins the transaction every publish goes into). `overrides` are the `-X` settings
    /// (the transactional id and timeouts stay ours).
    pub fn acquire(
        brokers: &str,
        cluster: &str,
        partition: u32,
        overrides: &[(String, String)],
    ) -> Result<ShardFence, FenceError> {
        let transactional_id = ShardFence::transactional_id_of(cluster, partition);
        let create = |reason: String| FenceError::Create {
            brokers: brokers.to_string(),
            transactional_id: transactional_id.clone(),
            reason,
        };
        let partition = i32::try_from(partition).map_err(|_| create(format!("partition {partition} out of range")))?;
        let mode = fence_mode(brokers, overrides).map_err(|failure| match failure {
            ModeFailure::Create(reason) => create(reason),
            ModeFailure::Unavailable(reason) => {
                FenceError::Unavailable { transactional_id: transactional_id.clone(), reason }
            }
        })?;
        let producer: BaseProducer<FenceContext> = shard_producer(brokers, &transactional_id, overrides)
            .create_with_context(FenceContext::default())
            .map_err(|e| create(e.to_string()))?;
        let fence = ShardFence { producer, transactional_id, partition, mode, failed: None };
        if let Err(error) = fence.producer.init_transactions(Duration::from_millis(SHARD_PUBLISH_TIMEOUT_MS)) {
            return Err(fence.named(classify(&error)));
        }
        if mode == FenceMode::EpochOnly
            && let Err(error) = fence.producer.begin_transaction()
        {
            return Err(fence.named(classify(&error)));
        }
        tracing::info!(
            transactional_id = %fence.transactional_id,
            mode = mode.name(),
            "shard: fence acquired (the previous owner, if any, is fenced)"
        );
        Ok(fence)
    }

    /// This shard's transactional id.
    pub fn transactional_id(&self) -> &str {
        &self.transactional_id
    }

    /// How the brokers hold this fence.
    pub fn mode(&self) -> FenceMode {
        self.mode
    }

    /// Publishes `records`, in order, to this shard's partition of their topics, answering once the brokers
    /// acknowledged every record (acks=all) and, in [`FenceMode::Transactions`], committed them as one transaction.
    /// [`FenceError::Fenced`], [`FenceError::Unsupported`] and [`FenceError::Unrecoverable`] are final: every later
    /// call answers the same.
    pub fn publish(&mut self, records: &[FencedRecord<'_>]) -> Result<(), FenceError> {
        if let Some(failed) = &self.failed {
            return Err(failed.clone());
        }
        let outcome = match self.mode {
            FenceMode::Transactions => self.transaction(records),
            FenceMode::EpochOnly => self.acknowledged(records, Instant::now() + publish_timeout()),
        };
        let Err(failure) = outcome else { return Ok(()) };
        let error = match (self.mode, failure) {
            // No transaction can be aborted on these brokers, and librdkafka takes no record after a failed one
            // until it is: this producer is done.
            (FenceMode::EpochOnly, Failure::Unavailable(reason)) => {
                FenceError::Unrecoverable { transactional_id: self.transactional_id.clone(), reason }
            }
            (_, failure) => self.named(failure),
        };
        if !matches!(error, FenceError::Unavailable { .. }) {
            tracing::error!(%error, "shard: fencing failed");
            self.failed = Some(error.clone());
        }
        Err(error)
    }

    /// One transaction: begin, send and flush, commit; aborted when the brokers refused it without fencing.
    fn transaction(&self, records: &[FencedRecord<'_>]) -> Result<(), Failure> {
        let deadline = Instant::now() + publish_timeout();
        self.producer.begin_transaction().map_err(|e| classify(&e))?;
        let outcome = self.acknowledged(records, deadline).and_then(|()| {
            let left = deadline.saturating_duration_since(Instant::now());
            self.producer.commit_transaction(left).map_err(|e| classify(&e))
        });
        let Err(failure) = outcome else { return Ok(()) };
        if let Failure::Unavailable(reason) = failure {
            // An abortable error (a record refused, the commit timed out): abort, so that the next publish starts
            // clean. An abort that fails says why the producer cannot go on.
            if let Err(abort) = self.producer.abort_transaction(publish_timeout()) {
                return Err(match classify(&abort) {
                    Failure::Unavailable(then) => Failure::Unavailable(format!("{reason}; then the abort: {then}")),
                    final_failure => final_failure,
                });
            }
            return Err(Failure::Unavailable(reason));
        }
        Err(failure)
    }

    /// Sends `records` and waits until the brokers acknowledged every one of them, or `deadline`.
    fn acknowledged(&self, records: &[FencedRecord<'_>], deadline: Instant) -> Result<(), Failure> {
        self.producer.context().undelivered.lock().expect("never poisoned").take();
        let sent = records.iter().try_for_each(|record| self.send(record));
        // Flushed even when a send was refused: what was queued before it gets its answer here, not in a later
        // publish.
        let flushed = self.producer.flush(deadline.saturating_duration_since(Instant::now()));
        sent.map_err(|e| classify(&e))?;
        if let Some(undelivered) = self.producer.context().undelivered.lock().expect("never poisoned").take() {
            return Err(classify(&undelivered));
        }
        flushed.map_err(|e| Failure::Unavailable(format!("not every record was acknowledged in time: {e}")))
    }

    /// Queues one record, polling while librdkafka's queue is full.
    fn send(&self, record: &FencedRecord<'_>) -> Result<(), KafkaError> {
        let mut queued = BaseRecord::to(record.topic).partition(self.partition).key(record.key).payload(record.payload);
        loop {
            match self.producer.send(queued) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), returned)) => {
                    queued = returned;
                    self.producer.poll(Duration::from_millis(10));
                }
                Err((error, _)) => return Err(error),
            }
        }
    }

    fn named(&self, failure: Failure) -> FenceError {
        let transactional_id = self.transactional_id.clone();
        match failure {
            Failure::Fenced(reason) => FenceError::Fenced { transactional_id, reason },
            Failure::Unsupported(reason) => FenceError::Unsupported { transactional_id, reason },
            Failure::Unavailable(reason) => FenceError::Unavailable { transactional_id, reason },
        }
    }
}

fn publish_timeout() -> Duration {
    Duration::from_millis(SHARD_PUBLISH_TIMEOUT_MS)
}

/// Why the brokers' mode could not be learned.
enum ModeFailure {
    Create(String),
    Unavailable(String),
}

/// What the brokers announced to the client that reads their API versions: librdkafka logs each broker's list at
/// debug level (`debug=feature`, facility `APIVERSION`), a header line then one line per API, and offers them no
/// other way.
#[derive(Default)]
struct ApiVersionsContext {
    announced: Mutex<Announced>,
}

#[derive(Debug, Default)]
struct Announced {
    /// Lists seen, one per broker connection.
    lists: u32,
    /// Of them, those that hold `EndTxn`.
    with_end_txn: u32,
}

impl ClientContext for ApiVersionsContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        if !matches!(level, RDKafkaLogLevel::Debug) {
            crate::log_librdkafka("shard", level, facility, message);
            return;
        }
        if facility != "APIVERSION" {
            return;
        }
        let mut announced = self.announced.lock().expect("never poisoned");
        if message.ends_with("Broker API support:") {
            announced.lists += 1;
        } else if message.contains("ApiKey ") && message.contains(&format!(" ({END_TXN_API_KEY}) Versions ")) {
            announced.with_end_txn += 1;
        }
    }
}

impl ProducerContext for ApiVersionsContext {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &DeliveryResult<'_>, _: ()) {}
}

/// [`FenceMode::EpochOnly`] when the brokers announce no `EndTxn`, asked by a client of their own that connects,
/// reads the metadata and goes. A committed transaction is the stronger guarantee and the only one that is right
/// on Apache Kafka, so it is the answer whenever the announcement could not be read (`-X api.version.request=false`,
/// say), with a warning.
fn fence_mode(brokers: &str, overrides: &[(String, String)]) -> Result<FenceMode, ModeFailure> {
    let reader: BaseProducer<ApiVersionsContext> = api_versions_reader(brokers, overrides)
        .create_with_context(ApiVersionsContext::default())
        .map_err(|e| ModeFailure::Create(e.to_string()))?;
    // A connection's API versions are read before any other request goes over it, so they are in the log queue
    // once the metadata arrived; the poll serves that queue.
    let metadata = reader.client().fetch_metadata(None, publish_timeout());
    reader.poll(Duration::from_millis(100));
    let announced = std::mem::take(&mut *reader.context().announced.lock().expect("never poisoned"));
    match (announced, metadata) {
        (Announced { lists: 0, .. }, Err(error)) => {
            Err(ModeFailure::Unavailable(format!("the brokers did not answer for their API versions: {error}")))
        }
        (Announced { lists: 0, .. }, Ok(_)) => {
            tracing::warn!(
                "shard: the brokers' API versions could not be read; fencing with committed transactions, which \
                 brokers without EndTxn refuse"
            );
            Ok(FenceMode::Transactions)
        }
        (Announced { lists, with_end_txn }, _) if with_end_txn >= lists => Ok(FenceMode::Transactions),
        _ => Ok(FenceMode::EpochOnly),
    }
}

/// Which of fenced, unsupported or worth another try an error of librdkafka's transactional API is.
fn classify(error: &KafkaError) -> Failure {
    let reason = error.to_string();
    let code = error.rdkafka_error_code();
    let fatal = matches!(error, KafkaError::Transaction(e) if e.is_fatal());
    match code {
        Some(
            RDKafkaErrorCode::ProducerFenced
            | RDKafkaErrorCode::InvalidProducerEpoch
            | RDKafkaErrorCode::Fenced
            | RDKafkaErrorCode::InvalidProducerIdMapping
            | RDKafkaErrorCode::TransactionalIdAuthorizationFailed,
        ) => Failure::Fenced(reason),
        Some(RDKafkaErrorCode::UnsupportedFeature | RDKafkaErrorCode::UnsupportedVersion) => {
            Failure::Unsupported(reason)
        }
        // librdkafka's producer is unusable after a fatal error: whoever owns the shard next acquires it afresh.
        _ if fatal => Failure::Fenced(reason),
        _ => Failure::Unavailable(reason),
    }
}
