//! Effective limit and overshoot of one window (contract §5 "Effective limit", "Overshoot").

use schemas::{Enforcement, GrantEvent, Scope, Timestamp};

use crate::window;

/// The policy's limit plus every grant of the same tenant and metric whose `[valid_from, valid_until)` overlaps
/// the window: a grant with a subject raises that subject's SUBJECT-scope windows, one without raises the
/// TENANT-scope windows. `grants` are the tenant's grants for the metric.
///
/// Saturates at `i64::MAX`: each grant is at most 2^53 - 1 (`schemas::validate::AMOUNT_MAX`), so only more than a
/// thousand of the largest overlapping one window pass it, and a limit of `i64::MAX` already holds more than any
/// window's consumption can (the ledger keeps every total within i64): the hook allows, reconcile finds no
/// overshoot and billing no overage, exactly as with the true sum. A panic here stopped the hook's writer, every
/// reconcile and every export of that month for good, and a refusal would have no one to refuse: the grants are
/// recorded already.
pub fn effective_limit(
    limit: i64,
    scope: Scope,
    subject: Option<&str>,
    grants: &[GrantEvent],
    window_start: Timestamp,
    window_end: Timestamp,
) -> i64 {
    grants
        .iter()
        .filter(|g| match scope {
            Scope::TENANT => g.header.subject.is_none(),
            Scope::SUBJECT => g.header.subject.is_some() && g.header.subject.as_deref() == subject,
        })
        .filter(|g| window::overlaps(g.valid_from, g.valid_until, window_start, window_end))
        .fold(limit, |sum, g| sum.saturating_add(g.amount))
}

/// max(0, consumption - effective limit).
pub fn excess(consumption: i64, effective_limit: i64) -> i64 {
    consumption.saturating_sub(effective_limit).max(0)
}

/// The adjustment kind an excess is reported as: OVERSHOOT for HARD, SHADOW_OVER_LIMIT for SHADOW; SOFT excess is
/// billed, not adjusted.
pub fn excess_kind(enforcement: Enforcement) -> Option<schemas::AdjustmentKind> {
    match enforcement {
        Enforcement::HARD => Some(schemas::AdjustmentKind::OVERSHOOT),
        Enforcement::SHADOW => Some(schemas::AdjustmentKind::SHADOW_OVER_LIMIT),
        Enforcement::SOFT => None,
    }
}

/// One consumption of a window: usage or a valid COMMIT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumed {
    /// When it happened (event time).
    pub occurred_at: Timestamp,
    /// Its ledger sequence number, which breaks ties in event time.
    pub seq: u64,
    /// What it consumed.
    pub quantity: i64,
    /// Its event_id, to name it among the events that crossed.
    pub event_id: String,
}

/// The events that crossed the limit: in event time order (ties by ledger sequence), each one with a positive
/// quantity that finds the running consumption above the effective limit once it is added.
pub fn crossers(consumed: &mut [Consumed], effective_limit: i64) -> Vec<String> {
    crossing(consumed, effective_limit).into_iter().map(|i| consumed[i].event_id.clone()).collect()
}

/// The ledger sequence numbers of the events that crossed the limit, in the order of [`crossers`] (for callers
/// that look the event_ids up afterwards).
pub fn crossing_seqs(consumed: &mut [Consumed], effective_limit: i64) -> Vec<u64> {
    crossing(consumed, effective_limit).into_iter().map(|i| consumed[i].seq).collect()
}

/// Sorts `consumed` by event time and answers the indices of the crossers.
fn crossing(consumed: &mut [Consumed], effective_limit: i64) -> Vec<usize> {
    consumed.sort_by_key(|c| (c.occurred_at, c.seq));
    let mut running: i64 = 0;
    let mut crossing = Vec::new();
    for (i, c) in consumed.iter().enumerate() {
        // Saturating, as the effective limit does: a running sum held at i64::MAX stays above every limit below it,
        // and never passes a limit saturated there itself (a sum that large is beyond any limit's true value too).
        running = running.saturating_add(c.quantity);
        if c.quantity > 0 && running > effective_limit {
            crossing.push(i);
        }
    }
    crossing
}

