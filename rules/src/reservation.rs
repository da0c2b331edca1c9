//! The life of one reservation, decided by event time, not arrival order (contract §5 "Reservations").
//!
//! A reservation is identified by (tenant, reservation_id) ([`same_reservation`]; choice where the contract is
//! silent): producers of other teams choose their own ids, and one tenant's events must never change another
//! tenant's verdicts, so events of another tenant with the same reservation_id are another reservation.
//!
//! RESERVE holds its amount while open. The first COMMIT or RELEASE by event time with `occurred_at <=
//! expires_at` closes it: a COMMIT records its amount as consumption (more than reserved is charged), a RELEASE
//! nothing. A close after `expires_at`, after the reservation was closed, or for a reservation_id with no
//! RESERVE is a refused transition. With no valid close, the reservation is expired once `expires_at` is
//! before the run's `as_of`. (Choice where the contract is silent: a second RESERVE of the same reservation_id is a
//! refused transition too; ties in event time go to the earlier ledger sequence.)
//!
//! A lease (a slot of a CONCURRENT policy) is a reservation whose RESERVE carries a fencing token. A RENEW
//! dated at or before the lease's expiry, as renewals before it moved it, sets a new expiry; a RELEASE closes it. A
//! RENEW or RELEASE whose token is not the lease's is refused as stale (a holder that lost its slot must never free or
//! extend the slot of the one that took it over); so is a COMMIT of a lease (a lease consumes nothing) and a RENEW of a
//! reservation of an amount.

use schemas::{ReservationAction, ReservationEvent, Timestamp};

/// Why a transition was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Refused {
    /// A COMMIT or RELEASE of a reservation_id with no RESERVE.
    NoReserve,
    /// A COMMIT or RELEASE that happened after the RESERVE's `expires_at`.
    AfterExpiry,
    /// A COMMIT or RELEASE after the reservation was closed.
    AlreadyClosed,
    /// A RESERVE of a reservation that has one already.
    SecondReserve,
    /// A RENEW or RELEASE of a lease carrying another token than the lease's: its holder lost the slot.
    StaleToken,
    /// A COMMIT of a lease, or a RENEW of a reservation of an amount.
    NotForKind,
}

/// What reconcile makes of a reservation's events.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Verdict {
    /// Ledger sequence number of the RESERVE.
    pub reserve: Option<u64>,
    /// The valid close: its sequence number, action and amount.
    pub close: Option<(u64, ReservationAction, i64)>,
    /// Refused transitions: sequence number and why.
    pub refused: Vec<(u64, Refused)>,
    /// The amount held by a reservation expired as of the run (no valid close, `expires_at` before `as_of`).
    pub expired: Option<i64>,
    /// Consumption: the valid COMMIT's amount.
    pub consumption: i64,
    /// When the RESERVE expires unclosed: its `expires_at`, as the valid RENEWs of a lease moved it.
    pub expires_at: Option<Timestamp>,
    /// The lease's fencing token: the RESERVE's, when it is a lease.
    pub fencing_token: Option<i64>,
}

/// What judging needs of a reservation event: the event itself, or what a caller keeps of it (the hook keeps
/// no more than this of the reservations it folds).
#[allow(missing_docs)] // The ReservationEvent's own fields, by their contract §3 names.
pub trait Transition {
    fn action(&self) -> ReservationAction;
    fn occurred_at(&self) -> Timestamp;
    fn amount(&self) -> i64;
    fn expires_at(&self) -> Option<Timestamp>;
    fn fencing_token(&self) -> Option<i64>;
}

impl Transition for ReservationEvent {
    fn action(&self) -> ReservationAction {
        self.action
    }
    fn occurred_at(&self) -> Timestamp {
        self.header.occurred_at
    }
    fn amount(&self) -> i64 {
        self.amount
    }
    fn expires_at(&self) -> Option<Timestamp> {
        self.expires_at
    }
    fn fencing_token(&self) -> Option<i64> {
        self.fencing_token
    }
}

/// Whether two events are about the same reservation: the same tenant and the same reservation_id. Callers
/// group the events they judge with this, so that every reader of the ledger agrees on what one reservation is.
pub fn same_reservation(a: &ReservationEvent, b: &ReservationEvent) -> bool {
    a.reservation_id == b.reservation_id && a.header.tenant == b.header.tenant
}

