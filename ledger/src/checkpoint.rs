//! Checkpoints off the writer's path. A WAL checkpoint copies committed pages from the write-ahead log into the
//! database file and (at any durability) syncs that file. Run by the committing connection, as SQLite does by
//! default (`wal_autocheckpoint`), it stalls that commit: in the enforcement hook every request waiting for
//! the group behind it waits too. [`Ledger::checkpoint_in_background`] moves the work to a thread with its own
//! connection that checkpoints `PASSIVE`ly (never waiting for, nor blocking, the writer or readers) every
//! [`CHECKPOINT_INTERVAL_MS`].
//!
//! Only a checkpoint that leaves nothing uncopied lets the log restart from its beginning (at the next write),
//! and under a steady stream of commits the thread's never does: the writer commits while it copies. So when the
//! log has grown past [`WRITER_CHECKPOINT_FRAMES`], the thread asks the writer, after checkpoints of its own (each
//! copying what was committed during the one before, until one is short) and a sync of the database file, to
//! checkpoint once right after its next commit: what is left to copy and sync is then only what was committed
//! since the thread's last checkpoint began.
//!
//! The writer's automatic checkpoint stays as the backstop, moved out to [`WRITER_BACKSTOP_FRAMES`]: at the
//! ledger's usual 10,000 frames it fired first on a large ledger (the log grew 10,000 frames in 170 ms at 8
//! clients, faster than the thread's cycle) and copied everything committed since the thread's last checkpoint,
//! in commits of 25 to 58 ms.
//!
//! Each cycle, before its checkpoint, the thread also reads the pages of the large and the sealed key tiers that
//! the writer's next moves between tiers will read ([`WARM_AHEAD_ENTRIES`]): on a large ledger they are read so
//! rarely that the operating system may have dropped them, and the writer would wait for the disk in a commit.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use crate::{Ledger, OpenError};

/// How often the background thread checkpoints. Each checkpoint syncs the database file, and at durability FULL
/// those syncs slow the writer's own (measured at one client: every 20 ms raised p99 from 1.2-1.8 ms to 1.7-3.8 ms).
pub const CHECKPOINT_INTERVAL_MS: u64 = 250;

/// Frames in the log past which the background thread asks the writer to checkpoint after its next commit: the
/// log a ledger without the thread lets grow ([`crate::WAL_AUTOCHECKPOINT_PAGES`]).
pub const WRITER_CHECKPOINT_FRAMES: i64 = crate::WAL_AUTOCHECKPOINT_PAGES;

/// The writer's automatic checkpoint while the background thread runs: only if the thread falls this far behind
/// (400 MiB of log at 4 KiB pages) does a commit copy the log itself. On a 10-million-event ledger at 8 clients
/// the thread kept the log under 28,000 frames.
pub const WRITER_BACKSTOP_FRAMES: i64 = 10 * WRITER_CHECKPOINT_FRAMES;
const _: () = assert!(WRITER_BACKSTOP_FRAMES > WRITER_CHECKPOINT_FRAMES, "the thread asks before the backstop");

/// Frames a round of the background thread may copy and still leave the writer's checkpoint short: what the
/// writer then copies is what it committed during that round.
pub const CATCH_UP_FRAMES: i64 = 1_000;

/// Rounds of one cycle of the background thread at most (each syncs the database file).
pub const CATCH_UP_ROUNDS: usize = 6;

