//! A window's capacity leases as their recorded steps say (contract §9.6): each lease's state and the window's
//! accounts (granted, used, returned, expired, reclaimed, out), folded from CapacityLeaseEvents in ledger order. The
//! allocator's book is rebuilt from it at a start, and reconcile reports a window's leases from it.
//!
//! A step that does not fit the lease's life is refused and changes nothing: a RENEW, RETURN or EXPIRE of a lease with
//! no GRANT, a second GRANT, any step after the lease closed (RETURN or RECLAIM), a RETURN or RENEW after its EXPIRE (the
//! holder came too late: the RECLAIM gives its unused units back), a RECLAIM before an EXPIRE, and a close whose units
//! back and units used do not add up to what the lease held.
//!
//! ```
//! use rules::escrow::steps::{Step, Steps};
//! use schemas::{CapacityLeaseAction::*, Timestamp};
//!
//! let mut steps = Steps::default();
//! let at = Timestamp(10_000_000);
//! steps.apply(&Step { lease: "cl-1", action: GRANT, holder: "shard-0001", units: 40, used: None, expires_at: Some(at) }).unwrap();
//! steps.apply(&Step { lease: "cl-1", action: RETURN, holder: "shard-0001", units: 15, used: Some(25), expires_at: None }).unwrap();
//! let accounts = steps.accounts();
//! assert_eq!((accounts.granted, accounts.used, accounts.returned, accounts.out), (40, 25, 15, 0));
//! ```

use std::collections::BTreeMap;

use schemas::{CapacityLeaseAction, CapacityLeaseEvent, Timestamp};

/// What folding needs of a CapacityLeaseEvent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)] // The CapacityLeaseEvent's own fields, by their contract §3 names.
pub struct Step<'a> {
    pub lease: &'a str,
    pub action: CapacityLeaseAction,
    pub holder: &'a str,
    pub units: i64,
    pub used: Option<i64>,
    pub expires_at: Option<Timestamp>,
}

impl<'a> From<&'a CapacityLeaseEvent> for Step<'a> {
    fn from(e: &'a CapacityLeaseEvent) -> Step<'a> {
        Step {
            lease: &e.capacity_lease_id,
            action: e.action,
            holder: &e.holder,
            units: e.units,
            used: e.used,
            expires_at: e.expires_at,
        }
    }
}

/// Why a step was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StepRefused {
    /// A RENEW, RETURN, EXPIRE or RECLAIM of a lease with no GRANT.
    #[error("capacity lease {0:?} was never granted")]
    NoGrant(String),
    /// A GRANT of a lease granted already.
    #[error("capacity lease {0:?} was granted already")]
    SecondGrant(String),
    /// A step of a lease returned or reclaimed.
    #[error("capacity lease {0:?} is closed")]
    Closed(String),
    /// A RENEW or RETURN of a lease the allocator expired, or a second EXPIRE.
    #[error("capacity lease {0:?} expired")]
    Expired(String),
    /// A RECLAIM of a lease not expired.
    #[error("capacity lease {0:?} is reclaimed before it expired")]
    NotExpired(String),
    /// A step naming another holder than the lease's.
    #[error("capacity lease {lease:?} is held by {holder:?}, not {named:?}")]
    OtherHolder {
        /// The lease.
        lease: String,
        /// Its holder.
        holder: String,
        /// The holder the step names.
        named: String,
    },
    /// A close whose units back plus units used are not what the lease held, or a RENEW whose used count is more.
    #[error("capacity lease {lease:?} held {held} units: {back} back and {used} used do not add up")]
    DoesNotAddUp {
        /// The lease.
        lease: String,
        /// Units it held.
        held: i64,
        /// Units the step gives back.
        back: i64,
        /// Units the step says were used.
        used: i64,
    },
}

/// Where a lease is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Granted (and perhaps renewed): its holder may use it until its expiry.
    Open,
    /// Expired by the allocator: nobody may use it; its units stay out until its RECLAIM.
    Expired,
    /// Returned or reclaimed: its unused units came back.
    Closed,
}

