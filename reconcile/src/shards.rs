//! A set of shards reconciled as one (contract §9.4): each shard is planned and applied on its own, as of the same
//! instant (a tenant's windows, reservations and adjustments live in its one shard), and the report is the union.

use schemas::Timestamp;

use crate::incremental::Coverage;
use crate::{Plan, PlanCounts};

/// The plans of every shard of a set, in partition order, as one: `watermark` is the set's (its entries counted
/// once), the run id the one a single ledger of those entries would have, the adjustments each shard's (by kind,
/// then shard, then as each shard sorted them), the counts summed, and the policies and grants after a close once
/// each (a plan default is in every shard); read in full when a shard was (the first such shard's reason).
pub fn union(as_of: Timestamp, watermark: u64, plans: Vec<Plan>) -> Plan {
    let mut union = Plan {
        run_id: format!("reconcile-{as_of}-w{watermark}"),
        as_of,
        watermark,
        adjustments: Vec::new(),
        alerts: Vec::new(),
        counts: PlanCounts::default(),
        after_close: Vec::new(),
        coverage: Coverage::Incremental { since: 0, tenants: Vec::new() },
    };
    for plan in plans {
        union.adjustments.extend(plan.adjustments);
        union.alerts.extend(plan.alerts);
        let (sum, add) = (&mut union.counts, &plan.counts);
        sum.usage_events += add.usage_events;
        sum.reservation_events += add.reservation_events;
        sum.reservations_judged += add.reservations_judged;
        for (tenant, n) in &add.leases_expired {
            *sum.leases_expired.entry(tenant.clone()).or_default() += n;
        }
        // A tenant lives in one shard: the shards' rows never overlap.
        sum.allowed_open.extend(add.allowed_open.iter().cloned());
        sum.allowed_open.sort_by(|a, b| (&a.tenant, &a.metric).cmp(&(&b.tenant, &b.metric)));
        // A tenant lives in one shard: each alert is in one shard's plan.
        sum.alerts.extend(add.alerts.iter().cloned());
        sum.gauges_over_limit.extend(add.gauges_over_limit.iter().cloned());
        sum.gauges_over_limit.sort_by(|a, b| a.order().cmp(&b.order()));
        sum.valid_commits += add.valid_commits;
        sum.windows_judged += add.windows_judged;
        sum.conflicting_copies += add.conflicting_copies;
        sum.adjustments_before += add.adjustments_before;
        sum.tenants_read += add.tenants_read;
        union.coverage = match (union.coverage, plan.coverage) {
            (full @ Coverage::Full { .. }, _) | (_, full @ Coverage::Full { .. }) => full,
            (
                Coverage::Incremental { since, mut tenants },
                Coverage::Incremental { since: shard_since, tenants: shard_tenants },
            ) => {
                tenants.extend(shard_tenants);
                Coverage::Incremental { since: since + shard_since, tenants }
            }
        };
        for (step, ms) in &add.step_ms {
            match sum.step_ms.iter_mut().find(|(s, _)| s == step) {
                Some((_, total)) => *total += ms,
                None => sum.step_ms.push((step, *ms)),
            }
        }
        for found in plan.after_close {
            if !union.after_close.contains(&found) {
                union.after_close.push(found);
            }
        }
    }
    // Stable: within a kind, the shards' own order.
    union.adjustments.sort_by_key(|a| a.kind);
    union
}
