//! The schema ids of the Confluent wire format, read from the schema registry's own storage: the compacted topic
//! `_schemas` that Confluent Schema Registry and Karapace keep, read directly with the ledger's Kafka settings, so
//! that no registry server is needed to ingest. A record's key is `{"keytype": "SCHEMA", "subject": ..., "version":
//! ..., "magic": 1}` and its value `{"subject": ..., "version": ..., "id": ..., "schema": "<the schema's JSON>",
//! "deleted": false}` (`schemaType` absent for Avro); other key types (CONFIG, NOOP, DELETE_SUBJECT, ...) and
//! tombstones carry no schema.
//!
//! Where the registry's topic is out of reach (another cluster, no read ACL on it, a managed registry), its REST API
//! answers the same ids: [`RegistryUrl`] asks `GET {url}/schemas/ids/{id}`, the endpoint Confluent Schema Registry and
//! Karapace document, and [`install_url`] resolves ids through it instead of the topic. An `https://` registry is
//! asked over TLS, trusting the system's roots or a CA file ([`trust::Trust`]).
//!
//! The outbox writes the other way round (`--outbox-format confluent`): [`RegistryUrl::register`] registers a schema
//! under a subject, `POST {url}/subjects/{subject}/versions`, and is answered its id.

use serde::Deserialize;

use crate::whole_topic::{self, WholeTopicError};

/// The topic Confluent Schema Registry and Karapace keep their schemas in by default (`kafkastore.topic`).
pub const SCHEMAS_TOPIC: &str = "_schemas";
/// How long reading `_schemas` whole may take.
pub const READ_TIMEOUT_MS: u64 = 30_000;

/// One schema the registry holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrySchema {
    /// Its id: what a message in the Confluent wire format carries.
    pub id: u32,
    /// The subject it is registered under (`quota.usage-value`, say).
    pub subject: String,
    /// Its version within the subject.
    pub version: i64,
    /// The schema's JSON text.
    pub schema: String,
}

#[derive(Deserialize)]
struct Key {
    keytype: String,
}

#[derive(Deserialize)]
struct Value {
    subject: String,
    version: i64,
    id: u32,
    schema: String,
    #[serde(default)]
    deleted: bool,
    #[serde(default, rename = "schemaType")]
    schema_type: Option<String>,
}

/// What `_schemas` holds: its Avro schemas (the last record of each id wins, as compaction keeps), and how many
/// records of type SCHEMA could not be read as one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegistrySchemas {
    /// The Avro schemas, by id.
    pub schemas: Vec<RegistrySchema>,
    /// SCHEMA records that are not of the documented form.
    pub unreadable: u64,
}

/// Reads `topic` (the registry's `kafkastore.topic`, [`SCHEMAS_TOPIC`] by default) whole from `brokers`.
pub fn read_schemas(
    brokers: &str,
    overrides: &[(String, String)],
    topic: &str,
) -> Result<RegistrySchemas, Box<WholeTopicError>> {
    let mut by_id = std::collections::BTreeMap::new();
    let mut unreadable = 0;
    let config = crate::config::checkpoint_reader(brokers, overrides);
    whole_topic::read(&config, brokers, topic, READ_TIMEOUT_MS, |record| {
        let is_schema =
            record.key.and_then(|key| serde_json::from_slice::<Key>(key).ok()).is_some_and(|k| k.keytype == "SCHEMA");
        if !is_schema {
            return;
        }
        let Some(payload) = record.payload else { return };
        match serde_json::from_slice::<Value>(payload) {
            Ok(value) if value.deleted => {}
            Ok(value) if value.schema_type.as_deref().is_none_or(|t| t == "AVRO") => {
                let schema = RegistrySchema {
                    id: value.id,
                    subject: value.subject,
                    version: value.version,
                    schema: value.schema,
                };
                by_id.insert(value.id, schema);
            }
            Ok(_) => {}
            Err(_) => unreadable += 1,
        }
    })?;
    Ok(RegistrySchemas { schemas: by_id.into_values().collect(), unreadable })
}

/// Shortest time between two reads of `_schemas` for ids met unknown: a burst of messages of a schema the registry
/// does not hold reads the topic once.
pub const REREAD_EVERY_MS: u64 = 5_000;

