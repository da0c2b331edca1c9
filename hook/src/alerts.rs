//! Alerts before anyone hits a wall (issue 37 item 4): as a request the hook allows brings a window's consumption and
//! holds to a threshold of its effective limit (80, 90 and 100 percent), an AlertEvent, once per window, policy,
//! member and threshold.
//!
//! Once: an alert's id is derived from what it is about ([`alert_id`]), and the state remembers the alerts of its
//! windows, its own and those folded from the ledger ([`crate::state::State::alerted`]), so a restart, which folds
//! them back, writes none twice. A threshold that usage recorded by another writer (ingest) reached first is alerted
//! by the next request the hook allows in that window: the rule is "at or above the threshold and not alerted yet",
//! not "crossed by this request".
//!
//! Quotas of calendar windows and billing cycles only: a throttle limits a rate, a CONCURRENT policy leases held at
//! once, a gauge a level, and a ROLLING window has no window to alert once in.

use schemas::{AlertEvent, AlertKind, Header, Scope, Timestamp, Window};
use sha2::{Digest, Sha256};

use crate::decide::{Ask, Evaluated};

/// The thresholds, in percent of a window's effective limit, an alert is written at.
pub const THRESHOLDS_PERCENT: [i32; 3] = [80, 90, 100];

/// What an alert's id begins with.
pub const ALERT_PREFIX: &str = "alert-";

/// The id (and event_id) of the THRESHOLD alert of `threshold` percent of `policy_id`'s window `[start, end)` for
/// `member` of `scope` of `tenant`: `alert-` and 32 hex digits of SHA-256 over them.
pub fn alert_id(
    tenant: &str,
    policy_id: &str,
    (scope, member): (Scope, Option<&str>),
    (start, end): (Timestamp, Timestamp),
    threshold: i32,
) -> String {
    let mut hasher = Sha256::new();
    for part in [tenant, policy_id, scope.symbol(), member.unwrap_or("")] {
        hasher.update(part.as_bytes());
        hasher.update([0]);
    }
    hasher.update(start.micros().to_be_bytes());
    hasher.update(end.micros().to_be_bytes());
    hasher.update(threshold.to_be_bytes());
    let digest = hasher.finalize();
    let mut id = String::with_capacity(ALERT_PREFIX.len() + 32);
    id.push_str(ALERT_PREFIX);
    for b in &digest[..16] {
        id.push_str(&format!("{b:02x}"));
    }
    id
}

/// Where `threshold` percent of `limit` lies: the least consumption at or above it (at least 1, so that a limit of
/// 0 alerts at the first unit).
fn level(limit: i64, threshold: i32) -> i128 {
    let scaled = i128::from(limit.max(0)) * i128::from(threshold);
    ((scaled + 99) / 100).max(1)
}

/// The THRESHOLD alerts a request of `ask` at `now` reaches if allowed: of each quota `evaluated` for it, each
/// threshold its window's consumption and holds (the request included) are at or above, and that `alerted` does not
/// know yet.
pub fn reached(
    evaluated: &[Evaluated],
    ask: &Ask<'_>,
    now: Timestamp,
    request_id: &str,
    alerted: impl Fn(&str) -> bool,
) -> Vec<AlertEvent> {
    let mut found = Vec::new();
    for e in evaluated.iter().filter(|e| alerts_for(e)) {
        let after = i128::from(e.used_before) + i128::from(ask.amount);
        let scope = e.policy.scope;
        let member = ask.member(scope);
        let window = (e.window_start, e.window_end);
        for threshold in THRESHOLDS_PERCENT {
            if after < level(e.limit, threshold) {
                break;
            }
            let id = alert_id(ask.tenant, &e.policy.policy_id, (scope, member), window, threshold);
            if alerted(&id) {
                continue;
            }
            let of_member = |s: Scope| member.filter(|_| scope == s).map(String::from);
            found.push(AlertEvent {
                header: Header {
                    event_id: id.clone(),
                    occurred_at: now,
                    tenant: ask.tenant.to_string(),
                    subject: of_member(Scope::SUBJECT),
                    project: of_member(Scope::PROJECT),
                    api_key: of_member(Scope::API_KEY),
                    metric: ask.metric.to_string(),
                    source: crate::SOURCE.to_string(),
                },
                alert_id: id,
                kind: AlertKind::THRESHOLD,
                policy_id: Some(e.policy.policy_id.clone()),
                policy_version: Some(e.policy.version),
                scope: Some(scope),
                window_start: Some(e.window_start),
                window_end: Some(e.window_end),
                threshold_percent: threshold,
                limit: Some(e.limit),
                observed: i64::try_from(after).unwrap_or(i64::MAX),
                request_id: Some(request_id.to_string()),
            });
        }
    }
    found
}

/// Whether a policy's windows are alerted: a quota of consumption over a calendar window or a billing cycle.
fn alerts_for(e: &Evaluated) -> bool {
    !e.is_throttle()
        && !e.policy.is_gauge()
        && !matches!(e.policy.window, Window::CONCURRENT | Window::ROLLING)
        && e.window_end > e.window_start
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves the levels round up (80% of 7 is 5.6: the sixth unit reaches it) and a limit of 0 alerts at the first.
    #[test]
    fn a_threshold_is_the_least_consumption_at_or_above_it() {
        assert_eq!([80, 90, 100].map(|t| level(7, t)), [6, 7, 7]);
        assert_eq!([80, 90, 100].map(|t| level(1_000, t)), [800, 900, 1_000]);
        assert_eq!(level(0, 80), 1);
    }

    // Proves an alert's id names its window, policy, member and threshold, and nothing else.
    #[test]
    fn an_alert_id_is_the_same_for_the_same_window_and_threshold() {
        let at = |s: &str| Timestamp::parse_rfc3339(s).unwrap();
        let window = (at("2026-11-01T00:00:00Z"), at("2026-12-01T00:00:00Z"));
        let id = |member, threshold| alert_id("org-1", "p", (Scope::SUBJECT, member), window, threshold);
        assert_eq!(id(Some("alice"), 80), id(Some("alice"), 80));
        assert_ne!(id(Some("alice"), 80), id(Some("bob"), 80));
        assert_ne!(id(Some("alice"), 80), id(Some("alice"), 90));
        assert!(id(None, 100).starts_with(ALERT_PREFIX) && id(None, 100).len() == ALERT_PREFIX.len() + 32);
    }
}
