//! Where the ledger is: one file holding every partition, or a directory of shards, one ledger per partition
//! (contract §9.4). A running cluster is read through [`crate::cluster`].

use std::path::{Path, PathBuf};

use ledger::Ledger;
use ledger::shards::ShardDir;

use crate::{Context, Result, refuse};

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

    /// Every ledger of the store, for a read: a missing ledger file is an error, as for every read.
    pub fn read_all(&self) -> Result<Vec<Ledger>> {
        match self {
            Store::File(path) => Ok(vec![Ledger::open_read_only(path)?]),
            Store::Shards(dir) => Ok(dir.open_all_read_only()?.into_iter().map(|(_, ledger)| ledger).collect()),
        }
    }

    /// The store opened for a read, as it is laid out: one ledger, or each shard with its partition.
    pub fn open_read(&self) -> Result<Opened> {
        match self {
            Store::File(path) => Ok(Opened::File(Box::new(Ledger::open_read_only(path)?))),
            Store::Shards(dir) => Ok(Opened::Shards(dir.open_all_read_only()?)),
        }
    }

    /// The ledger holding `tenant`'s events, for a read: the file, or the shard of its partition.
    pub fn tenant_ledger(&self, tenant: &str) -> Result<Ledger> {
        match self {
            Store::File(path) => Ok(Ledger::open_read_only(path)?),
            Store::Shards(dir) => dir
                .open_all_read_only()?
                .into_iter()
                .find(|(shard, _)| shard.holds_tenant(tenant))
                .map(|(_, ledger)| ledger)
                .with_context(|| format!("no shard in {} holds tenant {tenant:?}", dir.dir().display())),
        }
    }

    /// Every ledger of the store, for appending: one file as [`open_for_append`] opens it, or every shard.
    pub fn append_all(&self) -> Result<Vec<Ledger>> {
        match self {
            Store::File(path) => Ok(vec![open_for_append(path)?]),
            Store::Shards(dir) => Ok(dir.open_all()?.into_iter().map(|(_, ledger)| ledger).collect()),
        }
    }
}

/// A store opened for a read.
pub enum Opened {
    /// One ledger of every partition.
    File(Box<Ledger>),
    /// Each shard, with its partition, in partition order.
    Shards(Vec<(ledger::shards::Shard, Ledger)>),
}

/// Opens a ledger for appending, with the reports' commit totals kept inside every append's transaction (an
/// export then judges only reservations touched since; without the hook the next export catches up).
pub fn open_for_append(path: &Path) -> Result<Ledger> {
    let mut ledger = Ledger::open(path)?;
    ledger.keep_commit_totals();
    Ok(ledger)
}
