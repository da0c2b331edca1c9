//! A writer per shard (contract §9.4): partition p of every input topic goes into shard p of a `--data` directory,
//! appended by a thread of its own, so that shards append in parallel while the consumer only polls and dispatches.
//!
//! [`ShardWriters`] is what a consumer group member needs of its shards: [`ShardWriters::assign`] opens shard p when
//! the group gives it partition p (and answers the offsets stored in it, where the consumer seeks),
//! [`ShardWriters::send`] queues consumed messages for it, and [`ShardWriters::revoke`] closes it once what was
//! queued is appended, before the partition may go to another member. Each writer decodes its messages, forwards
//! the events read in another tenant's partition to their tenant's ([`WriterSettings::forward_brokers`]) and a plan
//! default (tenant `*`) a producer sent to its partition alone to every other partition, and appends the rest with the
//! offsets they cover in one transaction, as a single ledger's ingest does.
//!
//! ```
//! use ingest::shards::{ShardWriters, WriterSettings};
//! use ledger::shards::ShardDir;
//! let dir = tempfile::tempdir().unwrap();
//! let writers = ShardWriters::new(ShardDir::new(dir.path()), 2, WriterSettings::new(kafka::topics::Topics::defaults()));
//! assert!(writers.assign(1).unwrap().is_empty(), "a new shard has read nothing");
//! writers.revoke(1).unwrap();
//! assert!(dir.path().join("shard-0001.db").exists());
//! ```

use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use kafka::checkpoints::CheckpointPublisher;
use kafka::producer::{KafkaProducer, ProduceError};
use kafka::topics::Topics;
use ledger::shards::{Shard, ShardDir, ShardError};
use ledger::{AppendError, Batch, Forwarded, Ledger, LockError, Origin, ProcessLock, ReadError, SourceOffset};
use schemas::Catalog;

use crate::consumed::{Consumed, Pending, decode};

/// Batches queued for one shard's writer beyond the one it is appending: the consumer waits when they are there
/// (two keep the writer busy while the consumer gathers the next; more would only hold memory, up to
/// [`crate::BATCH_MAX_BYTES`] each).
pub const QUEUE_BATCHES: usize = 2;
/// How often [`ShardWriters::wait_idle`] looks whether the writers are done.
const IDLE_ASK_MS: u64 = 5;

/// How the writers open, append and forward.
#[derive(Debug, Clone)]
pub struct WriterSettings {
    /// The input topics and the record type of each.
    pub topics: Topics,
    /// The brokers to re-publish misrouted events and plan defaults to (the brokers consumed from). Without them, an
    /// event read in another tenant's partition stops its writer (it cannot be recorded in the wrong shard), and a
    /// plan default is recorded in the shard it was read in only (a benchmark, whose messages never leave it).
    pub forward_brokers: Option<String>,
    /// librdkafka settings (`-X`) for the forwarding producer and the checkpoints.
    pub overrides: Vec<(String, String)>,
    /// Publish each shard's head to `quota.checkpoints` as it moves (needs `forward_brokers`).
    pub publish_checkpoints: bool,
    /// The role of the lock each writer takes on its shard (`ingest`): one writer per shard file.
    pub lock_role: String,
}

impl WriterSettings {
    /// Writers of `topics` that forward nothing and publish no checkpoints (a benchmark, a test).
    pub fn new(topics: Topics) -> WriterSettings {
        WriterSettings {
            topics,
            forward_brokers: None,
            overrides: Vec::new(),
            publish_checkpoints: false,
            lock_role: "ingest".to_string(),
        }
    }
}

