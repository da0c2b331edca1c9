//! One error enum per ledger operation.

use std::path::PathBuf;

/// Opening (and migrating) a ledger file failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    #[error("no ledger at {path} (ingest creates it; --ledger or QUOTA_LEDGER_PATH names another)")]
    Missing { path: PathBuf },
    #[error("cannot open ledger {path}")]
    Sqlite { path: PathBuf, source: rusqlite::Error },
    #[error(
        "{path} is a directory, not a ledger file (--ledger or QUOTA_LEDGER_PATH names the file, e.g. {path}/quota-ledger.db)"
    )]
    IsADirectory { path: PathBuf },
    #[error(
        "{path} has {links} hard links: SQLite keeps a ledger's write-ahead log beside the name it is opened by, so \
         writers through two names of one file corrupt it, and the one-hook-per-ledger lock is per name too; keep \
         one name and remove the others (find / -xdev -samefile {path}), or use a symbolic link"
    )]
    HardLinked { path: PathBuf, links: u64 },
    #[error(
        "cannot read ledger {path}: SQLite creates {path}-shm beside it even to read (the ledger is in WAL mode), and \
         this user cannot write in {dir}: run as a user who can (the ledger's owner), or copy the ledger elsewhere"
    )]
    DirectoryNotWritable { path: PathBuf, dir: PathBuf },
    #[error(
        "{path} is a SQLite database but not a quota-ledger ledger: it holds {}; nothing was written to it \
         (--ledger or QUOTA_LEDGER_PATH names another)",
        describe_objects(objects)
    )]
    NotALedger {
        path: PathBuf,
        /// Its schema objects as (type, name): tables first, then indexes, triggers and views.
        objects: Vec<(String, String)>,
    },
    #[error("ledger {path} is at schema version {found}, newer than this binary knows ({known}): upgrade quota-ledger")]
    TooNew { path: PathBuf, found: i64, known: i64 },
    #[error(
        "ledger {path} is at schema version {found}, older than this binary's {known}: open it once with a writer \
         (ingest, reconcile, serve) to migrate it"
    )]
    NotMigrated { path: PathBuf, found: i64, known: i64 },
    #[error("ledger {path}: migration {migration} failed")]
    Migration { path: PathBuf, migration: &'static str, source: rusqlite::Error },
    #[error("cannot open the ledger's write-ahead log {path}")]
    Log { path: PathBuf, source: std::io::Error },
}

/// Objects of a foreign database named in [`OpenError::NotALedger`], at most this many (the rest counted).
pub const FOREIGN_OBJECTS_NAMED: usize = 10;

/// `tables customers, orders; views totals`, grouped by type in the order given, at most
/// [`FOREIGN_OBJECTS_NAMED`] names, then how many more.
fn describe_objects(objects: &[(String, String)]) -> String {
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for (kind, name) in objects.iter().take(FOREIGN_OBJECTS_NAMED) {
        match groups.last_mut() {
            Some((last, names)) if last == kind => names.push(name),
            _ => groups.push((kind, vec![name])),
        }
    }
    let mut text: Vec<String> = groups
        .iter()
        .map(|(kind, names)| {
            // SQLite's type names: table, index, trigger, view.
            let kind = match (*kind, names.len()) {
                (kind, 1) => kind.to_string(),
                ("index", _) => "indexes".to_string(),
                (kind, _) => format!("{kind}s"),
            };
            format!("{kind} {}", names.join(", "))
        })
        .collect();
    if objects.len() > FOREIGN_OBJECTS_NAMED {
        text.push(format!("and {} more", objects.len() - FOREIGN_OBJECTS_NAMED));
    }
    text.join("; ")
}

/// An append failed; nothing of the batch was recorded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AppendError {
    #[error("event {event_id:?} of the batch is not valid, nothing appended")]
    InvalidEvent { event_id: String, source: schemas::Invalid },
    #[error("offset of {topic}[{partition}] would move back from {stored} to {batch}, nothing appended")]
    OffsetRegression { topic: String, partition: i32, stored: i64, batch: i64 },
    #[error("ledger write failed, nothing appended")]
    Sqlite(#[from] rusqlite::Error),
}

/// Reading the ledger failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    #[error("ledger read failed")]
    Sqlite(#[from] rusqlite::Error),
    #[error("ledger entry {seq}: {message}")]
    Corrupt { seq: u64, message: String },
}

/// A replay of quarantined messages failed; nothing of it was recorded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    #[error(
        "no quarantined message has id {} (`quarantine list` shows the ids); nothing replayed",
        ids.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")
    )]
    NotQuarantined { ids: Vec<i64> },
    #[error("cannot read the quarantine")]
    Read(#[from] ReadError),
    #[error("appending the replayed messages failed")]
    Append(#[from] AppendError),
}

impl From<rusqlite::Error> for ReplayError {
    fn from(e: rusqlite::Error) -> ReplayError {
        ReplayError::Read(ReadError::Sqlite(e))
    }
}

/// Closing a period failed; nothing was recorded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CloseError {
    #[error("period {period} is not over yet (it ends at {ends}): a period closes only after its last instant")]
    NotOver { period: crate::Period, ends: schemas::Timestamp },
    #[error(
        "period {period} cannot be closed: {last} is closed already, and billing periods close in order (the late \
         usage recorded since {last} closed belongs to the next month's export; closing {period} now would bill it \
         there). `export billing --period {period}` without --final shows its figures"
    )]
    AfterLater { period: crate::Period, last: crate::Period },
    #[error(
        "period {period} cannot be closed before {next}: billing periods close one after another, and the last one \
         closed is {last}"
    )]
    Skips { period: crate::Period, next: crate::Period, last: crate::Period },
    #[error("computing the export of period {period} failed, period not closed")]
    Export { period: crate::Period, source: Box<dyn std::error::Error + Send + Sync> },
    #[error("ledger write failed, period not closed")]
    Sqlite(#[from] rusqlite::Error),
}

/// Recording outbox acknowledgements failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutboxError {
    #[error("ledger entry {seq} is not in the outbox")]
    NotInOutbox { seq: u64 },
    #[error("ledger outbox write failed")]
    Sqlite(#[from] rusqlite::Error),
}
