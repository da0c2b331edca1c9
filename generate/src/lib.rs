//! `generate`: a realistic synthetic month of traffic, the workload of tests, benchmarks and the demo.
//!
//! One seeded ChaCha8 stream drives it, so the same `--seed` always gives the same messages. It emits plan
//! default and tenant policies (some changing version mid-month), grants, usage (most of the traffic, a few
//! events late), reservations (committed, some above the reserved amount, released, abandoned, closed after
//! expiry), decisions (allowed and denied), exact duplicates, conflicting duplicates and malformed messages,
//! and counts each so that a test can compare the ledger with what was produced. [`to_kafka`] produces the stream
//! to contract §2's topics; [`to_files`] writes it as Avro object container files, one per record type.
//!
//! It also holds [`Progress`], how far a long step is: the benchmarks (`bench`) and the demo (`demo`) report it and
//! the binary draws it. Both build on the generator, so the type lives in the one crate below them both rather than
//! in a crate of its own; the generator itself reports none, since it is an iterator its caller drives.
//!
//! ```
//! use generate::{GenerateSettings, Generated, Generator};
//!
//! let mut generator = Generator::new(GenerateSettings::new(10, 1_000, 7));
//! let events = generator.by_ref().filter(|g| matches!(g, Generated::Event(_))).count() as u64;
//! let report = generator.report();
//! assert_eq!(report.messages, 1_000);
//! assert_eq!(events, report.unique_events + report.duplicates + report.conflicts);
//! ```

#![deny(missing_docs)]

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use kafka::producer::{KafkaProducer, ProduceError, ProduceReport};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};
use schemas::*;
use serde::Serialize;

/// Recent events kept for duplicates and conflicting duplicates to repeat.
const RECENT_EVENTS: usize = 1_024;
const METRICS: [&str; 3] = ["requests", "tokens", "bytes"];
const MONTH_MICROS: i64 = 30 * 24 * 3_600 * 1_000_000;
const MINUTE_MICROS: i64 = 60 * 1_000_000;

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenerateSettings {
    /// Tenants, `org-1` ... `org-N`.
    pub tenants: u32,
    /// Messages in all, malformed and duplicates included.
    pub messages: u64,
    /// The same seed gives the same stream.
    pub seed: u64,
    /// Start of the month the traffic falls in.
    pub month_start: Timestamp,
    /// Whether malformed messages may be byte-level garbage (Kafka) or only invalid values (container files).
    pub raw_malformed: bool,
}

impl GenerateSettings {
    /// `messages` for `tenants` tenants (at least one) from `seed`, in November 2026, garbage bytes allowed.
    pub fn new(tenants: u32, messages: u64, seed: u64) -> GenerateSettings {
        GenerateSettings {
            tenants: tenants.max(1),
            messages,
            seed,
            month_start: Timestamp::parse_rfc3339("2026-11-01T00:00:00Z").expect("a valid timestamp"),
            raw_malformed: true,
        }
    }
}

/// One generated message.
#[derive(Debug, Clone)]
pub enum Generated {
    /// A valid event (possibly a duplicate or a conflicting duplicate of an earlier one).
    Event(Event),
    /// A value that fails validation (negative quantity, empty tenant): encodable, must be quarantined.
    Invalid(Event),
    /// Bytes that are not a valid single-object message, on the topic of `event_type`.
    Garbage {
        /// The record type whose topic carries the bytes.
        event_type: EventType,
        /// The message key (a tenant).
        key: String,
        /// The bytes.
        bytes: Vec<u8>,
    },
}

/// Counts of what was generated. After ingesting all of it into an empty ledger, `status` must show
/// `events_recorded = unique_events`, `duplicates`, `conflicts` and `quarantined = malformed`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GenerateReport {
    /// Messages sent: those generated, and the copies of plan defaults ([`GenerateReport::copies`]).
    pub messages: u64,
    /// Distinct valid events.
    pub unique_events: u64,
    /// Exact copies of an earlier event, [`GenerateReport::copies`] among them.
    pub duplicates: u64,
    /// Copies of an earlier event with another payload.
    pub conflicts: u64,
    /// Messages that fail to decode or validate.
    pub malformed: u64,
    /// Unique events per record type.
    pub by_type: BTreeMap<String, u64>,
    /// The seed of the stream.
    pub seed: u64,
    /// Copies of a plan default (tenant `*`) sent to every partition of its topic but one (contract §9.4): exact
    /// duplicates to a ledger that holds every partition. 0 for files.
    pub copies: u64,
}

