//! The deliverer: a thread of a server (`serve`) that delivers the ledger's pending deliveries every
//! [`PASS_INTERVAL_MS`], in ledger order, and records each attempt's outcome in the ledger before the next.
//!
//! A delivery is settled when an attempt is answered 2xx (DELIVERED) or the [`ATTEMPTS_MAX`]th fails (GIVEN_UP);
//! a failed one is retried [`retry_delay`] later, under the same `webhook-id`, signed afresh (a receiver refuses a
//! timestamp older than five minutes). What is recorded is where a restart resumes: a delivery recorded as delivered is
//! never sent again, and one sent but not recorded (a crash in between) is sent again under its id, which the
//! receiver deduplicates by: at least once to the receiver, once per id.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

use ledger::webhooks::{Attempt, Outcome, PendingDelivery};
use ledger::{Ledger, ProcessLock};
use schemas::Timestamp;

use crate::message;
use crate::metrics::WebhookMetrics;

/// How often the thread looks for deliveries due: alerts are warnings for people, half a second late is on time.
pub const PASS_INTERVAL_MS: u64 = 500;
/// Deliveries attempted in one pass at most, one after the other: a pass ends and the next reads afresh (and a stop
/// waits for at most this many requests, each bounded by [`REQUEST_TIMEOUT_MS`]).
pub const DELIVERIES_PER_PASS: usize = 16;
/// Pending deliveries read in one pass at most, oldest first, due or waiting for their retry. More than this waiting
/// (a receiver down while thousands of alerts came) delays the newer ones until the older settle.
pub const PENDING_READ_MAX: u64 = 1_024;
/// How long one attempt may take, connecting and answering included: Standard Webhooks' senders (Svix) give 15 s;
/// a receiver should answer at once and work afterwards.
pub const REQUEST_TIMEOUT_MS: u64 = 10_000;
/// The wait before the first retry (`serve --webhook-retry-base-ms`); each next one doubles it.
pub const RETRY_BASE_MS: u64 = 5_000;
/// The longest wait between two attempts: an hour, as Svix's schedule's later retries.
pub const RETRY_DELAY_MAX_MS: u64 = 3_600_000;
/// Attempts of a delivery at most; the last failed, it is GIVEN_UP. With [`RETRY_BASE_MS`]: 5 s doubling to
/// 2,560 s (about 85 minutes in all), then hourly: the last attempt about 8.5 hours after the first, a working day's
/// outage of a receiver.
pub const ATTEMPTS_MAX: u32 = 18;

/// The wait after the `attempts_made`th failed attempt: `base_ms` doubled for each attempt after the first, at most
/// [`RETRY_DELAY_MAX_MS`].
pub fn retry_delay(attempts_made: u32, base_ms: u64) -> Duration {
    let doublings = attempts_made.saturating_sub(1).min(32);
    let delay = base_ms.saturating_mul(1u64 << doublings).min(RETRY_DELAY_MAX_MS);
    Duration::from_millis(delay)
}

/// How the deliverer retries. An `https://` endpoint's certificate is verified against the system's roots: receivers
/// are the tenants', not the deployment's, so `--ca-file` (a private authority of the cluster) does not apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliverySettings {
    /// The wait before the first retry, in milliseconds ([`RETRY_BASE_MS`]).
    pub retry_base_ms: u64,
}

impl Default for DeliverySettings {
    fn default() -> DeliverySettings {
        DeliverySettings { retry_base_ms: RETRY_BASE_MS }
    }
}

