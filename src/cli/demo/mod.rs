//! `demo [--tenants N] [--events M] [--month YYYY-MM] [--out DIR]`: the whole product in one command, on
//! librdkafka's in-process mock cluster (nothing to install). A month of generated traffic and each tenant's own
//! monthly plan go through Kafka into a fresh ledger; services ask the enforcement hook (the library) on the
//! month's last day; the nightly reconciliation runs; the month is closed and exported for billing; a few late
//! events arrive and are carried into the next month; support asks why a request was denied; and `report.html`
//! shows it all. Every step calls the same library code as the command that does it alone.

mod page;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use hook::{CheckRequest, Hook, HookSettings};
use indicatif::{ProgressBar, ProgressStyle};
use ingest::admin::EmbeddedBroker;
use ingest::generate::{GenerateReport, GenerateSettings, Generated, Generator};
use ingest::kafka::{KafkaIngestProgress, KafkaIngestSettings, ingest_kafka};
use ingest::outbox::{OutboxTopics, PublishReport};
use ingest::produce::KafkaProducer;
use ledger::{Durability, Ledger, Period, PeriodExportRow, ProcessLock};
use reports::LedgerSession;
use reports::export::{BillingExport, Format};
use schemas::*;

use super::export::write_atomically;
use super::generate::send_generated;

/// Tenants by default: enough for every kind of policy the generator makes (org-3's bytes, org-5's per-key
/// SHADOW limit, org-7's grant) to appear several times.
pub const DEFAULT_TENANTS: u32 = 50;
/// Messages by default: sized so that the demo takes about a minute on 2 cores (release build; see README).
pub const DEFAULT_EVENTS: u64 = 300_000;
/// Checks the services send to the hook by default, spread over the month's last day.
pub const DEFAULT_HOOK_REQUESTS: u32 = 2_000;
/// Usage events that arrive after the month is closed.
const LATE_EVENTS: i64 = 5;
/// Partitions per topic on the mock cluster (`broker mock`'s default).
const PARTITIONS: i32 = 3;
/// The ledger file inside `--out`.
const LEDGER_FILE: &str = "ledger.db";
/// A tenant's own monthly limit is its generated consumption times one of these, in turn: a factor below 1 is a
/// tenant that uses more than its plan (HARD: overshoot and denials; SOFT: billed overage).
const LIMIT_FACTORS: [f64; 5] = [0.8, 1.3, 0.9, 1.6, 1.15];
/// Metrics given a tenant policy by the demo, and how it is enforced.
const PLAN_METRICS: [(&str, Enforcement); 2] = [("requests", Enforcement::HARD), ("tokens", Enforcement::SOFT)];
/// The secret of the `tokens.toml` written for `serve` (a demo ledger only: never reuse it).
const DEMO_TOKEN: &str = "demo-secret-0123456789abcdef";
const HOUR_MICROS: i64 = 3_600 * 1_000_000;
const DAY_MICROS: i64 = 24 * HOUR_MICROS;

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Tenants (org-1 ... org-N).
    #[arg(long, default_value_t = DEFAULT_TENANTS)]
    tenants: u32,
    /// Messages generated for the month (usage, reservations, decisions, duplicates, malformed).
    #[arg(long, default_value_t = DEFAULT_EVENTS)]
    events: u64,
    /// Checks services send to the enforcement hook on the month's last day.
    #[arg(long, default_value_t = DEFAULT_HOOK_REQUESTS)]
    hook_requests: u32,
    /// The month played, YYYY-MM; it must be over, since the demo closes it. Default: the last month that ended.
    #[arg(long, value_parser = parse_period)]
    month: Option<Period>,
    /// The same seed gives the same traffic.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where the ledger, exports, reports and report.html go (a previous demo's ledger there is replaced).
    #[arg(long, default_value = "demo-out")]
    out: PathBuf,
}

fn parse_period(text: &str) -> Result<Period, String> {
    text.parse().map_err(|e: ledger::PeriodParseError| e.to_string())
}

/// The hook's clock during the demo: the instant of the check being sent, inside the demo month.
static HOOK_CLOCK_MICROS: AtomicI64 = AtomicI64::new(0);

fn hook_clock() -> Timestamp {
    Timestamp(HOOK_CLOCK_MICROS.load(Ordering::Relaxed))
}

