//! The control plane: how a plan, a tenant's policy or a grant changes. A change is a request (who, what, why);
//! [`policy_event`] and [`grant_event`] turn it into the event that records it, with the next version, or refuse
//! it naming why, judged against what the ledger already holds ([`Recorded`]): pure functions, as reconcile's
//! plan. [`record`] then appends the event into the ledger (or the shards that hold its tenant); the binary may
//! instead produce it to Kafka, where ingest records it like any producer's.
//!
//! Who made the change and why travel in the event itself (`actor`, `reason`: PolicyEvent v3, GrantEvent v2), so
//! the ledger's hash chain covers them and `audit` shows them.
//!
//! ```
//! use control::{PolicyChange, Recorded, policy_event};
//! use schemas::{Enforcement, Scope, Timestamp, Window};
//!
//! let change = PolicyChange {
//!     tenant: "org-42".into(),
//!     metric: "requests".into(),
//!     limit: 10_000,
//!     window: Window::DAY,
//!     enforcement: Enforcement::HARD,
//!     scope: Scope::TENANT,
//!     policy_id: None,
//!     version: None,
//!     effective_from: None,
//!     time_zone: Some("America/New_York".into()),
//!     on_failure: None,
//!     overage: None,
//!     violation: None,
//!     window_seconds: None,
//!     cycle_anchor: None,
//!     alert_thresholds: None,
//!     alert_subject_share: None,
//!     actor: "alice".into(),
//!     reason: "upgrade to pro".into(),
//!     source: "doc-test".into(),
//! };
//! let now = Timestamp::parse_rfc3339("2026-12-04T10:00:00Z").unwrap();
//! let event = policy_event(&change, &Recorded::default(), now).unwrap();
//! assert_eq!((event.policy_id.as_str(), event.version), ("org-42:requests:tenant:day", 1));
//! assert_eq!(event.time_zone.as_deref(), Some("America/New_York"));
//! ```

mod change;
mod correction;
mod meter;
mod plan;
mod record;
mod refused;

pub use change::{GrantChange, PolicyChange, REASON_BYTES_MAX, default_policy_id, grant_event, policy_event};
pub use correction::{
    CorrectError, Corrected, CorrectionChange, correct, correction_event, default_correction_id, is_same_correction,
};
pub use meter::{MeterChange, meter_event};
pub use plan::{PlanAssignment, plan_assignment_event};
pub use record::{RecordError, Recorded, record};
pub use refused::Refused;
pub use rules::correction::Refusal;
