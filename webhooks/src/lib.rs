//! Webhooks: a tenant's alerts (contract §3's AlertEvent, recorded by the hook and by reconcile) POSTed to the
//! endpoints the tenant registered through the control plane, signed as the Standard Webhooks specification says
//! (`webhook-id`, `webhook-timestamp`, `webhook-signature`), retried with backoff, every attempt recorded in the ledger
//! beside the alerts ([`ledger::webhooks`]).
//!
//! [`registration`] and [`removal`] judge a change of an endpoint against the endpoints recorded, as pure functions
//! (the control plane's way); [`Deliverer`] is the background thread of a server that delivers what is pending, in
//! ledger order; [`message`] makes what is sent.
//!
//! ```
//! use webhooks::{Registration, registration};
//!
//! let asked = Registration {
//!     tenant: "org-42".into(),
//!     endpoint_id: Some("billing-desk".into()),
//!     url: "https://hooks.example.com/quota".into(),
//!     kinds: None,
//!     secret: None,
//!     actor: "alice".into(),
//!     reason: "finance wants the 90% warnings".into(),
//! };
//! let change = registration(&asked, &[]).unwrap();
//! assert!(change.secret.starts_with("whsec_"));
//! assert_eq!(change.kinds, ["THRESHOLD", "SUBJECT_SHARE", "OPEN_TOO_LONG", "DENY_RATE"]);
//! ```

#![deny(missing_docs)]

mod deliver;
mod endpoint;
pub mod message;
pub mod metrics;

pub use deliver::{
    ATTEMPTS_MAX, DELIVERIES_PER_PASS, Deliverer, DeliverySettings, PASS_INTERVAL_MS, PENDING_READ_MAX,
    REQUEST_TIMEOUT_MS, RETRY_BASE_MS, RETRY_DELAY_MAX_MS, StartError, retry_delay,
};
pub use endpoint::{
    ENDPOINT_ID_BYTES_MAX, Refused, Registration, Removal, SECRET_BYTES, URL_BYTES_MAX, new_secret, registration,
    removal,
};
