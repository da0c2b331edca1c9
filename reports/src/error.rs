//! Errors of the reports: reading the ledger, querying it, writing an export.

/// A report could not be computed or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReportError {
    #[error("cannot open the ledger")]
    Open(#[from] ledger::OpenError),
    #[error("cannot read the ledger")]
    Read(#[from] ledger::ReadError),
    #[error("cannot bring the commit totals up to date")]
    Totals(#[from] ledger::TotalsError),
    #[error("cannot compute the export")]
    Preview(#[from] ledger::PreviewError),
    #[error("query failed")]
    Query(#[from] datafusion::error::DataFusionError),
    #[error("cannot build the Arrow batch")]
    Arrow(#[from] arrow::error::ArrowError),
    #[error("cannot write Parquet")]
    Parquet(#[from] parquet::errors::ParquetError),
    #[error("cannot start the query runtime")]
    Runtime(#[source] std::io::Error),
    #[error("ledger entry {seq}: unknown {what} {value:?}")]
    UnknownSymbol { seq: u64, what: &'static str, value: String },
    #[error("ledger entry {seq}: refs {value:?} is not a JSON array of event_ids")]
    Refs { seq: u64, value: String },
    #[error("query answered column {column:?} as {found}, expected {expected}")]
    ColumnType { column: String, found: String, expected: &'static str },
}
