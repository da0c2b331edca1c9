//! A change of an endpoint, judged against the endpoints recorded: pure, as the control plane judges a policy.

use base64::Engine;
use ledger::webhooks::{Endpoint, EndpointChange};
use schemas::validate::check_name;
use schemas::{AlertKind, Invalid};

/// The longest endpoint id, in bytes: a name people type, as a tenant's.
pub const ENDPOINT_ID_BYTES_MAX: usize = 128;
/// The longest URL, in bytes: what browsers and proxies take (2,048 is the common floor).
pub const URL_BYTES_MAX: usize = 2_048;
/// The random bytes of a new signing secret: 256 bits, HMAC-SHA256's own key length. A given secret is taken from
/// 24 bytes (Svix's, the specification's reference) to 64 (HMAC-SHA256's block).
pub const SECRET_BYTES: usize = 32;
const SECRET_BYTES_MIN: usize = 24;
const SECRET_BYTES_MAX: usize = 64;
/// The longest reason, in bytes, as a policy change's.
const REASON_BYTES_MAX: usize = 1_024;
const SECRET_PREFIX: &str = "whsec_";

/// An endpoint to register (`webhook add`, `POST /v1/admin/webhooks`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// Whose alerts it receives.
    pub tenant: String,
    /// Its id, the tenant's own; a new random one when none is given.
    pub endpoint_id: Option<String>,
    /// Where the alerts are POSTed: `https://`, or `http://` on a loopback address.
    pub url: String,
    /// The kinds of alert it wants; none: every kind.
    pub kinds: Option<Vec<AlertKind>>,
    /// The signing secret (`whsec_` and base64); a new random one when none is given.
    pub secret: Option<String>,
    /// Who registers it.
    pub actor: String,
    /// Why.
    pub reason: String,
}

/// An endpoint to remove (`webhook remove`): its deliveries stop, pending retries included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removal {
    /// Its tenant.
    pub tenant: String,
    /// Its id.
    pub endpoint_id: String,
    /// Who removes it.
    pub actor: String,
    /// Why.
    pub reason: String,
}

/// Why a change of an endpoint was refused; nothing was recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refused {
    /// A name, the actor or the reason breaks a rule of the contract (§9.2).
    #[error("{0}")]
    Invalid(#[from] Invalid),
    /// The URL cannot be delivered to.
    #[error("url {url:?} {why}")]
    Url {
        /// As given.
        url: String,
        /// What is wrong.
        why: &'static str,
    },
    /// The secret is not a Standard Webhooks secret.
    #[error("secret: {0}")]
    Secret(String),
    /// No kind asked for.
    #[error("kinds: an endpoint wants at least one kind of alert ({})", all_kinds().join(", "))]
    NoKinds,
    /// The endpoint id is registered and not removed.
    #[error("endpoint {endpoint_id} of {tenant} is registered already: remove it first to change it")]
    Exists {
        /// Its tenant.
        tenant: String,
        /// Its id.
        endpoint_id: String,
    },
    /// No such endpoint registered.
    #[error("endpoint {endpoint_id} of {tenant} is not registered (`webhook list` shows them)")]
    Unknown {
        /// Its tenant.
        tenant: String,
        /// Its id.
        endpoint_id: String,
    },
}

fn all_kinds() -> Vec<&'static str> {
    AlertKind::SYMBOLS.to_vec()
}

/// The change recording `asked`, or why it is refused, judged against `recorded` (every endpoint as its last change
/// left it).
pub fn registration(asked: &Registration, recorded: &[Endpoint]) -> Result<EndpointChange, Refused> {
    check_owner(&asked.tenant)?;
    check_why(&asked.actor, &asked.reason)?;
    check_url(&asked.url)?;
    let endpoint_id = match &asked.endpoint_id {
        Some(id) => id.clone(),
        None => format!("ep-{}", hex(&random_bytes(6))),
    };
    check_endpoint_id(&endpoint_id)?;
    let kinds: Vec<String> = match &asked.kinds {
        Some(kinds) if kinds.is_empty() => return Err(Refused::NoKinds),
        Some(kinds) => {
            // In the schema's order, each once, whatever order they were asked in.
            AlertKind::SYMBOLS
                .iter()
                .filter(|s| kinds.iter().any(|k| k.symbol() == **s))
                .map(|s| (*s).to_string())
                .collect()
        }
        None => all_kinds().into_iter().map(str::to_string).collect(),
    };
    let secret = match &asked.secret {
        Some(secret) => {
            check_secret(secret)?;
            secret.clone()
        }
        None => new_secret(),
    };
    if recorded.iter().any(|e| e.enabled && e.tenant == asked.tenant && e.endpoint_id == endpoint_id) {
        return Err(Refused::Exists { tenant: asked.tenant.clone(), endpoint_id });
    }
    Ok(EndpointChange {
        tenant: asked.tenant.clone(),
        endpoint_id,
        url: asked.url.clone(),
        kinds,
        secret,
        enabled: true,
        actor: asked.actor.clone(),
        reason: asked.reason.clone(),
    })
}