/// A reservation waiting for its close.
struct OpenReservation {
    header: Header,
    reservation_id: String,
    amount: i64,
    expires_at: Timestamp,
    close_at_message: u64,
}

/// The generator: an iterator of messages.
pub struct Generator {
    settings: GenerateSettings,
    rng: ChaCha8Rng,
    report: GenerateReport,
    next_id: u64,
    recent: VecDeque<Event>,
    /// event_ids already given a conflicting variant: at most one each, so that every one is a new conflict.
    conflicted: BTreeSet<String>,
    open: VecDeque<OpenReservation>,
    setup: VecDeque<Event>,
    /// Messages generated: the stream's position, which copies sent of them do not move.
    generated: u64,
}

impl Generator {
    /// The stream `settings` describe, starting with the policies and grants.
    pub fn new(settings: GenerateSettings) -> Generator {
        let rng = ChaCha8Rng::seed_from_u64(settings.seed);
        let report = GenerateReport { seed: settings.seed, ..GenerateReport::default() };
        let mut generator = Generator {
            settings,
            rng,
            report,
            next_id: 0,
            recent: VecDeque::new(),
            conflicted: BTreeSet::new(),
            open: VecDeque::new(),
            setup: VecDeque::new(),
            generated: 0,
        };
        generator.setup = generator.policies_and_grants().into();
        generator
    }

    /// What was generated so far.
    pub fn report(&self) -> &GenerateReport {
        &self.report
    }

    /// `copies` more messages were sent beyond those generated: the copies of a plan default sent to every
    /// partition but one (contract §9.4). A ledger holding every partition counts them as exact duplicates.
    pub fn count_copies(&mut self, copies: u64) {
        self.report.messages += copies;
        self.report.duplicates += copies;
        self.report.copies += copies;
    }

