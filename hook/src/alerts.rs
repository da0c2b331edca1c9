//! Alerts before anyone hits a wall: as a request the hook allows brings a window's consumption and
//! holds to a threshold of its effective limit, an AlertEvent, once per window, policy, member and threshold. The
//! thresholds are the policy's own (`alert_thresholds`, PolicyEvent v12: none at all when it sets an empty list), or
//! 80, 90 and 100 percent ([`schemas::DEFAULT_ALERT_THRESHOLDS`]) when it sets none.
//!
//! Once: an alert's id is derived from what it is about ([`alert_id`]), and the state remembers the alerts of its
//! windows, its own and those folded from the ledger ([`crate::state::State::is_alerted`]), so a restart, which folds
//! them back, writes none twice. A threshold that usage recorded by another writer (ingest) reached first is alerted
//! by the next request the hook allows in that window: the rule is "at or above the threshold and not alerted yet",
//! not "crossed by this request".
//!
//! Quotas of calendar windows and billing cycles only: a throttle limits a rate, a CONCURRENT policy leases held at
//! once, a gauge a level, and a ROLLING window has no window to alert once in.

use rules::alert::{alert_id, header, level};
use schemas::{AlertEvent, AlertKind, Timestamp};

use crate::decide::{Ask, Evaluated};

/// The THRESHOLD alerts a request of `ask` at `now` reaches if allowed: of each quota `evaluated` for it, each of its
/// policy's thresholds its window's consumption and holds (the request included) are at or above, and that `alerted`
/// does not know yet. The thresholds are in increasing order (validation refuses any other), so the first one above
/// the consumption ends the policy's.
pub fn reached(
    evaluated: &[Evaluated],
    ask: &Ask<'_>,
    now: Timestamp,
    request_id: &str,
    alerted: impl Fn(&str) -> bool,
) -> Vec<AlertEvent> {
    let mut found = Vec::new();
    for e in evaluated.iter().filter(|e| alerts_for(e)) {
        let after = i128::from(e.used_before) + i128::from(e.cost);
        let scope = e.policy.scope;
        let member = ask.member(scope);
        let window = (e.window_start, e.window_end);
        for &threshold in e.policy.alert_thresholds() {
            if after < level(e.limit, threshold) {
                break;
            }
            let id =
                alert_id(AlertKind::THRESHOLD, ask.tenant(), &e.policy.policy_id, (scope, member), window, threshold);
            if alerted(&id) {
                continue;
            }
            found.push(AlertEvent {
                header: header(&id, now, (ask.tenant(), ask.metric), (scope, member), crate::api::SOURCE),
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
    rules::alert::alerts_windows(&e.policy) && e.window_end > e.window_start
}

#[cfg(test)]
mod tests {
    use super::*;

    fn evaluated(policy_id: &str, thresholds: Option<Vec<i32>>, used_before: i64) -> Evaluated {
        let at = |s: &str| Timestamp::parse_rfc3339(s).unwrap();
        let policy = schemas::PolicyEvent {
            alert_thresholds: thresholds,
            ..schemas::PolicyEvent::new(
                schemas::Header {
                    event_id: format!("{policy_id}-v1"),
                    occurred_at: at("2026-11-01T00:00:00Z"),
                    tenant: "org-1".into(),
                    subject: None,
                    project: None,
                    api_key: None,
                    metric: "tokens".into(),
                    source: "test".into(),
                },
                policy_id,
                100,
                schemas::Window::MONTH,
                schemas::Enforcement::HARD,
                at("2026-11-01T00:00:00Z"),
            )
        };
        Evaluated {
            policy,
            window_start: at("2026-11-01T00:00:00Z"),
            window_end: at("2026-12-01T00:00:00Z"),
            limit: 100,
            used_before,
            cost: 10, // The ask of 10 tokens below, a summed metric.
            fits: true,
            retry_after_ms: None,
            overage: None,
        }
    }

    // Proves a policy's own thresholds replace the default ones: one of [50] alerts at 50% only, one of [] never,
    // and one that sets none at 80, 90 and 100%.
    #[test]
    fn a_policy_alerts_at_its_own_thresholds() {
        let now = Timestamp::parse_rfc3339("2026-11-10T00:00:00Z").unwrap();
        let who = schemas::Who::tenant("org-1");
        let ask = Ask::new(&who, "tokens", 10);
        let thresholds = |e: Evaluated| -> Vec<i32> {
            reached(&[e], &ask, now, "r-1", |_| false).iter().map(|a| a.threshold_percent).collect()
        };
        assert_eq!(thresholds(evaluated("own", Some(vec![50]), 50)), [50]);
        assert_eq!(thresholds(evaluated("own", Some(vec![50]), 95)), [50]);
        assert_eq!(thresholds(evaluated("silent", Some(vec![]), 95)), Vec::<i32>::new());
        assert_eq!(thresholds(evaluated("default", None, 50)), Vec::<i32>::new());
        assert_eq!(thresholds(evaluated("default", None, 95)), [80, 90, 100]);
    }
}