/// Starting the deliverer failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The ledger could not be opened.
    #[error(transparent)]
    Open(#[from] ledger::OpenError),
    /// The operating system refused a thread.
    #[error("cannot start the webhook deliverer's thread")]
    Spawn(#[source] std::io::Error),
}

/// The deliverer's thread.
#[derive(Debug)]
pub struct Deliverer {
    name: String,
    /// Dropped to stop the thread: it waits on the other end between passes.
    stop: mpsc::Sender<()>,
    thread: JoinHandle<()>,
}

impl Deliverer {
    /// Starts delivering the alerts of the ledger at `ledger_path` to the endpoints it records, through a connection
    /// of its own. One deliverer per ledger: a pass is skipped while another process holds the ledger's `webhooks`
    /// lock, and the lock is kept once taken. Its log lines start with `name`.
    pub fn spawn(
        name: &str,
        ledger_path: PathBuf,
        settings: DeliverySettings,
        metrics: Arc<WebhookMetrics>,
    ) -> Result<Deliverer, StartError> {
        let ledger = Ledger::open(&ledger_path)?;
        let trust = trust::Trust::system();
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .tls_config(trust.tls_config())
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(Duration::from_millis(REQUEST_TIMEOUT_MS)))
            .build()
            .into();
        let (stop, stopping) = mpsc::channel::<()>();
        let passes = Passes { name: name.to_string(), ledger_path, ledger, agent, trust, settings, metrics, after: 0 };
        let thread = std::thread::Builder::new()
            .name("webhooks".into())
            .spawn(move || passes.run(&stopping))
            .map_err(StartError::Spawn)?;
        Ok(Deliverer { name: name.to_string(), stop, thread })
    }

    /// Stops the thread after the delivery it is in, and waits for it.
    pub fn stop(self) {
        drop(self.stop);
        if self.thread.join().is_err() {
            tracing::error!("{}: the webhook deliverer panicked", self.name);
        }
    }
}

struct Passes {
    name: String,
    ledger_path: PathBuf,
    ledger: Ledger,
    agent: ureq::Agent,
    trust: trust::Trust,
    settings: DeliverySettings,
    metrics: Arc<WebhookMetrics>,
    /// Every alert up to this entry is settled for every endpoint: a pass reads after it.
    after: u64,
}

/// What an attempt was answered.
struct Answered {
    status: Option<u16>,
    error: Option<String>,
}

impl Passes {
    fn run(mut self, stopping: &mpsc::Receiver<()>) {
        let stopped = || matches!(stopping.try_recv(), Err(mpsc::TryRecvError::Disconnected));
        let mut lock: Option<ProcessLock> = None;
        loop {
            if lock.is_none() {
                lock = ProcessLock::acquire(&self.ledger_path, "webhooks").ok();
            }
            if lock.is_some()
                && let Err(error) = self.pass(&stopped)
            {
                tracing::error!(error = %ledger::causes(error.as_ref()), "{}: webhooks: a pass failed", self.name);
            }
            match stopping.recv_timeout(Duration::from_millis(PASS_INTERVAL_MS)) {
                Err(RecvTimeoutError::Timeout) => {}
                _ => return,
            }
        }
    }