/// What judging reads of a reservation event, for callers that keep no more of it (the hook's fold, a close
/// refused from the ledger's tables).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)] // The ReservationEvent's own fields, by their contract §3 names.
pub struct Facts {
    pub action: ReservationAction,
    pub occurred_at: Timestamp,
    pub amount: i64,
    pub expires_at: Option<Timestamp>,
    pub fencing_token: Option<i64>,
}

impl Facts {
    /// What judging reads of `event`.
    pub fn of(event: &ReservationEvent) -> Facts {
        Facts {
            action: event.action,
            occurred_at: event.header.occurred_at,
            amount: event.amount,
            expires_at: event.expires_at,
            fencing_token: event.fencing_token,
        }
    }
}

impl Transition for Facts {
    fn action(&self) -> ReservationAction {
        self.action
    }
    fn occurred_at(&self) -> Timestamp {
        self.occurred_at
    }
    fn amount(&self) -> i64 {
        self.amount
    }
    fn expires_at(&self) -> Option<Timestamp> {
        self.expires_at
    }
    fn fencing_token(&self) -> Option<i64> {
        self.fencing_token
    }
}

/// Judges the events of one reservation (`(ledger seq, event)`, in any order; see [`same_reservation`]) as of
/// `as_of`.
pub fn judge<T: Transition>(events: &[(u64, &T)], as_of: Timestamp) -> Verdict {
    let mut ordered: Vec<(u64, &T)> = events.to_vec();
    ordered.sort_by_key(|(seq, e)| (e.occurred_at(), *seq));
    let mut verdict = Verdict::default();
    let mut reserve: Option<&T> = None;
    // RESERVEs first: a close may precede its RESERVE in event time only through clock skew, and is then judged
    // against it all the same.
    for (seq, event) in ordered.iter().filter(|(_, e)| e.action() == ReservationAction::RESERVE) {
        match reserve {
            None => {
                reserve = Some(event);
                verdict.reserve = Some(*seq);
            }
            Some(_) => verdict.refused.push((*seq, Refused::SecondReserve)),
        }
    }
    verdict.expires_at = reserve.and_then(|r| r.expires_at());
    verdict.fencing_token = reserve.and_then(|r| r.fencing_token());
    for (seq, event) in ordered.iter().filter(|(_, e)| e.action() != ReservationAction::RESERVE) {
        let lease = verdict.fencing_token.is_some();
        let refused = match reserve {
            None => Some(Refused::NoReserve),
            Some(_) if verdict.expires_at.is_some_and(|expiry| event.occurred_at() > expiry) => {
                Some(Refused::AfterExpiry)
            }
            Some(_) if verdict.close.is_some() => Some(Refused::AlreadyClosed),
            Some(_) => match event.action() {
                ReservationAction::COMMIT if lease => Some(Refused::NotForKind),
                ReservationAction::RENEW if !lease => Some(Refused::NotForKind),
                _ if lease && event.fencing_token() != verdict.fencing_token => Some(Refused::StaleToken),
                _ => None,
            },
        };
        match refused {
            Some(why) => verdict.refused.push((*seq, why)),
            None if event.action() == ReservationAction::RENEW => verdict.expires_at = event.expires_at(),
            None => {
                verdict.close = Some((*seq, event.action(), event.amount()));
                if event.action() == ReservationAction::COMMIT {
                    verdict.consumption = event.amount();
                }
            }
        }
    }
    verdict.refused.sort();
    if let Some(r) = reserve
        && verdict.close.is_none()
        && verdict.expires_at.is_some_and(|expiry| expiry < as_of)
    {
        verdict.expired = Some(r.amount());
    }
    verdict
}

#[cfg(test)]
mod tests {
    use schemas::Header;

    use super::*;
    use testkit::fixtures::at;

    fn event(action: ReservationAction, amount: i64, occurred_at: &str, expires_at: Option<&str>) -> ReservationEvent {
        ReservationEvent {
            header: Header {
                event_id: format!("{action}-{occurred_at}"),
                occurred_at: at(occurred_at),
                tenant: "org-1".into(),
                subject: None,
                metric: "tokens".into(),
                source: "test".into(),
                api_key: None,
                project: None,
            },
            reservation_id: "r-1".into(),
            action,
            amount,
            expires_at: expires_at.map(at),
            fencing_token: None,
        }
    }

