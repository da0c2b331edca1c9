//! Fencing a shard's writes by the brokers: a node that owns partition p publishes through a
//! transactional producer whose `transactional.id` names the cluster and the partition
//! ([`ShardFence::transactional_id`]). The next owner's [`ShardFence::acquire`] calls `init_transactions` with the same
//! id, which bumps the producer epoch at the transaction coordinator and aborts whatever the previous owner left open;
//! from then on every produce or commit of the previous owner is refused by the brokers (`PRODUCER_FENCED`,
//! `INVALID_PRODUCER_EPOCH`). A node paused past its session (SIGSTOP, then SIGCONT) therefore cannot write for a
//! partition that moved: its next [`ShardFence::publish`] answers [`FenceError::Fenced`], and stays so.
//!
//! This is the fence Kafka Streams' exactly-once uses. It needs brokers with transactions: Apache Kafka and the
//! brokers that implement KIP-98 in full. librdkafka's mock cluster runs transactions but gives every
//! `init_transactions` a new producer id, so it fences nothing; Tansu 0.6.0 bumps the epoch and refuses the old one on
//! produce, but does not serve `EndTxn`, so no transaction commits there ([`FenceError::Unsupported`]).
//!
//! ```
//! use kafka::fence::{FencedRecord, ShardFence};
//!
//! let cluster = rdkafka::mocking::MockCluster::new(1).unwrap();
//! cluster.create_topic("quota.decisions", 2, 1).unwrap();
//! let brokers = cluster.bootstrap_servers();
//! let mut fence = ShardFence::acquire(&brokers, "main", 1, &[]).unwrap();
//! assert_eq!(fence.transactional_id(), "quota-ledger.main.shard-1");
//! let record = FencedRecord { topic: "quota.decisions", key: "org-42", payload: b"single-object Avro" };
//! fence.publish(&[record]).unwrap(); // answers once the brokers acknowledged the record and the commit
//! ```

use std::time::Duration;

use rdkafka::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};

use crate::config::{SHARD_PUBLISH_TIMEOUT_MS, shard_producer};

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
    /// The brokers do not commit transactions (Tansu 0.6.0 does not serve `EndTxn`): final, this fence cannot
    /// publish on these brokers.
    #[error("the brokers do not support transactions, which fencing {transactional_id} needs: {reason}")]
    Unsupported {
        /// The shard's transactional id.
        transactional_id: String,
        /// librdkafka's reason.
        reason: String,
    },
    /// The brokers did not acknowledge in time, or refused this transaction: nothing of it is visible to
    /// `read_committed` readers; the next publish tries again.
    #[error("the brokers did not take the transaction of {transactional_id}: {reason}")]
    Unavailable {
        /// The shard's transactional id.
        transactional_id: String,
        /// The brokers' or librdkafka's reason.
        reason: String,
    },
}

/// librdkafka's log lines of a shard's producer.
struct FenceContext;

impl ClientContext for FenceContext {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        crate::log_librdkafka("shard", level, facility, message);
    }
}

impl ProducerContext for FenceContext {
    type DeliveryOpaque = ();
    // A record's failure fails the transaction's commit, which is what publish answers.
    fn delivery(&self, _: &rdkafka::producer::DeliveryResult<'_>, _: ()) {}
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
    /// Set, for good, once fenced or unsupported: librdkafka's producer is unusable after either.
    failed: Option<FenceError>,
}

impl ShardFence {
    /// The transactional id of partition `partition`'s shard in cluster `cluster` (the consumer group of its nodes):
    /// `quota-ledger.CLUSTER.shard-P`.
    pub fn transactional_id_of(cluster: &str, partition: u32) -> String {
        format!("quota-ledger.{cluster}.shard-{partition}")
    }

    /// Acquires partition `partition`'s shard of `cluster`: `init_transactions`, which fences the previous owner and
    /// aborts its open transaction. `overrides` are the `-X` settings (the transactional id and timeouts stay ours).
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
        let producer: BaseProducer<FenceContext> = shard_producer(brokers, &transactional_id, overrides)
            .create_with_context(FenceContext)
            .map_err(|e| create(e.to_string()))?;
        let fence = ShardFence { producer, transactional_id, partition, failed: None };
        if let Err(error) = fence.producer.init_transactions(Duration::from_millis(SHARD_PUBLISH_TIMEOUT_MS)) {
            return Err(fence.named(classify(&error)));
        }
        log::info!("shard: acquired {} (the previous owner, if any, is fenced)", fence.transactional_id);
        Ok(fence)
    }

    /// This shard's transactional id.
    pub fn transactional_id(&self) -> &str {
        &self.transactional_id
    }

    /// Publishes `records`, in order, to this shard's partition of their topics in one transaction, answering once
    /// the brokers acknowledged every record (acks=all) and the commit. [`FenceError::Fenced`] and
    /// [`FenceError::Unsupported`] are final: every later call answers the same.
    pub fn publish(&mut self, records: &[FencedRecord<'_>]) -> Result<(), FenceError> {
        if let Some(failed) = &self.failed {
            return Err(failed.clone());
        }
        match self.transaction(records) {
            Ok(()) => Ok(()),
            Err(failure) => {
                let error = self.named(failure);
                if !matches!(error, FenceError::Unavailable { .. }) {
                    log::error!("shard: {error}");
                    self.failed = Some(error.clone());
                }
                Err(error)
            }
        }
    }

    /// One transaction: begin, send, commit; aborted when the brokers refused it without fencing.
    fn transaction(&self, records: &[FencedRecord<'_>]) -> Result<(), Failure> {
        let timeout = Duration::from_millis(SHARD_PUBLISH_TIMEOUT_MS);
        self.producer.begin_transaction().map_err(|e| classify(&e))?;
        let sent = records.iter().try_for_each(|record| self.send(record));
        let outcome = sent.and_then(|()| self.producer.commit_transaction(timeout));
        let Err(error) = outcome else { return Ok(()) };
        let failure = classify(&error);
        if let Failure::Unavailable(_) = failure {
            // An abortable error (a record refused, the commit timed out): abort, so that the next publish starts
            // clean. An abort that fails says why the producer cannot go on.
            if let Err(abort) = self.producer.abort_transaction(timeout) {
                return Err(match classify(&abort) {
                    Failure::Unavailable(reason) => Failure::Unavailable(format!("{error}; then the abort: {reason}")),
                    final_failure => final_failure,
                });
            }
        }
        Err(failure)
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
