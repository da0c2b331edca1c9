//! The demo: the whole product in one run, on librdkafka's in-process mock cluster (nothing to install). A month of
//! generated traffic and each tenant's own monthly plan go through Kafka into a fresh ledger; services ask the
//! enforcement hook (the library) on the month's last day; the nightly reconciliation runs; the month is closed and
//! exported for billing; a few late events arrive and are carried into the next month; support asks why a request was
//! denied; and `report.html` shows it all. Every step calls the same use case (`usecases`) as the command that does
//! it alone.
//!
//! It draws on no terminal: long steps report [`Progress`], and what it shows comes back as data ([`Shown`]) for
//! the binary to print. It answers `anyhow::Result`: it is the body of a developer's command, its errors only ever
//! end on the binary's error line, and they come from a dozen crates with the context of the step that failed; a
//! typed enum would restate them without a caller that tells them apart.

#![deny(missing_docs)]

mod figures;
mod page;
mod traffic;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use hook::{AcquireRequest, Hook, HookSettings, Request};
use ingest::consumer::{KafkaIngestProgress, KafkaIngestSettings, ingest_kafka};
use kafka::admin::EmbeddedBroker;
use kafka::producer::KafkaProducer;
use ledger::{Durability, Ledger, Period, PeriodExportRow, ProcessLock};
use outbox::{OutboxTopics, PublishReport};
use reports::export::{BillingExport, Format};
use schemas::*;
use sql::LedgerSession;

use figures::*;
use generate::{GenerateSettings, Generated, Progress, send_generated};
use traffic::*;

pub use page::Step;

/// Tenants by default: enough for every kind of policy the generator makes (org-3's bytes, org-5's per-key
/// SHADOW limit, org-7's grant) to appear several times.
pub const DEFAULT_TENANTS: u32 = 50;
/// Messages by default: sized so that the demo takes about a minute on 2 cores (release build; see README).
pub const DEFAULT_EVENTS: u64 = 300_000;
/// Checks the services send to the hook by default, spread over the month's last day.
pub const DEFAULT_HOOK_REQUESTS: u32 = 2_000;
/// Fewest messages a month is generated with.
pub const EVENTS_MIN: u64 = 1_000;
/// Usage events that arrive after the month is closed.
const LATE_EVENTS: i64 = 5;
/// The tenant whose seats the demo meters, its metric, how many seats it has and how many users ask for one.
const SEAT_TENANT: &str = "org-2";
const SEAT_METRIC: &str = "seats";
const SEATS: i64 = 5;
const SEAT_USERS: i64 = 8;
/// Partitions per topic on the mock cluster (`broker mock`'s default).
const PARTITIONS: i32 = 3;
/// The ledger file inside the output directory.
const LEDGER_FILE: &str = "ledger.db";
/// The secret of the `tokens.toml` written for `serve` (a demo ledger only: never reuse it).
const DEMO_TOKEN: &str = "demo-secret-0123456789abcdef";
const HOUR_MICROS: i64 = 3_600 * 1_000_000;
const DAY_MICROS: i64 = 24 * HOUR_MICROS;

/// What the demo plays, and where its files go.
#[derive(Debug, Clone)]
pub struct DemoSettings {
    /// Tenants (org-1 ... org-N).
    pub tenants: u32,
    /// Messages generated for the month (usage, reservations, decisions, duplicates, malformed); at least
    /// [`EVENTS_MIN`].
    pub events: u64,
    /// Checks services send to the enforcement hook on the month's last day.
    pub hook_requests: u32,
    /// The month played; it must be over, since the demo closes it. `None`: the last month that ended.
    pub month: Option<Period>,
    /// The same seed gives the same traffic.
    pub seed: u64,
    /// Where the ledger, exports, reports and report.html go (a previous demo's ledger there is replaced).
    pub out: PathBuf,
}

/// What the demo has to show while it plays.
#[derive(Debug)]
#[non_exhaustive]
pub enum Shown<'a> {
    /// The demo begins: the month it plays, its tenants, where its files go.
    Playing {
        /// The month played.
        month: Period,
        /// Tenants.
        tenants: u32,
        /// Where the files go.
        out: &'a Path,
    },
    /// A step is done.
    Step {
        /// Its number, from 1.
        number: usize,
        /// What it did.
        step: &'a Step,
    },
    /// How far the step at work is.
    Progress(Progress),
}

