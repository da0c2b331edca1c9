//! The outbox publishes every entry to its tenant's partition by Kafka's default partitioner (contract §9.4), the
//! partition the shard of that tenant reads: the hook's decisions and usage, and reconcile's adjustments, land
//! where the tenant's other events are.

use std::time::{Duration, Instant};

use kafka::admin::EmbeddedBroker;
use ledger::{OutboxEntry, ReadError};
use outbox::{Outbox, OutboxFormat, OutboxTopics};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use schemas::EventType;
use schemas::partition::partition_of;

const PARTITIONS: u32 = 6;

/// An outbox of usage entries, one per tenant, held in memory: what the publisher reads and acknowledges.
struct Entries {
    pending: Vec<OutboxEntry>,
}

impl Outbox for Entries {
    fn pending(&self, after: Option<u64>, limit: u64) -> Result<Vec<OutboxEntry>, ReadError> {
        let after = after.map_or(0, |seq| seq + 1);
        Ok(self.pending.iter().filter(|e| e.seq >= after).take(limit as usize).cloned().collect())
    }

    fn sync_log(&self) -> std::io::Result<()> {
        Ok(())
    }

    fn record(&mut self, acknowledged: &[(u64, String)]) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        self.pending.retain(|e| !acknowledged.iter().any(|(seq, _)| *seq == e.seq));
        Ok(())
    }

    fn pending_count(&self) -> Result<u64, ReadError> {
        Ok(self.pending.len() as u64)
    }

    /// Held in memory, its entries were recorded at no instant.
    fn oldest_pending_at(&self) -> Result<Option<i64>, ReadError> {
        Ok(None)
    }
}

// Proves that the outbox's producer puts each tenant's entries in `partition_of(tenant, P)`; librdkafka's default
// partitioner (CRC32) puts most of these tenants elsewhere.
#[test]
fn outbox_entries_land_in_their_tenants_partition() {
    let broker = EmbeddedBroker::start(PARTITIONS as i32).expect("the embedded broker");
    let bootstrap = broker.bootstrap_servers();
    let tenants: Vec<String> = (1..=200).map(|n| format!("org-{n}")).chain(["Zürich-GmbH".to_string()]).collect();
    let pending = tenants
        .iter()
        .enumerate()
        .map(|(seq, tenant)| OutboxEntry {
            seq: seq as u64,
            event_type: EventType::UsageEvent,
            event_id: format!("u-{seq}"),
            tenant: tenant.clone(),
            message: format!("entry {seq}").into_bytes(),
        })
        .collect();
    let mut entries = Entries { pending };
    let (topics, format) = (OutboxTopics::defaults(), OutboxFormat::SingleObject);
    let report =
        outbox::publish(&mut entries, &bootstrap, &[], &topics, &format, Duration::from_secs(30)).expect("published");
    assert_eq!((report.published, report.pending), (tenants.len() as u64, 0), "{report:?}");

    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", "outbox-partitions-reader")
        .set("enable.auto.commit", "false")
        .create()
        .expect("a consumer");
    let mut assignment = TopicPartitionList::new();
    for partition in 0..PARTITIONS as i32 {
        assignment.add_partition_offset("quota.usage", partition, Offset::Beginning).expect("an offset");
    }
    consumer.assign(&assignment).expect("assigned");
    let mut seen = 0;
    let started = Instant::now();
    while seen < tenants.len() {
        assert!(started.elapsed() < Duration::from_secs(30), "{seen} of {} entries read back", tenants.len());
        let Some(message) = consumer.poll(Duration::from_millis(100)) else { continue };
        let message = message.expect("a message");
        let tenant = std::str::from_utf8(message.key().expect("a key")).expect("a UTF-8 key");
        assert_eq!(message.partition() as u32, partition_of(tenant, PARTITIONS), "the partition of {tenant:?}");
        seen += 1;
    }
}