    fn below(&mut self, n: u64) -> u64 {
        self.rng.next_u64() % n.max(1)
    }

    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1_000) < per_mille
    }

    fn id(&mut self, prefix: &str) -> String {
        self.next_id += 1;
        format!("{prefix}-{:x}-{}", self.settings.seed, self.next_id)
    }

    /// Event time of the message now being generated: the stream walks through the month.
    fn now(&self) -> Timestamp {
        // In i128: messages times a month of microseconds passes i64 beyond 3.5 million messages.
        let progress =
            i128::from(self.generated) * i128::from(MONTH_MICROS) / i128::from(self.settings.messages.max(1));
        let progress = i64::try_from(progress).expect("progress is at most a month");
        Timestamp(self.settings.month_start.micros() + progress.min(MONTH_MICROS - 1))
    }

    fn tenant(&mut self) -> String {
        // Skewed: tenant k is picked about twice as often as tenant 2k, as real traffic is.
        let tenants = u64::from(self.settings.tenants);
        let a = self.below(tenants);
        let b = self.below(tenants);
        format!("org-{}", a.min(b) + 1)
    }

    fn header(&mut self, prefix: &str, tenant: String, metric: &str, occurred_at: Timestamp) -> Header {
        let subject = if self.chance(700) { Some(format!("key-{}", self.below(5))) } else { None };
        Header {
            event_id: self.id(prefix),
            occurred_at,
            tenant,
            subject,
            project: None,
            api_key: None,
            metric: metric.into(),
            source: "generate".into(),
        }
    }

    fn policies_and_grants(&mut self) -> Vec<Event> {
        let start = self.settings.month_start;
        let mut events = Vec::new();
        let plan = [
            ("plan-requests", "requests", 200_000, Enforcement::HARD),
            ("plan-tokens", "tokens", 5_000_000, Enforcement::SOFT),
        ];
        for (policy_id, metric, limit, enforcement) in plan {
            events.push(self.policy(
                "*",
                policy_id,
                1,
                metric,
                Scope::TENANT,
                limit,
                Window::MONTH,
                enforcement,
                start,
            ));
        }
        for tenant in 1..=self.settings.tenants {
            let tenant = format!("org-{tenant}");
            if tenant.ends_with('3') {
                let policy_id = format!("{tenant}-bytes");
                let from = Timestamp(start.micros() - MONTH_MICROS);
                events.push(self.policy(
                    &tenant,
                    &policy_id,
                    1,
                    "bytes",
                    Scope::TENANT,
                    1_000_000,
                    Window::MONTH,
                    Enforcement::HARD,
                    from,
                ));
                // A raise mid-month: version 2 applies to the windows that end after it.
                let mid = Timestamp(start.micros() + MONTH_MICROS / 2);
                events.push(self.policy(
                    &tenant,
                    &policy_id,
                    2,
                    "bytes",
                    Scope::TENANT,
                    2_000_000,
                    Window::MONTH,
                    Enforcement::HARD,
                    mid,
                ));
            }
            if tenant.ends_with('5') {
                let policy_id = format!("{tenant}-per-key");
                events.push(self.policy(
                    &tenant,
                    &policy_id,
                    1,
                    "requests",
                    Scope::SUBJECT,
                    500,
                    Window::DAY,
                    Enforcement::SHADOW,
                    start,
                ));
            }
            if tenant.ends_with('7') {
                events.push(self.grant(&tenant, "requests", 50_000, start));
            }
        }
        events
    }

    #[allow(clippy::too_many_arguments)]
    fn policy(
        &mut self,
        tenant: &str,
        policy_id: &str,
        version: i32,
        metric: &str,
        scope: Scope,
        limit: i64,
        window: Window,
        enforcement: Enforcement,
        effective_from: Timestamp,
    ) -> Event {
        let mut header = self.header("pol", tenant.to_string(), metric, effective_from);
        header.subject = None;
        Event::Policy(PolicyEvent {
            version,
            scope,
            ..PolicyEvent::new(header, policy_id, limit, window, enforcement, effective_from)
        })
    }

    fn grant(&mut self, tenant: &str, metric: &str, amount: i64, start: Timestamp) -> Event {
        let mut header = self.header("grant", tenant.to_string(), metric, start);
        header.subject = None;
        let grant_id = format!("{}-grant", header.event_id);
        let valid_until = Timestamp(start.micros() + MONTH_MICROS);
        Event::Grant(GrantEvent {
            header,
            grant_id,
            amount,
            valid_from: start,
            valid_until,
            reason: "support credit".into(),
            actor: None,
        })
    }

    fn usage(&mut self) -> Event {
        let tenant = self.tenant();
        let metric = METRICS[self.below(3) as usize];
        let mut occurred_at = self.now();
        if self.chance(10) {
            // A late event: it happened up to three days before it was sent.
            occurred_at = Timestamp(
                (occurred_at.micros() - self.below(3 * 24 * 60) as i64 * MINUTE_MICROS)
                    .max(self.settings.month_start.micros()),
            );
        }
        let header = self.header("use", tenant, metric, occurred_at);
        let quantity = match metric {
            "requests" => 1 + self.below(5) as i64,
            "tokens" => 10 + self.below(2_000) as i64,
            _ => 100 + self.below(100_000) as i64,
        };
        let request_id = Some(format!("req-{}", header.event_id));
        let attributes = BTreeMap::from([("region".to_string(), ["eu", "us"][self.below(2) as usize].to_string())]);
        Event::Usage(UsageEvent { header, quantity, request_id, attributes })
    }

    fn decision(&mut self) -> Event {
        let tenant = self.tenant();
        let header = self.header("dec", tenant, "requests", self.now());
        let denied = self.chance(150);
        let window_start = Timestamp(self.settings.month_start.micros());
        Event::Decision(DecisionEvent {
            request_id: format!("req-{}", header.event_id),
            idempotency_key: format!("idem-{}", header.event_id),
            header,
            amount: 1 + self.below(5) as i64,
            outcome: if denied { Outcome::DENIED } else { Outcome::ALLOWED },
            reason: if denied { Reason::QUOTA_EXCEEDED } else { Reason::WITHIN_LIMIT },
            policy_id: Some("plan-requests".into()),
            policy_version: Some(1),
            window_start: Some(window_start),
            window_end: Some(Timestamp(window_start.micros() + MONTH_MICROS)),
            limit: Some(200_000),
            used_before: Some(self.below(200_000) as i64),
            remaining: Some(if denied { 0 } else { self.below(1_000) as i64 }),
            retry_after_ms: if denied { Some(60_000) } else { None },
            token_name: None,
        })
    }

    fn reserve(&mut self) -> Event {
        let tenant = self.tenant();
        let header = self.header("res", tenant, "tokens", self.now());
        let reservation_id = format!("rsv-{}", header.event_id);
        let amount = 100 + self.below(1_000) as i64;
        let ttl_minutes = 5 + self.below(55) as i64;
        let expires_at = Timestamp(header.occurred_at.micros() + ttl_minutes * MINUTE_MICROS);
        let close_at_message = self.generated + 1 + self.below(50);
        if !self.chance(50) {
            // 5 % are abandoned: never closed, reconcile expires them.
            self.open.push_back(OpenReservation {
                header: header.clone(),
                reservation_id: reservation_id.clone(),
                amount,
                expires_at,
                close_at_message,
            });
        }
        Event::Reservation(ReservationEvent {
            header,
            reservation_id,
            action: ReservationAction::RESERVE,
            amount,
            expires_at: Some(expires_at),
            fencing_token: None,
        })
    }

    fn close(&mut self, open: OpenReservation) -> Event {
        let roll = self.below(100);
        // 10 % release, 5 % commit after expiry (a refused transition), the rest commit within the TTL, a
        // fifth of those above the reserved amount (estimate-then-reconcile).
        let (action, amount, occurred_at) = match roll {
            0..10 => (ReservationAction::RELEASE, 0, open.header.occurred_at.micros() + MINUTE_MICROS),
            10..15 => (ReservationAction::COMMIT, open.amount, open.expires_at.micros() + MINUTE_MICROS),
            15..30 => {
                (ReservationAction::COMMIT, open.amount + 1 + self.below(200) as i64, open.expires_at.micros() - 1)
            }
            _ => (ReservationAction::COMMIT, 1 + self.below(open.amount as u64) as i64, open.expires_at.micros() - 1),
        };
        let mut header = self.header("res", open.header.tenant.clone(), &open.header.metric, Timestamp(occurred_at));
        header.subject = open.header.subject.clone();
        Event::Reservation(ReservationEvent {
            header,
            reservation_id: open.reservation_id,
            action,
            amount,
            expires_at: None,
            fencing_token: None,
        })
    }

    fn fresh(&mut self) -> Event {
        if self.open.front().is_some_and(|o| o.close_at_message <= self.generated) {
            let open = self.open.pop_front().expect("checked");
            return self.close(open);
        }
        match self.below(100) {
            0..80 => self.usage(),
            80..88 => self.decision(),
            _ => self.reserve(),
        }
    }

    fn count_unique(&mut self, event: &Event) {
        self.report.unique_events += 1;
        *self.report.by_type.entry(event.event_type().name().to_string()).or_default() += 1;
        self.recent.push_back(event.clone());
        if self.recent.len() > RECENT_EVENTS {
            self.recent.pop_front();
        }
    }

    /// A conflicting duplicate of a recent usage event: same event_id, another quantity. Each event_id is
    /// given at most one conflicting variant, so that every one is a new conflict.
    fn conflict(&mut self) -> Option<Event> {
        let index = self.below(self.recent.len() as u64) as usize;
        let Event::Usage(mut usage) = self.recent.get(index)?.clone() else { return None };
        if !self.conflicted.insert(usage.header.event_id.clone()) {
            return None;
        }
        usage.quantity += 1;
        Some(Event::Usage(usage))
    }

    fn malformed(&mut self) -> Generated {
        let mut usage = match self.usage() {
            Event::Usage(u) => u,
            _ => unreachable!("usage() makes UsageEvents"),
        };
        let catalog = Catalog::builtin();
        match (self.below(4), self.settings.raw_malformed) {
            (0, true) => Generated::Garbage {
                event_type: EventType::UsageEvent,
                key: usage.header.tenant,
                bytes: b"{\"not\":\"avro\"}".to_vec(),
            },
            (1, true) => {
                let mut bytes = catalog.encode_single_object(&Event::Usage(usage.clone()));
                bytes.truncate(bytes.len() - 3);
                Generated::Garbage { event_type: EventType::UsageEvent, key: usage.header.tenant, bytes }
            }
            (2, _) => {
                usage.header.tenant = String::new();
                Generated::Invalid(Event::Usage(usage))
            }
            _ => {
                usage.quantity = -usage.quantity;
                Generated::Invalid(Event::Usage(usage))
            }
        }
    }
}

