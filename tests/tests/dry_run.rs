//! Dry-run rules and report sampling as a user meets them: `mixer serve` with the
//! `policies/dry-run` bundle answering forward-auth as the enforced rules say while counting
//! what the dry-run ones would have done, `mixer test` asserting would-be verdicts, and
//! `mixer validate` accepting Istio 1.4's `sampling`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use mixer_tests::{Mixer, http_request};

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mixer-under-test"))
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .to_path_buf()
}

#[test]
fn dry_run_rules_are_counted_on_metrics_and_never_answer() {
    let config = repo().join("policies/dry-run/config");
    let config = config.to_str().expect("utf-8 path");
    let mixer = Mixer::start(binary(), &["--config", config, "--no-watch"]);
    mixer.wait_ready(Duration::from_secs(10));
    let beta = [
        ("x-original-uri", "/shop"),
        ("x-client-version", "beta"),
        ("x-user", "bob"),
    ];
    // The second and third are answered from the check cache; each is a decision counted.
    // bob's third request is over the dry-run quota of 2 a minute: granted all the same.
    for _ in 0..3 {
        let (status, _, body) = http_request(mixer.http, "GET", "/check", &beta).expect("check");
        assert_eq!(status, 200, "{body}");
    }
    let (status, _, _) = http_request(
        mixer.http,
        "GET",
        "/check",
        &[("x-original-uri", "/shop"), ("x-user", "mallory")],
    )
    .expect("check");
    assert_eq!(status, 403, "the enforced rule still denies");
    let series = |rule: &str, verdict: &str| {
        mixer
            .metric(&format!(
                "mixer_rule_dry_run_total{{rule=\"{rule}.rule.istio-system\",verdict=\"{verdict}\"}}"
            ))
            .unwrap_or(0.0)
    };
    assert_eq!(series("deny-beta-clients", "deny"), 3.0);
    assert_eq!(series("limit-per-user", "allow"), 2.0);
    assert_eq!(series("limit-per-user", "deny"), 1.0);
    assert_eq!(
        mixer.metric(r#"mixer_checks_total{result="allowed"}"#),
        Some(3.0)
    );
    mixer.terminate();
}

#[test]
fn mixer_test_asserts_would_be_verdicts() {
    let out = Command::new(binary())
        .arg("test")
        .arg(repo().join("policies/dry-run"))
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");

    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("wrong_test.yaml"),
        format!(
            "config: {}\ntests:\n- name: expects the dry-run rule to allow\n  attributes:\n    request.headers: {{x-client-version: beta}}\n  expect:\n    allowed: true\n    dryRun: {{deny-beta-clients: allow}}\n",
            repo().join("policies/dry-run/config").display()
        ),
    )
    .expect("write");
    let out = Command::new(binary())
        .arg("test")
        .arg(dir.path())
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(
            r#"dryRun: expected {"deny-beta-clients": "allow"}, got {"deny-beta-clients.rule.istio-system": "deny"}"#
        ),
        "{stdout}"
    );
}

/// The contract: an Istio 1.4 report rule with `sampling: {random: {percentSampled: 10}}`
/// passes `mixer validate`; a sampling Istio's proto cannot mean is refused at its field.
#[test]
fn validate_accepts_istio_sampling_on_a_report_rule() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rule = |sampling: &str| {
        format!(
            r#"apiVersion: config.istio.io/v1alpha2
kind: handler
metadata: {{name: stdio, namespace: istio-system}}
spec: {{compiledAdapter: stdio}}
---
apiVersion: config.istio.io/v1alpha2
kind: instance
metadata: {{name: accesslog, namespace: istio-system}}
spec:
  compiledTemplate: logentry
  params: {{severity: '"Info"', timestamp: request.time}}
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {{name: stdio, namespace: istio-system}}
spec:
  match: context.protocol == "http"
  actions:
  - handler: stdio
    instances: [accesslog]
  sampling: {sampling}
"#
        )
    };
    let path = dir.path().join("sampled.yaml");
    std::fs::write(&path, rule("{random: {percentSampled: 10}}")).expect("write");
    let out = Command::new(binary())
        .arg("validate")
        .arg(&path)
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(
        &path,
        rule("{rateLimit: {samplingDuration: 1s, samplingRate: 0}}"),
    )
    .expect("write");
    let out = Command::new(binary())
        .arg("validate")
        .arg(&path)
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "spec.sampling.rateLimit.samplingRate: expected a whole number of at least 1, found 0"
        ),
        "{stderr}"
    );
}
