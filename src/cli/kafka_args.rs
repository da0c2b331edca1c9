//! Connection flags shared by the commands that talk to Kafka.

use clap::Args;

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
