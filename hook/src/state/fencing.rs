//! Fencing tokens: the greatest token a lease of each tenant's metric was granted, so that the next lease gets a
//! greater one.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// The greatest fencing token of a lease's RESERVE, by (tenant, metric).
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct FencingTokens {
    greatest: HashMap<(String, String), i64>,
}

impl FencingTokens {
    /// The greatest fencing token a lease of `tenant`'s `metric` was granted with (0 when none was).
    pub(super) fn greatest(&self, tenant: &str, metric: &str) -> i64 {
        self.greatest.get(&(tenant.to_string(), metric.to_string())).copied().unwrap_or(0)
    }

    /// Notes that a lease of `tenant`'s `metric` was granted `token`: the next one gets a greater one.
    pub(super) fn note(&mut self, tenant: &str, metric: &str, token: i64) {
        let greatest = self.greatest.entry((tenant.to_string(), metric.to_string())).or_insert(0);
        *greatest = (*greatest).max(token);
    }
}