/// What a played demo leaves for its reader.
#[derive(Debug, Clone)]
pub struct Played {
    /// Where everything is.
    pub out: PathBuf,
    /// Commands to paste next, against the demo's ledger (`#` lines say who asks).
    pub commands: Vec<String>,
}

/// The hook's clock during the demo: the instant of the check being sent, inside the demo month.
static HOOK_CLOCK_MICROS: AtomicI64 = AtomicI64::new(0);

fn hook_clock() -> Timestamp {
    Timestamp(HOOK_CLOCK_MICROS.load(Ordering::Relaxed))
}

/// What the steps found that later steps and the page need.
struct Demo<'a> {
    settings: DemoSettings,
    show: &'a dyn Fn(Shown),
    month: Period,
    ledger_path: PathBuf,
    brokers: String,
    steps: Vec<page::Step>,
    denied_request: Option<String>,
    closed: Option<BillingExport>,
    ingest_passes: u32,
}

/// Plays the demo into `settings.out`: `show` is told the steps as they end and how far the one at work is.
pub fn run(settings: DemoSettings, show: &dyn Fn(Shown)) -> anyhow::Result<Played> {
    let month = settings.month.unwrap_or_else(|| Period::containing(Timestamp::now()).previous());
    anyhow::ensure!(
        month.end() <= Timestamp::now(),
        "--month {month} is not over yet (it ends {}): the demo closes the month it plays",
        month.end()
    );
    anyhow::ensure!(
        settings.events >= EVENTS_MIN,
        "--events {} is too few for a month: at least {EVENTS_MIN}",
        settings.events
    );
    prepare_out(&settings.out)?;
    let broker = EmbeddedBroker::start(PARTITIONS).context("cannot start the mock Kafka cluster")?;
    let mut demo = Demo {
        ledger_path: settings.out.join(LEDGER_FILE),
        brokers: broker.bootstrap_servers(),
        settings,
        show,
        month,
        steps: Vec::new(),
        denied_request: None,
        closed: None,
        ingest_passes: 0,
    };
    show(Shown::Playing { month, tenants: demo.settings.tenants, out: &demo.settings.out });
    demo.step("broker", |d| {
        Ok(format!(
            "librdkafka mock cluster on {}: the seven topics of docs/contract.md §2, {PARTITIONS} partitions each",
            d.brokers
        ))
    })?;
    demo.play()?;
    drop(broker);
    Ok(Played { out: demo.settings.out.clone(), commands: demo.commands() })
}

/// Marks a folder the demo wrote, so that a later demo may replace its ledger.
const MARKER_FILE: &str = ".quota-ledger-demo";

/// Creates `out`, removing a previous demo's ledger (its other files are replaced as they are written). A ledger
/// in a folder the demo did not write is someone's data: refused, never removed.
fn prepare_out(out: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let marker = out.join(MARKER_FILE);
    if out.join(LEDGER_FILE).exists() && !marker.exists() {
        anyhow::bail!(
            "{} holds a {LEDGER_FILE} that no demo wrote; the demo will not replace it: choose another --out",
            out.display()
        );
    }
    std::fs::write(&marker, "written by `quota-ledger demo`; its ledger is replaced by the next demo\n")
        .with_context(|| format!("cannot write {}", marker.display()))?;
    for entry in std::fs::read_dir(out)? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with(LEDGER_FILE) {
            std::fs::remove_file(entry.path()).with_context(|| format!("cannot remove {}", entry.path().display()))?;
        }
    }
    Ok(())
}

impl<'a> Demo<'a> {
    /// Runs one step, timed, and shows what it did.
    fn step(&mut self, name: &str, body: impl FnOnce(&mut Self) -> anyhow::Result<String>) -> anyhow::Result<()> {
        let started = Instant::now();
        let summary = body(self).with_context(|| format!("demo step {name:?} failed"))?;
        let seconds = started.elapsed().as_secs_f64();
        let step = page::Step { name: name.to_string(), summary, seconds };
        (self.show)(Shown::Step { number: self.steps.len() + 1, step: &step });
        self.steps.push(step);
        Ok(())
    }