/// One lease as its steps say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseState {
    /// Who holds it.
    pub holder: String,
    /// Units granted and added.
    pub units: i64,
    /// Units used as last reported (a RENEW's so far, a close's in all).
    pub used: i64,
    /// Its expiry as last granted or renewed.
    pub expires_at: Option<Timestamp>,
    /// Where it is in its life.
    pub stage: Stage,
}

/// A window's accounts of its capacity leases.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Accounts {
    /// Units granted and added at renewals.
    pub granted: i64,
    /// Units used under leases that closed.
    pub used: i64,
    /// Units that came back with RETURNs.
    pub returned: i64,
    /// Leases the allocator expired.
    pub expired: i64,
    /// Units that came back with RECLAIMs.
    pub reclaimed: i64,
    /// Units still out: on leases open or expired, not yet closed.
    pub out: i64,
}

/// The leases of one window, folded step by step.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Steps {
    leases: BTreeMap<String, LeaseState>,
    accounts: Accounts,
}

impl Steps {
    /// The window's accounts: `granted == used + returned + reclaimed + out` always.
    pub fn accounts(&self) -> Accounts {
        self.accounts
    }

    /// A lease's state, when it was granted.
    pub fn lease(&self, lease: &str) -> Option<&LeaseState> {
        self.leases.get(lease)
    }

    /// Applies the next step in ledger order; a refused one changes nothing.
    pub fn apply(&mut self, step: &Step<'_>) -> Result<(), StepRefused> {
        if step.action == CapacityLeaseAction::GRANT {
            return self.grant(step);
        }
        let id = step.lease.to_string();
        let lease = self.leases.get(step.lease).ok_or_else(|| StepRefused::NoGrant(id.clone()))?;
        if lease.holder != step.holder {
            let (holder, named) = (lease.holder.clone(), step.holder.to_string());
            return Err(StepRefused::OtherHolder { lease: id, holder, named });
        }
        let next = next_state(lease, step)?;
        let accounts = &mut self.accounts;
        match step.action {
            CapacityLeaseAction::RENEW => {
                accounts.granted += step.units;
                accounts.out += step.units;
            }
            CapacityLeaseAction::EXPIRE => accounts.expired += 1,
            CapacityLeaseAction::RETURN => accounts.returned += step.units,
            CapacityLeaseAction::RECLAIM => accounts.reclaimed += step.units,
            CapacityLeaseAction::GRANT => unreachable!("a GRANT returned above"),
        }
        if next.stage == Stage::Closed {
            accounts.used += next.used;
            accounts.out -= lease.units;
        }
        self.leases.insert(id, next);
        Ok(())
    }

    fn grant(&mut self, step: &Step<'_>) -> Result<(), StepRefused> {
        if self.leases.contains_key(step.lease) {
            return Err(StepRefused::SecondGrant(step.lease.to_string()));
        }
        let lease = LeaseState {
            holder: step.holder.to_string(),
            units: step.units,
            used: 0,
            expires_at: step.expires_at,
            stage: Stage::Open,
        };
        self.leases.insert(step.lease.to_string(), lease);
        self.accounts.granted += step.units;
        self.accounts.out += step.units;
        Ok(())
    }
}

