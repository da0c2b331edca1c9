//! Reconciliation (SPEC 5): pure functions over what the ledger holds, computing what must be adjusted and why.
//! The nightly `reconcile` command applies their plan to the ledger in one transaction.
//!
//! This crate holds the rules every adjustment is computed from: calendar-aligned UTC [`window`]s, the
//! [`policy`] version in force for a window (with `*` plan defaults), and the [`reservation`] state machine
//! decided by event time. They take events, not a database, and are tested on hand-written histories.
//!
//! ```
//! use reconcile::window::bounds;
//! use schemas::{Timestamp, Window};
//!
//! let t = Timestamp::parse_rfc3339("2026-11-17T13:45:10Z").unwrap();
//! let (start, end) = bounds(Window::MONTH, t);
//! assert_eq!(start.to_string(), "2026-11-01T00:00:00Z");
//! assert_eq!(end.to_string(), "2026-12-01T00:00:00Z");
//! ```

pub mod apply;
pub mod concern;
pub mod error;
pub mod overshoot;
pub mod plan;
pub mod policy;
pub mod read;
pub mod reservation;
pub mod window;

pub use apply::{ADJUSTMENTS_PER_TRANSACTION, apply};
pub use error::ReconcileError;
pub use plan::{Plan, PlanCounts, Progress, plan};
