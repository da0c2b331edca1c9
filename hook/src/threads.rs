//! What the hook's threads share: waiting for an answer by polling before sleeping, and saying what a panic said.

use std::time::{Duration, Instant};

/// Polls `ready` until it answers or `time` has passed, yielding the core between polls to any other thread
/// ready to run on it.
pub(crate) fn poll_for<T>(time: Duration, mut ready: impl FnMut() -> Option<T>) -> Option<T> {
    if time.is_zero() {
        return ready();
    }
    let until = Instant::now() + time;
    loop {
        if let Some(value) = ready() {
            return Some(value);
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::yield_now();
    }
}

/// What a panic said, for the log and `/healthz`.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(message), _) => message,
        (_, Some(message)) => message,
        _ => "(no message)",
    }
}
