//! `serve` under fault tests: the real binary on a ledger anywhere (a small filesystem, a directory under the
//! power-cut shim), its checks and answers kept as a model, and the ledger read back to compare with it.

// Each test crate includes this module and uses a different part of it.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{BIN, ChildGuard};

/// The one token of these tests: every tenant.
pub const SECRET: &str = "fault-tests-secret-0123456789";

/// `quota-ledger serve` on a free port; killed when dropped.
pub struct Server {
    pub child: ChildGuard,
    pub base: String,
    agent: ureq::Agent,
}

impl Server {
    /// Starts `serve --durability full` on `ledger` with the environment `env` added (the shim's), its token file
    /// in `scratch` and its stderr into `stderr`; waits for its `listening on` line.
    pub fn start(ledger: &Path, scratch: &Path, env: &[(&'static str, OsString)], stderr: &Path) -> Server {
        Server::start_with_tokens(ledger, scratch, env, stderr, "")
    }

    /// [`Server::start`] with more `[[token]]` tables (`more`, TOML) in its token file after the one of [`SECRET`].
    pub fn start_with_tokens(
        ledger: &Path,
        scratch: &Path,
        env: &[(&'static str, OsString)],
        stderr: &Path,
        more: &str,
    ) -> Server {
        Server::start_with_args(ledger, scratch, env, stderr, more, &[])
    }

    /// [`Server::start_with_tokens`] with more arguments of `serve` (`--brokers B`, say).
    pub fn start_with_args(
        ledger: &Path,
        scratch: &Path,
        env: &[(&'static str, OsString)],
        stderr: &Path,
        more: &str,
        args: &[&str],
    ) -> Server {
        let tokens = scratch.join("tokens.toml");
        let text = format!("[[token]]\nname = \"fault-tests\"\nsecret = \"{SECRET}\"\ntenants = [\"*\"]\n{more}");
        serve::tokens::write_private(&tokens, &text).expect("tokens");
        let stderr_file = std::fs::File::create(stderr).expect("a file for serve's stderr");
        let mut child = ChildGuard::new(
            Command::new(BIN)
                .arg("--ledger")
                .arg(ledger)
                .args(["serve", "--durability", "full", "--listen", "127.0.0.1:0", "--tokens"])
                .arg(&tokens)
                .args(args)
                .envs(env.iter().map(|(k, v)| (k, v)))
                .env_remove("QUOTA_LEDGER_PATH")
                .env_remove("QUOTA_LEDGER_BROKERS")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::from(stderr_file))
                .spawn()
                .expect("serve starts"),
        );
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line).expect("serve's stdout");
        let base = line.trim().strip_prefix("listening on ").unwrap_or_else(|| {
            panic!("serve's first line is {line:?}; stderr:\n{}", std::fs::read_to_string(stderr).unwrap_or_default())
        });
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(30)))
            .build();
        Server { child, base: base.to_string(), agent: ureq::Agent::new_with_config(config) }
    }

    /// `POST base+path` with `body` and `Authorization: Bearer secret`: the status and the JSON answered.
    pub fn post(&self, path: &str, secret: &str, body: &Value) -> (u16, Value) {
        let mut response = self
            .agent
            .post(format!("{}{path}", self.base))
            .header("Authorization", format!("Bearer {secret}"))
            .send_json(body)
            .expect("an answer");
        let status = response.status().as_u16();
        (status, response.body_mut().read_json().unwrap_or(Value::Null))
    }

    /// `GET base+path` with `Authorization: Bearer secret`: the status and the JSON answered.
    pub fn get(&self, path: &str, secret: &str) -> (u16, Value) {
        let mut response = self
            .agent
            .get(format!("{}{path}", self.base))
            .header("Authorization", format!("Bearer {secret}"))
            .call()
            .expect("an answer");
        let status = response.status().as_u16();
        (status, response.body_mut().read_json().unwrap_or(Value::Null))
    }

    /// An agent of its own for a client thread (one kept-alive connection each).
    pub fn client(&self) -> Client {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(30)))
            .build();
        Client { base: self.base.clone(), agent: ureq::Agent::new_with_config(config) }
    }

