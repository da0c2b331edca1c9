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

use rules::alert::{alert_id, level};
use schemas::{AlertEvent, AlertKind, Header, Scope, Timestamp};

use crate::decide::{Ask, Evaluated};

/// The thresholds, in percent of a window's effective limit, an alert is written at.
pub const THRESHOLDS_PERCENT: [i32; 3] = [80, 90, 100];

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
            let id =
                alert_id(AlertKind::THRESHOLD, ask.tenant, &e.policy.policy_id, (scope, member), window, threshold);
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
    rules::alert::alerts_windows(&e.policy) && e.window_end > e.window_start
}
