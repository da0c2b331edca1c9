//! The reads reconcile judges alerts by: which alerts are recorded, so that each is written once
//! whichever writer finds it first, and how many decisions a policy version denied, for its deny rate.

use std::collections::HashSet;

use rusqlite::named_params;
use schemas::Timestamp;

use crate::Ledger;
use crate::error::ReadError;

const ALERT_IDS: &str = include_str!("../queries/alert_ids.sql");
const DECISION_TALLY_OF_TENANT: &str = include_str!("../queries/decision_tally_of_tenant.sql");
const DECISION_TALLY: &str = include_str!("../queries/decision_tally.sql");

/// Decisions counted over a span: how many, and how many a given policy version denied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecisionTally {
    /// Decisions of the tenant (every tenant, for a plan default) and metric.
    pub decisions: u64,
    /// Those the version denied (a SHADOW version: would have denied).
    pub denied: u64,
}

impl Ledger {
    /// The ids of every recorded alert.
    pub fn alert_ids(&self) -> Result<HashSet<String>, ReadError> {
        let mut statement = self.conn.prepare_cached(ALERT_IDS)?;
        let rows = statement.query_map([], |r| r.get::<_, String>(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Per tenant with some, the decisions of `metric` of `tenant` (of every tenant when it is `None`: a plan
    /// default's) that occurred in `[from, to)`, and how many of them version `version` of `policy_id` denied; by
    /// tenant.
    pub fn decision_tallies(
        &self,
        tenant: Option<&str>,
        metric: &str,
        (from, to): (Timestamp, Timestamp),
        (policy_id, version): (&str, i32),
    ) -> Result<Vec<(String, DecisionTally)>, ReadError> {
        let tally = |r: &rusqlite::Row<'_>| {
            let (decisions, denied) = (r.get::<_, i64>(1)?, r.get::<_, i64>(2)?);
            Ok((r.get(0)?, DecisionTally { decisions: decisions as u64, denied: denied as u64 }))
        };
        let rows = match tenant {
            Some(tenant) => self
                .conn
                .prepare_cached(DECISION_TALLY_OF_TENANT)?
                .query_map(
                    named_params! {
                        ":tenant": tenant, ":metric": metric, ":from": from.micros(), ":to": to.micros(),
                        ":policy_id": policy_id, ":version": version,
                    },
                    tally,
                )?
                .collect::<rusqlite::Result<_>>()?,
            None => self
                .conn
                .prepare_cached(DECISION_TALLY)?
                .query_map(
                    named_params! {
                        ":metric": metric, ":from": from.micros(), ":to": to.micros(), ":policy_id": policy_id,
                        ":version": version,
                    },
                    tally,
                )?
                .collect::<rusqlite::Result<_>>()?,
        };
        Ok(rows)
    }
}
