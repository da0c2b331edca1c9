//! The idempotency key of a check, a reservation or a lease: the body's `idempotency_key` (today's clients) or the
//! `Idempotency-Key` header of the IETF draft (draft-ietf-httpapi-idempotency-key-header), its value a Structured
//! Fields sf-string (`Idempotency-Key: "8e03978e-40d5"`, RFC 9651 §3.3.3). Both at once must agree. Where the key came
//! from decides the status of a key reused with another request: the draft's 422 under the header, today's 409 under
//! the body field, so that a client written to the 409 keeps reading it.

use axum::Json;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use hook::HookError;
use serde::de::DeserializeOwned;

use crate::answer::{bad_json, key_reused};

/// The draft's header.
pub(crate) const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The body member of the key, as today's clients send it.
const FIELD: &str = "idempotency_key";

/// Where a request's idempotency key came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyFrom {
    /// The body's `idempotency_key` (today's clients).
    Body,
    /// The `Idempotency-Key` header (the draft's clients).
    Header,
}

impl KeyFrom {
    /// The hook's answer, a key reused with another request answered as its source says: 422 under the header (the
    /// draft: "an attempt to reuse an idempotency key with a different request payload"), else the answer `answered`
    /// makes of it (today's 409 among them).
    pub(crate) fn answer<T>(
        self,
        result: Result<T, HookError>,
        answered: impl FnOnce(Result<T, HookError>) -> Response,
    ) -> Response {
        match result {
            Err(e @ HookError::IdempotencyKeyReused { .. }) if self == KeyFrom::Header => {
                key_reused(e, StatusCode::UNPROCESSABLE_ENTITY)
            }
            result => answered(result),
        }
    }
}

/// A JSON body whose `idempotency_key` the `Idempotency-Key` header may give, and where the key came from; or the
/// error answer (400, 415) of a body that is not one. Never refused by the extractor itself: the caller's token is
/// asked first ([`crate::routes`]), as for every body.
pub(crate) struct Keyed<T>(pub(crate) Result<(T, KeyFrom), Response>);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequest<S> for Keyed<T> {
    type Rejection = std::convert::Infallible;

    async fn from_request(request: Request, state: &S) -> Result<Keyed<T>, Self::Rejection> {
        let header = match header_key(request.headers()) {
            Ok(header) => header,
            Err(refused) => return Ok(Keyed(Err(*refused))),
        };
        let Some(key) = header else {
            // Today's clients: the body read exactly as before the header existed.
            let body = Json::<T>::from_request(request, state).await;
            return Ok(Keyed(body.map(|Json(body)| (body, KeyFrom::Body)).map_err(bad_json)));
        };
        let members = match Json::<serde_json::Map<String, serde_json::Value>>::from_request(request, state).await {
            Ok(Json(members)) => members,
            Err(rejection) => return Ok(Keyed(Err(bad_json(rejection)))),
        };
        Ok(Keyed(keyed(members, key).map_err(|refused| *refused)))
    }
}

/// The body with the header's key in it, read as `T`: a body naming another key is refused naming the field.
fn keyed<T: DeserializeOwned>(
    mut members: serde_json::Map<String, serde_json::Value>,
    key: String,
) -> Result<(T, KeyFrom), Box<Response>> {
    match members.get(FIELD) {
        Some(serde_json::Value::String(given)) if *given != key => {
            let message = format!(
                "{FIELD}: {given:?} differs from the Idempotency-Key header's {key:?}: give the key once, or the same \
                 in both"
            );
            return Err(bad_request(FIELD, message));
        }
        // Of another type: `T` says so below, naming the field.
        Some(_) => {}
        None => {
            members.insert(FIELD.into(), key.into());
        }
    }
    // Read as the body of a client without the header is, so that every refusal reads the same.
    let bytes = serde_json::to_vec(&members).expect("a JSON object serializes");
    Json::<T>::from_bytes(&bytes).map(|Json(body)| (body, KeyFrom::Header)).map_err(|r| Box::new(bad_json(r)))
}

/// The key of the `Idempotency-Key` header, none without one, or the 400 of a header that says none well.
fn header_key(headers: &HeaderMap) -> Result<Option<String>, Box<Response>> {
    let mut values = headers.get_all(IDEMPOTENCY_KEY).iter();
    let Some(value) = values.next() else { return Ok(None) };
    if values.next().is_some() {
        return Err(bad_request("Idempotency-Key", "given more than once: one request has one key".into()));
    }
    sf_string(value.as_bytes()).map(Some).map_err(|why| {
        bad_request("Idempotency-Key", format!("{why}: the draft's value is an sf-string, as \"key-1\""))
    })
}

/// The text of an sf-string (RFC 9651 §4.2.5: `"`, printable ASCII with `\"` and `\\` escaped, `"`), or why the value
/// is none. An unquoted value is taken as it is, when it is printable ASCII: clients written to the key headers that
/// came before the draft (Stripe's, PayPal's) send the key bare, and a bare key cannot be mistaken for a quoted one.
pub(crate) fn sf_string(value: &[u8]) -> Result<String, String> {
    let value = value.trim_ascii();
    if value.is_empty() {
        return Err("empty".into());
    }
    if value.iter().any(|b| !(0x20..=0x7e).contains(b)) {
        return Err("holds a byte that is not printable ASCII".into());
    }
    let Some(quoted) = value.strip_prefix(b"\"") else {
        return Ok(String::from_utf8_lossy(value).into_owned());
    };
    let mut text = String::with_capacity(quoted.len());
    let mut bytes = quoted.iter();
    while let Some(&byte) = bytes.next() {
        match byte {
            b'\\' => match bytes.next() {
                Some(&escaped @ (b'"' | b'\\')) => text.push(escaped as char),
                _ => return Err("holds a backslash that escapes neither `\"` nor `\\`".into()),
            },
            b'"' if bytes.as_slice().is_empty() => {
                if text.is_empty() {
                    return Err("an empty string".into());
                }
                return Ok(text);
            }
            b'"' => return Err("holds more after its closing quote".into()),
            byte => text.push(byte as char),
        }
    }
    Err("has no closing quote".into())
}

/// A 400 naming `field`.
fn bad_request(field: &str, message: String) -> Box<Response> {
    let body = serde_json::json!({"error": "bad_request", "message": message, "field": field});
    Box::new((StatusCode::BAD_REQUEST, Json(body)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_sf_string_is_unquoted_and_unescaped_and_a_bare_key_taken_as_it_is() {
        assert_eq!(sf_string(br#""k-1""#), Ok("k-1".to_string()));
        assert_eq!(sf_string(br#" "a \"b\" \\c" "#), Ok(r#"a "b" \c"#.to_string()));
        assert_eq!(sf_string(b"8e03978e-40d5"), Ok("8e03978e-40d5".to_string()));
        for bad in [&b"\"open"[..], b"\"\"", b"\"a\"b\"", b"\"a\\nb\"", b"", b"  ", "\"é\"".as_bytes()] {
            assert!(sf_string(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