/// What the steps found that later steps and the page need.
struct Demo {
    args: DemoArgs,
    month: Period,
    ledger_path: PathBuf,
    brokers: String,
    steps: Vec<page::Step>,
    denied_request: Option<String>,
    closed: Option<BillingExport>,
    ingest_passes: u32,
}

pub fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let month = args.month.unwrap_or_else(|| Period::containing(Timestamp::now()).previous());
    anyhow::ensure!(
        month.end() <= Timestamp::now(),
        "--month {month} is not over yet (it ends {}): the demo closes the month it plays",
        month.end()
    );
    anyhow::ensure!(args.events >= 1_000, "--events {} is too few for a month: at least 1000", args.events);
    prepare_out(&args.out)?;
    let broker = EmbeddedBroker::start(PARTITIONS).context("cannot start the mock Kafka cluster")?;
    let mut demo = Demo {
        ledger_path: args.out.join(LEDGER_FILE),
        brokers: broker.bootstrap_servers(),
        args,
        month,
        steps: Vec::new(),
        denied_request: None,
        closed: None,
        ingest_passes: 0,
    };
    writeln!(
        super::stdout(),
        "quota-ledger demo: {month}, {} tenants, into {}",
        demo.args.tenants,
        demo.args.out.display()
    )?;
    demo.step("broker", |d| {
        Ok(format!("librdkafka mock cluster on {}: the six topics of SPEC 2, {PARTITIONS} partitions each", d.brokers))
    })?;
    demo.play()?;
    drop(broker);
    demo.print_commands()?;
    Ok(ExitCode::SUCCESS)
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

fn bar(len: u64, message: &str) -> ProgressBar {
    let style = ProgressStyle::with_template("{msg:<10} [{bar:40}] {pos}/{len} ({per_sec}, {eta} left)")
        .expect("a valid template")
        .progress_chars("=> ");
    ProgressBar::new(len).with_style(style).with_message(message.to_string())
}

impl Demo {
    /// Runs one step, timed, and prints what it did.
    fn step(&mut self, name: &str, body: impl FnOnce(&mut Demo) -> anyhow::Result<String>) -> anyhow::Result<()> {
        let started = Instant::now();
        let summary = body(self).with_context(|| format!("demo step {name:?} failed"))?;
        let seconds = started.elapsed().as_secs_f64();
        writeln!(super::stdout(), "{:>2}. {name:<12} {summary} [{seconds:.1} s]", self.steps.len() + 1)?;
        self.steps.push(page::Step { name: name.to_string(), summary, seconds });
        Ok(())
    }

    fn out(&self, file: &str) -> PathBuf {
        self.args.out.join(file)
    }

    fn play(&mut self) -> anyhow::Result<()> {
        self.step("stream", Demo::stream_month)?;
        self.step("hook", Demo::hook_checks)?;
        self.step("ingest", |d| {
            let p = d.ingest("outbox")?;
            Ok(format!("{}: what the hook published comes back as exact duplicates, counted once", ingest_summary(&p)))
        })?;
        self.step("reconcile", |d| d.reconcile("reconcile"))?;
        self.step("close", Demo::close_month)?;
        self.step("late events", Demo::late_events)?;
        self.step("reconcile", |d| d.reconcile("reconcile-late"))?;
        self.step("next month", Demo::next_month)?;
        self.step("audit why", Demo::audit_why)?;
        self.step("verify", Demo::verify)?;
        self.step("report", Demo::write_page)?;
        Ok(())
    }

    fn generate_settings(&self) -> GenerateSettings {
        let mut settings = GenerateSettings::new(self.args.tenants, self.args.events, self.args.seed);
        settings.month_start = self.month.start();
        settings
    }

