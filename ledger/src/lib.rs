//! The append-only ledger: a SQLite file (WAL) holding every usage and decision event exactly once, in ledger
//! sequence order, each entry hashed and chained to the one before (contract §4).
//!
//! Everything is written by [`Ledger::append`]: a [`Batch`] of decoded events, rejected messages and the Kafka
//! offsets they cover, recorded in one transaction. Per event it answers recorded, duplicate (same event_id,
//! same payload: counted once, forever) or conflicting duplicate (same event_id, different payload: kept for
//! audit, never counted). The database itself refuses UPDATE and DELETE of recorded rows (triggers created by
//! the migrations in `ddl/`), and [`Ledger::verify`] recomputes the chain.
//!
//! Every write transaction ends with a *link* (`links.rs`): a second hash chain over the entries' chain and the
//! other tables that change a bill or an answer (batches, duplicates, quarantine, period closes and their stored
//! exports, accepted offset gaps, offsets). Its last link is the ledger's head, [`Ledger::head`], which checkpoints
//! publish outside the file under the ledger's id, [`Ledger::ledger_id`].
//!
//! A ledger file holds the events of the Kafka partitions whose offsets it stores: every partition, or one when it is a
//! shard ([`shards`]); nothing in its interface assumes it holds all of them.
//!
//! ```
//! use ledger::{Batch, Incoming, Ledger, Origin, AppendOutcome};
//! use schemas::{Event, EventType};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let mut ledger = Ledger::open(dir.path().join("ledger.db")).unwrap();
//! let json = r#"{"event_id":"u-1","occurred_at":"2026-11-02T10:00:00Z","tenant":"org-42",
//!                "metric":"requests","source":"api","quantity":3}"#;
//! let event = Event::from_json(EventType::UsageEvent, json).unwrap();
//! let incoming = Incoming { event, origin: Origin::Local { name: "example".into() }, raw: None };
//! let batch = Batch { events: vec![incoming.clone(), incoming], ..Batch::default() };
//! let report = ledger.append(&batch).unwrap();
//! assert_eq!(report.outcomes, [AppendOutcome::Recorded { seq: 1 }, AppendOutcome::Duplicate { of: 1 }]);
//! assert_eq!(ledger.status().unwrap().events_recorded, 1);
//! assert!(ledger.verify().unwrap().first_bad.is_none());
//! ```

#![deny(missing_docs)]

mod alert_reads;
mod append;
pub mod append_hook;
mod audit_reads;
pub mod backup;
pub mod batch;
mod billing_reads;
pub mod chain;
mod checkpoint;
mod commit_totals;
mod corrections;
pub mod dedup;
pub mod details;
pub mod error;
mod follow;
mod gaps;
mod hook_snapshots;
pub mod key_filter;
pub mod links;
pub mod lock;
mod log_sync;
mod lookup;
pub mod migrate;
mod outbox;
mod period_exports;
mod periods;
mod read;
mod replay;
mod run_checkpoint;
pub mod scan;
pub mod shards;
mod status;
pub mod tables;
mod usage_totals;
mod verify;
pub mod webhooks;

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use schemas::{Catalog, EventType};

pub use alert_reads::DecisionTally;
pub use audit_reads::{AdjustmentRecord, CorrectionRecord, DayUsage, DecisionRecord, TenantUsage, UsageRecord};
pub use batch::*;
pub use billing_reads::{MetricTotal, ProjectTotal};
pub use checkpoint::{
    CATCH_UP_FRAMES, CATCH_UP_ROUNDS, CHECKPOINT_INTERVAL_MS, Checkpointer, WARM_AHEAD_ENTRIES, WRITER_BACKSTOP_FRAMES,
    WRITER_CHECKPOINT_FRAMES,
};
pub use commit_totals::{CATCH_UP_STEP_ENTRIES, CatchUp, TotalsError};
pub use error::*;
pub use follow::{Fold, FoldEntry};
pub use gaps::{GapParseError, GapRange, OffsetGap};
pub use hook_snapshots::{HookSnapshot, SnapshotMismatch};
pub use links::{Head, HeadParseError};
pub use lock::{LockError, ProcessLock};
pub use log_sync::LogSync;
pub use lookup::ReservationFacts;
pub use outbox::{OutboxEntry, OutboxStatus};
pub use period_exports::{CloseSnapshot, ComputeResult, PeriodExport, PeriodExportRow, PreviewError};
pub use periods::{Period, PeriodClose, PeriodParseError, covering_close};
pub use read::{
    AdjustmentSummary, AllowedOpen, ConflictingCopy, MeterReading, ReadSnapshot, SequencedReservation, UsageRow,
};
pub use replay::{REPLAYED_PER_TRANSACTION, ReplayReport, StillQuarantined};
pub use run_checkpoint::RunCheckpoint;
pub use scan::ScanError;
pub use status::{QuarantinedMessage, Status};
pub use verify::{BadCheckpoint, BadEntry, ExpectedHead, VerifyReport};

