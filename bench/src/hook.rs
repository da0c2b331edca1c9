//! `bench hook`: decisions per second and p50/p99 latency of `check`, in-process and over HTTP on loopback, at
//! several concurrencies, side by side with Redis 7 (Debian's `redis-server`, started here) running a Lua
//! check-and-consume script with the same semantics (read the counter, compare with the limit, increment, store
//! the idempotency key), driven by the same client (one event loop, a connection per client) at the same concurrency. The hook also records an
//! audit decision (and the usage) per request in the ledger; Redis records nothing but the counter. One more
//! in-process measurement starts with 10,000 open reservations of other tenants in the ledger: a decision should
//! not cost more because other requests are in flight. One more over HTTP publishes the outbox to the embedded
//! broker, as `serve --brokers` does in production, and says how long after the load the publisher caught up. The
//! hook in-process also answers requests of two metrics at once, and leases of a CONCURRENT policy: each request
//! one acquire and one release, a worker's whole cycle.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use hook::{AcquireRequest, Hook, HookSettings, LeaseStep, Request, Shards, TenantScope};
use kafka::admin::EmbeddedBroker;
use ledger::shards::{Shard, ShardDir};
use ledger::{Batch, Durability, Incoming, Ledger, Origin};
use schemas::*;
use serde::Serialize;

use super::client::{Connection, Reply};

/// How long after the load stops the publishing peer's outbox must be published.
const OUTBOX_CATCH_UP_LIMIT: Duration = Duration::from_secs(30);
/// Time each measurement runs before it counts: connections warm, the writer's first groups, the page cache.
const WARM_UP: Duration = Duration::from_millis(500);
/// A limit no benchmark run reaches (the largest the ledger accepts): every check is allowed and consumes, the
/// costly path.
const LIMIT: i64 = schemas::validate::AMOUNT_MAX;
/// Open reservations (of other tenants, for an hour) in the ledger of the extra in-process measurement: what a
/// decision costs while many holds are open (in flight, e.g. model calls holding their token budget).
const OPEN_HOLDS: usize = 10_000;
/// Tenants those reservations are spread over.
const OPEN_HOLD_TENANTS: usize = 100;
/// What the run says when `redis-server` cannot be started, before measuring anything or after.
const REDIS_MISSING: &str = "cannot start redis-server (apt-get install redis-server)";

/// The Lua script: the same check-and-consume as the hook's, on one counter.
const LUA: &str = r#"
local seen = redis.call('GET', KEYS[2])
if seen then return tonumber(seen) end
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local amount = tonumber(ARGV[1])
if used + amount > tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], 0)
  return 0
end
redis.call('INCRBY', KEYS[1], amount)
redis.call('SET', KEYS[2], 1)
return 1
"#;

/// What to measure.
#[derive(Debug, Clone)]
pub struct HookBenchSettings {
    /// Clients of each measurement, one measurement each.
    pub concurrency: Vec<usize>,
    /// Seconds each measurement counts, after half a second of warm-up.
    pub seconds: f64,
    /// Send each check a random request_id (32 hex digits, as a UUID's) instead of none (then the hook uses the
    /// idempotency key, and the ids of one client sort together).
    pub random_request_ids: bool,
    /// The `quota-ledger` binary whose `serve` is measured over HTTP.
    pub binary: PathBuf,
    /// Also measure the hook over 1 shard and over this many in one process (a writer per shard); `None`: not.
    pub shards: Option<u32>,
}

/// Tenants the clients of the sharded measurements ask for, spread evenly over the partitions: one per client at
/// 64 clients, so that no shard waits for another's tenants.
const SHARDED_TENANTS: usize = 64;