    /// The demo's tenant policies and the generated month, produced to Kafka while ingest consumes them: the mock
    /// cluster keeps only 5 MiB per partition (librdkafka's `rd_kafka_mock_partition_init`), so the producer
    /// stays at most `IN_FLIGHT_MAX` messages ahead of the ledger, as a month streams in.
    fn stream_month(&mut self) -> anyhow::Result<String> {
        let settings = self.generate_settings();
        let policies = tenant_policies(self.month, &consumption(&settings));
        let progress = bar(settings.messages + policies.len() as u64, "streaming");
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
                progress.set_position(p.messages);
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
        progress.finish_and_clear();
        let (delivered, report) = produced?;
        let ingested = ingested?;
        anyhow::ensure!(
            ingested.messages == delivered && ingested.offset_gaps == 0,
            "{delivered} messages produced but {} ingested ({} offset gaps)",
            ingested.messages,
            ingested.offset_gaps
        );
        Ok(format!(
            "{delivered} messages produced ({}, and {} tenant policies: HARD requests, SOFT tokens) and ingested as \
             they arrived: {}",
            generated_summary(&report),
            policies.len(),
            ingest_summary(&ingested)
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
        let progress = super::spinner();
        progress.enable_steady_tick(Duration::from_millis(200));
        let report = self.ingest_settings(&settings, &AtomicBool::new(false), |p| {
            let lag: i64 = p.lag.values().sum();
            progress.set_message(format!(
                "ingesting the {what}: {} messages, {} recorded, lag {lag}",
                p.messages, p.recorded
            ));
        })?;
        progress.finish_and_clear();
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
        let mut ledger = super::open_for_append(&self.ledger_path)?;
        Ok(ingest_kafka(&mut ledger, settings, stop, on_progress)?)
    }

    /// Services ask the hook (the library, as `serve` does) on the month's last day, then its outbox goes to Kafka.
    fn hook_checks(&mut self) -> anyhow::Result<String> {
        let requests = i64::from(self.args.hook_requests.max(1));
        let day_start = self.month.end().micros() - DAY_MICROS;
        HOOK_CLOCK_MICROS.store(day_start, Ordering::Relaxed);
        // Normal durability: the demo's ledger is rebuilt by running it again; fsync per group would only slow it.
        let settings = HookSettings { durability: Durability::Normal, clock: hook_clock, ..HookSettings::default() };
        let hook = Hook::start(&self.ledger_path, settings)?;
        let progress = bar(requests as u64, "hook");
        let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
        for i in 0..requests {
            HOOK_CLOCK_MICROS.store(day_start + i * (DAY_MICROS / requests), Ordering::Relaxed);
            let decision = hook.check(self.check_request(i))?;
            *outcomes.entry(format!("{} {}", decision.outcome, decision.reason)).or_default() += 1;
            if !decision.allowed() && self.denied_request.is_none() {
                self.denied_request = Some(decision.request_id.clone());
            }
            progress.inc(1);
        }
        progress.finish_and_clear();
        drop(hook);
        let published = self.publish_outbox()?;
        let outcomes: Vec<String> = outcomes.iter().map(|(k, n)| format!("{n} {k}")).collect();
        Ok(format!(
            "{requests} checks through hook::Hook during {}: {}; {} decisions and usage events published via the outbox",
            Timestamp(day_start).to_string().get(..10).unwrap_or_default(),
            outcomes.join(", "),
            published.published
        ))
    }

    /// The i-th check: tenants in turn (a stride so that neighbours differ), a few API keys, 1 to 5 requests.
    fn check_request(&self, i: i64) -> CheckRequest {
        let tenants = i64::from(self.args.tenants.max(1));
        CheckRequest {
            tenant: format!("org-{}", (i * 7) % tenants + 1),
            subject: Some(format!("key-{}", i % 5)),
            metric: "requests".into(),
            amount: 1 + i % 5,
            idempotency_key: format!("demo-{}-{i}", self.args.seed),
            request_id: Some(format!("req-demo-{}-{i}", self.args.seed)),
        }
    }

    fn publish_outbox(&self) -> anyhow::Result<PublishReport> {
        let mut ledger = Ledger::open(&self.ledger_path)?;
        let timeout = Duration::from_millis(super::reconcile::PUBLISH_TIMEOUT_MS);
        let report = ingest::outbox::publish(&mut ledger, &self.brokers, &[], &OutboxTopics::defaults(), timeout)?;
        anyhow::ensure!(report.pending == 0, "the mock broker left {} outbox entries unacknowledged", report.pending);
        Ok(report)
    }

    /// The nightly job as of the month's end: plan, apply, publish, and its report in `<name>.txt` and `.json`.
    fn reconcile(&mut self, name: &str) -> anyhow::Result<String> {
        let as_of = self.month.end();
        let plan = {
            let _lock = ProcessLock::acquire(&self.ledger_path, "reconcile")?;
            let mut ledger = Ledger::open(&self.ledger_path)?;
            let spinner = super::spinner();
            spinner.enable_steady_tick(Duration::from_millis(200));
            spinner.set_message(format!("reconciling as of {as_of}"));
            let plan = reconcile::plan(&ledger, as_of, &mut |_| {})?;
            if !plan.is_clean() {
                reconcile::apply(&mut ledger, &plan)?;
            }
            spinner.finish_and_clear();
            plan
        };
        let outbox = self.publish_outbox()?;
        let mut text = Vec::new();
        super::reconcile::write_report(&mut text, &plan, false, Some(&outbox), outbox.pending)?;
        write_atomically(&self.out(&format!("{name}.txt")), &text)?;
        let json = serde_json::to_vec_pretty(&super::reconcile::run_json(&plan, false, Some(outbox)))?;
        write_atomically(&self.out(&format!("{name}.json")), &json)?;
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
        let (export, note) = super::export::close(&mut ledger, self.month)?;
        let csv = format!("billing-{}.csv", self.month);
        write_atomically(&self.out(&csv), &export.to_bytes(Format::Csv)?)?;
        write_atomically(&self.out(&format!("billing-{}.parquet", self.month)), &export.to_bytes(Format::Parquet)?)?;
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
            let event = late_usage(self.month, self.args.seed, k, self.args.tenants);
            quantity += event.quantity;
            send_generated(&mut producer, catalog, Generated::Event(Event::Usage(event)))?;
        }
        producer.finish()?;
        let report = self.ingest("late events")?;
        Ok(format!(
            "{LATE_EVENTS} usage events of {} ({quantity} requests) produced after the close: {}",
            self.month,
            ingest_summary(&report)
        ))
    }

    /// The next month's export (not over yet: not final) carries the late adjustments; the closed month's
    /// export does not move.
    fn next_month(&mut self) -> anyhow::Result<String> {
        let next = self.month.next();
        let ledger = Ledger::open(&self.ledger_path)?;
        let (export, note) = super::export::current(&ledger, next)?;
        let csv = format!("billing-{next}.csv");
        write_atomically(&self.out(&csv), &export.to_bytes(Format::Csv)?)?;
        let late: i64 = export.rows.iter().map(|r| r.late_adjustments).sum();
        let (again, _) = super::export::current(&ledger, self.month)?;
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
        write_atomically(&self.out(&file), answer.as_bytes())?;
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
            commands: self.commands(),
        };
        std::fs::write(self.out("tokens.toml"), format!("[[token]]\nsecret = \"{DEMO_TOKEN}\"\ntenants = [\"*\"]\n"))?;
        write_atomically(&self.out("report.html"), page::render(&page)?.as_bytes())?;
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
        Some(self.check_request(i).tenant)
    }

