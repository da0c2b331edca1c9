//! `serve --listen ADDR --tokens FILE [--tls-cert FILE --tls-key FILE]`: the enforcement hook over HTTP or HTTPS
//! (contract §6, §7), the `serve` crate's server. With `--brokers`, the outbox is published to Kafka every second.
//! With `--data DIR` instead of `--ledger`, every shard of the directory is served, each request in its tenant's
//! shard (contract §9.4); `--partitions P` creates the shards missing.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use hook::HookSettings;
use ledger::Durability;

use super::kafka_args::parse_setting;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on. Other than a loopback address, only with --tls-cert and --tls-key, or with
    /// --insecure-listen.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// TOML file of `[[token]]` tables with `name`, `secret` (or `secret_sha256`) and `tenants` (docs/contract.md §7); only its
    /// owner may read it (chmod 600).
    #[arg(long)]
    tokens: PathBuf,
    #[command(flatten)]
    tls: TlsArgs,
    /// Connections open at once at most; beyond, new ones wait until one closes. Default: the open-file limit
    /// (raised to its hard limit at start) less a quarter of it (64 to 256), at most 10,000.
    #[arg(long)]
    connections_max: Option<usize>,
    /// Commit durability: `full` (fsync per group, survives power loss) or `normal` (survives a crash of the
    /// process; a power loss may lose the last groups).
    #[arg(long, default_value = "full", value_parser = ["full", "normal"])]
    durability: String,
    /// Requests decided in one ledger transaction at most.
    #[arg(long, default_value_t = HookSettings::default().group_max_requests)]
    group_max_requests: usize,
    /// Microseconds the writer waits for more requests after the first of a group (0: only what is queued).
    #[arg(long, default_value_t = HookSettings::default().group_wait_us)]
    group_wait_us: u64,
    /// Kafka bootstrap servers to publish decisions and usage to (the outbox); without them they wait.
    #[arg(long, env = "QUOTA_LEDGER_BROKERS")]
    brokers: Option<String>,
    /// A librdkafka setting for the outbox producer, repeatable.
    #[arg(short = 'X', value_name = "KEY=VALUE", value_parser = parse_setting)]
    settings: Vec<(String, String)>,
    #[command(flatten)]
    outbox: super::kafka_args::OutboxFormatArgs,
    #[command(flatten)]
    ca_file: super::trust_args::CaFileArg,
    /// Milliseconds a client may take to send a request's body once its header arrived; then it is answered 408
    /// and the connection is closed.
    #[arg(long, default_value_t = serve::READ_TIMEOUT_MS)]
    read_timeout_ms: u64,
    /// Milliseconds a client may take to finish its TLS handshake, then each request header, or leave a kept-alive
    /// connection idle; then the connection is closed.
    #[arg(long, default_value_t = serve::HEADER_TIMEOUT_MS)]
    header_timeout_ms: u64,
    /// Distinct metrics, and subjects of each metric, one tenant may have counters for in memory; a request for
    /// another is refused (400) until old ones age out (a day after the month they were last used in).
    #[arg(long, default_value_t = hook::COUNTERS_PER_TENANT_MAX)]
    counters_per_tenant_max: usize,
    /// Checks per second, at most, allowed FAIL_OPEN while the ledger refuses writes (a full disk), for policies
    /// set `--on-failure OPEN`; beyond it they answer 500 as CLOSED ones do. 0: none.
    #[arg(long, default_value_t = HookSettings::default().fail_open_per_second)]
    fail_open_rate: u32,
    /// Bytes of the spill beside the ledger (`LEDGER.spill`) that keeps decisions made open until the ledger takes
    /// them; written whole once a policy is OPEN, so that a full disk cannot refuse it.
    #[arg(long, default_value_t = HookSettings::default().spill_bytes)]
    spill_bytes: u64,
    /// With --data: the input topics' partition count P; the shards missing (shard-0000.db to shard-P-1) are
    /// created. Without it, the directory's shards must all be there already.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    partitions: Option<u32>,
    #[command(flatten)]
    rls: RlsArgs,
    /// Milliseconds before the first retry of a webhook delivery that failed; each next retry waits twice as long,
    /// at most an hour, and the 18th failed attempt gives the delivery up.
    #[arg(long, default_value_t = webhooks::RETRY_BASE_MS, value_parser = clap::value_parser!(u64).range(1..))]
    webhook_retry_base_ms: u64,
    #[command(flatten)]
    snapshots: SnapshotArgs,
}

/// How the hook starts from, and keeps, its snapshot of the state in the ledger (`serve`, `node`).
#[derive(Debug, Args)]
pub struct SnapshotArgs {
    /// Fold the ledger's last month at start rather than start from its snapshot of the hook's state.
    #[arg(long)]
    full_fold: bool,
    /// Entries appended after the last snapshot of the hook's state past which the next is taken (0: none).
    #[arg(long, default_value_t = HookSettings::default().snapshot_every_entries)]
    snapshot_every_entries: u64,
    /// Milliseconds between looks whether a snapshot of the hook's state is due.
    #[arg(long, default_value_t = HookSettings::default().snapshot_check_ms)]
    snapshot_check_ms: u64,
}