/// What [`install`] registered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Installed {
    /// Schemas registered, by id.
    pub registered: Vec<(u32, schemas::EventType)>,
    /// Schemas of `_schemas` the catalog cannot read (another record, or one the current reader cannot resolve), by
    /// id, with why: their messages are quarantined as `unknown_schema_id`.
    pub refused: Vec<(u32, String)>,
    /// Whether the topic exists.
    pub topic_exists: bool,
}

/// Has a message in the Confluent wire format whose schema id is not registered yet read `topic` on `brokers` whole
/// and register its Avro schemas ([`schemas::confluent`]), at most every [`REREAD_EVERY_MS`]: nothing is read until
/// the first such message (a deployment without a registry pays nothing, and a start with the brokers away is not
/// held up), and a producer that registers a new schema and sends with it at once is decoded.
pub fn install(brokers: &str, overrides: &[(String, String)], topic: &str) {
    let (brokers, overrides, topic) = (brokers.to_string(), overrides.to_vec(), topic.to_string());
    let last: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);
    schemas::confluent::set_resolver(move |id| {
        let mut last = last.lock().expect("never poisoned");
        if last.is_some_and(|at| at.elapsed() < std::time::Duration::from_millis(REREAD_EVERY_MS)) {
            return;
        }
        *last = Some(std::time::Instant::now());
        match load(&brokers, &overrides, &topic) {
            Ok(found) => {
                tracing::info!(
                    schemas = found.registered.len(),
                    %topic,
                    "schemas: registry schemas registered for the Confluent wire format"
                );
                for (refused, why) in &found.refused {
                    tracing::warn!(schema_id = refused, %topic, %why, "schemas: a registry schema is refused");
                }
                if !schemas::confluent::is_registered(id) {
                    tracing::warn!(
                        schema_id = id,
                        %topic,
                        "schemas: a schema id is not in the registry; its messages are quarantined as unknown_schema_id"
                    );
                }
            }
            Err(error) => tracing::warn!(%topic, schema_id = id, %error, "schemas: cannot read the registry"),
        }
    });
}

fn load(brokers: &str, overrides: &[(String, String)], topic: &str) -> Result<Installed, Box<WholeTopicError>> {
    let found = match read_schemas(brokers, overrides, topic) {
        Ok(found) => found,
        Err(error) if matches!(*error, WholeTopicError::NoTopic { .. }) => return Ok(Installed::default()),
        Err(error) => return Err(error),
    };
    let mut installed = Installed { topic_exists: true, ..Installed::default() };
    for schema in found.schemas {
        match schemas::confluent::register(schema.id, &schema.schema) {
            Ok(event_type) => installed.registered.push((schema.id, event_type)),
            Err(why) => {
                installed.refused.push((schema.id, format!("{} version {}: {why}", schema.subject, schema.version)))
            }
        }
    }
    Ok(installed)
}

/// How long one request to the registry's REST API may take.
pub const HTTP_TIMEOUT_MS: u64 = 10_000;

/// A schema registry's REST API (`--registry-url`): `http://host:8081` or `https://host:8081`, with credentials for
/// HTTP basic authentication in the URL if the registry asks for them (`https://user:secret@host:8081`, Confluent's
/// `basic.auth.user.info`).
#[derive(Clone)]
pub struct RegistryUrl {
    /// The URL without its credentials or a trailing slash.
    base: String,
    /// `Basic ...`, from the URL's credentials.
    authorization: Option<String>,
    trust: trust::Trust,
    agent: ureq::Agent,
}

/// Never the credentials: the URL as it may be logged.
impl std::fmt::Debug for RegistryUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryUrl").field("base", &self.base).finish_non_exhaustive()
    }
}

/// Why a schema could not be asked of, or registered with, the registry's REST API.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryUrlError {
    /// The URL is neither an `http://` nor an `https://` URL.
    #[error("the schema registry URL {url:?} is not an http:// or https:// URL")]
    Scheme {
        /// The URL given, credentials masked.
        url: String,
    },
    /// The registry could not be reached, or its answer was not the documented one.
    #[error("the schema registry at {url} failed to answer schema id {id}: {reason}")]
    Failed {
        /// The registry.
        url: String,
        /// The schema id asked for.
        id: u32,
        /// Why.
        reason: String,
    },
    /// The registry did not register a schema: it refused it (an incompatible schema, 409; an invalid one, 422; no
    /// right to, 401 or 403; its own failure, 5xx), or it could not be reached, or its answer was not the documented
    /// one.
    #[error("the schema registry at {url} did not register the schema of subject {subject}: {reason}")]
    Register {
        /// The registry.
        url: String,
        /// The subject the schema was to be registered under.
        subject: String,
        /// The HTTP status it answered; `None` when it could not be reached (no connection, TLS refused, timeout).
        status: Option<u16>,
        /// Why: the registry's own message, or the connection's failure.
        reason: String,
    },
}

