//! Connection flags shared by the commands that talk to Kafka.

use clap::Args;
use kafka::topics::{ClientRole, PartitionCountError, Topics};

/// Resolves the schema ids of messages in the Confluent wire format: through the schema registry's REST API at `url`
/// when given (trusting `ca_file`'s roots when it is `https://`), else from its storage topic `topic` on `brokers`
/// (read with `overrides`), else not at all.
pub fn resolve_schema_ids(
    brokers: Option<&str>,
    overrides: &[(String, String)],
    topic: &str,
    url: Option<&str>,
    ca_file: &super::trust_args::CaFileArg,
) -> anyhow::Result<()> {
    use kafka::schema_registry::{self, RegistryUrl};
    match (url, brokers) {
        (Some(url), _) => schema_registry::install_url(RegistryUrl::parse(url, &ca_file.trust()?)?),
        (None, Some(brokers)) => schema_registry::install(brokers, overrides, topic),
        (None, None) => {}
    }
    Ok(())
}

/// `--outbox-format` and `--outbox-registry-url` of a command that publishes the outbox (`serve`, `reconcile`).
#[derive(Debug, Clone, Args)]
pub struct OutboxFormatArgs {
    /// How the outbox is written on its topics: `single-object` (Avro single-object encoding, as the ledger keeps
    /// it) or `confluent` (the Confluent wire format, for Kafka Connect, ksqlDB or Flink with a Confluent
    /// deserializer; its schemas registered with --outbox-registry-url).
    #[arg(
        long,
        env = "QUOTA_LEDGER_OUTBOX_FORMAT",
        default_value = "single-object",
        value_parser = ["single-object", "confluent"]
    )]
    pub outbox_format: String,
    /// With --outbox-format confluent: the schema registry's REST API (`http[s]://[user:secret@]host:8081`) that
    /// registers the outbox's schemas, each under its topic's subject `{topic}-value`. `https://` trusts --ca-file.
    #[arg(
        long,
        value_name = "URL",
        env = "QUOTA_LEDGER_OUTBOX_REGISTRY_URL",
        required_if_eq("outbox_format", "confluent")
    )]
    pub outbox_registry_url: Option<String>,
}

impl OutboxFormatArgs {
    /// The format asked, its registry trusting `ca_file`'s roots when it is `https://`.
    pub fn format(&self, ca_file: &super::trust_args::CaFileArg) -> anyhow::Result<outbox::OutboxFormat> {
        let registry = self.outbox_registry_url.as_deref();
        Ok(outbox::OutboxFormat::named(&self.outbox_format, registry, &ca_file.trust()?)?)
    }
}

/// `-X key=value`: a librdkafka setting, as kcat takes them.
pub fn parse_setting(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("{text:?} is not key=value (for example -X security.protocol=SASL_SSL)")),
    }
}

#[derive(Debug, Clone, Args)]
pub struct KafkaConnection {
    /// Kafka bootstrap servers, host:port[,host:port...].
    #[arg(long, env = "QUOTA_LEDGER_BROKERS")]
    pub brokers: String,
    /// A librdkafka setting (SASL, TLS, tuning), repeatable: -X security.protocol=SASL_SSL.
    #[arg(short = 'X', value_name = "KEY=VALUE", value_parser = parse_setting)]
    pub settings: Vec<(String, String)>,
}

/// Refuses to start when the input topics `topics` have different partition counts (docs/contract.md §9.4), naming
/// them with theirs, asked by a client of the command's `role` with its `-X` settings `overrides`. Brokers that do not answer yet,
/// or lack a topic, are the consumer's (or the outbox's) to wait for or to name, as they would without this check.
pub fn check_partition_count(
    brokers: &str,
    overrides: &[(String, String)],
    role: ClientRole,
    topics: &Topics,
) -> anyhow::Result<()> {
    match kafka::topics::common_partition_count_at(brokers, overrides, role, topics) {
        Err(error @ PartitionCountError::Mismatch(_)) => Err(anyhow::Error::new(error)),
        Err(error) => {
            tracing::info!(%topics, %brokers, %error, "partition counts not checked at start");
            Ok(())
        }
        Ok(partitions) => {
            tracing::info!(%topics, %brokers, partitions, "partition counts checked");
            Ok(())
        }
    }
}
