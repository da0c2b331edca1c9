//! Kafka: the plumbing every Kafka client of the pipeline shares. Producers of other teams write to the topics of
//! contract §2; `ingest` consumes them into the ledger; the outbox publishes what the ledger records back to them. This
//! crate holds what those clients have in common: which topic carries which record type ([`topics`]), every
//! librdkafka setting ([`config`]), creating the topics and the embedded broker ([`admin`]), an idempotent
//! producer ([`producer`]), the ledger's checkpoints on `quota.checkpoints` ([`checkpoints`]), a shard's writes fenced
//! by the brokers ([`fence`]), the routing catalog of a cluster's nodes on `quota.routing` ([`routing`]),
//! librdkafka's log lines through `tracing` ([`log_librdkafka`]) and the rule for saying why a client waits
//! ([`Said`]).
//!
//! ```
//! use kafka::admin::EmbeddedBroker;
//! use kafka::producer::KafkaProducer;
//! use kafka::topics::Topics;
//!
//! let broker = EmbeddedBroker::start(1).unwrap();
//! let topics = Topics::defaults();
//! let usage = topics.topic_of(schemas::EventType::UsageEvent).unwrap();
//! let mut producer = KafkaProducer::new(&broker.bootstrap_servers(), &[]).unwrap();
//! producer.send(usage, "org-42", b"single-object Avro goes here").unwrap();
//! assert_eq!(producer.finish().unwrap().delivered, 1);
//! ```

#![deny(missing_docs)]

pub mod acknowledged;
pub mod admin;
pub mod checkpoints;
pub mod config;
pub mod fence;
pub mod produce;
pub mod producer;
pub mod routing;
pub mod schema_registry;
pub mod topics;
pub mod whole_topic;

use std::time::{Duration, Instant};

use rdkafka::config::RDKafkaLogLevel;

/// How often stderr repeats an unchanged reason to wait ([`Said`]).
pub const SAY_AGAIN_SECS: u64 = 60;

/// A reason to wait, said on stderr when it changes and once a minute while it holds, not at every retry (a
/// line a second for as long as a broker is away): `serve`'s outbox publisher and `ingest` waiting for their
/// brokers, `serve` failing to accept connections.
#[derive(Debug, Default)]
pub struct Said {
    last: Option<(String, Instant)>,
}

impl Said {
    /// Whether to say `reason` now: it differs from the reason said last, or that was a minute ago or more.
    pub fn again(&mut self, reason: &str) -> bool {
        let repeat = Duration::from_secs(SAY_AGAIN_SECS);
        let again = self.last.as_ref().is_none_or(|(text, at)| text != reason || at.elapsed() >= repeat);
        if again {
            self.last = Some((reason.to_string(), Instant::now()));
        }
        again
    }

    /// The wait is over: whether a reason had been said (and so whether to say that it is over).
    pub fn over(&mut self) -> bool {
        self.last.take().is_some()
    }
}

/// librdkafka's log lines through `tracing` (target `librdkafka`), named after the client that wrote them
/// (`client`: `ingest`, `produce`, `outbox`): rdkafka's own forwarding does not say which client of a process a line
/// came from. Called from each client's `ClientContext::log`. The binary prints warnings and errors on stderr.
pub fn log_librdkafka(client: &str, level: RDKafkaLogLevel, facility: &str, message: &str) {
    match level {
        RDKafkaLogLevel::Emerg | RDKafkaLogLevel::Alert | RDKafkaLogLevel::Critical | RDKafkaLogLevel::Error => {
            tracing::error!(target: "librdkafka", facility, "{client}: librdkafka: {message}")
        }
        RDKafkaLogLevel::Warning => tracing::warn!(target: "librdkafka", facility, "{client}: librdkafka: {message}"),
        RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
            tracing::info!(target: "librdkafka", facility, "{client}: librdkafka: {message}")
        }
        RDKafkaLogLevel::Debug => tracing::debug!(target: "librdkafka", facility, "{client}: librdkafka: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_is_said_when_it_changes_and_not_at_every_retry() {
        let mut said = Said::default();
        assert!(!said.over(), "nothing said, nothing over");
        assert!(said.again("all brokers down"));
        assert!(!said.again("all brokers down"), "the same reason again within a minute");
        assert!(said.again("timed out"), "a new reason");
        assert!(said.over(), "a reason had been said");
        assert!(said.again("timed out"), "after the wait was over, the same reason is news");
    }
}