    fn out(&self, file: &str) -> PathBuf {
        self.settings.out.join(file)
    }

    /// Writes `file` in the output directory, whole or not at all.
    fn write(&self, file: &str, bytes: &[u8]) -> anyhow::Result<()> {
        Ok(usecases::files::write_atomically(&self.out(file), bytes)?)
    }

    fn play(&mut self) -> anyhow::Result<()> {
        self.step("stream", Demo::stream_month)?;
        self.step("hook", Demo::hook_checks)?;
        self.step("seats", Demo::seats)?;
        self.step("ingest", |d| {
            let p = d.ingest("outbox")?;
            Ok(format!("{p}: what the hook published comes back as exact duplicates, counted once"))
        })?;
        self.step("reconcile", |d| d.reconcile("reconcile"))?;
        self.step("close", Demo::close_month)?;
        self.step("late events", Demo::late_events)?;
        self.step("correction", Demo::correction)?;
        self.step("reconcile", |d| d.reconcile("reconcile-late"))?;
        self.step("next month", Demo::next_month)?;
        self.step("audit why", Demo::audit_why)?;
        self.step("verify", Demo::verify)?;
        self.step("report", Demo::write_page)?;
        Ok(())
    }

    fn generate_settings(&self) -> GenerateSettings {
        let mut settings = GenerateSettings::new(self.settings.tenants, self.settings.events, self.settings.seed);
        settings.month_start = self.month.start();
        settings
    }

    /// The demo's tenant policies and the generated month, produced to Kafka while ingest consumes them: the mock
    /// cluster keeps only 5 MiB per partition (librdkafka's `rd_kafka_mock_partition_init`), so the producer
    /// stays at most `IN_FLIGHT_MAX` messages ahead of the ledger, as a month streams in.
    fn stream_month(&mut self) -> anyhow::Result<String> {
        let settings = self.generate_settings();
        let consumption = consumption(&settings);
        let mut policies = tenant_policies(self.month, &consumption);
        policies.push(lease_policy(self.month));
        policies.extend(rolling_policy(self.month, &consumption));
        policies.extend(cycle_policy(self.month, &consumption));
        let show = self.show;
        let total = settings.messages + policies.len() as u64;
        show(Shown::Progress(Progress::Begin { step: "streaming".into(), total: Some(total) }));
        let consumed = AtomicU64::new(0);
        let delivered = AtomicU64::new(u64::MAX);
        let stop = AtomicBool::new(false);
        let brokers = self.brokers.clone();
        let (produced, ingested) = std::thread::scope(|scope| {
            let producer = scope.spawn(|| {
                let produced = produce(&brokers, &policies, settings, &consumed);
                // No more messages: stop the ingest once it has them all (here, or in its callback if not yet).
                delivered.store(produced.as_ref().map_or(0, |p| p.0), Ordering::SeqCst);
                if produced.is_err() || consumed.load(Ordering::SeqCst) >= delivered.load(Ordering::SeqCst) {
                    stop.store(true, Ordering::SeqCst);
                }
                produced
            });
            let ingested = self.ingest_with(&stop, |p| {
                consumed.store(p.messages, Ordering::SeqCst);
                show(Shown::Progress(Progress::At(p.messages)));
                if p.messages >= delivered.load(Ordering::SeqCst) {
                    stop.store(true, Ordering::SeqCst);
                }
            });
            if ingested.is_err() {
                // The producer waits for the ingest to make room: let it see that none will come.
                consumed.store(u64::MAX / 2, Ordering::SeqCst);
            }
            (producer.join().expect("the producer thread does not panic"), ingested)
        });
        show(Shown::Progress(Progress::End));
        let (delivered, report) = produced?;
        let ingested = ingested?;
        anyhow::ensure!(
            ingested.messages == delivered && ingested.offset_gaps == 0,
            "{delivered} messages produced but {} ingested ({} offset gaps)",
            ingested.messages,
            ingested.offset_gaps
        );
        Ok(format!(
            "{delivered} messages produced ({}, and {} tenant policies: HARD requests, SOFT tokens, {LEASE_SLOTS} jobs \
             at once for {LEASE_TENANT}) and ingested as they arrived: {}",
            generated_summary(&report),
            policies.len(),
            ingested
        ))
    }

