//! Which config content is active, by hash, and how it compares with the files on disk now.
//!
//! The hash is the SHA-256 of a manifest with one line per file read, in the order the
//! files are loaded: the file's own SHA-256 in hex, two spaces, its name (as errors name
//! it), a newline. That is the format `sha256sum` writes, so for one file named
//! `config.yaml` the config hash is `sha256sum config.yaml | sha256sum`, and for a folder
//! the per-file hashes (listed by `/config_dump`) can be checked one by one. A file read
//! twice (through a second name) changes the hash, and a file skipped does not.

use std::fmt::Write as _;

use mixer_config::SourceFile;
use sha2::{Digest, Sha256};

/// The content of one config load: the hash of all of it and of each file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigContent {
    /// `sha256:` and 64 hex digits, over the manifest described in the module docs.
    pub hash: String,
    /// Each file as loaded: its name and the hex SHA-256 of its text.
    pub files: Vec<FileHash>,
}

/// One file's name and content hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileHash {
    /// The name errors use for the file.
    pub name: String,
    /// Hex SHA-256 of its text.
    pub sha256: String,
}

impl ConfigContent {
    /// The content of `sources`, in their order.
    pub fn of(sources: &[SourceFile]) -> ConfigContent {
        let files: Vec<FileHash> = sources
            .iter()
            .map(|s| FileHash {
                name: s.name.clone(),
                sha256: hex(&Sha256::digest(s.text.as_bytes())),
            })
            .collect();
        let mut manifest = String::new();
        for f in &files {
            let _ = writeln!(manifest, "{}  {}", f.sha256, f.name);
        }
        ConfigContent {
            hash: format!("sha256:{}", hex(&Sha256::digest(manifest.as_bytes()))),
            files,
        }
    }
}

/// How the active config compares with what is on disk now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DiskState {
    /// The files on disk are the active content.
    Current,
    /// The files changed and have not been tried yet (a reload is due after the debounce,
    /// or at the next periodic check).
    Pending {
        /// Hash of the files on disk.
        disk_hash: String,
    },
    /// The files changed, were tried and rejected: the previous content still serves.
    Stale {
        /// Hash of the files on disk.
        disk_hash: String,
    },
    /// The files could not be read (a folder removed, a dangling symlink).
    Unreadable {
        /// Why.
        error: String,
    },
}

impl DiskState {
    /// `current`, `pending`, `stale` or `unreadable`.
    pub fn label(&self) -> &'static str {
        match self {
            DiskState::Current => "current",
            DiskState::Pending { .. } => "pending",
            DiskState::Stale { .. } => "stale",
            DiskState::Unreadable { .. } => "unreadable",
        }
    }

    /// The hash of the files on disk, when known and different from the active one.
    pub fn disk_hash(&self) -> Option<&str> {
        match self {
            DiskState::Pending { disk_hash } | DiskState::Stale { disk_hash } => Some(disk_hash),
            DiskState::Current | DiskState::Unreadable { .. } => None,
        }
    }
}

/// What one look at the files found (see `Runtime::reload_if_changed`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckOutcome {
    /// The files hold the content last tried: nothing to do.
    Unchanged,
    /// The content changed and was loaded as this snapshot id.
    Reloaded(u64),
    /// The content changed and was rejected (or could not be read); the previous snapshot
    /// stays.
    Rejected,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_file_hashes_as_sha256sum_of_sha256sum() {
        // Both values from coreutils on a file holding "a: 1\n":
        // `sha256sum config.yaml` and `sha256sum config.yaml | sha256sum`.
        let content = ConfigContent::of(&[SourceFile::new("config.yaml", "a: 1\n")]);
        assert_eq!(
            content.files[0].sha256,
            "37b128c59f1f5097f73f82691cb519f1f568667faab5ced1b4ab979d36837eae"
        );
        assert_eq!(
            content.hash,
            "sha256:966bd14ca0953dc06751c6ac5a4a1054b1861020fa429c979724dbec46c18f23"
        );
    }

    #[test]
    fn names_and_duplicates_change_the_hash() {
        let a = ConfigContent::of(&[SourceFile::new("a.yaml", "x")]);
        let b = ConfigContent::of(&[SourceFile::new("b.yaml", "x")]);
        let twice = ConfigContent::of(&[
            SourceFile::new("a.yaml", "x"),
            SourceFile::new("a.yaml", "x"),
        ]);
        assert_ne!(a.hash, b.hash);
        assert_ne!(a.hash, twice.hash);
        assert_eq!(a, ConfigContent::of(&[SourceFile::new("a.yaml", "x")]));
    }
}
