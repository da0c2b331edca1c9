//! Alert dedup: the alerts of windows not pruned yet ([`crate::alerts`]), own and folded, so that each is written
//! once.

use std::collections::HashMap;

use schemas::{AlertEvent, Timestamp};
use serde::{Deserialize, Serialize};

/// The alerts written, by alert_id, with their window's end.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct Alerted {
    alerted: HashMap<String, i64>,
}

impl Alerted {
    /// Remembers an alert, own or folded, until its window is pruned.
    pub(super) fn note(&mut self, alert: &AlertEvent) {
        let end = alert.window_end.map_or(i64::MAX, Timestamp::micros);
        self.alerted.insert(alert.alert_id.clone(), end);
    }

    /// Whether the alert of this id was written (by this hook or another writer whose entries it folded).
    pub(super) fn contains(&self, alert_id: &str) -> bool {
        self.alerted.contains_key(alert_id)
    }

    /// Forgets an own alert the ledger did not record.
    pub(super) fn forget(&mut self, alert_id: &str) {
        self.alerted.remove(alert_id);
    }

    /// Forgets the alerts of windows that ended before `horizon`.
    pub(super) fn prune(&mut self, horizon: i64) {
        self.alerted.retain(|_, end| *end >= horizon);
    }
}
