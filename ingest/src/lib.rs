//! Ingest: getting events into the ledger, exactly once. From Kafka ([`kafka::ingest_kafka`]: a consumer
//! group whose offsets live in the ledger) and from Avro object container files ([`file::ingest_file`]); plus
//! the producing side used by other teams' tests and the demo ([`produce`], [`generate`]).
//!
//! ```
//! use ingest::file::{ingest_file, FILE_BATCH_EVENTS};
//! # let dir = tempfile::tempdir().unwrap();
//! # let path = dir.path().join("empty.avro");
//! # let schema = &schemas::Catalog::builtin().current(schemas::EventType::UsageEvent).schema;
//! # let writer = apache_avro::Writer::new(schema, std::fs::File::create(&path).unwrap()).unwrap();
//! # writer.into_inner().unwrap();
//! let mut ledger = ledger::Ledger::open(dir.path().join("ledger.db")).unwrap();
//! let report = ingest_file(&mut ledger, &path, FILE_BATCH_EVENTS, |_| {}).unwrap();
//! assert_eq!(report.records, 0);
//! ```

pub mod admin;
pub mod file;
pub mod generate;
pub mod kafka;
pub mod outbox;
pub mod produce;
pub mod topics;

use std::time::{Duration, Instant};

use rdkafka::config::RDKafkaLogLevel;

/// How often stderr repeats an unchanged reason to wait ([`Said`]).
pub const SAY_AGAIN_SECS: u64 = 60;

/// A reason to wait, said on stderr when it changes and once a minute while it holds, not at every retry (a
/// line a second for as long as a broker is away): `serve`'s outbox publisher and `ingest` waiting for their
/// brokers.
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

/// librdkafka's log lines through the `log` crate (target `librdkafka`), named after the client that wrote them:
/// rdkafka's own forwarding does not say which client of a process a line came from. The binary prints warnings
/// and errors on stderr.
pub(crate) fn log_librdkafka(client: &str, level: RDKafkaLogLevel, facility: &str, message: &str) {
    let level = match level {
        RDKafkaLogLevel::Emerg | RDKafkaLogLevel::Alert | RDKafkaLogLevel::Critical | RDKafkaLogLevel::Error => {
            log::Level::Error
        }
        RDKafkaLogLevel::Warning => log::Level::Warn,
        RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => log::Level::Info,
        RDKafkaLogLevel::Debug => log::Level::Debug,
    };
    log::log!(target: "librdkafka", level, "{client}: librdkafka {facility}: {message}");
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
