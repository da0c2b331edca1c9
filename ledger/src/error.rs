//! One error enum per ledger operation.

use std::path::PathBuf;

/// Opening (and migrating) a ledger file failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// No ledger file at the path (a reader does not create one).
    #[error("no ledger at {path} (ingest creates it; --ledger or QUOTA_LEDGER_PATH names another)")]
    Missing {
        /// The path given.
        path: PathBuf,
    },
    /// SQLite could not open or configure the file.
    #[error("cannot open ledger {path}")]
    Sqlite {
        /// The ledger file.
        path: PathBuf,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// The path names a directory.
    #[error(
        "{path} is a directory, not a ledger file (--ledger or QUOTA_LEDGER_PATH names the file, e.g. {path}/quota-ledger.db)"
    )]
    IsADirectory {
        /// The path given.
        path: PathBuf,
    },
    /// The file has more than one name, which would give it two write-ahead logs.
    #[error(
        "{path} has {links} hard links: SQLite keeps a ledger's write-ahead log beside the name it is opened by, so \
         writers through two names of one file corrupt it, and the one-hook-per-ledger lock is per name too; keep \
         one name and remove the others (find / -xdev -samefile {path}), or use a symbolic link"
    )]
    HardLinked {
        /// The path given.
        path: PathBuf,
        /// How many names the file has.
        links: u64,
    },
    /// The ledger's directory refuses the `-shm` file a reader needs.
    #[error(
        "cannot read ledger {path}: SQLite creates {path}-shm beside it even to read (the ledger is in WAL mode), and \
         this user cannot write in {dir}: run as a user who can (the ledger's owner), or copy the ledger elsewhere"
    )]
    DirectoryNotWritable {
        /// The ledger file.
        path: PathBuf,
        /// Its directory.
        dir: PathBuf,
    },
    /// Another application's SQLite database, left untouched.
    #[error(
        "{path} is a SQLite database but not a quota-ledger ledger: it holds {}; nothing was written to it \
         (--ledger or QUOTA_LEDGER_PATH names another)",
        describe_objects(objects)
    )]
    NotALedger {
        /// The file.
        path: PathBuf,
        /// Its schema objects as (type, name): tables first, then indexes, triggers and views.
        objects: Vec<(String, String)>,
    },
    /// A ledger migrated by a newer binary.
    #[error("ledger {path} is at schema version {found}, newer than this binary knows ({known}): upgrade quota-ledger")]
    TooNew {
        /// The ledger file.
        path: PathBuf,
        /// The file's schema version.
        found: i64,
        /// The latest this binary knows.
        known: i64,
    },
    /// A ledger a reader cannot use before a writer migrates it.
    #[error(
        "ledger {path} is at schema version {found}, older than this binary's {known}: open it once with a writer \
         (ingest, reconcile, serve) to migrate it"
    )]
    NotMigrated {
        /// The ledger file.
        path: PathBuf,
        /// The file's schema version.
        found: i64,
        /// This binary's.
        known: i64,
    },
    /// A migration failed; its transaction left the file as it was.
    #[error("ledger {path}: migration {migration} failed")]
    Migration {
        /// The ledger file.
        path: PathBuf,
        /// The migration's file name.
        migration: &'static str,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// The write-ahead log file, synced apart from commits, cannot be opened.
    #[error("cannot open the ledger's write-ahead log {path}")]
    Log {
        /// The log file.
        path: PathBuf,
        /// The error opening it.
        source: std::io::Error,
    },
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
    /// An event of the batch does not validate (contract §4.4): nothing of the batch is appended.
    #[error("event {event_id:?} of the batch is not valid, nothing appended")]
    InvalidEvent {
        /// Its event_id.
        event_id: String,
        /// What is wrong with it.
        source: schemas::Invalid,
    },
    /// The batch's offset of a partition is before the stored one: appending would count messages twice.
    #[error("offset of {topic}[{partition}] would move back from {stored} to {batch}, nothing appended")]
    OffsetRegression {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The next offset stored.
        stored: i64,
        /// The batch's.
        batch: i64,
    },
    /// An event of the batch has the event_id of a recorded event with another payload, and the batch was to be
    /// recorded only without such copies ([`crate::Ledger::append_unless_conflicting`]): nothing of the batch is
    /// appended.
    #[error("event {event_id:?} of the batch has the id of entry {of}, another event; nothing appended")]
    Conflicting {
        /// Its event_id.
        event_id: String,
        /// The recorded entry holding that event_id.
        of: u64,
    },
    /// A correction of the batch cannot apply to the event it names, and the batch must be recorded only whole
    /// ([`crate::Ledger::append_unless_conflicting`]): nothing of the batch is appended.
    #[error("correction {event_id:?} refused ({code}): {refusal}; nothing appended", code = .refusal.code())]
    CorrectionRefused {
        /// The correction's event_id.
        event_id: String,
        /// Why (boxed: a refusal quotes names, and every append answers this error type).
        refusal: Box<rules::correction::Refusal>,
    },
    /// SQLite failed; the transaction rolled back.
    #[error("ledger write failed, nothing appended")]
    Sqlite(#[from] rusqlite::Error),
}

/// Recording a snapshot of the hook's state failed; nothing of it was written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// Its watermark is past the ledger's last entry: it cannot be tied to an entry.
    #[error("a snapshot at watermark {watermark} is past the ledger's last entry")]
    PastLastEntry {
        /// The snapshot's watermark.
        watermark: u64,
    },
    /// Reading the ledger's id failed.
    #[error(transparent)]
    Read(#[from] ReadError),
    /// SQLite failed to write.
    #[error("recording a snapshot of the hook's state failed")]
    Sqlite(#[from] rusqlite::Error),
}

/// Reading the ledger failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// SQLite failed to read.
    #[error("ledger read failed")]
    Sqlite(#[from] rusqlite::Error),
    /// A stored entry cannot be read back as what it says it is.
    #[error("ledger entry {seq}: {message}")]
    Corrupt {
        /// Its ledger sequence number (0 when not known).
        seq: u64,
        /// What is wrong.
        message: String,
    },
}

/// A replay of quarantined messages failed; nothing of it was recorded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// An id asked for names no quarantined message.
    #[error(
        "no quarantined message has id {} (`quarantine list` shows the ids); nothing replayed",
        ids.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")
    )]
    NotQuarantined {
        /// The ids not found.
        ids: Vec<i64>,
    },
    /// Reading the ledger failed.
    #[error("cannot read the quarantine")]
    Read(#[from] ReadError),
    /// Appending failed.
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
    /// The period has not ended yet.
    #[error("period {period} is not over yet (it ends at {ends}): a period closes only after its last instant")]
    NotOver {
        /// The period.
        period: crate::Period,
        /// When it ends.
        ends: schemas::Timestamp,
    },
    /// A later period is closed already.
    #[error(
        "period {period} cannot be closed: {last} is closed already, and billing periods close in order (the late \
         usage recorded since {last} closed belongs to the next month's export; closing {period} now would bill it \
         there). `export billing --period {period}` without --final shows its figures"
    )]
    AfterLater {
        /// The period.
        period: crate::Period,
        /// The last period closed.
        last: crate::Period,
    },
    /// An earlier period is still open.
    #[error(
        "period {period} cannot be closed before {next}: billing periods close one after another, and the last one \
         closed is {last}"
    )]
    Skips {
        /// The period.
        period: crate::Period,
        /// The next period to close.
        next: crate::Period,
        /// The last period closed.
        last: crate::Period,
    },
    /// The period's billing export could not be computed.
    #[error("computing the export of period {period} failed, period not closed")]
    Export {
        /// The period.
        period: crate::Period,
        /// The export's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// SQLite failed; the transaction rolled back.
    #[error("ledger write failed, period not closed")]
    Sqlite(#[from] rusqlite::Error),
}

/// Recording outbox acknowledgements failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OutboxError {
    /// An acknowledged entry is not in the outbox.
    #[error("ledger entry {seq} is not in the outbox")]
    NotInOutbox {
        /// Its ledger sequence number.
        seq: u64,
    },
    /// SQLite failed; nothing was recorded.
    #[error("ledger outbox write failed")]
    Sqlite(#[from] rusqlite::Error),
}

/// Accepting an offset gap failed; nothing was recorded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GapError {
    /// The range does not touch the ledger's next offset of its partition.
    #[error(
        "gap {range} not accepted: the ledger's next offset of {}[{}] is {next}, and a gap must start there (offsets \
         removed before they were read) or end just before it (a topic recreated below it); ingest names the gap to \
         accept when it stops",
        range.topic, range.partition
    )]
    NotAtNextOffset {
        /// The range asked for.
        range: crate::GapRange,
        /// The ledger's next offset of the partition (0 when it has read nothing there).
        next: i64,
    },
    /// SQLite failed; the transaction rolled back.
    #[error("ledger write failed, gap not accepted")]
    Sqlite(#[from] rusqlite::Error),
}

/// Recording what a reconcile run concluded failed; nothing of it was recorded, and the next run reconciles in full.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunCheckpointError {
    /// SQLite failed.
    #[error("cannot record the reconcile checkpoint")]
    Sqlite(#[from] rusqlite::Error),
}