/// One measurement: a peer at a concurrency.
#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    /// Which peer: `hook in-process (Full)`, `hook over HTTP (normal)`, `redis+lua (no persistence)`, ...
    pub peer: String,
    /// Clients, each with one request at a time.
    pub concurrency: usize,
    /// Requests answered within the measured seconds.
    pub requests: usize,
    /// Requests answered per second.
    pub decisions_per_second: f64,
    /// Median latency, in microseconds.
    pub p50_us: f64,
    /// 99th percentile latency, in microseconds.
    pub p99_us: f64,
    /// The peer that publishes its outbox to Kafka: how long after the load stopped the last decision was
    /// published (the publisher's lag behind the hook).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outbox_caught_up_ms: Option<u64>,
    /// The sharded peers: how many shards.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shards: Option<u32>,
    /// The N-shard peer: its decisions per second over the 1-shard peer's of the same durability.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speedup_over_one_shard: Option<f64>,
    /// The sharded peers: their decisions per second over Redis+Lua's with `appendfsync always` at the same
    /// concurrency (one node against one Redis).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio_to_redis_fsync_always: Option<f64>,
}

/// The measurement as a line for people, aligned with the other peers' lines.
impl std::fmt::Display for Figures {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let caught_up =
            self.outbox_caught_up_ms.map_or_else(String::new, |ms| format!("  outbox published {ms} ms after"));
        let speedup = self.speedup_over_one_shard.map_or_else(String::new, |x| format!("  {x:.2}x one shard"));
        let per_node =
            self.ratio_to_redis_fsync_always.map_or_else(String::new, |x| format!("  {x:.2}x redis (always)"));
        writeln!(
            out,
            "{:42} c={:<3} {:>8} req  {:>9.0} decisions/s  p50 {:>8.0} us  p99 {:>8.0} us{caught_up}{speedup}{per_node}",
            self.peer, self.concurrency, self.requests, self.decisions_per_second, self.p50_us, self.p99_us
        )
    }
}

/// One client of a measurement: a kept-alive connection (or the hook's handle) sending one request at a time.
pub(crate) trait Client {
    /// Sends request `i` and waits for its answer.
    async fn call(&mut self, i: usize) -> anyhow::Result<()>;
}

/// The benchmark's client side: one thread running every client as a task on one event loop, as `wrk` and
/// `redis-benchmark` do, for the same `seconds` per measurement. A thread per client, each blocking on its socket
/// and woken for every answer, would take the cores (two on the machines measured) the servers need
/// (docs/benchmarks.md compares the two).
pub(crate) struct Driver {
    pub(crate) runtime: tokio::runtime::Runtime,
    seconds: f64,
}

impl Driver {
    pub(crate) fn new(seconds: f64) -> anyhow::Result<Driver> {
        Ok(Driver { runtime: tokio::runtime::Builder::new_current_thread().enable_all().build()?, seconds })
    }

    /// Runs one measurement: every client sending requests through [`Client::call`], for [`WARM_UP`] and then
    /// `seconds` more. Only the requests sent and answered within those `seconds` count: a fixed duration, not a
    /// fixed count, so that fast and slow peers are measured over the same time, long enough that a stall or a
    /// checkpoint shows in their figures (a fixed 20,000 requests would measure a fast peer over a fifth of a
    /// second).
    pub(crate) fn measure<C: Client + 'static>(&self, peer: &str, clients: Vec<C>) -> anyhow::Result<Figures> {
        let (runtime, seconds) = (&self.runtime, self.seconds);
        let concurrency = clients.len();
        let window = Duration::from_secs_f64(seconds);
        let from = Instant::now() + WARM_UP;
        let until = from + window;
        let tasks = tokio::task::LocalSet::new();
        let handles: Vec<_> = clients
            .into_iter()
            .map(|mut client| {
                tasks.spawn_local(async move {
                    let mut latencies = Vec::new();
                    for i in 0.. {
                        let sent = Instant::now();
                        if sent >= until {
                            break;
                        }
                        client.call(i).await?;
                        let answered = Instant::now();
                        if sent >= from && answered <= until {
                            latencies.push((answered - sent).as_micros().min(u32::MAX as u128) as u32);
                        }
                    }
                    anyhow::Ok(latencies)
                })
            })
            .collect();
        let mut latencies = Vec::new();
        tasks.block_on(runtime, async {
            for handle in handles {
                latencies.extend(handle.await.context("a client task panicked")??);
            }
            anyhow::Ok(())
        })?;
        anyhow::ensure!(!latencies.is_empty(), "{peer}: no request was answered within {seconds} s");
        latencies.sort_unstable();
        let at = |q: f64| latencies[((latencies.len() as f64 - 1.0) * q) as usize] as f64;
        Ok(Figures {
            peer: peer.to_string(),
            concurrency,
            requests: latencies.len(),
            decisions_per_second: latencies.len() as f64 / window.as_secs_f64(),
            p50_us: at(0.50),
            p99_us: at(0.99),
            outbox_caught_up_ms: None,
            shards: None,
            speedup_over_one_shard: None,
            ratio_to_redis_fsync_always: None,
        })
    }
}

