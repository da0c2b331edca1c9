//! One error enum per operation of a reconciliation.

/// Computing or applying a plan failed. Nothing was written, except by [`ReconcileError::Append`], which says how
/// much.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReconcileError {
    /// Reading the ledger failed.
    #[error("cannot read the ledger")]
    Read(#[from] ledger::ReadError),
    /// A transaction of adjustments failed; those before it stay recorded.
    #[error(
        "cannot record the adjustments: {recorded} of {planned} were recorded before the failure, and stay (each is a \
         delta against what was recorded before it); run reconcile again with the same --as-of to record the rest"
    )]
    Append {
        /// Adjustments recorded before the failure.
        recorded: usize,
        /// Adjustments in the plan.
        planned: usize,
        /// The ledger's error.
        source: ledger::AppendError,
    },
    /// Another run recorded adjustments after this plan read the ledger: its deltas would count twice.
    #[error(
        "another run recorded adjustments since this plan was computed ({planned} then, {found} now): run reconcile again"
    )]
    Stale {
        /// Adjustments recorded when the plan was computed.
        planned: u64,
        /// Adjustments recorded now.
        found: u64,
    },
    /// Recording where the run got to failed, after its plan was recorded: the next run reads everything.
    #[error("the adjustments are recorded, but not where the run got to: the next run reads the whole ledger")]
    Checkpoint(#[from] ledger::RunCheckpointError),
    /// Two adjustments of the plan share an id: a bug in telling concerns apart.
    #[error(
        "two adjustments of this run have the id {adjustment_id}: two concerns are not told apart (a bug; please report it with the ledger)"
    )]
    SameAdjustment {
        /// The id.
        adjustment_id: String,
    },
}
