//! What tests build events from, written once: an instant from its RFC 3339 text, and a header with the common
//! fields (no subject, project or API key; source `test`), which a test changes with struct update syntax
//! (`Header { subject: Some("u-1".into()), ..header(...) }`).

use schemas::{Header, Timestamp};

/// An RFC 3339 literal as a timestamp; anything else fails the test, naming the text.
pub fn at(rfc3339: &str) -> Timestamp {
    Timestamp::parse_rfc3339(rfc3339).unwrap_or_else(|e| panic!("{rfc3339:?} is not RFC 3339: {e}"))
}

/// A header of `tenant`'s `metric` at `occurred_at` (RFC 3339), with source `test` and no member named.
pub fn header(event_id: &str, occurred_at: &str, tenant: &str, metric: &str) -> Header {
    Header {
        event_id: event_id.to_string(),
        occurred_at: at(occurred_at),
        tenant: tenant.to_string(),
        subject: None,
        project: None,
        api_key: None,
        metric: metric.to_string(),
        source: "test".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_reads_rfc3339_and_header_fills_the_common_fields() {
        assert_eq!(at("2026-11-01T00:00:00Z").micros(), 1_793_491_200_000_000);
        let header = header("e-1", "2026-11-01T00:00:00Z", "org-1", "tokens");
        assert_eq!((header.tenant.as_str(), header.metric.as_str(), header.subject), ("org-1", "tokens", None));
    }

    #[test]
    #[should_panic(expected = "is not RFC 3339")]
    fn a_malformed_instant_fails_the_test_naming_it() {
        at("2026-11-01");
    }
}
