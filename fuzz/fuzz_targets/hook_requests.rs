//! Any request body a caller sends to `serve`'s routes (check, reserve, commit, release), with a valid token or
//! none, is answered without stopping the hook: never a 500 or a 503 on a healthy ledger, and the writer records on.
//! The routes are `serve`'s own (`serve::router`), over a hook on a ledger with a plan default and a throttle.
#![no_main]

#[path = "support/server.rs"]
mod support;

use libfuzzer_sys::fuzz_target;

// The first byte picks the route and whether the token is sent, the rest is the body: a seed is that byte and a JSON
// body (see the corpus).
fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else { return };
    let uri = match pick % 4 {
        0 => "/v1/check",
        1 => "/v1/reservations",
        2 => "/v1/reservations/rsv-fuzz/commit",
        _ => "/v1/reservations/rsv-fuzz/release",
    };
    let secret = (pick & 0x80 == 0).then_some(support::TENANT_SECRET);
    support::server().post(uri, secret, body);
});
