//! One error enum per operation of the hook.

/// A request could not be decided; nothing was recorded or consumed for it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HookError {
    #[error("{field}: {message}")]
    BadRequest { field: &'static str, message: String },
    #[error("the hook is overloaded: {queued} requests queued (limit {limit}); retry shortly")]
    Overloaded { queued: usize, limit: usize },
    #[error("the hook has stopped")]
    Stopped,
    #[error("the ledger refused the group of decisions this request was in; nothing of it was recorded: {0}")]
    Ledger(String),
    #[error(
        "the ledger's log could not be synced, so this request's decision is not known to be on the disk (it may be \
         recorded: after the hook restarts, the same idempotency key answers it): {0}"
    )]
    NotDurable(String),
}

/// Starting the hook failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    #[error(transparent)]
    Open(#[from] ledger::OpenError),
    /// Another hook (a `serve`, or a library caller) decides on this ledger already.
    #[error(transparent)]
    Lock(#[from] ledger::LockError),
    #[error("cannot read the ledger to build the hook's state")]
    Read(#[from] ledger::ReadError),
    #[error("cannot start the hook's writer thread")]
    Thread(#[from] std::io::Error),
}