/// A shard writer failed, or was asked for what it cannot do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShardWriterError {
    /// The shard could not be opened or claimed.
    #[error("cannot open shard {partition}")]
    Open {
        /// The partition.
        partition: u32,
        /// Why.
        source: ShardError,
    },
    /// Another process writes to the shard.
    #[error("cannot take shard {partition}")]
    Lock {
        /// The partition.
        partition: u32,
        /// Who holds it.
        source: LockError,
    },
    /// The shard could not be read.
    #[error("cannot read shard {partition}")]
    Read {
        /// The partition.
        partition: u32,
        /// Why.
        source: ReadError,
    },
    /// The shard refused a batch; what was appended before stays appended.
    #[error("appending to shard {partition} failed")]
    Append {
        /// The partition.
        partition: u32,
        /// Why.
        source: AppendError,
    },
    /// Misrouted events could not be re-published to their tenant's partition, or plan defaults to every other
    /// partition; nothing of the batch is recorded.
    #[error(
        "shard {partition} could not forward {events} copies (of events read in another tenant's partition, or of \
         plan defaults for every other partition)"
    )]
    Forward {
        /// The partition.
        partition: u32,
        /// How many copies the batch had to send.
        events: usize,
        /// The producer's reason.
        source: ProduceError,
    },
    /// An event was read in another tenant's partition and no brokers were given to forward it to.
    #[error(
        "{topic}[{partition}] offset {offset} holds event {event_id} of tenant {tenant}, whose partition is \
         {to_partition}, and no brokers were given to forward it to"
    )]
    CannotForward {
        /// The topic.
        topic: String,
        /// The partition it was read in.
        partition: i32,
        /// Its offset.
        offset: i64,
        /// The event's id.
        event_id: String,
        /// Its tenant.
        tenant: String,
        /// The tenant's partition.
        to_partition: u32,
    },
    /// Messages for a partition this member does not hold.
    #[error("shard {partition} is not assigned here")]
    NotAssigned {
        /// The partition.
        partition: u32,
    },
    /// The writer of the shard stopped (its error was reported before).
    #[error("the writer of shard {partition} stopped")]
    Stopped {
        /// The partition.
        partition: u32,
    },
}

/// What the writers appended since last asked ([`ShardWriters::take_appended`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Appended {
    /// Events recorded as new.
    pub recorded: u64,
    /// Exact duplicates.
    pub duplicates: u64,
    /// Conflicting duplicates.
    pub conflicts: u64,
    /// Messages quarantined.
    pub quarantined: u64,
    /// Messages quarantined, by reason code (as read).
    pub quarantined_by_reason: BTreeMap<String, u64>,
    /// Events forwarded to their tenant's partition.
    pub forwarded: u64,
    /// Plan defaults (tenant `*`) read without the mark of a copy, recorded and forwarded to every other partition.
    pub plan_defaults_forwarded: u64,
    /// Appends.
    pub batches: u64,
    /// The next offset per `(topic, partition)` each shard now stores.
    pub offsets: BTreeMap<(String, i32), i64>,
    /// Each shard's watermark after its last append.
    pub watermarks: BTreeMap<u32, u64>,
}

impl Appended {
    fn add(&mut self, partition: u32, other: Appended) {
        self.recorded += other.recorded;
        self.duplicates += other.duplicates;
        self.conflicts += other.conflicts;
        self.quarantined += other.quarantined;
        for (reason, n) in other.quarantined_by_reason {
            *self.quarantined_by_reason.entry(reason).or_insert(0) += n;
        }
        self.forwarded += other.forwarded;
        self.plan_defaults_forwarded += other.plan_defaults_forwarded;
        self.batches += other.batches;
        for (key, next) in other.offsets {
            let stored = self.offsets.entry(key).or_insert(next);
            *stored = (*stored).max(next);
        }
        if let Some(watermark) = other.watermarks.get(&partition) {
            self.watermarks.insert(partition, *watermark);
        }
    }
}

/// What the writers tell whoever dispatches to them.
#[derive(Debug, Default)]
struct Reports {
    appended: Appended,
    /// The first writer failure: every later call answers it.
    failed: Option<ShardWriterError>,
    /// Batches sent and not appended yet (nor given up on).
    queued: usize,
}

struct Writer {
    queue: SyncSender<Vec<Consumed>>,
    thread: JoinHandle<()>,
}