impl Iterator for Generator {
    type Item = Generated;

    fn next(&mut self) -> Option<Generated> {
        if self.generated >= self.settings.messages {
            return None;
        }
        let generated = if let Some(event) = self.setup.pop_front() {
            self.count_unique(&event);
            Generated::Event(event)
        } else {
            let roll = self.below(1_000);
            let repeated = if roll < 10 && !self.recent.is_empty() {
                let index = self.below(self.recent.len() as u64) as usize;
                self.report.duplicates += 1;
                Some(Generated::Event(self.recent[index].clone()))
            } else if roll < 12 && !self.recent.is_empty() {
                self.conflict().map(|event| {
                    self.report.conflicts += 1;
                    Generated::Event(event)
                })
            } else if roll < 13 {
                self.report.malformed += 1;
                Some(self.malformed())
            } else {
                None
            };
            repeated.unwrap_or_else(|| {
                let event = self.fresh();
                self.count_unique(&event);
                Generated::Event(event)
            })
        };
        self.generated += 1;
        self.report.messages += 1;
        Some(generated)
    }
}

/// Writing generated messages to files failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GenerateFilesError {
    /// The directory cannot be created.
    #[error("cannot create {}", dir.display())]
    CreateDir {
        /// The directory.
        dir: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// A file cannot be created.
    #[error("cannot create {}", path.display())]
    CreateFile {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// A file cannot be written.
    #[error("cannot write {}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Avro's reason.
        source: Box<apache_avro::Error>,
    },
}

