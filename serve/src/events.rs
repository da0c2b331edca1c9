//! `POST /v1/events`: usage sent over HTTP as CloudEvents (JSON, one event or a batch), for producers that speak
//! neither Kafka nor Avro. Each event becomes the UsageEvent its `data` names, is validated as ingest validates a
//! message (one contract, [`schemas::validate`]), its tenant checked against the caller's token, and the batch is
//! produced to the usage topic, keyed by tenant with the product's partitioner, from where ingest records it as any
//! other producer's. The answer (204) waits for the brokers' acknowledgement of every event of the batch.
//!
//! A batch is all or nothing: one event refused refuses the batch, each refused event named by its index with its
//! reason, and nothing is sent, as `quota-ledger produce` stops a file at a bad line. A batch that fails after
//! sending (a broker away) may have landed in part: resending it whole is safe, an event id being the same event
//! forever.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use schemas::{Catalog, Event, EventType, Header, Timestamp, UsageEvent};
use serde::Deserialize;
use std::sync::Arc;

use crate::answer::error;
use crate::app::App;
use crate::tokens::Caller;

/// Most events in one request. Stripe's meter event stream takes at most 100 per request; a batch is awaited whole
/// before its answer, so a larger one only lengthens the wait of its every event and the answer that lists what was
/// refused. What a body of that many events may weigh is [`crate::limits::EVENTS_BODY_LIMIT_BYTES`].
pub const EVENTS_PER_REQUEST_MAX: usize = 100;

/// The CloudEvents `specversion` taken: 1.0, the only one published.
const SPEC_VERSION: &str = "1.0";

/// The media types of the route, as OpenMeter's `POST /api/v1/events` takes them: structured mode, one event; a
/// batch, an array of them; and plain JSON, either.
const SINGLE: &str = "application/cloudevents+json";
const BATCH: &str = "application/cloudevents-batch+json";
const JSON: &str = "application/json";

/// Where `POST /v1/events` sends usage: `serve --brokers`, or a node's brokers and usage topic.
#[derive(Debug, Clone)]
pub struct EventsTo {
    /// Kafka bootstrap servers.
    pub brokers: String,
    /// librdkafka settings (`-X key=value`), as the server's other producers take them.
    pub overrides: Vec<(String, String)>,
    /// The usage topic ingest reads (`quota.usage` unless the node's `--topics` says otherwise).
    pub topic: String,
}

impl EventsTo {
    /// The usage topic under its default name on `brokers`.
    pub fn usage(brokers: &str, overrides: &[(String, String)]) -> EventsTo {
        let topic = EventType::UsageEvent.default_topic().to_string();
        EventsTo { brokers: brokers.to_string(), overrides: overrides.to_vec(), topic }
    }
}

/// The producer the route sends with, made at start.
pub(crate) struct EventsSender {
    producer: kafka::acknowledged::AcknowledgedProducer,
    topic: String,
}

impl EventsSender {
    pub(crate) fn new(to: &EventsTo) -> Result<EventsSender, kafka::producer::ProduceError> {
        let producer = kafka::acknowledged::AcknowledgedProducer::new(&to.brokers, &to.overrides)?;
        Ok(EventsSender { producer, topic: to.topic.clone() })
    }
}

/// A CloudEvent in structured JSON mode, as this route takes it: the attributes of CloudEvents 1.0 (an extension
/// attribute is refused, naming it, as every body of this server refuses a field it would otherwise drop).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CloudEvent {
    specversion: String,
    id: String,
    source: String,
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    subject: Option<String>,
    /// Required here, where CloudEvents leaves it optional: OpenMeter's default, the time of receipt, would make a
    /// resent event a different event under the same id (a conflicting duplicate, never counted).
    time: String,
    #[serde(default)]
    datacontenttype: Option<String>,
    /// Taken and not kept: the schema of `data` is the UsageEvent's, whatever this names.
    #[serde(default, rename = "dataschema")]
    _dataschema: Option<String>,
    data: UsageData,
}