/// The writers of the shards this process holds, one thread each (see the module's documentation).
pub struct ShardWriters {
    dir: ShardDir,
    partitions: u32,
    settings: WriterSettings,
    writers: Mutex<BTreeMap<u32, Writer>>,
    reports: Arc<Mutex<Reports>>,
}

impl ShardWriters {
    /// Writers of the shards of `dir`, of `partitions` partitions in all; none open yet.
    pub fn new(dir: ShardDir, partitions: u32, settings: WriterSettings) -> ShardWriters {
        ShardWriters {
            dir,
            partitions,
            settings,
            writers: Mutex::new(BTreeMap::new()),
            reports: Arc::new(Mutex::new(Reports::default())),
        }
    }

    /// The directory of the shards.
    pub fn dir(&self) -> &ShardDir {
        &self.dir
    }

    /// Waits until every batch queued is appended (or a writer failed, which it answers).
    pub fn wait_idle(&self) -> Result<(), ShardWriterError> {
        loop {
            self.failure()?;
            if self.reports.lock().expect("never poisoned").queued == 0 {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(IDLE_ASK_MS));
        }
    }

    /// The partition count P.
    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    /// The shards open now.
    pub fn assigned(&self) -> Vec<u32> {
        self.writers.lock().expect("never poisoned").keys().copied().collect()
    }

    /// Opens shard `partition` (creating it) and starts its writer; answers the offsets it stores, where consuming
    /// its partitions resumes. A shard open already is closed first (what was queued appended), so that the offsets
    /// answered are those of everything it was given.
    pub fn assign(&self, partition: u32) -> Result<Vec<SourceOffset>, ShardWriterError> {
        self.revoke(partition)?;
        let shard = Shard { partition, partitions: self.partitions };
        // The lock sits beside the shard's file: the directory first.
        let dir = self.dir.dir();
        std::fs::create_dir_all(dir).map_err(|source| ShardWriterError::Open {
            partition,
            source: ShardError::Directory { dir: dir.to_path_buf(), source },
        })?;
        let lock = ProcessLock::acquire(&self.dir.path_of(partition), &self.settings.lock_role)
            .map_err(|source| ShardWriterError::Lock { partition, source })?;
        let mut ledger = self.dir.open(shard).map_err(|source| ShardWriterError::Open { partition, source })?;
        let read = |source| ShardWriterError::Read { partition, source };
        ledger.keep_commit_totals();
        // A consumer runs for long and most of what it reads is new: the filter spares those the dedup probes.
        ledger.keep_key_filter().map_err(read)?;
        let offsets = ledger.offsets().map_err(read)?;
        let checkpoints = self.checkpoints(&ledger, partition);
        let (queue, received) = sync_channel(QUEUE_BATCHES);
        let state =
            WriterState { ledger, shard, settings: self.settings.clone(), forwarder: None, checkpoints, _lock: lock };
        let reports = self.reports.clone();
        let thread = std::thread::Builder::new()
            .name(format!("shard-{partition}"))
            .spawn(move || state.run(received, &reports))
            .expect("a thread for the shard's writer");
        self.writers.lock().expect("never poisoned").insert(partition, Writer { queue, thread });
        Ok(offsets)
    }

    fn checkpoints(&self, ledger: &Ledger, partition: u32) -> Option<CheckpointPublisher> {
        let brokers = self.settings.forward_brokers.as_deref().filter(|_| self.settings.publish_checkpoints)?;
        let started = ledger.ledger_id().map_err(|e| e.to_string()).and_then(|id| {
            CheckpointPublisher::new("ingest", brokers, &self.settings.overrides, &id).map_err(|e| e.to_string())
        });
        started
            .map_err(|error| tracing::warn!(shard = partition, %error, "ingest: a shard publishes no checkpoints"))
            .ok()
    }