fn policy_event() -> Event {
    let start = Timestamp::parse_rfc3339("2026-01-01T00:00:00Z").expect("a valid timestamp");
    Event::Policy(PolicyEvent::new(
        Header {
            event_id: "bench-policy".into(),
            occurred_at: start,
            tenant: "org-bench".into(),
            subject: None,
            project: None,
            api_key: None,
            metric: "tokens".into(),
            source: "bench".into(),
        },
        "bench-monthly",
        LIMIT,
        Window::MONTH,
        Enforcement::HARD,
        start,
    ))
}

/// The benchmark's policy of `requests`, for the requests of two metrics: a limit no run reaches either.
fn requests_policy_event() -> Event {
    let Event::Policy(mut policy) = policy_event() else { unreachable!("a policy") };
    policy.header.event_id = "bench-policy-requests".into();
    policy.header.metric = "requests".into();
    policy.policy_id = "bench-monthly-requests".into();
    Event::Policy(policy)
}

/// The benchmark's CONCURRENT policy of `workers`, for the leases: as many slots as the other policies' limit, which
/// no run fills.
fn leases_policy_event() -> Event {
    let Event::Policy(mut policy) = policy_event() else { unreachable!("a policy") };
    policy.header.event_id = "bench-policy-workers".into();
    policy.header.metric = "workers".into();
    policy.policy_id = "bench-workers".into();
    policy.window = Window::CONCURRENT;
    Event::Policy(policy)
}

/// The benchmark's policy as a ROLLING quota of a day, beside the monthly one: each decision sums
/// the day ending now from the timeline, whose instants the run keeps adding.
fn rolling_policy_event() -> Event {
    let Event::Policy(mut policy) = policy_event() else { unreachable!("a policy") };
    policy.header.event_id = "bench-policy-rolling".into();
    policy.policy_id = "bench-rolling-day".into();
    policy.window = Window::ROLLING;
    policy.window_seconds = Some(86_400);
    Event::Policy(policy)
}

/// The benchmark's policy as a quota per billing cycle, from the 17th at midnight in New York,
/// beside the monthly one: each decision sums the cycle so far (up to a month) from the timeline.
fn cycle_policy_event() -> Event {
    let Event::Policy(mut policy) = policy_event() else { unreachable!("a policy") };
    policy.header.event_id = "bench-policy-cycle".into();
    policy.policy_id = "bench-cycle".into();
    policy.window = Window::BILLING_CYCLE;
    policy.cycle_anchor = Some(Timestamp::parse_rfc3339("2026-01-17T05:00:00Z").expect("an instant"));
    policy.time_zone = Some("America/New_York".into());
    Event::Policy(policy)
}

/// An open reservation of another tenant, expiring in an hour.
fn hold_event(i: usize) -> Event {
    let now = Timestamp::now();
    Event::Reservation(ReservationEvent {
        header: Header {
            event_id: format!("bench-hold-{i}"),
            occurred_at: now,
            tenant: format!("org-{}", i % OPEN_HOLD_TENANTS),
            subject: None,
            project: None,
            api_key: None,
            metric: "tokens".into(),
            source: "bench".into(),
        },
        reservation_id: format!("bench-hold-{i}"),
        action: ReservationAction::RESERVE,
        amount: 1,
        expires_at: Some(Timestamp(now.micros() + 3_600 * 1_000_000)),
        fencing_token: None,
    })
}

