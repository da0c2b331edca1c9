//! `quota-ledger node` as an operator runs it, on the embedded broker: two nodes share the partitions through the
//! consumer group, each answers its tenants and 421 names the owner of the others, the routing catalog names one owner
//! per partition, a client through the routing client reaches every tenant, and after one node is killed the other
//! takes its partitions over, rebuilding their shards from the topics: every decision answered allowed is on the
//! topics and in the rebuilt shards exactly once.

mod support;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};
use support::brokers::Broker;
use support::nodes::*;
use support::*;

// Proves two nodes share the partitions (one owner each in the catalog), that a node answers 421 naming the owner for
// a tenant it does not serve, that the routing client reaches every tenant, and that after one node dies the other
// serves every partition, its shards rebuilt from the topics: every allowed decision is recorded exactly once. A plan
// default sent to one partition reaches every node's shards.
#[test]
fn two_nodes_share_the_partitions_and_one_takes_over() {
    let broker = Broker::mock();
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let mut a = Node::start(&broker.bootstrap, &dir.path().join("a"), &tokens, "127.0.0.1", "a");
    let b = Node::start(&broker.bootstrap, &dir.path().join("b"), &tokens, "127.0.0.1", "b");
    let (url_a, url_b) = (a.url.clone(), b.url.clone());
    let owners = routing_of_all(&url_a, 3, &[&url_a, &url_b], 90);
    // Each node follows the catalog on its own: b's view names every owner too before b is asked.
    assert_eq!(routing_of_all(&url_b, 3, &[&url_a, &url_b], 90), owners, "both nodes' views agree");
    let owned_by: BTreeSet<&String> = owners.values().collect();
    assert_eq!(owned_by.len(), 2, "both nodes own partitions: {owners:?}");

    // A tenant of each partition, asked of the node that does not own it: 421 naming the owner.
    let tenants: Vec<String> = (0..60).map(|n| format!("org-{n}")).collect();
    for tenant in &tenants {
        let partition = u64::from(schemas::partition::partition_of(tenant, 3));
        let owner = &owners[&partition];
        let other = if *owner == url_a { &url_b } else { &url_a };
        let (status, body) = post(&format!("{other}/v1/check"), &ask(tenant, &format!("{tenant}-wrong"))).unwrap();
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

    // Finance reads the month's bill from the running cluster: each shard's owner answers its shards, and their union
    // is byte for byte what a single ledger fed the same topics exports (its watermark too: the shards' entries, each
    // plan default counted once).
    let period = schemas::Timestamp::now().to_string()[..7].to_string();
    let of_cluster = cluster_billing(&broker.bootstrap, &period);
    let single = dir.path().join("single.db");
    let single = single.to_str().unwrap();
    run(&["--ledger", single, "ingest", "--brokers", &broker.bootstrap, "--until-caught-up"], b"").success();
    let of_single =
        run(&["--ledger", single, "export", "billing", "--period", &period, "--format", "csv"], b"").success();
    assert_eq!(of_cluster, of_single.stdout_text(), "the cluster's bill is the topics', byte for byte");
    assert_eq!(of_cluster.lines().count(), tenants.len() + 1, "a row per tenant: {of_cluster}");
    let bill = format!("{url_a}/v1/admin/billing?period={period}");
    let (status, body) = get(&bill).expect("node a answers");
    assert_eq!((status, &body["error"]), (403, &json!("forbidden")), "a service's token reads no bill: {body}");
    let (status, body) = get_as(&bill, ADMIN_SECRET).expect("node a answers");
    assert_eq!(status, 200, "{body}");
    assert!(body["shards"].as_array().is_some_and(|s| !s.is_empty()), "node a holds shards: {body}");

    // Support and the on-call read the running cluster as they read a directory of shards, with an admin token. A plan default sent the
    // way Kafka clients send everything, keyed `*` into the one partition Kafka's default partitioner picks, reaches
    // every shard: the node that reads it forwards it to the other partitions.
    send_plan_default_to_one_partition(&broker.bootstrap);
    let cluster = ["--cluster", &broker.bootstrap, "--token", ADMIN_SECRET];
    let status = eventually(60, "every shard of the cluster holds the plan default", || {
        let status = run(&[&["status", "--json"][..], &cluster].concat(), b"").success().json();
        status["shards"].as_array()?.iter().all(|s| s["plan_defaults"] == json!(1)).then_some(status)
    });
    assert_eq!(status["plan_defaults_lacking"], json!([]), "{status}");
    assert_eq!(status["in_transition"], json!([]), "every shard is served: {status}");
    let partitions: Vec<u64> =
        status["shards"].as_array().unwrap().iter().map(|s| s["partition"].as_u64().unwrap()).collect();
    assert_eq!(partitions, [0, 1, 2], "{status}");
    assert_eq!(status["partitions"], json!(3), "{status}");
    for shard in status["shards"].as_array().unwrap() {
        let partition = shard["partition"].as_u64().unwrap();
        assert_eq!(shard["owner"], json!(owners[&partition]), "each shard names its owner: {shard}");
    }
    let decisions: u64 =
        status["shards"].as_array().unwrap().iter().map(|s| s["events_recorded"].as_u64().unwrap()).sum();
    assert!(decisions >= 2 * tenants.len() as u64, "each tenant's decision and usage: {status}");
    let words = run(&[&["status"][..], &cluster].concat(), b"").success().stdout_text();
    assert!(words.contains(&format!("the cluster at {} (2 nodes) (3 partitions)", broker.bootstrap)), "{words}");
    assert!(words.contains("in transition    none: every shard is served"), "{words}");
    let verified = run(&[&["verify"][..], &cluster].concat(), b"").success().stdout_text();
    for partition in 0..3 {
        assert!(verified.contains(&format!("ok: shard {partition} of 3 (")), "every shard's chain holds: {verified}");
    }
    // A copy of every shard of the running cluster, each taken by its owner and checked on arrival: a directory of
    // shards that every read of --data and `restore` take.
    let copies = dir.path().join("copies");
    let copies = copies.to_str().unwrap();
    let backed = run(&[&["backup", "--to", copies, "--json"][..], &cluster].concat(), b"").success().json();
    assert_eq!(backed.as_array().map(Vec::len), Some(3), "a manifest per shard: {backed}");
    let verified = run(&["--data", copies, "verify"], b"").success().stdout_text();
    assert_eq!(verified.matches("ok: shard").count(), 3, "{verified}");
    let query = "SELECT count(DISTINCT event_id) AS n FROM decision_events";
    let counted = run(&["--data", copies, "sql", query, "--format", "json"], b"").success().json();
    assert_eq!(counted[0]["n"], json!(tenants.len()), "every tenant's decision is in the copies: {counted}");
    let of_cluster = run(&[&["sql", query, "--format", "json"][..], &cluster].concat(), b"").success();
    assert_eq!(of_cluster.json(), counted, "sql --cluster queries a copy of the whole set as --data does");
    assert!(of_cluster.stderr.contains("over a copy of the 3 shards of the cluster"), "{}", of_cluster.stderr);
    let restored = dir.path().join("restored");
    run(&["--data", restored.to_str().unwrap(), "restore", "--from", copies], b"").success();
    // A request named by its caller: found in its tenant's shard, whichever node holds it.
    let asked = json!({"tenant": "org-7", "metric": "requests", "amount": 1, "idempotency_key": "org-7-audit",
        "request_id": "req-audit-7"});
    let answer = client.check("org-7", &asked).unwrap();
    assert_eq!(answer.status, 200, "{}", answer.body);
    allowed.insert(answer.body["decisionId"].as_str().unwrap().to_string());
    let why = run(&[&["audit", "why", "req-audit-7"][..], &cluster].concat(), b"").success();
    assert!(why.stdout_text().starts_with("Request req-audit-7 was ALLOWED"), "{}", why.stdout_text());
    let shard = schemas::partition::partition_of("org-7", 3);
    assert!(why.stderr.contains(&format!("recorded in shard {shard} of 3")), "{}", why.stderr);
    let typo = run(&[&["audit", "why", "req-audit-8", "--json"][..], &cluster].concat(), b"").expect_code(1).json();
    assert_eq!(typo["error"], json!("unknown_request_id"), "{typo}");
    assert_eq!(typo["nearest"][0], json!("req-audit-7"), "the nearest of every shard: {typo}");
    let range = ["--from", "2000-01-01T00:00:00Z", "--to", "2100-01-01T00:00:00Z", "--json"];
    let timeline = run(&[&["audit", "tenant", "org-7"][..], &range, &cluster].concat(), b"").success().json();
    assert_eq!(timeline["tenant"], json!("org-7"), "{timeline}");
    assert_eq!(timeline["decisions"].as_array().map(Vec::len), Some(2), "org-7's two checks: {timeline}");
    let typo = run(&[&["audit", "tenant", "org-7x"][..], &range, &cluster].concat(), b"").expect_code(1).json();
    assert_eq!(typo["error"], json!("unknown_tenant"), "{typo}");
    assert!(typo["nearest"].as_array().unwrap().contains(&json!("org-7")), "the nearest of every shard: {typo}");

    // The nightly job over the cluster: each owner reconciles its shards as of the same instant. A reservation left
    // open expires, adjusted in its tenant's shard alone; the rerun as of the same instant finds nothing more.
    let hold =
        json!({"tenant": "org-9", "metric": "requests", "amount": 5, "ttl_ms": 1000, "idempotency_key": "org-9-hold"});
    let reserved = client.post("org-9", "/v1/reservations", &hold).unwrap();
    assert_eq!(reserved.status, 200, "{}", reserved.body);
    allowed.insert(reserved.body["decisionId"].as_str().unwrap().to_string());
    let nightly = ["reconcile", "--as-of", "2099-01-01T00:00:00Z", "--json", "--cluster", &broker.bootstrap];
    let refused = run(&[&nightly[..], &["--token", SECRET]].concat(), b"").expect_code(2);
    assert!(refused.stderr.contains("answered 403: this token is not an admin token"), "{}", refused.stderr);
    let admin = ["--token", ADMIN_SECRET];
    let reconciled = run(&[&nightly[..], &admin].concat(), b"").expect_code(1).json();
    assert_eq!(reconciled["adjustments_written"], json!(1), "{reconciled}");
    let of_org_9 = schemas::partition::partition_of("org-9", 3);
    for shard in reconciled["shards"].as_array().unwrap() {
        let expired = u64::from(shard["partition"] == json!(of_org_9));
        assert_eq!(shard["adjustments_by_kind"]["RESERVATION_EXPIRED"].as_u64().unwrap_or(0), expired, "{shard}");
    }
    let again = run(&[&nightly[..3], &nightly[4..], &admin].concat(), b"").success().stdout_text();
    assert!(again.ends_with("reconciled as of 2099-01-01T00:00:00Z: clean\n"), "{again}");

    // Node a dies: after the session timeout node b owns every partition, a's shards rebuilt from the topics.
    a.kill();
    // The catalog names a until its session times out (10 s): a read of the bill now fails naming a's shards, rather
    // than answer a bill without their tenants.
    let args = ["export", "billing", "--period", &period, "--format", "csv", "--cluster", &broker.bootstrap];
    let refused = run(&[&args[..], &["--token", ADMIN_SECRET]].concat(), b"").expect_code(2);
    let of_a: Vec<u64> = owners.iter().filter(|(_, url)| **url == url_a).map(|(p, _)| *p).collect();
    assert!(
        refused.stderr.contains(&format!("shards {of_a:?}: their owner {url_a} did not answer")),
        "{}",
        refused.stderr
    );
    assert!(refused.stdout.is_empty(), "no partial bill");
    let partial = dir.path().join("partial-copies");
    let args = ["backup", "--to", partial.to_str().unwrap(), "--cluster", &broker.bootstrap, "--token", ADMIN_SECRET];
    let refused = run(&args, b"").expect_code(2);
    assert!(
        refused.stderr.contains(&format!("shard {}: its owner {url_a} did not send its copy", of_a[0])),
        "{}",
        refused.stderr
    );
    routing_of_all(&url_b, 3, &[&url_b], 90);
    for tenant in &tenants {
        // The same key answers the decision node a made: b rebuilt it from the topics.
        let answer = client.check(tenant, &ask(tenant, &format!("{tenant}-1"))).unwrap();
        assert_eq!(answer.status, 200, "{tenant}: {}", answer.body);
        assert_eq!(answer.body["replayed"], json!(true), "{tenant}: {}", answer.body);
        let answer = client.check(tenant, &ask(tenant, &format!("{tenant}-2"))).unwrap();
        assert_eq!(answer.status, 200, "{tenant}: {}", answer.body);
        allowed.insert(answer.body["decisionId"].as_str().unwrap().to_string());
    }
    // Node b's /metrics: its ingest's lag for every partition it now owns (six topics, three partitions), and its
    // decisions answered OK: its own tenants' first checks (and the audit's check and the nightly's reservation when
    // their tenants are its own), then every tenant's replay and second check.
    let scraped = ureq::get(format!("{url_b}/metrics")).call().unwrap().body_mut().read_to_string().unwrap();
    let lag_series = scraped.lines().filter(|l| l.starts_with("quota_ledger_ingest_lag_messages{")).count();
    assert_eq!(lag_series, 18, "{scraped}");
    // Every partition b took over is serving, none in transition.
    assert!(scraped.contains("\nquota_ledger_shards_in_transition 0\n"), "{scraped}");
    let serving = scraped.lines().filter(|l| l.starts_with("quota_ledger_shard_state_seconds{")).collect::<Vec<_>>();
    assert_eq!(serving.len(), 3, "{scraped}");
    assert!(serving.iter().all(|l| l.contains("state=\"serving\"")), "{serving:?}");
    let ok: f64 = scraped
        .lines()
        .filter(|l| l.starts_with("quota_ledger_decisions_total{code=\"OK\""))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum();
    let on_b = |t: &&str| owners[&u64::from(schemas::partition::partition_of(t, 3))] == url_b;
    let first_on_b = tenants.iter().map(String::as_str).chain(["org-7", "org-9"]).filter(on_b).count();
    assert_eq!(ok, (first_on_b + 2 * tenants.len()) as f64, "{scraped}");
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

/// Sends a plan default of `tokens` (a metric no request of these tests uses, so that no decision or bill changes) to
/// the partition of the key `*` alone, as a producer with Kafka's default partitioner does.
fn send_plan_default_to_one_partition(bootstrap: &str) {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let plan = schemas::PolicyEvent {
        header: header("plan-tokens-v1", "2026-10-01T00:00:00Z", "*", "tokens"),
        policy_id: "plan-tokens".into(),
        ..hard_daily("plan-tokens-v1", "*", 1_000_000)
    };
    let payload = schemas::Catalog::builtin().encode_single_object(&schemas::Event::Policy(plan));
    let producer: BaseProducer =
        rdkafka::ClientConfig::new().set("bootstrap.servers", bootstrap).create().expect("a producer");
    let partition = schemas::partition::partition_of("*", 3) as i32;
    let record = BaseRecord::to("quota.policies").key("*").payload(&payload).partition(partition);
    producer.send(record).map_err(|(e, _)| e).expect("queued");
    producer.flush(std::time::Duration::from_secs(30)).expect("acknowledged");
}

// Proves `--standby 1`: each node keeps a copy of the other's shards, up to date while the other owns them and never
// served; when the owner dies the standby takes its partitions over from those copies (the same files, continued, not
// shards rebuilt from offset 0) and answers every decision the dead node made.
#[test]
fn a_standby_keeps_a_warm_copy_and_takes_over_from_it() {
    let broker = Broker::mock();
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let standby = ["--standby", "1"];
    let mut a = Node::start_with(&broker.bootstrap, &dir.path().join("a"), &tokens, "127.0.0.1", "a", &standby);
    let b = Node::start_with(&broker.bootstrap, &dir.path().join("b"), &tokens, "127.0.0.1", "b", &standby);
    let (url_a, url_b) = (a.url.clone(), b.url.clone());
    let owners = routing_of_all(&url_a, 3, &[&url_a, &url_b], 90);
    let owned_by = |url: &str| -> Vec<u64> { owners.iter().filter(|(_, u)| *u == url).map(|(p, _)| *p).collect() };
    let (of_a, of_b) = (owned_by(&url_a), owned_by(&url_b));
    assert!(!of_a.is_empty() && !of_b.is_empty(), "both nodes own partitions: {owners:?}");

    let client = client::Client::new(&[&url_a, &url_b], SECRET).unwrap();
    let tenants: Vec<String> = (0..60).map(|n| format!("org-{n}")).collect();
    for tenant in &tenants {
        let answer = client.check(tenant, &ask(tenant, &format!("{tenant}-1"))).unwrap();
        assert_eq!(answer.status, 200, "{tenant}: {}", answer.body);
    }
    // A copy is not served: the tenants of a's partitions are still a's.
    let of_a_tenant = tenants.iter().find(|t| of_a.contains(&u64::from(schemas::partition::partition_of(t, 3))));
    let tenant = of_a_tenant.expect("a tenant of a's partitions");
    let (status, body) = post(&format!("{url_b}/v1/check"), &ask(tenant, &format!("{tenant}-at-b"))).unwrap();
    assert_eq!(status, 421, "{body}");

    // Each node's copies of the other's shards reach what the owner's shards hold.
    let shards_of = |node: &Node| -> BTreeMap<u64, Value> {
        let status = run(&["--data", node.data.to_str().unwrap(), "status", "--json"], b"").success().json();
        status["shards"].as_array().unwrap().iter().map(|s| (s["partition"].as_u64().unwrap(), s.clone())).collect()
    };
    for (owner, copier, partitions) in [(&a, &b, &of_a), (&b, &a, &of_b)] {
        eventually(60, "the standby's copies hold what the owner's shards hold", || {
            let (owned, copies) = (shards_of(owner), shards_of(copier));
            partitions
                .iter()
                .all(|p| {
                    let recorded = |shards: &BTreeMap<u64, Value>| shards.get(p).map(|s| s["events_recorded"].clone());
                    recorded(&owned).is_some_and(|n| n.as_u64() > Some(0)) && recorded(&owned) == recorded(&copies)
                })
                .then_some(())
        });
    }
    let copies_before = shards_of(&b);
    // b's /metrics says how far each copy is behind: a series per input topic of each partition it stands by for.
    let standby_lag = |node: &Node| -> Vec<(String, f64)> {
        let scraped = ureq::get(format!("{}/metrics", node.url)).call().unwrap().body_mut().read_to_string().unwrap();
        scraped
            .lines()
            .filter(|l| l.starts_with("quota_ledger_standby_lag_messages{"))
            .map(|l| (l.to_string(), l.rsplit(' ').next().unwrap().parse().unwrap()))
            .collect()
    };
    let lag = eventually(30, "b reports its copies' lag, caught up", || {
        let lag = standby_lag(&b);
        (lag.len() == 6 * of_a.len() && lag.iter().all(|(_, n)| *n == 0.0)).then_some(lag)
    });
    for partition in &of_a {
        assert!(lag.iter().any(|(l, _)| l.contains(&format!("partition=\"{partition}\""))), "{lag:?}");
    }

    // Node a dies: b takes its partitions over from its copies.
    a.kill();
    routing_of_all(&url_b, 3, &[&url_b], 90);
    for tenant in &tenants {
        // The catalog may still name b for a partition b gives up and takes again in this rebalance: b answers 421
        // naming itself until it has.
        let answer =
            eventually(60, "b serves the tenant", || client.check(tenant, &ask(tenant, &format!("{tenant}-1"))).ok());
        assert_eq!(answer.status, 200, "{tenant}: {}", answer.body);
        assert_eq!(answer.body["replayed"], json!(true), "b answers a's decision from its copy: {}", answer.body);
    }
    let after = shards_of(&b);
    let log = b.log();
    for partition in &of_a {
        assert_eq!(
            after[partition]["ledger_id"], copies_before[partition]["ledger_id"],
            "shard {partition} is b's standby copy, continued"
        );
        let serving = format!("partition={partition}");
        let caught_up = log.lines().find(|l| l.contains("node: serving a partition") && l.contains(&serving));
        eprintln!("takeover from the standby copy: {}", caught_up.expect("b serves a's partition"));
    }
    assert!(log.contains("ingest: standing by"), "{log}");
    assert_eq!(standby_lag(&b), [], "b owns every partition now: no copy, no lag series left at its last value");
}

// Proves a cluster whose nodes serve TLS is read and routed over HTTPS: each node records its https:// URL in the
// routing catalog (one that would record http:// is refused); the routing client, `status --cluster` and `export
// billing --cluster` trusting the test's certificate authority (--ca-file or QUOTA_LEDGER_CA_FILE) reach every
// shard's owner, while the same trusting only the system's roots fail at once, naming the certificate and --ca-file.
#[test]
fn a_cluster_serving_tls_is_read_and_routed_over_https() {
    let broker = Broker::mock();
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let (ca, cert, key) = tls::certificates(dir.path());
    let served = ["--tls-cert", cert.to_str().unwrap(), "--tls-key", key.to_str().unwrap()];
    let a = Node::start_with(&broker.bootstrap, &dir.path().join("a"), &tokens, "127.0.0.1", "a", &served);
    let b = Node::start_with(&broker.bootstrap, &dir.path().join("b"), &tokens, "127.0.0.1", "b", &served);
    let urls = [a.url.clone(), b.url.clone()];
    assert!(urls.iter().all(|url| url.starts_with("https://127.0.0.1:")), "{urls:?}");
    // Both nodes owning some: the group has settled on both (a node that joins late takes partitions from the first,
    // whose entries name it until the newcomer has caught up and recorded its own).
    let owners = eventually(90, "every partition has an owner, and each TLS node some, in the catalog", || {
        let topics = kafka::topics::Topics::defaults();
        let (partitions, table) = kafka::routing::owners(&broker.bootstrap, &[], topics.names()).ok()?;
        let owners: Vec<String> =
            (0..partitions).map(|p| table.owner(p).map(|o| o.url.clone())).collect::<Option<_>>()?;
        let settled = owners.iter().all(|url| urls.contains(url)) && urls.iter().all(|url| owners.contains(url));
        settled.then_some(owners)
    });
    assert_eq!(owners.len(), 3, "{owners:?}");

    // The routing client trusting the authority reaches each tenant's owner over HTTPS; trusting the system's roots
    // alone, it says the certificate is not trusted rather than taking the nodes for down.
    // Node a follows the catalog on its own: its view, which the client reads, names every owner a moment after the
    // topic does.
    let trusted = trust::Trust::ca_file(&ca).unwrap();
    let tenants: Vec<String> = (0..30).map(|n| format!("org-{n}")).collect();
    let client = eventually(60, "node a's view of the catalog names every partition's owner", || {
        let client = client::Client::with_trust(&[&urls[0]], SECRET, &trusted).ok()?;
        tenants.iter().all(|tenant| client.owner_of(tenant).1.is_some()).then_some(client)
    });
    for tenant in &tenants {
        let answer = client.check(tenant, &ask(tenant, &format!("{tenant}-tls"))).unwrap();
        assert_eq!(answer.status, 200, "{tenant}: {}", answer.body);
        assert!(answer.url.starts_with("https://"), "{}", answer.url);
    }
    let refused = client::Client::new(&[&urls[0]], SECRET).err().expect("the system's roots do not trust the nodes");
    assert!(refused.to_string().contains("certificate is not trusted"), "{refused}");

    let ca = ca.to_str().unwrap();
    let cluster = ["--cluster", &broker.bootstrap, "--token", ADMIN_SECRET];
    let status =
        run_in_env(dir.path(), &[&["status", "--json"][..], &cluster].concat(), b"", &[("QUOTA_LEDGER_CA_FILE", ca)]);
    let status = status.success().json();
    for shard in status["shards"].as_array().unwrap() {
        let partition = shard["partition"].as_u64().unwrap() as usize;
        assert_eq!(shard["owner"], json!(owners[partition]), "each shard read from its owner over HTTPS: {shard}");
    }
    let period = schemas::Timestamp::now().to_string()[..7].to_string();
    let billing = ["export", "billing", "--period", &period, "--format", "csv"];
    let bill = run(&[&billing[..], &cluster, &["--ca-file", ca]].concat(), b"").success();
    assert!(bill.stderr.contains("over the 3 shards of the cluster"), "{}", bill.stderr);
    assert_eq!(bill.stdout_text().lines().count(), tenants.len() + 1, "a row per tenant: {}", bill.stdout_text());

    // Trusting only the system's roots, the nodes' certificate is refused and said to be, with the way out.
    let untrusted = run(&[&["status"][..], &cluster].concat(), b"").expect_code(2);
    let said = &untrusted.stderr;
    assert!(said.contains("could not be reached over TLS: the server's certificate is not trusted"), "{said}");
    assert!(said.contains("--ca-file FILE (or QUOTA_LEDGER_CA_FILE)"), "{said}");
    assert!(untrusted.stdout.is_empty(), "nothing read: {}", untrusted.stdout_text());

    // A node serving TLS that would record an http:// URL does not start: clients following the catalog would send
    // it their tokens in clear.
    let (cert, key, tokens) = (cert.to_str().unwrap(), key.to_str().unwrap(), tokens.to_str().unwrap());
    let data = dir.path().join("c");
    let node = ["--data", data.to_str().unwrap(), "node", "--brokers", &broker.bootstrap, "--cluster", "test"];
    let listen = ["--listen", "127.0.0.1:0", "--advertise", "http://127.0.0.1:1", "--tokens", tokens];
    let in_clear = run(&[&node[..], &listen, &["--tls-cert", cert, "--tls-key", key]].concat(), b"").expect_code(2);
    assert!(in_clear.stderr.contains("--advertise http://127.0.0.1:1 is not an https:// URL"), "{}", in_clear.stderr);
}

/// `export billing --period P --format csv --cluster BROKERS` with the cluster's admin token.
fn cluster_billing(brokers: &str, period: &str) -> String {
    let args =
        ["export", "billing", "--period", period, "--format", "csv", "--cluster", brokers, "--token", ADMIN_SECRET];
    let run = run(&args, b"").success();
    assert!(run.stderr.contains("over the 3 shards of the cluster"), "{}", run.stderr);
    run.stdout_text()
}

// Proves the operator's catalog check (HBCK2's part): a healthy cluster's catalog is consistent; an entry naming a node
// that does not answer and an entry of a partition the cluster does not have are found, each with its repair; the
// repair makes the serving node record itself again and removes the stray entry, after which the catalog, the nodes'
// views and `route` name the node that serves the partition.
#[test]
fn an_operator_inspects_and_repairs_the_routing_catalog() {
    let broker = Broker::mock();
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let a = Node::start(&broker.bootstrap, &dir.path().join("a"), &tokens, "127.0.0.1", "a");
    let b = Node::start(&broker.bootstrap, &dir.path().join("b"), &tokens, "127.0.0.1", "b");
    let owners = routing_of_all(&a.url, 3, &[&a.url, &b.url], 90);
    let catalog = ["catalog", "--cluster", &broker.bootstrap, "--token", ADMIN_SECRET];
    let healthy = run(&[&catalog[..], &["--json"]].concat(), b"").success().json();
    assert_eq!(healthy["inspection"]["findings"], json!([]), "{healthy}");
    assert_eq!(healthy["inspection"]["entries"].as_array().unwrap().len(), 3, "{healthy}");

    // A ghost owner of partition 0, newer than its real entry, and an entry of a partition the cluster lacks.
    let epoch = healthy["inspection"]["entries"][0]["epoch"].as_i64().unwrap();
    let ghost = "http://127.0.0.1:9";
    let mut writer = kafka::routing::RoutingWriter::new(&broker.bootstrap, &[]).unwrap();
    writer.publish(&kafka::routing::RoutingEntry::now(0, "ghost", ghost, epoch + 10)).unwrap();
    writer.publish(&kafka::routing::RoutingEntry::now(7, "ghost", ghost, 1)).unwrap();
    let broken = run(&[&catalog[..], &["--json"]].concat(), b"").expect_code(1).json();
    let findings = &broken["inspection"]["findings"];
    let found: Vec<(u64, &str)> = findings
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["partition"].as_u64().unwrap(), f["problem"].as_str().unwrap()))
        .collect();
    assert_eq!(found, [(0, "owner_unreachable"), (7, "not_a_partition")], "{broken}");
    assert_eq!(findings[0]["repair"], json!({"action": "claim", "url": owners[&0]}), "{broken}");
    assert_eq!(findings[1]["repair"], json!({"action": "remove"}), "{broken}");
    let lines = run(&catalog, b"").expect_code(1).stdout_text();
    assert!(lines.contains("partition 0: owner_unreachable: the entry names ghost at http://127.0.0.1:9"), "{lines}");

    let repaired = run(&[&catalog[..], &["--repair", "--json"]].concat(), b"").success().json();
    assert_eq!(repaired["after_repair"]["findings"], json!([]), "{repaired}");
    let done = &repaired["inspection"]["findings"];
    assert!(done[0]["repaired"].as_str().unwrap().contains("recorded itself at epoch"), "{repaired}");
    assert_eq!(done[1]["repaired"], json!("removed the entry"), "{repaired}");
    let entries = repaired["after_repair"]["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 3, "the stray entry is gone: {repaired}");
    assert!(entries[0]["epoch"].as_i64().unwrap() > epoch + 10, "above the ghost's epoch: {repaired}");
    // The nodes follow the catalog: both name partition 0's real owner again, and clients are sent there.
    assert_eq!(routing_of_all(&b.url, 3, &[&a.url, &b.url], 60), owners, "b's view is repaired");
    let tenant = (0..).map(|n| format!("org-{n}")).find(|t| schemas::partition::partition_of(t, 3) == 0).unwrap();
    let route = run(&["route", &tenant, "--brokers", &broker.bootstrap, "--json"], b"").success().json();
    assert_eq!(route["owner"]["url"], json!(owners[&0]), "{route}");
}

// Proves a drain moves a live node's partitions at once: the drained node leaves the consumer group while it keeps
// running (so no session timeout could have moved them), the other node serves every partition, the catalog names it,
// the drained node holds no shard and answers 421 naming the new owner, and every tenant is answered through the
// routing client.
#[test]
fn a_drained_node_hands_its_partitions_over_while_it_runs() {
    let broker = Broker::mock();
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens(dir.path());
    let a = Node::start(&broker.bootstrap, &dir.path().join("a"), &tokens, "127.0.0.1", "a");
    let b = Node::start(&broker.bootstrap, &dir.path().join("b"), &tokens, "127.0.0.1", "b");
    let owners = routing_of_all(&a.url, 3, &[&a.url, &b.url], 90);
    let of_a: Vec<u64> = owners.iter().filter(|(_, url)| **url == a.url).map(|(p, _)| *p).collect();
    assert!(!of_a.is_empty(), "a owns partitions: {owners:?}");

    let cluster = ["--cluster", &broker.bootstrap, "--token", ADMIN_SECRET];
    let drained = run(&[&["drain", &a.url, "--json"][..], &cluster].concat(), b"").success().json();
    let moved: Vec<(u64, &str)> = drained["moved"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["partition"].as_u64().unwrap(), m["url"].as_str().unwrap()))
        .collect();
    assert_eq!(moved, of_a.iter().map(|p| (*p, b.url.as_str())).collect::<Vec<_>>(), "{drained}");
    assert!(a.log().contains("ingest: left the consumer group, as asked"), "{}", a.log());
    let (status, body) = get_as(&format!("{}/v1/admin/status", a.url), ADMIN_SECRET).unwrap();
    assert_eq!((status, &body["shard_states"], &body["draining"]), (200, &json!([]), &json!(true)), "{body}");
    assert_eq!(routing_of_all(&a.url, 3, &[&b.url], 30).len(), 3, "a's view names b for every partition");

    let tenant = (0..)
        .map(|n| format!("org-{n}"))
        .find(|t| of_a.contains(&u64::from(schemas::partition::partition_of(t, 3))))
        .unwrap();
    let (status, body) = post(&format!("{}/v1/check", a.url), &ask(&tenant, "drained-1")).unwrap();
    assert_eq!((status, &body["owner"]), (421, &json!(b.url)), "{body}");
    let client = client::Client::new(&[&a.url, &b.url], SECRET).unwrap();
    let answer = client.check(&tenant, &ask(&tenant, "drained-2")).unwrap();
    assert_eq!(answer.status, 200, "{}", answer.body);
    let catalog = run(&[&["catalog"][..], &cluster].concat(), b"").success().stdout_text();
    assert!(catalog.contains("consistent"), "{catalog}");
}
