//! [`WatchedFile`]: data an adapter keeps in a file (an allow list, a table), read again
//! when the file changes, so editing it needs no restart.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use mixer_adapter_api::{AdapterError, ErrorKind};

/// What the file looked like when it was last read: its modification time and size.
type Stamp = (Option<SystemTime>, u64);

/// A file's contents as `parse` makes them, read again whenever the file's modification
/// time or size changes (looked at on each [`WatchedFile::get`]: one `stat`).
pub struct WatchedFile<T> {
    path: PathBuf,
    parse: fn(&str) -> T,
    read: Mutex<Option<(Stamp, Arc<T>)>>,
}

impl<T> std::fmt::Debug for WatchedFile<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("WatchedFile").field(&self.path).finish()
    }
}

impl<T> WatchedFile<T> {
    /// `path`, read on the first [`WatchedFile::get`].
    pub fn new(path: impl AsRef<Path>, parse: fn(&str) -> T) -> WatchedFile<T> {
        WatchedFile {
            path: path.as_ref().to_path_buf(),
            parse,
            read: Mutex::new(None),
        }
    }

    /// The contents, read again if the file changed since the last call.
    ///
    /// # Errors
    ///
    /// The file cannot be read (it went away, or is not UTF-8): a transient
    /// [`ErrorKind::Unavailable`] naming the file, which the mixer reads as "could not
    /// decide", so the handler's fail policy applies.
    pub fn get(&self) -> Result<Arc<T>, AdapterError> {
        let unreadable = |e: std::io::Error| {
            let path = self.path.display();
            AdapterError::transient(ErrorKind::Unavailable, format!("{path}: {e}"))
        };
        let meta = std::fs::metadata(&self.path).map_err(unreadable)?;
        let stamp = (meta.modified().ok(), meta.len());
        let mut read = self.read.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((seen, data)) = &*read
            && *seen == stamp
        {
            return Ok(data.clone());
        }
        let text = std::fs::read_to_string(&self.path).map_err(unreadable)?;
        let data = Arc::new((self.parse)(&text));
        *read = Some((stamp, data.clone()));
        Ok(data)
    }
}

impl WatchedFile<HashSet<String>> {
    /// A list file (an allow or deny list): one value per line, trimmed; blank lines and
    /// lines starting with `#` are skipped.
    pub fn list(path: impl AsRef<Path>) -> WatchedFile<HashSet<String>> {
        WatchedFile::new(path, list_values)
    }
}

fn list_values(text: &str) -> HashSet<String> {
    let lines = text.lines().map(str::trim);
    let values = lines.filter(|l| !l.is_empty() && !l.starts_with('#'));
    values.map(String::from).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(String::from).collect()
    }

    #[test]
    fn follows_the_file_and_says_when_it_is_gone() {
        let dir = std::env::temp_dir().join(format!("watched-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("list.txt");
        std::fs::write(&path, "a\n").expect("write");
        let file = WatchedFile::new(&path, lines);
        assert_eq!(*file.get().expect("read"), ["a"]);
        // Another size: read again even within the file system's time granularity.
        std::fs::write(&path, "a\nbb\n").expect("rewrite");
        assert_eq!(*file.get().expect("read again"), ["a", "bb"]);
        std::fs::remove_file(&path).expect("remove");
        let gone = file.get().expect_err("no file");
        assert_eq!((gone.kind, gone.retryable), (ErrorKind::Unavailable, true));
        assert!(
            gone.message.starts_with(&path.display().to_string()),
            "{gone}"
        );
        let _ = std::fs::remove_dir(&dir);
    }

    #[test]
    fn a_list_skips_blank_lines_and_comments() {
        let values = list_values("# users\n alice \n\nbob\n#carol\n");
        assert_eq!(values, HashSet::from(["alice".into(), "bob".into()]));
    }
}