/// A new ledger holding the benchmark's policy and `open_holds` open reservations.
pub(crate) fn fresh_ledger(path: &Path, open_holds: usize) -> anyhow::Result<()> {
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let events = [policy_event(), requests_policy_event(), leases_policy_event()]
        .into_iter()
        .chain((0..open_holds).map(hold_event));
    let incoming = events.map(|event| Incoming { event, origin: Origin::Local { name: "bench".into() }, raw: None });
    Ledger::open(path)?.append(&Batch { events: incoming.collect(), ..Batch::default() })?;
    Ok(())
}

fn request(run: usize, c: usize, i: usize, random_ids: bool) -> Request {
    let request_id = random_ids.then(|| random_request_id(run, c, i));
    Request { request_id, ..Request::one(Who::tenant("org-bench"), "tokens", 1, format!("r{run}-c{c}-i{i}")) }
}

/// A request_id as random as a UUID's 32 hex digits (where the ledger's indexes see random keys), the same for
/// the same request: `bench append`'s splitmix64 of its run, client and number.
fn random_request_id(run: usize, c: usize, i: usize) -> String {
    use super::mix;
    let seed = mix(run as u64) ^ mix((c as u64) << 32 | i as u64);
    format!("{:016x}{:016x}", mix(seed), mix(seed ^ 1))
}

/// The library's `check`, called from the client's tasks as `serve` calls it.
struct InProcess {
    hook: Arc<Hook>,
    run: usize,
    client: usize,
    random_ids: bool,
}

impl Client for InProcess {
    async fn call(&mut self, i: usize) -> anyhow::Result<()> {
        let decision = self.hook.check_async(request(self.run, self.client, i, self.random_ids)).await?;
        anyhow::ensure!(decision.allowed(), "every benchmark check is allowed");
        Ok(())
    }
}

/// The library's `check_amounts` of two metrics, 1 request and 1 token, called as [`InProcess`] calls `check`.
struct InProcessAmounts {
    hook: Arc<Hook>,
    run: usize,
    client: usize,
}

impl Client for InProcessAmounts {
    async fn call(&mut self, i: usize) -> anyhow::Result<()> {
        let one = request(self.run, self.client, i, false);
        let amounts = [("requests".to_string(), 1), ("tokens".to_string(), 1)].into();
        let request = Request::several(one.who, amounts, one.idempotency_key);
        let decisions = self.hook.check_amounts_async(request, None).await?;
        anyhow::ensure!(decisions.allowed(), "every benchmark check is allowed");
        Ok(())
    }
}

/// A worker's cycle through the library: acquire a lease of `workers`, then release it with its fencing token, as
/// `serve` calls the two.
struct InProcessLease {
    hook: Arc<Hook>,
    run: usize,
    client: usize,
}

impl Client for InProcessLease {
    async fn call(&mut self, i: usize) -> anyhow::Result<()> {
        let one = request(self.run, self.client, i, false);
        let request = AcquireRequest {
            who: one.who,
            metric: "workers".into(),
            ttl_ms: 60_000,
            idempotency_key: one.idempotency_key,
            request_id: None,
        };
        let decision = self.hook.acquire_async(request, None).await?;
        let lease = decision.lease.context("every benchmark acquire is granted a lease")?;
        let step = LeaseStep { fencing_token: lease.fencing_token, ttl_ms: None };
        let released =
            self.hook.lease_step_async(&lease.lease_id, ReservationAction::RELEASE, step, TenantScope::All).await?;
        anyhow::ensure!(released.is_ok(), "every benchmark lease is released: {released:?}");
        Ok(())
    }
}

/// The hook in-process granting and releasing leases: two groups of the writer per request.
fn in_process_leases(driver: &Driver, dir: &Path, run: usize, clients: usize) -> anyhow::Result<Figures> {
    let path = dir.join(format!("hook-{run}.db"));
    fresh_ledger(&path, 0)?;
    let settings = HookSettings { durability: Durability::Normal, ..HookSettings::default() };
    let hook = Arc::new(Hook::start(&path, settings)?);
    let clients = (0..clients).map(|client| InProcessLease { hook: Arc::clone(&hook), run, client }).collect();
    driver.measure("hook in-process (Normal, leases)", clients)
}

