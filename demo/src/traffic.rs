//! The demo's traffic: each tenant's own monthly plan sized around its generated usage, the month produced to Kafka
//! no faster than ingest takes it, and the late events that arrive after the close.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kafka::producer::KafkaProducer;
use ledger::Period;
use schemas::*;

use super::HOUR_MICROS;
use generate::{GenerateReport, GenerateSettings, Generated, Generator, send_generated};

/// A tenant's own monthly limit is its generated consumption times one of these, in turn: a factor below 1 is a
/// tenant that uses more than its plan (HARD: overshoot and denials; SOFT: billed overage).
const LIMIT_FACTORS: [f64; 5] = [0.8, 1.3, 0.9, 1.6, 1.15];
/// Metrics given a tenant policy by the demo, and how it is enforced.
const PLAN_METRICS: [(&str, Enforcement); 2] = [("requests", Enforcement::HARD), ("tokens", Enforcement::SOFT)];

/// Most messages produced and not yet ingested: a quarter of what the mock cluster keeps of one partition, were
/// they all on one (one tenant's traffic is), at about 100 bytes a message.
const IN_FLIGHT_MAX: u64 = 12_000;

/// Produces the policies, then the generated month, waiting whenever `IN_FLIGHT_MAX` messages wait for the
/// ingest; answers the messages acknowledged and what was generated.
pub(super) fn produce(
    brokers: &str,
    policies: &[Event],
    settings: GenerateSettings,
    consumed: &AtomicU64,
) -> anyhow::Result<(u64, GenerateReport)> {
    let catalog = Catalog::builtin();
    let mut producer = KafkaProducer::new(brokers, &[])?;
    for policy in policies {
        send_generated(&mut producer, catalog, Generated::Event(policy.clone()))?;
    }
    let mut generator = Generator::new(settings);
    let mut sent = policies.len() as u64;
    while let Some(generated) = generator.next() {
        while sent.saturating_sub(consumed.load(Ordering::SeqCst)) >= IN_FLIGHT_MAX {
            std::thread::sleep(Duration::from_millis(10));
        }
        let messages = send_generated(&mut producer, catalog, generated)?;
        // A plan default goes to every partition: its copies are exact duplicates to the demo's one ledger.
        generator.count_copies(messages - 1);
        sent += messages;
    }
    Ok((producer.finish()?.delivered, generator.report().clone()))
}

pub(super) fn generated_summary(report: &GenerateReport) -> String {
    format!(
        "{} events, {} exact duplicates, {} conflicting duplicates, {} malformed",
        report.unique_events, report.duplicates, report.conflicts, report.malformed
    )
}

/// Usage per (tenant, metric) the generator will produce: a dry run of the same seed, to size the plans.
pub(super) fn consumption(settings: &GenerateSettings) -> BTreeMap<(String, String), i64> {
    let mut sums = BTreeMap::new();
    for generated in Generator::new(settings.clone()) {
        if let Generated::Event(Event::Usage(u)) = generated {
            *sums.entry((u.header.tenant, u.header.metric)).or_default() += u.quantity;
        }
    }
    sums
}

/// Each tenant's own monthly plan (TENANT scope, MONTH window), sized around its traffic: the generator's plan
/// defaults are far above a demo-sized month, and a demo where nobody reaches a limit shows nothing.
pub(super) fn tenant_policies(month: Period, consumption: &BTreeMap<(String, String), i64>) -> Vec<Event> {
    let mut policies = Vec::new();
    for (i, ((tenant, metric), used)) in consumption.iter().enumerate() {
        let Some((_, enforcement)) = PLAN_METRICS.iter().find(|(m, _)| m == metric) else { continue };
        let limit = round_limit(*used as f64 * LIMIT_FACTORS[i % LIMIT_FACTORS.len()]);
        let id = format!("{tenant}-{metric}-monthly");
        policies.push(demo_policy(month, tenant, metric, &id, (limit, Window::MONTH, *enforcement)));
    }
    policies
}

/// The tenant with a ROLLING limit in the demo, of this metric: "so many requests in any 24 hours".
const ROLLING_TENANT: &str = "org-2";
const ROLLING_METRIC: &str = "requests";

