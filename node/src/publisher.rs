//! Durability replicated for a shard: the hook's groups published through the shard's fence
//! ([`kafka::fence::ShardFence`]) before they are recorded, each event as single-object Avro on its type's topic,
//! keyed by its tenant, to the shard's partition.

use hook::{Replicate, ReplicateError};
use kafka::fence::{FenceError, FencedRecord, ShardFence};
use outbox::OutboxTopics;
use schemas::{Catalog, Event};

/// A shard's publisher (see the module).
pub struct FencedPublisher {
    fence: ShardFence,
    topics: OutboxTopics,
    catalog: &'static Catalog,
}

impl FencedPublisher {
    /// Publishes through `fence` to `topics`.
    pub fn new(fence: ShardFence, topics: OutboxTopics) -> FencedPublisher {
        FencedPublisher { fence, topics, catalog: Catalog::builtin() }
    }
}

impl Replicate for FencedPublisher {
    fn replicate(&mut self, events: &[Event]) -> Result<(), ReplicateError> {
        let mut encoded = Vec::with_capacity(events.len());
        for event in events {
            let event_type = event.event_type();
            let topic = self.topics.topic_of(event_type).ok_or_else(|| {
                ReplicateError::Unavailable(format!("no topic is configured for {}", event_type.name()))
            })?;
            encoded.push((topic, event.header().tenant.as_str(), self.catalog.encode_single_object(event)));
        }
        let records: Vec<FencedRecord<'_>> =
            encoded.iter().map(|(topic, key, payload)| FencedRecord { topic, key, payload }).collect();
        self.fence.publish(&records).map_err(|error| match error {
            FenceError::Fenced { .. } => ReplicateError::Fenced(error.to_string()),
            FenceError::Unavailable { .. } => ReplicateError::Unavailable(error.to_string()),
            // A broker that cannot run the shard's transactions cannot be written through this node: as final as a
            // fence, and said as it is.
            other => ReplicateError::Fenced(other.to_string()),
        })
    }
}
