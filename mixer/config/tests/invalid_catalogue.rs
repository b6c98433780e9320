//! Every file of `policies/invalid/` fails validation alone, with the error its first line
//! (`# expect: ...`) announces, and with that one error only.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use mixer_config::{AdapterRegistry, ConfigOptions, read_sources, validate};

fn catalogue() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../policies/invalid")
}

fn registry() -> AdapterRegistry {
    let mut r = AdapterRegistry::new();
    r.register(Arc::new(mixer_adapter_denier::Denier));
    r.register(Arc::new(mixer_adapter_noop::Noop));
    r
}

#[test]
fn every_invalid_config_fails_with_its_announced_error() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(catalogue())
        .expect("policies/invalid exists")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 15, "only {} files", files.len());
    let registry = registry();
    let mut problems = Vec::new();
    for file in &files {
        let sources = read_sources(file).expect("readable");
        let text = &sources[0].text;
        let Some(expect) = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# expect: "))
        else {
            problems.push(format!(
                "{}: first line is not `# expect: ...`",
                file.display()
            ));
            continue;
        };
        match validate(&sources, &registry, &ConfigOptions::default()) {
            Ok(_) => problems.push(format!("{}: validated, expected {expect}", file.display())),
            Err(errors) => {
                let shown: Vec<String> = errors.iter().map(ToString::to_string).collect();
                if !shown.iter().any(|e| e.contains(expect)) || shown.len() != 1 {
                    problems.push(format!(
                        "{}: expected exactly one error containing\n    {expect}\n  got\n    {}",
                        file.display(),
                        shown.join("\n    ")
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

#[test]
fn the_readme_lists_every_file() {
    let readme = std::fs::read_to_string(catalogue().join("README.md")).expect("README.md");
    for entry in std::fs::read_dir(catalogue()).expect("dir") {
        let name = entry
            .expect("entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        if name.ends_with(".yaml") {
            assert!(readme.contains(&name), "README.md does not mention {name}");
        }
    }
}
