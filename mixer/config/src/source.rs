//! Config sources: files read from disk, or text handed in by a test or an API.

use std::io;
use std::path::{Path, PathBuf};

/// One file of YAML config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceFile {
    /// How errors name the file (a path relative to the config directory, or a label).
    pub name: String,
    /// Its text: one or more YAML documents separated by `---`.
    pub text: String,
}

impl SourceFile {
    /// A source from a name and text.
    pub fn new(name: impl Into<String>, text: impl Into<String>) -> SourceFile {
        SourceFile {
            name: name.into(),
            text: text.into(),
        }
    }
}

/// Reads config from `path`: a single file, or a directory in which every `*.yaml` and
/// `*.yml` file below it (recursively) is read, sorted by path.
///
/// A file read alone is named by its own file name; files from a directory are named by their
/// path relative to that directory (with `/` separators).
pub fn read_sources(path: &Path) -> io::Result<Vec<SourceFile>> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_dir() {
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let text = std::fs::read_to_string(path)?;
        return Ok(vec![SourceFile { name, text }]);
    }
    let mut files = Vec::new();
    collect(path, &mut files)?;
    files.sort();
    let mut sources = Vec::with_capacity(files.len());
    for file in files {
        let relative = file.strip_prefix(path).unwrap_or(&file);
        let name = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/");
        let text = std::fs::read_to_string(&file)?;
        sources.push(SourceFile { name, text });
    }
    Ok(sources)
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let file_type = entry.file_type()?;
        let is_dir = if file_type.is_symlink() {
            std::fs::metadata(&path)
                .map(|m| m.is_dir())
                .unwrap_or(false)
        } else {
            file_type.is_dir()
        };
        if is_dir {
            // Skip hidden directories (.git, editors' folders).
            if !entry.file_name().to_string_lossy().starts_with('.') {
                collect(&path, out)?;
            }
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        ) {
            out.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_directory_recursively_sorted() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("b/c")).expect("mkdir");
        std::fs::write(root.join("z.yaml"), "z").expect("write");
        std::fs::write(root.join("a.yml"), "a").expect("write");
        std::fs::write(root.join("b/c/d.yaml"), "d").expect("write");
        std::fs::write(root.join("notes.txt"), "not config").expect("write");
        let sources = read_sources(root).expect("reads");
        let names: Vec<&str> = sources.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["a.yml", "b/c/d.yaml", "z.yaml"]);
        assert_eq!(sources[1].text, "d");

        let single = read_sources(&root.join("b/c/d.yaml")).expect("reads file");
        assert_eq!(single, vec![SourceFile::new("d.yaml", "d")]);
        assert!(read_sources(&root.join("missing")).is_err());
    }
}
