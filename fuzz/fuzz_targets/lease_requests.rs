//! Any request body a caller sends to the lease routes (acquire, renew, release of a CONCURRENT policy's slots), with
//! a valid token or none, is answered without stopping the hook: never a 500 or a 503, and the writer records on.
#![no_main]

#[path = "support/server.rs"]
mod support;

use libfuzzer_sys::fuzz_target;

// The first byte picks the route and whether the token is sent, the rest is the body.
fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else { return };
    let uri = match pick % 3 {
        0 => "/v1/leases",
        1 => "/v1/leases/lease-fuzz/renew",
        _ => "/v1/leases/lease-fuzz/release",
    };
    let secret = (pick & 0x80 == 0).then_some(support::TENANT_SECRET);
    support::server().post(uri, secret, body);
});