    fn lease(action: ReservationAction, token: i64, occurred_at: &str, expires_at: Option<&str>) -> ReservationEvent {
        let amount = i64::from(action == ReservationAction::RESERVE);
        ReservationEvent { fencing_token: Some(token), ..event(action, amount, occurred_at, expires_at) }
    }

    const AS_OF: &str = "2026-11-02T00:00:00Z";
    const EXPIRY: Option<&str> = Some("2026-11-01T10:10:00Z");

    // contract §5: COMMIT closes the reservation and counts its amount, more than reserved included.
    #[test]
    fn commit_above_the_reserved_amount_is_charged_in_full() {
        let reserve = event(ReservationAction::RESERVE, 100, "2026-11-01T10:00:00Z", EXPIRY);
        let commit = event(ReservationAction::COMMIT, 130, "2026-11-01T10:05:00Z", None);
        let verdict = judge(&[(1, &reserve), (2, &commit)], at(AS_OF));
        assert_eq!(verdict.close, Some((2, ReservationAction::COMMIT, 130)));
        assert_eq!((verdict.consumption, verdict.expired, verdict.refused.len()), (130, None, 0));
    }

    // contract §5: validity by event time: a COMMIT that arrives after a later-dated RELEASE but happened first is the valid close.
    #[test]
    fn the_first_close_by_event_time_wins_whatever_the_arrival_order() {
        let reserve = event(ReservationAction::RESERVE, 100, "2026-11-01T10:00:00Z", EXPIRY);
        let release = event(ReservationAction::RELEASE, 0, "2026-11-01T10:06:00Z", None);
        let commit = event(ReservationAction::COMMIT, 40, "2026-11-01T10:05:00Z", None);
        let verdict = judge(&[(1, &reserve), (2, &release), (3, &commit)], at(AS_OF));
        assert_eq!(verdict.close, Some((3, ReservationAction::COMMIT, 40)));
        assert_eq!(verdict.refused, [(2, Refused::AlreadyClosed)]);
        assert_eq!(verdict.consumption, 40);
    }

    // contract §5: a close after expires_at is refused, and the reservation is expired holding its amount.
    #[test]
    fn a_commit_after_expiry_is_refused_and_the_reservation_expires() {
        let reserve = event(ReservationAction::RESERVE, 100, "2026-11-01T10:00:00Z", EXPIRY);
        let commit = event(ReservationAction::COMMIT, 100, "2026-11-01T10:11:00Z", None);
        let verdict = judge(&[(1, &reserve), (2, &commit)], at(AS_OF));
        assert_eq!(verdict.refused, [(2, Refused::AfterExpiry)]);
        assert_eq!((verdict.close, verdict.expired, verdict.consumption), (None, Some(100), 0));
    }

    // contract §5: a close at exactly expires_at is valid; a RELEASE consumes nothing.
    #[test]
    fn a_release_at_the_expiry_instant_is_valid() {
        let reserve = event(ReservationAction::RESERVE, 100, "2026-11-01T10:00:00Z", EXPIRY);
        let release = event(ReservationAction::RELEASE, 0, "2026-11-01T10:10:00Z", None);
        let verdict = judge(&[(1, &reserve), (2, &release)], at(AS_OF));
        assert_eq!(
            (verdict.close, verdict.expired, verdict.consumption),
            (Some((2, ReservationAction::RELEASE, 0)), None, 0)
        );
    }

    // contract §5: an unclosed reservation is expired only once expires_at is before the run's as_of.
    #[test]
    fn an_open_reservation_expires_only_after_its_expiry() {
        let reserve = event(ReservationAction::RESERVE, 70, "2026-11-01T10:00:00Z", EXPIRY);
        assert_eq!(judge(&[(1, &reserve)], at("2026-11-01T10:09:00Z")).expired, None);
        assert_eq!(judge(&[(1, &reserve)], at(AS_OF)).expired, Some(70));
    }

