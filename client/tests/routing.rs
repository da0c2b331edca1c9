//! The routing client against a pair of test nodes that answer 421 for partitions they do not own: requests reach
//! the owner, a stale cache is corrected by the 421's owner or by a table read again after a refused connection, and
//! a table that never settles ends in an error after a bounded number of reroutes.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use client::{Client, ClientError, Owner, Routing};
use serde_json::{Value, json};

const PARTITIONS: u32 = 6;

/// What a test node believes: who owns each partition, and what it was asked.
#[derive(Default)]
struct Node {
    name: String,
    url: String,
    /// The routing table this node answers (partition -> owner URL).
    table: BTreeMap<u32, String>,
    served: Vec<String>,
    misdirected: Vec<String>,
}

type Shared = Arc<Mutex<Node>>;

async fn routing(State(node): State<Shared>) -> Json<Routing> {
    let node = node.lock().unwrap();
    let owners = node
        .table
        .iter()
        .map(|(p, url)| Owner { partition: *p, node_id: url.clone(), url: url.clone(), epoch: 1 })
        .collect();
    Json(Routing { partitions: PARTITIONS, owners })
}

async fn check(State(node): State<Shared>, Json(body): Json<Value>) -> (StatusCode, Json<Value>) {
    let mut node = node.lock().unwrap();
    let tenant = body["tenant"].as_str().unwrap().to_string();
    let partition = schemas::partition::partition_of(&tenant, PARTITIONS);
    let owner = node.table.get(&partition).cloned();
    if owner.as_deref() == Some(node.url.as_str()) {
        node.served.push(tenant);
        (StatusCode::OK, Json(json!({"allowed": true, "node": node.name})))
    } else {
        node.misdirected.push(tenant);
        let body = json!({"code": "NOT_SERVING", "partition": partition, "owner": owner});
        (StatusCode::MISDIRECTED_REQUEST, Json(body))
    }
}

/// A test node on its own runtime; it stops (refusing connections) when dropped.
struct TestNode {
    state: Shared,
    url: String,
    _runtime: tokio::runtime::Runtime,
}

impl TestNode {
    fn start(name: &str) -> TestNode {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let address: SocketAddr = listener.local_addr().unwrap();
        let url = format!("http://{address}");
        let state = Arc::new(Mutex::new(Node { name: name.to_string(), url: url.clone(), ..Node::default() }));
        let app = axum::Router::new()
            .route("/v1/routing", get(routing))
            .route("/v1/check", post(check))
            .with_state(Arc::clone(&state));
        runtime.spawn(async move { axum::serve(listener, app).await.unwrap() });
        TestNode { state, url, _runtime: runtime }
    }

    fn believe(&self, table: &BTreeMap<u32, String>) {
        self.state.lock().unwrap().table = table.clone();
    }

    fn served(&self) -> usize {
        self.state.lock().unwrap().served.len()
    }

    fn misdirected(&self) -> usize {
        self.state.lock().unwrap().misdirected.len()
    }
}

/// Even partitions to `a`, odd ones to `b`.
fn split(a: &TestNode, b: &TestNode) -> BTreeMap<u32, String> {
    (0..PARTITIONS).map(|p| (p, if p % 2 == 0 { a.url.clone() } else { b.url.clone() })).collect()
}

fn tenants() -> Vec<String> {
    (0..60).map(|i| format!("org-{i}")).collect()
}

fn check_all(client: &Client) {
    for tenant in tenants() {
        let answer = client.check(&tenant, &json!({"tenant": tenant})).unwrap();
        assert_eq!(answer.status, 200, "{tenant}: {answer:?}");
    }
}

#[test]
fn requests_go_straight_to_the_owner() {
    let (a, b) = (TestNode::start("a"), TestNode::start("b"));
    let table = split(&a, &b);
    a.believe(&table);
    b.believe(&table);
    let client = Client::new(&[&b.url], "token").unwrap();
    check_all(&client);
    assert_eq!(a.served() + b.served(), tenants().len());
    assert!(a.served() > 0 && b.served() > 0, "both own some tenants");
    assert_eq!((a.misdirected(), b.misdirected()), (0, 0));
    let (partition, owner) = client.owner_of("org-7");
    assert_eq!(partition, schemas::partition::partition_of("org-7", PARTITIONS));
    assert_eq!(owner.unwrap(), table[&partition]);
}

#[test]
fn a_421_naming_the_owner_corrects_the_cache_once() {
    let (a, b) = (TestNode::start("a"), TestNode::start("b"));
    let before = split(&a, &b);
    a.believe(&before);
    b.believe(&before);
    let client = Client::new(&[&a.url], "token").unwrap();
    // b took every partition over; a knows it, the client's cache does not.
    let after: BTreeMap<u32, String> = (0..PARTITIONS).map(|p| (p, b.url.clone())).collect();
    a.believe(&after);
    b.believe(&after);
    check_all(&client);
    assert_eq!(b.served(), tenants().len());
    // At most one misdirected request per even partition: after it, the cache names b.
    assert!(a.misdirected() <= (PARTITIONS / 2) as usize, "{} misdirected", a.misdirected());
    assert!(a.misdirected() > 0, "the stale cache was used first");
}

#[test]
fn a_refused_connection_reads_the_table_again_from_a_live_node() {
    let (a, b) = (TestNode::start("a"), TestNode::start("b"));
    let table = split(&a, &b);
    a.believe(&table);
    b.believe(&table);
    let client = Client::new(&[&a.url, &b.url], "token").unwrap();
    // a dies; b took its partitions over.
    let a_url = a.url.clone();
    drop(a);
    b.believe(&(0..PARTITIONS).map(|p| (p, b.url.clone())).collect());
    check_all(&client);
    assert_eq!(b.served(), tenants().len());
    assert_eq!(b.misdirected(), 0);
    assert!(client.owner_of("org-1").1.is_some_and(|url| url != a_url));
}

#[test]
fn a_table_that_never_settles_ends_after_bounded_reroutes() {
    let (a, b) = (TestNode::start("a"), TestNode::start("b"));
    let table = split(&a, &b);
    a.believe(&table);
    b.believe(&table);
    let client = Client::new(&[&a.url], "token").unwrap();
    // Each node names the other as the owner of every partition.
    a.believe(&(0..PARTITIONS).map(|p| (p, b.url.clone())).collect());
    b.believe(&(0..PARTITIONS).map(|p| (p, a.url.clone())).collect());
    let error = client.check("org-1", &json!({"tenant": "org-1"})).unwrap_err();
    assert!(matches!(error, ClientError::NotServed { .. }), "{error}");
    assert_eq!(a.misdirected() + b.misdirected(), client::MAX_REROUTES + 1, "bounded");
}
