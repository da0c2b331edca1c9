//! Writers share the ledger: one that holds the write lock in a series of short transactions, pausing
//! `ledger::STEP_PAUSE` between them (an export's catch-up, reconcile's adjustments), lets a waiting writer in
//! between two of them, rather than after the whole series.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use ledger::{Batch, Ledger};

/// Steps of the stepping writer the waiting one may let pass before it gets in: "within the first steps".
const STEPS_BEFORE_IN_MAX: u32 = 50;
/// Steps the stepping writer takes at most: a liveness bound far beyond what the waiting writer's busy timeout lets
/// pass (10 s of steps of about 25 ms are 400 of them).
const STEPS_MAX: u32 = 10_000;

// Proves a writer waiting in `poll_while_busy` takes the lock within the first steps of a stepping writer, which goes
// on stepping until it has: with SQLite's own busy timeout (tries backing off to 100 ms apart) and no pause, the hook
// beside an export in steps never got the lock in 8 s, and failed its group after 10. The steps are counted, not
// timed.
#[test]
fn a_waiting_writer_gets_in_between_the_steps_of_another() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    drop(Ledger::open(&path).unwrap());
    let (holding, held) = std::sync::mpsc::sync_channel(1);
    let waiter_done = Arc::new(AtomicBool::new(false));
    let steps = Arc::new(AtomicU32::new(0));
    let stepping = std::thread::spawn({
        let (path, waiter_done, steps) = (path.clone(), waiter_done.clone(), steps.clone());
        move || {
            // A bare connection, standing for a writer in steps: it waits for the lock as SQLite's busy timeout
            // does, but the writer under test is the ledger's own.
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.busy_timeout(Duration::from_millis(ledger::BUSY_TIMEOUT_MS)).unwrap();
            while !waiter_done.load(Ordering::SeqCst) {
                let step = steps.fetch_add(1, Ordering::SeqCst);
                assert!(step < STEPS_MAX, "the waiting writer neither got in nor gave up in {STEPS_MAX} steps");
                conn.execute_batch("BEGIN IMMEDIATE").unwrap();
                if step == 0 {
                    holding.send(()).unwrap();
                }
                // A step's work: the lock is held most of the time, as by an export's catch-up.
                std::thread::sleep(Duration::from_millis(20));
                conn.execute_batch("COMMIT").unwrap();
                std::thread::sleep(ledger::STEP_PAUSE);
            }
        }
    });
    // The waiting writer starts while the first step holds the lock.
    held.recv().expect("the stepping writer took the lock");
    // An empty batch: an append's write transaction and nothing else.
    let appended = Ledger::open(&path)
        .map_err(|e| e.to_string())
        .and_then(|mut waiting| waiting.append(&Batch::default()).map_err(|e| e.to_string()));
    let steps_before = steps.load(Ordering::SeqCst);
    waiter_done.store(true, Ordering::SeqCst);
    stepping.join().unwrap();
    appended
        .unwrap_or_else(|e| panic!("the waiting writer did not get in during {steps_before} steps of another: {e}"));
    assert!(
        steps_before <= STEPS_BEFORE_IN_MAX,
        "the waiting writer got the lock only after {steps_before} steps of another"
    );
}
