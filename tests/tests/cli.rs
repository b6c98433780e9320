//! `mixer validate` and `mixer test` as a user runs them.

use std::path::{Path, PathBuf};
use std::process::Command;

fn mixer() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mixer-under-test"))
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .to_path_buf()
}

#[test]
fn validate_accepts_the_default_bundle() {
    let out = mixer()
        .arg("validate")
        .arg(repo().join("policies/default/config"))
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("valid"));
}

#[test]
fn validate_prints_every_error_with_file_document_and_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("rules.yaml"),
        r#"
kind: rule
metadata: {name: deny-bob, namespace: istio-system}
spec:
  match: request.hedaers["x-user"] == "bob"
  actions: [{handler: nowhere, instances: []}]
"#,
    )
    .expect("write");
    let out = mixer()
        .arg("validate")
        .arg(dir.path())
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(r#"rules.yaml: rule deny-bob: spec.match: unknown attribute "request.hedaers" (did you mean request.headers?)"#),
        "{stderr}"
    );
    assert!(
        stderr.contains("rules.yaml: rule deny-bob: spec.actions[0].handler"),
        "{stderr}"
    );
}

#[test]
fn policy_tests_pass_for_the_default_bundle_and_report_a_diff_on_failure() {
    let out = mixer()
        .arg("test")
        .arg(repo().join("policies/default"))
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains(" 0 failed"), "{stdout}");

    let dir = tempfile::tempdir().expect("tempdir");
    let config = repo().join("policies/default/config");
    std::fs::write(
        dir.path().join("wrong_test.yaml"),
        format!(
            "config: {}\ntests:\n- name: expects the wrong thing\n  attributes:\n    request.headers: {{x-mixer-deny: \"true\"}}\n  expect:\n    allowed: true\n",
            config.display()
        ),
    )
    .expect("write");
    let out = mixer().arg("test").arg(dir.path()).output().expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("FAIL"), "{stdout}");
    assert!(
        stdout.contains("allowed: expected true, got false"),
        "{stdout}"
    );
}

/// `mixer test` decides a case as the server would: the attribute generators run first and
/// their bindings override what the case's proxy sent (noop generates nothing, so the
/// binding's default stands).
#[test]
fn policy_tests_see_the_attributes_a_generator_binds() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("config")).expect("mkdir");
    std::fs::write(
        dir.path().join("config/generators.yaml"),
        r#"
kind: handler
metadata: {name: pods, namespace: istio-system}
spec: {compiledAdapter: noop}
---
kind: instance
metadata: {name: attributes, namespace: istio-system}
spec:
  compiledTemplate: kubernetes
  params: {source_uid: source.uid | ""}
  attributeBindings:
    source.workload.name: $out.source_workload_name | "unknown"
---
kind: rule
metadata: {name: kubeattrgenrulerule, namespace: istio-system}
spec:
  actions: [{handler: pods, instances: [attributes]}]
---
kind: handler
metadata: {name: deny, namespace: istio-system}
spec: {compiledAdapter: denier, params: {status: {code: 7, message: unknown workload}}}
---
kind: instance
metadata: {name: nothing, namespace: istio-system}
spec: {compiledTemplate: checknothing}
---
kind: rule
metadata: {name: deny-unknown, namespace: istio-system}
spec:
  match: source.workload.name == "unknown"
  actions: [{handler: deny, instances: [nothing]}]
"#,
    )
    .expect("write");
    std::fs::write(
        dir.path().join("generators_test.yaml"),
        "config: config\ntests:\n- name: the proxy's workload is overridden by the binding\n  attributes:\n    source.uid: kubernetes://reviews-v1-a.default\n    source.workload.name: reviews\n  expect:\n    allowed: false\n    code: PERMISSION_DENIED\n    matchedRules: [deny-unknown]\n",
    )
    .expect("write");
    let out = mixer().arg("test").arg(dir.path()).output().expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("1 passed, 0 failed"), "{stdout}");
}

/// README's YAML budget, "What one config document may hold": 250,000 nodes per document.
#[test]
fn a_document_past_the_yaml_node_budget_is_refused_at_parse() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A sequence of n scalars is n + 1 nodes.
    let list = |n: usize| format!("[{}]\n", vec!["1"; n].join(","));
    let at = dir.path().join("at.yaml");
    std::fs::write(&at, list(249_999)).expect("write");
    let past = dir.path().join("past.yaml");
    std::fs::write(&past, list(250_000)).expect("write");
    let validate = |path: &Path| {
        let out = mixer().arg("validate").arg(path).output().expect("run");
        assert!(!out.status.success(), "a list is no config document");
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    };
    // At the budget the document parses, and is then refused for what it is.
    let at = validate(&at);
    assert!(at.contains("must be a mapping"), "{at}");
    assert!(!at.contains("budget"), "{at}");
    let past = validate(&past);
    assert!(
        past.contains("past.yaml: document 1: line 1: invalid YAML: budget breached: Nodes"),
        "{past}"
    );
}
