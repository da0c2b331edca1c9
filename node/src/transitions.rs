//! Shards in transition, as HBase watches its regions in transition: each shard this node is taking over or giving
//! up, the state it is in and since when. A shard that stays in one (a catch-up that never ends, a hook that cannot
//! start, a close that hangs) is an incident forming; the operator sees it in the metrics
//! (`quota_ledger_shards_in_transition`, `quota_ledger_shard_transition_seconds`), in `status --cluster` and in the
//! alert of `docs/alerts.yml`.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use schemas::Timestamp;

/// Where a shard of this node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ShardState {
    /// Acquiring the shard's fence (durability replicated): the previous owner is being fenced.
    Fencing,
    /// Ingest is bringing the shard up to the input topics' ends.
    CatchingUp,
    /// Starting the shard's hook.
    Opening,
    /// Answering requests (the routing catalog names this node from the moment after).
    Serving,
    /// Taken back: the hook answers what it was given and closes the shard.
    Closing,
    /// Could not be opened (a fence, the topics' ends or the hook failed): assigned here, answered by no one.
    FailedOpen,
}

impl ShardState {
    /// The state's name in metrics and answers.
    pub fn name(self) -> &'static str {
        match self {
            ShardState::Fencing => "fencing",
            ShardState::CatchingUp => "catching_up",
            ShardState::Opening => "opening",
            ShardState::Serving => "serving",
            ShardState::Closing => "closing",
            ShardState::FailedOpen => "failed_open",
        }
    }

    /// Every state but serving is a transition.
    pub fn in_transition(self) -> bool {
        self != ShardState::Serving
    }
}

/// A shard's state, as `status --cluster` shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ShardTransition {
    /// The shard's partition.
    pub partition: u32,
    /// Its state.
    pub state: ShardState,
    /// Since when.
    pub since: Timestamp,
    /// For how many seconds.
    pub seconds: f64,
}

/// The states of this node's shards (see the module).
#[derive(Debug, Default)]
pub struct Transitions {
    shards: Mutex<BTreeMap<u32, (ShardState, Instant, Timestamp)>>,
}

impl Transitions {
    /// `partition` is in `state` from now.
    pub fn enter(&self, partition: u32, state: ShardState) {
        let mut shards = self.shards.lock().unwrap_or_else(|e| e.into_inner());
        shards.insert(partition, (state, Instant::now(), Timestamp::now()));
    }

    /// `partition` is no longer this node's.
    pub fn leave(&self, partition: u32) {
        self.shards.lock().unwrap_or_else(|e| e.into_inner()).remove(&partition);
    }

    /// Every shard of this node, by partition.
    pub fn now(&self) -> Vec<ShardTransition> {
        let shards = self.shards.lock().unwrap_or_else(|e| e.into_inner());
        shards
            .iter()
            .map(|(partition, (state, entered, since))| ShardTransition {
                partition: *partition,
                state: *state,
                since: *since,
                seconds: entered.elapsed().as_secs_f64(),
            })
            .collect()
    }
}

impl Collector for Transitions {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let shards = self.now();
        let moving: Vec<&ShardTransition> = shards.iter().filter(|s| s.state.in_transition()).collect();
        let count = ConstGauge::new(moving.len() as i64);
        let help = "Shards of this node in transition (fencing, catching up, opening, closing, or failed to open)";
        count.encode(encoder.encode_descriptor("shards_in_transition", help, None, count.metric_type())?)?;
        let oldest = ConstGauge::new(moving.iter().map(|s| s.seconds).fold(0.0, f64::max));
        let help = "Seconds the oldest transition of this node's shards has lasted; 0 when none is in transition";
        oldest.encode(encoder.encode_descriptor("shard_transition_seconds", help, None, oldest.metric_type())?)?;
        let help = "Seconds each shard of this node has been in its state";
        let mut family = encoder.encode_descriptor("shard_state_seconds", help, None, oldest.metric_type())?;
        for shard in &shards {
            let labels = [("partition", shard.partition.to_string()), ("state", shard.state.name().to_string())];
            ConstGauge::new(shard.seconds).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves the metrics count only shards not serving, and name each shard's state.
    #[test]
    fn shards_in_transition_are_counted_and_named() {
        let transitions = std::sync::Arc::new(Transitions::default());
        let mut registry = telemetry::registry();
        registry.register_collector(Box::new(std::sync::Arc::clone(&transitions)));
        transitions.enter(0, ShardState::CatchingUp);
        transitions.enter(1, ShardState::Serving);
        transitions.enter(2, ShardState::Closing);
        let text = telemetry::encode(&registry);
        assert!(text.contains("quota_ledger_shards_in_transition 2\n"), "{text}");
        assert!(text.contains(r#"quota_ledger_shard_state_seconds{partition="1",state="serving"} "#), "{text}");
        assert!(text.contains(r#"quota_ledger_shard_state_seconds{partition="0",state="catching_up"} "#), "{text}");
        transitions.enter(0, ShardState::Serving);
        transitions.leave(2);
        let text = telemetry::encode(&registry);
        assert!(text.contains("quota_ledger_shards_in_transition 0\n"), "{text}");
        assert!(text.contains("quota_ledger_shard_transition_seconds 0.0\n"), "{text}");
        assert!(!text.contains(r#"partition="2""#), "{text}");
    }
}