/// The hook in-process under `policy` beside the monthly quota: a ROLLING day or a billing cycle, both
/// summed from the timelines.
fn in_process_beside(
    driver: &Driver,
    dir: &Path,
    (run, clients): (usize, usize),
    policy: Event,
    label: &str,
) -> anyhow::Result<Figures> {
    let path = dir.join(format!("hook-{run}.db"));
    fresh_ledger(&path, 0)?;
    let incoming = Incoming { event: policy, origin: Origin::Local { name: "bench".into() }, raw: None };
    Ledger::open(&path)?.append(&Batch { events: vec![incoming], ..Batch::default() })?;
    let settings = HookSettings { durability: Durability::Normal, ..HookSettings::default() };
    let hook = Arc::new(Hook::start(&path, settings)?);
    let clients =
        (0..clients).map(|client| InProcess { hook: Arc::clone(&hook), run, client, random_ids: false }).collect();
    driver.measure(label, clients)
}

/// The hook in-process answering requests of two metrics at once: two decisions and two usage
/// events each.
fn in_process_two_metrics(
    driver: &Driver,
    dir: &Path,
    run: usize,
    clients: usize,
    durability: Durability,
) -> anyhow::Result<Figures> {
    let path = dir.join(format!("hook-{run}.db"));
    fresh_ledger(&path, 0)?;
    let hook = Arc::new(Hook::start(&path, HookSettings { durability, ..HookSettings::default() })?);
    let clients = (0..clients).map(|client| InProcessAmounts { hook: Arc::clone(&hook), run, client }).collect();
    driver.measure(&format!("hook in-process ({durability:?}, 2 metrics)"), clients)
}

fn in_process(
    driver: &Driver,
    dir: &Path,
    run: usize,
    clients: usize,
    durability: Durability,
    open_holds: usize,
    random_ids: bool,
) -> anyhow::Result<Figures> {
    let path = dir.join(format!("hook-{run}.db"));
    fresh_ledger(&path, open_holds)?;
    let hook = Arc::new(Hook::start(&path, HookSettings { durability, ..HookSettings::default() })?);
    let name = match open_holds {
        0 => format!("hook in-process ({durability:?})"),
        n => format!("hook in-process ({durability:?}, {n} holds)"),
    };
    let clients = (0..clients).map(|client| InProcess { hook: Arc::clone(&hook), run, client, random_ids }).collect();
    driver.measure(&name, clients)
}

/// `partitions` × (`count` / `partitions`) tenant names, as many of each partition, in turn.
fn balanced_tenants(count: usize, partitions: u32) -> Vec<String> {
    let per = count.div_ceil(partitions as usize);
    let mut of: Vec<Vec<String>> = vec![Vec::new(); partitions as usize];
    let mut i = 0;
    while of.iter().any(|tenants| tenants.len() < per) {
        let tenant = format!("org-bench-{i}");
        let partition = schemas::partition::partition_of(&tenant, partitions) as usize;
        if of[partition].len() < per {
            of[partition].push(tenant);
        }
        i += 1;
    }
    (0..per).flat_map(|k| of.iter().map(move |tenants| tenants[k].clone())).collect()
}

/// The benchmark's policy as the plan default (tenant `*`), which every shard holds.
fn plan_default_event() -> Event {
    let Event::Policy(mut policy) = policy_event() else { unreachable!("policy_event is a PolicyEvent") };
    policy.header.tenant = "*".into();
    Event::Policy(policy)
}

/// The router's `check`, called from the client's tasks as `serve --data` calls it, each client for its tenant.
struct Sharded {
    shards: Arc<Shards>,
    tenant: String,
    run: usize,
    client: usize,
}

impl Client for Sharded {
    async fn call(&mut self, i: usize) -> anyhow::Result<()> {
        let mut ask = request(self.run, self.client, i, false);
        ask.who.tenant = self.tenant.clone();
        let decision = self.shards.check_async(ask).await?;
        anyhow::ensure!(decision.allowed(), "every benchmark check is allowed");
        Ok(())
    }
}

