//! The sync stage of the writer's group commit, at durability full. The writer commits a group without waiting
//! for the disk ([`ledger::Ledger::sync_log_apart`]) and hands its answers here; this thread syncs the ledger's
//! log and only then sends them, while the writer already decides the next group. Each sync covers every group
//! handed over before it began, so one sync answers all the groups committed while the one before ran. An answer
//! leaves only once its decision is on the disk, as when the writer synced each commit itself; what changes is
//! that the writer no longer sits idle during the sync (the MySQL binary log's group commit in stages: flush,
//! then sync, then answer).
//!
//! A failed sync is not retried: after a failed `fsync` the kernel may have dropped the pages it could not write
//! and report the next sync clean (PostgreSQL panics on one since 2018's "fsyncgate"). The groups it covered, and
//! every later request, are answered [`crate::HookError::NotDurable`] until the hook restarts and reads the ledger
//! afresh.

use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::Instant;

use ledger::LogSync;

use crate::answer::Answer;
use crate::health::Health;
use crate::stages::{self, Stage, StageTimer};

/// Committed groups waiting for a sync, at most. The writer waits when they are this many (the disk is then the
/// limit): a sync of 0.15 to 0.8 ms on the machines measured, a group of a few requests 30 us or more.
pub const GROUPS_AWAITING_SYNC_MAX: usize = 64;

/// The sync stage's thread and the queue of committed groups to it; stopped (once every group handed to it is
/// answered) when dropped.
pub struct Syncer {
    groups: Option<SyncSender<Committed>>,
    stage: Arc<SyncStage>,
    thread: Option<JoinHandle<()>>,
}

/// A committed group's answers, and when it was handed to the sync stage if its wait is timed (it recorded something).
type Committed = (Vec<Answer>, Option<Instant>);

/// Makes everything committed before it began durable: [`LogSync::sync`] (a stand-in in the tests).
pub type SyncLog = Box<dyn Fn() -> std::io::Result<()> + Send + Sync>;

impl Syncer {
    /// The sync stage of a ledger whose commits no longer sync ([`ledger::Ledger::sync_log_apart`]).
    /// A failed sync is said to `health` (`/healthz`) as it happens; each group's wait for its sync to `timer`.
    pub fn start(log: LogSync, health: Arc<Health>, timer: Option<StageTimer>) -> Result<Syncer, std::io::Error> {
        let name = format!("the ledger's log {}", log.path().display());
        Syncer::with(Box::new(move || log.sync()), name, health, timer)
    }

