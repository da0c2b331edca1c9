//! Who may ask: the token file (contract §7) and the bearer token of each request.
//!
//! The file holds secrets, so it is treated as one: refused when its mode lets group or others read or write it
//! (as ssh refuses a private key), and never quoted back when it does not parse (toml's errors show the line they
//! stopped at, which is often a `secret = ...` line, and serde's quote the value they did not expect). A token may
//! hold the SHA-256 of its secret instead of the secret, so that the file need not hold any secret at all. Each
//! token has a name, recorded on the decisions it asks for.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hook::TenantScope;
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// Shortest secret accepted, in bytes: 16, a guess no client makes by trying. (The refusal says characters: a
/// secret is ASCII in practice.) A `secret_sha256` cannot be checked for it: its secret is the operator's to choose
/// as long.
pub const SECRET_MIN_BYTES: usize = 16;
/// Largest token file read, in bytes: a thousand tokens take about 150 KB.
pub const TOKEN_FILE_BYTES_MAX: u64 = 1024 * 1024;
/// The permission bits a token file must not have: any for group or others. Read, and a secret leaks to every
/// account of the machine; write, and any of them can add a token of their own for `["*"]`.
const GROUP_OR_OTHER_BITS: u32 = 0o077;

/// The token file as written: `[[token]]` tables.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenFile {
    token: Vec<Token>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Token {
    /// Who asks, recorded on every decision this token asks for; `token-N` (its place in the file) when absent,
    /// so that the files contract §7 describes (`secret` and `tenants` only) keep working.
    name: Option<String>,
    /// Sent as `Authorization: Bearer SECRET`.
    secret: Option<String>,
    /// The SHA-256 of the secret, 64 hex digits, instead of `secret`.
    secret_sha256: Option<String>,
    /// Tenant names, or `["*"]` for every tenant.
    tenants: Vec<String>,
    /// Whether the token may change policies and grants (`POST /v1/admin/...`) of the tenants it covers. Off unless
    /// set: a service's token decides, an operator's changes plans.
    #[serde(default)]
    admin: bool,
}

/// The token file cannot be used. No message quotes the file's text: it holds secrets.
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
    /// Group or others may read or write the file.
    #[error(
        "token file {} may be read or written by group or others (mode {mode:03o}): it holds secrets; run \
         `chmod 600 {}`", path.display(), path.display()
    )]
    Exposed {
        /// The token file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// Larger than [`TOKEN_FILE_BYTES_MAX`].
    #[error("token file {} is larger than {TOKEN_FILE_BYTES_MAX} bytes", path.display())]
    TooLarge {
        /// The token file.
        path: PathBuf,
    },
    /// The file is not TOML of `[[token]]` tables with `name`, `secret` or `secret_sha256`, and `tenants`.
    #[error(
        "token file {} is not valid at line {line}, column {column}: {what} (the file's text is not shown: it holds \
         secrets)", path.display()
    )]
    Invalid {
        /// The token file.
        path: PathBuf,
        /// Where the parser stopped, from 1.
        line: usize,
        /// In characters, from 1.
        column: usize,
        /// What is wrong, in words that quote nothing of the file.
        what: String,
    },
    /// The file has no token: nobody could ask.
    #[error("token file {} has no [[token]]", path.display())]
    Empty {
        /// The token file.
        path: PathBuf,
    },
    /// A token whose secret, name or tenants cannot be used.
    #[error("token {number} of {}: {what}", path.display())]
    BadToken {
        /// The token file.
        path: PathBuf,
        /// Which `[[token]]` of the file, from 1.
        number: usize,
        /// What is wrong with it.
        what: String,
    },
}

/// Who asks: a token's name and the tenants it may act for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The token's name, recorded on the decisions it asks for.
    pub name: String,
    /// The tenants it may act for.
    pub scope: TenantScope,
    /// Whether it may change policies and grants (`admin = true` in the token file).
    pub admin: bool,
}

/// A token as kept: the SHA-256 of its secret, whichever way the file gave it.
#[derive(Debug, Clone)]
struct Known {
    secret_sha256: [u8; 32],
    caller: Caller,
}

/// The tokens of a token file: each secret (as its SHA-256), its name and the tenants it may act for.
#[derive(Debug, Clone)]
pub struct Tokens {
    known: Vec<Known>,
}