    /// Attempts the deliveries due, up to [`DELIVERIES_PER_PASS`], oldest alert first.
    fn pass(&mut self, stopped: &dyn Fn() -> bool) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let until = self.ledger.last_alert_seq()?;
        let pending = self.ledger.webhook_deliveries_pending((self.after, until), PENDING_READ_MAX)?;
        self.after = match pending.first() {
            Some(first) => first.alert_seq - 1,
            None => until,
        };
        let now = Timestamp::now();
        let due = pending.iter().filter(|d| d.next_attempt_at.is_none_or(|at| at <= now));
        for delivery in due.take(DELIVERIES_PER_PASS) {
            if stopped() {
                break;
            }
            self.deliver(delivery)?;
        }
        Ok(())
    }

    /// One attempt of `delivery`, recorded before the next.
    fn deliver(&mut self, delivery: &PendingDelivery) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        let Some(alert) = self.ledger.alert_at(delivery.alert_seq)? else {
            return Ok(());
        };
        let webhook_id = message::webhook_id(&alert.alert_id, &delivery.tenant, &delivery.endpoint_id);
        let body = message::body(&alert);
        let answered = self.post(delivery, &webhook_id, &body);
        let attempt = delivery.attempts.saturating_add(1);
        let attempted_at = Timestamp::now();
        let outcome = match answered.status {
            Some(status) if (200..300).contains(&status) => Outcome::Delivered,
            _ if attempt >= ATTEMPTS_MAX => Outcome::GivenUp,
            _ => Outcome::Failed,
        };
        let next_attempt_at = (outcome == Outcome::Failed).then(|| {
            let delay = retry_delay(attempt, self.settings.retry_base_ms);
            Timestamp(attempted_at.micros().saturating_add(i64::try_from(delay.as_micros()).unwrap_or(i64::MAX)))
        });
        let recorded = Attempt {
            alert_seq: delivery.alert_seq,
            alert_id: alert.alert_id.clone(),
            kind: alert.kind.symbol().to_string(),
            tenant: delivery.tenant.clone(),
            endpoint_id: delivery.endpoint_id.clone(),
            webhook_id,
            attempt,
            outcome,
            status: answered.status,
            error: answered.error,
            attempted_at,
            next_attempt_at,
        };
        self.ledger.record_webhook_attempt(&recorded)?;
        self.metrics.attempted(outcome);
        self.say(&recorded);
        Ok(())
    }

    /// POSTs `body`, signed now; what was answered, or why nothing was.
    fn post(&self, delivery: &PendingDelivery, webhook_id: &str, body: &[u8]) -> Answered {
        let timestamp_s = Timestamp::now().micros().div_euclid(1_000_000);
        let signature = match message::signature(&delivery.secret, webhook_id, timestamp_s, body) {
            Ok(signature) => signature,
            Err(error) => return Answered { status: None, error: Some(ledger::causes(&error)) },
        };
        let sent = self
            .agent
            .post(&delivery.url)
            .header("content-type", "application/json")
            .header(message::HEADER_ID, webhook_id)
            .header(message::HEADER_TIMESTAMP, timestamp_s.to_string())
            .header(message::HEADER_SIGNATURE, signature)
            .send(body);
        match sent {
            Ok(response) => {
                let status = response.status().as_u16();
                let error = (!(200..300).contains(&status)).then(|| format!("answered {status}"));
                Answered { status: Some(status), error }
            }
            Err(error) => {
                let error = self.trust.explain(&error).unwrap_or_else(|| error.to_string());
                Answered { status: None, error: Some(error) }
            }
        }
    }

    /// A line per attempt: delivered at info, failed at warn, given up at error. The URL is not said (it may hold a
    /// token of the receiver's); the endpoint's id names it.
    fn say(&self, a: &Attempt) {
        let name = &self.name;
        let (tenant, endpoint_id, webhook_id) = (a.tenant.as_str(), a.endpoint_id.as_str(), a.webhook_id.as_str());
        let (attempt, error) = (a.attempt, a.error.as_deref().unwrap_or(""));
        match a.outcome {
            Outcome::Delivered => {
                tracing::info!(tenant, endpoint_id, webhook_id, attempt, "{name}: webhooks: alert delivered");
            }
            Outcome::Failed => tracing::warn!(
                tenant,
                endpoint_id,
                webhook_id,
                attempt,
                error,
                "{name}: webhooks: a delivery failed; it is retried"
            ),
            Outcome::GivenUp => tracing::error!(
                tenant,
                endpoint_id,
                webhook_id,
                attempt,
                error,
                "{name}: webhooks: a delivery was given up"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves the schedule: the base, doubling, capped at an hour, and where the last attempt falls.
    #[test]
    fn retries_double_up_to_an_hour() {
        let waits: Vec<u64> = (1..ATTEMPTS_MAX).map(|n| retry_delay(n, RETRY_BASE_MS).as_secs()).collect();
        assert_eq!(&waits[..4], [5, 10, 20, 40]);
        assert_eq!(waits[9], 2_560);
        assert!(waits[10..].iter().all(|w| *w == 3_600));
        let total_s: u64 = waits.iter().sum();
        assert_eq!(total_s, 5 * 1023 + 7 * 3_600);
        assert_eq!(retry_delay(u32::MAX, u64::MAX), Duration::from_millis(RETRY_DELAY_MAX_MS));
    }
}
