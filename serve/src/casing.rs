//! The spelling of request members: snake_case (`idempotency_key`, the contract's and today's clients'), or the
//! camelCase the answers' members have (`idempotencyKey`), for every route. Each camelCase member of a JSON body's top
//! level, and each camelCase parameter of a query, is renamed to its snake_case before the route reads it, so that
//! every route reads one spelling and refuses an unknown member by its snake_case name. Only the top level: below
//! it are values (the metric names of `amounts`), not members, and the nested members there are (`rate`, `window`)
//! are one word. A request naming one member in both spellings is refused naming it: which one it meant is not known.

use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};

/// The snake_case of a camelCase name (`apiKey` → `api_key`), or none for a name that is not camelCase: with no
/// ASCII capital, or not starting with a small letter (a name the routes would refuse either way, left as it is sent
/// so that the refusal quotes it).
pub(crate) fn snake_case(name: &str) -> Option<String> {
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) || !name.bytes().any(|b| b.is_ascii_uppercase()) {
        return None;
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return None;
    }
    let mut snake = String::with_capacity(name.len() + 4);
    for c in name.chars() {
        if c.is_ascii_uppercase() {
            snake.push('_');
        }
        snake.push(c.to_ascii_lowercase());
    }
    Some(snake)
}

/// A JSON body with its top-level camelCase members renamed, or as it is when it has none (or is not a JSON object:
/// the route says what is wrong with it); the 400 of a member given in both spellings.
pub(crate) fn body(bytes: axum::body::Bytes) -> Result<axum::body::Bytes, Box<Response>> {
    // Most bodies are today's clients', in snake_case: a body without a capital letter is passed as it came.
    if !bytes.iter().any(u8::is_ascii_uppercase) {
        return Ok(bytes);
    }
    let Ok(members) = serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(&bytes) else {
        return Ok(bytes);
    };
    if !members.keys().any(|name| snake_case(name).is_some()) {
        return Ok(bytes);
    }
    let mut renamed = serde_json::Map::with_capacity(members.len());
    for (name, value) in members {
        let (name, sent) = match snake_case(&name) {
            Some(snake) => (snake, Some(name)),
            None => (name, None),
        };
        if renamed.contains_key(&name) {
            return Err(twice(&name, sent));
        }
        renamed.insert(name, value);
    }
    Ok(serde_json::to_vec(&renamed).expect("a JSON object serializes").into())
}

/// A URI with its query's camelCase parameters renamed; the 400 of a parameter given in both spellings.
pub(crate) fn query(uri: &Uri) -> Result<Option<Uri>, Box<Response>> {
    let Some(query) = uri.query() else { return Ok(None) };
    if !query.split('&').any(|pair| snake_case(pair.split('=').next().unwrap_or_default()).is_some()) {
        return Ok(None);
    }
    let mut names = Vec::new();
    let mut pairs = Vec::new();
    for pair in query.split('&') {
        let (name, value) = pair.split_once('=').map_or((pair, None), |(name, value)| (name, Some(value)));
        let (name, sent) = match snake_case(name) {
            Some(snake) => (snake, Some(name.to_string())),
            None => (name.to_string(), None),
        };
        if names.contains(&name) {
            return Err(twice(&name, sent));
        }
        pairs.push(match value {
            Some(value) => format!("{name}={value}"),
            None => name.clone(),
        });
        names.push(name);
    }
    let renamed = format!("{}?{}", uri.path(), pairs.join("&"));
    Ok(Some(renamed.parse().expect("a path and a query of a URI, renamed, are one")))
}

/// The 400 of a member given twice: in snake_case and in camelCase (`sent`), or twice alike (which the route would
/// refuse as a duplicate).
fn twice(name: &str, sent: Option<String>) -> Box<Response> {
    let camel = sent.unwrap_or_else(|| name.to_string());
    let message = format!("given twice, as `{name}` and as `{camel}`: give it once, in either spelling");
    let body = serde_json::json!({"error": "bad_request", "message": format!("{name}: {message}"), "field": name});
    Box::new((StatusCode::BAD_REQUEST, axum::Json(body)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn camel_case_names_become_snake_case_and_others_stay() {
        assert_eq!(snake_case("idempotencyKey").as_deref(), Some("idempotency_key"));
        assert_eq!(snake_case("openAlertAfterS").as_deref(), Some("open_alert_after_s"));
        for name in ["tenant", "ttl_ms", "Tenant", "api-Key", "x_Y"] {
            assert_eq!(snake_case(name), None, "{name}");
        }
    }

    #[test]
    fn a_body_s_top_level_members_are_renamed_and_a_member_in_both_spellings_refused() {
        let sent = br#"{"tenant":"org-1","ttlMs":5,"amounts":{"gpuSeconds":1}}"#;
        let renamed = body(axum::body::Bytes::from_static(sent)).unwrap_or_else(|_| panic!("renamed"));
        assert_eq!(&renamed[..], br#"{"tenant":"org-1","ttl_ms":5,"amounts":{"gpuSeconds":1}}"#);
        let snake = axum::body::Bytes::from_static(br#"{"tenant":"ORG","ttl_ms":5}"#);
        assert_eq!(body(snake.clone()).unwrap_or_else(|_| panic!("as sent")), snake);
        assert_eq!(
            body(axum::body::Bytes::from_static(br#"{"ttl_ms":1,"ttlMs":2}"#)).err().map(|r| r.status()),
            Some(StatusCode::BAD_REQUEST)
        );
        let uri: Uri = "/v1/quotas?tenant=org-1&apiKey=k%2F1".parse().unwrap();
        assert_eq!(query(&uri).unwrap_or_else(|_| panic!("renamed")).unwrap(), "/v1/quotas?tenant=org-1&api_key=k%2F1");
    }
}