impl Tokens {
    /// Reads the token file at `path` (contract §7): TOML, `[[token]]` tables with an optional `name`, `secret` or
    /// `secret_sha256`, and `tenants` (a list of tenant names, or `["*"]` for all). Refused when group or others may
    /// read or write it, and when two tokens share a name or a secret.
    pub fn read(path: &Path) -> Result<Tokens, TokenFileError> {
        let text = read_private(path)?;
        let file: TokenFile = toml::from_str(&text).map_err(|e| invalid(path, &text, &e))?;
        if file.token.is_empty() {
            return Err(TokenFileError::Empty { path: path.into() });
        }
        let mut known: Vec<Known> = Vec::with_capacity(file.token.len());
        for (i, token) in file.token.into_iter().enumerate() {
            let number = i + 1;
            let bad = |what: String| TokenFileError::BadToken { path: path.into(), number, what };
            let token = Known::of(token, number).map_err(bad)?;
            if let Some(first) = known.iter().position(|k| k.caller.name == token.caller.name) {
                return Err(bad(format!("its name is token {}'s too: each token has a name of its own", first + 1)));
            }
            if let Some(first) = known.iter().position(|k| k.secret_sha256 == token.secret_sha256) {
                return Err(bad(format!(
                    "its secret is token {}'s too: each token has a secret of its own",
                    first + 1
                )));
            }
            known.push(token);
        }
        Ok(Tokens { known })
    }

    /// Who holds `secret`; `None` for a secret of no token. Compares the secret's SHA-256 with every token's, each
    /// in constant time, so that neither the time taken nor an early stop tells how much of a guess was right.
    pub fn caller_of(&self, secret: &str) -> Option<&Caller> {
        let presented: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
        let mut found = None;
        for token in &self.known {
            if constant_time_eq(&token.secret_sha256, &presented) {
                found = Some(&token.caller);
            }
        }
        found
    }

    /// The caller of a request, from its `Authorization: Bearer SECRET` header. The scheme is matched in any case
    /// (`bearer`, `BEARER`): RFC 9110 makes authentication schemes case-insensitive, and clients send them so.
    pub(crate) fn caller(&self, headers: &HeaderMap) -> Result<Caller, Unauthorized> {
        let value = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).ok_or(Unauthorized::Missing)?;
        let (scheme, secret) = value.trim().split_once([' ', '\t']).ok_or(Unauthorized::Missing)?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Err(Unauthorized::Missing);
        }
        self.caller_of(secret.trim()).cloned().ok_or(Unauthorized::Unknown)
    }
}

impl Known {
    /// A token of the file, `number` from 1, checked: a name (or `token-N`) the ledger accepts, one secret of at
    /// least [`SECRET_MIN_BYTES`] or one SHA-256 of 64 hex digits.
    fn of(token: Token, number: usize) -> Result<Known, String> {
        let name = token.name.clone().unwrap_or_else(|| format!("token-{number}"));
        // Recorded on DecisionEvents and shown by `audit why`: a name as a tenant's is.
        schemas::validate::check_name("name", &name).map_err(|e| e.to_string())?;
        let secret_sha256 = match (token.secret, token.secret_sha256) {
            (Some(secret), None) if secret.len() >= SECRET_MIN_BYTES => Sha256::digest(secret.as_bytes()).into(),
            (Some(_), None) => return Err(format!("a secret has at least {SECRET_MIN_BYTES} characters")),
            (None, Some(hex)) => parse_sha256(&hex)
                .ok_or_else(|| "secret_sha256 is not a SHA-256 (64 hex digits, as `sha256sum` prints)".to_string())?,
            (Some(_), Some(_)) => return Err("has both secret and secret_sha256: give one".into()),
            (None, None) => return Err("has neither secret nor secret_sha256".into()),
        };
        let scope = match token.tenants.iter().any(|t| t == "*") {
            true => TenantScope::All,
            false => TenantScope::Only(token.tenants),
        };
        Ok(Known { secret_sha256, caller: Caller { name, scope, admin: token.admin } })
    }
}

/// Writes a token file as [`Tokens::read`] accepts it: readable and writable by its owner only, an existing file
/// included (for the demo, the benchmarks and tests, which write their own).
pub fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    // The mode above applies to a new file only.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(text.as_bytes())?;
    file.sync_all()
}

/// The text of a token file that only its owner may read and write, at most [`TOKEN_FILE_BYTES_MAX`] bytes. The
/// mode is read from the file opened, not from its path, so that what is checked is what is read.
fn read_private(path: &Path) -> Result<String, TokenFileError> {
    let read = |source| TokenFileError::Read { path: path.into(), source };
    let file = std::fs::File::open(path).map_err(read)?;
    let mode = file.metadata().map_err(read)?.permissions().mode() & 0o777;
    if mode & GROUP_OR_OTHER_BITS != 0 {
        return Err(TokenFileError::Exposed { path: path.into(), mode });
    }
    let mut text = String::new();
    file.take(TOKEN_FILE_BYTES_MAX + 1).read_to_string(&mut text).map_err(read)?;
    if text.len() as u64 > TOKEN_FILE_BYTES_MAX {
        return Err(TokenFileError::TooLarge { path: path.into() });
    }
    Ok(text)
}

