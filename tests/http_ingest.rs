//! Usage sent over HTTP (`POST /v1/events`, CloudEvents) by a real HTTP client to the real `serve --brokers`: each
//! accepted batch is on the usage topic, in its tenants' partitions, when it is answered; a batch with an invalid event
//! or another tenant's is refused whole, naming each such event by index; ingest then records the usage, and the
//! billing export counts each accepted event once, duplicates and refused batches included.

#[path = "support/hook_http.rs"]
mod hook_http;
mod support;

use std::collections::BTreeMap;

use hook_http::Server;
use schemas::*;
use serde_json::{Value, json};
use support::brokers::{Broker, messages_on, records_on};
use support::*;

const CHECKOUT_SECRET: &str = "checkout-secret-0123456789";
/// A token of org-a and org-b only.
const CHECKOUT: &str =
    "[[token]]\nname = \"checkout\"\nsecret = \"checkout-secret-0123456789\"\ntenants = [\"org-a\", \"org-b\"]\n";

const BATCH: &str = "application/cloudevents-batch+json";
const SINGLE: &str = "application/cloudevents+json";

/// A usage CloudEvent of `quantity` `metric` of `tenant`, in November 2026.
fn event(id: &str, tenant: &str, metric: &str, quantity: i64) -> Value {
    json!({
        "specversion": "1.0", "id": id, "source": "checkout", "type": "quota.v1.UsageEvent", "subject": "user-1",
        "time": "2026-11-10T12:00:00Z", "datacontenttype": "application/json",
        "data": {"tenant": tenant, "metric": metric, "quantity": quantity, "request_id": format!("req-{id}")}
    })
}

/// `POST /v1/events` of `body` as `content_type` with `secret` (none: no Authorization): the status and the JSON.
fn post(base: &str, secret: Option<&str>, content_type: &str, body: &Value) -> (u16, Value) {
    let config = ureq::Agent::config_builder().http_status_as_error(false).build();
    let agent = ureq::Agent::new_with_config(config);
    let mut request = agent.post(format!("{base}/v1/events")).header("Content-Type", content_type);
    if let Some(secret) = secret {
        request = request.header("Authorization", format!("Bearer {secret}"));
    }
    let mut response = request.send(body.to_string()).expect("an answer");
    let status = response.status().as_u16();
    (status, response.body_mut().read_json().unwrap_or(Value::Null))
}

/// Keeps `events`, answered 204, in `accepted` by event id (a resent id is the same event): the number of messages.
fn accept(events: &[Value], accepted: &mut BTreeMap<String, (String, String, i64)>) -> i64 {
    for e in events {
        let data = &e["data"];
        let (tenant, metric) = (data["tenant"].as_str().unwrap(), data["metric"].as_str().unwrap());
        let kept = (tenant.to_string(), metric.to_string(), data["quantity"].as_i64().unwrap());
        accepted.insert(e["id"].as_str().unwrap().to_string(), kept);
    }
    events.len() as i64
}

/// The (index, error) of each event a refusal names.
fn refused(answer: &Value) -> Vec<(u64, String)> {
    let errors = answer["errors"].as_array().unwrap_or_else(|| panic!("no errors listed: {answer}"));
    errors.iter().map(|e| (e["index"].as_u64().expect("an index"), e["error"].as_str().unwrap().to_string())).collect()
}

