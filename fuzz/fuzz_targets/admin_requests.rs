//! Any body sent to the control plane's endpoints (`POST /v1/admin/policies`, `/v1/admin/grants`) with an admin
//! token, a tenant's token that is not admin, or none, is judged and answered without stopping the hook: never a 500
//! or a 503, the writer records on, and what the control plane records is an event the ledger accepts.
#![no_main]

#[path = "support/server.rs"]
mod support;

use libfuzzer_sys::fuzz_target;

// The first byte picks the route (its lowest bit) and the caller (its two highest bits: admin, tenant, none), the
// rest is the body.
fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else { return };
    let uri = if pick % 2 == 0 { "/v1/admin/policies" } else { "/v1/admin/grants" };
    let secret = match pick >> 6 {
        0 | 1 => Some(support::ADMIN_SECRET),
        2 => Some(support::TENANT_SECRET),
        _ => None,
    };
    support::server().post(uri, secret, body);
});
