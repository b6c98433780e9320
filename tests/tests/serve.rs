//! `mixer serve` as a process: readiness, forward-auth decisions with the embedded default
//! config, admin endpoints, hot reload (good and bad config) and SIGTERM.

use std::path::Path;
use std::time::{Duration, Instant};

use mixer_tests::{Mixer, header, http_request};

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mixer-under-test"))
}

#[test]
fn default_config_decides_and_sigterm_exits_cleanly() {
    let mixer = Mixer::start(binary(), &[]);
    let took = mixer.wait_ready(Duration::from_secs(10));
    assert!(took < Duration::from_secs(2), "/readyz took {took:?}");

    let (status, headers, _) = http_request(
        mixer.http,
        "GET",
        "/check",
        &[("x-original-uri", "/app"), ("x-user", "bob")],
    )
    .expect("check");
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "x-mixer-user"), Some("bob"));

    let (status, headers, _) =
        http_request(mixer.http, "GET", "/check/anything", &[]).expect("check");
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "x-mixer-user"), Some("anonymous"));

    let (status, _, body) =
        http_request(mixer.http, "POST", "/check", &[("x-mixer-deny", "true")]).expect("check");
    assert_eq!(status, 403);
    assert!(body.contains("denied by the x-mixer-deny header"), "{body}");

    let (status, _, body) = http_request(mixer.admin, "GET", "/metrics", &[]).expect("metrics");
    assert_eq!(status, 200);
    assert!(
        body.contains(r#"mixer_checks_total{result="denied"} 1"#),
        "{body}"
    );
    assert!(
        body.contains(r#"mixer_checks_total{result="allowed"} 2"#),
        "{body}"
    );
    assert!(
        body.contains(r#"mixer_rule_matches_total{rule="deny-on-header.istio-system"} 1"#),
        "{body}"
    );

    let (status, _, body) = http_request(mixer.admin, "GET", "/config_dump", &[]).expect("dump");
    assert_eq!(status, 200);
    let dump: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(dump["ready"], true);
    assert!(body.contains("deny-on-header"), "{body}");

    let (status, _, _) = http_request(mixer.admin, "GET", "/healthz", &[]).expect("healthz");
    assert_eq!(status, 200);

    let exit = mixer.terminate();
    assert!(exit.success(), "exit status {exit:?}");
}

const ALLOW_ALL: &str = r#"
kind: rule
metadata: {name: tag, namespace: istio-system}
spec:
  requestHeaderOperations:
  - name: x-version
    values: ['"one"']
"#;

const DENY_ALL: &str = r#"
kind: handler
metadata: {name: deny, namespace: istio-system}
spec:
  compiledAdapter: denier
  params: {status: {code: 16, message: "version two"}}
---
kind: instance
metadata: {name: nothing, namespace: istio-system}
spec: {compiledTemplate: checknothing}
---
kind: rule
metadata: {name: deny-all, namespace: istio-system}
spec:
  actions: [{handler: deny, instances: [nothing]}]
"#;

const BROKEN: &str = r#"
kind: rule
metadata: {name: broken, namespace: istio-system}
spec:
  match: request.hedaers["x"] == "y"
"#;

fn poll<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn file_changes_reload_and_bad_config_keeps_the_old_snapshot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("config.yaml");
    std::fs::write(&file, ALLOW_ALL).expect("write");
    let mixer = Mixer::start(
        binary(),
        &["--config", dir.path().to_str().expect("utf-8 path")],
    );
    mixer.wait_ready(Duration::from_secs(10));
    let (status, headers, _) = http_request(mixer.http, "GET", "/check", &[]).expect("check");
    assert_eq!((status, header(&headers, "x-version")), (200, Some("one")));

    std::fs::write(&file, DENY_ALL).expect("write");
    poll("the new config to deny", Duration::from_secs(10), || {
        let (status, _, body) = http_request(mixer.http, "GET", "/check", &[]).ok()?;
        (status == 401 && body.contains("version two")).then_some(())
    });

    std::fs::write(&file, BROKEN).expect("write");
    poll(
        "the reload failure to be counted",
        Duration::from_secs(10),
        || {
            let (_, _, body) = http_request(mixer.admin, "GET", "/metrics", &[]).ok()?;
            body.contains("mixer_config_reload_failures_total 1")
                .then_some(())
        },
    );
    // The previous snapshot still decides.
    let (status, _, _) = http_request(mixer.http, "GET", "/check", &[]).expect("check");
    assert_eq!(status, 401);
    let (status, _, body) = http_request(mixer.admin, "GET", "/readyz", &[]).expect("readyz");
    assert_eq!(status, 200);
    assert!(body.contains("last reload failed"), "{body}");
    assert!(
        body.contains(r#"unknown attribute "request.hedaers""#),
        "{body}"
    );
    assert!(mixer.terminate().success());
}

#[test]
fn invalid_config_at_start_is_not_ready() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("c.yaml"), BROKEN).expect("write");
    let mixer = Mixer::start(
        binary(),
        &["--config", dir.path().to_str().expect("utf-8 path")],
    );
    let (status, _, body) = poll("the admin endpoint", Duration::from_secs(10), || {
        http_request(mixer.admin, "GET", "/readyz", &[]).ok()
    });
    assert_eq!(status, 503);
    assert!(body.contains("not ready"), "{body}");
    let (status, _, _) = http_request(mixer.http, "GET", "/check", &[]).expect("check");
    assert_eq!(status, 503);
    assert!(mixer.terminate().success());
}