/// How long a writer waits for another writer's transaction before failing. Appends are short (one batch), so
/// a wait this long means something is stuck.
pub const BUSY_TIMEOUT_MS: u64 = 10_000;

/// Whether `error`, or any error it was caused by, is SQLite's "database is locked": another connection held the
/// ledger's write lock for longer than [`BUSY_TIMEOUT_MS`].
pub fn is_busy(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if let Some(sqlite) = error.downcast_ref::<rusqlite::Error>()
            && sqlite.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
        {
            return true;
        }
        cause = error.source();
    }
    false
}

/// `error` and every error it was caused by, joined with ": ", each said once (a wrapper that repeats its cause's
/// words at its end adds nothing): what the CLI prints and what the hook tells the callers of a failed group.
pub fn causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = String::new();
    let mut cause = Some(error);
    while let Some(error) = cause {
        let text = error.to_string();
        if !line.ends_with(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
        cause = error.source();
    }
    line
}

/// SQLite's busy handler for every connection of the ledger: try again every millisecond, for [`BUSY_TIMEOUT_MS`]
/// (each try sleeps at least a millisecond). SQLite's own `busy_timeout` backs off to 100 ms between tries, and a
/// writer that commits in short steps (an export's catch-up, reconcile's adjustments) took the lock again within a
/// millisecond of letting it go: the hook, waiting so beside an export that committed every 50 to 100 ms, never
/// got the lock in 8 s. The stepping writers also pause between their steps ([`STEP_PAUSE`]).
pub fn poll_while_busy(tries: i32) -> bool {
    if tries as u64 >= BUSY_TIMEOUT_MS {
        return false;
    }
    std::thread::sleep(Duration::from_millis(1));
    true
}

/// How long a writer that holds the lock in a series of short transactions lets it go between two of them, so that
/// a writer waiting in [`poll_while_busy`] takes it.
pub const STEP_PAUSE: Duration = Duration::from_millis(5);

/// What to tell a user whose command met [`is_busy`]: SQLite's own words name neither the cause nor what to do.
pub const BUSY_HINT: &str = "the ledger is busy: another process (an ingest, reconcile, export, quarantine replay or \
    serve) held its write lock for more than 10 s; what this command had not committed was not written, and running \
    it again is safe";

/// WAL pages before a checkpoint copies them into the database file (SQLite's default is 1,000). A page
/// dirtied again before the checkpoint is copied once, so a larger WAL (40 MiB) writes less in all. A writer
/// with a background checkpoint thread checkpoints itself only much later ([`WRITER_BACKSTOP_FRAMES`]).
pub const WAL_AUTOCHECKPOINT_PAGES: i64 = 10_000;

/// Every how many entries the dedup key index (and the request key index) moves keys down its tiers: the whole
/// recent tier, sorted, into the middle one, and one slice of the key space of each deeper tier (middle, large)
/// into the next (large, sealed), each move at its own point of the period (`dedup::merge_if_due`). A commit's
/// random key inserts dirty only the recent tier's dozen pages, and a move rewrites only the pages its keys land
/// in.
/// Measured on the enforcement hook: with two tiers (50,000 recent keys, about 200 pages) the recent tier was
/// 36 of the 54 pages each commit wrote; on a 10-million-event ledger each move of 50,000 keys into the sealed
/// tier rewrote most of its 40,000 pages (the writer wrote 23.5 KB per decision).
pub const EVENT_KEYS_MOVE_EVERY: u64 = 2_000;

/// Slices of the key space of the middle and the large tier: one slice of each moves every
/// `EVENT_KEYS_MOVE_EVERY` entries, so a key stays in the middle tier for at most 25 moves (50,000 entries) and
/// in the large one for at most 625 (1,250,000 entries). Each tier holds about 25 times the keys of the one
/// before, so a key is rewritten a few times in all, in pages shared with many others; and no move is larger
/// than a slice (whole-tier moves into the sealed tier stopped the hook's writer for seconds on 10 million
/// events).
pub const EVENT_KEYS_SLICES: [u64; 2] = [25, 625];

