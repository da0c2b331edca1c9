//! Finance closes a month of a running cluster (`export billing --final --cluster`), two nodes on the embedded broker
//! sharing three partitions: a close one shard cannot make is refused naming that shard and its reason, and closes
//! nothing anywhere; a second phase asked of a shard below its prepared watermark is refused; a close stopped part way
//! (one shard closed) is finished by the same command run again, its bill the consumption the test sent, and closing
//! again answers the same bytes; `--by project --cluster`, open and closed, splits each row as the test's sums do.

mod support;

use std::collections::BTreeMap;

use serde_json::{Value, json};
use support::brokers::Broker;
use support::nodes::*;
use support::*;

const P: u32 = 3;
const TENANTS: usize = 12;

/// What the test sends: (tenant, project or none, quantity) of November 2026's `tokens`, and its sums.
struct Sent {
    lines: Vec<(String, Option<String>, i64)>,
}

impl Sent {
    /// Each tenant's usage, two projects and some naming none, quantities that differ by tenant.
    fn november() -> Sent {
        let mut lines = Vec::new();
        for n in 0..TENANTS {
            let tenant = format!("fin-{n}");
            for (k, project) in [Some("alpha"), Some("beta"), None, Some("alpha")].into_iter().enumerate() {
                lines.push((tenant.clone(), project.map(String::from), (n as i64 + 1) * 10 + k as i64));
            }
        }
        Sent { lines }
    }

    /// The events as `produce --type UsageEvent` reads them.
    fn jsonl(&self) -> String {
        let mut out = String::new();
        for (i, (tenant, project, quantity)) in self.lines.iter().enumerate() {
            let event = json!({
                "event_id": format!("u-{i}"), "occurred_at": format!("2026-11-{:02}T10:00:00Z", 1 + i % 28),
                "tenant": tenant, "subject": null, "project": project, "api_key": null, "metric": "tokens",
                "source": "gateway", "quantity": quantity, "request_id": null, "attributes": {}
            });
            out.push_str(&format!("{event}\n"));
        }
        out
    }

    /// Each tenant's consumption.
    fn by_tenant(&self) -> BTreeMap<String, i64> {
        let mut sums = BTreeMap::new();
        for (tenant, _, quantity) in &self.lines {
            *sums.entry(tenant.clone()).or_default() += quantity;
        }
        sums
    }

    /// Each (tenant, project) consumption, `""` for none.
    fn by_project(&self) -> BTreeMap<(String, String), i64> {
        let mut sums = BTreeMap::new();
        for (tenant, project, quantity) in &self.lines {
            *sums.entry((tenant.clone(), project.clone().unwrap_or_default())).or_default() += quantity;
        }
        sums
    }
}

/// A CSV export's rows as maps of column to cell.
fn rows_of(csv: &str) -> Vec<BTreeMap<String, String>> {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
    lines.map(|line| header.iter().map(|h| h.to_string()).zip(line.split(',').map(String::from)).collect()).collect()
}

/// The bill's rows (no `project` cell, or an empty one) as tenant to consumption.
fn consumption_of(csv: &str) -> BTreeMap<String, i64> {
    rows_of(csv)
        .iter()
        .filter(|row| !row.contains_key("project") || is_bill_row(row))
        .map(|row| (row["tenant"].clone(), row["consumption"].parse().unwrap()))
        .collect()
}

/// A row of the bill in a `--by project` export: the one before its projects, with every bill column filled as the
/// bill's (its cycle too); a project's row leaves the bill's columns past the consumption empty.
fn is_bill_row(row: &BTreeMap<String, String>) -> bool {
    !row["late_adjustments"].is_empty()
}

/// A `--by project` export's project rows as (tenant, project) to consumption.
fn split_of(csv: &str) -> BTreeMap<(String, String), i64> {
    let projects = rows_of(csv).into_iter().filter(|row| !is_bill_row(row));
    projects.map(|row| ((row["tenant"].clone(), row["project"].clone()), row["consumption"].parse().unwrap())).collect()
}

/// Whether each shard of the cluster holds `period` closed, by partition, as each owner answers it.
fn closed_by_shard(urls: &[&str], period: &str) -> BTreeMap<u64, bool> {
    let mut closed = BTreeMap::new();
    for url in urls {
        let (status, body) = get_as(&format!("{url}/v1/admin/billing?period={period}"), ADMIN_SECRET).unwrap();
        assert_eq!(status, 200, "{body}");
        for shard in body["shards"].as_array().unwrap() {
            closed.insert(shard["partition"].as_u64().unwrap(), shard["closed"].as_bool().unwrap());
        }
    }
    closed
}

/// `POST url` with the admin token and `body`.
fn post_admin(url: &str, body: &Value) -> (u16, Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let mut response =
        agent.post(url).header("Authorization", format!("Bearer {ADMIN_SECRET}")).send_json(body).unwrap();
    let status = response.status().as_u16();
    (status, serde_json::from_str(&response.body_mut().read_to_string().unwrap()).unwrap_or(Value::Null))
}

