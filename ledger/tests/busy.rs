//! Writers share the ledger: one that holds the write lock in a series of short transactions, pausing
//! `ledger::STEP_PAUSE` between them (an export's catch-up, reconcile's adjustments), lets a waiting writer in
//! between two of them, rather than after the whole series.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use ledger::{Batch, Ledger};

// Proves a writer waiting in `poll_while_busy` takes the lock within the first steps of a stepping writer: with
// SQLite's own busy timeout (tries backing off to 100 ms apart) and no pause, the hook beside an export in steps
// never got the lock in 8 s, and failed its group after 10.
#[test]
fn a_waiting_writer_gets_in_between_the_steps_of_another() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    drop(Ledger::open(&path).unwrap());
    const STEPS: u32 = 100;
    let done = Arc::new(AtomicU32::new(0));
    let stepping = std::thread::spawn({
        let (path, done) = (path.clone(), done.clone());
        move || {
            // A bare connection, standing for a writer in steps: it waits for the lock as SQLite's busy timeout
            // does, but the writer under test is the ledger's own.
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.busy_timeout(Duration::from_millis(ledger::BUSY_TIMEOUT_MS)).unwrap();
            for _ in 0..STEPS {
                conn.execute_batch("BEGIN IMMEDIATE").unwrap();
                std::thread::sleep(Duration::from_millis(20));
                conn.execute_batch("COMMIT").unwrap();
                done.fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(ledger::STEP_PAUSE);
            }
        }
    });
    while done.load(Ordering::SeqCst) == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    // An empty batch: an append's write transaction and nothing else.
    let mut waiting = Ledger::open(&path).unwrap();
    waiting.append(&Batch::default()).unwrap();
    let steps_before = done.load(Ordering::SeqCst);
    stepping.join().unwrap();
    assert!(steps_before < STEPS / 2, "the waiting writer got the lock only after {steps_before} of {STEPS} steps");
}
