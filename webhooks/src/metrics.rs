//! The deliverer's figures, registered into the process's registry (`telemetry`): deliveries by outcome.
//!
//! ```
//! let mut registry = telemetry::registry();
//! let metrics = webhooks::metrics::WebhookMetrics::register(&mut registry);
//! metrics.attempted(ledger::webhooks::Outcome::GivenUp);
//! let text = telemetry::encode(&registry);
//! assert!(text.lines().any(|line| line == r#"quota_ledger_webhook_attempts_total{outcome="given_up"} 1"#));
//! ```

use std::sync::Arc;

use ledger::webhooks::Outcome;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use telemetry::Registry;

/// An attempt's outcome, in lower case.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `delivered`, `failed` or `given_up`.
    pub outcome: &'static str,
}

/// The deliverer's figures.
#[derive(Debug, Default)]
pub struct WebhookMetrics {
    attempts: Family<OutcomeLabels, Counter>,
}

impl WebhookMetrics {
    /// Registers the families into `registry`.
    pub fn register(registry: &mut Registry) -> Arc<WebhookMetrics> {
        let metrics = Arc::new(WebhookMetrics::default());
        registry.register(
            "webhook_attempts",
            "Attempts to deliver an alert to a webhook endpoint, by outcome: delivered (a 2xx), failed (retried) or \
             given_up (the last attempt allowed failed)",
            metrics.attempts.clone(),
        );
        metrics
    }

    /// Counts an attempt.
    pub fn attempted(&self, outcome: Outcome) {
        let outcome = match outcome {
            Outcome::Delivered => "delivered",
            Outcome::Failed => "failed",
            Outcome::GivenUp => "given_up",
        };
        self.attempts.get_or_create(&OutcomeLabels { outcome }).inc();
    }
}
