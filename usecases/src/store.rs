//! Where the ledger is: one file holding every partition, or a directory of shards, one ledger per partition
//! (contract §9.4). A running cluster is read through [`crate::cluster`].

use std::path::{Path, PathBuf};

use ledger::Ledger;
use ledger::shards::ShardDir;

use crate::{Result, refuse};

/// Where the ledger is: one file holding every partition (`--ledger`), or a directory of shards (`--data`).
#[derive(Debug)]
pub enum Store {
    /// One ledger file.
    File(PathBuf),
    /// A directory of shards, one ledger per partition.
    Shards(ShardDir),
}

impl Store {
    /// The ledger file, for a use case that reads or writes one ledger: `command` refuses a directory of shards.
    pub fn file(&self, command: &str) -> Result<&Path> {
        match self {
            Store::File(path) => Ok(path),
            Store::Shards(shards) => refuse!(
                "{command} does not take a directory of shards (--data {}) yet: give it one ledger file with --ledger",
                shards.dir().display()
            ),
        }
    }
}

/// Opens a ledger for appending, with the reports' commit totals kept inside every append's transaction (an
/// export then judges only reservations touched since; without the hook the next export catches up).
pub fn open_for_append(path: &Path) -> Result<Ledger> {
    let mut ledger = Ledger::open(path)?;
    ledger.keep_commit_totals();
    Ok(ledger)
}
