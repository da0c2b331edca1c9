//! What an operator graphs of a hook's state (`/metrics`): its open reservations and leases and how long the oldest
//! of each has been open (a worker that reserves and never closes, or renews a lease and never releases it), and how many tenants stand at or near an effective limit. Read by
//! the writer between groups, like a quota read ([`crate::Hook::figures`]), so the numbers are those it decides with.

use schemas::{Enforcement, Timestamp};
use serde::Serialize;

use crate::quotas::{QuotaQuery, of_state};
use crate::state::State;

/// The share of an effective limit from which a tenant is counted as near it.
pub const NEAR_LIMIT: f64 = 0.8;

/// A hook's figures at one instant.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Figures {
    /// Reservations open now (holding against limits until committed, released or expired).
    pub open_reservations: u64,
    /// When the oldest of them was made.
    pub oldest_reservation_at: Option<Timestamp>,
    /// Leases active now (slots of CONCURRENT policies).
    pub open_leases: u64,
    /// When the oldest of them was acquired: renewed for that long and never released.
    pub oldest_lease_at: Option<Timestamp>,
    /// Tenants whose consumption and holds reach 80% or more of an effective limit of a HARD or SOFT policy now.
    pub tenants_near_limit: u64,
    /// Of those, the tenants at or beyond 100%.
    pub tenants_at_limit: u64,
}

impl Figures {
    /// The figures of several hooks (the shards of a server) as one: sums, and the oldest reservation of all.
    pub fn add(&mut self, other: &Figures) {
        let oldest = |a: Option<Timestamp>, b: Option<Timestamp>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.open_reservations += other.open_reservations;
        self.oldest_reservation_at = oldest(self.oldest_reservation_at, other.oldest_reservation_at);
        self.open_leases += other.open_leases;
        self.oldest_lease_at = oldest(self.oldest_lease_at, other.oldest_lease_at);
        self.tenants_near_limit += other.tenants_near_limit;
        self.tenants_at_limit += other.tenants_at_limit;
    }
}

/// The figures of `state` at `now`: every tenant that consumed or holds anything is judged against the policies that
/// apply to it (its own and the plan defaults), as a request without a subject would be; rate limits (throttles) and
/// SHADOW policies limit nobody and are left out.
pub fn of(state: &State, now: Timestamp) -> Figures {
    let mut figures = Figures::default();
    for hold in state.holds() {
        let (open, oldest) = match hold.fencing_token {
            Some(_) => (&mut figures.open_leases, &mut figures.oldest_lease_at),
            None => (&mut figures.open_reservations, &mut figures.oldest_reservation_at),
        };
        *open += 1;
        *oldest = Some(oldest.map_or(hold.reserved_at, |at| at.min(hold.reserved_at)));
    }
    for tenant in state.tenants() {
        let query = QuotaQuery { who: schemas::Who::tenant(tenant), metric: None };
        let most = of_state(state, None, &query, now)
            .quotas
            .iter()
            .filter(|q| !q.throttle && q.enforcement != Enforcement::SHADOW)
            .filter_map(|q| {
                let limit = q.effective_limit?;
                let used =
                    q.consumed.unwrap_or(0).saturating_add(q.held.unwrap_or(0)).saturating_add(q.leases.unwrap_or(0));
                Some(match limit {
                    0 if used > 0 => f64::INFINITY,
                    0 => 0.0,
                    limit => used as f64 / limit as f64,
                })
            })
            .fold(0.0_f64, f64::max);
        figures.tenants_near_limit += u64::from(most >= NEAR_LIMIT);
        figures.tenants_at_limit += u64::from(most >= 1.0);
    }
    figures
}
