//! Which config content is active, by hash, and how it compares with the files on disk now.
//!
//! Two hashes name a content:
//!
//! - the **files hash** is the SHA-256 of a manifest with one line per config file read, in
//!   the order the files are loaded: the file's own SHA-256 in hex, two spaces, its name (as
//!   errors name it), a newline. That is the format `sha256sum` writes, so for one file named
//!   `config.yaml` it is `sha256sum config.yaml | sha256sum`, and for a folder the per-file
//!   hashes (listed by `/config_dump`) can be checked one by one. A file read twice (through
//!   a second name) changes it, and a file skipped does not.
//! - the **config hash** is the SHA-256 of the files hash and of what the files resolve to
//!   ([`Config::resolved_digest`]: params with `${NAME}`s expanded, the digests of the Wasm
//!   modules and local lists handlers read; secrets left out, as the hash is published).
//!   The same files under another environment, or beside another module, give another
//!   config hash. What replicas must agree on to share cached verdicts (the runtime's
//!   generation) is this and the secrets as well ([`Config::secrets_digest`]).
//!
//! The files a handler reads are looked at with the config files: one that changed makes
//! the content on disk differ from the active one, as a changed config file does.

use std::fmt::Write as _;
use std::time::Duration;

use mixer_config::{Config, InputFile, SourceFile};
use sha2::{Digest, Sha256};

/// The content of one config load: what it resolved to, the config files and the files
/// its handlers read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigContent {
    /// `sha256:` and 64 hex digits: the config hash of the module docs.
    pub hash: String,
    /// Hex SHA-256 of the resolved config with its secrets ([`Config::secrets_digest`]):
    /// part of the cache generation, never shown.
    pub(crate) secrets_digest: String,
    /// `sha256:` and 64 hex digits: the files hash of the module docs.
    pub files_hash: String,
    /// Each config file as loaded: its name and the hex SHA-256 of its text.
    pub files: Vec<FileHash>,
    /// The files the handlers read, with their digests as loaded.
    pub inputs: Vec<InputFile>,
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
    /// The content of `sources`, which validated into `config`.
    pub fn of(sources: &[SourceFile], config: &Config) -> ConfigContent {
        let (files_hash, files) = files_hash(sources);
        let mut digest = Sha256::new();
        digest.update(files_hash.as_bytes());
        digest.update(b"\n");
        digest.update(config.resolved_digest().as_bytes());
        ConfigContent {
            hash: format!("sha256:{}", hex(&digest.finalize())),
            secrets_digest: config.secrets_digest(),
            files_hash,
            files,
            inputs: config.inputs(),
        }
    }

    /// What is on disk now, as a key to compare with [`ConfigContent::files_hash`] and with
    /// the last content tried: the files hash of `sources` when every file the handlers of
    /// this content read is unchanged; otherwise a hash of it and of what those files hold
    /// now, so that a changed module or list is a new content like a changed config file.
    pub(crate) fn disk_key(&self, sources: &[SourceFile]) -> String {
        let (files_hash, _) = files_hash(sources);
        let now: Vec<InputFile> = self
            .inputs
            .iter()
            .map(|i| InputFile::read(&i.path))
            .collect();
        if now == self.inputs {
            return files_hash;
        }
        let mut digest = Sha256::new();
        digest.update(files_hash.as_bytes());
        for input in &now {
            digest.update(b"\n");
            digest.update(input.path.as_os_str().as_encoded_bytes());
            digest.update(b"  ");
            digest.update(input.sha256.as_deref().unwrap_or("unreadable").as_bytes());
        }
        format!("sha256:{}", hex(&digest.finalize()))
    }
}

/// The files hash of `sources` (see the module docs) and each file's own hash.
pub(crate) fn files_hash(sources: &[SourceFile]) -> (String, Vec<FileHash>) {
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
    let hash = format!("sha256:{}", hex(&Sha256::digest(manifest.as_bytes())));
    (hash, files)
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
    /// The content changed, but was still changing between two reads (a writer part way
    /// through): nothing was loaded or recorded; look again once it has settled.
    Unsettled,
}

/// How long a changed content must stay as it is before it is loaded (see
/// [`Runtime::reload_if_settled`](crate::Runtime::reload_if_settled)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settle {
    /// Time between the two reads that must agree before any changed content loads.
    pub between_reads: Duration,
    /// The longer time a content that removes rules or handlers from the active config must
    /// stay unchanged (counted from its first read): a file caught part way through its
    /// write looks like one whose end was deleted, and a deny rule that vanishes fails open.
    pub before_removal: Duration,
}

impl Settle {
    /// Load what is read at once (`mixer validate`, tests, the first load).
    pub const NONE: Settle = Settle {
        between_reads: Duration::ZERO,
        before_removal: Duration::ZERO,
    };

    /// What `mixer serve`'s watcher waits: 100 ms between two reads, 300 ms for a content
    /// that removes rules or handlers. Short enough that an atomic swap (a ConfigMap update,
    /// git-sync) still decides within half a second; a writer that keeps its file open is
    /// waited for by the watcher itself, however long it pauses.
    pub const DEFAULT: Settle = Settle {
        between_reads: Duration::from_millis(100),
        before_removal: Duration::from_millis(300),
    };
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
        let (hash, files) = files_hash(&[SourceFile::new("config.yaml", "a: 1\n")]);
        assert_eq!(
            files[0].sha256,
            "37b128c59f1f5097f73f82691cb519f1f568667faab5ced1b4ab979d36837eae"
        );
        assert_eq!(
            hash,
            "sha256:966bd14ca0953dc06751c6ac5a4a1054b1861020fa429c979724dbec46c18f23"
        );
    }

    #[test]
    fn names_and_duplicates_change_the_files_hash() {
        let a = files_hash(&[SourceFile::new("a.yaml", "x")]);
        let b = files_hash(&[SourceFile::new("b.yaml", "x")]);
        let twice = files_hash(&[
            SourceFile::new("a.yaml", "x"),
            SourceFile::new("a.yaml", "x"),
        ]);
        assert_ne!(a.0, b.0);
        assert_ne!(a.0, twice.0);
        assert_eq!(a, files_hash(&[SourceFile::new("a.yaml", "x")]));
    }

    #[test]
    fn a_changed_input_changes_the_disk_key_and_its_restoring_changes_it_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let module = dir.path().join("plugin.wasm");
        std::fs::write(&module, b"one").expect("write");
        let sources = [SourceFile::new("a.yaml", "x")];
        let content = ConfigContent {
            hash: String::new(),
            secrets_digest: String::new(),
            files_hash: files_hash(&sources).0,
            files: Vec::new(),
            inputs: vec![InputFile::read(&module)],
        };
        assert_eq!(content.disk_key(&sources), content.files_hash);
        std::fs::write(&module, b"two").expect("write");
        let changed = content.disk_key(&sources);
        assert_ne!(changed, content.files_hash);
        std::fs::write(&module, b"three").expect("write");
        assert_ne!(content.disk_key(&sources), changed);
        std::fs::write(&module, b"one").expect("write");
        assert_eq!(content.disk_key(&sources), content.files_hash);
    }
}