    /// Kafka into the ledger until caught up, exactly as `ingest --brokers --until-caught-up`.
    fn ingest(&mut self, what: &str) -> anyhow::Result<KafkaIngestProgress> {
        // Each pass joins a group of its own: the mock cluster makes a group that a member just left wait out a
        // session (9 s) before the next one joins. Where a pass starts is the ledger's offsets, not the group's.
        self.ingest_passes += 1;
        let group = format!("quota-ledger-demo-{}", self.ingest_passes);
        let mut settings = KafkaIngestSettings::new(&self.brokers, group);
        settings.until_caught_up = true;
        let show = self.show;
        show(Shown::Progress(Progress::Begin { step: format!("ingesting the {what}"), total: None }));
        let report = self.ingest_settings(&settings, &AtomicBool::new(false), |p| {
            let lag: i64 = p.lag.values().sum();
            show(Shown::Progress(Progress::Doing(format!(
                "ingesting the {what}: {} messages, {} recorded, lag {lag}",
                p.messages, p.recorded
            ))));
        })?;
        show(Shown::Progress(Progress::End));
        Ok(report)
    }

    /// Kafka into the ledger until `stop` is set.
    fn ingest_with(
        &self,
        stop: &AtomicBool,
        on_progress: impl FnMut(&KafkaIngestProgress),
    ) -> anyhow::Result<KafkaIngestProgress> {
        let settings = KafkaIngestSettings::new(&self.brokers, "quota-ledger-demo-stream");
        self.ingest_settings(&settings, stop, on_progress)
    }

    fn ingest_settings(
        &self,
        settings: &KafkaIngestSettings,
        stop: &AtomicBool,
        on_progress: impl FnMut(&KafkaIngestProgress),
    ) -> anyhow::Result<KafkaIngestProgress> {
        let _lock = ProcessLock::acquire(&self.ledger_path, "ingest")?;
        let mut ledger = usecases::store::open_for_append(&self.ledger_path)?;
        Ok(ingest_kafka(&mut ledger, settings, stop, on_progress)?)
    }

    /// Services ask the hook (the library, as `serve` does) on the month's last day, then its outbox goes to Kafka.
    fn hook_checks(&mut self) -> anyhow::Result<String> {
        let requests = i64::from(self.settings.hook_requests.max(1));
        let day_start = self.month.end().micros() - DAY_MICROS;
        HOOK_CLOCK_MICROS.store(day_start, Ordering::Relaxed);
        // Normal durability: the demo's ledger is rebuilt by running it again; fsync per group would only slow it.
        let settings = HookSettings { durability: Durability::Normal, clock: hook_clock, ..HookSettings::default() };
        let hook = Hook::start(&self.ledger_path, settings)?;
        let show = self.show;
        show(Shown::Progress(Progress::Begin { step: "hook".into(), total: Some(requests as u64) }));
        let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
        for i in 0..requests {
            HOOK_CLOCK_MICROS.store(day_start + i * (DAY_MICROS / requests), Ordering::Relaxed);
            let decision = hook.check(self.check_request(i))?;
            *outcomes.entry(format!("{} {}", decision.outcome, decision.reason)).or_default() += 1;
            if !decision.allowed() && self.denied_request.is_none() {
                self.denied_request = Some(decision.request_id.clone());
            }
            show(Shown::Progress(Progress::At(i as u64 + 1)));
        }
        show(Shown::Progress(Progress::End));
        let leases = self.leases(&hook, day_start)?;
        drop(hook);
        let published = self.publish_outbox()?;
        let outcomes: Vec<String> = outcomes.iter().map(|(k, n)| format!("{n} {k}")).collect();
        Ok(format!(
            "{requests} checks through hook::Hook during {}: {}; {leases}; {} decisions, usage and lease events \
             published via the outbox",
            Timestamp(day_start).to_string().get(..10).unwrap_or_default(),
            outcomes.join(", "),
            published.published
        ))
    }

