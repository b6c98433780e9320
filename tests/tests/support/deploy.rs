//! The offline checks of the manifests under `deploy/`: the tools they run (the real `kubectl
//! kustomize`, the deploy venv's Python), rendering, and golden files of what was rendered.
//!
//! A missing tool skips the test with the reason, except under CI (`CI` set) where it fails.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

/// The folder `deploy/<sub>` of the repository.
pub fn deploy_dir(sub: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(sub)
}

/// Fails under CI, else says why and returns `None` (the caller skips).
pub fn missing<T>(why: &str) -> Option<T> {
    assert!(std::env::var_os("CI").is_none(), "{why}");
    eprintln!("skipped: {why}");
    None
}

/// `kubectl` when it is on PATH (its built-in kustomize renders the manifests).
pub fn kubectl() -> Option<PathBuf> {
    let ok = Command::new("kubectl")
        .args(["version", "--client"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        Some(PathBuf::from("kubectl"))
    } else {
        missing(
            "kubectl (1.32, with kustomize 5.5) is not on PATH: install it from \
             https://dl.k8s.io/release/v1.32.4/bin/linux/amd64/kubectl",
        )
    }
}

/// The Python of the venv `.ci/run` makes from deploy/requirements.txt
/// (`MIXER_DEPLOY_PYTHON`), when it can import every module of `imports` (comma separated).
pub fn deploy_python(imports: &str) -> Option<PathBuf> {
    let python = PathBuf::from(
        std::env::var("MIXER_DEPLOY_PYTHON")
            .unwrap_or_else(|_| "/tmp/mixer-deploy-venv/bin/python".into()),
    );
    let ok = Command::new(&python)
        .args(["-c", &format!("import {imports}")])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        Some(python)
    } else {
        missing(&format!(
            "{} cannot import {imports}: python3 -m venv /tmp/mixer-deploy-venv && \
             /tmp/mixer-deploy-venv/bin/pip install -r deploy/requirements.txt (or set \
             MIXER_DEPLOY_PYTHON)",
            python.display()
        ))
    }
}

/// `dir` rendered by `kubectl kustomize`.
pub fn render(kubectl: &Path, dir: &Path) -> String {
    let out = Command::new(kubectl)
        .arg("kustomize")
        .arg(dir)
        .output()
        .expect("run kubectl kustomize");
    assert!(
        out.status.success(),
        "kubectl kustomize {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// The objects of a multi-document YAML text, empty documents left out.
pub fn objects(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml)
        .expect("YAML parses")
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

/// Each rendered text against its golden file (path, text): with `MIXER_UPDATE_GOLDEN` set
/// the golden files are rewritten, otherwise every one that differs fails the test at its
/// first differing line, telling how to regenerate them (`cargo test ... --test <test>`).
pub fn check_golden(test: &str, rendered: &[(PathBuf, String)]) {
    let update = std::env::var_os("MIXER_UPDATE_GOLDEN").is_some();
    let mut stale = Vec::new();
    for (path, text) in rendered {
        if update {
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir rendered");
            std::fs::write(path, text).expect("write golden");
            continue;
        }
        let want = std::fs::read_to_string(path).unwrap_or_default();
        if &want != text {
            stale.push(format!(
                "{}: {}",
                path.display(),
                first_difference(&want, text)
            ));
        }
    }
    assert!(
        stale.is_empty(),
        "rendered manifests differ from their golden files (review, then regenerate with \
         MIXER_UPDATE_GOLDEN=1 cargo test -p mixer-tests --test {test}):\n{}",
        stale.join("\n")
    );
}

fn first_difference(want: &str, got: &str) -> String {
    let (mut w, mut g) = (want.lines(), got.lines());
    for n in 1.. {
        match (w.next(), g.next()) {
            (None, None) => break,
            (a, b) if a == b => continue,
            (a, b) => return format!("line {n}: golden {a:?}, rendered {b:?}"),
        }
    }
    "no difference".into()
}