#[cfg(test)]
mod tests {
    use schemas::Header;

    use super::*;

    fn at(text: &str) -> Timestamp {
        Timestamp::parse_rfc3339(text).unwrap()
    }

    fn grant(subject: Option<&str>, amount: i64, from: &str, until: &str) -> GrantEvent {
        GrantEvent {
            header: Header {
                event_id: format!("g-{amount}"),
                occurred_at: at(from),
                tenant: "org-1".into(),
                subject: subject.map(String::from),
                metric: "tokens".into(),
                source: "admin".into(),
            },
            grant_id: format!("g-{amount}"),
            amount,
            valid_from: at(from),
            valid_until: at(until),
            reason: "test".into(),
            actor: None,
        }
    }

    // contract §5 "Effective limit": overlapping grants raise the limit; subject grants raise only that subject's windows.
    #[test]
    fn grants_raise_the_windows_they_overlap() {
        let grants = [
            grant(None, 10, "2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z"),
            grant(None, 20, "2026-11-05T00:00:00Z", "2026-11-06T00:00:00Z"),
            grant(Some("alice"), 300, "2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z"),
        ];
        let (day_start, day_end) = (at("2026-11-01T00:00:00Z"), at("2026-11-02T00:00:00Z"));
        assert_eq!(effective_limit(100, Scope::TENANT, None, &grants, day_start, day_end), 110);
        let (month_start, month_end) = (at("2026-11-01T00:00:00Z"), at("2026-12-01T00:00:00Z"));
        assert_eq!(effective_limit(100, Scope::TENANT, None, &grants, month_start, month_end), 130);
        assert_eq!(effective_limit(100, Scope::SUBJECT, Some("alice"), &grants, day_start, day_end), 400);
        assert_eq!(effective_limit(100, Scope::SUBJECT, Some("bob"), &grants, day_start, day_end), 100);
    }

    // Proves that grants whose sum leaves i64 raise the limit to i64::MAX instead of panicking (it stopped the hook's
    // writer, reconcile and the month's export), and that a window's consumption summed past i64 still names the
    // events that crossed a lower limit.
    #[test]
    fn sums_past_i64_saturate() {
        let largest = schemas::validate::AMOUNT_MAX;
        let grants: Vec<GrantEvent> =
            (0..1_025).map(|_| grant(None, largest, "2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z")).collect();
        let (start, end) = (at("2026-11-01T00:00:00Z"), at("2026-12-01T00:00:00Z"));
        assert_eq!(effective_limit(largest, Scope::TENANT, None, &grants, start, end), i64::MAX);
        let mut consumed: Vec<Consumed> = (0..1_026)
            .map(|n| Consumed {
                occurred_at: at("2026-11-02T00:00:00Z"),
                seq: n,
                quantity: largest,
                event_id: format!("u-{n}"),
            })
            .collect();
        assert_eq!(crossers(&mut consumed, 2 * largest).len(), 1_024, "every event after the second crossed");
        assert!(crossers(&mut consumed, i64::MAX).is_empty(), "nothing passes a saturated limit");
    }

    // contract §5 "Overshoot": the events named are those that crossed the limit, in event time, not arrival order.
    #[test]
    fn the_events_that_crossed_the_limit_are_named_in_event_time() {
        let c = |id: &str, t: &str, seq: u64, quantity: i64| Consumed {
            occurred_at: at(t),
            seq,
            quantity,
            event_id: id.into(),
        };
        let mut consumed = vec![
            c("late-arrival-first", "2026-11-01T00:01:00Z", 4, 60),
            c("second", "2026-11-01T00:02:00Z", 1, 30),
            c("zero", "2026-11-01T00:03:00Z", 2, 0),
            c("third", "2026-11-01T00:04:00Z", 3, 20),
        ];
        assert_eq!(crossers(&mut consumed, 80), ["second", "third"]);
        assert_eq!(excess(110, 80), 30);
        assert_eq!(excess(70, 80), 0);
    }
}
