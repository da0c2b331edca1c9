//! Effective limit and overshoot of one window (contract §5 "Effective limit", "Overshoot").

use schemas::{Enforcement, GrantEvent, Scope, Timestamp, Window};

use crate::window;

/// The policy's limit plus every grant of the same tenant and metric whose `[valid_from, valid_until)` overlaps
/// the window: a grant naming a subject raises that subject's SUBJECT-scope windows, one naming a project (an API key)
/// that project's PROJECT (that key's API_KEY) windows, and one naming none the TENANT-scope windows (a grant names at
/// most one, validation says). `member` is the window's member of `scope`; `grants` are the tenant's grants for the
/// metric.
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
    member: Option<&str>,
    grants: &[GrantEvent],
    window_start: Timestamp,
    window_end: Timestamp,
) -> i64 {
    grants
        .iter()
        .filter(|g| {
            let h = &g.header;
            match scope {
                Scope::TENANT => h.subject.is_none() && h.project.is_none() && h.api_key.is_none(),
                Scope::SUBJECT | Scope::PROJECT | Scope::API_KEY => {
                    scope.member_of(h).is_some() && scope.member_of(h) == member
                }
            }
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

/// What a HARD quota with a throttled overage (`overage_rate` per `overage_window`, PolicyEvent v7) may consume beyond
/// its effective limit in a window whose consumption first went beyond it at `beyond_from` and which ends at
/// `window_end`: one whole bucket, plus the rate over that time. The hook's overage bucket holds at most `rate`
/// tokens and fills only with time (from its process's start, never full at once), so no hook lets more through.
/// The rate is counted over the shortest window of its kind (28 days for MONTH), rounded up: a bound to judge an
/// enforcement miss by, never below what the hook may rightly allow.
pub fn throttled_allowance(rate: i64, window: Window, beyond_from: Timestamp, window_end: Timestamp) -> i64 {
    let shortest_micros: i128 = match window {
        Window::MINUTE => 60,
        Window::HOUR => 3_600,
        Window::DAY => 86_400,
        Window::MONTH | Window::CONCURRENT | Window::ROLLING | Window::BILLING_CYCLE => 28 * 86_400,
    } * 1_000_000;
    let elapsed = i128::from(window_end.micros().saturating_sub(beyond_from.micros()).max(0));
    let refilled = (i128::from(rate) * elapsed + shortest_micros - 1) / shortest_micros;
    i64::try_from(refilled.saturating_add(i128::from(rate))).unwrap_or(i64::MAX)
}

/// When the running consumption of a window (in event time order, ties by ledger sequence) first goes beyond
/// `effective_limit`: the event time of the first crosser, none when it never does.
pub fn first_beyond(consumed: &mut [Consumed], effective_limit: i64) -> Option<Timestamp> {
    crossing(consumed, effective_limit).first().map(|&i| consumed[i].occurred_at)
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
    use testkit::fixtures::at;

    fn grant(subject: Option<&str>, amount: i64, from: &str, until: &str) -> GrantEvent {
        GrantEvent {
            header: Header {
                event_id: format!("g-{amount}"),
                occurred_at: at(from),
                tenant: "org-1".into(),
                subject: subject.map(String::from),
                metric: "tokens".into(),
                source: "admin".into(),
                api_key: None,
                project: None,
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

    // A grant naming a project (an API key) raises that project's PROJECT (that key's API_KEY) windows
    // only, never the tenant's nor a subject's, and a subject's never a project's of the same name.
    #[test]
    fn a_grant_raises_the_windows_of_the_one_member_it_names() {
        let of = |project: Option<&str>, api_key: Option<&str>, subject: Option<&str>, amount: i64| {
            let mut g = grant(subject, amount, "2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z");
            (g.header.project, g.header.api_key) = (project.map(String::from), api_key.map(String::from));
            g
        };
        let grants = [
            of(Some("p-1"), None, None, 10),
            of(None, Some("key-a"), None, 20),
            of(None, None, Some("p-1"), 40),
            of(None, None, None, 80),
        ];
        let (start, end) = (at("2026-11-01T00:00:00Z"), at("2026-11-02T00:00:00Z"));
        let limit = |scope: Scope, member: Option<&str>| effective_limit(100, scope, member, &grants, start, end);
        assert_eq!(limit(Scope::PROJECT, Some("p-1")), 110);
        assert_eq!(limit(Scope::PROJECT, Some("p-2")), 100);
        assert_eq!(limit(Scope::PROJECT, None), 100, "what names no project has no grant of its own");
        assert_eq!(limit(Scope::API_KEY, Some("key-a")), 120);
        assert_eq!(limit(Scope::SUBJECT, Some("p-1")), 140, "the subject p-1, not the project");
        assert_eq!(limit(Scope::TENANT, None), 180, "only the grant naming no member");
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

    // Beyond its limit a throttled overage may take one bucket plus the rate from the first event
    // beyond the limit to the window's end, rounded up; nothing before that instant counts.
    #[test]
    fn a_throttled_overage_allows_a_bucket_and_the_rate_from_the_first_event_beyond_the_limit() {
        let c =
            |t: &str, seq: u64, quantity: i64| Consumed { occurred_at: at(t), seq, quantity, event_id: String::new() };
        let mut consumed =
            vec![c("2026-11-01T10:00:00Z", 1, 8), c("2026-11-01T23:58:00Z", 2, 3), c("2026-11-01T23:59:00Z", 3, 1)];
        let beyond = first_beyond(&mut consumed, 10).expect("11 is beyond 10");
        assert_eq!(beyond, at("2026-11-01T23:58:00Z"));
        let day_end = at("2026-11-02T00:00:00Z");
        assert_eq!(throttled_allowance(2, Window::MINUTE, beyond, day_end), 2 + 4, "a bucket and two minutes at 2");
        assert_eq!(throttled_allowance(2, Window::HOUR, beyond, day_end), 2 + 1, "two minutes at 2 an hour round up");
        assert_eq!(throttled_allowance(5, Window::MINUTE, day_end, day_end), 5, "at the end: the bucket alone");
        assert_eq!(first_beyond(&mut consumed, 12), None);
        assert_eq!(throttled_allowance(i64::MAX, Window::MINUTE, beyond, day_end), i64::MAX, "saturates");
    }
}
