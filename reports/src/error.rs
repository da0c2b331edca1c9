//! Errors of the reports: reading the ledger, writing an export.

/// A report could not be computed or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReportError {
    /// The ledger could not be opened.
    #[error("cannot open the ledger")]
    Open(#[from] ledger::OpenError),
    /// A read of the ledger failed.
    #[error("cannot read the ledger")]
    Read(#[from] ledger::ReadError),
    /// The commit totals could not be brought up to date.
    #[error("cannot bring the commit totals up to date")]
    Totals(#[from] ledger::TotalsError),
    /// The export of an open period could not be computed.
    #[error("cannot compute the export")]
    Preview(#[from] ledger::PreviewError),
    /// An Arrow batch could not be built.
    #[error("cannot build the Arrow batch")]
    Arrow(#[from] arrow::error::ArrowError),
    /// Parquet could not be written.
    #[error("cannot write Parquet")]
    Parquet(#[from] parquet::errors::ParquetError),
    /// A metered metric's aggregate of the month is beyond a `long`.
    #[error("cannot aggregate a metered metric's month")]
    Metered(#[from] rules::meter::TooLarge),
    /// A bill's consumption by project does not add up to its row's consumption (`export billing --by project`): a
    /// bug, reported rather than exported.
    #[error(
        "the consumption by project of {tenant}'s {metric} adds up to {projects}, its bill says {consumption}: the \
         breakdown is not exported"
    )]
    ProjectsDisagree {
        /// The row's tenant.
        tenant: String,
        /// The row's metric.
        metric: String,
        /// What its projects add up to.
        projects: i64,
        /// The row's consumption.
        consumption: i64,
    },
    /// A row split by the plans its tenant held does not add up to the row (`export billing`): a bug, reported rather
    /// than exported.
    #[error("the rows of {tenant}'s {metric} by plan add up to {parts}, the whole row says {row}: not exported")]
    PlanSplit {
        /// The row's tenant.
        tenant: String,
        /// The row's metric.
        metric: String,
        /// The whole row's consumption.
        row: i64,
        /// What its parts add up to.
        parts: i64,
    },
}
