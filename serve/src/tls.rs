//! `serve` on a real network: TLS from a certificate chain and a private key in PEM files (rustls), and the rule
//! that a server reachable from other machines speaks TLS unless its operator says otherwise.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

/// The PEM files of a TLS server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, the server's own certificate first (as Let's Encrypt's `fullchain.pem` has it).
    pub certificate: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// TLS cannot be set up from the files given.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A file cannot be read, or holds no PEM object of the kind wanted.
    #[error("cannot read {what} from {}: {message}", path.display())]
    Read {
        /// "a certificate" or "a private key".
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// rustls refused the pair (the key does not match the certificate, an algorithm it does not support).
    #[error("cannot serve TLS with the certificate {} and the key {}", certificate.display(), key.display())]
    Refused {
        /// The certificate file.
        certificate: PathBuf,
        /// The key file.
        key: PathBuf,
        /// rustls' reason.
        source: rustls::Error,
    },
}

/// Whether `address` is reachable from this machine only (127.0.0.0/8, ::1, or ::ffff:127.0.0.1).
pub fn is_loopback(address: &SocketAddr) -> bool {
    address.ip().to_canonical().is_loopback()
}

/// The acceptor of TLS connections for `files`: TLS 1.3 and 1.2, HTTP/1.1 announced by ALPN (a client asking for
/// HTTP/2 alone is refused in the handshake rather than after it).
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, TlsError> {
    acceptor_speaking(files, b"http/1.1")
}

/// The acceptor of `--rls-listen`'s TLS connections: as [`acceptor`]'s, HTTP/2 announced by ALPN (`h2`), which gRPC
/// clients require.
pub fn grpc_acceptor(files: &TlsFiles) -> Result<TlsAcceptor, TlsError> {
    acceptor_speaking(files, b"h2")
}

fn acceptor_speaking(files: &TlsFiles, protocol: &[u8]) -> Result<TlsAcceptor, TlsError> {
    let certificates = read_certificates(&files.certificate)?;
    let key = read_key(&files.key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let refused = |source| TlsError::Refused { certificate: files.certificate.clone(), key: files.key.clone(), source };
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(refused)?
        .with_no_client_auth()
        .with_single_cert(certificates, key)
        .map_err(refused)?;
    config.alpn_protocols = vec![protocol.to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let read = |message: String| TlsError::Read { what: "a certificate", path: path.into(), message };
    let certificates = CertificateDer::pem_file_iter(path)
        .map_err(|e| read(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| read(e.to_string()))?;
    if certificates.is_empty() {
        return Err(read("no BEGIN CERTIFICATE block in it".into()));
    }
    Ok(certificates)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    // Warned, not refused (the token file is refused): certificate managers and Kubernetes secrets write keys
    // readable by all by default, and the key guards the connection's privacy, not who may consume quota.
    if let Ok(metadata) = std::fs::metadata(path)
        && metadata.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(
            key = %path.display(),
            mode = %format_args!("{:03o}", metadata.permissions().mode() & 0o777),
            "serve: the TLS key may be read or written by group or others; run `chmod 600` on it"
        );
    }
    // The error never quotes the file: it is a private key.
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::Read {
        what: "a private key",
        path: path.into(),
        message: match e {
            rustls_pki_types::pem::Error::NoItemsFound => "no BEGIN PRIVATE KEY block in it".into(),
            rustls_pki_types::pem::Error::Io(e) => e.to_string(),
            _ => "not a PEM private key".into(),
        },
    })
}
