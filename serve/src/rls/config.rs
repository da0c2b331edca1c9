//! The mapping file of `--rls-config`: per Envoy `domain`, which descriptors are checked, and where each field of the
//! hook's request comes from (a descriptor entry's value, or a constant).
//!
//! ```toml
//! [[domain]]
//! name = "edge"
//!
//! [[domain.descriptor]]
//! tenant = { key = "tenant" }        # the value of the descriptor's entry "tenant"
//! metric = { value = "api_calls" }   # a constant
//! subject = { key = "user" }         # optional, as project and api_key
//! request_id = "x-request-id"        # optional: the entry whose value is the request id (its idempotency)
//! ```
//!
//! A descriptor is checked by the first mapping of its domain whose entry keys are exactly the descriptor's (the
//! `request_id` entry may be absent): as Lyft's ratelimit matches a descriptor by its keys, so that a descriptor
//! built for another limit (one more entry, a path, say) is not counted by this one.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Largest mapping file read, in bytes: a few hundred mappings take a few tens of KB.
pub const RLS_CONFIG_BYTES_MAX: u64 = 1024 * 1024;

/// The file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    /// The domains, each with its mappings.
    domain: Vec<DomainFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DomainFile {
    /// The `domain` of Envoy's rate limit filter (`domain:` in its configuration).
    name: String,
    /// The descriptors checked, first match first.
    descriptor: Vec<MappingFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MappingFile {
    /// The tenant checked.
    tenant: SourceFile,
    /// The metric checked.
    metric: SourceFile,
    /// The subject, if any.
    subject: Option<SourceFile>,
    /// The project, if any.
    project: Option<SourceFile>,
    /// The API key's name, if any.
    api_key: Option<SourceFile>,
    /// The amount, a whole number; without it the descriptor's `hits_addend`, else the request's (0 is 1).
    amount: Option<SourceFile>,
    /// The descriptor key whose value is the request id (Envoy's `x-request-id`, by a `request_headers` action).
    request_id: Option<String>,
}

/// `{ key = "..." }` or `{ value = "..." }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SourceFile {
    key: Option<String>,
    value: Option<String>,
}

/// Where a field's value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The value of the descriptor's entry of this key.
    Key(String),
    /// This constant.
    Value(String),
}

/// How the descriptors of one shape become a hook request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// The tenant.
    pub tenant: Source,
    /// The metric.
    pub metric: Source,
    /// The subject.
    pub subject: Option<Source>,
    /// The project.
    pub project: Option<Source>,
    /// The API key.
    pub api_key: Option<Source>,
    /// The amount.
    pub amount: Option<Source>,
    /// The request id's entry.
    pub request_id: Option<String>,
    /// The entry keys the fields read (without `request_id`'s).
    keys: BTreeSet<String>,
}

impl Mapping {
    /// Whether this mapping checks a descriptor of these entry keys.
    fn matches(&self, keys: &BTreeSet<&str>) -> bool {
        let mut without_request_id = keys.iter().filter(|k| Some(**k) != self.request_id.as_deref());
        without_request_id.clone().count() == self.keys.len() && without_request_id.all(|k| self.keys.contains(*k))
    }
}

/// The mappings of every domain.
#[derive(Debug, Clone, Default)]
pub struct RlsConfig {
    domains: BTreeMap<String, Vec<Mapping>>,
}

/// The mapping file cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RlsConfigError {
    /// It cannot be read.
    #[error("cannot read the rate limit service's mapping file {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// Larger than [`RLS_CONFIG_BYTES_MAX`].
    #[error("the mapping file {} is larger than {RLS_CONFIG_BYTES_MAX} bytes", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// Not TOML of `[[domain]]` tables with `[[domain.descriptor]]` mappings.
    #[error("the mapping file {} is not valid: {message}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// toml's words, with the line.
        message: String,
    },
    /// A mapping that cannot be used.
    #[error("the mapping file {}, domain {domain:?}, descriptor {number}: {what}", path.display())]
    BadMapping {
        /// The file.
        path: PathBuf,
        /// The domain.
        domain: String,
        /// Which `[[domain.descriptor]]` of the domain, from 1.
        number: usize,
        /// What is wrong.
        what: String,
    },
}

impl RlsConfig {
    /// Reads and checks the mapping file at `path`.
    pub fn read(path: &Path) -> Result<RlsConfig, RlsConfigError> {
        use std::io::Read;
        let file = std::fs::File::open(path).map_err(|source| RlsConfigError::Read { path: path.into(), source })?;
        let mut text = String::new();
        file.take(RLS_CONFIG_BYTES_MAX + 1)
            .read_to_string(&mut text)
            .map_err(|source| RlsConfigError::Read { path: path.into(), source })?;
        if text.len() as u64 > RLS_CONFIG_BYTES_MAX {
            return Err(RlsConfigError::TooLarge { path: path.into() });
        }
        RlsConfig::parse(&text).map_err(|e| e.at(path))
    }

