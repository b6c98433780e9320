//! Where lines go: standard streams, an appended file, or a file rotated by size and age.
//!
//! Rotated files are renamed beside the active one with the rotation time (UTC, milliseconds)
//! between the stem and the extension, as lumberjack (used by Istio) named its backups:
//! `access.log` becomes `access-2024-05-01T10-20-30.123.log`; a second rotation within the
//! same millisecond adds a counter: `access-2024-05-01T10-20-30.123-1.log`.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use crate::config::{Output, Rotation};

/// The wall clock; replaced in tests.
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// The system clock.
pub fn system_clock() -> Clock {
    Arc::new(SystemTime::now)
}

/// An open output.
pub enum Sink {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
    /// A file opened for appending.
    File(Mutex<File>),
    /// A rotated file.
    Rotated(Mutex<RotatingFile>),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn open_append(path: &Path) -> io::Result<File> {
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        fs::create_dir_all(dir)?;
    }
    OpenOptions::new().create(true).append(true).open(path)
}

impl Sink {
    /// Opens (creating if needed) the output.
    pub fn open(output: &Output, clock: Clock) -> io::Result<Sink> {
        Ok(match output {
            Output::Stdout => Sink::Stdout,
            Output::Stderr => Sink::Stderr,
            Output::File(path) => Sink::File(Mutex::new(open_append(path)?)),
            Output::Rotated(r) => Sink::Rotated(Mutex::new(RotatingFile::open(r.clone(), clock)?)),
        })
    }

    /// Writes whole lines (`text` ends with a newline), in one go where the output allows.
    pub fn write(&self, text: &str) -> io::Result<()> {
        match self {
            Sink::Stdout => {
                let mut out = io::stdout().lock();
                out.write_all(text.as_bytes())?;
                out.flush()
            }
            Sink::Stderr => {
                let mut out = io::stderr().lock();
                out.write_all(text.as_bytes())?;
                out.flush()
            }
            Sink::File(f) => lock(f).write_all(text.as_bytes()),
            Sink::Rotated(r) => lock(r).write(text),
        }
    }

    /// Flushes what the output buffers (only the standard streams do).
    pub fn flush(&self) -> io::Result<()> {
        match self {
            Sink::Stdout => io::stdout().flush(),
            Sink::Stderr => io::stderr().flush(),
            Sink::File(f) => lock(f).flush(),
            Sink::Rotated(r) => lock(r).file.flush(),
        }
    }
}

/// A file rotated when it would exceed a size or once it is too old; old rotated files are
/// deleted by count and by age.
pub struct RotatingFile {
    config: Rotation,
    file: File,
    size: u64,
    opened_at: SystemTime,
    clock: Clock,
}

impl RotatingFile {
    /// Opens (creating if needed) the active file, appending to what it holds.
    pub fn open(config: Rotation, clock: Clock) -> io::Result<RotatingFile> {
        let file = open_append(&config.path)?;
        let meta = file.metadata()?;
        let now = clock();
        let opened_at = if meta.len() == 0 {
            now
        } else {
            // The file's age survives restarts: use its creation time where the file system
            // keeps one, else its last modification.
            meta.created()
                .or_else(|_| meta.modified())
                .map(|t| t.min(now))
                .unwrap_or(now)
        };
        Ok(RotatingFile {
            size: meta.len(),
            config,
            file,
            opened_at,
            clock,
        })
    }

    /// Writes whole lines, rotating between lines: before a line that would take the file
    /// past the size limit, and before the first line once the file is older than the age
    /// limit. A line is never split across files; one longer than the limit goes alone into
    /// a file. When a rotation fails (logged), lines keep going to the current file.
    pub fn write(&mut self, text: &str) -> io::Result<()> {
        let now = (self.clock)();
        let mut can_rotate = true;
        if let Some(age) = self.config.max_age
            && self.size > 0
            && now.duration_since(self.opened_at).unwrap_or_default() >= age
        {
            can_rotate = self.try_rotate(now);
        }
        let bytes = text.as_bytes();
        let mut chunk_start = 0;
        let mut line_start = 0;
        while line_start < bytes.len() {
            let line_end = bytes[line_start..]
                .iter()
                .position(|b| *b == b'\n')
                .map_or(bytes.len(), |p| line_start + p + 1);
            let pending = (line_start - chunk_start) as u64;
            let with_line = (line_end - chunk_start) as u64;
            if can_rotate
                && self.size + pending > 0
                && self.size + with_line > self.config.max_bytes
            {
                self.file.write_all(&bytes[chunk_start..line_start])?;
                self.size += pending;
                chunk_start = line_start;
                can_rotate = self.try_rotate(now);
            }
            line_start = line_end;
        }
        self.file.write_all(&bytes[chunk_start..])?;
        self.size += (bytes.len() - chunk_start) as u64;
        Ok(())
    }

