//! Which servers quota-ledger's HTTPS clients trust, and the TLS they speak with them: the routing client and the
//! `--cluster` reads (`client`) and the schema registry's REST API (`kafka`) build their ureq agents with
//! [`Trust::tls_config`]. The TLS is rustls on its `ring` provider, as `serve`'s (never aws-lc-rs: see the root
//! Cargo.toml). The roots are the system's (the platform's PEM bundle, found as OpenSSL finds it, `SSL_CERT_FILE` and
//! `SSL_CERT_DIR` honoured), or, given `--ca-file FILE` ([`CA_FILE_ENV`]), the certificate authorities of that file
//! instead of them: a cluster's private authority is trusted for its nodes and no public one is. A plain `http://` URL
//! is not touched.
//!
//! ```no_run
//! let trust = trust::Trust::of(Some(std::path::Path::new("/etc/quota-ledger/ca.pem"))).unwrap();
//! let agent: ureq::Agent = ureq::Agent::config_builder().tls_config(trust.tls_config()).build().into();
//! match agent.get("https://10.0.0.5:8080/healthz").call() {
//!     Ok(response) => println!("{}", response.status()),
//!     Err(error) => println!("{}", trust.explain(&error).unwrap_or_else(|| error.to_string())),
//! }
//! ```

#![deny(missing_docs)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls_pki_types::CertificateDer;
use rustls_pki_types::pem::PemObject;

/// The environment variable of `--ca-file`.
pub const CA_FILE_ENV: &str = "QUOTA_LEDGER_CA_FILE";

/// The certificate authorities trusted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Roots {
    /// The system's: how many were found, and why some could not be read.
    System {
        /// Certificates found.
        found: usize,
        /// Why a file or directory of them could not be read.
        unreadable: Vec<String>,
    },
    /// Those of a PEM file given (`--ca-file`), alone.
    CaFile(PathBuf),
}

impl std::fmt::Display for Roots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Roots::System { found, unreadable } if unreadable.is_empty() => {
                write!(f, "the system's {found} root certificates")
            }
            Roots::System { found, unreadable } => {
                write!(f, "the system's {found} root certificates ({})", unreadable.join("; "))
            }
            Roots::CaFile(path) => write!(f, "the CA file {} alone", path.display()),
        }
    }
}

/// The roots an HTTPS client trusts, as the ureq agents' TLS configuration.
#[derive(Clone)]
pub struct Trust {
    roots: Roots,
    tls: ureq::tls::TlsConfig,
}

impl std::fmt::Debug for Trust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trust").field("roots", &self.roots).finish_non_exhaustive()
    }
}

/// A CA file could not be trusted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrustError {
    /// The file could not be read.
    #[error("cannot read the CA file {}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The operating system's reason.
        source: std::io::Error,
    },
    /// The file holds no PEM certificate, or one that does not decode.
    #[error("the CA file {} holds no readable PEM certificate (-----BEGIN CERTIFICATE-----): {reason}", .path.display())]
    NoCertificate {
        /// The file.
        path: PathBuf,
        /// What was found instead.
        reason: String,
    },
    /// A certificate of the file cannot be a root (not X.509 that webpki parses).
    #[error("certificate {index} of the CA file {} cannot be trusted as an authority: {reason}", .path.display())]
    NotAnAuthority {
        /// The file.
        path: PathBuf,
        /// The certificate's place in the file, from 1.
        index: usize,
        /// rustls' reason.
        reason: String,
    },
}

impl Trust {
    /// The system's roots. Never fails: a system without any leaves nothing trusted, which an HTTPS connection then
    /// reports ([`Trust::explain`]), while plain `http://` goes on working.
    pub fn system() -> Trust {
        let found = rustls_native_certs::load_native_certs();
        let unreadable = found.errors.iter().map(ToString::to_string).collect();
        Trust::with(Roots::System { found: found.certs.len(), unreadable }, &found.certs)
    }

    /// The certificate authorities of the PEM file `path` alone. Each is checked here as rustls will take it, so that
    /// a file that cannot serve is refused at start rather than at the first connection.
    pub fn ca_file(path: &Path) -> Result<Trust, TrustError> {
        let pem = std::fs::read(path).map_err(|source| TrustError::Read { path: path.to_path_buf(), source })?;
        let certificates: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<_, _>>()
            .map_err(|e| TrustError::NoCertificate { path: path.to_path_buf(), reason: e.to_string() })?;
        if certificates.is_empty() {
            let reason = "no certificate in it".to_string();
            return Err(TrustError::NoCertificate { path: path.to_path_buf(), reason });
        }
        let mut store = rustls::RootCertStore::empty();
        for (index, certificate) in certificates.iter().enumerate() {
            store.add(certificate.clone()).map_err(|e| TrustError::NotAnAuthority {
                path: path.to_path_buf(),
                index: index + 1,
                reason: e.to_string(),
            })?;
        }
        Ok(Trust::with(Roots::CaFile(path.to_path_buf()), &certificates))
    }

    /// The CA file's authorities when one is given, else the system's roots.
    pub fn of(ca_file: Option<&Path>) -> Result<Trust, TrustError> {
        match ca_file {
            Some(path) => Trust::ca_file(path),
            None => Ok(Trust::system()),
        }
    }

    fn with(roots: Roots, certificates: &[CertificateDer<'static>]) -> Trust {
        let certificates: Vec<ureq::tls::Certificate<'static>> =
            certificates.iter().map(|c| ureq::tls::Certificate::from_der(c.as_ref()).to_owned()).collect();
        let tls = ureq::tls::TlsConfig::builder()
            .provider(ureq::tls::TlsProvider::Rustls)
            // Given here rather than picked by ureq, whose own choice follows its features (ring or a process default).
            .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .root_certs(ureq::tls::RootCerts::new_with_certs(&certificates))
            .build();
        Trust { roots, tls }
    }

    /// The roots trusted.
    pub fn roots(&self) -> &Roots {
        &self.roots
    }

    /// The TLS configuration of an agent that trusts these roots (ureq's `ConfigBuilder::tls_config`).
    pub fn tls_config(&self) -> ureq::tls::TlsConfig {
        self.tls.clone()
    }

    /// When `error` is TLS's (a certificate refused, a handshake that failed), why, in words that name the roots
    /// trusted and the way to trust another authority; `None` for any other error.
    pub fn explain(&self, error: &ureq::Error) -> Option<String> {
        let tls = match error {
            ureq::Error::Rustls(tls) => tls,
            ureq::Error::Io(io) => io.get_ref()?.downcast_ref::<rustls::Error>()?,
            ureq::Error::Tls(reason) => return Some(format!("TLS failed: {reason}")),
            _ => return None,
        };
        Some(match tls {
            rustls::Error::InvalidCertificate(_) => format!(
                "the server's certificate is not trusted ({tls}), trusting {}: name the certificate authority that \
                 signed it with --ca-file FILE (or {CA_FILE_ENV})",
                self.roots
            ),
            _ => format!("TLS failed: {tls}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A CA file that cannot serve is refused when it is given, naming it, not at the first connection.
    #[test]
    fn a_ca_file_without_a_certificate_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let refused = Trust::ca_file(&empty).unwrap_err().to_string();
        assert!(refused.contains(&format!("the CA file {} holds no", empty.display())), "{refused}");
        let missing = Trust::ca_file(&dir.path().join("missing.pem")).unwrap_err().to_string();
        assert!(missing.starts_with("cannot read the CA file "), "{missing}");
    }
}
