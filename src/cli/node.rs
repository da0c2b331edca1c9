//! `node --data DIR --brokers B --listen ADDR --advertise URL --tokens FILE [--node-id ID] [--standby N]`: a node of a cluster
//! (docs/contract.md §9.4): the partitions Kafka assigns it ingested into their shards in `--data` and served by the
//! hook; the others answered 421 naming their owner. The `node` crate's work.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use hook::HookSettings;
use ledger::Durability;

use super::kafka_args::parse_setting;

#[derive(Debug, Args)]
pub struct NodeArgs {
    /// Kafka bootstrap servers.
    #[arg(long, env = "QUOTA_LEDGER_BROKERS")]
    brokers: String,
    /// Address to listen on. Other than a loopback address, only with --tls-cert and --tls-key, or with
    /// --insecure-listen.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// The URL clients reach this node at, recorded in the routing catalog (`https://10.0.0.5:8080`; `https://` when
    /// the node serves TLS).
    #[arg(long)]
    advertise: String,
    /// TOML file of `[[token]]` tables (as `serve --tokens`).
    #[arg(long)]
    tokens: PathBuf,
    /// This node's id in the routing catalog. Default: the advertised URL.
    #[arg(long)]
    node_id: Option<String>,
    /// The cluster's name: its consumer group is `quota-ledger-cluster-NAME`. Default: the Kafka cluster's id.
    #[arg(long)]
    cluster: Option<String>,
    /// `replicated` (the only one built for nodes): each group's decisions and usage are on their topics (acks=all,
    /// through the shard's fenced producer) before they are answered, so a node may die with its disk.
    #[arg(long, default_value = "replicated", value_parser = ["replicated"])]
    durability: String,
    #[command(flatten)]
    tls: super::serve::TlsArgs,
    /// Warm copies of each partition's shard to keep on other nodes: this node keeps, beside its own shards, those of
    /// the partitions of the N nodes before it in the routing catalog's ring, so that taking one over reads seconds of
    /// the topics, not all of them.
    #[arg(long, value_name = "N", default_value_t = 0)]
    standby: usize,
    /// Requests decided in one shard transaction at most.
    #[arg(long, default_value_t = HookSettings::default().group_max_requests)]
    group_max_requests: usize,
    /// A librdkafka setting, repeatable.
    #[arg(short = 'X', value_name = "KEY=VALUE", value_parser = parse_setting)]
    settings: Vec<(String, String)>,
    /// The schema registry's storage topic, read for the writer schemas of messages in the Confluent wire format.
    #[arg(long, value_name = "TOPIC", default_value = kafka::schema_registry::SCHEMAS_TOPIC)]
    registry_topic: String,
    /// The schema registry's REST API (`http://[user:secret@]host:8081`), asked `GET /schemas/ids/{id}` for the
    /// writer schemas of messages in the Confluent wire format instead of reading --registry-topic.
    #[arg(long, value_name = "URL", env = "QUOTA_LEDGER_REGISTRY_URL")]
    registry_url: Option<String>,
    #[command(flatten)]
    ca_file: super::trust_args::CaFileArg,
    #[command(flatten)]
    rls: super::serve::RlsArgs,
    #[command(flatten)]
    snapshots: super::serve::SnapshotArgs,
}

pub fn run(store: &super::Store, args: NodeArgs) -> anyhow::Result<ExitCode> {
    let super::Store::Shards(dir) = store else {
        anyhow::bail!("node keeps its shards in a directory: give it --data DIR");
    };
    let url = args.registry_url.as_deref();
    super::kafka_args::resolve_schema_ids(
        Some(&args.brokers),
        &args.settings,
        &args.registry_topic,
        url,
        &args.ca_file,
    )?;
    let hook = args.snapshots.apply(HookSettings {
        group_max_requests: args.group_max_requests.max(1),
        // Replicated: the topics are the durable copy; the shard commits to the operating system's cache.
        durability: Durability::Normal,
        ..HookSettings::default()
    });
    let serve = serve::ServeSettings {
        hook,
        tls: args.tls.files(),
        insecure_listen: args.tls.insecure_listen,
        rls: args.rls.settings(),
        ..serve::ServeSettings::new(args.listen, args.tokens)
    };
    let settings = node::NodeSettings {
        data: dir.clone(),
        brokers: args.brokers,
        cluster: args.cluster,
        node_id: args.node_id.unwrap_or_else(|| args.advertise.clone()),
        advertise: args.advertise,
        serve,
        replicated: args.durability == "replicated",
        topics: kafka::topics::Topics::defaults(),
        overrides: args.settings,
        standby: args.standby,
    };
    node::run(settings, super::serve::announce)?;
    Ok(ExitCode::SUCCESS)
}
