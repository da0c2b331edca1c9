//! A small filesystem of the test's own: a size-limited tmpfs mounted on a temporary directory (root only),
//! unmounted when dropped, and a filler file that takes all but a margin of its space until it is removed.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs of a given size on a temporary directory; unmounted (and the directory removed) when dropped, also
/// when the test panics. Drop it after every process that has files open on it.
pub struct Tmpfs {
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size_mib` MiB, or says why it cannot (not root, no permission to mount): the caller
    /// fails with it (`testkit::root` first decides whether a test that is not root skips).
    pub fn mount(size_mib: u64) -> Result<Tmpfs, String> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Err("mounting a size-limited tmpfs needs root, and this test runs as another user".into());
        }
        let dir = tempfile::tempdir().map_err(|e| format!("no temporary directory to mount on: {e}"))?;
        let path = dir.path().to_path_buf();
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mib}m,mode=0755"), "tmpfs"])
            .arg(&path)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "`mount -t tmpfs` on {} failed: {}",
                path.display(),
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        Ok(Tmpfs { dir: Some(dir), path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes a file may still take on it.
    pub fn free_bytes(&self) -> u64 {
        let path =
            std::ffi::CString::new(self.path.as_os_str().as_encoded_bytes()).expect("no NUL in a temporary path");
        // SAFETY: `path` is a NUL-terminated string and `stats` a properly sized, writable struct.
        let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
        let code = unsafe { libc::statvfs(path.as_ptr(), &mut stats) };
        assert_eq!(code, 0, "statvfs of {}: {}", self.path.display(), std::io::Error::last_os_error());
        stats.f_bavail * stats.f_frsize
    }

    /// Fills the filesystem with the file `name` until `margin_bytes` (or a little less) are left.
    pub fn fill_leaving(&self, name: &str, margin_bytes: u64) -> PathBuf {
        let filler = self.path.join(name);
        let mut file = std::fs::File::create(&filler).expect("the filler file is created");
        let chunk = vec![0xa5u8; 1 << 16];
        let mut left = self.free_bytes().saturating_sub(margin_bytes);
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            file.write_all(&chunk[..n]).expect("the filler fits: it leaves the margin");
            left -= n as u64;
        }
        file.sync_all().expect("the filler is written");
        filler
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let unmounted = Command::new("umount").arg(&self.path).status().is_ok_and(|s| s.success());
        if !unmounted {
            // Something still has a file open on it (a child that outlived the test): detach it now, the kernel
            // frees it once the last file closes.
            eprintln!("umount {} failed; detaching it lazily", self.path.display());
            let _ = Command::new("umount").arg("-l").arg(&self.path).status();
        }
        // The mount point is an empty directory again: tempfile removes it.
        drop(self.dir.take());
    }
}