    pub fn check(&self, tenant: &str, amount: i64, key: &str) -> Reply {
        check(&self.agent, &self.base, tenant, amount, key)
    }

    /// `GET /metrics`: the Prometheus text.
    pub fn metrics(&self) -> String {
        let mut response = self.agent.get(format!("{}/metrics", self.base)).call().expect("an HTTP answer");
        response.body_mut().read_to_string().expect("a body")
    }

    /// `GET /healthz`: status and JSON body.
    pub fn health(&self) -> (u16, Value) {
        let mut response = self.agent.get(format!("{}/healthz", self.base)).call().expect("an HTTP answer");
        let status = response.status().as_u16();
        (status, serde_json::from_str(&response.body_mut().read_to_string().expect("a body")).expect("JSON"))
    }

    /// SIGTERM, then waits for the exit (`limit` at most, then panics).
    pub fn stop(mut self, limit: Duration) -> ExitStatus {
        // SAFETY: kill(2) on our own child's pid, which is not reaped yet (the guard reaps it).
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for serve") {
                return status;
            }
            assert!(started.elapsed() < limit, "serve did not stop within {limit:?} of SIGTERM");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILL, and waits for it to be gone.
    pub fn kill(mut self) {
        self.child.kill().expect("SIGKILL serve");
        self.child.wait().expect("serve is reaped");
    }
}

/// One client's connection.
pub struct Client {
    base: String,
    agent: ureq::Agent,
}

impl Client {
    pub fn check(&self, tenant: &str, amount: i64, key: &str) -> Reply {
        check(&self.agent, &self.base, tenant, amount, key)
    }
}

fn check(agent: &ureq::Agent, base: &str, tenant: &str, amount: i64, key: &str) -> Reply {
    let body = json!({"tenant": tenant, "metric": "tokens", "amount": amount, "idempotency_key": key});
    let sent =
        agent.post(format!("{base}/v1/check")).header("Authorization", format!("Bearer {SECRET}")).send_json(&body);
    let mut response = match sent {
        Ok(response) => response,
        Err(error) => return Reply::Lost(error.to_string()),
    };
    let status = response.status().as_u16();
    let text = match response.body_mut().read_to_string() {
        Ok(text) => text,
        Err(error) => return Reply::Lost(format!("{status}, then the body failed: {error}")),
    };
    let body: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{status} {text:?} is not JSON: {e}"));
    match status {
        200 | 429 => Reply::Decided {
            status,
            decision_id: body["decisionId"].as_str().unwrap_or_else(|| panic!("no decisionId: {body}")).to_string(),
            replayed: body["replayed"].as_bool().unwrap_or_else(|| panic!("no replayed: {body}")),
            code: body["code"].as_str().unwrap_or_else(|| panic!("no code: {body}")).to_string(),
        },
        _ => Reply::Refused {
            status,
            error: body["error"].as_str().unwrap_or_default().to_string(),
            message: body["message"].as_str().unwrap_or_default().to_string(),
        },
    }
}

/// What came back for a check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// 200 (allowed) or 429 (denied): a decision the hook stands by.
    Decided { status: u16, decision_id: String, replayed: bool, code: String },
    /// Any other status, with the error body.
    Refused { status: u16, error: String, message: String },
    /// No HTTP answer: the connection failed (the server was killed).
    Lost(String),
}

impl Reply {
    pub fn decided(&self) -> Option<(u16, &str)> {
        match self {
            Reply::Decided { status, decision_id, .. } => Some((*status, decision_id)),
            _ => None,
        }
    }
}

/// One check a client sent, and its reply: the model the ledger is compared with.
#[derive(Debug, Clone)]
pub struct Sent {
    pub tenant: String,
    pub key: String,
    pub amount: i64,
    pub reply: Reply,
}

/// A decision the ledger holds.
#[derive(Debug, Clone)]
pub struct RecordedDecision {
    pub decision_id: String,
    pub outcome: String,
    pub reason: String,
    pub amount: i64,
}

/// What the ledger holds of the hook's decisions and of usage, read straight from its file.
pub struct LedgerView {
    /// By (tenant, idempotency key): every recorded DecisionEvent of it (exactly one is right).
    pub decisions: HashMap<(String, String), Vec<RecordedDecision>>,
    /// Counted usage: (tenant, occurred_at in micros, quantity).
    pub usage: Vec<(String, i64, i64)>,
}