    /// The mappings of `text`, a mapping file's content.
    pub fn parse(text: &str) -> Result<RlsConfig, RlsConfigError> {
        let file: File = toml::from_str(text)
            .map_err(|e| RlsConfigError::Invalid { path: PathBuf::new(), message: e.to_string() })?;
        let mut domains = BTreeMap::new();
        for domain in file.domain {
            let bad = |number: usize, what: String| RlsConfigError::BadMapping {
                path: PathBuf::new(),
                domain: domain.name.clone(),
                number,
                what,
            };
            if domain.name.is_empty() {
                return Err(bad(0, "the domain's name is empty: Envoy requires one".into()));
            }
            if domains.contains_key(&domain.name) {
                return Err(bad(0, "the domain is named twice: give it one [[domain]] table".into()));
            }
            let mut mappings: Vec<Mapping> = Vec::with_capacity(domain.descriptor.len());
            for (i, mapping) in domain.descriptor.iter().enumerate() {
                let mapping = Mapping::of(mapping).map_err(|what| bad(i + 1, what))?;
                if let Some(first) = mappings.iter().position(|m| m.keys == mapping.keys) {
                    let what = format!(
                        "it reads the same descriptor keys as descriptor {}, which always matches first",
                        first + 1
                    );
                    return Err(bad(i + 1, what));
                }
                mappings.push(mapping);
            }
            domains.insert(domain.name.clone(), mappings);
        }
        Ok(RlsConfig { domains })
    }

    /// Whether `domain` has mappings.
    pub fn knows(&self, domain: &str) -> bool {
        self.domains.contains_key(domain)
    }

    /// The mapping that checks a descriptor of `domain` with these entry keys, if any.
    pub fn mapping(&self, domain: &str, keys: &BTreeSet<&str>) -> Option<&Mapping> {
        self.domains.get(domain)?.iter().find(|m| m.matches(keys))
    }
}

impl RlsConfigError {
    /// The error naming the file it is about.
    fn at(self, file: &Path) -> RlsConfigError {
        match self {
            RlsConfigError::Invalid { message, .. } => RlsConfigError::Invalid { path: file.into(), message },
            RlsConfigError::BadMapping { domain, number, what, .. } => {
                RlsConfigError::BadMapping { path: file.into(), domain, number, what }
            }
            other => other,
        }
    }
}

impl Mapping {
    fn of(file: &MappingFile) -> Result<Mapping, String> {
        let source = |name: &str, source: &SourceFile| match (&source.key, &source.value) {
            (Some(key), None) if !key.is_empty() => Ok(Source::Key(key.clone())),
            (None, Some(value)) if !value.is_empty() => Ok(Source::Value(value.clone())),
            _ => Err(format!("{name} needs one of key = \"ENTRY KEY\" or value = \"CONSTANT\", not empty")),
        };
        let optional = |name: &str, file: &Option<SourceFile>| file.as_ref().map(|f| source(name, f)).transpose();
        let mapping = Mapping {
            tenant: source("tenant", &file.tenant)?,
            metric: source("metric", &file.metric)?,
            subject: optional("subject", &file.subject)?,
            project: optional("project", &file.project)?,
            api_key: optional("api_key", &file.api_key)?,
            amount: optional("amount", &file.amount)?,
            request_id: file.request_id.clone(),
            keys: BTreeSet::new(),
        };
        if let Some(Source::Value(value)) = &mapping.amount
            && !value.parse::<i64>().is_ok_and(|amount| amount > 0)
        {
            return Err(format!("amount {value:?} is not a whole number above 0"));
        }
        let sources =
            [&Some(mapping.tenant.clone()), &Some(mapping.metric.clone()), &mapping.subject, &mapping.project];
        let sources = sources.into_iter().chain([&mapping.api_key, &mapping.amount]);
        let keys: BTreeSet<String> = sources
            .filter_map(|s| match s {
                Some(Source::Key(key)) => Some(key.clone()),
                _ => None,
            })
            .collect();
        if let Some(request_id) = &mapping.request_id
            && keys.contains(request_id)
        {
            return Err(format!("request_id {request_id:?} is also a field's key"));
        }
        Ok(Mapping { keys, ..mapping })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A descriptor is checked by the mapping whose keys are exactly its own, the request id's entry optional.
    #[test]
    fn matches_by_exact_keys() {
        let config = RlsConfig::parse(
            "[[domain]]\nname = \"edge\"\n[[domain.descriptor]]\ntenant = { key = \"tenant\" }\n\
             metric = { value = \"calls\" }\nrequest_id = \"rid\"\n[[domain.descriptor]]\ntenant = { key = \"tenant\" }\n\
             metric = { key = \"path\" }\n",
        )
        .unwrap();
        let keys = |k: &[&'static str]| k.iter().copied().collect::<BTreeSet<&str>>();
        assert_eq!(config.mapping("edge", &keys(&["tenant"])).unwrap().metric, Source::Value("calls".into()));
        assert_eq!(config.mapping("edge", &keys(&["tenant", "rid"])).unwrap().metric, Source::Value("calls".into()));
        assert_eq!(config.mapping("edge", &keys(&["tenant", "path"])).unwrap().metric, Source::Key("path".into()));
        assert!(config.mapping("edge", &keys(&["tenant", "user"])).is_none());
        assert!(config.mapping("other", &keys(&["tenant"])).is_none());
    }

    /// A field with both a key and a value, or a mapping that a former one shadows, is refused naming it.
    #[test]
    fn refuses_ambiguous_mappings() {
        let both = "[[domain]]\nname = \"e\"\n[[domain.descriptor]]\ntenant = { key = \"t\", value = \"x\" }\n\
                    metric = { value = \"m\" }\n";
        assert!(RlsConfig::parse(both).unwrap_err().to_string().contains("tenant needs one of"));
        let twice = "[[domain]]\nname = \"e\"\n[[domain.descriptor]]\ntenant = { key = \"t\" }\nmetric = { value = \"m\" }\n\
                     [[domain.descriptor]]\ntenant = { key = \"t\" }\nmetric = { value = \"n\" }\n";
        assert!(RlsConfig::parse(twice).unwrap_err().to_string().contains("descriptor 2"));
    }
}
