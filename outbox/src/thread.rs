//! The publisher thread of a process that runs for long (`serve --brokers`): the outbox published every
//! [`PUBLISH_INTERVAL_MS`], through one [`Publisher`] kept from pass to pass, and what the last pass saw kept for a
//! health check. Each pass also offers the ledger's head to a checkpoint publisher ([`kafka::checkpoints`]): the
//! server's ledger is checkpointed on `quota.checkpoints` at least every 10 s while it grows.

use std::path::PathBuf;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Serialize;

use crate::{Outbox, OutboxFormat, OutboxPublishError, OutboxTopics, Publisher};

/// How often the thread publishes the outbox.
pub const PUBLISH_INTERVAL_MS: u64 = 1_000;
/// How long one pass may retry a broker that does not acknowledge: a few intervals, so that a pass through an
/// outage ends and the next one starts afresh (and a stop waits for at most this).
const PASS_TIMEOUT_MS: u64 = PUBLISH_INTERVAL_MS * 5;

/// What the outbox looked like at the thread's last pass; `serve`'s `/healthz` shows it. A broker away leaves
/// `serve`'s status "ok": the hook decides without it by design, and a liveness probe must not restart a server for
/// it; the pending entries and the error say how far behind Kafka is, and why.
#[derive(Debug, Clone, Serialize)]
pub struct OutboxHealth {
    /// Entries no broker has acknowledged yet.
    pub pending: u64,
    /// When they were counted (RFC 3339, UTC).
    pub as_of: String,
    /// Why entries wait: what the broker or librdkafka said in that pass, or the schema registry in the Confluent wire
    /// format; null when it published all it sent.
    pub last_error: Option<String>,
    /// When the oldest entry still waiting was recorded (RFC 3339, UTC); null when none waits.
    pub oldest_pending_at: Option<String>,
}

impl OutboxHealth {
    fn now(pending: u64, last_error: Option<String>) -> OutboxHealth {
        let as_of = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        OutboxHealth { pending, as_of, last_error, oldest_pending_at: None }
    }

    /// With the time the oldest pending entry was recorded, when one waits.
    fn oldest(mut self, outbox: &dyn crate::Outbox) -> OutboxHealth {
        if self.pending > 0
            && let Ok(Some(micros)) = outbox.oldest_pending_at()
        {
            self.oldest_pending_at = chrono::DateTime::from_timestamp_micros(micros)
                .map(|at| at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
        }
        self
    }
}

/// Where a [`PublisherThread`] leaves what it saw in its last pass; cloned for each reader.
#[derive(Debug, Clone)]
pub struct HealthWatch(Arc<Mutex<OutboxHealth>>);

impl HealthWatch {
    /// The outbox as of the last pass.
    pub fn latest(&self) -> OutboxHealth {
        self.0.lock().expect("never poisoned: no code panics holding it").clone()
    }