    fn with(
        sync: SyncLog,
        name: String,
        health: Arc<Health>,
        timer: Option<StageTimer>,
    ) -> Result<Syncer, std::io::Error> {
        let (groups, committed) = std::sync::mpsc::sync_channel(GROUPS_AWAITING_SYNC_MAX);
        let failed = OnceLock::new();
        let stage = Arc::new(SyncStage { sync, name, one_at_a_time: Mutex::new(()), failed, health, timer });
        let thread = {
            let stage = Arc::clone(&stage);
            std::thread::Builder::new().name("hook-sync".into()).spawn(move || {
                // A panic here would leave the writer handing groups to nobody: every later one is not durable, and
                // health says the hook stopped, as for the writer itself.
                let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| stage.run(&committed)));
                if let Err(panic) = ran {
                    let message = format!(
                        "the hook's sync thread stopped on a panic: {}",
                        crate::threads::panic_message(&*panic)
                    );
                    tracing::error!(error = %message, "hook: the writer stopped; every request fails until the hook restarts");
                    let _ = stage.failed.set(message.clone());
                    stage.health.writer_stopped(&message);
                }
            })?
        };
        Ok(Syncer { groups: Some(groups), stage, thread: Some(thread) })
    }

    /// Why the log could not be synced, once it could not.
    pub fn failure(&self) -> Option<&str> {
        self.stage.failed.get().map(String::as_str)
    }

    /// Sends a committed group's answers once a sync that began after its commit has returned. With requests
    /// waiting the group goes to the sync thread, and the caller (the writer) decides them meanwhile. With none
    /// it syncs on the calling thread, unless a sync is running: there is nothing to decide during the sync, and
    /// handing the group over would only add the sync thread's wake-up (through the kernel, 50 to 100 us on
    /// these machines) to its wait; but behind a running sync it would wait for that one and then its own, where
    /// the sync thread, awake, takes it right after. Answers of groups handed over earlier may leave after these:
    /// this sync covers them too, and their own follows.
    /// `recorded`: the group recorded something, and its wait for the sync is a decision's (timed).
    pub fn answer(&self, answers: Vec<Answer>, requests_waiting: bool, recorded: bool) {
        let committed = (answers, recorded.then(Instant::now));
        if !requests_waiting && let Ok(one) = self.stage.one_at_a_time.try_lock() {
            self.stage.sync(one);
            self.stage.answer(vec![committed]);
        } else {
            self.answer_after_sync(committed);
        }
    }

    fn answer_after_sync(&self, committed: Committed) {
        let groups = self.groups.as_ref().expect("the queue lives until the syncer is dropped");
        // The thread ends only when the queue closes, or if it panicked: then nothing syncs these any more.
        if let Err(returned) = groups.send(committed) {
            for answer in returned.0.0 {
                answer.not_durable("the hook's sync thread stopped").send();
            }
        }
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        drop(self.groups.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What a sync needs, on either thread.
struct SyncStage {
    sync: SyncLog,
    name: String,
    /// One sync at a time. Linux reports a failed write-back once per open file: of two syncs running together,
    /// one may see the error and the other return clean although the pages of its groups were lost.
    one_at_a_time: Mutex<()>,
    failed: OnceLock<String>,
    health: Arc<Health>,
    timer: Option<StageTimer>,
}

impl SyncStage {
    fn run(&self, committed: &Receiver<Committed>) {
        while let Ok(first) = committed.recv() {
            // Every group committed so far: one sync answers them all.
            let groups = std::iter::once(first).chain(committed.try_iter().take(GROUPS_AWAITING_SYNC_MAX)).collect();
            self.sync(self.one_at_a_time.lock().unwrap_or_else(PoisonError::into_inner));
            self.answer(groups);
        }
    }

    /// Syncs, holding the right to (the guard), unless a sync failed before.
    fn sync(&self, _one: MutexGuard<'_, ()>) {
        if self.failed.get().is_none()
            && let Err(error) = (self.sync)()
        {
            let message = format!("cannot sync {}: {error}", self.name);
            self.health.not_durable(&message);
            let _ = self.failed.set(message);
        }
    }

    fn answer(&self, groups: Vec<Committed>) {
        for (answers, handed) in groups {
            if let Some(handed) = handed {
                stages::took(self.timer.as_ref(), Stage::Sync, handed.elapsed());
            }
            for answer in answers {
                match self.failed.get() {
                    None => answer.send(),
                    Some(message) => answer.not_durable(message).send(),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc::channel;
    use std::time::Duration;

    use schemas::ReservationAction;
    use tokio::sync::oneshot;

    use super::*;
    use crate::api::Closed;
    use crate::error::HookError;

    type Reply = oneshot::Receiver<Result<Result<Closed, crate::Refusal>, HookError>>;

    /// A committed group of one closed reservation, and where its answer arrives.
    fn group(id: &str) -> (Vec<Answer>, Reply) {
        let (reply, answer) = oneshot::channel();
        let closed = Closed {
            reservation_id: id.into(),
            action: ReservationAction::COMMIT,
            amount: 1,
            reserved: 1,
            charged_above_reserved: 0,
            event_id: format!("{id}-commit"),
            replayed: false,
            fencing_token: None,
            expires_at: None,
        };
        (vec![Answer::Close(reply, Ok(Ok(closed)))], answer)
    }

    #[test]
    fn an_answer_leaves_only_once_a_sync_begun_after_its_commit_returned() {
        // Proves the stage's promise: no answer before the sync that covers it has returned.
        let (begun, sync_begun) = channel();
        let (release, released) = channel::<()>();
        let released = std::sync::Mutex::new(released);
        let sync: SyncLog = Box::new(move || {
            begun.send(()).unwrap();
            released.lock().unwrap().recv().unwrap();
            Ok(())
        });
        let syncer = Syncer::with(sync, "a gated sync".into(), Arc::default(), None).unwrap();
        let (answers, mut first) = group("r-1");
        syncer.answer(answers, true, true);
        sync_begun.recv().unwrap();
        // Handed over while the first sync runs: the first sync does not cover it.
        let (answers, mut second) = group("r-2");
        syncer.answer(answers, true, true);
        std::thread::sleep(Duration::from_millis(50));
        assert!(first.try_recv().is_err(), "no answer while its sync runs");
        release.send(()).unwrap();
        assert!(first.blocking_recv().unwrap().is_ok());
        sync_begun.recv().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert!(second.try_recv().is_err(), "the second group waits for a sync of its own");
        release.send(()).unwrap();
        assert!(second.blocking_recv().unwrap().is_ok());
    }

    #[test]
    fn after_a_failed_sync_nothing_is_answered_as_decided() {
        // Proves that a failed sync is final: the group it covered and every later group are not durable, and
        // the log is not synced again (a sync after a failed one may report clean pages the kernel dropped).
        let syncs = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&syncs);
        let sync: SyncLog = Box::new(move || {
            counted.fetch_add(1, Ordering::Relaxed);
            Err(std::io::Error::other("EIO"))
        });
        let health = Arc::new(Health::default());
        let syncer = Syncer::with(sync, "a failing disk".into(), Arc::clone(&health), None).unwrap();
        let (mut answers, first) = group("r-1");
        // A second close of r-1 in the same group, refused as already closed by the first: that close is not
        // durable, so neither is the refusal.
        let (reply, refused) = oneshot::channel();
        let by = "COMMIT".to_string();
        answers.push(Answer::Close(reply, Ok(Err(crate::Refusal::AlreadyClosed { reservation_id: "r-1".into(), by }))));
        syncer.answer(answers, true, true);
        let error = first.blocking_recv().unwrap().unwrap_err();
        assert!(matches!(error, HookError::NotDurable(ref m) if m == "cannot sync a failing disk: EIO"), "{error}");
        assert!(matches!(refused.blocking_recv().unwrap(), Err(HookError::NotDurable(_))), "the refusal too");
        assert_eq!(syncer.failure(), Some("cannot sync a failing disk: EIO"));
        let report = health.report();
        assert_eq!(report.recording, "not_durable", "said as it happens, until a restart: {report:?}");
        assert_eq!(report.last_failure.map(|f| f.message).as_deref(), Some("cannot sync a failing disk: EIO"));
        let (answers, second) = group("r-2");
        syncer.answer(answers, true, true);
        assert!(matches!(second.blocking_recv().unwrap(), Err(HookError::NotDurable(_))));
        let (answers, third) = group("r-3");
        syncer.answer(answers, false, true);
        assert!(matches!(third.blocking_recv().unwrap(), Err(HookError::NotDurable(_))), "on the writer's thread too");
        drop(syncer);
        assert_eq!(syncs.load(Ordering::Relaxed), 1);
    }
}
