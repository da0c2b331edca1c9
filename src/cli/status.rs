//! `status [--json]`.

use std::process::ExitCode;

use clap::Args;
use ledger::shards::ShardStatus;
use usecases::status::{Owners, Statuses};

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print JSON: events_recorded, duplicates, conflicts, quarantined, watermark, offsets, ledger_id, head_seq,
    /// head_hash, gaps, misrouted, plan_defaults, plan_defaults_digest, plan_defaults_forwarded; of shards, also
    /// plan_defaults_lacking.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    cluster: super::cluster::ClusterArgs,
}

pub fn run(store: &super::Store, args: StatusArgs) -> anyhow::Result<ExitCode> {
    if let Some(cluster) = args.cluster.asked()? {
        let answered = cluster.ask_owners("/v1/admin/status", &[])?;
        let statuses = answered.parts("a status")?;
        let at = format!("the cluster at {} ({} nodes)", cluster.brokers, answered.nodes);
        if args.json {
            return super::print_json(&usecases::status::cluster_json(&statuses, &answered)?)
                .map(|()| ExitCode::SUCCESS);
        }
        return super::print(&statuses, false, |out, s| usecases::status::write_cluster(out, &at, s, &answered));
    }
    match (usecases::status::status(store)?, store) {
        (Statuses::One(status), _) => super::print(&*status, args.json, usecases::status::write_status),
        (Statuses::Shards(statuses), super::Store::Shards(shards)) => {
            print_shards(&shards.dir().display().to_string(), &statuses, None, args.json)
        }
        (Statuses::Shards(statuses), super::Store::File(path)) => {
            print_shards(&path.display().to_string(), &statuses, None, args.json)
        }
    }
}

/// `status --data DIR` or `--cluster`: the shards of `at`, with their owners' URLs for a cluster (`owners`).
fn print_shards(at: &str, statuses: &[ShardStatus], owners: Option<&Owners>, json: bool) -> anyhow::Result<ExitCode> {
    match json {
        true => super::print_json(&usecases::status::shards_json(statuses, owners)?).map(|()| ExitCode::SUCCESS),
        false => {
            super::print(statuses, false, |out, statuses| usecases::status::write_shards(out, at, statuses, owners))
        }
    }
}
