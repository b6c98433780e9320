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

impl SourceFile {
    /// Whether the file holds a YAML document with content: a line that is not blank, a
    /// comment or a document marker (`---`, `...`). An empty or truncated file holds none.
    pub fn has_documents(&self) -> bool {
        self.text.lines().any(|line| {
            let line = line.trim();
            !(line.is_empty() || line.starts_with('#') || line == "---" || line == "...")
        })
    }
}

/// Names of the files of `current` that hold no document while the same file in `previous`
/// held some: a writer that truncated it and has not written it yet, or an editor part way
/// through saving. A file removed altogether is not among them (removing it is meant).
pub fn emptied_files(previous: &[SourceFile], current: &[SourceFile]) -> Vec<String> {
    current
        .iter()
        .filter(|now| !now.has_documents())
        .filter(|now| {
            previous
                .iter()
                .any(|before| before.name == now.name && before.has_documents())
        })
        .map(|now| now.name.clone())
        .collect()
}

/// Reads config from `path`: a single file, or a directory in which every `*.yaml` and
/// `*.yml` file below it (recursively) is read, sorted by path.
///
/// Hidden files and directories (a name starting with `.`) are not read: editors' lock and
/// temporary files (`.#rules.yaml`, `.rules.yaml.swp`), writers' temporary files
/// (`.tmp-rules.yaml`), and Kubernetes' ConfigMap and Secret volumes' timestamped
/// directories (`..2026_01_02_03_04_05.123/`, `..data/`), whose files are read once through
/// the visible symlinks beside them.
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
            // Skip hidden directories (.git, editors' folders, Kubernetes' `..data`).
            if !entry.file_name().to_string_lossy().starts_with('.') {
                collect(&path, out)?;
            }
        } else if !entry.file_name().to_string_lossy().starts_with('.')
            && matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("yaml" | "yml")
            )
        {
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

        // Hidden files are never read; a hidden file named alone is read (it was asked for).
        std::fs::write(root.join(".tmp-x.yaml"), "t").expect("write");
        std::fs::write(root.join(".#z.yaml"), "lock").expect("write");
        std::fs::create_dir_all(root.join(".git")).expect("mkdir");
        std::fs::write(root.join(".git/h.yaml"), "g").expect("write");
        let names: Vec<String> = read_sources(root)
            .expect("reads")
            .into_iter()
            .map(|s| s.name)
            .collect();
        assert_eq!(names, ["a.yml", "b/c/d.yaml", "z.yaml"]);

        let single = read_sources(&root.join("b/c/d.yaml")).expect("reads file");
        assert_eq!(single, vec![SourceFile::new("d.yaml", "d")]);
        assert!(read_sources(&root.join("missing")).is_err());
    }

    /// A Kubernetes ConfigMap volume: the files are symlinks into `..data`, itself a symlink
    /// to a timestamped directory; each file is read once, by its visible name.
    #[test]
    fn a_configmap_volume_is_read_once_through_its_symlinks() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        let stamped = root.join("..2026_12_02_03_04_05.000000001");
        std::fs::create_dir_all(&stamped).expect("mkdir");
        std::fs::write(stamped.join("rules.yaml"), "r").expect("write");
        std::os::unix::fs::symlink(&stamped, root.join("..data")).expect("symlink");
        std::os::unix::fs::symlink("..data/rules.yaml", root.join("rules.yaml")).expect("symlink");
        let sources = read_sources(root).expect("reads");
        assert_eq!(sources, vec![SourceFile::new("rules.yaml", "r")]);
    }

    #[test]
    fn emptied_files_are_those_that_lost_every_document() {
        let before = [
            SourceFile::new("a.yaml", "kind: rule\n"),
            SourceFile::new("b.yaml", "kind: rule\n"),
            SourceFile::new("c.yaml", "# nothing yet\n"),
            SourceFile::new("gone.yaml", "kind: rule\n"),
        ];
        let after = [
            SourceFile::new("a.yaml", ""),
            SourceFile::new("b.yaml", "---\n# comment only\n...\n"),
            SourceFile::new("c.yaml", ""),
            SourceFile::new("new.yaml", ""),
        ];
        assert_eq!(emptied_files(&before, &after), ["a.yaml", "b.yaml"]);
        assert!(emptied_files(&[], &after).is_empty());
    }
}