/// The background checkpoint thread; stopped (after its current checkpoint) when dropped.
pub struct Checkpointer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Ledger {
    /// Starts a thread that checkpoints this ledger's write-ahead log every [`CHECKPOINT_INTERVAL_MS`], so that
    /// this connection's commits rarely copy pages themselves (its own automatic checkpoint moves out to
    /// [`WRITER_BACKSTOP_FRAMES`]). Keep the returned handle as long as the ledger.
    pub fn checkpoint_in_background(&mut self) -> Result<Checkpointer, OpenError> {
        let sqlite = |source| OpenError::Sqlite { path: self.path.clone(), source };
        let conn = open_checkpoint_connection(&self.path).map_err(sqlite)?;
        self.conn.pragma_update(None, "wal_autocheckpoint", WRITER_BACKSTOP_FRAMES).map_err(sqlite)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let asked = Arc::new(AtomicBool::new(false));
        self.checkpoint_asked = Some(Arc::clone(&asked));
        let log_sync_failed = Arc::clone(&self.log_sync_failed);
        let thread = std::thread::Builder::new()
            .name("ledger-checkpoint".into())
            .spawn(move || {
                let mut warmed_through = 0;
                while !stopping.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(CHECKPOINT_INTERVAL_MS));
                    // Once a sync of the log failed, its pages may be missing from the disk: copying them into
                    // the database file would corrupt the ledger at a power cut (see `log_sync.rs`).
                    if log_sync_failed.load(Ordering::Relaxed) {
                        let _ = conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true);
                        break;
                    }
                    // Before the checkpoint: its reads must not hold a snapshot while the writer's asked one runs.
                    if let Err(error) = warm_next_moves(&conn, &mut warmed_through) {
                        // Nothing is lost: the writer's moves read what they need themselves.
                        tracing::warn!(%error, "ledger: warming the next moves between key tiers failed");
                    }
                    if let Err(error) = catch_up(&conn, &asked) {
                        // A busy or interrupted checkpoint loses nothing: the pages stay in the log for the next. A
                        // failed read or sync of a file may have lost pages the kernel dropped, which the next
                        // checkpoint would not see: checkpoints stop for good, as after a failed sync of the log.
                        if is_io_failure(&error) {
                            log_sync_failed.store(true, Ordering::Relaxed);
                        }
                        tracing::warn!(%error, "ledger: a background checkpoint failed");
                        std::thread::sleep(Duration::from_secs(1));
                    }
                }
            })
            // What `std::thread::spawn` does too: a process that cannot start a thread cannot go on.
            .expect("the operating system starts a thread");
        Ok(Checkpointer { stop, thread: Some(thread) })
    }
}

/// One cycle of the background thread: a PASSIVE checkpoint (it never waits: busy, another checkpoint running,
/// is tried again next cycle). Once the log is long enough for the writer to restart it, further rounds copy what
/// the writer committed during the round before, each shorter, until a round after the first copied fewer than
/// [`CATCH_UP_FRAMES`] (or after [`CATCH_UP_ROUNDS`]); then the thread syncs the database file, and the writer
/// is asked to checkpoint after its next commit, and copies (and syncs) only what came during that last short
/// round. (What the first round copied is not known apart from what earlier cycles copied: the answer counts
/// every frame copied since the log restarted.)
fn catch_up(conn: &Connection, asked: &AtomicBool) -> rusqlite::Result<()> {
    let mut copied_before = 0;
    for _ in 0..CATCH_UP_ROUNDS {
        // Whether it was busy, the frames in the log, the frames copied into the database file so far.
        let (busy, log, copied) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
        })?;
        if busy != 0 || log < WRITER_CHECKPOINT_FRAMES {
            return Ok(());
        }
        let this_round = copied - copied_before;
        copied_before = copied;
        if this_round < CATCH_UP_FRAMES {
            break;
        }
    }
    sync_database_file(conn)?;
    asked.store(true, Ordering::Relaxed);
    Ok(())
}

/// Syncs the database file through the connection's own handle of it. A checkpoint that leaves frames uncopied
/// (the thread's always do, the writer committing meanwhile) does not sync the database file: the frames it
/// copied stay in the log until one that copies everything, so without this sync the writer's asked checkpoint
/// would sync all the pages the thread's rounds wrote since the last one. Synced here first, that sync is left only
/// the writer's pages: on a 10-million-event ledger at 8 clients (`strace`, 20 s) the writer's syncs of the
/// database file took 19.6 ms on average (30 of them, up to 31.6 ms) without this sync, 2.6 ms (29, up to 6.1 ms)
/// with it.
/// (A file of our own on the database would not do: closing it drops every POSIX lock the process holds on it.)
fn sync_database_file(conn: &Connection) -> rusqlite::Result<()> {
    use rusqlite::ffi;
    let failed = |code| rusqlite::Error::SqliteFailure(ffi::Error::new(code), Some("sync of the database file".into()));
    let mut file: *mut ffi::sqlite3_file = std::ptr::null_mut();
    // SAFETY: the handle is this open connection's, used by this thread only; SQLITE_FCNTL_FILE_POINTER writes
    // the main database's `sqlite3_file` (owned by the connection, open as long as it is) into `file`.
    let code = unsafe {
        ffi::sqlite3_file_control(
            conn.handle(),
            c"main".as_ptr(),
            ffi::SQLITE_FCNTL_FILE_POINTER,
            (&raw mut file).cast(),
        )
    };
    if code != ffi::SQLITE_OK || file.is_null() {
        return Err(failed(if code == ffi::SQLITE_OK { ffi::SQLITE_MISUSE } else { code }));
    }
    // SAFETY: `file` is the connection's open database file (not null, checked above); an open file's methods
    // are set, and `xSync` is one every VFS provides; nothing else uses the file meanwhile (the connection is
    // this thread's, between statements).
    let code = unsafe {
        match (*file).pMethods.as_ref().and_then(|methods| methods.xSync) {
            Some(sync) => sync(file, ffi::SQLITE_SYNC_NORMAL),
            None => ffi::SQLITE_MISUSE,
        }
    };
    if code != ffi::SQLITE_OK {
        return Err(failed(code));
    }
    Ok(())
}