impl RegistryUrlError {
    /// Whether the registry was not reached at all: asking it again for another schema at once fails the same way.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, RegistryUrlError::Register { status: None, .. })
    }
}

/// The characters of a subject written as they are in a URL path; any other is percent-encoded. Kafka's topic names
/// (`[a-zA-Z0-9._-]`), and so the subjects of the TopicNameStrategy, need none.
const SUBJECT_IN_PATH: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'.').remove(b'_').remove(b'-');

/// The body of `POST /subjects/{subject}/versions`: the id of the schema registered (or already registered, which the
/// registry answers the same way).
#[derive(Deserialize)]
struct Registered {
    id: u32,
}

/// The body of `GET /schemas/ids/{id}`: the schema's text, and its type (absent for Avro).
#[derive(Deserialize)]
struct ById {
    schema: String,
    #[serde(default, rename = "schemaType")]
    schema_type: Option<String>,
}

impl RegistryUrl {
    /// The registry at `url` (`http[s]://[user:secret@]host:port[/path]`), trusting `trust` when it is `https://`.
    pub fn parse(url: &str, trust: &trust::Trust) -> Result<RegistryUrl, RegistryUrlError> {
        let Some((scheme, rest)) = ["http://", "https://"].iter().find_map(|s| Some((*s, url.strip_prefix(s)?))) else {
            return Err(RegistryUrlError::Scheme { url: mask(url) });
        };
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let (credentials, host) = match authority.rsplit_once('@') {
            Some((credentials, host)) => (Some(credentials), host),
            None => (None, authority),
        };
        let authorization = credentials.map(|c| {
            use base64::Engine;
            // A password holding `@` or `:` is written `%40`, `%3A` in a URL.
            let decoded: Vec<u8> = percent_encoding::percent_decode_str(c).collect();
            format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(decoded))
        });
        let config = ureq::Agent::config_builder()
            .tls_config(trust.tls_config())
            .http_status_as_error(false)
            .timeout_global(Some(std::time::Duration::from_millis(HTTP_TIMEOUT_MS)))
            .build();
        let base = format!("{scheme}{host}{}", path.trim_end_matches('/'));
        Ok(RegistryUrl { base, authorization, trust: trust.clone(), agent: config.into() })
    }

    /// The registry's URL, without credentials.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The text of schema `id` if the registry holds it as an Avro schema: `None` when it answers 404 (Confluent's
    /// error 40403, "Schema not found"), an error for any other answer or none.
    pub fn schema(&self, id: u32) -> Result<Option<String>, RegistryUrlError> {
        let failed = |reason: String| RegistryUrlError::Failed { url: self.base.clone(), id, reason };
        let mut request = self
            .agent
            .get(format!("{}/schemas/ids/{id}", self.base))
            .header("accept", "application/vnd.schemaregistry.v1+json, application/json");
        if let Some(authorization) = &self.authorization {
            request = request.header("authorization", authorization);
        }
        let mut response =
            request.call().map_err(|e| failed(self.trust.explain(&e).unwrap_or_else(|| e.to_string())))?;
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().map_err(|e| failed(e.to_string()))?;
        match status {
            200 => {
                let found: ById = serde_json::from_str(&text)
                    .map_err(|e| failed(format!("not the documented {{\"schema\": ...}} body ({e}): {text}")))?;
                match found.schema_type.as_deref() {
                    None | Some("AVRO") => Ok(Some(found.schema)),
                    Some(other) => Err(failed(format!("a {other} schema, not Avro"))),
                }
            }
            404 => Ok(None),
            _ => Err(failed(format!("HTTP {status}: {text}"))),
        }
    }

    /// Registers the Avro schema `text` (its JSON) under `subject`, `POST {url}/subjects/{subject}/versions` as
    /// Confluent Schema Registry and Karapace document it: its id. A schema the subject already holds is answered its
    /// id again, so registering at every start is harmless. Any answer other than 200 with `{"id": N}` is an error
    /// quoting the registry's message (Confluent's `{"error_code": 409, "message": ...}` for an incompatible schema).
    pub fn register(&self, subject: &str, text: &str) -> Result<u32, RegistryUrlError> {
        let failed = |status: Option<u16>, reason: String| RegistryUrlError::Register {
            url: self.base.clone(),
            subject: subject.to_string(),
            status,
            reason,
        };
        let path = percent_encoding::utf8_percent_encode(subject, SUBJECT_IN_PATH);
        let mut request = self
            .agent
            .post(format!("{}/subjects/{path}/versions", self.base))
            .header("content-type", "application/vnd.schemaregistry.v1+json")
            .header("accept", "application/vnd.schemaregistry.v1+json, application/json");
        if let Some(authorization) = &self.authorization {
            request = request.header("authorization", authorization);
        }
        let body = serde_json::json!({ "schema": text }).to_string();
        let mut response =
            request.send(body).map_err(|e| failed(None, self.trust.explain(&e).unwrap_or_else(|| e.to_string())))?;
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().map_err(|e| failed(None, e.to_string()))?;
        match status {
            200 => serde_json::from_str::<Registered>(&text)
                .map(|registered| registered.id)
                .map_err(|e| failed(Some(status), format!("not the documented {{\"id\": ...}} body ({e}): {text}"))),
            _ => Err(failed(Some(status), format!("HTTP {status}: {text}"))),
        }
    }
}

