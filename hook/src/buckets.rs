//! Throttles (HBase's throttle quotas): a policy with a `burst` is a token bucket of
//! that capacity refilling `limit` tokens per window, continuously. Buckets live in the serving process, one per
//! policy, tenant (and subject, for SUBJECT scope) per server, as HBase keeps one per quota per region server:
//! they are not in the ledger and start full when the process starts.
//!
//! A HARD quota with a throttled overage (PolicyEvent v7 `overage_rate` per `overage_window`) has
//! a bucket of its own for what goes beyond its limit: `overage_rate` tokens refilling per `overage_window`. That
//! bucket does not start full when the process starts but fills from that instant, so a restart never lets more
//! through than an uninterrupted process would have: reconcile then holds the window to its limit, plus one bucket,
//! plus the rate from the first consumption beyond the limit to the window's end.

use hashlink::LruCache;
use rules::window;
use schemas::{PolicyEvent, Timestamp, Window};

/// Buckets ever created are kept at most this many; the least recently taken from is dropped (it refills to full,
/// which only lets a burst through early). A million buckets of about 100 bytes each: 100 MB at most, where every
/// tenant's subjects of a throttled metric each have one.
pub const BUCKETS_MAX: usize = 1_000_000;
/// The longest wait a bucket names: the longest window, a month of 31 days.
pub const RETRY_AFTER_MAX_MS: i64 = 31 * 24 * 3_600 * 1_000;

#[derive(Debug, Clone, Copy, PartialEq)]
struct Bucket {
    tokens: f64,
    at: Timestamp,
}

/// (policy_id, window kind, tenant, subject, whether the bucket is a quota's overage): a policy_id whose versions
/// change the window kind mid-window has a window of each kind in force for a while (see `rules::policy`), each a
/// bucket of its own.
type BucketKey = (String, Window, String, Option<String>, bool);

/// What a bucket holds and refills.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Meter {
    /// Tokens refilled per `window`.
    refill: i64,
    /// The period `refill` is counted per.
    window: Window,
    /// The most it holds.
    capacity: i64,
    /// A quota's overage bucket: filling from the process's start rather than full.
    overage: bool,
}

/// Which bucket of a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BucketOf {
    /// A throttle's (a policy with `burst`): `burst`, refilling `limit` per `window`.
    Throttle,
    /// A HARD quota's throttled overage: `overage_rate`, refilling as much per `overage_window`.
    Overage,
}

impl Meter {
    fn of(of: BucketOf, policy: &PolicyEvent) -> Meter {
        match of {
            BucketOf::Throttle => Meter {
                refill: policy.limit,
                window: policy.window,
                capacity: policy.burst.unwrap_or(0),
                overage: false,
            },
            BucketOf::Overage => {
                let (rate, window) = policy.overage_throttle().unwrap_or((0, Window::MONTH));
                Meter { refill: rate, window, capacity: rate, overage: true }
            }
        }
    }
}

/// A bucket as it was before a take: what puts it back when the take's group is not recorded.
#[derive(Debug)]
pub struct Taken {
    key: BucketKey,
    before: Option<Bucket>,
}

/// Every bucket of the process, in the order they were last taken from: when full, a new bucket drops the least
/// recently taken one, in constant time (a scan of a million buckets for the oldest, on every take once full, made
/// each request of a full process pay for all of them). A look changes no order: reading a bucket (a check that
/// is denied, `GET /v1/quotas`) consumes nothing from it.
#[derive(Debug)]
pub struct Buckets {
    buckets: LruCache<BucketKey, Bucket>,
    /// When the process (or the shard) started: overage buckets fill from then.
    started: Timestamp,
}

/// Tokens per microsecond: `limit` per window length. The length of the UTC window, whatever the policy's time zone:
/// a throttle refills continuously, with no window edge a zone could move, and a zone would only change its rate on
/// the days a clock changes (a 23-hour day refilling a twenty-third faster), which no caller would expect of a rate.
fn rate(meter: &Meter, now: Timestamp) -> f64 {
    let (start, end) = window::bounds(meter.window, now);
    meter.refill as f64 / (end.micros() - start.micros()) as f64
}

fn key(policy: &PolicyEvent, meter: &Meter, tenant: &str, subject: Option<&str>) -> BucketKey {
    (policy.policy_id.clone(), policy.window, tenant.to_string(), subject.map(String::from), meter.overage)
}

impl Buckets {
    /// No bucket yet, the process (or shard) starting at `started`.
    pub fn new(started: Timestamp) -> Buckets {
        Buckets::keeping(started, BUCKETS_MAX)
    }

    /// No bucket yet, keeping `buckets_max` at most.
    fn keeping(started: Timestamp, buckets_max: usize) -> Buckets {
        Buckets { buckets: LruCache::new(buckets_max), started }
    }