/// Produces what `generator` generates to contract §2's default topics, the tenant as key, and waits for every
/// acknowledgement.
pub fn to_kafka(
    generator: &mut Generator,
    brokers: &str,
    overrides: &[(String, String)],
) -> Result<ProduceReport, ProduceError> {
    let catalog = Catalog::builtin();
    let mut producer = KafkaProducer::new(brokers, overrides)?;
    while let Some(generated) = generator.next() {
        let sent = send_generated(&mut producer, catalog, generated)?;
        generator.count_copies(sent - 1);
    }
    producer.finish()
}

/// Sends one generated message to its type's default topic (contract §2), the tenant as key, a plan default to
/// every partition ([`kafka::produce::send_event`]); garbage as it is. Answers the messages sent: more than one
/// for a plan default.
pub fn send_generated(
    producer: &mut KafkaProducer,
    catalog: &Catalog,
    generated: Generated,
) -> Result<u64, ProduceError> {
    match generated {
        Generated::Event(event) | Generated::Invalid(event) => {
            kafka::produce::send_event(producer, catalog, event.event_type().default_topic(), &event).map(u64::from)
        }
        Generated::Garbage { event_type, key, bytes } => {
            producer.send(event_type.default_topic(), &key, &bytes).map(|()| 1)
        }
    }
}

/// Writes what `generator` generates into `dir`, one Avro object container file per record type
/// (`UsageEvent.avro`, ...). Container files hold records, not bytes: the generator must not make garbage
/// ([`GenerateSettings::raw_malformed`] off), only invalid values.
pub fn to_files(generator: &mut Generator, dir: &Path) -> Result<(), GenerateFilesError> {
    std::fs::create_dir_all(dir).map_err(|source| GenerateFilesError::CreateDir { dir: dir.into(), source })?;
    let catalog = Catalog::builtin();
    let mut writers: BTreeMap<EventType, (PathBuf, apache_avro::Writer<'static, BufWriter<File>>)> = BTreeMap::new();
    for generated in generator.by_ref() {
        let event = match generated {
            Generated::Event(event) | Generated::Invalid(event) => event,
            Generated::Garbage { .. } => unreachable!("raw_malformed is off for files"),
        };
        let event_type = event.event_type();
        let (path, writer) = match writers.entry(event_type) {
            std::collections::btree_map::Entry::Occupied(entry) => entry.into_mut(),
            std::collections::btree_map::Entry::Vacant(entry) => {
                let path = dir.join(format!("{}.avro", event_type.name()));
                let writer = container_writer(catalog, event_type, &path)?;
                entry.insert((path, writer))
            }
        };
        writer.append_value(schemas::avro::to_value(&event)).map_err(|e| write_error(path, e))?;
    }
    for (_, (path, writer)) in writers {
        writer.into_inner().map_err(|e| write_error(&path, e))?;
    }
    Ok(())
}

fn container_writer(
    catalog: &'static Catalog,
    event_type: EventType,
    path: &Path,
) -> Result<apache_avro::Writer<'static, BufWriter<File>>, GenerateFilesError> {
    let file = File::create(path).map_err(|source| GenerateFilesError::CreateFile { path: path.into(), source })?;
    let schema = &catalog.current(event_type).schema;
    apache_avro::Writer::new(schema, BufWriter::new(file)).map_err(|e| write_error(path, e))
}

fn write_error(path: &Path, source: apache_avro::Error) -> GenerateFilesError {
    GenerateFilesError::Write { path: path.into(), source: Box::new(source) }
}

/// How far a long step of a benchmark or the demo is, for the binary to show (a bar, or a spinner, on a terminal).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Progress {
    /// A step of `total` units begins (`None`: of unknown length).
    Begin {
        /// What the step does, in a word or two.
        step: String,
        /// Units of work in all, when known.
        total: Option<u64>,
    },
    /// The step is this many units in.
    At(u64),
    /// What the step does now, in words.
    Doing(String),
    /// The step ended: whatever showed it goes.
    End,
    /// A line to say between steps ("copying the ledger ...").
    Note(String),
}