impl LedgerView {
    pub fn read(ledger: &Path) -> LedgerView {
        let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = rusqlite::Connection::open_with_flags(ledger, flags)
            .unwrap_or_else(|e| panic!("cannot open {} to read it back: {e}", ledger.display()));
        conn.busy_timeout(Duration::from_secs(10)).expect("a busy timeout");
        let mut decisions: HashMap<(String, String), Vec<RecordedDecision>> = HashMap::new();
        let mut query = conn
            .prepare(
                "SELECT e.tenant, d.idempotency_key, e.event_id, d.outcome, d.reason, d.amount FROM decision_events d \
                 JOIN entries e ON e.seq = d.seq WHERE e.status = 'recorded'",
            )
            .expect("the decisions query");
        let rows = query
            .query_map([], |r| {
                Ok((
                    (r.get(0)?, r.get(1)?),
                    RecordedDecision {
                        decision_id: r.get(2)?,
                        outcome: r.get(3)?,
                        reason: r.get(4)?,
                        amount: r.get(5)?,
                    },
                ))
            })
            .expect("the decisions are read");
        for row in rows {
            let (key, decision) = row.expect("a decision row");
            decisions.entry(key).or_default().push(decision);
        }
        let mut query = conn
            .prepare(
                "SELECT e.tenant, e.occurred_at, u.quantity FROM usage_events u JOIN entries e ON e.seq = u.seq \
                 WHERE e.status = 'recorded'",
            )
            .expect("the usage query");
        let usage = query
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .expect("the usage is read")
            .collect::<Result<_, _>>()
            .expect("usage rows");
        LedgerView { decisions, usage }
    }

    /// Every check answered 200 or 429 is recorded exactly once under its key, with the decision id and outcome it
    /// was answered with; no key is recorded twice; nothing is recorded that no client sent. Checks whose reply
    /// is in `absent` (their group failed) must not be recorded at all.
    pub fn assert_holds(&self, sent: &[Sent], absent: impl Fn(&Reply) -> bool) {
        let mut by_key: HashMap<(&str, &str), &Sent> = HashMap::new();
        for s in sent {
            by_key.entry((&s.tenant, &s.key)).or_insert(s);
        }
        for ((tenant, key), recorded) in &self.decisions {
            assert_eq!(recorded.len(), 1, "{tenant}/{key} is recorded {} times: {recorded:?}", recorded.len());
            assert!(by_key.contains_key(&(tenant.as_str(), key.as_str())), "{tenant}/{key} was never sent");
        }
        for s in sent {
            let recorded = self.decisions.get(&(s.tenant.clone(), s.key.clone()));
            if let Some((status, decision_id)) = s.reply.decided() {
                let recorded = recorded.unwrap_or_else(|| {
                    panic!("{}/{} was answered {status} ({decision_id}) but is not in the ledger", s.tenant, s.key)
                });
                let outcome = if status == 200 { "ALLOWED" } else { "DENIED" };
                let found = &recorded[0];
                assert_eq!(
                    (found.decision_id.as_str(), found.outcome.as_str(), found.amount),
                    (decision_id, outcome, s.amount),
                    "{}/{}: the ledger holds another decision than the one answered",
                    s.tenant,
                    s.key
                );
            } else if absent(&s.reply) {
                assert!(
                    recorded.is_none(),
                    "{}/{} was answered {:?} but is in the ledger: {recorded:?}",
                    s.tenant,
                    s.key,
                    s.reply
                );
            }
        }
    }

    /// Counted usage of `tenant` in each calendar window (`%Y-%m` for MONTH, `%Y-%m-%d` for DAY), UTC.
    pub fn usage_by_window(&self, tenant: &str, format: &str) -> BTreeMap<String, i64> {
        let mut windows = BTreeMap::new();
        for (t, occurred_at, quantity) in &self.usage {
            if t == tenant {
                let at = chrono::DateTime::from_timestamp_micros(*occurred_at).expect("a timestamp in range");
                *windows.entry(at.format(format).to_string()).or_insert(0) += quantity;
            }
        }
        windows
    }
}
