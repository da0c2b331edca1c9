//! Certificates for the tests that speak TLS: a certificate authority of the test's own and a server certificate it
//! signed, made with the `openssl` command (docs/testing.md lists it), so that a test trusts exactly what it made.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A certificate authority and a certificate of `localhost` and 127.0.0.1 signed by it, made with the openssl
/// command: `(ca.pem, cert.pem, key.pem)` in `dir`.
pub fn certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl").args(args).current_dir(dir).output().expect("the openssl command");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let p256 = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
    openssl(
        &[
            &["req", "-x509"],
            &p256[..],
            &["-subj", "/CN=quota-ledger tests", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2"],
        ]
        .concat(),
    );
    openssl(&[&["req", "-subj", "/CN=localhost"], &p256[..], &["-keyout", "key.pem", "-out", "cert.csr"]].concat());
    std::fs::write(
        dir.join("cert.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "cert.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "cert.ext",
        "-out",
        "cert.pem",
    ]);
    (dir.join("ca.pem"), dir.join("cert.pem"), dir.join("key.pem"))
}
