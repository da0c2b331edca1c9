//! What a delivery sends: its `webhook-id` (the same for every attempt of one alert to one endpoint, across
//! restarts), its body (the alert as JSON in the specification's envelope) and its signature.
//!
//! ```
//! // The specification's own test vector (standard-webhooks, "Signature scheme").
//! let signature = webhooks::message::signature(
//!     "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
//!     "msg_p5jXN8AQM9LWM0D4loKWxJek",
//!     1614265330,
//!     br#"{"test": 2432232314}"#,
//! )
//! .unwrap();
//! assert_eq!(signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
//! ```

use schemas::{AlertEvent, Event};
use sha2::{Digest, Sha256};

/// The header names of the specification.
pub const HEADER_ID: &str = standardwebhooks::HEADER_WEBHOOK_ID;
/// Seconds since the epoch of the attempt.
pub const HEADER_TIMESTAMP: &str = standardwebhooks::HEADER_WEBHOOK_TIMESTAMP;
/// `v1,` and the base64 HMAC-SHA256 of `id.timestamp.body`.
pub const HEADER_SIGNATURE: &str = standardwebhooks::HEADER_WEBHOOK_SIGNATURE;

/// A signature could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SignError {
    /// The secret recorded is not one (a ledger edited behind its back: registration checks it).
    #[error("the endpoint's secret cannot sign")]
    Secret(#[source] standardwebhooks::WebhookError),
    /// The body is not UTF-8 (it is JSON this crate wrote).
    #[error("the body cannot be signed")]
    Body(#[source] standardwebhooks::WebhookError),
}

/// The `webhook-id` of the delivery of the alert `alert_id` to endpoint `endpoint_id` of `tenant`: `msg_` and 32
/// hex digits of the SHA-256 of the three (each ended by a NUL, which none may hold). The alert's id is
/// deterministic (what it is about), so the same alert to the same endpoint has the same id whoever delivers it,
/// after a restart or on another node: a receiver drops a second copy by this id.
pub fn webhook_id(alert_id: &str, tenant: &str, endpoint_id: &str) -> String {
    let mut hash = Sha256::new();
    for part in [alert_id, tenant, endpoint_id] {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    let digest = hash.finalize();
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("msg_{hex}")
}

/// The body: the specification's envelope, `{"type", "timestamp", "data"}`: `type` `quota.alert.` and the kind in
/// lower case, `timestamp` when the alert occurred, `data` the AlertEvent as `schemas decode` prints it.
pub fn body(alert: &AlertEvent) -> Vec<u8> {
    let envelope = serde_json::json!({
        "type": format!("quota.alert.{}", alert.kind.symbol().to_lowercase()),
        "timestamp": alert.header.occurred_at.to_string(),
        "data": Event::Alert(alert.clone()).to_json(),
    });
    serde_json::to_vec(&envelope).expect("a JSON value serializes")
}

/// The `webhook-signature` of `body` sent as `id` at `timestamp_s` (seconds since the epoch), with `secret`.
pub fn signature(secret: &str, id: &str, timestamp_s: i64, body: &[u8]) -> Result<String, SignError> {
    let signer = standardwebhooks::Webhook::new(secret).map_err(SignError::Secret)?;
    signer.sign(id, timestamp_s, body).map_err(SignError::Body)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Proves a delivery's id depends on the alert and on the endpoint, and on nothing else.
    #[test]
    fn ids_name_the_alert_and_the_endpoint() {
        let id = webhook_id("alert-1", "org-1", "desk");
        assert_eq!(id, webhook_id("alert-1", "org-1", "desk"));
        assert_eq!(id.len(), 4 + 32);
        assert_ne!(id, webhook_id("alert-2", "org-1", "desk"));
        assert_ne!(id, webhook_id("alert-1", "org-1", "ops"));
        assert_ne!(webhook_id("a", "bc", "d"), webhook_id("ab", "c", "d"));
    }
}
