//! Reconciliation (SPEC 5): pure functions over what the ledger holds, computing what must be adjusted and why.
//! The nightly `reconcile` command applies their plan to the ledger in one transaction.
//!
//! The rules every adjustment is computed from (windows, the policy in force, reservation verdicts, effective
//! limits) live in the `rules` crate, which the hook and the reports share; this crate holds the nightly job:
//! what the ledger's adjustments must become ([`plan`]) and recording them ([`apply`]).

pub mod apply;
pub mod concern;
pub mod error;
pub mod inputs;
pub mod plan;

pub use apply::{ADJUSTMENTS_PER_TRANSACTION, apply};
pub use error::ReconcileError;
pub use inputs::PlanInputs;
pub use plan::{Plan, PlanCounts, Progress, plan, plan_from};