    /// Queues `messages` (all of partition `partition` of the input topics) for shard `partition`'s writer: one
    /// append, which it decodes, forwards what is misrouted, and records with the offsets they cover. Waits while
    /// [`QUEUE_BATCHES`] are queued. A writer that failed answers its error.
    pub fn send(&self, partition: u32, messages: Vec<Consumed>) -> Result<(), ShardWriterError> {
        self.failure()?;
        let queue = match self.writers.lock().expect("never poisoned").get(&partition) {
            Some(writer) => writer.queue.clone(),
            None => return Err(ShardWriterError::NotAssigned { partition }),
        };
        self.reports.lock().expect("never poisoned").queued += 1;
        if queue.send(messages).is_err() {
            self.reports.lock().expect("never poisoned").queued -= 1;
            self.failure()?;
            return Err(ShardWriterError::Stopped { partition });
        }
        Ok(())
    }

    /// Closes shard `partition` once what was queued for it is appended (nothing when it is not open): after this,
    /// another member may take the partition and find its offsets stored.
    pub fn revoke(&self, partition: u32) -> Result<(), ShardWriterError> {
        let writer = self.writers.lock().expect("never poisoned").remove(&partition);
        if let Some(Writer { queue, thread }) = writer {
            drop(queue);
            thread.join().expect("a shard writer does not panic");
        }
        self.failure()
    }

    /// Closes every shard open ([`ShardWriters::revoke`]).
    pub fn close_all(&self) -> Result<(), ShardWriterError> {
        for partition in self.assigned() {
            self.revoke(partition)?;
        }
        self.failure()
    }

    /// What the writers appended since the last call; a writer's failure instead, once it happened.
    pub fn take_appended(&self) -> Result<Appended, ShardWriterError> {
        self.failure()?;
        Ok(std::mem::take(&mut self.reports.lock().expect("never poisoned").appended))
    }

    /// The first writer failure, taken (later calls answer [`ShardWriterError::Stopped`] of its shard).
    fn failure(&self) -> Result<(), ShardWriterError> {
        let mut reports = self.reports.lock().expect("never poisoned");
        match reports.failed.take() {
            None => Ok(()),
            Some(error) => {
                let partition = match &error {
                    ShardWriterError::Open { partition, .. }
                    | ShardWriterError::Lock { partition, .. }
                    | ShardWriterError::Read { partition, .. }
                    | ShardWriterError::Append { partition, .. }
                    | ShardWriterError::Forward { partition, .. }
                    | ShardWriterError::NotAssigned { partition }
                    | ShardWriterError::Stopped { partition } => *partition,
                    ShardWriterError::CannotForward { partition, .. } => *partition as u32,
                };
                reports.failed = Some(ShardWriterError::Stopped { partition });
                Err(error)
            }
        }
    }
}

impl Drop for ShardWriters {
    fn drop(&mut self) {
        let _ = self.close_all();
    }
}

/// What one writer thread owns.
struct WriterState {
    ledger: Ledger,
    shard: Shard,
    settings: WriterSettings,
    /// Made at the first event to forward.
    forwarder: Option<KafkaProducer>,
    checkpoints: Option<CheckpointPublisher>,
    _lock: ProcessLock,
}

impl WriterState {
    /// Appends each batch queued until the queue closes, or until an append fails (reported; the writer stops, so
    /// that nothing after a batch that was not recorded is recorded).
    fn run(mut self, queue: Receiver<Vec<Consumed>>, reports: &Mutex<Reports>) {
        while let Ok(messages) = queue.recv() {
            let written = self.write(messages);
            let mut shared = reports.lock().expect("never poisoned");
            shared.queued -= 1;
            match written {
                Ok(appended) => {
                    shared.appended.add(self.shard.partition, appended);
                    drop(shared);
                    self.offer_head();
                }
                Err(error) => {
                    tracing::error!(shard = self.shard.partition, %error, "ingest: a shard stopped");
                    shared.failed.get_or_insert(error);
                    // What is still queued will never be appended.
                    shared.queued -= queue.try_iter().count();
                    break;
                }
            }
        }
        if let Some(checkpoints) = self.checkpoints.take() {
            match self.ledger.head() {
                Ok(head) => checkpoints.finish(head.seq, &head.hash_hex()),
                Err(error) => {
                    tracing::warn!(shard = self.shard.partition, %error, "ingest: cannot read a shard's head")
                }
            }
        }
    }

