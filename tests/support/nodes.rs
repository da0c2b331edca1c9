//! `quota-ledger node` processes for the cluster tests, and what a test asks them over HTTP.

// Each test crate includes this module and uses a different part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use super::{BIN, ChildGuard, eventually};

/// The one token of the cluster tests: every tenant.
pub const SECRET: &str = "cluster-tests-secret-0123456789";
/// The secret of the cluster's admin token of every tenant (the nightly reconcile's).
pub const ADMIN_SECRET: &str = "cluster-tests-admin-0123456789";

/// A node process, killed when dropped.
pub struct Node {
    pub child: ChildGuard,
    pub url: String,
    pub data: PathBuf,
    pub id: String,
    host: String,
    port: u16,
    brokers: String,
    tokens: PathBuf,
    /// Arguments of `node` beyond those every test gives.
    more: Vec<String>,
}

/// A token file in `dir` covering every tenant.
pub fn tokens(dir: &Path) -> PathBuf {
    let path = dir.join("tokens.toml");
    let text = format!(
        "[[token]]\nname = \"all\"\nsecret = \"{SECRET}\"\ntenants = [\"*\"]\n\n[[token]]\nname = \"nightly\"\nsecret = \
         \"{ADMIN_SECRET}\"\ntenants = [\"*\"]\nadmin = true\n"
    );
    serve::tokens::write_private(&path, &text).unwrap();
    path
}

impl Node {
    /// `node` on `host` (a loopback address), its shards in `data`, its stderr in `data.log`; waits until it listens.
    pub fn start(brokers: &str, data: &Path, tokens: &Path, host: &str, id: &str) -> Node {
        Node::start_with(brokers, data, tokens, host, id, &[])
    }

    /// As [`Node::start`], with `more` arguments of `node` (`--standby 1`); a node given `--tls-cert` advertises its
    /// `https://` URL.
    pub fn start_with(brokers: &str, data: &Path, tokens: &Path, host: &str, id: &str, more: &[&str]) -> Node {
        let scheme = if more.contains(&"--tls-cert") { "https" } else { "http" };
        // The node records the URL it is given, so it cannot bind port 0: a port free a moment ago, and another when
        // the node lost it to another process (it prints its address only once it bound it).
        for _ in 0..testkit::ports::TRIES {
            let port = testkit::ports::free_a_moment_ago(host);
            let mut node = Node {
                child: ChildGuard::new(Command::new("true").spawn().unwrap()),
                url: format!("{scheme}://{host}:{port}"),
                data: data.to_path_buf(),
                id: id.to_string(),
                host: host.to_string(),
                port,
                brokers: brokers.to_string(),
                tokens: tokens.to_path_buf(),
                more: more.iter().map(|a| a.to_string()).collect(),
            };
            match node.try_spawn() {
                Ok(()) => return node,
                // Another process took the port between its choice and the node's bind: another one.
                Err(log) if log.contains("Address already in use") => eprintln!("node {id}: {host}:{port} was taken"),
                Err(log) => panic!("node {id} did not start; its log:\n{log}"),
            }
        }
        panic!("node {id} found no free port on {host} in {} tries", testkit::ports::TRIES)
    }

    /// Starts the process on the node's address; panics unless it listens.
    fn spawn(&mut self) {
        if let Err(log) = self.try_spawn() {
            panic!("node {} did not listen on {}:{}; its log:\n{log}", self.id, self.host, self.port);
        }
    }

    /// Starts the process on the node's address: its log, when it did not say it listens (it printed its address
    /// once it bound it).
    fn try_spawn(&mut self) -> Result<(), String> {
        let logged_before = self.log().len();
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.data.with_extension("log")).unwrap();
        let mut child = ChildGuard::new(
            Command::new(BIN)
                .arg("--data")
                .arg(&self.data)
                .args(["node", "--brokers", &self.brokers, "--cluster", "test", "--node-id", &self.id])
                .args(["--listen", &format!("{}:{}", self.host, self.port), "--advertise", &self.url, "--tokens"])
                .arg(&self.tokens)
                .args(&self.more)
                .env_remove("QUOTA_LEDGER_PATH")
                .env_remove("QUOTA_LEDGER_BROKERS")
                .stdout(Stdio::piped())
                .stderr(Stdio::from(log))
                .spawn()
                .expect("node starts"),
        );
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).expect("node prints its address");
        self.child = child;
        if line.starts_with("listening on") {
            Ok(())
        } else {
            Err(format!("{line:?}\n{}", &self.log()[logged_before..]))
        }
    }

    /// What the node logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.data.with_extension("log")).unwrap_or_default()
    }

    /// SIGKILL, as a machine that dies.
    pub fn kill(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }

    /// A new process on the same address and data directory, as a supervisor restarts one.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Sends `signal` (SIGSTOP, SIGCONT, SIGTERM).
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid, not reaped yet (the guard reaps it).
        unsafe { libc::kill(self.child.id() as i32, signal) };
    }
}

fn agent() -> ureq::Agent {
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(std::time::Duration::from_secs(5)))
        .build();
    ureq::Agent::new_with_config(config)
}

/// `GET url` with the token: status and JSON body, or `None` when nothing answered.
pub fn get(url: &str) -> Option<(u16, Value)> {
    get_as(url, SECRET)
}

/// `GET url` with the token of `secret` (the admin token for `/v1/admin/...`): status and JSON body, or `None` when
/// nothing answered.
pub fn get_as(url: &str, secret: &str) -> Option<(u16, Value)> {
    let mut response = agent().get(url).header("Authorization", format!("Bearer {secret}")).call().ok()?;
    let status = response.status().as_u16();
    Some((status, serde_json::from_str(&response.body_mut().read_to_string().ok()?).ok()?))
}

/// `POST url` with the token and `body`: status and JSON body, or `None` when nothing answered.
pub fn post(url: &str, body: &Value) -> Option<(u16, Value)> {
    let mut response = agent().post(url).header("Authorization", format!("Bearer {SECRET}")).send_json(body).ok()?;
    let status = response.status().as_u16();
    Some((status, serde_json::from_str(&response.body_mut().read_to_string().ok()?).unwrap_or(Value::Null)))
}

/// The routing table of `node` once it names an owner for each of `partitions`, each among `urls`.
pub fn routing_of_all(node: &str, partitions: usize, urls: &[&str], limit_secs: u64) -> BTreeMap<u64, String> {
    eventually(limit_secs, "every partition has a live owner in the routing catalog", || {
        let (_, table) = get(&format!("{node}/v1/routing"))?;
        let owners: BTreeMap<u64, String> = table["owners"]
            .as_array()?
            .iter()
            .map(|o| (o["partition"].as_u64().unwrap(), o["url"].as_str().unwrap().to_string()))
            .collect();
        (owners.len() == partitions && owners.values().all(|u| urls.contains(&u.as_str()))).then_some(owners)
    })
}

/// A check of one request of `tenant` under `key`.
pub fn ask(tenant: &str, key: &str) -> Value {
    json!({"tenant": tenant, "metric": "requests", "amount": 1, "idempotency_key": key})
}