    // contract §5: a close for a reservation_id with no RESERVE is refused; so is a second RESERVE.
    #[test]
    fn closes_without_a_reserve_and_second_reserves_are_refused() {
        let commit = event(ReservationAction::COMMIT, 5, "2026-11-01T10:05:00Z", None);
        assert_eq!(judge(&[(7, &commit)], at(AS_OF)).refused, [(7, Refused::NoReserve)]);
        let first = event(ReservationAction::RESERVE, 10, "2026-11-01T10:00:00Z", EXPIRY);
        let second = event(ReservationAction::RESERVE, 20, "2026-11-01T10:01:00Z", EXPIRY);
        let verdict = judge(&[(1, &first), (2, &second)], at("2026-11-01T10:02:00Z"));
        assert_eq!((verdict.reserve, verdict.refused.clone()), (Some(1), vec![(2, Refused::SecondReserve)]));
    }

    // A renewal moves a lease's expiry, so a release after the first expiry but before the renewed one
    // is valid; an unrenewed lease expires at its first.
    #[test]
    fn a_renewed_lease_is_released_after_its_first_expiry() {
        let acquire = lease(ReservationAction::RESERVE, 7, "2026-11-01T10:00:00Z", EXPIRY);
        let renew = lease(ReservationAction::RENEW, 7, "2026-11-01T10:09:00Z", Some("2026-11-01T10:20:00Z"));
        let release = lease(ReservationAction::RELEASE, 7, "2026-11-01T10:15:00Z", None);
        let verdict = judge(&[(1, &acquire), (2, &renew), (3, &release)], at(AS_OF));
        assert_eq!((verdict.close, verdict.expired), (Some((3, ReservationAction::RELEASE, 0)), None));
        assert_eq!((verdict.expires_at, verdict.fencing_token), (Some(at("2026-11-01T10:20:00Z")), Some(7)));
        let verdict = judge(&[(1, &acquire), (3, &release)], at(AS_OF));
        assert_eq!((verdict.refused, verdict.expired), (vec![(3, Refused::AfterExpiry)], Some(1)));
    }

    // A renewal after the lease expired revives nothing; the lease stays expired.
    #[test]
    fn a_renewal_after_expiry_is_refused() {
        let acquire = lease(ReservationAction::RESERVE, 7, "2026-11-01T10:00:00Z", EXPIRY);
        let renew = lease(ReservationAction::RENEW, 7, "2026-11-01T10:11:00Z", Some("2026-11-01T10:30:00Z"));
        let verdict = judge(&[(1, &acquire), (2, &renew)], at(AS_OF));
        assert_eq!((verdict.refused, verdict.expired), (vec![(2, Refused::AfterExpiry)], Some(1)));
        assert_eq!(verdict.expires_at, EXPIRY.map(at));
    }

    // A holder presenting another token than its lease's neither frees nor extends it.
    #[test]
    fn stale_tokens_and_closes_of_the_wrong_kind_are_refused() {
        let acquire = lease(ReservationAction::RESERVE, 8, "2026-11-01T10:00:00Z", EXPIRY);
        let renew = lease(ReservationAction::RENEW, 7, "2026-11-01T10:01:00Z", Some("2026-11-01T11:00:00Z"));
        let release = lease(ReservationAction::RELEASE, 7, "2026-11-01T10:02:00Z", None);
        let commit = event(ReservationAction::COMMIT, 1, "2026-11-01T10:03:00Z", None);
        let verdict = judge(&[(1, &acquire), (2, &renew), (3, &release), (4, &commit)], at("2026-11-01T10:05:00Z"));
        assert_eq!(verdict.refused, [(2, Refused::StaleToken), (3, Refused::StaleToken), (4, Refused::NotForKind)]);
        assert_eq!((verdict.close, verdict.expires_at), (None, EXPIRY.map(at)));
        let reserve = event(ReservationAction::RESERVE, 100, "2026-11-01T10:00:00Z", EXPIRY);
        let renew = lease(ReservationAction::RENEW, 1, "2026-11-01T10:01:00Z", Some("2026-11-01T11:00:00Z"));
        assert_eq!(judge(&[(1, &reserve), (2, &renew)], at(AS_OF)).refused, [(2, Refused::NotForKind)]);
    }
}
