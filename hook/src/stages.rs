//! How long each stage of a decision takes, for an operator's latency histograms (`serve`'s and `node`'s
//! `/metrics`): a slow answer is a long queue (too few writers for the load), a slow transaction (a large group, a
//! busy ledger), a slow publish to Kafka (durability replicated) or a slow disk (durability full). The writer and its
//! sync stage tell a [`StageTimer`] each figure as it is measured; the hook keeps none itself.

use std::sync::Arc;
use std::time::Duration;

/// A stage of a decision's way through the writer's group commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// A request's wait in the queue, from its arrival to the writer taking it into a group (one per request).
    QueueWait,
    /// Publishing a group's events to their topics before recording them (durability replicated; one per group).
    Replicate,
    /// A group's ledger transaction, from its start to its commit (one per group with anything to record).
    GroupCommit,
    /// A committed group's wait for the sync of the ledger's log that covers it, until its answers leave (durability
    /// full; one per group).
    Sync,
}

impl Stage {
    /// Every stage, in a decision's order.
    pub const ALL: [Stage; 4] = [Stage::QueueWait, Stage::Replicate, Stage::GroupCommit, Stage::Sync];

    /// Its name in metrics (`stage="queue_wait"`).
    pub fn name(self) -> &'static str {
        match self {
            Stage::QueueWait => "queue_wait",
            Stage::Replicate => "replicate",
            Stage::GroupCommit => "group_commit",
            Stage::Sync => "sync",
        }
    }
}

/// Told how long each stage took, on the writer's and the sync stage's threads: it must be quick (a histogram's
/// observation), since a group waits for it.
#[derive(Clone)]
pub struct StageTimer(Arc<dyn Fn(Stage, Duration) + Send + Sync>);

impl StageTimer {
    /// A timer telling `took` each stage's duration.
    pub fn new(took: impl Fn(Stage, Duration) + Send + Sync + 'static) -> StageTimer {
        StageTimer(Arc::new(took))
    }

    /// `stage` took `duration`.
    pub(crate) fn took(&self, stage: Stage, duration: Duration) {
        (self.0)(stage, duration)
    }
}

impl std::fmt::Debug for StageTimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StageTimer")
    }
}

/// Tells `timer`, if any, that `stage` took `duration`.
pub(crate) fn took(timer: Option<&StageTimer>, stage: Stage, duration: Duration) {
    if let Some(timer) = timer {
        timer.took(stage, duration);
    }
}