    fn offer_head(&mut self) {
        if let Some(checkpoints) = self.checkpoints.as_mut() {
            match self.ledger.head() {
                Ok(head) => checkpoints.offer(head.seq, &head.hash_hex()),
                Err(error) => {
                    tracing::warn!(shard = self.shard.partition, %error, "ingest: cannot read a shard's head")
                }
            }
        }
    }

    /// One batch: decoded; its misrouted events re-published to their tenant's partition and its plan defaults sent
    /// here alone to every other partition, all acknowledged; then the rest (the plan defaults with them), the
    /// forwarded copies' record and the offsets of all of them in one append.
    fn write(&mut self, messages: Vec<Consumed>) -> Result<Appended, ShardWriterError> {
        let partition = self.shard.partition;
        let catalog = Catalog::builtin();
        let mut next: BTreeMap<(String, i32), i64> = BTreeMap::new();
        let mut batch = Batch::default();
        let mut forwards: Vec<(Consumed, Forwarded)> = Vec::new();
        let (mut misrouted, mut plan_defaults) = (0, 0);
        for message in messages {
            let entry = next.entry((message.topic.clone(), message.partition)).or_insert(message.offset + 1);
            *entry = (*entry).max(message.offset + 1);
            let (key, plan_default_copy) = (message.key.clone(), message.plan_default_copy);
            match decode(catalog, &self.settings.topics, message) {
                Pending::Event(incoming) if !self.shard.holds_tenant(&incoming.event.header().tenant) => {
                    forwards.push(self.misrouted(incoming, key));
                    misrouted += 1;
                }
                Pending::Event(incoming) if self.forwards_plan_default(&incoming, plan_default_copy) => {
                    let copies = self.plan_default_copies(&incoming, key);
                    plan_defaults += u64::from(!copies.is_empty());
                    forwards.extend(copies);
                    batch.events.push(incoming);
                }
                Pending::Event(incoming) => batch.events.push(incoming),
                Pending::Rejected(rejected) => batch.rejected.push(rejected),
            }
        }
        self.forward(&forwards, misrouted, plan_defaults)?;
        batch.forwarded = forwards.into_iter().map(|(_, forwarded)| forwarded).collect();
        batch.offsets = next
            .iter()
            .map(|((topic, p), next_offset)| SourceOffset {
                topic: topic.clone(),
                partition: *p,
                next_offset: *next_offset,
            })
            .collect();
        let report = self.ledger.append(&batch).map_err(|source| ShardWriterError::Append { partition, source })?;
        crate::consumed::log_quarantined(&batch.rejected);
        Ok(Appended {
            recorded: report.recorded() as u64,
            duplicates: report.duplicates() as u64,
            conflicts: report.conflicts() as u64,
            quarantined: report.quarantined,
            quarantined_by_reason: crate::consumed::by_reason(&batch.rejected),
            forwarded: misrouted,
            plan_defaults_forwarded: plan_defaults,
            batches: 1,
            offsets: next,
            watermarks: BTreeMap::from([(partition, report.watermark)]),
        })
    }

    /// The copy to publish of an event read in another tenant's partition, and its record.
    fn misrouted(&self, incoming: ledger::Incoming, key: Option<Vec<u8>>) -> (Consumed, Forwarded) {
        let Origin::Kafka { topic, partition, offset } = incoming.origin else {
            unreachable!("consumed messages have a Kafka origin")
        };
        let tenant = incoming.event.header().tenant.clone();
        let to_partition = schemas::partition::partition_of(&tenant, self.shard.partitions) as i32;
        let forwarded = Forwarded {
            topic: topic.clone(),
            partition,
            offset,
            event_id: incoming.event.event_id().to_string(),
            tenant,
            to_partition,
        };
        let payload = incoming.raw.unwrap_or_default();
        let copy = Consumed { topic, partition: to_partition, offset, key, payload, plan_default_copy: false };
        (copy, forwarded)
    }

