//! Files a handler's config reads besides the config files: `<name>File` secrets, a Wasm
//! module (an adapter's [`path_params`](mixer_adapter_api::Adapter::path_params)), a local
//! list ([`files_read`](mixer_adapter_api::Adapter::files_read)).
//!
//! Their content decides as much as the config's text does, so each is recorded with its
//! digest when config loads: the digests go into the config's hash (replicas share cached
//! verdicts only when it is equal), a handler whose files changed is rebuilt rather than
//! reused, and the runtime reloads when one of them changes on disk.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// One file a handler's config read, and what it held then.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InputFile {
    /// The path as the config gives it (made absolute against the config's folder where the
    /// adapter asks for that).
    pub path: PathBuf,
    /// Hex SHA-256 of its bytes; `None` when it could not be read (a change from there, the
    /// file appearing, is a change like any other).
    pub sha256: Option<String>,
    /// A `<name>File` secret: its digest is kept out of what is published (the config hash),
    /// as a digest of a short secret would let it be guessed.
    pub secret: bool,
}

impl InputFile {
    /// `path` as it is on disk now.
    pub fn read(path: &Path) -> InputFile {
        InputFile {
            path: path.to_path_buf(),
            sha256: std::fs::read(path).ok().map(|bytes| sha256_hex(&bytes)),
            secret: false,
        }
    }

    /// The secret file at `path`, read by the caller as `bytes`: the digest is of what was
    /// used, not of a second read that could see a newer file.
    pub fn secret(path: &Path, bytes: &[u8]) -> InputFile {
        InputFile {
            path: path.to_path_buf(),
            sha256: Some(sha256_hex(bytes)),
            secret: true,
        }
    }

    /// True when the file on disk no longer holds what was recorded.
    pub fn changed(&self) -> bool {
        InputFile::read(&self.path).sha256 != self.sha256
    }

    /// This file as it is on disk now, secret or not as it was.
    pub fn now(&self) -> InputFile {
        InputFile {
            secret: self.secret,
            ..InputFile::read(&self.path)
        }
    }
}

/// Hex SHA-256 of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// `bytes` in lower-case hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Appends `value` to `digest` with its length first, so that no two sequences of values
/// feed the hash the same bytes.
pub(crate) fn feed(digest: &mut Sha256, value: &[u8]) {
    digest.update((value.len() as u64).to_le_bytes());
    digest.update(value);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_recorded_by_digest_and_its_change_is_seen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("module.wasm");
        std::fs::write(&path, b"one").expect("write");
        let recorded = InputFile::read(&path);
        // `printf one | sha256sum`
        assert_eq!(
            recorded.sha256.as_deref(),
            Some("7692c3ad3540bb803c020b3aee66cd8887123234ea0c6e7143c0add73ff431ed")
        );
        assert!(!recorded.changed());
        std::fs::write(&path, b"two").expect("write");
        assert!(recorded.changed());
        std::fs::remove_file(&path).expect("remove");
        let gone = InputFile::read(&path);
        assert_eq!(gone.sha256, None);
        assert!(!gone.changed());
        std::fs::write(&path, b"one").expect("write");
        assert!(gone.changed());
        assert_eq!(InputFile::secret(&path, b"one").sha256, recorded.sha256);
    }
}
