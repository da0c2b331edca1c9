//! The schema registry's REST API at an `https://` URL: asked over TLS, trusting the certificate authority given
//! (`--ca-file`), and refused with a message naming the certificate when only the system's roots are trusted.

#[path = "../../tests/support/tls.rs"]
mod tls;

use std::io::BufRead;
use std::process::{Child, Command, Stdio};

use kafka::schema_registry::RegistryUrl;
use trust::Trust;

const SCHEMA: &str = r#"{"type": "record", "name": "Usage", "fields": [{"name": "quantity", "type": "long"}]}"#;

/// The test registry (tests/support/schema_registry.py) over TLS, killed when dropped.
struct Registry(Child);

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The registry serving `dir/{id}.avsc` to `team:s3cret` over TLS with `cert` and `key`: its port, and the process.
fn registry(dir: &std::path::Path, cert: &std::path::Path, key: &std::path::Path) -> (u16, Registry) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/support/schema_registry.py");
    let mut child = Command::new("python3")
        .arg(script)
        .arg(dir)
        .arg("team:s3cret")
        .args([cert, key])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let stdout = child.stdout.take().unwrap();
    let registry = Registry(child);
    let mut port = String::new();
    std::io::BufReader::new(stdout).read_line(&mut port).unwrap();
    (port.trim().parse().unwrap_or_else(|_| panic!("the registry prints its port, not {port:?}")), registry)
}

// Proves an https:// registry is read over TLS trusting the authority that signed its certificate, and that trusting
// the system's roots alone the failure says the certificate is not trusted and names --ca-file.
#[test]
fn an_https_registry_is_read_trusting_its_authority() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = tls::certificates(dir.path());
    std::fs::write(dir.path().join("51.avsc"), SCHEMA).unwrap();
    let (port, _registry) = registry(dir.path(), &cert, &key);
    let url = format!("https://team:s3cret@localhost:{port}");

    let trusted = RegistryUrl::parse(&url, &Trust::ca_file(&ca).unwrap()).unwrap();
    assert_eq!(trusted.base(), format!("https://localhost:{port}"));
    assert_eq!(trusted.schema(51).unwrap().as_deref(), Some(SCHEMA));
    assert_eq!(trusted.schema(52).unwrap(), None, "an id the registry does not hold");

    let untrusted = RegistryUrl::parse(&url, &Trust::system()).unwrap();
    let refused = untrusted.schema(51).unwrap_err().to_string();
    assert!(refused.contains("certificate is not trusted") && refused.contains("--ca-file"), "{refused}");
    assert!(!refused.contains("s3cret"), "the password is never shown: {refused}");
}
