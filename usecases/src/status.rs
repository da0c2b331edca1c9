//! What a store holds (`status`): counts, watermark, chain head, Kafka offsets and gaps; for a directory of shards,
//! each shard's, with the plan defaults each holds.

use ledger::Status;
use ledger::shards::ShardStatus;

use crate::store::Opened;
use crate::{Result, Store};

/// The status of a store.
#[derive(Debug)]
pub enum Statuses {
    /// One ledger's.
    One(Box<Status>),
    /// Each shard's, in partition order.
    Shards(Vec<ShardStatus>),
}

/// The status of `store`.
pub fn status(store: &Store) -> Result<Statuses> {
    Ok(match store.open_read()? {
        Opened::File(ledger) => Statuses::One(Box::new(ledger.status()?)),
        Opened::Shards(shards) => {
            let mut statuses = Vec::with_capacity(shards.len());
            for (shard, ledger) in shards {
                statuses.push(ledger.shard_status(shard)?);
            }
            Statuses::Shards(statuses)
        }
    })
}