/// Entries past the ledger's watermark whose moves between key tiers the background thread warms each cycle
/// (`dedup::warm_moves_due`): more than the writer appends in a cycle, so a move's pages are read before its
/// turn (at 20,000 decisions a second, two entries each, a 250 ms cycle is 10,000 entries).
pub const WARM_AHEAD_ENTRIES: u64 = 32_000;

/// Warms the pages the moves of the next [`WARM_AHEAD_ENTRIES`] entries will read, those not warmed in an
/// earlier cycle (`warmed_through`, the watermark warmed up to).
fn warm_next_moves(conn: &Connection, warmed_through: &mut u64) -> rusqlite::Result<()> {
    let watermark = crate::status::read_totals(conn)?.watermark;
    let ahead = watermark + WARM_AHEAD_ENTRIES;
    crate::dedup::warm_moves_due(conn, (*warmed_through).max(watermark), ahead)?;
    *warmed_through = ahead;
    Ok(())
}

fn open_checkpoint_connection(path: &Path) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(path, flags)?;
    // Checkpoints sync the database file as the ledger's commits do (FULL unless a caller lowered it; the
    // checkpoint's sync is what makes the log's pages safe to overwrite, at either level).
    conn.pragma_update(None, "synchronous", "FULL")?;
    Ok(conn)
}

impl Ledger {
    /// The checkpoint the background thread asked for, if it did: run by the writer right after a commit.
    pub(crate) fn checkpoint_if_asked(&self) {
        if self.log_sync_failed.load(Ordering::Relaxed) {
            // SQLite's automatic checkpoint at commit ignores its own failures and would copy the log later.
            if !self.autocheckpoint_off.replace(true)
                && let Err(error) = self.conn.pragma_update(None, "wal_autocheckpoint", 0)
            {
                tracing::error!(%error, "ledger: turning the automatic checkpoint off after a failed sync");
            }
            return;
        }
        if self.checkpoint_asked.as_ref().is_some_and(|asked| asked.swap(false, Ordering::Relaxed)) {
            // The commit before it stands either way; a failure only leaves the pages in the log, for the next
            // checkpoint (the thread's, or the writer's automatic one).
            if let Err(error) = self.conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
                if is_io_failure(&error) {
                    self.log_sync_failed.store(true, Ordering::Relaxed);
                }
                tracing::warn!(%error, "ledger: a checkpoint after a commit failed");
            }
        }
    }
}