/// Parts each move between key tiers runs in, each a range of the key space of its own, at its own point of the
/// period (`dedup::merge_if_due`): a small commit waits for a sixteenth of a move, not a whole one. A move of
/// 2,000 keys took about 1 ms of the hook's writer, and with eight clients the requests that waited for one set
/// p99 (1.6 to 1.8 ms; in four parts 0.85 to 0.92 ms, `bench hook`). On a machine where a quarter of a move took
/// 0.35 ms, one request in 40 at one client waited for one, and they set p99 there (0.97 to 1.07 ms in-process,
/// durability normal; in sixteen parts of 0.12 to 0.17 ms, 0.64 to 0.78 ms; in 32, no better). The parts of a
/// move together write about the pages the whole move would, as each lands in its own range of the next tier.
/// Moving every 500 entries instead did as well on a new ledger, but each move would then land as many keys into
/// a slice of the sealed tier that is just as large: four times the pages rewritten per entry once that tier is
/// large.
pub const EVENT_KEYS_MOVE_PARTS: u64 = 16;

/// Page cache per connection, in KiB: small on purpose. SQLite scans its whole page cache at the end of a write
/// transaction after a b-tree rebalance that swapped sibling pages (`balance_nonroot` renumbers them through
/// the page number of the lock byte, 262,145, and the commit then truncates the cache back to the database's
/// size, a scan of every hash slot). With 64 MiB (16,384 pages) that scan was 12% of the enforcement hook's
/// writer thread, and rebalances come often with random keys (the dedup tier, request ids). What the cache no
/// longer holds is read from the operating system's page cache. (A memory map of the file, tried too, changed
/// no figure of `bench hook` and made a hook's resident memory count every file page its start-up fold read:
/// 3.0 GB instead of 0.9 GB on a 3.5 GB ledger.)
pub const CACHE_KIB: i64 = 8_192;

/// Prepared statements a connection keeps compiled.
pub const PREPARED_STATEMENTS: usize = 128;

/// How far a commit must reach before it returns: [`Ledger::set_durability`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// The disk (`fsync` on every commit).
    #[default]
    Full,
    /// The write-ahead log file (the operating system's page cache).
    Normal,
}

/// An open ledger file.
pub struct Ledger {
    conn: Connection,
    path: PathBuf,
    catalog: &'static Catalog,
    /// `INSERT` into each type's detail table, indexed like `EventType::ALL`.
    detail_insert_sql: Vec<String>,
    /// Run inside every append's transaction (see [`append_hook::AppendHook`]).
    append_hook: Option<Box<dyn append_hook::AppendHook>>,
    /// Every dedup key, for a long-running writer ([`Ledger::keep_key_filter`]).
    key_filter: Option<key_filter::KeyFilter>,
    /// Set by the background checkpoint thread when the writer should checkpoint after its next commit
    /// ([`Ledger::checkpoint_in_background`]).
    checkpoint_asked: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Set once a sync of the log failed, through this ledger's [`LogSync`] or inside a checkpoint of the background
    /// thread: from then on none of its connections copies the log into the database file, neither the background
    /// thread, nor the writer's own automatic checkpoint, nor a close (see `log_sync.rs`).
    log_sync_failed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Whether this connection's automatic checkpoint is off already, after [`Ledger::log_sync_failed`] was set.
    autocheckpoint_off: std::cell::Cell<bool>,
}

impl Ledger {
    /// Opens the ledger at `path` for writing, creating it and applying migrations as needed.
    pub fn open(path: impl AsRef<Path>) -> Result<Ledger, OpenError> {
        let path = path.as_ref().to_path_buf();
        // SQLite says only "disk I/O error" of a directory.
        if path.is_dir() {
            return Err(OpenError::IsADirectory { path });
        }
        refuse_hard_links(&path)?;
        let sqlite = |source| OpenError::Sqlite { path: path.clone(), source };
        let mut conn = Connection::open(&path).map_err(sqlite)?;
        configure(&conn).map_err(sqlite)?;
        // Before anything that writes (switching to WAL rewrites the file's header): another application's
        // database is refused untouched.
        check_version(&conn, &path)?;
        // WAL lets readers (status, reports) run while one writer appends. synchronous=FULL makes a committed
        // batch survive power loss, not only a crash of the process: the enforcement hook answers from it.
        conn.pragma_update(None, "journal_mode", "WAL").map_err(sqlite)?;
        conn.pragma_update(None, "synchronous", "FULL").map_err(sqlite)?;
        conn.pragma_update(None, "wal_autocheckpoint", WAL_AUTOCHECKPOINT_PAGES).map_err(sqlite)?;
        migrate::migrate(&mut conn).map_err(|(migration, source)| OpenError::Migration {
            path: path.clone(),
            migration,
            source,
        })?;
        Ok(Ledger::from_connection(conn, path))
    }

