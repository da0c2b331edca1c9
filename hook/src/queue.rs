//! What callers put in the writer's bounded queue ([`crate::Hook`] sends, the writer takes groups of them): a
//! request and where its answer goes.

use schemas::ReservationAction;
use tokio::sync::oneshot;

use crate::api::{AcquireRequest, Closed, Decision, Decisions, LeaseStep, Refusal, Request, TenantScope};
use crate::error::HookError;
use crate::quotas::{QuotaQuery, Quotas};

/// One request and where its answer goes. A check's or reserve's middle field is the name of the token its caller
/// authenticated with (`serve`), recorded on its DecisionEvent; none for a library caller.
pub enum Work {
    Check(Request, Option<String>, oneshot::Sender<Result<Decision, HookError>>),
    CheckAmounts(Request, Option<String>, oneshot::Sender<Result<Decisions, HookError>>),
    Reserve(Request, Option<String>, oneshot::Sender<Result<Decision, HookError>>),
    ReserveAmounts(Request, Option<String>, oneshot::Sender<Result<Decisions, HookError>>),
    Acquire(AcquireRequest, Option<String>, oneshot::Sender<Result<Decision, HookError>>),
    /// A commit or release of a reservation, or a renewal or release of a lease (`lease`: what its holder presents).
    Close {
        reservation_id: String,
        action: ReservationAction,
        amount: i64,
        lease: Option<LeaseStep>,
        tenants: TenantScope,
        reply: oneshot::Sender<Result<Result<Closed, Refusal>, HookError>>,
    },
    /// A read of a tenant's remaining quota (`Hook::quotas`): answered from the state, recording nothing.
    Quotas(QuotaQuery, oneshot::Sender<Result<Quotas, HookError>>),
    /// A read of the state's figures (`Hook::figures_async`), recording nothing.
    Figures(oneshot::Sender<Result<crate::figures::Figures, HookError>>),
    /// Outbox entries a broker acknowledged, recorded by the writer (`Hook::record_published`).
    Published {
        acknowledged: Vec<(u64, String)>,
        reply: oneshot::Sender<Result<(), HookError>>,
    },
}

/// A request in the queue, whether its caller polls for the answer (a lone caller of the blocking API), and when it
/// was queued.
pub struct Queued {
    pub work: Work,
    pub caller_polls: bool,
    pub at: std::time::Instant,
}

impl Work {
    /// Whether it asks for something to be decided and recorded (a check, a reservation, a close), not a read or the
    /// outbox's bookkeeping: the requests whose wait in the queue is a decision's.
    pub fn decides(&self) -> bool {
        match self {
            Work::Check(..)
            | Work::CheckAmounts(..)
            | Work::Reserve(..)
            | Work::ReserveAmounts(..)
            | Work::Acquire(..)
            | Work::Close { .. } => true,
            Work::Quotas(..) | Work::Figures(_) | Work::Published { .. } => false,
        }
    }

    /// Answers `error` to the caller, for a request not decided (its group failed before deciding anything).
    pub fn fail(self, error: HookError) {
        match self {
            Work::Check(_, _, reply) | Work::Reserve(_, _, reply) | Work::Acquire(_, _, reply) => {
                drop(reply.send(Err(error)))
            }
            Work::CheckAmounts(_, _, reply) | Work::ReserveAmounts(_, _, reply) => drop(reply.send(Err(error))),
            Work::Close { reply, .. } => drop(reply.send(Err(error))),
            Work::Quotas(_, reply) => drop(reply.send(Err(error))),
            Work::Figures(reply) => drop(reply.send(Err(error))),
            Work::Published { reply, .. } => drop(reply.send(Err(error))),
        }
    }
}
