//! The quota rules (contract §5), as pure functions over events: what the enforcement hook decides with, what
//! reconcile judges by, and what the billing export and audit answers explain. No I/O: every rule takes events
//! and instants and answers values, so the three agree by construction and each rule is tested on hand-written
//! histories without a database.
//!
//! - [`window`]: calendar-aligned windows (MINUTE, HOUR, DAY, MONTH), in UTC or a policy's time zone, and their
//!   overlaps.
//! - [`escrow`]: capacity leases: the allocator's book of a window, a grant's size, expiry judged with a clock-skew
//!   margin on both sides.
//! - [`alert`]: alert ids and threshold levels, shared by the hook and reconcile.
//! - [`correction`]: whether a usage correction applies to the event it names, and the delta it adds.
//! - [`cycle`]: billing cycles anchored on a day of the month and a local time in a tenant's zone, and anchor changes.
//! - [`meter`]: how a metric's usage aggregates (SUM, COUNT, UNIQUE_COUNT, MAX, LATEST, a gauge's integral or
//!   time-weighted average) and the meter in force for a window.
//! - [`policy`]: the policy version in force for a window, with `*` plan defaults.
//! - [`reservation`]: the life of a reservation decided by event time (valid close, refused transition, expiry).
//! - [`overshoot`]: effective limits (limit plus grants), the excess over them and the events that crossed.
//!
//! ```
//! use rules::window::bounds;
//! use schemas::{Timestamp, Window};
//!
//! let t = Timestamp::parse_rfc3339("2026-11-17T13:45:10Z").unwrap();
//! let (start, end) = bounds(Window::MONTH, t);
//! assert_eq!(start.to_string(), "2026-11-01T00:00:00Z");
//! assert_eq!(end.to_string(), "2026-12-01T00:00:00Z");
//!
//! // The same month in New York's calendar: from local midnight on the 1st (EDT) to local midnight on Dec 1st (EST).
//! let new_york: schemas::Tz = "America/New_York".parse().unwrap();
//! let (start, end) = rules::window::bounds_in(Window::MONTH, new_york, t);
//! assert_eq!(start.to_string(), "2026-11-01T04:00:00Z");
//! assert_eq!(end.to_string(), "2026-12-01T05:00:00Z");
//! ```

#![deny(missing_docs)]

pub mod alert;
pub mod correction;
pub mod cycle;
pub mod escrow;
pub mod meter;
pub mod overshoot;
pub mod policy;
pub mod reservation;
pub mod window;
