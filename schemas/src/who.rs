//! [`Who`]: whose a request or an event is, as contract §3's common fields say it (`tenant`, `subject`, `project`,
//! `api_key`): the paying tenant and, inside it, the member of each narrower scope it names. Every record that
//! names them carries this one value, flattened among its own fields, so that its JSON keeps their names and places.
//!
//! ```
//! use schemas::{Scope, Who};
//!
//! let who = Who { project: Some("search".into()), ..Who::tenant("org-42") };
//! assert_eq!(who.member(Scope::PROJECT), Some("search"));
//! assert_eq!(who.member(Scope::TENANT), None);
//! assert_eq!(serde_json::to_string(&who).unwrap(), r#"{"tenant":"org-42","subject":null,"project":"search"}"#);
//! ```

use std::fmt;

use serde::Serialize;
use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};

use crate::event::{Header, Scope};

/// The tenant, and the subject, project and API key a request or an event names: what the policies of each scope
/// count by (contract §3). Serialized as the header serializes them: `subject` always (null when none), `project` and
/// `api_key` only when named, so that a struct flattening it keeps the JSON it had with the four fields of its own.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Who {
    /// The paying organization (`*` on a policy: the plan default).
    pub tenant: String,
    /// The user inside the tenant (or whatever the producer counts SUBJECT policies by).
    pub subject: Option<String>,
    /// The project inside the tenant: what PROJECT policies count by.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// The API key (its name or id, never a secret): what API_KEY policies count by.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
}

impl Who {
    /// `tenant`, naming no subject, project nor API key.
    pub fn tenant(tenant: impl Into<String>) -> Who {
        Who { tenant: tenant.into(), subject: None, project: None, api_key: None }
    }

    /// The member of `scope` it names: its subject, project or API key (`None` when it names none, or for TENANT,
    /// whose windows every request of the tenant counts in), as [`Scope::member_of`] reads a header.
    pub fn member(&self, scope: Scope) -> Option<&str> {
        match scope {
            Scope::TENANT => None,
            Scope::SUBJECT => self.subject.as_deref(),
            Scope::PROJECT => self.project.as_deref(),
            Scope::API_KEY => self.api_key.as_deref(),
        }
    }

    /// Whether `header` names the same tenant, subject, project and API key.
    pub fn is_of(&self, header: &Header) -> bool {
        self.tenant == header.tenant
            && self.subject == header.subject
            && self.project == header.project
            && self.api_key == header.api_key
    }
}

impl Header {
    /// Whose the event is.
    pub fn who(&self) -> Who {
        Who {
            tenant: self.tenant.clone(),
            subject: self.subject.clone(),
            project: self.project.clone(),
            api_key: self.api_key.clone(),
        }
    }
}

/// The fields, as the JSON and the query strings name them.
const FIELDS: &[&str] = &["tenant", "subject", "project", "api_key"];

/// Read by hand rather than derived: flattened into a struct (its only use), a derived reader's errors would not name
/// the field (serde reads flattened fields from a buffer that has lost their keys), and a caller sending
/// `"subject": 5` would be told only "invalid type: integer `5`, expected a string". Each value's error is prefixed
/// with its field's name here, as serde names the struct's own fields. Unknown fields are left for the struct that
/// flattens it, which refuses them or not.
impl<'de> Deserialize<'de> for Who {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Who, D::Error> {
        deserializer.deserialize_struct("Who", FIELDS, WhoVisitor)
    }
}

struct WhoVisitor;

impl<'de> Visitor<'de> for WhoVisitor {
    type Value = Who;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a tenant, and optionally a subject, a project and an api_key")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Who, M::Error> {
        let mut tenant: Option<String> = None;
        let (mut subject, mut project, mut api_key): (Option<Option<String>>, Option<Option<String>>, _) =
            (None, None, None);
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "tenant" => once(&mut tenant, "tenant", named(&mut map, "tenant")?)?,
                "subject" => once(&mut subject, "subject", named(&mut map, "subject")?)?,
                "project" => once(&mut project, "project", named(&mut map, "project")?)?,
                "api_key" => once(&mut api_key, "api_key", named(&mut map, "api_key")?)?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Who {
            tenant: tenant.ok_or_else(|| de::Error::missing_field("tenant"))?,
            subject: subject.flatten(),
            project: project.flatten(),
            api_key: api_key.flatten(),
        })
    }
}