    fn refilled(
        &self,
        policy: &PolicyEvent,
        meter: &Meter,
        tenant: &str,
        subject: Option<&str>,
        now: Timestamp,
    ) -> f64 {
        let capacity = meter.capacity as f64;
        let (tokens, since) = match self.buckets.peek(&key(policy, meter, tenant, subject)) {
            None if !meter.overage => return capacity,
            None => (0.0, self.started),
            Some(b) => (b.tokens, b.at),
        };
        (tokens + (now.micros() - since.micros()).max(0) as f64 * rate(meter, now)).min(capacity)
    }

    /// Whole tokens in `policy`'s bucket of kind `of` now, and when `amount` does not fit, the milliseconds until it
    /// would.
    pub fn look(
        &self,
        of: BucketOf,
        policy: &PolicyEvent,
        tenant: &str,
        subject: Option<&str>,
        amount: i64,
        now: Timestamp,
    ) -> (i64, Option<i64>) {
        let meter = Meter::of(of, policy);
        let tokens = self.refilled(policy, &meter, tenant, subject, now);
        if tokens >= amount as f64 {
            return (tokens.floor() as i64, None);
        }
        let rate = rate(&meter, now);
        let capacity = meter.capacity;
        // A request larger than the bucket never fits: say when the bucket is full, the most that can help.
        let missing = (amount.min(capacity.max(0)) as f64 - tokens).max(0.0);
        // A bucket that refills slower than a month (or never: limit 0) says a month, the longest window.
        let wait_ms = if rate > 0.0 { (missing / rate / 1_000.0).ceil() as i64 } else { RETRY_AFTER_MAX_MS };
        (tokens.floor() as i64, Some(wait_ms.clamp(1, RETRY_AFTER_MAX_MS)))
    }

    /// Takes `amount` tokens from `policy`'s bucket of kind `of` (the request was allowed), answering the bucket as
    /// it was.
    pub fn take(
        &mut self,
        of: BucketOf,
        policy: &PolicyEvent,
        tenant: &str,
        subject: Option<&str>,
        amount: i64,
        now: Timestamp,
    ) -> Taken {
        let meter = Meter::of(of, policy);
        let tokens = self.refilled(policy, &meter, tenant, subject, now) - amount as f64;
        let key = key(policy, &meter, tenant, subject);
        // A kept key is replaced and becomes the most recent, evicting nothing; a new one past the bound drops the
        // least recently taken.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn throttle(id: &str) -> PolicyEvent {
        let json = format!(
            r#"{{"event_id":"p-{id}","occurred_at":"2026-01-01T00:00:00Z","tenant":"org-1","metric":"tokens",
                "source":"test","policy_id":"{id}","version":1,"scope":"TENANT","limit":60,"window":"MINUTE",
                "enforcement":"HARD","effective_from":"2026-01-01T00:00:00Z","burst":10}}"#
        );
        match schemas::Event::from_json(schemas::EventType::PolicyEvent, &json).unwrap() {
            schemas::Event::Policy(policy) => policy,
            other => panic!("{other:?}"),
        }
    }

    fn at(second: i64) -> Timestamp {
        Timestamp(Timestamp::parse_rfc3339("2026-11-01T00:00:00Z").unwrap().micros() + second * 1_000_000)
    }

    fn held(buckets: &Buckets, policies: &[&PolicyEvent]) -> Vec<String> {
        let meter = |p: &PolicyEvent| Meter::of(BucketOf::Throttle, p);
        let kept = |p: &&&PolicyEvent| buckets.buckets.contains_key(&key(p, &meter(p), "org-1", None));
        policies.iter().filter(kept).map(|p| p.policy_id.clone()).collect()
    }

    // Proves the buckets hold their bound, that taking from a bucket already kept evicts nothing (and a failed group
    // puts it back as it was), and that the least recently taken bucket is the one dropped for a new one.
    #[test]
    fn buckets_keep_their_bound_and_drop_the_least_recently_used() {
        let (a, b, c) = (throttle("a"), throttle("b"), throttle("c"));
        let mut buckets = Buckets::keeping(at(0), 2);
        buckets.take(BucketOf::Throttle, &b, "org-1", None, 1, at(1));
        buckets.take(BucketOf::Throttle, &a, "org-1", None, 1, at(2));
        // At the bound, a take from a kept bucket (b is the older) makes no room: nothing goes.
        let again = buckets.take(BucketOf::Throttle, &a, "org-1", None, 5, at(3));
        assert_eq!(held(&buckets, &[&a, &b, &c]), ["a", "b"], "a kept key evicts nothing");
        buckets.put_back(vec![again]);
        let tokens = buckets.look(BucketOf::Throttle, &a, "org-1", None, 1, at(2)).0;
        assert_eq!(tokens, 9, "a failed take puts the bucket back as it was, its one token taken");
        // b is taken from now, then a new bucket needs room: a, the least recently taken, goes.
        buckets.take(BucketOf::Throttle, &b, "org-1", None, 1, at(4));
        buckets.take(BucketOf::Throttle, &c, "org-1", None, 1, at(5));
        assert_eq!(held(&buckets, &[&a, &b, &c]), ["b", "c"]);
        assert_eq!(buckets.buckets.len(), 2, "the bound holds");
    }
}
