//! A cluster on a real broker (Tansu, `sqlite://`), as an operator runs one: a generated month on the topics, then
//! three nodes on their own loopback addresses share six partitions, each keeping warm standby copies of another's
//! shards; clients reach every tenant through the routing client while one node is killed
//! and restarted and another is paused past its session timeout (SIGSTOP), its partitions taken by a fourth node's
//! join, and resumed. Afterwards every decision
//! answered allowed is recorded exactly once in its partition's shard, no tenant got past its HARD limit, the paused
//! node answered nothing for the partitions it lost (the brokers refused its writes), and the catalog names one live
//! owner per partition, and the bills read from the running cluster (`export billing --cluster`) are byte for byte
//! those of a single ledger fed the same topics, the generated month's also contract §5 computed again in the test.
//!
//! Tansu 0.6.0 drops a dead group member only when a join arrives after that member's session expired: as a
//! supervisor would, the test restarts a killed node after the session timeout, and a new node joins after the
//! paused one's session expired; both are that join.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use schemas::partition::partition_of;
use serde_json::json;
use support::brokers::Broker;
use support::nodes::*;
use support::*;

const P: u32 = 6;
const LIMIT: i64 = 25;
const TENANTS: usize = 24;
const CLIENTS: usize = 64;
/// Every node keeps a warm copy of the shards of the node before it: takeovers start from those copies.
const STANDBY: [&str; 2] = ["--standby", "1"];
/// How long a killed node stays down before its supervisor restarts it, and a paused node stays paused before a new
/// node joins: past the nodes' consumer-group session, with half a session more as a margin. Tansu 0.6.0 drops a dead
/// member only when a join arrives after its session expired, and nothing tells a supervisor when that was: a model
/// of the world, not a wait for something to happen.
const PAST_THE_SESSION: Duration = Duration::from_millis(kafka::config::SESSION_TIMEOUT_MS * 3 / 2);
/// Decisions for the paused node's tenants the clients are answered after it resumed: load on their new owners, whose
/// shards the allowed decisions must be in.
const ANSWERED_AFTER_RESUME: usize = 100;

/// Every answer a client got: (tenant, status, decision id when decided).
type Answers = Arc<Mutex<Vec<(String, u16, Option<String>)>>>;

fn plan_default(dir: &std::path::Path, brokers: &str) {
    let policy = dir.join("policy.jsonl");
    let line = format!(
        "{{\"event_id\":\"plan-calls-v1\",\"occurred_at\":\"2026-01-01T00:00:00Z\",\"tenant\":\"*\",\"subject\":null,\
         \"metric\":\"calls\",\"source\":\"ops\",\"policy_id\":\"plan-calls\",\"version\":1,\"scope\":\"TENANT\",\
         \"limit\":{LIMIT},\"window\":\"MONTH\",\"enforcement\":\"HARD\",\"effective_from\":\"2026-01-01T00:00:00Z\",\
         \"burst\":null}}\n"
    );
    std::fs::write(&policy, line).unwrap();
    run(&["produce", "--type", "PolicyEvent", "--file", policy.to_str().unwrap(), "--brokers", brokers], b"").success();
}

/// A check of one call of `tenant` under `key` (the live traffic's metric, which the generated month does not use).
fn call(tenant: &str, key: &str) -> serde_json::Value {
    json!({"tenant": tenant, "metric": "calls", "amount": 1, "idempotency_key": key})
}

