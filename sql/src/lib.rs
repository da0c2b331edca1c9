//! Read-only SQL over the ledger's tables (contract §7, `quota-ledger sql`): each table the ledger shows to SQL is
//! registered in DataFusion through a streaming, read-only [`provider`] over the ledger's scans, and a [`session`]
//! answers a query of one ledger or of a directory of shards (their rows joined, each with its shard). The ledger
//! owns its tables and their scans; this crate only plans and runs queries over them. Kept apart from `reports` so
//! that billing and audit, and every server answering them, do not link the query engine.

#![deny(missing_docs)]

pub mod provider;
pub mod session;

pub use session::LedgerSession;

/// A query could not be run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SqlError {
    /// The ledger could not be opened.
    #[error("cannot open the ledger")]
    Open(#[from] ledger::OpenError),
    /// A read of the ledger failed.
    #[error("cannot read the ledger")]
    Read(#[from] ledger::ReadError),
    /// A DataFusion query failed.
    #[error("query failed")]
    Query(#[from] datafusion::error::DataFusionError),
    /// An Arrow batch could not be built.
    #[error("cannot build the Arrow batch")]
    Arrow(#[from] arrow::error::ArrowError),
    /// What the caller does with each batch failed (a batch written to a file, say).
    #[error("cannot use a batch of the answer")]
    Batch(#[source] Box<dyn std::error::Error + Send + Sync + 'static>),
    /// DataFusion's runtime could not start.
    #[error("cannot start the query runtime")]
    Runtime(#[source] std::io::Error),
}