    /// Opens an existing ledger read-only: it must exist and be fully migrated.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Ledger, OpenError> {
        let path = path.as_ref().to_path_buf();
        if !path.exists() {
            return Err(OpenError::Missing { path });
        }
        if path.is_dir() {
            return Err(OpenError::IsADirectory { path });
        }
        refuse_hard_links(&path)?;
        let sqlite = |source| open_error(&path, source);
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
        let conn = Connection::open_with_flags(&path, flags).map_err(sqlite)?;
        configure(&conn).map_err(sqlite)?;
        match check_version(&conn, &path)? {
            // A file a writer is creating right now: its migrations are not committed yet.
            0 => Err(OpenError::Missing { path }),
            found if found < migrate::latest_version() => {
                Err(OpenError::NotMigrated { path, found, known: migrate::latest_version() })
            }
            _ => Ok(Ledger::from_connection(conn, path)),
        }
    }

    fn from_connection(conn: Connection, path: PathBuf) -> Ledger {
        let detail_insert_sql = EventType::ALL.iter().map(|t| details::insert_sql(*t)).collect();
        Ledger {
            conn,
            path,
            catalog: Catalog::builtin(),
            detail_insert_sql,
            append_hook: None,
            key_filter: None,
            checkpoint_asked: None,
            log_sync_failed: Default::default(),
            autocheckpoint_off: std::cell::Cell::new(false),
        }
    }

    /// The ledger file's path, as it was opened.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The Avro schemas the ledger decodes its payloads with.
    pub fn catalog(&self) -> &'static Catalog {
        self.catalog
    }

    /// Installs a hook run inside every later append's transaction.
    pub fn set_append_hook(&mut self, hook: Box<dyn append_hook::AppendHook>) {
        self.append_hook = Some(hook);
    }

    /// Keeps a Bloom filter of every dedup key in memory from now on (read once here, one pass over the key
    /// index; about 1.8 bytes per key, room for twice the keys held), so that appends skip the dedup probe of an
    /// event_id the ledger certainly does not hold. For a long-running writer whose events are almost all new:
    /// the hook, ingest from Kafka.
    pub fn keep_key_filter(&mut self) -> Result<(), ReadError> {
        self.key_filter = Some(key_filter::KeyFilter::load(&self.conn)?);
        Ok(())
    }

    /// Adds to the key filter (if kept) what other connections appended since: call when they may have
    /// (`PRAGMA data_version` changed) before asking [`Ledger::may_hold`]. Appends catch up by themselves.
    pub fn refresh_key_filter(&mut self) -> Result<(), ReadError> {
        let Some(filter) = self.key_filter.as_mut() else { return Ok(()) };
        let tx = self.conn.unchecked_transaction()?;
        filter.catch_up(&tx, status::read_totals(&tx)?.watermark)?;
        Ok(tx.commit()?)
    }

    /// Whether the ledger may hold an entry of `event_id`: false only when the key filter is kept and has never
    /// seen its key (as of the last append or refresh). Without a filter, always true.
    pub fn may_hold(&self, event_id: &str) -> bool {
        self.key_filter.as_ref().is_none_or(|f| f.may_hold(dedup::event_key(event_id)))
    }

    /// Commits wait for the disk (`synchronous=FULL`, the default: a committed batch survives power loss) or
    /// only for the write-ahead log's write (`NORMAL`: survives a crash of the process; the last commits before
    /// a power loss may be lost). The enforcement hook lets its operator choose (`serve --durability`).
    pub fn set_durability(&self, durability: Durability) -> Result<(), OpenError> {
        let level = match durability {
            Durability::Full => "FULL",
            Durability::Normal => "NORMAL",
        };
        self.conn
            .pragma_update(None, "synchronous", level)
            .map_err(|source| OpenError::Sqlite { path: self.path.clone(), source })
    }

    /// Writes a consistent copy of the ledger, as of now, to a new file at `path` (SQLite's `VACUUM INTO`): a
    /// compact copy that other connections may go on appending beside.
    pub fn copy_into(&self, path: &Path) -> Result<(), ReadError> {
        self.conn.execute("VACUUM INTO ?", [path.to_string_lossy()])?;
        Ok(())
    }
}