    /// A seat meter: [`SEAT_TENANT`]'s `seats` count the distinct users of the month (UNIQUE_COUNT of the subject),
    /// at most [`SEATS`] (HARD). On the month's last day [`SEAT_USERS`] users ask for a seat, each twice: the first
    /// [`SEATS`] users get theirs, asking again costs nothing, the others are refused; the bill counts seats, not asks.
    fn seats(&mut self) -> anyhow::Result<String> {
        let store = usecases::Store::File(self.ledger_path.clone());
        let (actor, reason, source) = ("finance@demo".to_string(), "seats are billed per user".to_string(), "demo");
        let meter = control::MeterChange {
            tenant: SEAT_TENANT.into(),
            metric: SEAT_METRIC.into(),
            aggregation: Aggregation::UNIQUE_COUNT,
            field: Some(MeterField::SUBJECT),
            version: None,
            effective_from: Some(self.month.start()),
            actor: actor.clone(),
            reason: reason.clone(),
            source: source.into(),
        };
        usecases::meter::set_meter(&store, &meter)?;
        let policy = control::PolicyChange {
            tenant: SEAT_TENANT.into(),
            metric: SEAT_METRIC.into(),
            limit: SEATS,
            window: Window::MONTH,
            enforcement: Enforcement::HARD,
            scope: Scope::TENANT,
            policy_id: Some(format!("{SEAT_TENANT}-{SEAT_METRIC}")),
            version: None,
            effective_from: Some(self.month.start()),
            time_zone: None,
            on_failure: None,
            overage: None,
            violation: None,
            window_seconds: None,
            cycle_anchor: None,
            alert_thresholds: None,
            alert_subject_share: None,
            actor,
            reason,
            source: source.into(),
        };
        usecases::change::set_policy(&store, &policy, &usecases::change::Destination::Ledger)?;
        let day_start = self.month.end().micros() - DAY_MICROS;
        HOOK_CLOCK_MICROS.store(day_start + DAY_MICROS / 4, Ordering::Relaxed);
        let settings = HookSettings { durability: Durability::Normal, clock: hook_clock, ..HookSettings::default() };
        let hook = Hook::start(&self.ledger_path, settings)?;
        let (mut allowed, mut refused) = (0, 0);
        for round in 0..2 {
            for user in 0..SEAT_USERS {
                let who = Who { subject: Some(format!("user-{user}")), ..Who::tenant(SEAT_TENANT) };
                let key = format!("demo-{}-seat-{user}-{round}", self.settings.seed);
                let mut request = Request::one(who, SEAT_METRIC, 1, key.clone());
                request.request_id = Some(format!("req-{key}"));
                if hook.check(request)?.allowed() { allowed += 1 } else { refused += 1 }
            }
        }
        drop(hook);
        let published = self.publish_outbox()?;
        Ok(format!(
            "{SEAT_TENANT}'s {SEAT_METRIC} metered as UNIQUE_COUNT of the subject, HARD {SEATS}: {SEAT_USERS} users \
             asked twice, {allowed} asks allowed (a user counted already costs nothing), {refused} refused; {} \
             decisions published",
            published.published
        ))
    }

    /// Workers of [`LEASE_TENANT`] take leases of its [`LEASE_SLOTS`] job slots at noon of the last day: the
    /// first ones get a slot and a fencing token, the rest wait (CONCURRENCY_LIMITED); one finishes and
    /// releases, so the next gets its slot; a worker that comes back with an older token is refused; the others never
    /// release, so their leases expire, and reconcile reports them as leaked.
    fn leases(&self, hook: &Hook, day_start: i64) -> anyhow::Result<String> {
        let noon = day_start + DAY_MICROS / 2;
        HOOK_CLOCK_MICROS.store(noon, Ordering::Relaxed);
        let acquire = |worker: i64| {
            hook.acquire(AcquireRequest {
                who: Who { subject: Some(format!("worker-{worker}")), ..Who::tenant(LEASE_TENANT) },
                metric: LEASE_METRIC.into(),
                ttl_ms: 10 * 60 * 1_000,
                idempotency_key: format!("demo-{}-lease-{worker}", self.settings.seed),
                request_id: Some(format!("req-demo-{}-lease-{worker}", self.settings.seed)),
            })
        };
        let workers = LEASE_SLOTS + 2;
        let mut granted = Vec::new();
        let mut waiting = 0;
        for worker in 0..workers {
            let decision = acquire(worker)?;
            match decision.lease {
                Some(lease) => granted.push(lease),
                None => waiting += 1,
            }
        }
        let first = granted.first().context("the first worker gets a slot")?.clone();
        HOOK_CLOCK_MICROS.store(noon + 60 * 1_000_000, Ordering::Relaxed);
        hook.release_lease(&first.lease_id, first.fencing_token)?.context("the first worker releases its lease")?;
        let next = acquire(workers)?.lease.context("a released slot is free")?;
        let stale = hook.release_lease(&next.lease_id, next.fencing_token - 1)?;
        anyhow::ensure!(stale.is_err(), "a release with an older token is refused: {stale:?}");
        Ok(format!(
            "{} of {workers} workers of {LEASE_TENANT} leased a job slot ({LEASE_SLOTS} at once, fencing tokens {} to \
             {}), {waiting} told to wait (CONCURRENCY_LIMITED); one released, the next got its slot, a release with \
             an older token was refused, and {} never released (reconcile reports them expired)",
            granted.len(),
            first.fencing_token,
            next.fencing_token,
            LEASE_SLOTS
        ))
    }

