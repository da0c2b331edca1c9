//! One error enum per operation of a reconciliation.

/// Computing or applying a plan failed. Nothing was written, except by [`ReconcileError::Append`], which says how
/// much.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReconcileError {
    #[error("cannot read the ledger")]
    Read(#[from] ledger::ReadError),
    #[error(
        "cannot record the adjustments: {recorded} of {planned} were recorded before the failure, and stay (each is a \
         delta against what was recorded before it); run reconcile again with the same --as-of to record the rest"
    )]
    Append { recorded: usize, planned: usize, source: ledger::AppendError },
    #[error(
        "another run recorded adjustments since this plan was computed ({planned} then, {found} now): run reconcile again"
    )]
    Stale { planned: u64, found: u64 },
    #[error(
        "two adjustments of this run have the id {adjustment_id}: two concerns are not told apart (a bug; please report it with the ledger)"
    )]
    SameAdjustment { adjustment_id: String },
}