/// An event's `data`: the UsageEvent's fields that are not CloudEvents attributes, under the UsageEvent's names.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UsageData {
    tenant: String,
    metric: String,
    quantity: i64,
    #[serde(default)]
    project: Option<String>,
    #[serde(default)]
    api_key: Option<String>,
    #[serde(default)]
    request_id: Option<String>,
    #[serde(default)]
    attributes: BTreeMap<String, String>,
}

/// Why one event of a request was refused: its index in the batch (0 for a single event), a stable code and the
/// reason in words.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Refused {
    index: usize,
    error: &'static str,
    message: String,
}

impl Refused {
    fn at(index: usize, error: &'static str, message: impl Into<String>) -> Refused {
        Refused { index, error, message: message.into() }
    }
}

/// The UsageEvent `value` (one element of a request) stands for, validated as ingest validates a message; refused
/// naming why.
fn usage_of(index: usize, value: serde_json::Value) -> Result<UsageEvent, Refused> {
    let event: CloudEvent = serde_json::from_value(value)
        .map_err(|e| Refused::at(index, "bad_event", format!("not a CloudEvent of a UsageEvent: {e}")))?;
    if event.specversion != SPEC_VERSION {
        let message = format!("specversion is {:?}; this server takes CloudEvents {SPEC_VERSION}", event.specversion);
        return Err(Refused::at(index, "bad_event", message));
    }
    let usage = EventType::UsageEvent.full_name();
    if event.kind != usage {
        let message = format!("type is {:?}; usage is sent as type {usage:?}", event.kind);
        return Err(Refused::at(index, "bad_event", message));
    }
    if let Some(other) = event.datacontenttype.as_deref().filter(|t| *t != JSON) {
        let message = format!("datacontenttype is {other:?}; data is taken only as {JSON}");
        return Err(Refused::at(index, "bad_event", message));
    }
    let occurred_at = Timestamp::parse_rfc3339(&event.time)
        .map_err(|e| Refused::at(index, "bad_event", format!("time {:?} is not RFC 3339: {e}", event.time)))?;
    let data = event.data;
    let usage = UsageEvent {
        header: Header {
            event_id: event.id,
            occurred_at,
            tenant: data.tenant,
            subject: event.subject,
            project: data.project,
            api_key: data.api_key,
            metric: data.metric,
            source: event.source,
        },
        quantity: data.quantity,
        request_id: data.request_id,
        attributes: data.attributes,
    };
    let usage = Event::Usage(usage);
    schemas::validate(&usage).map_err(|invalid| Refused::at(index, invalid.code(), invalid.to_string()))?;
    match usage {
        Event::Usage(usage) => Ok(usage),
        _ => unreachable!("built as a UsageEvent above"),
    }
}

