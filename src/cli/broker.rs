//! `broker mock`: librdkafka's in-process mock cluster as a process of its own, with the topics of contract §2.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use clap::Subcommand;
use kafka::admin::EmbeddedBroker;

#[derive(Debug, Subcommand)]
pub enum BrokerCommand {
    /// Start a mock Kafka broker (real protocol, in memory) on localhost; print its address on the first line
    /// of stdout, then serve until interrupted. Nothing to install; its data goes with the process.
    Mock {
        /// Partitions per topic.
        #[arg(long, default_value_t = 3)]
        partitions: i32,
    },
}

pub fn run(command: BrokerCommand) -> anyhow::Result<ExitCode> {
    let BrokerCommand::Mock { partitions } = command;
    let broker = EmbeddedBroker::start(partitions).context("cannot start the mock Kafka cluster")?;
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, stop.clone()).context("cannot install the signal handler")?;
    }
    let mut out = super::stdout();
    writeln!(out, "{}", broker.bootstrap_servers())?;
    out.flush()?;
    drop(out);
    eprintln!("mock Kafka broker on {} (Ctrl-C stops it)", broker.bootstrap_servers());
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(ExitCode::SUCCESS)
}