    /// The i-th check: tenants in turn (a stride so that neighbours differ), a few API keys, 1 to 5 requests.
    fn check_request(&self, i: i64) -> Request {
        let tenants = i64::from(self.settings.tenants.max(1));
        let who =
            Who { subject: Some(format!("key-{}", i % 5)), ..Who::tenant(format!("org-{}", (i * 7) % tenants + 1)) };
        let key = format!("demo-{}-{i}", self.settings.seed);
        let request_id = Some(format!("req-demo-{}-{i}", self.settings.seed));
        Request { request_id, ..Request::one(who, "requests", 1 + i % 5, key) }
    }

    fn publish_outbox(&self) -> anyhow::Result<PublishReport> {
        let mut ledger = Ledger::open(&self.ledger_path)?;
        let timeout = Duration::from_millis(outbox::PUBLISH_TIMEOUT_MS);
        let format = outbox::OutboxFormat::SingleObject;
        let report = outbox::publish(&mut ledger, &self.brokers, &[], &OutboxTopics::defaults(), &format, timeout)?;
        anyhow::ensure!(report.pending == 0, "the mock broker left {} outbox entries unacknowledged", report.pending);
        Ok(report)
    }

    /// The nightly job as of the month's end: plan, apply, publish, and its report in `<name>.txt` and `.json`.
    fn reconcile(&mut self, name: &str) -> anyhow::Result<String> {
        let as_of = self.month.end();
        let settings = usecases::run::RunSettings {
            as_of,
            open_alert_after_s: (reconcile::AlertSettings::default().open_too_long_micros / 1_000_000) as u64,
            dry_run: false,
            full: false,
            publish: Some(usecases::run::Publish::to(&self.brokers, &[], outbox::OutboxFormat::SingleObject)),
        };
        let show = self.show;
        show(Shown::Progress(Progress::Begin { step: format!("reconciling as of {as_of}"), total: None }));
        let run = usecases::run::of_ledger(&self.ledger_path, &settings, &mut |_| {})?;
        show(Shown::Progress(Progress::End));
        let published = run.outbox.as_ref().context("the run published")?;
        anyhow::ensure!(
            published.pending == 0,
            "the mock broker left {} outbox entries unacknowledged",
            published.pending
        );
        let mut text = Vec::new();
        usecases::run::write_report(&mut text, &run, false)?;
        let json = serde_json::to_vec_pretty(&usecases::run::run_json(&run, false))?;
        let plan = &run.plan;
        self.write(&format!("{name}.txt"), &text)?;
        self.write(&format!("{name}.json"), &json)?;
        let mut by_kind: BTreeMap<String, u64> = BTreeMap::new();
        for adjustment in &plan.adjustments {
            *by_kind.entry(adjustment.kind.to_string()).or_default() += 1;
        }
        let kinds: Vec<String> = by_kind.iter().map(|(k, n)| format!("{n} {k}")).collect();
        Ok(format!(
            "as of {as_of}: {} adjustments ({}), published to quota.adjustments; {name}.txt, {name}.json",
            plan.adjustments.len(),
            if kinds.is_empty() { "clean".to_string() } else { kinds.join(", ") }
        ))
    }

