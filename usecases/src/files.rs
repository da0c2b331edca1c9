//! Outputs written whole or not at all: a reader never sees half an export, and a file that cannot be written is said
//! before anything that cannot be undone.

use std::io::Write;
use std::path::Path;

use crate::{Error, Result};

/// Whether a file can be written at `path`, asked before anything that cannot be undone.
pub fn check_writable(path: &Path) -> Result<()> {
    temporary_beside(path).map(drop)
}

/// Writes `bytes` to a temporary file beside `path`, then renames it: a reader never sees half an export. The file
/// gets the mode `File::create` would give it (an existing file's, else 0666 less the umask), not tempfile's 0600
/// that hid exports from the group reading them. Errors name `path`, never the temporary file.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let cannot = |why: String| Error::new(format!("cannot write {}: {why}", path.display()));
    let mut file = temporary_beside(path)?;
    file.write_all(bytes).map_err(|e| cannot(e.to_string()))?;
    file.as_file().sync_all().map_err(|e| cannot(e.to_string()))?;
    file.persist(path).map_err(|e| cannot(e.error.to_string()))?;
    Ok(())
}

/// A new temporary file in `path`'s directory, with the mode `File::create` would give `path`; or why `path`
/// cannot be written, in words that name it (never the temporary file).
fn temporary_beside(path: &Path) -> Result<tempfile::NamedTempFile> {
    let cannot = |why: String| Error::new(format!("cannot write {}: {why}", path.display()));
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if path.is_dir() {
        return Err(cannot("it is a directory".into()));
    }
    if path.as_os_str().as_encoded_bytes().ends_with(b"/") {
        return Err(cannot("a file name cannot end with /".into()));
    }
    match std::fs::metadata(dir) {
        Ok(found) if found.is_dir() => {}
        Ok(_) => return Err(cannot(format!("{} is not a directory", dir.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(cannot(format!("directory {} does not exist", dir.display())));
        }
        Err(e) => return Err(cannot(format!("{}: {e}", dir.display()))),
    }
    let existing = std::fs::metadata(path).ok().map(|found| found.permissions());
    // Named after the export, so that one a kill left behind says what it was (`.november.csv.partial-XXXXXX`).
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let file = tempfile::Builder::new()
        .prefix(&format!(".{name}.partial-"))
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666))
        .tempfile_in(dir)
        // tempfile's error names its temporary file: its kind alone says why.
        .map_err(|e| {
            cannot(format!("cannot create a file in {}: {}", dir.display(), std::io::Error::from(e.kind())))
        })?;
    if let Some(permissions) = existing {
        file.as_file().set_permissions(permissions).map_err(|e| cannot(e.to_string()))?;
    }
    Ok(file)
}
