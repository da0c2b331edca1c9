//! Who may ask: the token file (SPEC 7) and the bearer token of each request.

use std::path::{Path, PathBuf};

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hook::TenantScope;
use serde::Deserialize;

/// Shortest secret accepted, in bytes: 16, a guess no client makes by trying. (The refusal says characters: a
/// secret is ASCII in practice.)
pub const SECRET_MIN_BYTES: usize = 16;

/// The token file as written: `[[token]]` tables.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenFile {
    token: Vec<Token>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Token {
    /// Sent as `Authorization: Bearer SECRET`.
    secret: String,
    /// Tenant names, or `["*"]` for every tenant.
    tenants: Vec<String>,
}

/// The token file cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenFileError {
    /// The file cannot be read.
    #[error("cannot read the token file {}", path.display())]
    Read {
        /// The token file.
        path: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// The file is not TOML of `[[token]]` tables with `secret` and `tenants`.
    #[error("token file {} is not valid", path.display())]
    Invalid {
        /// The token file.
        path: PathBuf,
        /// What the TOML parser found.
        source: toml::de::Error,
    },
    /// The file has no token: nobody could ask.
    #[error("token file {} has no [[token]]", path.display())]
    Empty {
        /// The token file.
        path: PathBuf,
    },
    /// A secret shorter than [`SECRET_MIN_BYTES`].
    #[error("token {number} of {}: a secret has at least {SECRET_MIN_BYTES} characters", path.display())]
    ShortSecret {
        /// The token file.
        path: PathBuf,
        /// Which `[[token]]` of the file, from 1.
        number: usize,
    },
}

/// The tokens of a token file: each secret and the tenants it may act for.
#[derive(Debug, Clone)]
pub struct Tokens {
    by_secret: Vec<(String, TenantScope)>,
}

impl Tokens {
    /// Reads the token file at `path` (SPEC 7): TOML, `[[token]]` tables with `secret` and `tenants` (a list of
    /// tenant names, or `["*"]` for all).
    pub fn read(path: &Path) -> Result<Tokens, TokenFileError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| TokenFileError::Read { path: path.into(), source })?;
        let file: TokenFile =
            toml::from_str(&text).map_err(|source| TokenFileError::Invalid { path: path.into(), source })?;
        if file.token.is_empty() {
            return Err(TokenFileError::Empty { path: path.into() });
        }
        let mut by_secret = Vec::with_capacity(file.token.len());
        for (i, token) in file.token.into_iter().enumerate() {
            if token.secret.len() < SECRET_MIN_BYTES {
                return Err(TokenFileError::ShortSecret { path: path.into(), number: i + 1 });
            }
            let scope = match token.tenants.iter().any(|t| t == "*") {
                true => TenantScope::All,
                false => TenantScope::Only(token.tenants),
            };
            by_secret.push((token.secret, scope));
        }
        Ok(Tokens { by_secret })
    }

    /// The tenants the holder of `secret` may act for; `None` for a secret of no token.
    pub fn scope_of(&self, secret: &str) -> Option<&TenantScope> {
        // Compared in constant time per token, so that timing does not reveal a secret's prefix.
        self.by_secret.iter().find(|(s, _)| constant_time_eq(s.as_bytes(), secret.as_bytes())).map(|(_, scope)| scope)
    }

    /// The tenants the caller of a request may act for, from its `Authorization: Bearer SECRET` header.
    pub(crate) fn caller(&self, headers: &HeaderMap) -> Result<TenantScope, Unauthorized> {
        let secret = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .ok_or(Unauthorized::Missing)?;
        self.scope_of(secret).cloned().ok_or(Unauthorized::Unknown)
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Why a request is not authenticated: answered 401 with `WWW-Authenticate: Bearer`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Unauthorized {
    Missing,
    Unknown,
}

impl IntoResponse for Unauthorized {
    fn into_response(self) -> Response {
        let message = match self {
            Unauthorized::Missing => "send Authorization: Bearer SECRET",
            Unauthorized::Unknown => "unknown token",
        };
        let mut response = crate::answer::error(StatusCode::UNAUTHORIZED, "unauthorized", message);
        response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.toml");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    #[test]
    fn a_secret_names_its_tenants_and_a_star_names_them_all() {
        let (_dir, path) = written(
            "[[token]]\nsecret = \"0123456789abcdef\"\ntenants = [\"org-1\"]\n\n\
             [[token]]\nsecret = \"fedcba9876543210\"\ntenants = [\"*\"]\n",
        );
        let tokens = Tokens::read(&path).unwrap();
        assert_eq!(tokens.scope_of("0123456789abcdef"), Some(&TenantScope::Only(vec!["org-1".into()])));
        assert_eq!(tokens.scope_of("fedcba9876543210"), Some(&TenantScope::All));
        assert_eq!(tokens.scope_of("0123456789abcde"), None, "a prefix of a secret is no secret");
    }

    #[test]
    fn a_short_secret_is_refused_naming_its_token() {
        let (_dir, path) = written(
            "[[token]]\nsecret = \"0123456789abcdef\"\ntenants = [\"*\"]\n\n\
             [[token]]\nsecret = \"short\"\ntenants = [\"*\"]\n",
        );
        let error = Tokens::read(&path).unwrap_err();
        assert!(matches!(error, TokenFileError::ShortSecret { number: 2, .. }), "{error}");
        assert!(error.to_string().starts_with("token 2 of "), "{error}");
    }
}