    /// `export billing --period M --final` as CSV and Parquet.
    fn close_month(&mut self) -> anyhow::Result<String> {
        let mut ledger = Ledger::open(&self.ledger_path)?;
        let usecases::close::Closed { export, note, .. } = usecases::close::close(&mut ledger, self.month)?;
        let csv = format!("billing-{}.csv", self.month);
        self.write(&csv, &export.to_bytes(Format::Csv)?)?;
        self.write(&format!("billing-{}.parquet", self.month), &export.to_bytes(Format::Parquet)?)?;
        let over =
            |f: fn(&PeriodExportRow) -> Option<i64>| export.rows.iter().filter(|r| f(r).unwrap_or(0) > 0).count();
        let summary = format!(
            "{note}: {} rows; {} (tenant, metric) billed overage (SOFT), {} overshot a HARD limit (not billed); {csv}, \
             .parquet",
            export.rows.len(),
            over(|r| r.overage),
            over(|r| r.overshoot)
        );
        self.closed = Some(export);
        Ok(summary)
    }

    /// A few usage events of the closed month arrive now, through Kafka.
    fn late_events(&mut self) -> anyhow::Result<String> {
        let catalog = Catalog::builtin();
        let mut producer = KafkaProducer::new(&self.brokers, &[])?;
        let mut quantity = 0;
        for k in 1..=LATE_EVENTS {
            let event = late_usage(self.month, self.settings.seed, k, self.settings.tenants);
            quantity += event.quantity;
            send_generated(&mut producer, catalog, Generated::Event(Event::Usage(event)))?;
        }
        producer.finish()?;
        let report = self.ingest("late events")?;
        Ok(format!(
            "{LATE_EVENTS} usage events of {} ({quantity} requests) produced after the close: {}",
            self.month, report
        ))
    }

    /// Finance voids the largest usage event the closed month billed (a customer refunded for an incident), as `usage void`
    /// does: the closed export stays as it was, and the next reconcile carries the correction as a late adjustment.
    fn correction(&mut self) -> anyhow::Result<String> {
        let session = LedgerSession::open(&self.ledger_path, None)?;
        let closed_at = self.closed.as_ref().context("the month was closed")?.watermark;
        let event_id =
            largest_usage(&session, self.month, closed_at)?.context("no usage event in the closed month to void")?;
        let change = control::CorrectionChange {
            original_event_id: event_id,
            tenant: None,
            action: CorrectionAction::VOID,
            quantity: None,
            correction_id: None,
            actor: "finance@demo".into(),
            reason: "refunded for an incident".into(),
            source: "demo".into(),
        };
        let store = usecases::Store::File(self.ledger_path.clone());
        Ok(usecases::correction::words_of(&usecases::correction::correct(&store, &change)?))
    }

    /// The next month's export (not over yet: not final) carries the late adjustments; the closed month's
    /// export does not move.
    fn next_month(&mut self) -> anyhow::Result<String> {
        let next = self.month.next();
        let ledger = Ledger::open(&self.ledger_path)?;
        let (export, note) = reports::export::current(&ledger, next)?;
        let csv = format!("billing-{next}.csv");
        self.write(&csv, &export.to_bytes(Format::Csv)?)?;
        let late: i64 = export.rows.iter().map(|r| r.late_adjustments).sum();
        let (again, _) = reports::export::current(&ledger, self.month)?;
        let closed = self.closed.as_ref().context("the month was closed")?;
        let same = again.to_bytes(Format::Csv)? == closed.to_bytes(Format::Csv)?;
        anyhow::ensure!(same, "the export of the closed month {} changed after late events", self.month);
        Ok(format!(
            "{note}: late_adjustments {late} carried into {next} ({csv}); {} re-exported byte for byte unchanged",
            self.month
        ))
    }

    /// Support's answer for a request the hook denied (or, without one, any denial recorded).
    fn audit_why(&mut self) -> anyhow::Result<String> {
        let session = LedgerSession::open(&self.ledger_path, None)?;
        let request_id = match &self.denied_request {
            Some(id) => id.clone(),
            None => first_denial(&session)?.context("no denied request in the ledger to explain")?,
        };
        let answer = match reports::audit::why::why(&Ledger::open_read_only(&self.ledger_path)?, &request_id)? {
            Ok(answer) => reports::audit::render::why(&answer),
            Err(unknown) => anyhow::bail!("audit why does not find {}", unknown.request_id),
        };
        let file = format!("audit-why-{request_id}.txt");
        self.write(&file, answer.as_bytes())?;
        self.denied_request = Some(request_id);
        Ok(format!("{} ({file})", answer.lines().next().unwrap_or_default()))
    }

