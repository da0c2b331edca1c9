//! Brokers that stay away: which consumer errors librdkafka rides out, and ingest waiting for the brokers to answer
//! again (saying so, and, with `until_caught_up`, giving up after a while).

use std::time::{Duration, Instant};

use kafka::topics::missing_topics;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use super::error::KafkaIngestError;
use super::rebalance::IngestContext;
use super::settings::{BROKERS_WAIT_MS, KafkaIngestSettings};

/// While the brokers are away, how often ingest asks them for the topics, to learn that they answer again.
pub(super) const ASK_EVERY_MS: u64 = 1_000;

/// What a consumer's error means: `Ok` with what to tell the user when librdkafka rides it out ([`transient`]),
/// or why ingest stops. A subscribed topic the brokers lack is named: librdkafka says "Unknown topic or
/// partition" without its name.
pub(super) fn consume_error(
    consumer: &BaseConsumer<IngestContext>,
    settings: &KafkaIngestSettings,
    error: KafkaError,
) -> Result<String, KafkaIngestError> {
    // Fatal errors (`MessageConsumptionFatal`) and those of a message stop ingest whatever their code.
    let KafkaError::MessageConsumption(code) = error else { return Err(KafkaIngestError::Consume(error)) };
    if code == RDKafkaErrorCode::UnknownTopicOrPartition {
        return match missing_topics(consumer.client(), settings.topics.names()) {
            Some(missing) if !missing.is_empty() => {
                Err(KafkaIngestError::MissingTopics { missing, brokers: settings.brokers.clone() })
            }
            Some(_) => Err(KafkaIngestError::Consume(error)),
            // No broker answered the question: the brokers are away, not the topics.
            None => Ok(code.to_string()),
        };
    }
    if transient(code) { Ok(code.to_string()) } else { Err(KafkaIngestError::Consume(error)) }
}

/// The brokers away, or a partition's leader or the group's coordinator moving: librdkafka reconnects and retries
/// on its own, so ingest waits rather than stops: a broker restart would otherwise stop a running ingest with "All
/// broker connections are down".
pub(super) fn transient(code: RDKafkaErrorCode) -> bool {
    use RDKafkaErrorCode as C;
    matches!(
        code,
        C::BrokerTransportFailure
            | C::AllBrokersDown
            | C::Resolve
            | C::OperationTimedOut
            | C::RequestTimedOut
            | C::NetworkException
            | C::BrokerNotAvailable
            | C::LeaderNotAvailable
            | C::NotLeaderForPartition
            | C::CoordinatorLoadInProgress
            | C::CoordinatorNotAvailable
            | C::NotCoordinator
    )
}

/// Asks the brokers for the subscribed topics: `true` when they answer and have them all; `false` when none
/// answered, which `waiting` notes; the missing topics' error when some are missing.
pub(super) fn ask_for_topics(
    consumer: &BaseConsumer<IngestContext>,
    settings: &KafkaIngestSettings,
    waiting: &mut Waiting,
) -> Result<bool, KafkaIngestError> {
    match missing_topics(consumer.client(), settings.topics.names()) {
        None => {
            waiting.saw(&settings.brokers, "no answer to a request for the topics".to_string());
            Ok(false)
        }
        Some(missing) if !missing.is_empty() => {
            Err(KafkaIngestError::MissingTopics { missing, brokers: settings.brokers.clone() })
        }
        Some(_) => Ok(true),
    }
}

/// Ingest waiting for its brokers: since when, why, and what stderr said of it.
#[derive(Debug, Default)]
pub(super) struct Waiting {
    pub(super) since: Option<Instant>,
    reason: String,
    said: kafka::Said,
    /// When the brokers were last asked whether they answer again.
    asked: Option<Instant>,
}

impl Waiting {
    /// Whether to ask the brokers again whether they answer: once a second while waiting. A message is no sign
    /// that they do: librdkafka hands out what it fetched before they went away (taken as one, ingest would say
    /// "answer again" there, and "waiting" half a second later).
    pub(super) fn ask_now(&mut self) -> bool {
        let due = self.since.is_some() && self.asked.is_none_or(|t| t.elapsed() >= Duration::from_millis(ASK_EVERY_MS));
        if due {
            self.asked = Some(Instant::now());
        }
        due
    }

    /// Another sign that the brokers are away; says so on stderr when the wait begins, and once a minute (the
    /// reason itself alternates: librdkafka reports each failed connection, then that all brokers are down).
    pub(super) fn saw(&mut self, brokers: &str, reason: String) {
        let since = *self.since.get_or_insert_with(Instant::now);
        if self.said.again(brokers) {
            tracing::warn!(
                %brokers,
                seconds = since.elapsed().as_secs(),
                %reason,
                "ingest: waiting for the brokers; librdkafka reconnects on its own"
            );
        }
        self.reason = reason;
    }

    /// The brokers answered.
    pub(super) fn over(&mut self, brokers: &str) {
        if let Some(since) = self.since.take()
            && self.said.over()
        {
            tracing::info!(
                %brokers,
                seconds = %format_args!("{:.1}", since.elapsed().as_secs_f64()),
                "ingest: the brokers answer again"
            );
        }
    }

    /// Gives up once the brokers have been away for [`BROKERS_WAIT_MS`].
    pub(super) fn give_up(&self, brokers: &str) -> Result<(), KafkaIngestError> {
        match self.since {
            Some(since) if since.elapsed() >= Duration::from_millis(BROKERS_WAIT_MS) => {
                Err(KafkaIngestError::Unreachable {
                    brokers: brokers.to_string(),
                    waited_ms: BROKERS_WAIT_MS,
                    last: self.reason.clone(),
                })
            }
            _ => Ok(()),
        }
    }
}
