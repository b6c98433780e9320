//! The mixer's own log through the real binary: `--log-format json` writes one JSON object
//! per line (what `kubectl logs` readers and Loki parse), a log that is not a terminal holds
//! no ANSI escape codes in either format, the level comes from `RUST_LOG` unless
//! `--log-level` says otherwise, and the lines about a request carry its decision id.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
use envoy_types::pb::google::protobuf::value::Kind;
use mixer_tests::{Mixer, header, http_request};

#[path = "support/authz.rs"]
mod authz;
use authz::authz_request;

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mixer-under-test"))
}

/// The log of a mixer started with `extra`, made ready, and stopped with SIGTERM.
fn log_of(extra: &[&str]) -> String {
    log_and(extra, &[], |_| ()).0
}

/// The log of a mixer started with `extra` and `env`, made ready, asked what `ask` asks, and
/// stopped with SIGTERM; beside it, what `ask` returned.
fn log_and<T>(extra: &[&str], env: &[(&str, &str)], ask: impl FnOnce(&Mixer) -> T) -> (String, T) {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("stderr.log");
    let mixer = Mixer::start_with_env_and_log(binary(), extra, env, &log);
    mixer.wait_ready(Duration::from_secs(20));
    let answer = ask(&mixer);
    assert!(mixer.terminate().success(), "the mixer stops cleanly");
    (std::fs::read_to_string(&log).expect("read the log"), answer)
}

/// The decision id of one forward-auth allow on `mixer`.
fn forward_auth_decision(mixer: &Mixer) -> String {
    let (status, headers, _) =
        http_request(mixer.http, "GET", "/check", &[("x-user", "alice")]).expect("check");
    assert_eq!(status, 200);
    header(&headers, "x-mixer-decision-id")
        .expect("a decision id")
        .to_string()
}

#[test]
fn json_logs_are_one_object_per_line_with_time_level_target_and_message() {
    let log = log_of(&["--log-format", "json"]);
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() >= 2, "start and stop are logged: {log}");
    for line in &lines {
        let event: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        for key in ["timestamp", "level", "target", "message"] {
            assert!(event.get(key).is_some(), "no {key:?} in {line}");
        }
    }
    assert!(!log.contains('\u{1b}'), "escape codes in {log:?}");
}

#[test]
fn a_text_log_that_is_not_a_terminal_has_no_escape_codes() {
    let log = log_of(&[]);
    assert!(!log.is_empty(), "the mixer logs its start");
    assert!(!log.contains('\u{1b}'), "escape codes in {log:?}");
    assert!(log.contains("INFO"), "{log}");
}

#[test]
fn a_log_level_that_does_not_parse_is_refused_naming_the_flag() {
    let out = Command::new(binary())
        .args(["serve", "--log-level", "info,=[bad"])
        .args(["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
        .args(["--admin-addr", "127.0.0.1:0"])
        .output()
        .expect("run the mixer");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--log-level"), "{stderr}");
}

#[test]
fn the_level_comes_from_rust_log_unless_log_level_says_otherwise() {
    // RUST_LOG alone: the forward-auth debug line is written, in the request's span.
    let debug = [("RUST_LOG", "mixer_frontends=debug,info")];
    let (log, id) = log_and(&[], &debug, forward_auth_decision);
    let line = log
        .lines()
        .find(|l| l.contains("forward-auth answered"))
        .unwrap_or_else(|| panic!("RUST_LOG's debug level not applied:\n{log}"));
    assert!(line.contains(&format!("decision_id={id}")), "{line}");
    assert!(line.contains("DEBUG"), "{line}");

    // --log-level wins over RUST_LOG: at warn, neither the debug line nor the start's info.
    let (log, _) = log_and(&["--log-level", "warn"], &debug, forward_auth_decision);
    assert!(!log.contains("forward-auth answered"), "{log}");
    assert!(!log.contains("INFO"), "{log}");
}

/// Beside the default config: a rule whose match reads an attribute ext_authz does not give
/// (no peer metadata), so the match fails to evaluate and its first failure is logged (at
/// info) while the request runs.
const NAMESPACE_RULE: &str = r#"apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {name: namespace-blocked, namespace: istio-system}
spec:
  match: source.namespace != "blocked"
  actions:
  - handler: deny-by-header
    instances: [denyrequest]
"#;

#[test]
fn an_ext_authz_requests_log_lines_carry_its_decision_id() {
    let dir = tempfile::tempdir().expect("temp dir");
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::copy(
        workspace.join("policies/default/config/default.yaml"),
        dir.path().join("default.yaml"),
    )
    .expect("copy the default config");
    std::fs::write(dir.path().join("namespace.yaml"), NAMESPACE_RULE).expect("write the rule");
    let config = dir.path().to_str().expect("utf-8");
    let (log, id) = log_and(
        &["--config", config, "--log-format", "json"],
        &[],
        |mixer| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async {
                let mut client = AuthorizationClient::connect(format!("http://{}", mixer.grpc))
                    .await
                    .expect("connect");
                let answer = client
                    .check(authz_request(&[("x-user", "bob")]))
                    .await
                    .expect("check")
                    .into_inner();
                assert_eq!(answer.status.as_ref().map(|s| s.code), Some(0));
                let field = answer
                    .dynamic_metadata
                    .as_ref()
                    .and_then(|m| m.fields.get("decision_id"))
                    .and_then(|v| v.kind.as_ref());
                match field {
                    Some(Kind::StringValue(id)) => id.clone(),
                    other => panic!("no decision id in the answer: {other:?}"),
                }
            })
        },
    );
    let line = log
        .lines()
        .find(|l| l.contains("rule match failed to evaluate"))
        .unwrap_or_else(|| panic!("the match failure is not logged:\n{log}"));
    let event: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(event["span"]["decision_id"], id.as_str(), "{line}");
    assert_eq!(event["span"]["protocol"], "ext_authz", "{line}");
}