/// Whether a checkpoint failed on the disk (SQLite's I/O error family: a failed read, write or sync), as opposed to
/// finding the ledger busy.
fn is_io_failure(error: &rusqlite::Error) -> bool {
    error.sqlite_error_code() == Some(rusqlite::ErrorCode::SystemIoFailure)
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Batch;
    use crate::dedup::tests::usage;

    /// The database file's own header says how many pages it holds (bytes 28..32); a checkpoint grows it.
    fn database_pages(path: &std::path::Path) -> u32 {
        let bytes = std::fs::read(path).unwrap();
        bytes.get(28..32).map_or(0, |b| u32::from_be_bytes(b.try_into().unwrap()))
    }

    fn batch(from: usize) -> Batch {
        Batch { events: (from..from + 100).map(|i| usage(&format!("u-{i}"))).collect(), ..Batch::default() }
    }

    /// A new ledger in `dir` whose writer never checkpoints by itself, so that only what a test runs copies pages.
    fn ledger_without_autocheckpoint(dir: &tempfile::TempDir) -> (std::path::PathBuf, Ledger) {
        let path = dir.path().join("ledger.db");
        let ledger = Ledger::open(&path).unwrap();
        ledger.conn.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        (path, ledger)
    }

    // Proves that the writer checkpoints right after a commit when the background thread asked it to, once, and
    // not otherwise.
    #[test]
    fn the_writer_checkpoints_after_its_commit_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut ledger) = ledger_without_autocheckpoint(&dir);
        let asked = Arc::new(AtomicBool::new(false));
        ledger.checkpoint_asked = Some(Arc::clone(&asked));
        ledger.append(&batch(0)).unwrap();
        let pages_before = database_pages(&path);
        ledger.append(&batch(100)).unwrap();
        assert_eq!(database_pages(&path), pages_before, "not asked: the pages stay in the log");
        asked.store(true, Ordering::Relaxed);
        ledger.append(&batch(200)).unwrap();
        assert!(database_pages(&path) > pages_before, "asked: the commit's pages reached the database file");
        assert!(!asked.load(Ordering::Relaxed), "the request is taken once");
        assert_eq!(ledger.status().unwrap().events_recorded, 300);
    }

    // Proves that a cycle of the background thread asks the writer for a checkpoint only once the log is long
    // enough to restart, and then only after its own rounds have copied the whole log (no writer runs meanwhile).
    #[test]
    fn the_thread_asks_the_writer_once_its_rounds_caught_up() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut ledger) = ledger_without_autocheckpoint(&dir);
        let conn = open_checkpoint_connection(&path).unwrap();
        let asked = AtomicBool::new(false);
        // The log's frames from its size (a checkpoint to count them would let the next append restart it): a
        // 32-byte header, then each frame a 24-byte header and a page.
        let page_size: u64 = ledger.conn.query_row("PRAGMA page_size", [], |r| r.get(0)).unwrap();
        let wal = dir.path().join("ledger.db-wal");
        let log_frames = || ((std::fs::metadata(&wal).unwrap().len().saturating_sub(32)) / (page_size + 24)) as i64;
        ledger.append(&batch(0)).unwrap();
        catch_up(&conn, &asked).unwrap();
        assert!(!asked.load(Ordering::Relaxed), "a short log is left to the thread");
        let mut from = 100;
        while log_frames() < WRITER_CHECKPOINT_FRAMES {
            ledger.append(&batch(from)).unwrap();
            from += 100;
        }
        let pages_before = database_pages(&path);
        catch_up(&conn, &asked).unwrap();
        assert!(asked.load(Ordering::Relaxed), "a long log: the writer is asked to restart it");
        assert!(database_pages(&path) >= pages_before);
        let (log, copied): (i64, i64) =
            conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| Ok((r.get(1)?, r.get(2)?))).unwrap();
        assert_eq!(log, copied, "the thread's rounds left nothing for the writer to copy");
    }

    // Proves that each cycle warms the moves of the entries from the watermark (or from where the last cycle
    // warmed up to, if further) to `WARM_AHEAD_ENTRIES` past it.
    #[test]
    fn each_cycle_warms_the_moves_ahead_of_the_watermark() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut ledger) = ledger_without_autocheckpoint(&dir);
        let conn = open_checkpoint_connection(&path).unwrap();
        let mut warmed_through = 0;
        ledger.append(&batch(0)).unwrap();
        warm_next_moves(&conn, &mut warmed_through).unwrap();
        assert_eq!(warmed_through, 100 + WARM_AHEAD_ENTRIES);
        ledger.append(&batch(100)).unwrap();
        warm_next_moves(&conn, &mut warmed_through).unwrap();
        assert_eq!(warmed_through, 200 + WARM_AHEAD_ENTRIES);
    }

    // Proves that starting the thread moves the writer's own automatic checkpoint out to the backstop (past the log
    // length at which the thread asks the writer to checkpoint, asserted where the constants are).
    #[test]
    fn the_thread_leaves_the_writer_its_automatic_checkpoint_as_a_backstop() {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = Ledger::open(dir.path().join("ledger.db")).unwrap();
        let autocheckpoint =
            |ledger: &Ledger| -> i64 { ledger.conn.query_row("PRAGMA wal_autocheckpoint", [], |r| r.get(0)).unwrap() };
        assert_eq!(autocheckpoint(&ledger), crate::WAL_AUTOCHECKPOINT_PAGES);
        let _checkpointer = ledger.checkpoint_in_background().unwrap();
        assert_eq!(autocheckpoint(&ledger), WRITER_BACKSTOP_FRAMES);
    }

    // Proves the background thread copies committed pages into the database file without the writer's help.
    #[test]
    fn the_background_thread_checkpoints_what_the_writer_commits() {
        let dir = tempfile::tempdir().unwrap();
        let (path, mut ledger) = ledger_without_autocheckpoint(&dir);
        ledger.append(&batch(0)).unwrap();
        let database_pages = || database_pages(&path);
        let pages_before = database_pages();
        let checkpointer = ledger.checkpoint_in_background().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::time::Instant::now() < deadline && database_pages() == pages_before {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(database_pages() > pages_before, "the database file grew by the checkpointed pages");
        drop(checkpointer);
        assert_eq!(ledger.status().unwrap().events_recorded, 100);
    }
}
