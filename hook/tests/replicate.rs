//! Durability replicated: a group's events are published before they are recorded; a publish that fails records
//! nothing, and a fenced publisher makes the hook answer nothing more.

use std::sync::{Arc, Mutex};

use hook::{Hook, HookError, HookSettings, Replicate, ReplicateError, Request, Stage, StageTimer};
use schemas::{Event, Who};

/// Publishes into a shared list, or fails as told.
struct Publisher {
    published: Arc<Mutex<Vec<Event>>>,
    fail: Arc<Mutex<Option<ReplicateError>>>,
}

impl Replicate for Publisher {
    fn replicate(&mut self, events: &[Event]) -> Result<(), ReplicateError> {
        if let Some(error) = self.fail.lock().unwrap().clone() {
            return Err(error);
        }
        self.published.lock().unwrap().extend_from_slice(events);
        Ok(())
    }
}

fn ask(key: &str) -> Request {
    Request::one(Who::tenant("org-42"), "requests", 1, key)
}

// Proves the events answered are the events published, that an unavailable broker fails the group without recording
// it, and that once fenced the hook answers nothing for the shard, while the ledger holds only what was published.
#[test]
fn what_is_answered_was_published_first() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shard.db");
    let published = Arc::new(Mutex::new(Vec::new()));
    let fail = Arc::new(Mutex::new(None));
    let publisher = Publisher { published: Arc::clone(&published), fail: Arc::clone(&fail) };
    let stages = Arc::new(Mutex::new(Vec::new()));
    let heard = Arc::clone(&stages);
    let timer = StageTimer::new(move |stage, _| heard.lock().unwrap().push(stage));
    let settings = HookSettings { stages: Some(timer), ..HookSettings::default() };
    let hook = Hook::start_replicated(&path, settings, Some(Box::new(publisher))).unwrap();

    assert!(hook.check(ask("k-1")).unwrap().allowed());
    let kinds: Vec<&str> = published.lock().unwrap().iter().map(|e| e.event_type().name()).collect();
    assert_eq!(kinds, ["DecisionEvent", "UsageEvent"], "the decision and its usage, before the answer");

    *fail.lock().unwrap() = Some(ReplicateError::Unavailable("timed out".into()));
    assert!(matches!(hook.check(ask("k-2")), Err(HookError::NotReplicated(_))));
    *fail.lock().unwrap() = None;
    assert!(hook.check(ask("k-2")).unwrap().allowed(), "the next group tries again, and k-2 was never decided");

    *fail.lock().unwrap() = Some(ReplicateError::Fenced("epoch 3 is older than 4".into()));
    assert!(matches!(hook.check(ask("k-3")), Err(HookError::Fenced(_))));
    *fail.lock().unwrap() = None;
    assert!(matches!(hook.check(ask("k-4")), Err(HookError::Fenced(_))), "fenced is final");
    assert!(matches!(hook.check(ask("k-1")), Err(HookError::Fenced(_))), "replays too: the owner answers them");

    let stopped = hook.stopped();
    drop(hook);
    assert!(stopped.wait(std::time::Duration::from_secs(10)));
    let ledger = ledger::Ledger::open_read_only(&path).unwrap();
    assert_eq!(ledger.status().unwrap().events_recorded, 4, "k-1 and k-2, each a decision and its usage");
    assert_eq!(published.lock().unwrap().len(), 4);
    assert_eq!(ledger.outbox_status().unwrap().enqueued, 0, "published already: nothing for the outbox");
    // Publishes timed: k-1, k-2 failed, k-2, k-3 fenced (k-4 and the replay fail before any publish); commits: k-1 and
    // k-2 only.
    let stages = stages.lock().unwrap();
    let count = |stage| stages.iter().filter(|s| **s == stage).count();
    assert_eq!((count(Stage::Replicate), count(Stage::GroupCommit)), (4, 2), "{stages:?}");
}
