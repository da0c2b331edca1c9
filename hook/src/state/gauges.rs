//! Gauge levels: the metrics a gauge quota names, whose usage events are levels rather than consumption, and each
//! tenant's latest level of them.

use std::collections::{BTreeSet, HashMap};

use rules::policy::PolicyIndex;
use schemas::{Header, PolicyEvent, Timestamp};
use serde::{Deserialize, Serialize};

/// The gauge metrics and their levels.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct Gauges {
    /// The metrics a gauge quota names (of any tenant): their usage events are levels, kept in `levels`.
    gauge_metrics: BTreeSet<String>,
    /// The level of each gauge metric per (tenant, metric): the quantity of its latest usage event by event time, and
    /// that time. Of two at the same instant, the one folded later.
    #[serde(with = "super::serial::levels")]
    levels: HashMap<(String, String), (Timestamp, i64)>,
}

impl Gauges {
    /// Keeping the levels of `gauge_metrics` (the metrics recorded gauge quotas name).
    pub(super) fn of(gauge_metrics: impl IntoIterator<Item = String>) -> Gauges {
        Gauges { gauge_metrics: gauge_metrics.into_iter().collect(), levels: HashMap::new() }
    }

    /// Starts keeping the levels of the metric a gauge policy folded names; whether no gauge named it before: the
    /// levels of that metric folded before it were not kept.
    pub(super) fn note_policy(&mut self, p: &PolicyEvent) -> bool {
        p.is_gauge() && self.gauge_metrics.insert(p.header.metric.clone())
    }

    /// Whether a usage event is a level: its tenant's own gauge or its plan's names the metric (in any version, as
    /// reconcile and billing read it); another tenant's usage of the same metric is consumption.
    pub(super) fn is_level(&self, policies: &PolicyIndex, header: &Header) -> bool {
        self.gauge_metrics.contains(&header.metric)
            && policies.gauge_metrics(&header.tenant).contains(header.metric.as_str())
    }

    /// The metrics whose usage events are levels (a gauge quota names them), whose levels are kept.
    pub(super) fn gauge_metrics(&self) -> impl Iterator<Item = &String> {
        self.gauge_metrics.iter()
    }

    /// Notes a report of `tenant`'s level of the gauge `metric` at `at`: it is the level unless a later one is known.
    pub(super) fn note_level(&mut self, tenant: &str, metric: &str, at: Timestamp, level: i64) {
        let known = self.levels.entry((tenant.to_string(), metric.to_string())).or_insert((at, level));
        if at >= known.0 {
            *known = (at, level);
        }
    }

    /// `tenant`'s level of the gauge `metric`, and when it was reported: none before any report.
    pub(super) fn level(&self, tenant: &str, metric: &str) -> Option<(Timestamp, i64)> {
        self.levels.get(&(tenant.to_string(), metric.to_string())).copied()
    }
}
