//! What an alert is about, as the hook and reconcile both name it: its id, derived from what it is
//! about so that the same alert found twice, by one writer or by both, is one alert; and the consumption at which a
//! threshold of a limit is reached. The hook writes THRESHOLD alerts as requests reach them; reconcile writes the
//! thresholds of windows no request reached and the kinds judged from the ledger (SUBJECT_SHARE, OPEN_TOO_LONG,
//! DENY_RATE).

use schemas::{AlertKind, Header, PolicyEvent, Scope, Timestamp, Window};
use sha2::{Digest, Sha256};

/// What an alert's id begins with.
pub const ALERT_PREFIX: &str = "alert-";

/// The id (and event_id) of the alert of `kind` at `threshold` about `policy_id`'s window `[start, end)` for `member`
/// of `scope` of `tenant`: `alert-` and 32 hex digits of SHA-256 over them. A THRESHOLD alert's hash names no kind,
/// so that the ids of the alerts recorded before the other kinds existed are the ids found again; every other kind
/// hashes its symbol first.
pub fn alert_id(
    kind: AlertKind,
    tenant: &str,
    policy_id: &str,
    (scope, member): (Scope, Option<&str>),
    (start, end): (Timestamp, Timestamp),
    threshold: i32,
) -> String {
    let mut hasher = Sha256::new();
    if kind != AlertKind::THRESHOLD {
        hasher.update(kind.symbol().as_bytes());
        hasher.update([0]);
    }
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

/// The header of alert `id`, found at `occurred_at` by `source`, about `member` of `scope` of `tenant`'s `metric`: the
/// member in the header's `subject`, `project` or `api_key`, as the scope counts it.
pub fn header(
    id: &str,
    occurred_at: Timestamp,
    (tenant, metric): (&str, &str),
    (scope, member): (Scope, Option<&str>),
    source: &str,
) -> Header {
    let of_member = |s: Scope| member.filter(|_| scope == s).map(String::from);
    Header {
        event_id: id.to_string(),
        occurred_at,
        tenant: tenant.to_string(),
        subject: of_member(Scope::SUBJECT),
        project: of_member(Scope::PROJECT),
        api_key: of_member(Scope::API_KEY),
        metric: metric.to_string(),
        source: source.to_string(),
    }
}

/// Where `threshold` percent of `limit` lies: the least consumption at or above it (at least 1, so that a limit of
/// 0 alerts at the first unit).
pub fn level(limit: i64, threshold: i32) -> i128 {
    let scaled = i128::from(limit.max(0)) * i128::from(threshold);
    ((scaled + 99) / 100).max(1)
}

/// Whether a policy's windows are alerted: a quota of consumption over a calendar window or a billing cycle. A
/// throttle limits a rate, a CONCURRENT policy leases held at once, a gauge a level, and a ROLLING window has no
/// window to alert once in.
pub fn alerts_windows(policy: &PolicyEvent) -> bool {
    !policy.is_throttle() && !policy.is_gauge() && !matches!(policy.window, Window::CONCURRENT | Window::ROLLING)
}

/// A rate in whole percent, `part` of `whole` rounded down (0 of nothing).
pub fn percent(part: u64, whole: u64) -> i64 {
    if whole == 0 { 0 } else { i64::try_from(u128::from(part) * 100 / u128::from(whole)).unwrap_or(i64::MAX) }
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

    // Proves an alert's id names its kind, window, policy, member and threshold, and nothing else; and that a
    // THRESHOLD alert's id is the one recorded before kinds were hashed.
    #[test]
    fn an_alert_id_is_the_same_for_the_same_kind_window_and_threshold() {
        let at = |s: &str| Timestamp::parse_rfc3339(s).unwrap();
        let window = (at("2026-11-01T00:00:00Z"), at("2026-12-01T00:00:00Z"));
        let id = |kind, member, threshold| alert_id(kind, "org-1", "p", (Scope::SUBJECT, member), window, threshold);
        let threshold = |member, t| id(AlertKind::THRESHOLD, member, t);
        assert_eq!(threshold(Some("alice"), 80), threshold(Some("alice"), 80));
        assert_ne!(threshold(Some("alice"), 80), threshold(Some("bob"), 80));
        assert_ne!(threshold(Some("alice"), 80), threshold(Some("alice"), 90));
        assert_ne!(threshold(Some("alice"), 80), id(AlertKind::SUBJECT_SHARE, Some("alice"), 80));
        assert_ne!(id(AlertKind::DENY_RATE, None, 0), id(AlertKind::OPEN_TOO_LONG, None, 0));
        assert!(
            threshold(None, 100).starts_with(ALERT_PREFIX) && threshold(None, 100).len() == ALERT_PREFIX.len() + 32
        );
        let tenant_window = alert_id(AlertKind::THRESHOLD, "org-1", "p", (Scope::TENANT, None), window, 80);
        assert_eq!(tenant_window, STORED_THRESHOLD_ID);
    }

    /// The id AlertEvent v1's hash gives the 80% alert of org-1's policy `p`, TENANT scope, November 2026 (computed apart,
    /// in Python, from the hash's definition).
    const STORED_THRESHOLD_ID: &str = "alert-2530e8bcf6020a84244552e7af6ad5c2";

    #[test]
    fn percent_rounds_down() {
        assert_eq!((percent(1, 3), percent(2, 3), percent(0, 0), percent(5, 5)), (33, 66, 0, 100));
    }
}