// Valid, duplicate, invalid and another tenant's batches through a real client; the billing export then counts each
// valid event once, against the sums this test keeps of what it was answered 204 for.
#[test]
fn usage_posted_as_cloud_events_is_billed_once_each() {
    let broker = Broker::mock();
    let served = TestLedger::new();
    // serve refuses a ledger that is not there: one policy makes it.
    let policy = Event::Policy(PolicyEvent::new(
        header("policy-requests-v1", "2026-01-01T00:00:00Z", "*", "requests"),
        "plan-requests",
        1_000,
        Window::MONTH,
        Enforcement::SOFT,
        at("2026-01-01T00:00:00Z"),
    ));
    write_container(&served.file("policy.avro"), &[policy]);
    served.ingest(&served.file("policy.avro"));
    let args = ["--brokers", &broker.bootstrap];
    let server =
        Server::start_with_args(&served.path, served.dir.path(), &[], &served.file("serve.err"), CHECKOUT, &args);
    let base = server.base.clone();

    // What the test was answered 204 for, by event id (a resent id is the same event), and every message sent.
    let mut accepted: BTreeMap<String, (String, String, i64)> = BTreeMap::new();
    let mut messages = 0;

    // A valid batch of two tenants and two metrics.
    let first: Vec<Value> = (0..6)
        .map(|n| {
            let (tenant, metric) = [("org-a", "requests"), ("org-b", "tokens"), ("org-b", "requests")][n % 3];
            event(&format!("e-{n}"), tenant, metric, 10 + n as i64)
        })
        .collect();
    assert_eq!(post(&base, Some(CHECKOUT_SECRET), BATCH, &json!(first)), (204, Value::Null));
    messages += accept(&first, &mut accepted);
    // Acknowledged before answered: every message is on the topic now, each in its tenant's partition.
    assert_eq!(records_on(&broker.bootstrap, "quota.usage"), messages, "on the topic when answered");
    // One event, as structured mode, and one as plain JSON.
    let single = event("e-single", "org-a", "requests", 7);
    assert_eq!(post(&base, Some(CHECKOUT_SECRET), SINGLE, &single).0, 204);
    let plain = event("e-plain", "org-b", "tokens", 5);
    assert_eq!(post(&base, Some(CHECKOUT_SECRET), "application/json", &plain).0, 204);
    messages += accept(&[single, plain], &mut accepted);
    // A batch resending two events (a retry) with a new one: sent, and counted once at ingest.
    let resent = vec![first[0].clone(), first[1].clone(), event("e-new", "org-a", "requests", 3)];
    assert_eq!(post(&base, Some(CHECKOUT_SECRET), BATCH, &json!(resent)).0, 204);
    messages += accept(&resent, &mut accepted);

    // A batch with invalid events: refused whole, each invalid one named by its index and reason.
    let mut wrong_type = event("e-bad-type", "org-a", "requests", 1);
    wrong_type["type"] = json!("api-calls");
    let invalid = json!([
        event("e-valid-in-invalid", "org-a", "requests", 100),
        event("e-neg", "org-a", "requests", -1),
        wrong_type
    ]);
    let (status, answer) = post(&base, Some(CHECKOUT_SECRET), BATCH, &invalid);
    assert_eq!(status, 400, "{answer}");
    assert_eq!(refused(&answer), [(1, "negative_quantity".into()), (2, "bad_event".into())], "{answer}");
    assert_eq!(answer["error"], "invalid_events", "{answer}");
    // Another tenant's event in a batch: 403, naming it; its valid neighbour not sent either.
    let foreign =
        json!([event("e-valid-in-foreign", "org-a", "requests", 1000), event("e-org-c", "org-c", "requests", 1)]);
    let (status, answer) = post(&base, Some(CHECKOUT_SECRET), BATCH, &foreign);
    assert_eq!((status, refused(&answer)), (403, vec![(1, "forbidden".into())]), "{answer}");
    // No token, and a media type that is not JSON: refused before anything is read.
    assert_eq!(post(&base, None, BATCH, &json!([event("e-x", "org-a", "requests", 1)])).0, 401);
    assert_eq!(post(&base, Some(CHECKOUT_SECRET), "text/plain", &json!([])).0, 415);

    let on_topic = messages_on(&broker.bootstrap, "quota.usage");
    assert_eq!(on_topic.len() as i64, messages, "only the accepted batches were sent");
    for (partition, key, _) in &on_topic {
        let tenant = String::from_utf8(key.clone().expect("keyed by tenant")).unwrap();
        assert_eq!(*partition, partition::partition_of(&tenant, 3), "{tenant} in its partition");
    }

    // Ingest, as of any producer's usage; then the bill.
    let ingested = TestLedger::new();
    ingested.run(&["ingest", "--brokers", &broker.bootstrap, "--until-caught-up", "--json"]).success();
    let counts = Counts::of_status(&ingested.status());
    assert_eq!(counts.duplicates, 2, "the two resent events are duplicates");
    let export = ingested.run(&["export", "billing", "--period", "2026-11", "--format", "jsonl"]).success();
    let billed: BTreeMap<(String, String), i64> = export
        .stdout_text()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .map(|row| {
            let key = (row["tenant"].as_str().unwrap().to_string(), row["metric"].as_str().unwrap().to_string());
            (key, row["consumption"].as_i64().expect("a consumption"))
        })
        .collect();
    let mut expected: BTreeMap<(String, String), i64> = BTreeMap::new();
    for (tenant, metric, quantity) in accepted.values() {
        *expected.entry((tenant.clone(), metric.clone())).or_default() += quantity;
    }
    assert_eq!(billed, expected, "each accepted event billed once; no refused batch billed");
    assert_eq!(expected[&("org-a".to_string(), "requests".to_string())], 10 + 13 + 7 + 3, "the test's own sum");
    ingested.assert_verifies();
}

// Without --brokers the route says why it cannot take usage (503), and nothing else changes.
#[test]
fn without_brokers_usage_over_http_answers_503_saying_why() {
    let served = TestLedger::new();
    write_container(
        &served.file("usage.avro"),
        &[Event::Usage(UsageEvent {
            header: header("u-0", "2026-11-01T00:00:00Z", "org-a", "requests"),
            quantity: 1,
            request_id: None,
            attributes: Default::default(),
        })],
    );
    served.ingest(&served.file("usage.avro"));
    let server = Server::start_with_tokens(&served.path, served.dir.path(), &[], &served.file("serve.err"), CHECKOUT);
    let (status, answer) =
        post(&server.base, Some(CHECKOUT_SECRET), BATCH, &json!([event("e-1", "org-a", "requests", 1)]));
    assert_eq!((status, answer["error"].as_str()), (503, Some("no_brokers")), "{answer}");
    assert!(answer["message"].as_str().unwrap().contains("--brokers"), "{answer}");
}
