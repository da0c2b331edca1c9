//! Any request body a caller sends to `serve`'s routes (check, reserve, commit, release), with a valid token or
//! none, is answered without stopping the hook: never a 500 or a 503 on a healthy ledger, and the writer records on.
//! The routes are `serve`'s own (`serve::router`), over a hook on a ledger with a plan default and a throttle.
#![no_main]

use std::sync::OnceLock;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use hook::{Hook, HookSettings};
use ledger::{Batch, Durability, Incoming, Ledger, Origin};
use libfuzzer_sys::fuzz_target;
use schemas::{Event, EventType};
use tower::ServiceExt;

struct Server {
    runtime: tokio::runtime::Runtime,
    router: axum::Router,
    hook: Hook,
    _dir: tempfile::TempDir,
}

fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("ledger.db");
        let mut ledger = Ledger::open(&path).expect("a new ledger");
        let policies = [
            r#"{"event_id":"plan-1","occurred_at":"2026-01-01T00:00:00Z","tenant":"*","metric":"requests",
                "source":"fuzz","policy_id":"plan","version":1,"scope":"TENANT","limit":1000000,"window":"MONTH",
                "enforcement":"HARD","effective_from":"2026-01-01T00:00:00Z","burst":null}"#,
            r#"{"event_id":"plan-2","occurred_at":"2026-01-01T00:00:00Z","tenant":"*","metric":"tokens",
                "source":"fuzz","policy_id":"rate","version":1,"scope":"SUBJECT","limit":100,"window":"MINUTE",
                "enforcement":"HARD","effective_from":"2026-01-01T00:00:00Z","burst":50}"#,
        ];
        let events = policies.iter().map(|json| Incoming {
            event: Event::from_json(EventType::PolicyEvent, json).expect("a valid policy"),
            origin: Origin::Local { name: "fuzz".into() },
            raw: None,
        });
        ledger.append(&Batch { events: events.collect(), ..Batch::default() }).expect("the policies append");
        drop(ledger);
        let settings = HookSettings { durability: Durability::Normal, ..HookSettings::default() };
        let hook = Hook::start(&path, settings).expect("the hook starts");
        let tokens_path = dir.path().join("tokens.toml");
        let tokens = "[[token]]\nname = \"fuzz\"\nsecret = \"fuzz-secret-0123456789\"\ntenants = [\"*\"]\n";
        serve::tokens::write_private(&tokens_path, tokens).expect("the token file");
        let tokens = serve::tokens::Tokens::read(&tokens_path).expect("the token file reads");
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        let router = serve::router(hook.clone(), tokens);
        Server { runtime, router, hook, _dir: dir }
    })
}

// The first byte picks the route and whether the token is sent, the rest is the body: a seed is that byte and a JSON
// body (see the corpus).
fuzz_target!(|data: &[u8]| {
    let server = server();
    let Some((&pick, body)) = data.split_first() else { return };
    let uri = match pick % 4 {
        0 => "/v1/check",
        1 => "/v1/reservations",
        2 => "/v1/reservations/rsv-fuzz/commit",
        _ => "/v1/reservations/rsv-fuzz/release",
    };
    let mut request = Request::post(uri).header("content-type", "application/json");
    if pick & 0x80 == 0 {
        request = request.header("authorization", "Bearer fuzz-secret-0123456789");
    }
    let request = request.body(Body::from(body.to_vec())).expect("a request");
    let response = server.runtime.block_on(server.router.clone().oneshot(request)).expect("the router answers");
    let status = response.status();
    assert!(
        status != StatusCode::INTERNAL_SERVER_ERROR && status != StatusCode::SERVICE_UNAVAILABLE,
        "a caller's body stopped or failed the hook: {status}"
    );
    assert_eq!(server.hook.health().recording, "ok", "the writer records on");
});