    fn print_commands(&self) -> anyhow::Result<()> {
        let mut out = super::stdout();
        writeln!(
            out,
            "\nEverything is in {}. Try (from a checkout: cargo run --release -- ...):\n",
            self.args.out.display()
        )?;
        for command in self.commands() {
            writeln!(out, "  {command}")?;
        }
        Ok(())
    }
}

/// Most messages produced and not yet ingested: a quarter of what the mock cluster keeps of one partition, were
/// they all on one (one tenant's traffic is), at about 100 bytes a message.
const IN_FLIGHT_MAX: u64 = 12_000;

/// Produces the policies, then the generated month, waiting whenever `IN_FLIGHT_MAX` messages wait for the
/// ingest; answers the messages acknowledged and what was generated.
fn produce(
    brokers: &str,
    policies: &[Event],
    settings: GenerateSettings,
    consumed: &AtomicU64,
) -> anyhow::Result<(u64, GenerateReport)> {
    let catalog = Catalog::builtin();
    let mut producer = KafkaProducer::new(brokers, &[])?;
    for policy in policies {
        send_generated(&mut producer, catalog, Generated::Event(policy.clone()))?;
    }
    let mut generator = Generator::new(settings);
    for (sent, generated) in (policies.len() as u64..).zip(generator.by_ref()) {
        while sent.saturating_sub(consumed.load(Ordering::SeqCst)) >= IN_FLIGHT_MAX {
            std::thread::sleep(Duration::from_millis(10));
        }
        send_generated(&mut producer, catalog, generated)?;
    }
    Ok((producer.finish()?.delivered, generator.report().clone()))
}

