//! `quota-ledger node` as an operator runs it, on the embedded broker: two nodes share the partitions through the
//! consumer group, each answers its tenants and 421 names the owner of the others, the routing catalog names one owner
//! per partition, a client through the routing client reaches every tenant, and after one node is killed the other
//! takes its partitions over, rebuilding their shards from the topics: every decision answered allowed is on the
//! topics and in the rebuilt shards exactly once.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use support::brokers::Broker;
use support::*;

const SECRET: &str = "cluster-tests-secret-0123456789";

/// A node process, killed when dropped.
struct Node {
    child: ChildGuard,
    url: String,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn tokens(dir: &Path) -> PathBuf {
    let path = dir.join("tokens.toml");
    let text = format!("[[token]]\nname = \"all\"\nsecret = \"{SECRET}\"\ntenants = [\"*\"]\n");
    serve::tokens::write_private(&path, &text).unwrap();
    path
}

impl Node {
    fn start(brokers: &str, data: &Path, tokens: &Path, port: u16, id: &str) -> Node {
        let url = format!("http://127.0.0.1:{port}");
        let log = std::fs::File::create(data.with_extension("log")).unwrap();
        let mut child = ChildGuard::new(
            Command::new(BIN)
                .arg("--data")
                .arg(data)
                .args(["node", "--brokers", brokers, "--cluster", "test", "--node-id", id])
                .args(["--listen", &format!("127.0.0.1:{port}"), "--advertise", &url, "--tokens"])
                .arg(tokens)
                .env_remove("QUOTA_LEDGER_PATH")
                .env_remove("QUOTA_LEDGER_BROKERS")
                .stdout(Stdio::piped())
                .stderr(Stdio::from(log))
                .spawn()
                .expect("node starts"),
        );
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).expect("node prints its address");
        assert!(
            line.starts_with("listening on"),
            "node {id}: {line:?}; its log:\n{}",
            std::fs::read_to_string(data.with_extension("log")).unwrap_or_default()
        );
        Node { child, url }
    }

    fn kill(mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::new_with_config(ureq::Agent::config_builder().http_status_as_error(false).build())
}

fn get(url: &str) -> Option<(u16, Value)> {
    let mut response = agent().get(url).header("Authorization", format!("Bearer {SECRET}")).call().ok()?;
    let status = response.status().as_u16();
    Some((status, serde_json::from_str(&response.body_mut().read_to_string().ok()?).ok()?))
}

fn post(url: &str, body: &Value) -> (u16, Value) {
    let mut response =
        agent().post(url).header("Authorization", format!("Bearer {SECRET}")).send_json(body).expect("an answer");
    let status = response.status().as_u16();
    (status, serde_json::from_str(&response.body_mut().read_to_string().unwrap()).unwrap_or(Value::Null))
}

/// The routing table once it names an owner for every partition, each among `urls`.
fn routing_of_all(node: &str, partitions: usize, urls: &[&str]) -> BTreeMap<u64, String> {
    eventually(90, "every partition has a live owner in the routing catalog", || {
        let (_, table) = get(&format!("{node}/v1/routing"))?;
        let owners: BTreeMap<u64, String> = table["owners"]
            .as_array()?
            .iter()
            .map(|o| (o["partition"].as_u64().unwrap(), o["url"].as_str().unwrap().to_string()))
            .collect();
        (owners.len() == partitions && owners.values().all(|u| urls.contains(&u.as_str()))).then_some(owners)
    })
}

fn ask(tenant: &str, key: &str) -> Value {
    json!({"tenant": tenant, "metric": "requests", "amount": 1, "idempotency_key": key})
}

// Proves two nodes share the partitions (one owner each in the catalog), that a node answers 421 naming the owner for
// a tenant it does not serve, that the routing client reaches every tenant, and that after one node dies the other
// serves every partition, its shards rebuilt from the topics: every allowed decision is recorded exactly once.
#[test]
fn two_nodes_share_the_partitions_and_one_takes_over() {
    let broker = Broker::mock();
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let (port_a, port_b) = (free_port(), free_port());
    let a = Node::start(&broker.bootstrap, &dir.path().join("a"), &tokens, port_a, "a");
    let b = Node::start(&broker.bootstrap, &dir.path().join("b"), &tokens, port_b, "b");
    let (url_a, url_b) = (a.url.clone(), b.url.clone());
    let owners = routing_of_all(&url_a, 3, &[&url_a, &url_b]);
    let owned_by: BTreeSet<&String> = owners.values().collect();
    assert_eq!(owned_by.len(), 2, "both nodes own partitions: {owners:?}");

    // A tenant of each partition, asked of the node that does not own it: 421 naming the owner.
    let tenants: Vec<String> = (0..60).map(|n| format!("org-{n}")).collect();
    for tenant in &tenants {
        let partition = u64::from(schemas::partition::partition_of(tenant, 3));
        let owner = &owners[&partition];
        let other = if *owner == url_a { &url_b } else { &url_a };
        let (status, body) = post(&format!("{other}/v1/check"), &ask(tenant, &format!("{tenant}-wrong")));
        assert_eq!(status, 421, "{tenant} asked of {other}: {body}");
        assert_eq!(body["owner"], json!(owner), "{body}");
        assert_eq!(body["partition"], json!(partition));
    }

    let client = client::Client::new(&[&url_a, &url_b], SECRET).unwrap();
    let mut allowed = BTreeSet::new();
    for tenant in &tenants {
        let answer = client.check(tenant, &ask(tenant, &format!("{tenant}-1"))).unwrap();
        assert_eq!(answer.status, 200, "{tenant}: {}", answer.body);
        allowed.insert(answer.body["decisionId"].as_str().unwrap().to_string());
    }

    // Node a dies: after the session timeout node b owns every partition, a's shards rebuilt from the topics.
    a.kill();
    routing_of_all(&url_b, 3, &[&url_b]);
    for tenant in &tenants {
        // The same key answers the decision node a made: b rebuilt it from the topics.
        let answer = client.check(tenant, &ask(tenant, &format!("{tenant}-1"))).unwrap();
        assert_eq!(answer.status, 200, "{tenant}: {}", answer.body);
        assert_eq!(answer.body["replayed"], json!(true), "{tenant}: {}", answer.body);
        let answer = client.check(tenant, &ask(tenant, &format!("{tenant}-2"))).unwrap();
        assert_eq!(answer.status, 200, "{tenant}: {}", answer.body);
        allowed.insert(answer.body["decisionId"].as_str().unwrap().to_string());
    }
    drop(b);

    // Node b's shards hold every allowed decision exactly once.
    let shards = dir.path().join("b");
    let recorded = run(
        &["--data", shards.to_str().unwrap(), "sql", "SELECT event_id FROM decision_events", "--format", "json"],
        b"",
    )
    .success()
    .json();
    let ids: Vec<String> =
        recorded.as_array().unwrap().iter().map(|r| r["event_id"].as_str().unwrap().to_string()).collect();
    let distinct: BTreeSet<&String> = ids.iter().collect();
    assert_eq!(distinct.len(), ids.len(), "no decision recorded twice");
    for id in &allowed {
        assert!(distinct.contains(id), "allowed decision {id} is recorded");
    }
}
