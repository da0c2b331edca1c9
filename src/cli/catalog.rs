//! `catalog --cluster BROKERS [--node URL]... [--repair] [--json]`: the routing catalog read whole and checked against
//! the nodes (`usecases::catalog`), repaired on request; `drain URL --cluster BROKERS`: a node's partitions moved to
//! the others before maintenance.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

#[derive(Debug, Args)]
pub struct CatalogArgs {
    #[command(flatten)]
    cluster: super::cluster::ClusterArgs,
    /// A node to ask besides those the catalog names (one it names for nothing, a new one); repeat for more.
    #[arg(long = "node", value_name = "URL")]
    nodes: Vec<String>,
    /// How long a shard may stay in a transition (fencing, catching up, opening, closing, failed to open) before it
    /// is a finding.
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    stuck_after: u64,
    /// Do what each finding's repair says (a serving node records itself again; an entry of no partition is
    /// removed), then inspect again.
    #[arg(long)]
    repair: bool,
    /// One JSON object instead of lines for people.
    #[arg(long)]
    json: bool,
}

/// Exit 0 when the catalog and the nodes agree (after the repair, with --repair), 1 when a finding remains.
pub fn run(args: CatalogArgs) -> anyhow::Result<ExitCode> {
    let cluster = args.cluster.asked()?.context("catalog reads a running cluster: give --cluster BROKERS")?;
    let stuck_after = Duration::from_secs(args.stuck_after);
    let mut inspection = usecases::catalog::inspect(&cluster, &args.nodes, stuck_after)?;
    let after = match args.repair && !inspection.consistent() {
        true => {
            usecases::catalog::repair(&cluster, &mut inspection)?;
            Some(usecases::catalog::inspect(&cluster, &args.nodes, stuck_after)?)
        }
        false => None,
    };
    let checked = usecases::catalog::Checked { at: cluster.brokers.clone(), inspection, after_repair: after };
    super::print(&checked, args.json, usecases::catalog::write_checked)?;
    Ok(if checked.consistent() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

#[derive(Debug, Args)]
pub struct DrainArgs {
    /// The node's URL, as the catalog names it (`node --advertise`).
    node: String,
    #[command(flatten)]
    cluster: super::cluster::ClusterArgs,
    /// How long to wait for every partition of the node to have a new owner serving it.
    #[arg(long, value_name = "SECONDS", default_value_t = 120)]
    timeout: u64,
    /// One JSON object instead of lines for people.
    #[arg(long)]
    json: bool,
}

/// Exit 0 once the node holds no shard and each of its partitions is served by another node.
pub fn drain(args: DrainArgs) -> anyhow::Result<ExitCode> {
    let cluster = args.cluster.asked()?.context("drain acts on a running cluster: give --cluster BROKERS")?;
    let drained = usecases::catalog::drain(&cluster, &args.node, Duration::from_secs(args.timeout))?;
    super::print(&drained, args.json, usecases::catalog::write_drained)
}
