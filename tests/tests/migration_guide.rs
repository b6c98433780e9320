//! docs/migrating-from-istio-1.4.md (#38): the README links it, it covers every Mixer-era
//! object the issue names, and what it says the mixer does with them holds for the real
//! binary: Istio 1.4's documents exported from a cluster as the guide's command writes them
//! (one JSON document each, with the API server's metadata) load; the proxy-side kinds are
//! skipped with a warning; an `rbac` handler is refused by name.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn mixer(args: &[&str], path: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mixer-under-test"))
        .args(args)
        .arg(path)
        .output()
        .expect("run the mixer")
}

fn said(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn the_readme_links_the_guide_and_the_guide_covers_every_mixer_era_object() {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    assert!(readme.contains("(docs/migrating-from-istio-1.4.md)"));
    let guide = std::fs::read_to_string(repo().join("docs/migrating-from-istio-1.4.md"))
        .expect("the guide");
    for object in [
        "`rule`",
        "`handler`",
        "`instance`",
        "`QuotaSpec`",
        "`QuotaSpecBinding`",
        "`rbac` adapter",
        "`kubernetesenv`",
        "Helm values",
        "Mixer filter",
        "`AuthorizationPolicy`",
        "`Telemetry`",
        "What does not carry over",
    ] {
        assert!(guide.contains(object), "the guide does not cover {object}");
    }
    // Every link to a file of the repository leads somewhere.
    for (at, _) in guide.match_indices("](../") {
        let target = &guide[at + 2..];
        let target = &target[..target.find(')').expect("a closed link")];
        let file = target.split('#').next().expect("a path");
        assert!(
            repo().join("docs").join(file).exists(),
            "the guide links {target}, which does not exist"
        );
    }
}

/// Istio 1.4's documents as `kubectl get KINDS -A -o json | jq -r '.items[] | "---",
/// tojson'` writes them: one JSON document per object, with what the API server adds.
fn exported(text: &str) -> String {
    let mut out = String::new();
    for (n, mut doc) in serde_saphyr::from_multiple::<Value>(text)
        .expect("yaml")
        .into_iter()
        .filter(|d| !d.is_null())
        .enumerate()
    {
        let metadata = doc["metadata"].as_object_mut().expect("metadata");
        metadata.entry("namespace").or_insert("default".into());
        metadata.insert(
            "uid".into(),
            format!("6f1c2a4e-0000-4000-8000-{n:012}").into(),
        );
        metadata.insert("resourceVersion".into(), (1000 + n).to_string().into());
        metadata.insert("generation".into(), 1.into());
        metadata.insert("creationTimestamp".into(), "2020-02-01T10:00:00Z".into());
        metadata.insert(
            "annotations".into(),
            serde_json::json!({"kubectl.kubernetes.io/last-applied-configuration": "{}"}),
        );
        out.push_str("---\n");
        out.push_str(&doc.to_string());
        out.push('\n');
    }
    out
}

#[test]
fn istio_14_config_exported_as_the_guide_says_loads_and_proxy_side_kinds_are_skipped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = repo().join("policies/istio-1.4/config");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&source)
        .expect("policies/istio-1.4/config")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    let mut export = String::new();
    for file in &files {
        export.push_str(&exported(&std::fs::read_to_string(file).expect("read")));
    }
    // The QuotaSpec and QuotaSpecBinding of Istio's rate limit task are among them.
    assert!(export.contains(r#""kind":"QuotaSpecBinding""#));
    let file = dir.path().join("mixer-config.yaml");
    std::fs::write(&file, export).expect("write");
    let out = mixer(&["validate"], &file);
    let text = said(&out);
    assert!(out.status.success(), "the export does not load: {text}");
    for kind in ["QuotaSpec", "QuotaSpecBinding"] {
        assert!(
            text.contains(&format!(
                "{kind} is proxy-side client config (read by Pilot), ignored by the mixer"
            )),
            "{kind} not skipped with a warning: {text}"
        );
    }
}

#[test]
fn an_rbac_handler_is_refused_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("rbac.yaml");
    std::fs::write(
        &file,
        "apiVersion: config.istio.io/v1alpha2\nkind: handler\nmetadata: {name: handler, namespace: istio-system}\nspec:\n  compiledAdapter: rbac\n  params: {configStoreUrl: \"k8s://\"}\n",
    )
    .expect("write");
    let out = mixer(&["validate"], &file);
    assert!(
        !out.status.success() && said(&out).contains(r#"unknown adapter "rbac""#),
        "{}",
        said(&out)
    );
}

#[test]
fn the_charts_kubernetesenv_instance_takes_the_destination_ip_the_guide_adds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let chart = repo().join("policies/istio-1.4/chart");
    for entry in std::fs::read_dir(&chart).expect("the chart's config") {
        let path = entry.expect("entry").path();
        let mut text = std::fs::read_to_string(&path).expect("read");
        if path.ends_with("kubernetesenv.yaml") {
            let bound = "    destination_port: destination.port | 0\n";
            assert!(text.contains(bound), "the chart binds destination_port");
            text = text.replace(
                bound,
                &format!("{bound}    destination_ip: destination.ip | ip(\"0.0.0.0\")\n"),
            );
        }
        std::fs::write(dir.path().join(path.file_name().expect("name")), text).expect("write");
    }
    let out = mixer(&["validate"], dir.path());
    assert!(out.status.success(), "{}", said(&out));
}
