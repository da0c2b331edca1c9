//! The answer to one request of a group: where it goes and what it says, held until the group is recorded (and,
//! at durability full, synced by [`crate::sync`]), then sent. A group that fails replaces its answers with the
//! error.

use std::collections::HashSet;

use tokio::sync::oneshot;

use crate::api::{Closed, Decision, Decisions, Refusal};
use crate::error::HookError;
use crate::quotas::Quotas;

/// An answer waiting for its group's commit (and, at durability full, its sync). Short-lived, one per request of a
/// group: the size difference between the variants costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
pub enum Answer {
    Decision(oneshot::Sender<Result<Decision, HookError>>, Result<Decision, HookError>),
    Decisions(oneshot::Sender<Result<Decisions, HookError>>, Result<Decisions, HookError>),
    Close(oneshot::Sender<Result<Result<Closed, Refusal>, HookError>>, Result<Result<Closed, Refusal>, HookError>),
    /// A read of remaining quota: sent once what the group decided before it (which it counts) is recorded.
    Quotas(oneshot::Sender<Result<Quotas, HookError>>, Result<Quotas, HookError>),
}

impl Answer {
    /// Its group failed: an error in its place, unless it replays a decision recorded before the group (a replay
    /// of one the group itself decided, now `taken_back`, fails with it): a 500 saying "nothing of it was
    /// recorded" would be false of a decision that was.
    pub(crate) fn failed(self, message: &str, taken_back: &HashSet<&str>) -> Answer {
        self.failed_with(|| HookError::Ledger(message.to_string()), taken_back)
    }

    /// [`Answer::failed`], answering `error` instead of the ledger's refusal.
    pub(crate) fn failed_with(self, error: impl Fn() -> HookError, taken_back: &HashSet<&str>) -> Answer {
        match self {
            Answer::Decision(reply, Ok(decision))
                if decision.replayed && !taken_back.contains(decision.decision_id.as_str()) =>
            {
                Answer::Decision(reply, Ok(decision))
            }
            Answer::Decisions(reply, Ok(decisions))
                if decisions.replayed()
                    && !decisions.decisions.iter().any(|d| taken_back.contains(d.decision_id.as_str())) =>
            {
                Answer::Decisions(reply, Ok(decisions))
            }
            Answer::Decisions(reply, Err(HookError::IdempotencyKeyReused { decision_id, .. }))
                if taken_back.contains(decision_id.as_str()) =>
            {
                Answer::Decisions(reply, Err(error()))
            }
            Answer::Close(reply, Ok(Ok(closed)))
                if closed.replayed && !taken_back.contains(closed.event_id.as_str()) =>
            {
                Answer::Close(reply, Ok(Ok(closed)))
            }
            // A key refused as reused for a decision of this group: that decision is not recorded after all.
            Answer::Decision(reply, Err(HookError::IdempotencyKeyReused { decision_id, .. }))
                if taken_back.contains(decision_id.as_str()) =>
            {
                Answer::Decision(reply, Err(error()))
            }
            other => other.replaced(error),
        }
    }

    /// Its group was committed but no sync covered it.
    pub(crate) fn not_durable(self, message: &str) -> Answer {
        self.replaced(|| HookError::NotDurable(message.to_string()))
    }

    /// An error in place of a decision, a close or a refusal to close (a request that failed already keeps its
    /// own error). A refusal too: it records nothing, but it may rest on what the group or an earlier one did
    /// (a close refused as already closed by a close that the failed commit or sync did not keep).
    fn replaced(self, error: impl Fn() -> HookError) -> Answer {
        match self {
            Answer::Decision(reply, Ok(_)) => Answer::Decision(reply, Err(error())),
            Answer::Decisions(reply, Ok(_)) => Answer::Decisions(reply, Err(error())),
            Answer::Close(reply, Ok(_)) => Answer::Close(reply, Err(error())),
            Answer::Quotas(reply, Ok(_)) => Answer::Quotas(reply, Err(error())),
            other => other,
        }
    }

    /// Says of each decision whether a policy of `policies` names its metric ([`Decision::metric_named`]).
    pub(crate) fn name_metrics(&mut self, policies: &rules::policy::PolicyIndex) {
        let decisions = match self {
            Answer::Decision(_, Ok(decision)) => std::slice::from_mut(decision),
            Answer::Decisions(_, Ok(decisions)) => decisions.decisions.as_mut_slice(),
            _ => return,
        };
        for decision in decisions {
            decision.metric_named = policies.names_metric(&decision.metric);
        }
    }

    pub(crate) fn send(self) {
        // A caller that stopped waiting (a closed HTTP connection) just misses its answer.
        match self {
            Answer::Decision(reply, result) => drop(reply.send(result)),
            Answer::Decisions(reply, result) => drop(reply.send(result)),
            Answer::Close(reply, result) => drop(reply.send(result)),
            Answer::Quotas(reply, result) => drop(reply.send(result)),
        }
    }
}