/// The next value, its error naming `field`.
fn named<'de, T: Deserialize<'de>, M: MapAccess<'de>>(map: &mut M, field: &str) -> Result<T, M::Error> {
    map.next_value().map_err(|e| de::Error::custom(format_args!("{field}: {e}")))
}

/// Sets `slot` to `value`, refusing a field given twice.
fn once<T, E: de::Error>(slot: &mut Option<T>, field: &'static str, value: T) -> Result<(), E> {
    match slot.replace(value) {
        Some(_) => Err(E::duplicate_field(field)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    use super::*;

    /// A struct flattening it, as every user does.
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Asked {
        #[serde(flatten)]
        who: Who,
        metric: String,
    }

    // Proves a flattened Who writes the four fields where a struct declaring them wrote them: subject always, project
    // and api_key only when named.
    #[test]
    fn flattened_it_writes_the_header_s_fields_in_their_places() {
        let bare = Asked { who: Who::tenant("org-1"), metric: "tokens".into() };
        assert_eq!(serde_json::to_string(&bare).unwrap(), r#"{"tenant":"org-1","subject":null,"metric":"tokens"}"#);
        let full = Asked {
            who: Who {
                tenant: "org-1".into(),
                subject: Some("alice".into()),
                project: Some("p".into()),
                api_key: Some("k".into()),
            },
            metric: "tokens".into(),
        };
        let json = r#"{"tenant":"org-1","subject":"alice","project":"p","api_key":"k","metric":"tokens"}"#;
        assert_eq!(serde_json::to_string(&full).unwrap(), json);
        assert_eq!(serde_json::from_str::<Asked>(json).unwrap(), full);
    }

    // Proves a flattened Who reads absent and null members as none, and refuses what its struct refuses.
    #[test]
    fn flattened_it_reads_what_is_named_and_leaves_the_rest_to_its_struct() {
        let asked: Asked = serde_json::from_str(r#"{"metric":"tokens","subject":null,"tenant":"org-1"}"#).unwrap();
        assert_eq!(asked, Asked { who: Who::tenant("org-1"), metric: "tokens".into() });
        let unknown = serde_json::from_str::<Asked>(r#"{"tenant":"org-1","metric":"m","junk":1}"#).unwrap_err();
        assert!(unknown.to_string().starts_with("unknown field `junk`"), "{unknown}");
        let missing = serde_json::from_str::<Asked>(r#"{"subject":"alice","metric":"m"}"#).unwrap_err();
        assert!(missing.to_string().starts_with("missing field `tenant`"), "{missing}");
        let twice = serde_json::from_str::<Asked>(r#"{"tenant":"a","tenant":"b","metric":"m"}"#).unwrap_err();
        assert!(twice.to_string().starts_with("duplicate field `tenant`"), "{twice}");
    }

    // Proves a value of the wrong type is refused naming its field, as serde names a struct's own fields.
    #[test]
    fn a_value_of_the_wrong_type_is_refused_naming_its_field() {
        for field in FIELDS {
            let json = format!(r#"{{"tenant":"org-1","{field}":5,"metric":"m"}}"#);
            let error = serde_json::from_str::<Asked>(&json).unwrap_err().to_string();
            let said = format!("{field}: invalid type: integer `5`, expected a string");
            assert!(error.starts_with(&said), "{error}");
        }
    }

    // Proves the member of each scope is the field of that scope, and none for TENANT.
    #[test]
    fn the_member_of_each_scope_is_its_field() {
        let who =
            Who { subject: Some("s".into()), project: Some("p".into()), api_key: Some("k".into()), ..Who::tenant("t") };
        let header = Header {
            event_id: "e".into(),
            occurred_at: crate::Timestamp(0),
            tenant: "t".into(),
            subject: Some("s".into()),
            project: Some("p".into()),
            api_key: Some("k".into()),
            metric: "m".into(),
            source: "test".into(),
        };
        for scope in [Scope::TENANT, Scope::SUBJECT, Scope::PROJECT, Scope::API_KEY] {
            assert_eq!(who.member(scope), scope.member_of(&header), "{scope:?}");
        }
        assert_eq!(header.who(), who);
        assert!(who.is_of(&header));
        assert!(!Who::tenant("t").is_of(&header));
    }
}
