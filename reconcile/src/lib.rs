//! Reconciliation (contract §5): what the ledger's adjustments must become, and recording them. The nightly
//! `reconcile` command computes a [`plan()`] (every adjustment to write, and why) and [`apply()`]s it to the ledger.
//!
//! The plan is pure: [`plan_from`] reads its inputs through [`PlanInputs`] (policies, grants, period closes,
//! recorded adjustments, the reservation and usage streams, conflicting copies), which the ledger implements
//! with its typed reads, held in one read snapshot by [`plan()`], and a test implements over vectors. The rules
//! every adjustment is computed from (windows, the policy in force, reservation verdicts, effective limits) live
//! in the `rules` crate, which the hook and the reports share.
//!
//! ```
//! use ledger::{Batch, Incoming, Ledger, Origin};
//! use schemas::{AdjustmentKind, Event, EventType, Timestamp};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let mut ledger = Ledger::open(dir.path().join("ledger.db")).unwrap();
//! let daily_limit = r#"{"event_id":"p-1","occurred_at":"2026-11-01T00:00:00Z","tenant":"org-42","metric":"requests",
//!     "source":"admin","policy_id":"daily","version":1,"scope":"TENANT","limit":10,"window":"DAY",
//!     "enforcement":"HARD","effective_from":"2026-11-01T00:00:00Z"}"#;
//! let usage = r#"{"event_id":"u-1","occurred_at":"2026-11-02T10:00:00Z","tenant":"org-42","metric":"requests",
//!     "source":"api","quantity":12}"#;
//! let events = [(EventType::PolicyEvent, daily_limit), (EventType::UsageEvent, usage)]
//!     .map(|(t, json)| Incoming { event: Event::from_json(t, json).unwrap(), origin: Origin::Local { name: "example".into() }, raw: None });
//! ledger.append(&Batch { events: events.to_vec(), ..Batch::default() }).unwrap();
//!
//! let as_of = Timestamp::parse_rfc3339("2026-11-03T00:00:00Z").unwrap();
//! let plan = reconcile::plan(&ledger, as_of, &mut |_| {}).unwrap();
//! assert_eq!(plan.adjustments.len(), 1);
//! assert_eq!((plan.adjustments[0].kind, plan.adjustments[0].amount), (AdjustmentKind::OVERSHOOT, 2));
//! reconcile::apply(&mut ledger, &plan).unwrap();
//! assert!(reconcile::plan(&ledger, as_of, &mut |_| {}).unwrap().is_clean(), "a rerun writes nothing");
//! ```

#![deny(missing_docs)]

pub mod after_close;
pub mod alerts;
pub mod apply;
pub mod concern;
pub mod error;
pub mod gauge;
pub mod incremental;
pub mod inputs;
mod names;
pub mod plan;
mod rolling;
pub mod shards;

pub use alerts::AlertSettings;
pub use apply::{ADJUSTMENTS_PER_TRANSACTION, apply};
pub use error::ReconcileError;
pub use gauge::GaugeOverLimit;
pub use incremental::{Coverage, FullReason, Reading, plan_incremental, remember};
pub use inputs::PlanInputs;
pub use plan::{Plan, PlanCounts, Progress, late_usage, plan, plan_from, plan_from_with, plan_with};