/// The change recording `asked`, or why it is refused: an endpoint registered and not removed yet.
pub fn removal(asked: &Removal, recorded: &[Endpoint]) -> Result<EndpointChange, Refused> {
    check_owner(&asked.tenant)?;
    check_why(&asked.actor, &asked.reason)?;
    let found = recorded.iter().find(|e| e.enabled && e.tenant == asked.tenant && e.endpoint_id == asked.endpoint_id);
    let Some(found) = found else {
        return Err(Refused::Unknown { tenant: asked.tenant.clone(), endpoint_id: asked.endpoint_id.clone() });
    };
    Ok(EndpointChange {
        tenant: found.tenant.clone(),
        endpoint_id: found.endpoint_id.clone(),
        url: found.url.clone(),
        kinds: found.kinds.clone(),
        secret: found.secret.clone(),
        enabled: false,
        actor: asked.actor.clone(),
        reason: asked.reason.clone(),
    })
}

/// A new signing secret: [`SECRET_BYTES`] from the operating system's generator, as `whsec_` and base64.
pub fn new_secret() -> String {
    let key = random_bytes(SECRET_BYTES);
    format!("{SECRET_PREFIX}{}", base64::engine::general_purpose::STANDARD.encode(key))
}

fn random_bytes(count: usize) -> Vec<u8> {
    let mut bytes = vec![0; count];
    // Linux's getrandom(2) fails only before the kernel's pool is seeded at boot, long before a server starts.
    getrandom::fill(&mut bytes).expect("the operating system's random generator answers");
    bytes
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn check_owner(tenant: &str) -> Result<(), Refused> {
    check_name("tenant", tenant)?;
    if tenant == "*" {
        return Err(Invalid::Inconsistent {
            field: "tenant",
            message: "a webhook is a tenant's, not the plan default's (`*`)".into(),
        }
        .into());
    }
    Ok(())
}

fn check_why(actor: &str, reason: &str) -> Result<(), Refused> {
    check_name("actor", actor)?;
    if reason.is_empty() {
        return Err(Invalid::Empty { field: "reason" }.into());
    }
    if reason.len() > REASON_BYTES_MAX {
        return Err(Invalid::TooLong { field: "reason", bytes: reason.len(), maximum: REASON_BYTES_MAX }.into());
    }
    if let Some((at, c)) = reason.char_indices().find(|(_, c)| c.is_control()) {
        return Err(Invalid::ControlCharacter { field: "reason", code_point: u32::from(c), at }.into());
    }
    Ok(())
}

fn check_endpoint_id(id: &str) -> Result<(), Refused> {
    if id.is_empty() {
        return Err(Invalid::Empty { field: "endpoint_id" }.into());
    }
    if id.len() > ENDPOINT_ID_BYTES_MAX {
        return Err(Invalid::TooLong { field: "endpoint_id", bytes: id.len(), maximum: ENDPOINT_ID_BYTES_MAX }.into());
    }
    match id.char_indices().find(|(_, c)| c.is_control() || *c == ',') {
        Some((at, c)) => Err(Invalid::ControlCharacter { field: "endpoint_id", code_point: u32::from(c), at }.into()),
        None => Ok(()),
    }
}

/// `https://HOST...`, or `http://` to a loopback host (a receiver on the same machine, a test's): alerts name
/// tenants, policies and consumption, not for the network path to read, as the rule `serve` listens by.
fn check_url(url: &str) -> Result<(), Refused> {
    let refuse = |why| Err(Refused::Url { url: url.to_string(), why });
    if url.len() > URL_BYTES_MAX {
        return refuse("is longer than 2048 bytes");
    }
    if url.chars().any(char::is_control) {
        return refuse("holds a control character");
    }
    let Ok(uri) = url.parse::<ureq::http::Uri>() else {
        return refuse("is not a URL");
    };
    let Some(host) = uri.host() else {
        return refuse("names no host");
    };
    match uri.scheme_str() {
        Some("https") => Ok(()),
        Some("http") if is_loopback(host) => Ok(()),
        Some("http") => refuse("is plain HTTP to another machine: give an https:// URL (alerts are the tenant's data)"),
        _ => refuse("is neither https:// nor http://"),
    }
}

fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn check_secret(secret: &str) -> Result<(), Refused> {
    let Some(encoded) = secret.strip_prefix(SECRET_PREFIX) else {
        return Err(Refused::Secret("a Standard Webhooks secret starts with whsec_".into()));
    };
    let key = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|e| Refused::Secret(format!("what follows whsec_ is not base64: {e}")))?;
    if !(SECRET_BYTES_MIN..=SECRET_BYTES_MAX).contains(&key.len()) {
        return Err(Refused::Secret(format!(
            "{} bytes of key; a secret holds {SECRET_BYTES_MIN} to {SECRET_BYTES_MAX}",
            key.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(url: &str) -> Registration {
        Registration {
            tenant: "org-1".into(),
            endpoint_id: Some("desk".into()),
            url: url.into(),
            kinds: Some(vec![AlertKind::DENY_RATE, AlertKind::THRESHOLD]),
            secret: None,
            actor: "alice".into(),
            reason: "warnings".into(),
        }
    }

    // Proves the URLs taken: https anywhere, plain HTTP only to this machine.
    #[test]
    fn urls_are_https_or_loopback() {
        for good in ["https://example.com/hook", "http://127.0.0.1:9/x", "http://[::1]:80/", "http://localhost/"] {
            assert!(registration(&asked(good), &[]).is_ok(), "{good}");
        }
        for bad in ["http://example.com/hook", "ftp://example.com/", "example.com", "https://", "https://a/\n"] {
            assert!(matches!(registration(&asked(bad), &[]), Err(Refused::Url { .. })), "{bad}");
        }
    }

    // Proves kinds are kept in the schema's order, a new secret decodes to 32 bytes, and a given one is checked.
    #[test]
    fn kinds_and_secrets() {
        let change = registration(&asked("https://example.com/"), &[]).unwrap();
        assert_eq!(change.kinds, ["THRESHOLD", "DENY_RATE"]);
        let key = base64::engine::general_purpose::STANDARD.decode(&change.secret["whsec_".len()..]).unwrap();
        assert_eq!(key.len(), SECRET_BYTES);
        let mut given = asked("https://example.com/");
        given.secret = Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into());
        assert_eq!(registration(&given, &[]).unwrap().secret, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
        for bad in ["MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_???", "whsec_AAAA"] {
            given.secret = Some(bad.into());
            assert!(matches!(registration(&given, &[]), Err(Refused::Secret(_))), "{bad}");
        }
        given.secret = None;
        given.kinds = Some(vec![]);
        assert_eq!(registration(&given, &[]), Err(Refused::NoKinds));
    }

    // Proves an endpoint id is registered once until removed, and a removal names a registered one.
    #[test]
    fn one_registration_per_id_until_removed() {
        let change = registration(&asked("https://example.com/"), &[]).unwrap();
        let recorded = Endpoint {
            tenant: change.tenant.clone(),
            endpoint_id: change.endpoint_id.clone(),
            url: change.url.clone(),
            kinds: change.kinds.clone(),
            secret: change.secret.clone(),
            enabled: true,
            from_seq: 0,
            actor: "alice".into(),
            reason: "warnings".into(),
            recorded_at: schemas::Timestamp(0),
        };
        assert!(matches!(
            registration(&asked("https://example.com/"), std::slice::from_ref(&recorded)),
            Err(Refused::Exists { .. })
        ));
        let remove =
            Removal { tenant: "org-1".into(), endpoint_id: "desk".into(), actor: "bob".into(), reason: "x".into() };
        let removed = removal(&remove, std::slice::from_ref(&recorded)).unwrap();
        assert!(!removed.enabled && removed.actor == "bob" && removed.url == recorded.url);
        let gone = Endpoint { enabled: false, ..recorded };
        assert!(matches!(removal(&remove, std::slice::from_ref(&gone)), Err(Refused::Unknown { .. })));
        assert!(registration(&asked("https://example.com/"), &[gone]).is_ok());
    }
}
