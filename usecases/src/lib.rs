//! The product's use cases, each one function with a typed input and a typed report, above the stages (`ledger`,
//! `reconcile`, `reports`, `outbox`, `kafka`) and below every entry point: the binary, `serve`, `node` and the demo
//! call these and only parse, print or answer what they return.
//!
//! - [`Store`]: where the ledger is, one file of every partition or a directory of shards; [`cluster`]: a running
//!   cluster, each shard asked of the owner the routing catalog names.
//! - [`close`]: close a billing period (the refusals, unended billing cycles, late usage carried, the commit totals'
//!   catch-up) and [`billing`]: a period's export of a store or a cluster, with what a partly closed set means.
//! - [`run`]: the nightly reconcile run (lock, plan, apply, publisher lock, publish, the shards' union) and its
//!   report in words, JSON and figures.
//! - [`change`]: a policy or grant changed, judged against what the ledgers hold, recorded or produced; the policies
//!   and grants recorded, in the rows `policy list`, `policy history` and `grant list` show.
//! - [`status`]: what a store holds.
//! - [`audit`]: support's answers, why a request was decided so and a tenant's timeline.
//! - [`verify`], [`backup`]: the chain checked, with checkpoints and heads; copies taken and restored.
//! - [`shard`]: what a server answers for each shard it holds, the parts a cluster read joins.
//! - [`ingest`]: a container file loaded into a ledger or a directory of shards; the Kafka consumer of a ledger.
//! - [`quarantine`]: quarantined messages listed and replayed.
//! - [`quota`]: a tenant's remaining quota per policy, as the hook counts it.
//! - [`files`]: an output written whole or not at all.
//! - [`meter`]: a meter version (how a metric aggregates) judged and recorded.
//! - [`webhook`]: the endpoints a tenant's alerts are delivered to, registered, removed and listed; the delivery log.

#![deny(missing_docs)]

pub mod audit;
pub mod backup;
pub mod billing;
pub mod catalog;
pub mod change;
pub mod close;
pub mod cluster;
pub mod correction;
pub mod files;
pub mod ingest;
pub mod meter;
pub mod plans;
pub mod quarantine;
pub mod quota;
pub mod run;
pub mod shard;
pub mod status;
pub mod store;
pub mod usage;
pub mod verify;
pub mod webhook;

pub use store::Store;

/// A use case failed: what it was doing and why (its cause, when another error is the reason), or a stage's error as
/// the stage said it. Printed alone it says what failed; its causes follow through [`std::error::Error::source`], as
/// `ledger::causes` prints them.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// What failed, in the use case's words.
    #[error("{what}")]
    Failed {
        /// What failed.
        what: String,
        /// Why, when another error is the reason.
        #[source]
        cause: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    },
    /// A stage's error, in its own words.
    #[error(transparent)]
    Stage(Box<dyn std::error::Error + Send + Sync + 'static>),
}

impl Error {
    /// A refusal, or a failure with no cause beyond these words.
    pub fn new(what: impl Into<String>) -> Error {
        Error::Failed { what: what.into(), cause: None }
    }

    /// `cause`, said in the words of what it stopped.
    pub fn caused(
        what: impl Into<String>,
        cause: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Error {
        Error::Failed { what: what.into(), cause: Some(cause.into()) }
    }
}

/// Refuses with these words: `Err(Error::new(format!(...)))`.
macro_rules! refuse {
    ($($words:tt)*) => {
        return Err($crate::Error::new(format!($($words)*)))
    };
}
pub(crate) use refuse;

/// What a use case answers.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Says what a failure stopped, as `anyhow::Context` does, for the errors of the stages a use case calls.
pub trait Context<T> {
    /// The error, its cause under these words.
    fn context(self, what: impl Into<String>) -> Result<T>;
    /// The same, the words made only on failure.
    fn with_context<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T>;
}

impl<T, E: Into<Box<dyn std::error::Error + Send + Sync + 'static>>> Context<T> for std::result::Result<T, E> {
    fn context(self, what: impl Into<String>) -> Result<T> {
        self.map_err(|cause| Error::caused(what, cause))
    }

    fn with_context<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T> {
        self.map_err(|cause| Error::caused(what(), cause))
    }
}

impl<T> Context<T> for Option<T> {
    fn context(self, what: impl Into<String>) -> Result<T> {
        self.ok_or_else(|| Error::new(what))
    }

    fn with_context<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T> {
        self.ok_or_else(|| Error::new(what()))
    }
}

/// The errors of the stages a use case passes on as they are.
macro_rules! from_stages {
    ($($error:ty),* $(,)?) => {$(
        impl From<$error> for Error {
            fn from(error: $error) -> Error {
                Error::Stage(Box::new(error))
            }
        }
    )*};
}

from_stages!(
    std::io::Error,
    serde_json::Error,
    ledger::OpenError,
    ledger::AppendError,
    ledger::ReadError,
    ledger::CloseError,
    ledger::ReplayError,
    kafka::topics::TopicsError,
    hook::HookError,
    ::ingest::file::FileIngestError,
    ::ingest::consumer::KafkaIngestError,
    ledger::OutboxError,
    ledger::LockError,
    ledger::TotalsError,
    ledger::backup::BackupError,
    ledger::shards::ShardError,
    reconcile::ReconcileError,
    reports::ReportError,
    control::Refused,
    control::RecordError,
    kafka::produce::ProduceEventsError,
    outbox::OutboxPublishError,
    kafka::checkpoints::CheckpointReadError,
    kafka::routing::RoutingError,
    client::ClientError,
    trust::TrustError,
);