    fn set(&self, health: OutboxHealth) {
        *self.0.lock().expect("never poisoned: no code panics holding it") = health;
    }
}

/// Starting the publisher thread failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The producer could not be created, or the outbox not read.
    #[error(transparent)]
    Publish(#[from] OutboxPublishError),
    /// The operating system refused a thread.
    #[error("cannot start the outbox publisher's thread")]
    Spawn(#[source] std::io::Error),
}

/// The outbox's publisher thread, and where it leaves what it saw in its last pass.
#[derive(Debug)]
pub struct PublisherThread {
    health: HealthWatch,
    /// The process the thread publishes for, the first word of its log lines (`serve`).
    name: String,
    /// Dropped to stop the thread: it waits on the other end between passes.
    stop: mpsc::Sender<()>,
    thread: JoinHandle<()>,
}

impl PublisherThread {
    /// Starts publishing `outbox` (pending entries read and acknowledgements recorded through it) to `brokers` in
    /// `format` every [`PUBLISH_INTERVAL_MS`], on contract §2's default topics. One publisher per ledger (a
    /// `reconcile --brokers` publishes the outbox too): a pass is skipped while another process holds the ledger's
    /// publisher lock, and the lock is kept once taken. Its log lines start with `name`.
    pub fn spawn(
        name: &str,
        ledger_path: PathBuf,
        brokers: &str,
        overrides: &[(String, String)],
        format: OutboxFormat,
        outbox: impl Outbox + Send + 'static,
    ) -> Result<PublisherThread, StartError> {
        let timeout = Duration::from_millis(PASS_TIMEOUT_MS);
        let publisher = Publisher::new(brokers, overrides, format, timeout)?;
        let pending = outbox.pending_count().map_err(OutboxPublishError::Read)?;
        let health = HealthWatch(Arc::new(Mutex::new(OutboxHealth::now(pending, None))));
        let (stop, stopping) = mpsc::channel::<()>();
        let checkpoints = Checkpoints::start(name, &ledger_path, brokers, overrides);
        let passes = Passes {
            name: name.to_string(),
            ledger_path,
            publisher,
            outbox,
            health: health.clone(),
            timeout,
            checkpoints,
        };
        let thread = std::thread::Builder::new()
            .name("outbox".into())
            .spawn(move || passes.run(stopping))
            .map_err(StartError::Spawn)?;
        Ok(PublisherThread { health, name: name.to_string(), stop, thread })
    }

    /// Where the thread leaves what it saw in its last pass.
    pub fn health(&self) -> HealthWatch {
        self.health.clone()
    }

    /// Stops the thread after the pass it is in (a pass waits for the broker 5 s at most), and waits for it.
    pub fn stop(self) {
        drop(self.stop);
        if self.thread.join().is_err() {
            tracing::error!("{}: the outbox publisher panicked", self.name);
        }
    }
}

/// The thread's side: the passes, one every [`PUBLISH_INTERVAL_MS`].
struct Passes<O> {
    name: String,
    ledger_path: PathBuf,
    publisher: Publisher,
    outbox: O,
    health: HealthWatch,
    timeout: Duration,
    checkpoints: Option<Checkpoints>,
}

/// The ledger's head, read through a connection of the thread's own, offered to a checkpoint publisher.
struct Checkpoints {
    reader: ledger::Ledger,
    publisher: kafka::checkpoints::CheckpointPublisher,
}

impl Checkpoints {
    /// `None`, said on stderr, when the ledger or the producer cannot be opened: the outbox is published all the same.
    fn start(
        name: &str,
        ledger_path: &std::path::Path,
        brokers: &str,
        overrides: &[(String, String)],
    ) -> Option<Checkpoints> {
        let started = ledger::Ledger::open_read_only(ledger_path).map_err(|e| ledger::causes(&e)).and_then(|reader| {
            let ledger_id = reader.ledger_id().map_err(|e| ledger::causes(&e))?;
            let publisher = kafka::checkpoints::CheckpointPublisher::new(name, brokers, overrides, &ledger_id)
                .map_err(|e| e.to_string())?;
            Ok(Checkpoints { reader, publisher })
        });
        started.map_err(|error| tracing::warn!(%error, "{name}: no checkpoints will be published")).ok()
    }

    /// Offers the head now; a head that cannot be read is skipped (the next pass tries again).
    fn offer(&mut self) {
        if let Ok(head) = self.reader.head() {
            self.publisher.offer(head.seq, &head.hash_hex());
        }
    }

    /// Publishes the last head, if it moved since the last checkpoint.
    fn finish(self) {
        if let Ok(head) = self.reader.head() {
            self.publisher.finish(head.seq, &head.hash_hex());
        }
    }
}

impl<O: Outbox> Passes<O> {
    /// Publishes until `stopping` says to stop (its sender dropped), then the last checkpoint.
    fn run(mut self, stopping: mpsc::Receiver<()>) {
        self.passes(stopping);
        if let Some(checkpoints) = self.checkpoints.take() {
            checkpoints.finish();
        }
    }

    fn passes(&mut self, stopping: mpsc::Receiver<()>) {
        // The pause between passes; false once the publisher is told to stop.
        let pause = || {
            matches!(stopping.recv_timeout(Duration::from_millis(PUBLISH_INTERVAL_MS)), Err(RecvTimeoutError::Timeout))
        };
        let topics = OutboxTopics::defaults();
        let mut said = kafka::Said::default();
        let mut lock: Option<ledger::ProcessLock> = None;
        loop {
            // Whoever holds the publisher lock, this server's ledger is checkpointed.
            if let Some(checkpoints) = self.checkpoints.as_mut() {
                checkpoints.offer();
            }
            if lock.is_none() {
                match ledger::ProcessLock::acquire(&self.ledger_path, "publisher") {
                    Ok(taken) => lock = Some(taken),
                    Err(error) => {
                        let pending = self.outbox.pending_count().unwrap_or(0);
                        self.health.set(OutboxHealth::now(pending, Some(error.to_string())));
                        if !pause() {
                            return;
                        }
                        continue;
                    }
                }
            }
            let pass = self.pass(&topics, &mut said).oldest(&self.outbox);
            self.health.set(pass);
            if !pause() {
                return;
            }
        }
    }

    /// One publish; says on stderr when entries start to wait for the broker (and why, when the reason changes, once
    /// a minute while it holds) and when they are published again. Entries held for the schema registry are said by
    /// the publisher itself, topic by topic.
    fn pass(&mut self, topics: &OutboxTopics, said: &mut kafka::Said) -> OutboxHealth {
        let name = &self.name;
        match self.publisher.publish(&mut self.outbox, topics, self.timeout) {
            Ok(report) => {
                let last_error = report.last_error.filter(|_| report.pending > 0);
                match &last_error {
                    Some(_) if report.awaiting_registry > 0 => {}
                    Some(error) if said.again(error) => {
                        tracing::warn!(pending = report.pending, %error, "{name}: outbox: entries wait for the broker");
                    }
                    Some(_) => {}
                    None if said.over() => {
                        tracing::info!(pending = report.pending, "{name}: outbox: publishing again");
                    }
                    None => {}
                }
                OutboxHealth::now(report.pending, last_error)
            }
            Err(error) => {
                let error = error_line(&error);
                tracing::error!(%error, "{name}: outbox: publishing failed");
                let pending = self.outbox.pending_count().unwrap_or_else(|_| self.health.latest().pending);
                OutboxHealth::now(pending, Some(error))
            }
        }
    }
}

/// An error and its causes on one line, with the hint the binary's error line gives a busy ledger.
fn error_line(error: &OutboxPublishError) -> String {
    let mut line = ledger::causes(error);
    if ledger::is_busy(error) {
        line.push_str(" (");
        line.push_str(ledger::BUSY_HINT);
        line.push(')');
    }
    line
}