/// org-2's ROLLING limit of requests in any 24 hours, a fifth above its average day: the busiest stretches of its
/// month pass it whatever calendar day they span, and reconcile reports each day's worst 24 hours.
pub(super) fn rolling_policy(month: Period, consumption: &BTreeMap<(String, String), i64>) -> Option<Event> {
    let used = consumption.get(&(ROLLING_TENANT.to_string(), ROLLING_METRIC.to_string()))?;
    let days = (month.end().micros() - month.start().micros()) / (24 * HOUR_MICROS);
    let limit = round_limit(*used as f64 / days as f64 * 1.2);
    let id = format!("{ROLLING_TENANT}-{ROLLING_METRIC}-rolling-24h");
    let Event::Policy(policy) =
        demo_policy(month, ROLLING_TENANT, ROLLING_METRIC, &id, (limit, Window::ROLLING, Enforcement::HARD))
    else {
        unreachable!("a policy")
    };
    let header = Header { event_id: format!("demo-policy-{id}"), ..policy.header.clone() };
    Some(Event::Policy(PolicyEvent { header, window_seconds: Some(86_400), ..policy }))
}

/// The tenant billed by its own cycle in the demo: from the 17th at midnight in Tokyo.
const CYCLE_TENANT: &str = "org-3";
const CYCLE_METRIC: &str = "tokens";
const CYCLE_ZONE: &str = "Asia/Tokyo";

/// org-3's SOFT allowance of tokens per billing cycle, anchored on the month's 17th at local midnight in Tokyo (15:00
/// UTC on the 16th), at a third of its month: the month's bill holds the cycle that ends on the 17th, about half the
/// month, with its overage; the rest of the month is the next cycle's, billed the month after.
pub(super) fn cycle_policy(month: Period, consumption: &BTreeMap<(String, String), i64>) -> Option<Event> {
    let used = consumption.get(&(CYCLE_TENANT.to_string(), CYCLE_METRIC.to_string()))?;
    let limit = round_limit(*used as f64 / 3.0);
    let id = format!("{CYCLE_TENANT}-{CYCLE_METRIC}-cycle");
    let Event::Policy(policy) =
        demo_policy(month, CYCLE_TENANT, CYCLE_METRIC, &id, (limit, Window::BILLING_CYCLE, Enforcement::SOFT))
    else {
        unreachable!("a policy")
    };
    let header = Header { event_id: format!("demo-policy-{id}"), ..policy.header.clone() };
    // The 17th at 00:00 in Tokyo (UTC+9, no daylight saving): 15:00 UTC the day before.
    let anchor = Timestamp(month.start().micros() + (15 * 24 + 15) * HOUR_MICROS);
    Some(Event::Policy(PolicyEvent {
        header,
        cycle_anchor: Some(anchor),
        time_zone: Some(CYCLE_ZONE.into()),
        ..policy
    }))
}

/// The tenant whose workers take leases in the demo, and how many jobs it may run at once.
pub(super) const LEASE_TENANT: &str = "org-1";
pub(super) const LEASE_METRIC: &str = "jobs";
pub(super) const LEASE_SLOTS: i64 = 3;

/// org-1's concurrency limit: at most [`LEASE_SLOTS`] jobs at once (a CONCURRENT policy).
pub(super) fn lease_policy(month: Period) -> Event {
    let id = format!("{LEASE_TENANT}-{LEASE_METRIC}-concurrent");
    demo_policy(month, LEASE_TENANT, LEASE_METRIC, &id, (LEASE_SLOTS, Window::CONCURRENT, Enforcement::HARD))
}

/// Version 1 of a TENANT-scope policy of the demo, effective (and recorded) from the month's start.
fn demo_policy(month: Period, tenant: &str, metric: &str, id: &str, rule: (i64, Window, Enforcement)) -> Event {
    let (limit, window, enforcement) = rule;
    Event::Policy(PolicyEvent::new(
        Header {
            event_id: format!("demo-policy-{tenant}-{metric}"),
            occurred_at: month.start(),
            tenant: tenant.into(),
            subject: None,
            project: None,
            api_key: None,
            metric: metric.into(),
            source: "demo".into(),
        },
        id,
        limit,
        window,
        enforcement,
        month.start(),
    ))
}

/// A limit as a plan would state it: two significant digits, at least 10.
fn round_limit(value: f64) -> i64 {
    let magnitude = 10f64.powi((value.max(10.0).log10().floor() as i32 - 1).max(0));
    ((value / magnitude).round() * magnitude).max(10.0) as i64
}

/// The k-th late usage event: requests of a tenant, in the closed month's last hours.
pub(super) fn late_usage(month: Period, seed: u64, k: i64, tenants: u32) -> UsageEvent {
    let tenant = format!("org-{}", (k - 1) % i64::from(tenants.max(1)) + 1);
    UsageEvent {
        header: Header {
            event_id: format!("demo-late-{seed}-{k}"),
            occurred_at: Timestamp(month.end().micros() - k * HOUR_MICROS),
            tenant,
            subject: None,
            project: None,
            api_key: None,
            metric: "requests".into(),
            source: "demo-late".into(),
        },
        quantity: 10 * k,
        request_id: None,
        attributes: BTreeMap::new(),
    }
}