/// Decision ids recorded in `shard`'s decision_events.
fn decisions_in(shard: &std::path::Path) -> Vec<String> {
    let rows = run(
        &[
            "--ledger",
            shard.to_str().unwrap(),
            "sql",
            "SELECT event_id, outcome FROM decision_events",
            "--format",
            "json",
        ],
        b"",
    )
    .success()
    .json();
    rows.as_array()
        .unwrap()
        .iter()
        .filter(|r| r["outcome"] == "ALLOWED")
        .map(|r| r["event_id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_cluster_survives_a_kill_and_fences_a_paused_node() {
    let dir = tempfile::tempdir().unwrap();
    let Some(broker) = Broker::tansu_sqlite_partitions(&dir.path().join("tansu.db"), P) else { return };
    plan_default(dir.path(), &broker.bootstrap);
    // A generated month (November 2026: its own tenants org-N, metrics and plan) on the topics before the nodes start.
    let month = ["generate", "--tenants", "12", "--events", "3000", "--seed", "5", "--to-kafka", &broker.bootstrap];
    run(&month, b"").success();
    let tokens = tokens(dir.path());
    let hosts = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];
    let mut nodes: Vec<Node> = hosts
        .iter()
        .enumerate()
        .map(|(n, host)| {
            let data = dir.path().join(format!("n{n}"));
            Node::start_with(&broker.bootstrap, &data, &tokens, host, &format!("n{n}"), &STANDBY)
        })
        .collect();
    let urls: Vec<String> = nodes.iter().map(|n| n.url.clone()).collect();
    let all: Vec<&str> = urls.iter().map(String::as_str).collect();
    routing_of_all(&urls[0], P as usize, &all, 180);

    let tenants: Vec<String> = (0..TENANTS).map(|n| format!("live-{n}")).collect();
    let answers: Answers = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (tenants, answers, stop, seeds) =
                (tenants.clone(), Arc::clone(&answers), Arc::clone(&stop), urls.clone());
            std::thread::spawn(move || {
                let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
                let client = client::Client::new(&seeds, SECRET).unwrap();
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let tenant = &tenants[(c + n) % tenants.len()];
                    let key = format!("c{c}-{n}");
                    n += 1;
                    match client.check(tenant, &call(tenant, &key)) {
                        Ok(answer) => {
                            let id = answer.body["decisionId"].as_str().map(str::to_string);
                            answers.lock().unwrap().push((tenant.clone(), answer.status, id));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(200)),
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        })
        .collect();

    // The clients were answered a while (load, not a time, is what the kill must meet).
    let answered = || answers.lock().unwrap().len();
    eventually(120, "the clients were answered 200 times", || (answered() >= 200).then_some(()));
    // A node dies mid-load and comes back after its session timeout, as a supervisor restarts it.
    nodes[1].kill();
    std::thread::sleep(PAST_THE_SESSION);
    nodes[1].restart();
    routing_of_all(&urls[0], P as usize, &all, 180);

    // Another is paused past its session timeout; a join after that (the first node restarted) takes its partitions.
    let before = routing_of_all(&urls[0], P as usize, &all, 60);
    let paused: BTreeSet<u64> = before.iter().filter(|(_, url)| **url == urls[2]).map(|(p, _)| *p).collect();
    assert!(!paused.is_empty(), "the node to pause owns partitions: {before:?}");
    nodes[2].signal(libc::SIGSTOP);
    std::thread::sleep(PAST_THE_SESSION);
    // A fourth node joins (scaling out, or a supervisor's replacement): the join Tansu needs to drop the paused one.
    nodes.push(Node::start_with(&broker.bootstrap, &dir.path().join("n3"), &tokens, "127.0.0.5", "n3", &STANDBY));
    let urls: Vec<String> = nodes.iter().map(|n| n.url.clone()).collect();
    let live: Vec<&str> = vec![&urls[0], &urls[1], &urls[3]];
    let moved = routing_of_all(&urls[1], P as usize, &live, 180);
    nodes[2].signal(libc::SIGCONT);
    // At once, before it can learn of the rebalance: asked for tenants of the partitions it lost, it answers none.
    let mut zombie = Vec::new();
    for tenant in tenants.iter().filter(|t| paused.contains(&u64::from(partition_of(t, P)))) {
        if let Some((status, body)) = post(&format!("{}/v1/check", urls[2]), &call(tenant, &format!("zombie-{tenant}")))
        {
            zombie.push((tenant.clone(), status, body));
        }
    }
    // The load goes on until the new owners of the paused node's partitions decided for its tenants a while.
    let decided_for_paused = || {
        let answers = answers.lock().unwrap();
        let of_paused = |tenant: &str| paused.contains(&u64::from(partition_of(tenant, P)));
        answers.iter().filter(|(tenant, status, _)| [200, 429].contains(status) && of_paused(tenant)).count()
    };
    let resumed = decided_for_paused();
    let what = format!("the paused node's tenants were answered {ANSWERED_AFTER_RESUME} decisions after it resumed");
    eventually(120, &what, || (decided_for_paused() >= resumed + ANSWERED_AFTER_RESUME).then_some(()));
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.join().unwrap();
    }
    let all: Vec<&str> = urls.iter().map(String::as_str).collect();
    let last = routing_of_all(&urls[1], P as usize, &all, 60);

    let statuses: Vec<u16> = zombie.iter().map(|(_, status, _)| *status).collect();
    eprintln!("the paused node, resumed, answered {statuses:?} for tenants of the partitions it lost");
    assert!(!zombie.is_empty(), "the paused node answered after it resumed; its log:\n{}", nodes[2].log());
    for (tenant, status, body) in &zombie {
        assert!(
            ![200, 429].contains(status),
            "the paused node decided for {tenant} after losing its partition ({status} {body}); moved: {moved:?}"
        );
    }
    // Finance reads the month's bill from the running cluster (each shard's owner asked over HTTP): byte for byte the
    // bill of a single ledger fed the same topics, and per tenant at least what the clients were answered allowed,
    // never past the limit.
    let period = schemas::Timestamp::now().to_string()[..7].to_string();
    let args = ["export", "billing", "--period", &period, "--format", "csv", "--cluster", &broker.bootstrap];
    // The resumed node's join rebalances the group once more: a shard that moves while the command reads is asked of
    // its next owner by the command itself.
    let exported = run(&[&args[..], &["--token", ADMIN_SECRET]].concat(), b"").success();
    eprintln!("export billing --cluster said on stderr: {:?}", exported.stderr);
    let of_cluster = exported.stdout_text();
    // Tansu answers the committed end of a partition as the start of the transaction a fence keeps open, so
    // `--until-caught-up` would stop there: a plain ingest runs until the single ledger's bill is the cluster's.
    let single = dir.path().join("single.db");
    let single = single.to_str().unwrap();
    let _ingest = ChildGuard::new(
        std::process::Command::new(BIN)
            .args(["--ledger", single, "ingest", "--brokers", &broker.bootstrap, "--group", "single-ledger"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let export = ["--ledger", single, "export", "billing", "--period", &period, "--format", "csv"];
    let started = std::time::Instant::now();
    let mut of_single = String::new();
    while of_single != of_cluster && started.elapsed() < Duration::from_secs(180) {
        std::thread::sleep(Duration::from_secs(1));
        of_single = run(&export, b"").success().stdout_text();
    }
    assert_eq!(of_single, of_cluster, "the cluster's bill is the topics', byte for byte");
    // The generated month's bill read from the cluster: the single ledger's, byte for byte, and contract §5 computed
    // again here from that ledger's tables.
    let of_november = |store: &[&str]| {
        let export = ["export", "billing", "--period", "2026-11", "--format", "csv"];
        run(&[store, &export[..]].concat(), b"").success().stdout_text()
    };
    let november = run(&[&args[..3], &["2026-11"], &args[4..], &["--token", ADMIN_SECRET]].concat(), b"").success();
    let november = november.stdout_text();
    assert_eq!(november, of_november(&["--ledger", single]), "the generated month's bill is the topics'");
    let rows: Vec<&str> = november.lines().collect();
    assert_eq!(rows[0], support::billing::HEADER);
    let at_column = rows[0].split(',').position(|c| c == "watermark").expect("a watermark column");
    let watermark: u64 = rows[1].split(',').nth(at_column).unwrap().parse().unwrap();
    let period = ("2026-11", at("2026-11-01T00:00:00Z").micros(), at("2026-12-01T00:00:00Z").micros());
    let expected = support::billing::expected_rows(std::path::Path::new(single), period, watermark);
    assert!(expected.len() >= 12, "the generated tenants' rows: {expected:?}");
    assert_eq!(rows[1..], expected[..], "the generated month's bill is contract §5's");
    let billed: BTreeMap<String, i64> = of_cluster
        .lines()
        .skip(1)
        .map(|row| {
            let cells: Vec<&str> = row.split(',').collect();
            (cells[0].to_string(), cells[3].parse().unwrap())
        })
        .collect();
    // The on-call's reads of the running cluster on a real broker: every chain whole where it is, a dry run of the
    // nightly reconcile on every owner, and a checked copy of every shard that the reads of a directory take.
    let cluster = ["--cluster", &broker.bootstrap, "--token", ADMIN_SECRET];
    let verified = run(&[&["verify"][..], &cluster].concat(), b"").success().stdout_text();
    assert_eq!(verified.matches("ok: shard").count(), P as usize, "{verified}");
    let nightly = ["reconcile", "--as-of", "2026-01-01T00:00:00Z", "--dry-run", "--json"];
    // It finds the generated month's conflicting duplicates (exit 1: adjustments found), and writes nothing.
    let dry = run(&[&nightly[..], &cluster].concat(), b"").expect_code(1).json();
    assert_eq!(dry["shards"].as_array().map(Vec::len), Some(P as usize), "{dry}");
    assert_eq!(dry["adjustments_written"], json!(0), "a dry run writes nothing: {dry}");
    for shard in dry["shards"].as_array().unwrap() {
        let kinds: Vec<&String> = shard["adjustments_by_kind"].as_object().unwrap().keys().collect();
        assert!(kinds.iter().all(|k| *k == "CONFLICTING_DUPLICATE"), "{shard}");
    }
    let copies = dir.path().join("copies");
    let backed = run(&[&["backup", "--to", copies.to_str().unwrap(), "--json"][..], &cluster].concat(), b"");
    assert_eq!(backed.success().json().as_array().map(Vec::len), Some(P as usize));
    let copied = run(&["--data", copies.to_str().unwrap(), "verify"], b"").success().stdout_text();
    assert_eq!(copied.matches("ok: shard").count(), P as usize, "{copied}");
    let standing: Vec<&str> =
        nodes.iter().filter(|n| n.log().contains("ingest: standing by ")).map(|n| n.id.as_str()).collect();
    assert!(standing.len() >= 2, "the nodes keep standby copies on the real broker: {standing:?}");
    for node in &nodes {
        node.signal(libc::SIGTERM);
    }
    // Each shard is read once its node has stopped, not after a guess at how long stopping takes.
    for node in &mut nodes {
        let id = node.id.clone();
        eventually(60, &format!("node {id} stopped on SIGTERM"), || node.child.try_wait().unwrap().map(drop));
    }
    drop(nodes);

    // Each partition's shard at its last owner holds every decision answered allowed, exactly once.
    let answers = answers.lock().unwrap();
    let allowed: Vec<&(String, u16, Option<String>)> = answers.iter().filter(|(_, status, _)| *status == 200).collect();
    let denied = answers.iter().filter(|(_, status, _)| *status == 429).count();
    eprintln!("{} answers: {} allowed, {denied} denied", answers.len(), allowed.len());
    assert!(allowed.len() > 100, "the clients were answered: {} allowed of {}", allowed.len(), answers.len());
    let mut recorded: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for (partition, url) in &last {
        let node = urls.iter().position(|u| u == url).unwrap();
        let shard = dir.path().join(format!("n{node}")).join(format!("shard-{partition:04}.db"));
        recorded.insert(*partition as u32, decisions_in(&shard));
    }
    for ids in recorded.values() {
        assert_eq!(ids.iter().collect::<BTreeSet<_>>().len(), ids.len(), "a decision recorded twice");
    }
    let mut per_tenant: BTreeMap<&str, i64> = BTreeMap::new();
    for (tenant, _, id) in &allowed {
        let id = id.as_ref().expect("an allowed answer names its decision");
        let partition = partition_of(tenant, P);
        assert!(recorded[&partition].contains(id), "allowed decision {id} of {tenant} is in shard {partition}");
        *per_tenant.entry(tenant).or_default() += 1;
    }
    for (tenant, count) in per_tenant {
        assert!(count <= LIMIT, "{tenant} was allowed {count} requests, past its HARD limit of {LIMIT}");
        // A check answered allowed is billed; one whose answer a killed node never sent may be billed too.
        let bill = billed.get(tenant).copied().unwrap_or(0);
        assert!((count..=LIMIT).contains(&bill), "{tenant}: {count} answered allowed, {bill} billed");
    }
}
