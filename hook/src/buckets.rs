//! Throttles (issue "enforcement hook"; HBase's throttle quotas): a policy with a `burst` is a token bucket of
//! that capacity refilling `limit` tokens per window, continuously. Buckets live in the serving process, one per
//! policy, tenant (and subject, for SUBJECT scope) per server, as HBase keeps one per quota per region server:
//! they are not in the ledger and start full when the process starts.

use std::collections::HashMap;

use rules::window;
use schemas::{PolicyEvent, Timestamp, Window};

/// Buckets ever created are kept at most this many; the least recently used is dropped (it refills to full,
/// which only lets a burst through early).
pub const BUCKETS_MAX: usize = 1_000_000;
/// The longest wait a bucket names: the longest window, a month of 31 days.
pub const RETRY_AFTER_MAX_MS: i64 = 31 * 24 * 3_600 * 1_000;

#[derive(Debug, Clone, Copy, PartialEq)]
struct Bucket {
    tokens: f64,
    at: Timestamp,
}

/// (policy_id, window kind, tenant, subject): a policy_id whose versions change the window kind mid-window has a
/// window of each kind in force for a while (see `rules::policy`), each a bucket of its own.
type BucketKey = (String, Window, String, Option<String>);

/// A bucket as it was before a take: what puts it back when the take's group is not recorded.
#[derive(Debug)]
pub struct Taken {
    key: BucketKey,
    before: Option<Bucket>,
}

/// Every bucket of the process.
#[derive(Debug, Default)]
pub struct Buckets {
    buckets: HashMap<BucketKey, Bucket>,
}

/// Tokens per microsecond: `limit` per window length. The length of the UTC window, whatever the policy's time zone:
/// a throttle refills continuously, with no window edge a zone could move, and a zone would only change its rate on
/// the days a clock changes (a 23-hour day refilling a twenty-third faster), which no caller would expect of a rate.
fn rate(policy: &PolicyEvent, now: Timestamp) -> f64 {
    let (start, end) = window::bounds(policy.window, now);
    policy.limit as f64 / (end.micros() - start.micros()) as f64
}

fn key(policy: &PolicyEvent, tenant: &str, subject: Option<&str>) -> BucketKey {
    (policy.policy_id.clone(), policy.window, tenant.to_string(), subject.map(String::from))
}

impl Buckets {
    fn refilled(&self, policy: &PolicyEvent, tenant: &str, subject: Option<&str>, now: Timestamp) -> f64 {
        let capacity = policy.burst.unwrap_or(0) as f64;
        match self.buckets.get(&key(policy, tenant, subject)) {
            None => capacity,
            Some(b) => (b.tokens + (now.micros() - b.at.micros()).max(0) as f64 * rate(policy, now)).min(capacity),
        }
    }

    /// Whole tokens available now, and when `amount` does not fit, the milliseconds until it would.
    pub fn look(
        &self,
        policy: &PolicyEvent,
        tenant: &str,
        subject: Option<&str>,
        amount: i64,
        now: Timestamp,
    ) -> (i64, Option<i64>) {
        let tokens = self.refilled(policy, tenant, subject, now);
        if tokens >= amount as f64 {
            return (tokens.floor() as i64, None);
        }
        let rate = rate(policy, now);
        let capacity = policy.burst.unwrap_or(0);
        // A request larger than the bucket never fits: say when the bucket is full, the most that can help.
        let missing = (amount.min(capacity.max(0)) as f64 - tokens).max(0.0);
        // A bucket that refills slower than a month (or never: limit 0) says a month, the longest window.
        let wait_ms = if rate > 0.0 { (missing / rate / 1_000.0).ceil() as i64 } else { RETRY_AFTER_MAX_MS };
        (tokens.floor() as i64, Some(wait_ms.clamp(1, RETRY_AFTER_MAX_MS)))
    }

    /// Takes `amount` tokens (the request was allowed), answering the bucket as it was.
    pub fn take(
        &mut self,
        policy: &PolicyEvent,
        tenant: &str,
        subject: Option<&str>,
        amount: i64,
        now: Timestamp,
    ) -> Taken {
        let tokens = self.refilled(policy, tenant, subject, now) - amount as f64;
        if self.buckets.len() >= BUCKETS_MAX {
            let oldest = self.buckets.iter().min_by_key(|(_, b)| b.at).map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                self.buckets.remove(&oldest);
            }
        }
        let key = key(policy, tenant, subject);
        let before = self.buckets.insert(key.clone(), Bucket { tokens, at: now });
        Taken { key, before }
    }

    /// Puts buckets back as they were before `taken` (in the order taken), the last take first. A bucket evicted to
    /// make room (at [`BUCKETS_MAX`]) meanwhile, the taken one's included, comes back full, as any evicted bucket.
    pub fn put_back(&mut self, taken: Vec<Taken>) {
        for Taken { key, before } in taken.into_iter().rev() {
            match before {
                Some(bucket) => self.buckets.insert(key, bucket),
                None => self.buckets.remove(&key),
            };
        }
    }
}
