//! A change of a tenant's policies or grants (contract §7): judged against what the ledgers hold now (the next version,
//! conflicts), then appended to the ledger (every shard that holds its tenant) or produced to Kafka for ingest to
//! record. A refused change records nothing.

use control::{GrantChange, PolicyChange, Recorded};
use ledger::Ledger;
use schemas::{Event, GrantEvent, PolicyEvent, Timestamp};

use crate::{Context, Result, Store, refuse};

/// Where a change goes.
#[derive(Debug, Clone)]
pub enum Destination {
    /// Appended to the ledger of the store.
    Ledger,
    /// Produced to Kafka, for ingest to record; the next version is still read from the store.
    Kafka {
        /// Bootstrap servers.
        brokers: String,
        /// librdkafka settings.
        settings: Vec<(String, String)>,
        /// The topic, when not the record type's.
        topic: Option<String>,
    },
}

/// A change made: its event, and where it was written, in words.
#[derive(Debug)]
pub struct Changed<E> {
    /// The event recorded or produced.
    pub event: E,
    /// `recorded at ledger seq N` or `produced to TOPIC and acknowledged`.
    pub written: String,
}

/// The policies and grants `store` holds, as `policy list`, `policy history` and `grant list` show them.
pub fn recorded(store: &Store) -> Result<Recorded> {
    Ok(Recorded::read(&store.read_all()?)?)
}

/// A new version of a policy (or its first), judged against `store` and written to `to`.
pub fn set_policy(store: &Store, change: &PolicyChange, to: &Destination) -> Result<Changed<PolicyEvent>> {
    let event = {
        let ledgers = open_existing(store, to, change.version.is_some())?;
        let recorded = Recorded::read(&ledgers)?;
        control::policy_event(change, &recorded, Timestamp::now()).context("policy not changed")?
    };
    let written = write(store, Event::Policy(event.clone()), to)?;
    Ok(Changed { event, written })
}

/// A grant added, judged against `store` and written to `to`.
pub fn add_grant(store: &Store, change: &GrantChange, to: &Destination) -> Result<Changed<GrantEvent>> {
    let event = {
        let ledgers = open_existing(store, to, true)?;
        let recorded = Recorded::read(&ledgers)?;
        control::grant_event(change, &recorded, Timestamp::now()).context("grant not added")?
    };
    let written = write(store, Event::Grant(event.clone()), to)?;
    Ok(Changed { event, written })
}

/// The ledgers of `store` as they are now, for reading: a change is judged against what they hold. A ledger file
/// not created yet holds nothing, unless the change goes to Kafka with no version given: its version would then
/// restart at 1 whatever the ledger that ingest fills holds.
fn open_existing(store: &Store, to: &Destination, version_given: bool) -> Result<Vec<Ledger>> {
    match store {
        Store::File(path) if !path.exists() && matches!(to, Destination::Kafka { .. }) && !version_given => refuse!(
            "no ledger at {}: the next version is read from the ledger that ingest records the topic into (give it \
             with --ledger or --data, or give --version)",
            path.display()
        ),
        Store::File(path) if !path.exists() => Ok(vec![]),
        _ => store.read_all(),
    }
}

/// Appends `event` into the ledger (the shards that hold its tenant), or produces it to Kafka; says which.
fn write(store: &Store, event: Event, to: &Destination) -> Result<String> {
    if let Destination::Kafka { brokers, settings, topic } = to {
        let inputs = kafka::topics::Topics::defaults();
        let topic = topic.clone().unwrap_or_else(|| event.event_type().default_topic().to_string());
        kafka::produce::produce_events(brokers, settings, &inputs, &topic, &[event])?;
        return Ok(format!("produced to {topic} and acknowledged"));
    }
    let mut ledgers = store.append_all()?;
    let seqs = control::record(&mut ledgers, &event)?;
    let seqs: Vec<String> = seqs.iter().map(u64::to_string).collect();
    Ok(format!("recorded at ledger seq {}", seqs.join(", ")))
}
