//! `--invalid-config skip`: a config with a broken document is served without it (and without
//! what needs it), as Istio 1.4 serves the valid part of a config; every dropped document is
//! named by `mixer validate`, on `/readyz`, `/config_dump` and in a metric.

use std::path::Path;
use std::time::Duration;

use mixer_tests::{Mixer, http_request};

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mixer-under-test"))
}

/// A working deny rule, one stale rule pointing at a handler that is gone, and a handler with
/// invalid params whose only rule depends on it.
const CONFIG: &str = r#"
kind: handler
metadata: {name: deny, namespace: istio-system}
spec: {compiledAdapter: denier, params: {status: {code: 7, message: bob is not welcome}}}
---
kind: instance
metadata: {name: nothing, namespace: istio-system}
spec: {compiledTemplate: checknothing}
---
kind: rule
metadata: {name: deny-bob, namespace: istio-system}
spec:
  match: request.headers["x-user"] == "bob"
  actions: [{handler: deny, instances: [nothing]}]
---
kind: rule
metadata: {name: stale, namespace: istio-system}
spec:
  match: request.headers["x-user"] == "alice"
  actions: [{handler: gone, instances: [nothing]}]
---
kind: denier
metadata: {name: strict, namespace: istio-system}
spec: {status: {code: 99}}
---
kind: rule
metadata: {name: uses-strict, namespace: istio-system}
spec:
  actions: [{handler: strict.denier, instances: [nothing]}]
"#;

fn config_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("mesh.yaml"), CONFIG).expect("write");
    dir
}

#[test]
fn serve_skip_serves_the_valid_rules_and_lists_what_it_dropped() {
    let dir = config_dir();
    let config = dir.path().to_str().expect("utf-8");
    let mixer = Mixer::start(
        binary(),
        &["--config", config, "--no-watch", "--invalid-config", "skip"],
    );
    mixer.wait_ready(Duration::from_secs(20));

    // The valid rule answers checks; the dropped ones do nothing.
    let (status, _, _) =
        http_request(mixer.http, "GET", "/check", &[("x-user", "bob")]).expect("check");
    assert_eq!(status, 403, "deny-bob still denies bob");
    let (status, _, _) =
        http_request(mixer.http, "GET", "/check", &[("x-user", "alice")]).expect("check");
    assert_eq!(status, 200, "the stale rule was dropped");

    let (status, _, readyz) = http_request(mixer.admin, "GET", "/readyz", &[]).expect("readyz");
    assert_eq!(status, 200);
    for line in [
        "dropped: stale.rule.istio-system (mesh.yaml): invalid: spec.actions[0].handler: unknown handler \"gone\"",
        "dropped: strict.denier.istio-system (mesh.yaml): invalid: spec.status.code",
        "dropped: uses-strict.rule.istio-system (mesh.yaml): depends on dropped strict.denier.istio-system",
    ] {
        assert!(readyz.contains(line), "{line}\nnot in:\n{readyz}");
    }

    let (_, _, dump) = http_request(mixer.admin, "GET", "/config_dump", &[]).expect("dump");
    let dump: serde_json::Value = serde_json::from_str(&dump).expect("json");
    let dropped: Vec<(&str, &str)> = dump["dropped_documents"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|d| {
            (
                d["name"].as_str().unwrap_or_default(),
                d["reason"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        dropped,
        [
            ("stale.rule.istio-system", "invalid"),
            ("strict.denier.istio-system", "invalid"),
            ("uses-strict.rule.istio-system", "dependency"),
        ]
    );
    let rules: Vec<&str> = dump["config"]["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(rules, ["deny-bob.rule.istio-system"]);

    let (_, _, metrics) = http_request(mixer.admin, "GET", "/metrics", &[]).expect("metrics");
    for series in [
        r#"mixer_config_dropped_documents{name="stale.rule.istio-system",reason="invalid"} 1"#,
        r#"mixer_config_dropped_documents{name="uses-strict.rule.istio-system",reason="dependency"} 1"#,
    ] {
        assert!(metrics.contains(series), "{series} not in /metrics");
    }
}

#[test]
fn serve_refuses_the_same_config_by_default() {
    let dir = config_dir();
    let config = dir.path().to_str().expect("utf-8");
    let mixer = Mixer::start(binary(), &["--config", config, "--no-watch"]);
    std::thread::sleep(Duration::from_millis(500));
    let (status, _, body) = loop {
        match http_request(mixer.admin, "GET", "/readyz", &[]) {
            Ok(answer) => break answer,
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("unknown handler \"gone\""), "{body}");
}

#[test]
fn validate_skip_names_every_dropped_document_dependents_included() {
    let dir = config_dir();
    let out = std::process::Command::new(binary())
        .args(["validate", "--invalid-config", "skip"])
        .arg(dir.path())
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dropped: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("dropped: "))
        .map(|l| l.split(' ').next().unwrap_or_default())
        .collect();
    assert_eq!(
        dropped,
        [
            "stale.rule.istio-system",
            "strict.denier.istio-system",
            "uses-strict.rule.istio-system"
        ],
        "{stdout}"
    );
    assert!(stdout.contains("1 rules"), "{stdout}");
    assert!(stdout.contains("3 documents dropped"), "{stdout}");

    // Without the flag, the same config is refused.
    let out = std::process::Command::new(binary())
        .arg("validate")
        .arg(dir.path())
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
}