/// `url` with the password of its credentials (`scheme://user:password@host`) replaced by `mask`, for anything
/// shown: an error message, `config check`. A URL without a password is shown as it is.
pub fn mask_password(url: &str, mask: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme + 3 && url[scheme + 3..at].contains(':') => {
            let user = url[scheme + 3..at].split(':').next().unwrap_or_default();
            format!("{}{user}:{mask}{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_string(),
    }
}

fn mask(url: &str) -> String {
    mask_password(url, "***")
}

/// Has a message whose schema id is not registered yet ask the registry's REST API at `url` for it, and register it
/// ([`schemas::confluent`]): an id the registry does not hold (or that failed) is asked again at most every
/// [`REREAD_EVERY_MS`], so that a burst of its messages costs one request.
pub fn install_url(url: RegistryUrl) {
    let missed: std::sync::Mutex<std::collections::HashMap<u32, std::time::Instant>> = Default::default();
    schemas::confluent::set_resolver(move |id| {
        let mut missed = missed.lock().expect("never poisoned");
        if missed.get(&id).is_some_and(|at| at.elapsed() < std::time::Duration::from_millis(REREAD_EVERY_MS)) {
            return;
        }
        let base = url.base();
        match url.schema(id) {
            Ok(Some(text)) => match schemas::confluent::register(id, &text) {
                Ok(event_type) => {
                    missed.remove(&id);
                    tracing::info!(schema_id = id, registry = %base, %event_type, "schemas: a registry schema registered");
                }
                Err(why) => {
                    missed.insert(id, std::time::Instant::now());
                    tracing::warn!(schema_id = id, registry = %base, %why, "schemas: a registry schema is refused");
                }
            },
            Ok(None) => {
                missed.insert(id, std::time::Instant::now());
                tracing::warn!(
                    schema_id = id,
                    registry = %base,
                    "schemas: a schema id is not in the registry; its messages are quarantined as unknown_schema_id"
                );
            }
            Err(error) => {
                missed.insert(id, std::time::Instant::now());
                tracing::warn!(%error, "schemas: the registry was not read; the messages are quarantined as unknown_schema_id");
            }
        }
    });
}

#[cfg(test)]
mod tests {
    // Proves the password of a URL's credentials is masked, and a URL without one is left as it is.
    #[test]
    fn a_urls_password_is_masked() {
        assert_eq!(mask_password("http://team:s3cret@registry:8081", "****"), "http://team:****@registry:8081");
        assert_eq!(mask_password("http://registry:8081", "****"), "http://registry:8081");
    }

    use super::*;

    #[test]
    fn credentials_become_basic_authentication_and_are_never_shown() {
        let trust = trust::Trust::system();
        let url = RegistryUrl::parse("http://team%40corp:s3cr%3At@registry:8081/", &trust).unwrap();
        assert_eq!(url.base(), "http://registry:8081");
        // base64("team@corp:s3cr:t")
        assert_eq!(url.authorization.as_deref(), Some("Basic dGVhbUBjb3JwOnMzY3I6dA=="));
        assert!(!format!("{url:?}").contains("s3cr"));
        assert_eq!(RegistryUrl::parse("http://registry:8081/api/", &trust).unwrap().base(), "http://registry:8081/api");
        let tls = RegistryUrl::parse("https://user:secret@registry:8081", &trust).unwrap();
        assert_eq!(tls.base(), "https://registry:8081");
        let refused = RegistryUrl::parse("ftp://user:secret@registry", &trust).unwrap_err().to_string();
        assert!(refused.contains("ftp://user:***@registry") && !refused.contains("secret"), "{refused}");
    }

    /// One request a [`answer_once`] registry read: its request line, its headers (names in lower case) and its body.
    struct Asked {
        line: String,
        headers: Vec<(String, String)>,
        body: String,
    }

    /// A registry on loopback that answers one request with `status` and `body`: its URL, and what it was asked.
    fn answer_once(status: u16, body: &'static str) -> (String, std::thread::JoinHandle<Asked>) {
        use std::io::{BufRead, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://team:s3cret@{}/api", listener.local_addr().unwrap());
        let asked = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let mut headers = Vec::new();
            loop {
                let mut header = String::new();
                reader.read_line(&mut header).unwrap();
                let Some((name, value)) = header.trim_end().split_once(": ") else { break };
                headers.push((name.to_ascii_lowercase(), value.to_string()));
            }
            let length = headers.iter().find(|(n, _)| n == "content-length").map_or(0, |(_, v)| v.parse().unwrap());
            let mut bytes = vec![0; length];
            reader.read_exact(&mut bytes).unwrap();
            let answer =
                format!("HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
            (&stream).write_all(answer.as_bytes()).unwrap();
            Asked { line: line.trim_end().to_string(), headers, body: String::from_utf8(bytes).unwrap() }
        });
        (url, asked)
    }

    // Proves a schema is registered as the registry's REST API documents it (the subject's versions POSTed, its JSON
    // as a string in `schema`, the registry's content type, basic authentication) and its id read from the answer.
    #[test]
    fn a_schema_is_registered_under_its_subject_and_its_id_read() {
        let (url, asked) = answer_once(200, r#"{"id": 7}"#);
        let registry = RegistryUrl::parse(&url, &trust::Trust::system()).unwrap();
        let text = r#"{"type":"record","name":"quota.v1.Thing","fields":[{"name":"n","type":"long"}]}"#;
        assert_eq!(registry.register("quota.decisions-value", text).unwrap(), 7);
        let asked = asked.join().unwrap();
        assert_eq!(asked.line, "POST /api/subjects/quota.decisions-value/versions HTTP/1.1");
        let header = |name: &str| asked.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
        assert_eq!(header("content-type"), Some("application/vnd.schemaregistry.v1+json"));
        assert_eq!(header("authorization"), Some("Basic dGVhbTpzM2NyZXQ="), "base64(team:s3cret)");
        let body: serde_json::Value = serde_json::from_str(&asked.body).unwrap();
        assert_eq!(body, serde_json::json!({ "schema": text }));
    }

    // Proves a refusal is an error that quotes the registry's status and message, and that a registry nobody
    // listens for is said to be unreachable.
    #[test]
    fn a_refusal_quotes_the_registry_and_an_absent_one_is_unreachable() {
        let message = r#"{"error_code": 409, "message": "Schema being registered is incompatible"}"#;
        let (url, asked) = answer_once(409, message);
        let registry = RegistryUrl::parse(&url, &trust::Trust::system()).unwrap();
        let refused = registry.register("quota.usage-value", "{}").unwrap_err();
        asked.join().unwrap();
        assert!(matches!(refused, RegistryUrlError::Register { status: Some(409), .. }), "{refused:?}");
        assert!(!refused.is_unreachable());
        let said = refused.to_string();
        assert!(said.contains("quota.usage-value") && said.contains("incompatible"), "{said}");
        assert!(!said.contains("s3cret"), "{said}");

        let nobody = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let registry = RegistryUrl::parse(&format!("http://{nobody}"), &trust::Trust::system()).unwrap();
        assert!(registry.register("quota.usage-value", "{}").unwrap_err().is_unreachable());
    }
}