fn configure(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_handler(Some(poll_while_busy))?;
    conn.pragma_update(None, "cache_size", -CACHE_KIB)?;
    // The schema's `REFERENCES entries (seq)` hold by construction: every row referring to an entry is written
    // in the transaction that appends it, and entries are never deleted (triggers). SQLite's bundled default
    // would check each at insert, a lookup in `entries` per row (per key, at every move between dedup tiers:
    // 15% of the hook's throughput); `verify` checks them all instead (`check_references`).
    conn.pragma_update(None, "foreign_keys", false)?;
    // An append runs about 20 distinct statements (more with the hook's reads); rusqlite keeps 16 prepared by
    // default, and one more evicts another, which is then compiled again on its next use.
    conn.set_prepared_statement_cache_capacity(PREPARED_STATEMENTS);
    Ok(())
}

/// The file's schema version, refused when newer than this binary knows, or when it is 0 (no migration ran) but
/// the file already holds tables of its own: another application's SQLite database, never to be converted into
/// a ledger. Version 0 with nothing in it is a new or empty file, which a writer makes a ledger.
fn check_version(conn: &Connection, path: &Path) -> Result<i64, OpenError> {
    let sqlite = |source| open_error(path, source);
    // One statement, one snapshot: read apart, a writer creating the ledger between the two reads (its migrations
    // commit with their user_version) made a real ledger look like another application's database.
    let (found, has_objects): (i64, bool) = conn
        .query_row(
            "SELECT (SELECT user_version FROM pragma_user_version),
                    EXISTS (SELECT 1 FROM sqlite_schema WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\')",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .map_err(sqlite)?;
    let known = migrate::latest_version();
    if found > known {
        return Err(OpenError::TooNew { path: path.to_path_buf(), found, known });
    }
    if found == 0 && has_objects {
        let objects = schema_objects(conn).map_err(sqlite)?;
        return Err(OpenError::NotALedger { path: path.to_path_buf(), objects });
    }
    Ok(found)
}

/// A ledger file with more than one name is refused, for reading too: SQLite keeps the write-ahead log (`-wal`) and
/// its index (`-shm`) beside the name a database is opened by, so processes that open one file by two names use two
/// logs for one database, which corrupts it ("How To Corrupt An SQLite Database File", 2.5), and a reader through the
/// other name misses what the log holds. The process locks (`ProcessLock`) are per name too. A symbolic link is fine:
/// SQLite and the locks resolve it.
fn refuse_hard_links(path: &Path) -> Result<(), OpenError> {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(path) {
        Ok(metadata) if metadata.nlink() > 1 => {
            Err(OpenError::HardLinked { path: path.to_path_buf(), links: metadata.nlink() })
        }
        _ => Ok(()),
    }
}

/// Why SQLite could not open the ledger: a directory the user cannot write, where WAL mode needs the `-shm`
/// file even to read, is said in words (SQLite says "attempt to write a readonly database" to a reader).
fn open_error(path: &Path, source: rusqlite::Error) -> OpenError {
    match source.sqlite_error() {
        Some(e) if e.extended_code == rusqlite::ffi::SQLITE_READONLY_DIRECTORY => {
            let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
            OpenError::DirectoryNotWritable { path: path.to_path_buf(), dir: dir.to_path_buf() }
        }
        _ => OpenError::Sqlite { path: path.to_path_buf(), source },
    }
}

/// The file's own schema objects as (type, name), tables first, by name; SQLite's internal ones
/// (`sqlite_sequence`, `sqlite_autoindex_*`, ...) left out.
fn schema_objects(conn: &Connection) -> rusqlite::Result<Vec<(String, String)>> {
    let mut statement = conn.prepare(
        "SELECT type, name FROM sqlite_schema WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\'
         ORDER BY type <> 'table', type, name",
    )?;
    let rows = statement.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    rows.collect()
}

/// Microseconds since the epoch, now.
pub(crate) fn now_micros() -> i64 {
    schemas::Timestamp::now().micros()
}