/// The lease after a step other than its GRANT, or why the step does not fit its life.
fn next_state(lease: &LeaseState, step: &Step<'_>) -> Result<LeaseState, StepRefused> {
    let id = || step.lease.to_string();
    let used = step.used.unwrap_or(lease.used);
    let adds_up = |held: i64| {
        if step.units + used == held {
            Ok(())
        } else {
            Err(StepRefused::DoesNotAddUp { lease: id(), held, back: step.units, used })
        }
    };
    match (lease.stage, step.action) {
        (Stage::Closed, _) => Err(StepRefused::Closed(id())),
        (Stage::Expired, CapacityLeaseAction::RENEW | CapacityLeaseAction::RETURN | CapacityLeaseAction::EXPIRE) => {
            Err(StepRefused::Expired(id()))
        }
        (Stage::Open, CapacityLeaseAction::RECLAIM) => Err(StepRefused::NotExpired(id())),
        (_, CapacityLeaseAction::RENEW) => {
            let units = lease.units + step.units;
            if used > units {
                return Err(StepRefused::DoesNotAddUp { lease: id(), held: units, back: 0, used });
            }
            Ok(LeaseState { units, used, expires_at: step.expires_at, ..lease.clone() })
        }
        (_, CapacityLeaseAction::EXPIRE) => Ok(LeaseState { stage: Stage::Expired, ..lease.clone() }),
        (_, CapacityLeaseAction::RETURN | CapacityLeaseAction::RECLAIM) => {
            adds_up(lease.units)?;
            Ok(LeaseState { used, stage: Stage::Closed, ..lease.clone() })
        }
        (_, CapacityLeaseAction::GRANT) => Err(StepRefused::SecondGrant(id())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use CapacityLeaseAction::*;

    fn step(lease: &str, action: CapacityLeaseAction, units: i64, used: Option<i64>) -> Step<'_> {
        let expires_at = matches!(action, GRANT | RENEW).then_some(Timestamp(10));
        Step { lease, action, holder: "shard-0001", units, used, expires_at }
    }

    // Proves the accounts of a window whose leases are returned, renewed, expired and reclaimed, and that they add up.
    #[test]
    fn accounts_follow_each_lease_to_its_close() {
        let mut steps = Steps::default();
        for s in [
            step("a", GRANT, 40, None),
            step("b", GRANT, 30, None),
            step("a", RENEW, 10, Some(20)),
            step("a", RETURN, 15, Some(35)),
            step("b", EXPIRE, 0, None),
            step("c", GRANT, 5, None),
        ] {
            steps.apply(&s).unwrap();
        }
        let a = steps.accounts();
        assert_eq!((a.granted, a.used, a.returned, a.expired, a.reclaimed, a.out), (85, 35, 15, 1, 0, 35));
        steps.apply(&step("b", RECLAIM, 21, Some(9))).unwrap();
        let a = steps.accounts();
        assert_eq!((a.used, a.reclaimed, a.out), (44, 21, 5));
        assert_eq!(a.granted, a.used + a.returned + a.reclaimed + a.out);
        assert_eq!(steps.lease("b").map(|l| (l.used, l.stage)), Some((9, Stage::Closed)));
    }

    // Proves each step that does not fit a lease's life is refused and changes nothing.
    #[test]
    fn steps_out_of_a_lease_life_are_refused() {
        let mut steps = Steps::default();
        steps.apply(&step("a", GRANT, 10, None)).unwrap();
        let before = steps.clone();
        let refused = |steps: &mut Steps, s: Step<'_>| steps.apply(&s).unwrap_err();
        assert_eq!(refused(&mut steps, step("z", RETURN, 0, Some(0))), StepRefused::NoGrant("z".into()));
        assert_eq!(refused(&mut steps, step("a", GRANT, 1, None)), StepRefused::SecondGrant("a".into()));
        assert_eq!(refused(&mut steps, step("a", RECLAIM, 10, Some(0))), StepRefused::NotExpired("a".into()));
        assert!(matches!(refused(&mut steps, step("a", RETURN, 5, Some(4))), StepRefused::DoesNotAddUp { .. }));
        assert!(matches!(refused(&mut steps, step("a", RENEW, 0, Some(11))), StepRefused::DoesNotAddUp { .. }));
        let other = Step { holder: "shard-0002", ..step("a", RETURN, 10, Some(0)) };
        assert!(matches!(refused(&mut steps, other), StepRefused::OtherHolder { .. }));
        assert_eq!(steps, before, "nothing refused changed anything");
        steps.apply(&step("a", EXPIRE, 0, None)).unwrap();
        assert_eq!(refused(&mut steps, step("a", RETURN, 10, Some(0))), StepRefused::Expired("a".into()));
        assert_eq!(refused(&mut steps, step("a", RENEW, 1, Some(0))), StepRefused::Expired("a".into()));
        steps.apply(&step("a", RECLAIM, 10, Some(0))).unwrap();
        assert_eq!(refused(&mut steps, step("a", RECLAIM, 10, Some(0))), StepRefused::Closed("a".into()));
    }
}