fn generated_summary(report: &GenerateReport) -> String {
    format!(
        "{} events, {} exact duplicates, {} conflicting duplicates, {} malformed",
        report.unique_events, report.duplicates, report.conflicts, report.malformed
    )
}

fn ingest_summary(p: &KafkaIngestProgress) -> String {
    format!(
        "{} messages: {} recorded, {} duplicates, {} conflicting duplicates, {} quarantined; watermark {}",
        p.messages, p.recorded, p.duplicates, p.conflicts, p.quarantined, p.watermark
    )
}

/// Usage per (tenant, metric) the generator will produce: a dry run of the same seed, to size the plans.
fn consumption(settings: &GenerateSettings) -> BTreeMap<(String, String), i64> {
    let mut sums = BTreeMap::new();
    for generated in Generator::new(settings.clone()) {
        if let Generated::Event(Event::Usage(u)) = generated {
            *sums.entry((u.header.tenant, u.header.metric)).or_default() += u.quantity;
        }
    }
    sums
}

/// Each tenant's own monthly plan (TENANT scope, MONTH window), sized around its traffic: the generator's plan
/// defaults are far above a demo-sized month, and a demo where nobody reaches a limit shows nothing.
fn tenant_policies(month: Period, consumption: &BTreeMap<(String, String), i64>) -> Vec<Event> {
    let mut policies = Vec::new();
    for (i, ((tenant, metric), used)) in consumption.iter().enumerate() {
        let Some((_, enforcement)) = PLAN_METRICS.iter().find(|(m, _)| m == metric) else { continue };
        let limit = round_limit(*used as f64 * LIMIT_FACTORS[i % LIMIT_FACTORS.len()]);
        let header = Header {
            event_id: format!("demo-policy-{tenant}-{metric}"),
            occurred_at: month.start(),
            tenant: tenant.clone(),
            subject: None,
            metric: metric.clone(),
            source: "demo".into(),
        };
        policies.push(Event::Policy(PolicyEvent {
            header,
            policy_id: format!("{tenant}-{metric}-monthly"),
            version: 1,
            scope: Scope::TENANT,
            limit,
            window: Window::MONTH,
            enforcement: *enforcement,
            effective_from: month.start(),
            burst: None,
        }));
    }
    policies
}

/// A limit as a plan would state it: two significant digits, at least 10.
fn round_limit(value: f64) -> i64 {
    let magnitude = 10f64.powi((value.max(10.0).log10().floor() as i32 - 1).max(0));
    ((value / magnitude).round() * magnitude).max(10.0) as i64
}

/// The k-th late usage event: requests of a tenant, in the closed month's last hours.
fn late_usage(month: Period, seed: u64, k: i64, tenants: u32) -> UsageEvent {
    let tenant = format!("org-{}", (k - 1) % i64::from(tenants.max(1)) + 1);
    UsageEvent {
        header: Header {
            event_id: format!("demo-late-{seed}-{k}"),
            occurred_at: Timestamp(month.end().micros() - k * HOUR_MICROS),
            tenant,
            subject: None,
            metric: "requests".into(),
            source: "demo-late".into(),
        },
        quantity: 10 * k,
        request_id: None,
        attributes: BTreeMap::new(),
    }
}

fn usage_of(rows: &[PeriodExportRow]) -> Vec<page::Usage> {
    rows.iter()
        .filter_map(|r| {
            Some(page::Usage {
                tenant: r.tenant.clone(),
                metric: r.metric.clone(),
                consumption: r.consumption,
                effective_limit: r.effective_limit.filter(|l| *l > 0)?,
            })
        })
        .collect()
}

/// The export as cells, header first, as in the CSV.
fn billing_cells(export: &BillingExport) -> anyhow::Result<Vec<Vec<String>>> {
    let csv = String::from_utf8(export.to_bytes(Format::Csv)?)?;
    // No cell of these rows holds a comma or a quote (tenants and metrics are the generator's names).
    Ok(csv.lines().map(|line| line.split(',').map(String::from).collect()).collect())
}

