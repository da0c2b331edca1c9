//! Log lines on stderr, for every process: the workspace crates' lines from a level (info by default) and
//! librdkafka's warnings and errors, as text for a person or as JSON lines for a collector.

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The time (UTC), the level, the message, then its fields as `key=value`.
    Text,
    /// One JSON object per line: timestamp, level, target, message, fields.
    Json,
}

/// The workspace's crates (`-` written `_`, as a tracing target spells it): their log lines are the operator's
/// messages (`ingest: waiting for the brokers at ...`, `serve: outbox: ...`), each saying who speaks. A crate missing
/// here is silent: the test below holds it to the workspace's members.
pub const WORKSPACE_CRATES: [&str; 23] = [
    "schemas",
    "rules",
    "ledger",
    "kafka",
    "ingest",
    "outbox",
    "reconcile",
    "reports",
    "control",
    "hook",
    "serve",
    "generate",
    "bench",
    "demo",
    "client",
    "node",
    "telemetry",
    "trust",
    "usecases",
    "webhooks",
    "sql",
    "flagfile",
    "quota_ledger",
];

/// Installs the process's subscriber: the workspace crates' lines from `level`, and librdkafka's warnings and errors,
/// named after the client that wrote them (`outbox: librdkafka FAIL: ...`); rdkafka's own (its "Global error" lines
/// repeat librdkafka's) and every other crate's are off. As text, a line is the time, the level, the message and
/// its fields (`key=value`), as an operator reads it; as JSON, an object with the target besides. The `log` records of librdkafka's
/// bridge go through the same subscriber. `QUOTA_LEDGER_LOG` takes `RUST_LOG`'s syntax for more, e.g.
/// `librdkafka=debug` with `-X debug=broker,protocol` (the log level of the Kafka clients follows it), or
/// `rdkafka=warn`; or less, e.g. `ingest=warn`. A second call changes nothing.
pub fn init(format: Format, level: tracing::level_filters::LevelFilter) {
    let mut directives = vec!["off".to_string(), "librdkafka=warn".to_string()];
    directives.extend(WORKSPACE_CRATES.iter().map(|name| format!("{name}={level}")));
    if let Ok(more) = std::env::var("QUOTA_LEDGER_LOG") {
        directives.extend(more.split(',').filter(|d| !d.trim().is_empty()).map(str::to_string));
    }
    let filter = tracing_subscriber::EnvFilter::builder().parse_lossy(directives.join(","));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        Format::Text => builder.with_target(false).try_init(),
        Format::Json => builder.json().flatten_event(true).with_current_span(false).with_span_list(false).try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves every member of the workspace, and the binary, logs: a crate added to the workspace and not here would
    // have its warnings filtered out without a word.
    #[test]
    fn every_workspace_crate_is_let_through() {
        let manifest = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml")).unwrap();
        let members = manifest.lines().find_map(|line| line.strip_prefix("members = [")).expect("a members line");
        let mut expected: Vec<String> = members
            .trim_end_matches(']')
            .split(',')
            .map(|member| member.trim().trim_matches('"').replace('-', "_"))
            .filter(|member| member != "testkit")
            .collect();
        expected.push("quota_ledger".to_string());
        expected.sort();
        let mut let_through: Vec<String> = WORKSPACE_CRATES.iter().map(|c| c.to_string()).collect();
        let_through.sort();
        assert_eq!(let_through, expected);
    }
}
