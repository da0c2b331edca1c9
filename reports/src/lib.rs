//! Reports (contract §5, contract §7): billing exports and audit answers, computed from the ledger's typed reads.
//!
//! The last stage of the pipeline: the ledger holds every event, reconcile has written its adjustments, and
//! this crate answers finance ("what does each tenant owe for November?", [`billing`] and [`export`]) and
//! support ("why was this request denied?", [`audit`]). It never writes SQL: the ledger owns its tables, their
//! queries and its derived totals, and this crate applies the rules (`rules`: policy in force, effective limit,
//! reservation verdicts) to what it reads. SQL over the ledger's tables is the `sql` crate's, so that these reports
//! do not link the query engine.
//!
//! ```
//! use ledger::{Ledger, Period};
//! use reports::billing;
//! use reports::export::{BillingExport, Format};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let ledger = Ledger::open(dir.path().join("ledger.db")).unwrap();
//! let period: Period = "2026-11".parse().unwrap();
//! let (snapshot, rows) = billing::compute_open(&ledger, period).unwrap();
//! let gaps = BillingExport::gaps_of(&ledger, period).unwrap();
//! let export = BillingExport { period, watermark: snapshot.watermark, rows, gaps };
//! let csv = String::from_utf8(export.to_bytes(Format::Csv).unwrap()).unwrap();
//! assert!(csv.starts_with("tenant,metric,period,consumption,"));
//! ```

#![deny(missing_docs)]

pub mod audit;
pub mod billing;
pub mod error;
pub mod export;
pub mod metered;
pub mod text;
pub mod usage;

pub use error::ReportError;