/// The events of a request's body by its media type: a single event, or a batch (an array) of 1 to
/// [`EVENTS_PER_REQUEST_MAX`]; each element still to be checked. A body that is neither is refused whole.
fn elements(content_type: Option<&str>, body: &[u8]) -> Result<Vec<serde_json::Value>, Box<Response>> {
    // Parameters (`; charset=utf-8`) say nothing JSON does not already: UTF-8 is JSON's encoding.
    let media = content_type.map(|t| t.split(';').next().unwrap_or_default().trim().to_ascii_lowercase());
    let media = media.as_deref();
    if !matches!(media, Some(SINGLE | BATCH | JSON)) {
        let message = format!(
            "Content-Type {:?}: events are sent as {SINGLE} (one), {BATCH} (an array) or {JSON} (either)",
            media.unwrap_or("")
        );
        return Err(Box::new(error(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type", message)));
    }
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| bad_request(format!("the body is not JSON: {e}")))?;
    let elements = match (media, value) {
        (Some(SINGLE | JSON), value @ serde_json::Value::Object(_)) => vec![value],
        (Some(BATCH | JSON), serde_json::Value::Array(elements)) => elements,
        (Some(SINGLE), _) => return Err(bad_request(format!("a {SINGLE} body is one event, a JSON object"))),
        (Some(BATCH), _) => return Err(bad_request(format!("a {BATCH} body is an array of events"))),
        _ => return Err(bad_request("the body is an event (a JSON object) or a batch of them (an array)".into())),
    };
    if elements.is_empty() {
        return Err(bad_request("the batch is empty: send 1 to 100 events".into()));
    }
    if elements.len() > EVENTS_PER_REQUEST_MAX {
        let message =
            format!("the batch holds {} events, more than the {EVENTS_PER_REQUEST_MAX} allowed", elements.len());
        return Err(Box::new(error(StatusCode::BAD_REQUEST, "too_many_events", message)));
    }
    Ok(elements)
}

fn bad_request(message: String) -> Box<Response> {
    Box::new(error(StatusCode::BAD_REQUEST, "bad_request", message))
}

/// Every event of `elements` as a UsageEvent the caller may send, or every refusal: 403 when an event names a tenant
/// the token does not cover, else 400.
fn admitted(caller: &Caller, elements: Vec<serde_json::Value>) -> Result<Vec<UsageEvent>, (StatusCode, Vec<Refused>)> {
    let mut events = Vec::with_capacity(elements.len());
    let mut refused = Vec::new();
    for (index, value) in elements.into_iter().enumerate() {
        match usage_of(index, value) {
            Ok(usage) if !caller.scope.covers(&usage.header.tenant) => {
                let message = format!("this token does not cover tenant {:?}", usage.header.tenant);
                refused.push(Refused::at(index, "forbidden", message));
            }
            Ok(usage) => events.push(usage),
            Err(why) => refused.push(why),
        }
    }
    if refused.is_empty() {
        return Ok(events);
    }
    let forbidden = refused.iter().any(|r| r.error == "forbidden");
    Err((if forbidden { StatusCode::FORBIDDEN } else { StatusCode::BAD_REQUEST }, refused))
}

/// `POST /v1/events`: 204 once the brokers acknowledged every event of the body; 400 or 403 naming each event
/// refused, nothing sent; 503 without brokers, or when they did not acknowledge in time (resend the batch).
pub(crate) async fn ingest(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> Response {
    let caller = match app.tokens.caller(&headers) {
        Ok(caller) => caller,
        Err(unauthorized) => return unauthorized.into_response(),
    };
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|t| t.to_str().ok());
    let elements = match elements(content_type, &body) {
        Ok(elements) => elements,
        Err(refused) => return *refused,
    };
    let events = match admitted(&caller, elements) {
        Ok(events) => events,
        Err((status, refused)) => return refusals(status, &refused).await,
    };
    // Checked after the events, so that a producer trying its events against a server without brokers still learns
    // which of them would be refused.
    let Some(sender) = &app.events else {
        let message = "this server was started without --brokers: usage sent over HTTP goes to Kafka, and there is \
                       none to send it to; restart it with --brokers, or produce to the usage topic";
        return unavailable(error(StatusCode::SERVICE_UNAVAILABLE, "no_brokers", message));
    };
    let catalog = Catalog::builtin();
    let records: Vec<(String, Vec<u8>)> = events
        .into_iter()
        .map(|usage| {
            let tenant = usage.header.tenant.clone();
            (tenant, catalog.encode_single_object(&Event::Usage(usage)))
        })
        .collect();
    match sender.producer.send_all(&sender.topic, &records).await {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => {
            tracing::warn!("serve: POST /v1/events: {}", e);
            let message = format!(
                "the brokers did not acknowledge the batch ({e}); some of it may have been sent: resend it whole, \
                 an event id being the same event forever"
            );
            unavailable(error(StatusCode::SERVICE_UNAVAILABLE, "not_acknowledged", message))
        }
    }
}

/// A 503 that a client may retry in a second.
fn unavailable(mut response: Response) -> Response {
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// The refusal of a batch: [`error`]'s answer, whatever its shape, with each refused event under `errors`, an
/// extension member of the same body.
async fn refusals(status: StatusCode, refused: &[Refused]) -> Response {
    let count = refused.len();
    let message = match status {
        StatusCode::FORBIDDEN => format!("{count} event(s) of the batch name a tenant this token does not cover"),
        _ => format!("{count} event(s) of the batch are not valid UsageEvents"),
    };
    let code = if status == StatusCode::FORBIDDEN { "forbidden" } else { "invalid_events" };
    let (parts, body) = error(status, code, format!("{message}; nothing was sent")).into_parts();
    // The body is the JSON `error` made in memory: reading it back cannot wait or fail.
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap_or_default();
    let mut json: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_else(|_| serde_json::json!({}));
    json["errors"] = serde_json::json!(refused);
    let mut response = (parts.status, axum::Json(json)).into_response();
    for (name, value) in parts.headers.iter().filter(|(name, _)| **name != header::CONTENT_LENGTH) {
        response.headers_mut().insert(name.clone(), value.clone());
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: &str, tenant: &str, quantity: i64) -> serde_json::Value {
        serde_json::json!({
            "specversion": "1.0", "id": id, "source": "checkout", "type": "quota.v1.UsageEvent",
            "subject": "user-7", "time": "2026-11-30T12:00:00Z",
            "data": {"tenant": tenant, "metric": "requests", "quantity": quantity, "attributes": {"region": "eu"}}
        })
    }

    #[test]
    fn a_cloud_event_becomes_the_usage_event_its_data_names() {
        let usage = usage_of(0, event("u-1", "org-42", 3)).unwrap();
        assert_eq!(usage.header.event_id, "u-1");
        assert_eq!(usage.header.tenant, "org-42");
        assert_eq!(usage.header.subject.as_deref(), Some("user-7"));
        assert_eq!(usage.header.source, "checkout");
        assert_eq!(usage.header.occurred_at, Timestamp::parse_rfc3339("2026-11-30T12:00:00Z").unwrap());
        assert_eq!((usage.quantity, usage.attributes["region"].as_str()), (3, "eu"));
    }

    #[test]
    fn each_refusal_names_its_reason() {
        assert_eq!(usage_of(4, event("u-1", "org-42", -1)).unwrap_err().error, "negative_quantity");
        assert_eq!(usage_of(0, event("u-1", "", 1)).unwrap_err().error, "empty_tenant");
        let mut other_type = event("u-1", "org-42", 1);
        other_type["type"] = "api-calls".into();
        let refused = usage_of(2, other_type).unwrap_err();
        assert_eq!((refused.index, refused.error), (2, "bad_event"));
        let mut no_time = event("u-1", "org-42", 1);
        no_time.as_object_mut().unwrap().remove("time");
        assert!(usage_of(0, no_time).unwrap_err().message.contains("time"));
        let mut subject_in_data = event("u-1", "org-42", 1);
        subject_in_data["data"]["subject"] = "user-8".into();
        assert!(usage_of(0, subject_in_data).unwrap_err().message.contains("subject"));
    }

    #[test]
    fn the_media_type_says_one_event_or_a_batch() {
        let one = serde_json::to_vec(&event("u-1", "org-42", 1)).unwrap();
        let batch = serde_json::to_vec(&vec![event("u-1", "org-42", 1); 2]).unwrap();
        assert_eq!(elements(Some(SINGLE), &one).unwrap().len(), 1);
        assert_eq!(elements(Some("application/cloudevents-batch+json; charset=utf-8"), &batch).unwrap().len(), 2);
        assert_eq!(elements(Some(JSON), &batch).unwrap().len(), 2);
        assert_eq!(elements(Some(SINGLE), &batch).unwrap_err().status(), StatusCode::BAD_REQUEST);
        assert_eq!(elements(Some("text/plain"), &one).unwrap_err().status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
        let too_many = serde_json::to_vec(&vec![event("u-1", "org-42", 1); EVENTS_PER_REQUEST_MAX + 1]).unwrap();
        assert_eq!(elements(Some(BATCH), &too_many).unwrap_err().status(), StatusCode::BAD_REQUEST);
        assert_eq!(elements(Some(BATCH), b"[]").unwrap_err().status(), StatusCode::BAD_REQUEST);
    }
}