/// Where the TOML parser stopped and why, in words of this module: toml's own message shows the line (a secret's,
/// often), and serde's quote the value they did not expect (`invalid type: integer 12345...`).
fn invalid(path: &Path, text: &str, error: &toml::de::Error) -> TokenFileError {
    let at = error.span().map_or(0, |span| span.start).min(text.len());
    let before = text.get(..at).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    let message = error.message();
    let what = if message.starts_with("unknown field") {
        "a key a token file does not have (the file has [[token]] tables of name, secret or secret_sha256, tenants \
         and admin)"
            .to_string()
    } else if let Some(field) = ["name", "secret", "secret_sha256", "tenants", "token"]
        .into_iter()
        .find(|field| message.starts_with(&format!("missing field `{field}`")))
    {
        format!("`{field}` is missing")
    } else if message.starts_with("invalid type") || message.starts_with("invalid value") {
        // serde's own words after "expected" describe the type wanted, never the file's text.
        let expected = message.rsplit_once(", expected ").map_or("another type", |(_, e)| e);
        format!("a value is not of the type wanted (expected {expected})")
    } else {
        "not TOML (a syntax error)".to_string()
    };
    TokenFileError::Invalid { path: path.into(), line, column, what }
}

/// 64 hex digits as 32 bytes.
fn parse_sha256(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.trim().as_bytes();
    if hex.len() != 64 {
        return None;
    }
    let mut digest = [0u8; 32];
    for (byte, pair) in digest.iter_mut().zip(hex.chunks(2)) {
        let digit = |c: u8| (c as char).to_digit(16);
        *byte = u8::try_from(digit(pair[0])? * 16 + digit(pair[1])?).ok()?;
    }
    Some(digest)
}

fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    // black_box: the compiler may not turn the fold into a comparison that stops at the first difference.
    std::hint::black_box(a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y))) == 0
}

/// Why a request is not authenticated: answered 401 with `WWW-Authenticate: Bearer`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Unauthorized {
    Missing,
    Unknown,
}

impl Unauthorized {
    /// What the caller is told, over HTTP and gRPC alike.
    pub(crate) fn message(self) -> &'static str {
        match self {
            Unauthorized::Missing => "send Authorization: Bearer SECRET",
            Unauthorized::Unknown => "unknown token",
        }
    }
}

impl IntoResponse for Unauthorized {
    fn into_response(self) -> Response {
        let mut response = crate::answer::error(StatusCode::UNAUTHORIZED, "unauthorized", self.message());
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
        write_private(&path, text).unwrap();
        (dir, path)
    }

