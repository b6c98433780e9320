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
        body.contains(r#"mixer_rule_matches_total{rule="deny-on-header.rule.istio-system"} 1"#),
        "{body}"
    );
    // Every decision is timed, whichever protocol asked.
    assert!(
        body.contains("mixer_check_duration_seconds_count 3"),
        "{body}"
    );
    assert!(
        body.contains(r#"mixer_check_duration_seconds_bucket{le="1"} 3"#),
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
    // /config_dump gives the same problem in parts, as `mixer validate` names them.
    let (_, _, dump) = http_request(mixer.admin, "GET", "/config_dump", &[]).expect("dump");
    let dump: serde_json::Value = serde_json::from_str(&dump).expect("json");
    let details = dump["last_error_details"].as_array().expect("details");
    let error = details
        .iter()
        .find(|e| {
            e["message"]
                .as_str()
                .is_some_and(|m| m.contains("request.hedaers"))
        })
        .unwrap_or_else(|| panic!("no error about request.hedaers in {details:?}"));
    // Files are named relative to the config folder, as `mixer validate` names them.
    assert_eq!(error["file"], "config.yaml", "{error}");
    assert_eq!(error["document"], "rule broken", "{error}");
    assert_eq!(error["field"], "spec.match", "{error}");
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

/// Every report a proxy sent before SIGTERM reaches the handler: the queues are delivered
/// on the way out, not dropped with the process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_delivers_the_queued_reports() {
    use mixer_proto::istio::mixer::v1 as pb;
    use mixer_proto::istio::mixer::v1::mixer_client::MixerClient;

    const REQUESTS: usize = 40;
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("access.log");
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            r#"
kind: handler
metadata: {{name: file, namespace: istio-system}}
spec:
  compiledAdapter: stdio
  params: {{logStream: FILE, outputPath: "{}", outputAsJson: true}}
---
kind: instance
metadata: {{name: access, namespace: istio-system}}
spec:
  compiledTemplate: logentry
  params:
    severity: '"Info"'
    variables: {{path: request.path | ""}}
---
kind: rule
metadata: {{name: log-all, namespace: istio-system}}
spec:
  actions: [{{handler: file, instances: [access]}}]
"#,
            log.display()
        ),
    )
    .expect("write config");
    // Batches that would wait a minute to fill: only shutdown delivers them in time.
    let mixer = Mixer::start(
        binary(),
        &[
            "--config",
            config.to_str().expect("utf-8"),
            "--report-batch-timeout",
            "60s",
            "--report-batch-size",
            "10000",
        ],
    );
    let admin = mixer.admin;
    tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        while !matches!(http_request(admin, "GET", "/readyz", &[]), Ok((200, _, _))) {
            assert!(start.elapsed() < Duration::from_secs(10), "not ready");
            std::thread::sleep(Duration::from_millis(20));
        }
    })
    .await
    .expect("join");

    let mut client = MixerClient::connect(format!("http://{}", mixer.grpc))
        .await
        .expect("connect");
    let words = mixer_frontends::mixer_v1::GLOBAL_WORD_COUNT;
    for i in 0..REQUESTS {
        let path = mixer_model::Value::from(format!("/r/{i}"));
        let record = mixer_frontends::mixer_v1::encode([("request.path", &path)], words);
        client
            .report(pb::ReportRequest {
                attributes: vec![record.clone(), record],
                global_word_count: words as u32,
                ..Default::default()
            })
            .await
            .expect("report");
    }
    let (_, _, metrics) = http_request(admin, "GET", "/metrics", &[]).expect("metrics");
    assert!(
        !metrics.contains("mixer_report_delivered_total{handler=\"file.istio-system\"}"),
        "delivered before shutdown: the batch timeout did not hold them\n{metrics}"
    );
    assert_eq!(
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count(),
        0
    );

    let exit = tokio::task::spawn_blocking(move || mixer.terminate())
        .await
        .expect("join");
    assert!(exit.success(), "exit status {exit:?}");
    let text = std::fs::read_to_string(&log).expect("the log was written");
    let paths: Vec<String> = text
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("one JSON object per line");
            v["path"].as_str().expect("path").to_string()
        })
        .collect();
    assert_eq!(paths.len(), 2 * REQUESTS, "{text}");
    for i in 0..REQUESTS {
        let n = paths.iter().filter(|p| **p == format!("/r/{i}")).count();
        assert_eq!(n, 2, "/r/{i} in {text}");
    }
}
