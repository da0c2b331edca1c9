//! The server every request target drives: `serve`'s own routes (`serve::router`) over a hook on a ledger with a
//! plan default, a throttle and a CONCURRENT policy, the admin endpoints recording changes in the same ledger, and
//! three callers: a tenant token of every tenant, an admin token, and none.

use std::sync::OnceLock;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use hook::{Hook, HookSettings};
use ledger::{Batch, Durability, Incoming, Ledger, Origin};
use schemas::{Event, EventType};
use tower::ServiceExt;

pub const TENANT_SECRET: &str = "fuzz-secret-0123456789";
pub const ADMIN_SECRET: &str = "fuzz-admin-secret-0123456789";

pub struct Server {
    runtime: tokio::runtime::Runtime,
    router: axum::Router,
    hook: Hook,
    _dir: tempfile::TempDir,
}

const POLICIES: [&str; 3] = [
    r#"{"event_id":"plan-1","occurred_at":"2026-01-01T00:00:00Z","tenant":"*","metric":"requests",
        "source":"fuzz","policy_id":"plan","version":1,"scope":"TENANT","limit":1000000,"window":"MONTH",
        "enforcement":"HARD","effective_from":"2026-01-01T00:00:00Z","burst":null}"#,
    r#"{"event_id":"plan-2","occurred_at":"2026-01-01T00:00:00Z","tenant":"*","metric":"tokens",
        "source":"fuzz","policy_id":"rate","version":1,"scope":"SUBJECT","limit":100,"window":"MINUTE",
        "enforcement":"HARD","effective_from":"2026-01-01T00:00:00Z","burst":50}"#,
    r#"{"event_id":"plan-3","occurred_at":"2026-01-01T00:00:00Z","tenant":"*","metric":"jobs",
        "source":"fuzz","policy_id":"jobs","version":1,"scope":"TENANT","limit":4,"window":"CONCURRENT",
        "enforcement":"HARD","effective_from":"2026-01-01T00:00:00Z","burst":null}"#,
];

pub fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("ledger.db");
        let mut ledger = Ledger::open(&path).expect("a new ledger");
        let events = POLICIES.iter().map(|json| Incoming {
            event: Event::from_json(EventType::PolicyEvent, json).expect("a valid policy"),
            origin: Origin::Local { name: "fuzz".into() },
            raw: None,
        });
        ledger.append(&Batch { events: events.collect(), ..Batch::default() }).expect("the policies append");
        drop(ledger);
        let settings = HookSettings { durability: Durability::Normal, ..HookSettings::default() };
        let hook = Hook::start(&path, settings).expect("the hook starts");
        let tokens_path = dir.path().join("tokens.toml");
        let tokens = format!(
            "[[token]]\nname = \"fuzz\"\nsecret = \"{TENANT_SECRET}\"\ntenants = [\"*\"]\n\n\
             [[token]]\nname = \"fuzz-admin\"\nsecret = \"{ADMIN_SECRET}\"\ntenants = [\"*\"]\nadmin = true\n"
        );
        serve::tokens::write_private(&tokens_path, &tokens).expect("the token file");
        let tokens = serve::tokens::Tokens::read(&tokens_path).expect("the token file reads");
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        let router = serve::router(hook.clone(), tokens, Some(path));
        Server { runtime, router, hook, _dir: dir }
    })
}

impl Server {
    /// POSTs `body` to `uri` with `secret` as the bearer token (none: no header): never a 500 or a 503 on a healthy
    /// ledger, and the writer records on.
    pub fn post(&self, uri: &str, secret: Option<&str>, body: &[u8]) {
        let mut request = Request::post(uri).header("content-type", "application/json");
        if let Some(secret) = secret {
            request = request.header("authorization", format!("Bearer {secret}"));
        }
        let request = request.body(Body::from(body.to_vec())).expect("a request");
        let response = self.runtime.block_on(self.router.clone().oneshot(request)).expect("the router answers");
        let status = response.status();
        assert!(
            status != StatusCode::INTERNAL_SERVER_ERROR && status != StatusCode::SERVICE_UNAVAILABLE,
            "a caller's body to {uri} stopped or failed the hook: {status}"
        );
        assert_eq!(self.hook.health().recording, "ok", "the writer records on");
    }
}