// Proves a cluster close is all or none: one shard that cannot close the month (its own month before is not closed)
// refuses the close naming it and why, and no shard anywhere is closed; once it can, every shard closes and the bill
// is the sums of what the test sent; closing again answers the same bytes; `--by project --cluster` splits each
// tenant's consumption by project as the test's sums do.
#[test]
fn a_cluster_close_is_all_or_none_and_names_the_shard_that_refused() {
    let broker = Broker::mock_with_partitions(P);
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let a = Node::start(&broker.bootstrap, &dir.path().join("a"), &tokens, "127.0.0.1", "a");
    let b = Node::start(&broker.bootstrap, &dir.path().join("b"), &tokens, "127.0.0.1", "b");
    let urls = [a.url.as_str(), b.url.as_str()];
    let owners = routing_of_all(urls[0], P as usize, &urls, 90);

    let sent = Sent::november();
    let events = dir.path().join("november.jsonl");
    std::fs::write(&events, sent.jsonl()).unwrap();
    let produce = ["produce", "--type", "UsageEvent", "--file", events.to_str().unwrap(), "--brokers"];
    run(&[&produce[..], &[&broker.bootstrap]].concat(), b"").success();
    let cluster = ["--cluster", &broker.bootstrap, "--token", ADMIN_SECRET];
    let november = ["export", "billing", "--period", "2026-11", "--format", "csv"];
    let read = |more: &[&str]| run(&[&november[..], &cluster, more].concat(), b"");
    // The nodes ingest what was sent: the open month's bill from the cluster is the test's sums once they have.
    eventually(90, "the cluster's open bill of November is what was sent", || {
        (consumption_of(&read(&[]).success().stdout_text()) == sent.by_tenant()).then_some(())
    });

    // By project across the cluster: each owner splits its shards' rows, joined as a directory's are.
    let split = read(&["--by", "project"]).success().stdout_text();
    assert_eq!(split_of(&split), sent.by_project(), "{split}");
    assert_eq!(consumption_of(&split), sent.by_tenant(), "the bill's rows unchanged beside their split: {split}");

    // One shard's September is closed on its own (its owner asked directly, as the first phase then the second):
    // closing November there would skip October, so that shard cannot close November.
    let refusing: u64 = 1;
    let owner = &owners[&refusing];
    let (status, prepared) = get_as(&format!("{owner}/v1/admin/billing/prepare?period=2026-09"), ADMIN_SECRET).unwrap();
    assert_eq!(status, 200, "{prepared}");
    let shard = prepared["shards"].as_array().unwrap().iter().find(|s| s["partition"] == json!(refusing)).unwrap();
    let body = json!({"period": "2026-09", "watermarks": {refusing.to_string(): shard["watermark"]}});
    let (status, closed) = post_admin(&format!("{owner}/v1/admin/billing/close"), &body);
    assert_eq!(status, 200, "{closed}");
    assert_eq!(closed["shards"].as_array().map(Vec::len), Some(1), "only the shard named is closed: {closed}");

    let refused = read(&["--final"]).expect_code(2);
    eprintln!("the refused close said: {}", refused.stderr);
    assert!(
        refused.stderr.contains(&format!("shard {refusing} (owner {owner})"))
            && refused.stderr.contains("cannot be closed before 2026-10")
            && refused.stderr.contains("closed in no shard"),
        "the refusal names the shard and why: {}",
        refused.stderr
    );
    assert_eq!(closed_by_shard(&urls, "2026-11"), (0..P as u64).map(|p| (p, false)).collect(), "none closed");
    let after = read(&[]).success();
    assert!(after.stderr.contains("is open"), "{}", after.stderr);
    assert_eq!(consumption_of(&after.stdout_text()), sent.by_tenant());

    // October closed across the cluster (that shard's next month, the others' first close).
    let october = ["export", "billing", "--period", "2026-10", "--format", "csv", "--final"];
    run(&[&october[..], &cluster].concat(), b"").success();
    // A second phase asked at a watermark the shard is below (not the copy that was prepared) is refused, 409.
    let close_url = format!("{owner}/v1/admin/billing/close");
    let ahead = json!({"period": "2026-11", "watermarks": {refusing.to_string(): 1_000_000_000u64}});
    let (status, answer) = post_admin(&close_url, &ahead);
    assert_eq!((status, &answer["error"]), (409, &json!("not_closed")), "{answer}");
    let message = answer["message"].as_str().unwrap();
    assert!(message.contains(&format!("shard {refusing} (")) && message.contains("below the 1000000000"), "{message}");
    assert!(!closed_by_shard(&urls, "2026-11")[&refusing], "a refused close closes nothing");
    // A close stopped part way, as a node dying mid-close leaves it: November closed in that shard only. A preview is
    // refused until it is closed everywhere, and the same command run again closes the rest.
    let (_, prepared) = get_as(&format!("{owner}/v1/admin/billing/prepare?period=2026-11"), ADMIN_SECRET).unwrap();
    let shard = prepared["shards"].as_array().unwrap().iter().find(|s| s["partition"] == json!(refusing)).unwrap();
    assert_eq!(shard.get("refused"), None, "{prepared}");
    let body = json!({"period": "2026-11", "watermarks": {refusing.to_string(): shard["watermark"]}});
    assert_eq!(post_admin(&close_url, &body).0, 200);
    let partial = read(&[]).expect_code(2);
    assert!(partial.stderr.contains(&format!("closed in shards [{refusing}] of 3")), "{}", partial.stderr);
    // November closes in every shard: its final bill is the test's sums, and closing again answers the same bytes.
    let closed = read(&["--final"]).success();
    eprintln!("the close said: {}", closed.stderr);
    assert!(closed.stderr.contains("closed in every shard"), "{}", closed.stderr);
    assert_eq!(consumption_of(&closed.stdout_text()), sent.by_tenant(), "{}", closed.stdout_text());
    assert_eq!(closed_by_shard(&urls, "2026-11"), (0..P as u64).map(|p| (p, true)).collect(), "all closed");
    assert_eq!(read(&["--final"]).success().stdout_text(), closed.stdout_text(), "a close run again answers the same");
    assert_eq!(read(&[]).success().stdout_text(), closed.stdout_text(), "the final export read back");
    let final_split = read(&["--final", "--by", "project"]).success().stdout_text();
    assert_eq!(split_of(&final_split), sent.by_project(), "the closed month split by project: {final_split}");
}