    fn try_rotate(&mut self, now: SystemTime) -> bool {
        match self.rotate(now) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(path = %self.config.path.display(), error = %e,
                    "could not rotate the log file; writing on to the current one");
                false
            }
        }
    }

    fn rotate(&mut self, now: SystemTime) -> io::Result<()> {
        self.file.flush()?;
        let backup = self.backup_path(now);
        fs::rename(&self.config.path, &backup)?;
        // Should the new file fail to open, the old handle (now the backup) takes the lines.
        self.file = open_append(&self.config.path)?;
        self.size = 0;
        self.opened_at = now;
        self.prune(now);
        Ok(())
    }

    fn parts(&self) -> (PathBuf, String, String) {
        let path = &self.config.path;
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let ext = path
            .extension()
            .map(|e| format!(".{}", e.to_string_lossy()))
            .unwrap_or_default();
        (dir, stem, ext)
    }

    fn backup_path(&self, now: SystemTime) -> PathBuf {
        let (dir, stem, ext) = self.parts();
        let stamp = file_stamp(now);
        let mut candidate = dir.join(format!("{stem}-{stamp}{ext}"));
        let mut n = 1u32;
        while candidate.exists() {
            candidate = dir.join(format!("{stem}-{stamp}-{n}{ext}"));
            n += 1;
        }
        candidate
    }

    /// Rotated files of this file, newest first.
    pub fn backups(&self) -> Vec<PathBuf> {
        let (dir, stem, ext) = self.parts();
        let Ok(entries) = fs::read_dir(&dir) else {
            return Vec::new();
        };
        let mut found: Vec<((String, u32), PathBuf)> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                parse_backup_name(&name, &stem, &ext).map(|key| (key, e.path()))
            })
            .collect();
        found.sort_by(|a, b| b.0.cmp(&a.0));
        found.into_iter().map(|(_, p)| p).collect()
    }

    fn prune(&self, now: SystemTime) {
        let (_, stem, ext) = self.parts();
        let cutoff = self
            .config
            .max_age
            .and_then(|age| now.checked_sub(age))
            .map(file_stamp);
        for (i, path) in self.backups().into_iter().enumerate() {
            let too_many = self.config.max_files.is_some_and(|max| i >= max);
            let too_old = cutoff.as_ref().is_some_and(|cutoff| {
                path.file_name()
                    .and_then(|n| parse_backup_name(&n.to_string_lossy(), &stem, &ext))
                    .is_some_and(|(stamp, _)| stamp < *cutoff)
            });
            if (too_many || too_old)
                && let Err(e) = fs::remove_file(&path)
            {
                tracing::warn!(path = %path.display(), error = %e, "could not delete a rotated log file");
            }
        }
    }
}

/// `2024-05-01T10-20-30.123`: UTC, fixed width, so that text order is time order.
fn file_stamp(t: SystemTime) -> String {
    use chrono::{Datelike, Timelike};
    let d = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .ok()
        .and_then(|d| {
            chrono::DateTime::from_timestamp(i64::try_from(d.as_secs()).ok()?, d.subsec_nanos())
        })
        .unwrap_or_default();
    format!(
        "{:04}-{:02}-{:02}T{:02}-{:02}-{:02}.{:03}",
        d.year(),
        d.month(),
        d.day(),
        d.hour(),
        d.minute(),
        d.second(),
        d.nanosecond() / 1_000_000
    )
}

const STAMP_LEN: usize = "2024-05-01T10-20-30.123".len();

/// `(stamp, counter)` of a rotated file's name, or `None` when it is not one of ours.
pub(crate) fn parse_backup_name(name: &str, stem: &str, ext: &str) -> Option<(String, u32)> {
    let middle = name
        .strip_prefix(stem)?
        .strip_prefix('-')?
        .strip_suffix(ext)?;
    if middle.len() < STAMP_LEN || !middle.is_char_boundary(STAMP_LEN) {
        return None;
    }
    let (stamp, rest) = middle.split_at(STAMP_LEN);
    let shape_ok = stamp.bytes().enumerate().all(|(i, b)| match i {
        4 | 7 | 13 | 16 => b == b'-',
        10 => b == b'T',
        19 => b == b'.',
        _ => b.is_ascii_digit(),
    });
    if !shape_ok {
        return None;
    }
    let counter = match rest {
        "" => 0,
        r => {
            let digits = r.strip_prefix('-')?;
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            digits.parse().ok()?
        }
    };
    Some((stamp.to_string(), counter))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backup_names_round_trip() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_714_558_830_123);
        assert_eq!(file_stamp(t), "2024-05-01T10-20-30.123");
        assert_eq!(
            parse_backup_name("access-2024-05-01T10-20-30.123.log", "access", ".log"),
            Some(("2024-05-01T10-20-30.123".into(), 0))
        );
        assert_eq!(
            parse_backup_name("access-2024-05-01T10-20-30.123-12.log", "access", ".log"),
            Some(("2024-05-01T10-20-30.123".into(), 12))
        );
        assert_eq!(
            parse_backup_name("out-2024-05-01T10-20-30.123", "out", ""),
            Some(("2024-05-01T10-20-30.123".into(), 0))
        );
        for other in [
            "access.log",
            "access-x.log",
            "access-2024-05-01T10-20-30.123-.log",
            "access-2024-05-01T10-20-30.123.txt",
            "other-2024-05-01T10-20-30.123.log",
            "access-2024-05-01 10-20-30.123.log",
        ] {
            assert_eq!(parse_backup_name(other, "access", ".log"), None, "{other}");
        }
    }
}
