//! systemd's service notification for a `Type=notify` unit (`packaging/quota-ledger.service`): `READY=1` once the
//! server listens, so that units ordered after it start against a server that answers; `WATCHDOG=1` at half the
//! unit's `WatchdogSec=` while the hook records, so that systemd restarts a server whose runtime hung or whose
//! recording `/healthz` answers 503 for (a failed sync of the log, a stopped writer); `STOPPING=1` when it stops.
//! Outside systemd (`NOTIFY_SOCKET` unset) each is nothing.

use std::time::Duration;

use sd_notify::NotifyState;

use crate::hooks::Hooks;

/// What `/healthz` answers 503 for: a restart is what ends it, so the watchdog stops being fed.
const UNHEALTHY: [&str; 2] = ["not_durable", "stopped"];

/// The server listens: `READY=1`, and the watchdog fed from now on when the unit asks for one.
pub(crate) fn ready(hooks: &Hooks) {
    notify(NotifyState::Ready);
    if let Some(interval) = watchdog_interval() {
        let every = (interval / 2).max(Duration::from_millis(1));
        let hooks = hooks.clone();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            loop {
                ticks.tick().await;
                let (recording, _) = hooks.health();
                if UNHEALTHY.contains(&recording) {
                    tracing::error!(
                        recording,
                        "serve: the hook's recording is unhealthy; no longer feeding systemd's watchdog, which \
                         restarts the server"
                    );
                    return;
                }
                notify(NotifyState::Watchdog);
            }
        });
    }
}

/// The server stops (a signal, or its writer stopped): `STOPPING=1`.
pub(crate) fn stopping() {
    notify(NotifyState::Stopping);
}

/// The unit's `WatchdogSec=`, as systemd passes it: `WATCHDOG_USEC`, for this process when `WATCHDOG_PID` names it or
/// is absent (libsystemd's `sd_watchdog_enabled` reads them so; the crate's own reader wants `WATCHDOG_PID` always).
fn watchdog_interval() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok().filter(|usec| *usec > 0)?;
    match std::env::var("WATCHDOG_PID") {
        Ok(pid) if pid.parse::<u32>().ok() != Some(std::process::id()) => None,
        _ => Some(Duration::from_micros(usec)),
    }
}

fn notify(state: NotifyState<'_>) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    if let Err(error) = sd_notify::notify(false, &[state]) {
        tracing::warn!(%error, "serve: could not notify systemd through NOTIFY_SOCKET");
    }
}
