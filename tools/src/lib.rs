//! Tools: what developers, testers and a first-time reader run around the pipeline, not the pipeline itself. A
//! realistic synthetic month of traffic ([`generate`]), the
//! benchmarks that measure each stage against a floor or a peer on this machine ([`bench`](mod@bench)), and the demo that
//! plays the whole pipeline on an embedded broker and draws `report.html` ([`demo`]).
//!
//! Every tool calls the same library code as the command that does the work alone (ingest, the hook, reconcile,
//! the outbox, billing exports). None draws on a terminal: long steps report [`Progress`], and results come back as
//! data for the binary to print.
//!
//! The benchmarks and the demo answer `anyhow::Result`: each is the body of a developer's command, its errors only
//! ever end on the binary's error line, and they come from a dozen crates with the context of the step that failed;
//! a typed enum per runner would restate them without a caller that tells them apart. The generator, which other code
//! calls, has typed errors.
//!
//! ```
//! use tools::generate::{GenerateSettings, Generated, Generator};
//!
//! let mut generator = Generator::new(GenerateSettings::new(10, 1_000, 7));
//! let events = generator.by_ref().filter(|g| matches!(g, Generated::Event(_))).count() as u64;
//! let report = generator.report();
//! assert_eq!(report.messages, 1_000);
//! assert_eq!(events, report.unique_events + report.duplicates + report.conflicts);
//! ```

#![deny(missing_docs)]

pub mod bench;
pub mod demo;
pub mod generate;

use std::path::Path;

/// Writes a token file for `serve`, which refuses one that group or others may read or write: the owner's only,
/// an existing file included.
pub(crate) fn write_token_file(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    // The mode above applies to a new file only.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    std::io::Write::write_all(&mut &file, text.as_bytes())
}

/// How far a long step of a tool is, for the binary to show (a bar, or a spinner, on a terminal).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Progress {
    /// A step of `total` units begins (`None`: of unknown length).
    Begin {
        /// What the step does, in a word or two.
        step: String,
        /// Units of work in all, when known.
        total: Option<u64>,
    },
    /// The step is this many units in.
    At(u64),
    /// What the step does now, in words.
    Doing(String),
    /// The step ended: whatever showed it goes.
    End,
    /// A line to say between steps ("copying the ledger ...").
    Note(String),
}

/// Opens a ledger for appending as the binary's `ingest` does: with the commit totals kept inside every append's
/// transaction, so that an export later judges only the reservations touched since.
pub(crate) fn open_for_append(path: &Path) -> Result<ledger::Ledger, ledger::OpenError> {
    let mut ledger = ledger::Ledger::open(path)?;
    ledger.keep_commit_totals();
    Ok(ledger)
}