impl SnapshotArgs {
    pub fn apply(&self, hook: HookSettings) -> HookSettings {
        let (every, check_ms) = (self.snapshot_every_entries, self.snapshot_check_ms.max(1));
        HookSettings {
            start_from_snapshot: !self.full_fold,
            snapshot_every_entries: every,
            snapshot_check_ms: check_ms,
            ..hook
        }
    }
}

/// HTTPS, or plain HTTP beyond loopback (`serve`, `node`).
#[derive(Debug, Args)]
pub struct TlsArgs {
    /// PEM file of the server's certificate chain (its own certificate first): serve HTTPS.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM file of the certificate's private key.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Serve plain HTTP on an address other machines can reach (behind a TLS-terminating proxy, say): bearer
    /// secrets then cross the network in clear.
    #[arg(long, conflicts_with = "tls_cert")]
    pub insecure_listen: bool,
}

impl TlsArgs {
    /// The certificate and key files (clap requires both or neither).
    pub fn files(&self) -> Option<serve::tls::TlsFiles> {
        Some(serve::tls::TlsFiles { certificate: self.tls_cert.clone()?, key: self.tls_key.clone()? })
    }
}

/// Envoy's rate limit service (gRPC) beside the HTTP API, with the same tokens and TLS (docs/services.md).
#[derive(Debug, Args)]
pub struct RlsArgs {
    /// Also serve Envoy's rate limit service (`ShouldRateLimit`, gRPC) on this address.
    #[arg(long, value_name = "ADDR", requires = "rls_config")]
    rls_listen: Option<SocketAddr>,
    /// TOML file mapping each domain's descriptors to the tenant, metric, subject, project, API key and amount checked.
    #[arg(long, value_name = "FILE", requires = "rls_listen")]
    rls_config: Option<PathBuf>,
}

impl RlsArgs {
    pub fn settings(self) -> Option<serve::RlsSettings> {
        self.rls_listen.zip(self.rls_config).map(|(listen, config)| serve::RlsSettings { listen, config })
    }
}

/// The first lines say where it listens (port 0 picks one), for scripts and tests.
pub fn announce(at: serve::Listening) -> std::io::Result<()> {
    writeln!(super::stdout(), "listening on {at}")?;
    let scheme = if at.tls { "https" } else { "http" };
    at.rls.map_or(Ok(()), |rls| writeln!(super::stdout(), "rls listening on {scheme}://{rls}"))
}

pub fn run(store: &super::Store, args: ServeArgs) -> anyhow::Result<ExitCode> {
    if let (super::Store::File(_), Some(_)) = (store, args.partitions) {
        anyhow::bail!("--partitions is for a directory of shards (--data DIR); a --ledger file holds every partition");
    }
    let partitions = args.partitions;
    let hook = args.snapshots.apply(HookSettings {
        group_max_requests: args.group_max_requests.max(1),
        group_wait_us: args.group_wait_us,
        durability: if args.durability == "normal" { Durability::Normal } else { Durability::Full },
        counters_per_tenant_max: args.counters_per_tenant_max,
        fail_open_per_second: args.fail_open_rate,
        spill_bytes: args.spill_bytes,
        ..HookSettings::default()
    });
    if let Some(brokers) = &args.brokers {
        // The outbox publishes to the input topics: their partition counts must agree (docs/contract.md §9.4).
        let inputs = kafka::topics::Topics::defaults();
        super::kafka_args::check_partition_count(
            brokers,
            &args.settings,
            kafka::topics::ClientRole::Producer,
            &inputs,
        )?;
    }
    let settings = serve::ServeSettings {
        hook,
        outbox_format: args.outbox.format(&args.ca_file)?,
        // `POST /v1/events` sends to the usage topic of the brokers the outbox publishes to.
        events_to: args.brokers.as_deref().map(|brokers| serve::EventsTo::usage(brokers, &args.settings)),
        brokers: args.brokers,
        overrides: args.settings,
        read_timeout_ms: args.read_timeout_ms,
        header_timeout_ms: args.header_timeout_ms,
        connections_max: args.connections_max,
        tls: args.tls.files(),
        insecure_listen: args.tls.insecure_listen,
        rls: args.rls.settings(),
        webhooks: webhooks::DeliverySettings { retry_base_ms: args.webhook_retry_base_ms },
        ..serve::ServeSettings::new(args.listen, args.tokens)
    };
    match store {
        super::Store::File(ledger_path) => serve::run(ledger_path, settings, announce)?,
        super::Store::Shards(dir) => serve::run_shards(dir, partitions, settings, announce)?,
    }
    Ok(ExitCode::SUCCESS)
}