/// The hook over `partitions` new shards holding the plan default, at `clients` clients over [`SHARDED_TENANTS`]
/// tenants spread evenly over the partitions of `spread` (the same tenants for 1 shard as for N).
fn sharded(
    driver: &Driver,
    dir: &Path,
    run: usize,
    clients: usize,
    durability: Durability,
    partitions: u32,
    spread: u32,
) -> anyhow::Result<Figures> {
    let shard_dir = ShardDir::new(dir.join(format!("shards-{run}")));
    for partition in 0..partitions {
        let mut ledger = shard_dir.open(Shard { partition, partitions })?;
        let event = plan_default_event();
        let incoming = Incoming { event, origin: Origin::Local { name: "bench".into() }, raw: None };
        ledger.append(&Batch { events: vec![incoming], ..Batch::default() })?;
    }
    let settings = HookSettings { durability, ..HookSettings::default() };
    let shards = Arc::new(Shards::start_all(shard_dir, None, settings)?);
    let tenants = balanced_tenants(SHARDED_TENANTS, spread);
    let clients = (0..clients)
        .map(|client| Sharded {
            shards: Arc::clone(&shards),
            tenant: tenants[client % tenants.len()].clone(),
            run,
            client,
        })
        .collect();
    let plural = if partitions == 1 { "" } else { "s" };
    let figures = driver.measure(&format!("hook in-process, {partitions} shard{plural} ({durability:?})"), clients)?;
    Ok(Figures { shards: Some(partitions), ..figures })
}

