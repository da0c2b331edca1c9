//! One error enum per operation of the hook.

/// A request could not be decided; nothing was recorded or consumed for it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HookError {
    /// The request is malformed: a 400, nothing decided.
    #[error("{field}: {message}")]
    BadRequest {
        /// The field at fault.
        field: &'static str,
        /// What is wrong with it, quoting the value.
        message: String,
    },
    /// The idempotency key was used before for another request (contract §9.1): a 409, nothing decided or consumed.
    #[error("{message}")]
    IdempotencyKeyReused {
        /// The field that differs from the original request's (`subject`, `metric`, `amount`, or `kind` for a check
        /// answered by a reservation's decision or the other way round), or `idempotency_key` when its decision
        /// id holds an event this hook did not record for this tenant and key.
        field: &'static str,
        /// What differs, quoting both values.
        message: String,
        /// The decision recorded for the key (an id `audit why` does not need: the message says what differs).
        decision_id: String,
    },
    /// The bounded queue is full (async callers only): retry shortly.
    #[error("the hook is overloaded: {queued} requests queued (limit {limit}); retry shortly")]
    Overloaded {
        /// Requests queued.
        queued: usize,
        /// The queue's bound.
        limit: usize,
    },
    /// The writer has stopped (every handle was dropped, or it panicked: [`crate::Hook::health`] then says
    /// `stopped`).
    #[error("the hook has stopped")]
    Stopped,
    /// The ledger refused the group, or could not be read: the message says why.
    #[error("the ledger refused the group of decisions this request was in; nothing of it was recorded: {0}")]
    Ledger(String),
    /// The log could not be synced after the group's commit (a failed sync is final until a restart).
    #[error(
        "the ledger's log could not be synced, so this request's decision is not known to be on the disk (it may be \
         recorded: after the hook restarts, the same idempotency key answers it): {0}"
    )]
    NotDurable(String),
    /// Another node owns this request's shard now (durability replicated, [`crate::replicate`]): nothing was
    /// recorded; ask the owner (a `node` answers 421 with its URL).
    #[error("this node no longer owns the shard of this request's tenant; nothing was recorded: {0}")]
    Fenced(String),
    /// This request belongs to a partition this hook (or router, [`crate::Shards`]) does not serve: its tenant's
    /// partition (contract §9.4), or the one its reservation id names. Nothing was recorded; ask the partition's owner
    /// (`serve` answers 421 Misdirected Request).
    #[error(
        "partition {partition} of {partitions} (this request's tenant's, or its reservation's) is not served here; \
         nothing was recorded: ask its owner"
    )]
    NotServing {
        /// The partition the request belongs to.
        partition: u32,
        /// The partition count P.
        partitions: u32,
    },
    /// The group's events could not be published to Kafka (durability replicated): nothing was recorded; retry.
    #[error("the brokers did not take the group of decisions this request was in; nothing was recorded: {0}")]
    NotReplicated(String),
}

/// Starting the hook failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The ledger could not be opened.
    #[error(transparent)]
    Open(#[from] ledger::OpenError),
    /// Another hook (a `serve`, or a library caller) decides on this ledger already.
    #[error(transparent)]
    Lock(#[from] ledger::LockError),
    /// The ledger could not be read to build the state.
    #[error("cannot read the ledger to build the hook's state")]
    Read(#[from] ledger::ReadError),
    /// The writer thread could not be started.
    #[error("cannot start the hook's writer thread")]
    Thread(#[from] std::io::Error),
    /// A shard could not be opened or created ([`crate::Shards::add`]).
    #[error(transparent)]
    Shard(Box<ledger::shards::ShardError>),
    /// A shard of a partition beyond the partition count was asked for ([`crate::Shards::add`]).
    #[error("there is no partition {partition} of {partitions} (partitions are numbered from 0)")]
    NoSuchPartition {
        /// The partition asked for.
        partition: u32,
        /// The partition count P.
        partitions: u32,
    },
    /// The spill of decisions made open could not be read, or the ledger did not take the decisions it holds (a start
    /// appends them before anything else is decided).
    #[error("cannot record the decisions made open that wait in the spill: {0}")]
    Spill(String),
}

/// A snapshot of the hook's state could not be taken ([`crate::snapshot::take`]); nothing of it was written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotFailed {
    /// The state could not be loaded from the ledger.
    #[error(transparent)]
    Load(#[from] StartError),
    /// The state could not be encoded.
    #[error("cannot encode the hook's state: {0}")]
    Encode(String),
    /// The ledger did not record it.
    #[error(transparent)]
    Record(#[from] ledger::SnapshotError),
}