    /// Whether `incoming` is a plan default this shard must send to every other partition: read without the mark of
    /// a copy ([`kafka::producer::PLAN_DEFAULT_HEADER`]), so its producer may have sent it here alone (Kafka's
    /// default partitioner puts the key `*` in one partition), and with brokers to send it to. A copy is never
    /// forwarded again: forwarding ends after one round whoever sent what.
    fn forwards_plan_default(&self, incoming: &ledger::Incoming, plan_default_copy: bool) -> bool {
        incoming.event.header().tenant == "*" && !plan_default_copy && self.settings.forward_brokers.is_some()
    }

    /// The copies of plan default `incoming` for every partition but this one, same key and bytes, each marked as a
    /// copy, and their record.
    fn plan_default_copies(&self, incoming: &ledger::Incoming, key: Option<Vec<u8>>) -> Vec<(Consumed, Forwarded)> {
        let Origin::Kafka { topic, partition, offset } = &incoming.origin else {
            unreachable!("consumed messages have a Kafka origin")
        };
        let payload = incoming.raw.clone().unwrap_or_default();
        let others = (0..self.shard.partitions).filter(|p| *p != self.shard.partition);
        others
            .map(|to| {
                let to_partition = i32::try_from(to).expect("Kafka numbers partitions in an i32");
                let forwarded = Forwarded {
                    topic: topic.clone(),
                    partition: *partition,
                    offset: *offset,
                    event_id: incoming.event.event_id().to_string(),
                    tenant: "*".to_string(),
                    to_partition,
                };
                let copy = Consumed {
                    topic: topic.clone(),
                    partition: to_partition,
                    offset: *offset,
                    key: key.clone(),
                    payload: payload.clone(),
                    plan_default_copy: true,
                };
                (copy, forwarded)
            })
            .collect()
    }

    /// Publishes every copy to its partition and waits for the brokers to acknowledge them all (acks=all,
    /// idempotent): only then may the batch record them as forwarded and store the offsets past them. A crash after
    /// the acknowledgement and before the commit publishes them again, one event_id counted once by each shard.
    /// `misrouted` and `plan_defaults` say how many events the copies are of, for the log.
    fn forward(
        &mut self,
        forwards: &[(Consumed, Forwarded)],
        misrouted: u64,
        plan_defaults: u64,
    ) -> Result<(), ShardWriterError> {
        let Some((_, first)) = forwards.first() else { return Ok(()) };
        let partition = self.shard.partition;
        let Some(brokers) = self.settings.forward_brokers.as_deref() else {
            return Err(ShardWriterError::CannotForward {
                topic: first.topic.clone(),
                partition: first.partition,
                offset: first.offset,
                event_id: first.event_id.clone(),
                tenant: first.tenant.clone(),
                to_partition: first.to_partition as u32,
            });
        };
        let events = forwards.len();
        let failed = |source| ShardWriterError::Forward { partition, events, source };
        if self.forwarder.is_none() {
            self.forwarder = Some(KafkaProducer::new(brokers, &self.settings.overrides).map_err(failed)?);
        }
        let producer = self.forwarder.as_mut().expect("made above");
        let mark = format!("forwarded from partition {partition}");
        for (copy, _) in forwards {
            let plan_default = copy.plan_default_copy.then_some(mark.as_str());
            producer
                .send_to_partition(&copy.topic, copy.partition, copy.key.as_deref(), &copy.payload, plan_default)
                .map_err(failed)?;
        }
        producer.wait_acknowledged().map_err(failed)?;
        if misrouted > 0 {
            tracing::info!(
                shard = partition,
                events = misrouted,
                "ingest: events read in another tenant's partition forwarded"
            );
        }
        if plan_defaults > 0 {
            tracing::info!(
                shard = partition,
                plan_defaults,
                "ingest: plan defaults forwarded to every other partition"
            );
        }
        Ok(())
    }
}