    fn verify(&mut self) -> anyhow::Result<String> {
        let ledger = Ledger::open_read_only(&self.ledger_path)?;
        let report = ledger.verify()?;
        if let Some(bad) = &report.first_bad {
            anyhow::bail!("the ledger's chain does not hold: {bad:?}");
        }
        let status = ledger.status()?;
        Ok(format!(
            "hash chain holds over {} entries; {} events recorded, {} duplicates, {} conflicting duplicates, {} quarantined",
            report.entries_checked, status.events_recorded, status.duplicates, status.conflicts, status.quarantined
        ))
    }

    fn write_page(&mut self) -> anyhow::Result<String> {
        let session = LedgerSession::open(&self.ledger_path, None)?;
        let closed = self.closed.as_ref().context("the month was closed")?;
        let page = page::Page {
            month: self.month.to_string(),
            steps: self.steps.clone(),
            usage: usage_of(&closed.rows),
            decisions: decisions_by_day(&session, self.month)?,
            adjustments: adjustments_by_kind(&session)?,
            overshoots: largest_overshoots(&session)?,
            audit_why: std::fs::read_to_string(self.out(&self.audit_file()))?,
            billing: billing_cells(closed)?,
            alerts: alerts(&session)?,
            commands: self.commands(),
        };
        let tokens = format!("[[token]]\nname = \"demo\"\nsecret = \"{DEMO_TOKEN}\"\ntenants = [\"*\"]\n");
        serve::tokens::write_private(&self.out("tokens.toml"), &tokens)?;
        self.write("report.html", page::render(&page)?.as_bytes())?;
        Ok(format!("{} (open it in a browser; it needs no network)", self.out("report.html").display()))
    }

    fn audit_file(&self) -> String {
        format!("audit-why-{}.txt", self.denied_request.as_deref().unwrap_or_default())
    }

    /// What a reader can paste next, against the demo's ledger.
    fn commands(&self) -> Vec<String> {
        let ledger = self.ledger_path.display();
        let q = |args: &str| format!("quota-ledger --ledger {ledger} {args}");
        let (month, next) = (self.month, self.month.next());
        let tenant = self.denied_tenant().unwrap_or_else(|| "org-1".into());
        vec![
            "# finance: the closed month (the same bytes as billing-*.csv), and the next one, open".into(),
            q(&format!("export billing --period {month} --format csv")),
            q(&format!("export billing --period {next} --format csv")),
            "# support: why was this request denied; a tenant's month".into(),
            q(&format!("audit why {}", self.denied_request.as_deref().unwrap_or("REQUEST_ID"))),
            q(&format!("audit tenant {tenant} --from {} --to {}", month.start(), month.end())),
            "# the nightly job: a rerun writes nothing (exit 0)".into(),
            q(&format!("reconcile --as-of {}", month.end())),
            "# operators: counts, the hash chain, what was quarantined, any question in SQL".into(),
            q("status"),
            q("verify"),
            q("quarantine list"),
            q(
                "sql \"SELECT kind, count(*) AS adjustments, sum(amount) AS amount FROM adjustment_events GROUP BY kind\"",
            ),
            "# services: the hook over HTTP (ask with the token of tokens.toml)".into(),
            q(&format!("serve --listen 127.0.0.1:8080 --tokens {}", self.out("tokens.toml").display())),
            format!(
                "curl -s -H 'Authorization: Bearer {DEMO_TOKEN}' -H 'Content-Type: application/json' -d \
                 '{{\"tenant\":\"{tenant}\",\"metric\":\"requests\",\"amount\":1,\"idempotency_key\":\"k-1\"}}' \
                 http://127.0.0.1:8080/v1/check"
            ),
        ]
    }

    fn denied_tenant(&self) -> Option<String> {
        let id = self.denied_request.as_deref()?;
        let i: i64 = id.rsplit('-').next()?.parse().ok()?;
        Some(self.check_request(i).who.tenant)
    }
}