    fn scope_of<'t>(tokens: &'t Tokens, secret: &str) -> Option<&'t TenantScope> {
        tokens.caller_of(secret).map(|caller| &caller.scope)
    }

    #[test]
    fn a_secret_names_its_tenants_and_a_star_names_them_all() {
        let (_dir, path) = written(
            "[[token]]\nsecret = \"0123456789abcdef\"\ntenants = [\"org-1\"]\n\n\
             [[token]]\nsecret = \"fedcba9876543210\"\ntenants = [\"*\"]\n",
        );
        let tokens = Tokens::read(&path).unwrap();
        assert_eq!(scope_of(&tokens, "0123456789abcdef"), Some(&TenantScope::Only(vec!["org-1".into()])));
        assert_eq!(scope_of(&tokens, "fedcba9876543210"), Some(&TenantScope::All));
        assert_eq!(scope_of(&tokens, "0123456789abcde"), None, "a prefix of a secret is no secret");
    }

    // Proves that a token named in the file records that name, one without a name its place, and that a token may
    // give the SHA-256 of its secret (in either case of hex) instead of the secret.
    #[test]
    fn names_default_to_the_place_and_a_digest_stands_for_its_secret() {
        // printf %s 0123456789abcdef | sha256sum
        let digest = "9F9F5111F7B27A781F1F1DDDE5EBC2DD2B796BFC7365C9C28B548E564176929F";
        let (_dir, path) = written(&format!(
            "[[token]]\nname = \"checkout\"\nsecret_sha256 = \"{digest}\"\ntenants = [\"org-1\"]\n\n\
             [[token]]\nsecret = \"fedcba9876543210\"\ntenants = [\"*\"]\n"
        ));
        let tokens = Tokens::read(&path).unwrap();
        let checkout = tokens.caller_of("0123456789abcdef").expect("the secret of the digest");
        assert_eq!(checkout.name, "checkout");
        assert_eq!(tokens.caller_of("fedcba9876543210").unwrap().name, "token-2");
        assert!(tokens.caller_of(&digest.to_lowercase()).is_none(), "the digest itself is no secret");
    }

    #[test]
    fn a_short_secret_is_refused_naming_its_token() {
        let (_dir, path) = written(
            "[[token]]\nsecret = \"0123456789abcdef\"\ntenants = [\"*\"]\n\n\
             [[token]]\nsecret = \"short\"\ntenants = [\"*\"]\n",
        );
        let error = Tokens::read(&path).unwrap_err();
        assert!(matches!(error, TokenFileError::BadToken { number: 2, .. }), "{error}");
        assert!(error.to_string().starts_with("token 2 of "), "{error}");
    }

    // Proves that tokens sharing a name or a secret, a token with both or neither of secret and secret_sha256, a
    // digest that is not one and a name the ledger would refuse are each refused naming the token.
    #[test]
    fn ambiguous_or_malformed_tokens_are_refused_naming_the_token() {
        let refused = [
            ("name = \"a\"\nsecret = \"0123456789abcdef\"", "name = \"a\"\nsecret = \"fedcba9876543210\"", "name"),
            ("secret = \"0123456789abcdef\"", "secret = \"0123456789abcdef\"", "secret is token 1's"),
            (
                "secret = \"0123456789abcdef\"",
                "secret_sha256 = \"9f9f5111f7b27a781f1f1ddde5ebc2dd2b796bfc7365c9c28b548e564176929f\"",
                "secret is token 1's",
            ),
            ("secret = \"0123456789abcdef\"", "secret = \"fedcba9876543210\"\nsecret_sha256 = \"00\"", "both"),
            ("secret = \"0123456789abcdef\"", "name = \"b\"", "neither"),
            ("secret = \"0123456789abcdef\"", "secret_sha256 = \"not hex\"", "64 hex digits"),
            ("secret = \"0123456789abcdef\"", "name = \"ops\\nforged\"\nsecret = \"fedcba9876543210\"", "control"),
        ];
        for (first, second, said) in refused {
            let (_dir, path) =
                written(&format!("[[token]]\n{first}\ntenants = [\"*\"]\n\n[[token]]\n{second}\ntenants = [\"*\"]\n"));
            let error = Tokens::read(&path).unwrap_err().to_string();
            assert!(error.starts_with("token 2 of ") && error.contains(said), "{second}: {error}");
        }
    }

    // Proves that a file group or others may read or write is refused, naming `chmod 600`.
    #[test]
    fn a_file_others_may_read_or_write_is_refused() {
        let (_dir, path) = written("[[token]]\nsecret = \"0123456789abcdef\"\ntenants = [\"*\"]\n");
        for mode in [0o644, 0o640, 0o604, 0o620, 0o602] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let error = Tokens::read(&path).unwrap_err();
            assert!(matches!(error, TokenFileError::Exposed { .. }), "{mode:o}: {error}");
            assert!(error.to_string().contains(&format!("chmod 600 {}", path.display())), "{error}");
        }
        for mode in [0o600, 0o400] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            assert!(Tokens::read(&path).is_ok(), "{mode:o}");
        }
    }

    // Proves that no error of a malformed file quotes its text: a syntax error on a secret's line, a secret of the
    // wrong type, a key that is not one, each says where, in words of its own.
    #[test]
    fn a_malformed_file_is_refused_without_quoting_it() {
        let secret = "s3cr3t-0123456789-do-not-print";
        let files = [
            (format!("[[token]]\nsecret = \"{secret}\ntenants = [\"*\"]\n"), 2, "syntax"),
            (format!("[[token]]\nsecret = {secret}\ntenants = [\"*\"]\n"), 2, "syntax"),
            (format!("[[token]]\nsecret = [\"{secret}\"]\ntenants = [\"*\"]\n"), 2, "expected a string"),
            (format!("[[token]]\nsecret = \"0123456789abcdef\"\ntenants = \"{secret}\"\n"), 3, "expected a sequence"),
            (format!("[[token]]\nsecret = \"0123456789abcdef\"\n{secret} = 1\ntenants = [\"*\"]\n"), 3, "a key"),
            (format!("[[token]]\nsecret = \"{secret}\"\n"), 1, "`tenants` is missing"),
        ];
        for (text, line, said) in files {
            let (_dir, path) = written(&text);
            let error = Tokens::read(&path).unwrap_err().to_string();
            assert!(!error.contains("s3cr3t") && !error.contains("do-not-print"), "{error}");
            assert!(error.contains(&format!("line {line},")) && error.contains(said), "{text}: {error}");
        }
    }
}
