//! Where keys are read from: one file, or a directory of files (a Kubernetes Secret mounted as
//! a volume, one file per data key).

use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::key_set::{KeyFileError, KeySet, MAX_FILE_BYTES};

/// The file or directory the keys are in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// One key file.
    File(PathBuf),
    /// Every visible file directly in the directory (names starting with `.` are skipped;
    /// subdirectories are not read).
    Directory(PathBuf),
}

/// The files of a source as read, in name order.
#[derive(Debug)]
pub struct ReadFiles {
    /// `(name for messages, text)`.
    pub files: Vec<(String, String)>,
    /// A digest of every name and text: equal when nothing changed, so a reload that reads
    /// the same content does not rebuild the set.
    pub fingerprint: [u8; 32],
}

impl ReadFiles {
    /// The key set these files hold.
    pub fn parse(&self) -> Result<KeySet, KeyFileError> {
        KeySet::parse(self.files.iter().map(|(n, t)| (n.as_str(), t.as_str())))
    }
}

impl KeySource {
    /// Reads the source's files.
    ///
    /// A directory with Kubernetes' volume layout (`keys.yaml -> ..data/keys.yaml`,
    /// `..data -> ..2026_12_05_04_00_00.1234`) is read from the folder `..data` points to,
    /// resolved once: the kubelet updates a volume by writing a new folder and renaming a new
    /// `..data` link over the old one, so every file then comes from the same update, never
    /// some from before and some from after it.
    pub fn read(&self) -> Result<ReadFiles, KeyFileError> {
        let mut fingerprint = Sha256::new();
        let mut files = Vec::new();
        match self {
            KeySource::File(path) => {
                let name = path.display().to_string();
                let text = read_capped(path).map_err(|e| KeyFileError::new(&name, "", e))?;
                files.push((name, text));
            }
            KeySource::Directory(dir) => {
                let shown = dir.display().to_string();
                let data = dir.join("..data");
                let from = match std::fs::canonicalize(&data) {
                    Ok(resolved) if resolved.is_dir() => resolved,
                    _ => dir.clone(),
                };
                let entries = std::fs::read_dir(&from)
                    .map_err(|e| KeyFileError::new(&shown, "", format!("cannot list: {e}")))?;
                let mut names = Vec::new();
                for entry in entries {
                    let entry = entry
                        .map_err(|e| KeyFileError::new(&shown, "", format!("cannot list: {e}")))?;
                    let name = entry.file_name().to_string_lossy().into_owned();
                    // Hidden: `..data`, the timestamped folders, editors' and writers'
                    // temporary files.
                    if name.starts_with('.') {
                        continue;
                    }
                    let path = entry.path();
                    // Through symlinks; a subdirectory (or a dangling link) is not a key file.
                    if std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
                        names.push(name);
                    }
                }
                names.sort();
                if names.is_empty() {
                    // An emptied folder is far more often a mount gone wrong than every key
                    // revoked on purpose; `keys: []` in a file says the latter.
                    return Err(KeyFileError::new(&shown, "", "holds no key files"));
                }
                for name in names {
                    let shown_file = dir.join(&name).display().to_string();
                    let text = read_capped(&from.join(&name))
                        .map_err(|e| KeyFileError::new(&shown_file, "", e))?;
                    files.push((shown_file, text));
                }
            }
        }
        for (name, text) in &files {
            fingerprint.update((name.len() as u64).to_le_bytes());
            fingerprint.update(name.as_bytes());
            fingerprint.update((text.len() as u64).to_le_bytes());
            fingerprint.update(text.as_bytes());
        }
        Ok(ReadFiles {
            files,
            fingerprint: fingerprint.finalize().into(),
        })
    }

    /// The configured path.
    pub fn path(&self) -> &Path {
        match self {
            KeySource::File(p) | KeySource::Directory(p) => p,
        }
    }
}

/// A file's text, refused beyond [`MAX_FILE_BYTES`] or when not UTF-8.
fn read_capped(path: &Path) -> Result<String, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read: {e}"))?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(format!("larger than {MAX_FILE_BYTES} bytes"));
    }
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_owned())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    #[test]
    fn a_directory_reads_its_visible_files_in_name_order() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        std::fs::write(root.join("b.yaml"), "keys: [{name: b, key: fake-b}]").expect("write");
        std::fs::write(root.join("a"), "keys: [{name: a, key: fake-a}]").expect("write");
        std::fs::write(root.join(".a.yaml.swp"), "junk").expect("write");
        std::fs::create_dir(root.join("sub")).expect("mkdir");
        std::fs::write(root.join("sub/c.yaml"), "junk").expect("write");
        let read = KeySource::Directory(root.to_owned()).read().expect("reads");
        let names: Vec<&str> = read.files.iter().map(|(n, _)| n.as_str()).collect();
        let shown = |n: &str| root.join(n).display().to_string();
        assert_eq!(names, [shown("a"), shown("b.yaml")]);
        let set = read.parse().expect("parses");
        assert!(set.lookup("fake-a").is_some() && set.lookup("fake-b").is_some());
    }

    #[test]
    fn an_empty_directory_and_a_missing_file_are_errors() {
        let dir = tempfile::tempdir().expect("temp dir");
        let e = KeySource::Directory(dir.path().to_owned())
            .read()
            .expect_err("empty");
        assert_eq!(e.message, "holds no key files");
        let e = KeySource::File(dir.path().join("gone.yaml"))
            .read()
            .expect_err("missing");
        assert!(e.to_string().contains("gone.yaml: cannot read:"), "{e}");
    }

    #[test]
    fn an_oversized_file_is_refused_before_it_is_parsed() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("big.yaml");
        let file = std::fs::File::create(&path).expect("create");
        file.set_len(MAX_FILE_BYTES + 1).expect("sparse file");
        let e = KeySource::File(path).read().expect_err("too big");
        assert_eq!(e.message, format!("larger than {MAX_FILE_BYTES} bytes"));
    }

    /// The kubelet's layout and update: `..data` swapped to a new timestamped folder in one
    /// rename; the files are read from the folder it points to.
    #[test]
    fn a_secret_volume_is_read_from_one_update() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        let v1 = root.join("..2026_12_05_04_00_00.1");
        std::fs::create_dir(&v1).expect("mkdir");
        std::fs::write(v1.join("keys.yaml"), "keys: [{name: a, key: fake-v1}]").expect("write");
        symlink("..2026_12_05_04_00_00.1", root.join("..data")).expect("link");
        symlink("..data/keys.yaml", root.join("keys.yaml")).expect("link");
        let source = KeySource::Directory(root.to_owned());
        let first = source.read().expect("reads");
        assert_eq!(first.files.len(), 1, "..data and the folder are not read");
        assert!(first.parse().expect("parses").lookup("fake-v1").is_some());

        let v2 = root.join("..2026_12_05_04_01_00.2");
        std::fs::create_dir(&v2).expect("mkdir");
        std::fs::write(v2.join("keys.yaml"), "keys: [{name: a, key: fake-v2}]").expect("write");
        symlink("..2026_12_05_04_01_00.2", root.join("..data_tmp")).expect("link");
        std::fs::rename(root.join("..data_tmp"), root.join("..data")).expect("swap");
        std::fs::remove_dir_all(&v1).expect("old folder removed");
        let second = source.read().expect("reads");
        assert_ne!(first.fingerprint, second.fingerprint);
        let set = second.parse().expect("parses");
        assert!(set.lookup("fake-v2").is_some());
        assert!(set.lookup("fake-v1").is_none());
        assert_eq!(
            second.fingerprint,
            source.read().expect("again").fingerprint
        );
    }
}