/// A child process stopped when dropped.
pub(crate) struct ChildGuard(pub(crate) Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// `serve` as a child process of the settings' binary, driven over HTTP; with `brokers`, publishing its outbox to
/// them.
fn over_http(
    settings: &HookBenchSettings,
    driver: &Driver,
    dir: &Path,
    run: usize,
    clients: usize,
    durability: &str,
    brokers: Option<&str>,
) -> anyhow::Result<Figures> {
    let path = dir.join(format!("hook-{run}.db"));
    fresh_ledger(&path, 0)?;
    let tokens = dir.join("tokens.toml");
    serve::tokens::write_private(
        &tokens,
        &format!("[[token]]\nname = \"bench\"\nsecret = \"{TOKEN}\"\ntenants = [\"*\"]\n"),
    )?;
    let port = free_port()?;
    let (random_ids, mut command) = (settings.random_request_ids, Command::new(&settings.binary));
    command
        .arg("--ledger")
        .arg(&path)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--durability", durability, "--tokens"])
        .arg(&tokens)
        .stdout(Stdio::null());
    if let Some(brokers) = brokers {
        command.args(["--brokers", brokers]);
    }
    let child = command.spawn().context("cannot start serve")?;
    let _guard = ChildGuard(child);
    wait_for(port)?;
    let clients = driver.runtime.block_on(async {
        let mut connected = Vec::with_capacity(clients);
        for client in 0..clients {
            connected.push(HttpCheck { connection: Connection::open(port).await?, run, client, random_ids });
        }
        anyhow::Ok(connected)
    })?;
    let peer = match brokers {
        Some(_) => format!("hook over HTTP ({durability}, publishing)"),
        None => format!("hook over HTTP ({durability})"),
    };
    let mut figures = driver.measure(&peer, clients)?;
    if brokers.is_some() {
        figures.outbox_caught_up_ms = Some(outbox_caught_up(&path)?.as_millis() as u64);
    }
    Ok(figures)
}

/// How long until nothing of the ledger's outbox is left to publish. A publisher more than
/// [`OUTBOX_CATCH_UP_LIMIT`] behind fails the benchmark: it does not keep up with the hook.
fn outbox_caught_up(path: &Path) -> anyhow::Result<Duration> {
    let ledger = Ledger::open_read_only(path)?;
    let started = Instant::now();
    loop {
        let pending = ledger.outbox_pending_count()?;
        if pending == 0 {
            return Ok(started.elapsed());
        }
        anyhow::ensure!(
            started.elapsed() < OUTBOX_CATCH_UP_LIMIT,
            "the outbox publisher had {pending} entries still to publish {} s after the load stopped",
            OUTBOX_CATCH_UP_LIMIT.as_secs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The bearer token of the benchmark's `serve`.
pub(crate) const TOKEN: &str = "bench-secret-0123456789";

/// One client's checks over HTTP.
pub(crate) struct HttpCheck {
    pub(crate) connection: Connection,
    pub(crate) run: usize,
    pub(crate) client: usize,
    pub(crate) random_ids: bool,
}

impl Client for HttpCheck {
    async fn call(&mut self, i: usize) -> anyhow::Result<()> {
        let (run, c) = (self.run, self.client);
        let request_id = if self.random_ids {
            format!(r#","request_id":"{}""#, random_request_id(run, c, i))
        } else {
            String::new()
        };
        let body = format!(
            r#"{{"tenant":"org-bench","metric":"tokens","amount":1,"idempotency_key":"r{run}-c{c}-i{i}"{request_id}}}"#
        );
        let status = self.connection.post("/v1/check", TOKEN, &body).await?;
        anyhow::ensure!(status == 200, "every benchmark check is allowed: {status}");
        Ok(())
    }
}

/// One client's check-and-consume calls of the Lua script, by its SHA-1 (`EVALSHA`).
struct RedisCheck {
    connection: Connection,
    script: Vec<u8>,
    run: usize,
    client: usize,
}

const COUNTER: &str = "counter:org-bench:tokens";

impl Client for RedisCheck {
    async fn call(&mut self, i: usize) -> anyhow::Result<()> {
        let key = format!("idem:org-bench:r{}-c{}-i{i}", self.run, self.client);
        let (amount, limit) = ("1", LIMIT.to_string());
        let arguments: [&[u8]; 7] =
            [b"EVALSHA", &self.script, b"2", COUNTER.as_bytes(), key.as_bytes(), amount.as_bytes(), limit.as_bytes()];
        let reply = self.connection.command(&arguments).await?;
        anyhow::ensure!(reply == Reply::Integer(1), "every benchmark check is allowed: {reply:?}");
        Ok(())
    }
}

pub(crate) fn wait_for(port: u16) -> anyhow::Result<()> {
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        anyhow::ensure!(started.elapsed() < Duration::from_secs(20), "nothing listens on port {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

fn redis(driver: &Driver, run: usize, clients: usize, fsync_always: bool) -> anyhow::Result<Figures> {
    let port = free_port()?;
    let mut command = Command::new("redis-server");
    command.args(["--port", &port.to_string(), "--save", "", "--bind", "127.0.0.1"]);
    if fsync_always {
        let dir = tempfile::tempdir()?;
        command.args(["--appendonly", "yes", "--appendfsync", "always", "--dir"]).arg(dir.keep());
    } else {
        command.args(["--appendonly", "no"]);
    }
    let child = command.stdout(Stdio::null()).spawn().context(REDIS_MISSING)?;
    let _guard = ChildGuard(child);
    wait_for(port)?;
    let (mut control, clients) = driver.runtime.block_on(async {
        let mut control = Connection::open(port).await?;
        let Reply::Bulk(Some(script)) = control.command(&[b"SCRIPT", b"LOAD", LUA.as_bytes()]).await? else {
            anyhow::bail!("SCRIPT LOAD answered no SHA-1");
        };
        let mut connected = Vec::with_capacity(clients);
        for client in 0..clients {
            connected.push(RedisCheck {
                connection: Connection::open(port).await?,
                script: script.clone(),
                run,
                client,
            });
        }
        anyhow::Ok((control, connected))
    })?;
    let name = if fsync_always { "redis+lua (appendfsync always)" } else { "redis+lua (no persistence)" };
    let figures = driver.measure(name, clients)?;
    // The script did consume: the counter holds at least every answered check (those after the window too).
    let counted = driver.runtime.block_on(control.command(&[b"GET", COUNTER.as_bytes()]))?;
    let counted: usize = match counted {
        Reply::Bulk(Some(value)) => std::str::from_utf8(&value)?.parse()?,
        other => anyhow::bail!("GET {COUNTER} answered {other:?}"),
    };
    anyhow::ensure!(counted >= figures.requests, "redis counted {counted} checks, {} were answered", figures.requests);
    Ok(figures)
}

/// Fails at once, with the message a failed start of the Redis peer gives, unless `redis-server` runs.
fn require_redis() -> anyhow::Result<()> {
    let output = Command::new("redis-server").arg("--version").stdin(Stdio::null()).output().context(REDIS_MISSING)?;
    anyhow::ensure!(output.status.success(), "{REDIS_MISSING}: redis-server --version {}", output.status);
    Ok(())
}

/// Measures every peer at each concurrency of `settings`; `measured` is given each concurrency's figures as they
/// come (a run at the defaults takes minutes), and its error stops the run. Fails at once, before measuring
/// anything, without `redis-server`.
pub fn run(
    settings: &HookBenchSettings,
    measured: &mut dyn FnMut(&[Figures]) -> anyhow::Result<()>,
) -> anyhow::Result<Vec<Figures>> {
    let (seconds, random_ids) = (settings.seconds, settings.random_request_ids);
    anyhow::ensure!(seconds.is_finite() && seconds > 0.0, "--seconds must be positive, not {seconds}");
    // Every external peer first: Redis is measured last at each concurrency, after six peers of `seconds` each
    // (minutes at the defaults), and a missing redis-server would otherwise fail the run only there.
    require_redis()?;
    let dir = tempfile::tempdir()?;
    // For the peer that publishes its outbox: the embedded broker, in this process (a tenth of a second of CPU
    // in a run).
    let broker = EmbeddedBroker::start(3).context("cannot start the mock Kafka cluster")?;
    let brokers = broker.bootstrap_servers();
    let driver = Driver::new(seconds)?;
    let mut figures = Vec::new();
    let mut run = 0;
    for &clients in &settings.concurrency {
        let first = figures.len();
        for durability in [Durability::Full, Durability::Normal] {
            run += 1;
            figures.push(in_process(&driver, dir.path(), run, clients, durability, 0, random_ids)?);
        }
        for durability in [Durability::Full, Durability::Normal] {
            run += 1;
            figures.push(in_process_two_metrics(&driver, dir.path(), run, clients, durability)?);
        }
        run += 1;
        figures.push(in_process_leases(&driver, dir.path(), run, clients)?);
        run += 1;
        let rolling = (rolling_policy_event(), "hook in-process (Normal, rolling day)");
        figures.push(in_process_beside(&driver, dir.path(), (run, clients), rolling.0, rolling.1)?);
        run += 1;
        let cycle = (cycle_policy_event(), "hook in-process (Normal, billing cycle)");
        figures.push(in_process_beside(&driver, dir.path(), (run, clients), cycle.0, cycle.1)?);
        run += 1;
        figures.push(in_process(&driver, dir.path(), run, clients, Durability::Normal, OPEN_HOLDS, random_ids)?);
        for (durability, brokers) in [("full", None), ("normal", None), ("normal", Some(brokers.as_str()))] {
            run += 1;
            figures.push(over_http(settings, &driver, dir.path(), run, clients, durability, brokers)?);
        }
        let shards_first = figures.len();
        if let Some(partitions) = settings.shards {
            for durability in [Durability::Full, Durability::Normal] {
                for measured in [1, partitions] {
                    run += 1;
                    figures.push(sharded(&driver, dir.path(), run, clients, durability, measured, partitions)?);
                }
                let (one, many) = (&figures[figures.len() - 2], &figures[figures.len() - 1]);
                let speedup = many.decisions_per_second / one.decisions_per_second;
                figures.last_mut().expect("just measured").speedup_over_one_shard = Some(speedup);
            }
        }
        let shards_end = figures.len();
        for fsync_always in [false, true] {
            run += 1;
            figures.push(redis(&driver, run, clients, fsync_always)?);
        }
        let redis_fsync_always = figures.last().expect("just measured").decisions_per_second;
        for f in &mut figures[shards_first..shards_end] {
            f.ratio_to_redis_fsync_always = Some(f.decisions_per_second / redis_fsync_always);
        }
        measured(&figures[first..])?;
    }
    Ok(figures)
}