/// One query's rows as text cells.
fn query_cells(session: &LedgerSession, sql: &str) -> anyhow::Result<Vec<Vec<String>>> {
    let mut rows = Vec::new();
    for batch in session.query(sql, Vec::new())? {
        for row in 0..batch.num_rows() {
            let cells = batch
                .columns()
                .iter()
                .map(|column| arrow::util::display::array_value_to_string(column, row))
                .collect::<Result<Vec<String>, _>>()?;
            rows.push(cells);
        }
    }
    Ok(rows)
}

fn number(cell: &str) -> i64 {
    cell.parse().unwrap_or(0)
}

fn first_denial(session: &LedgerSession) -> anyhow::Result<Option<String>> {
    let sql = "SELECT request_id FROM decision_events WHERE outcome = 'DENIED' ORDER BY seq LIMIT 1";
    Ok(query_cells(session, sql)?.into_iter().next().and_then(|row| row.into_iter().next()))
}

fn decisions_by_day(session: &LedgerSession, month: Period) -> anyhow::Result<Vec<page::DayDecisions>> {
    let sql = "SELECT CAST(CAST(occurred_at AS DATE) AS VARCHAR) AS day, outcome, count(*) AS decisions \
               FROM decision_events WHERE status = 'recorded' GROUP BY 1, 2 ORDER BY 1, 2";
    let mut days: BTreeMap<String, page::DayDecisions> = BTreeMap::new();
    let prefix = month.to_string();
    for row in query_cells(session, sql)? {
        let [day, outcome, n] = <[String; 3]>::try_from(row).map_err(|_| anyhow::anyhow!("three columns"))?;
        if !day.starts_with(&prefix) {
            continue;
        }
        let entry = days.entry(day.clone()).or_insert(page::DayDecisions { day, allowed: 0, denied: 0 });
        let n = number(&n) as u64;
        if outcome == "DENIED" {
            entry.denied += n;
        } else {
            entry.allowed += n;
        }
    }
    Ok(days.into_values().collect())
}

fn adjustments_by_kind(session: &LedgerSession) -> anyhow::Result<Vec<page::KindTotal>> {
    let sql = "SELECT kind, count(*), sum(amount) FROM adjustment_events GROUP BY kind ORDER BY kind";
    Ok(query_cells(session, sql)?
        .into_iter()
        .map(|row| page::KindTotal {
            kind: row[0].clone(),
            adjustments: number(&row[1]) as u64,
            amount: number(&row[2]),
        })
        .collect())
}

/// The windows most over their limit now: each concern's adjustments add up to its current overshoot.
fn largest_overshoots(session: &LedgerSession) -> anyhow::Result<Vec<page::Overshoot>> {
    let sql = format!(
        "SELECT tenant, subject, metric, policy_id, CAST(window_start AS BIGINT), CAST(window_end AS BIGINT), \
         sum(amount) AS overshoot FROM adjustment_events WHERE kind = 'OVERSHOOT' \
         GROUP BY tenant, subject, metric, policy_id, window_start, window_end HAVING sum(amount) > 0 \
         ORDER BY overshoot DESC, tenant, metric LIMIT {}",
        page::OVERSHOOTS_SHOWN
    );
    Ok(query_cells(session, &sql)?
        .into_iter()
        .map(|row| page::Overshoot {
            tenant: row[0].clone(),
            subject: Some(row[1].clone()).filter(|s| !s.is_empty()),
            metric: row[2].clone(),
            policy_id: row[3].clone(),
            window: window_label(Timestamp(number(&row[4])), Timestamp(number(&row[5]))),
            amount: number(&row[6]),
        })
        .collect())
}

/// A window as people name it: the month, the day, or its start.
fn window_label(start: Timestamp, end: Timestamp) -> String {
    let period = Period::containing(start);
    let text = start.to_string();
    match end.micros() - start.micros() {
        _ if period.start() == start && period.end() == end => period.to_string(),
        DAY_MICROS => text.get(..10).unwrap_or_default().to_string(),
        _ => text.get(..16).unwrap_or_default().to_string(),
    }
}
