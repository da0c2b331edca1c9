//! Durability replicated (a `node`'s default): a group's events reach their Kafka topics, acknowledged by every
//! in-sync replica, before the group is recorded in the shard and answered. A node may then die with its disk and
//! lose nothing a caller was told: whichever node owns the partition next rebuilds the shard from the topics. The
//! publisher is fenced by the broker: once another node took the partition over, a publish fails as
//! [`ReplicateError::Fenced`], and this hook answers nothing for the shard any more.

use schemas::Event;

/// Publishes a group's events before they are recorded (see the module).
pub trait Replicate: Send {
    /// Publishes `events`, in order, answering once the broker acknowledged every one of them.
    fn replicate(&mut self, events: &[Event]) -> Result<(), ReplicateError>;
}

/// A group's events could not be published; the group is not recorded and its requests fail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplicateError {
    /// Another node owns the shard now (the broker refused this publisher's epoch): final, the hook answers nothing
    /// more for the shard.
    #[error("another node owns this shard now: {0}")]
    Fenced(String),
    /// The brokers did not acknowledge in time: this group fails, the next one tries again.
    #[error("the brokers did not acknowledge the group's events: {0}")]
    Unavailable(String),
}
