//! Istio 1.4's own telemetry samples, unchanged (istio/istio release-1.4
//! `samples/bookinfo/telemetry/log-entry.yaml` and `metrics.yaml`, copied into
//! `policies/istio-1.4/config/`), served by the real binary and fed by a Mixer v1 Report: the
//! stdio adapter's JSON line names the instance as Istio does (`newlog.instance.istio-system`),
//! and the prometheus adapter finds the instance the sample names by its fully qualified name
//! (`doublerequestcount.instance.istio-system`).

use std::path::Path;
use std::time::{Duration, Instant};

use mixer_model::Value;
use mixer_proto::istio::mixer::v1 as pb;
use mixer_tests::{Mixer, http_request};
use pb::mixer_client::MixerClient;

fn sample(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../policies/istio-1.4/config")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn istios_telemetry_samples_log_and_count_under_istios_names() {
    let dir = tempfile::tempdir().expect("tempdir");
    for name in ["telemetry-log-entry.yaml", "telemetry-metrics.yaml"] {
        std::fs::write(dir.path().join(name), sample(name)).expect("write sample");
    }
    let (mixer, lines) = Mixer::start_capturing_stdout(
        Path::new(env!("CARGO_BIN_EXE_mixer-under-test")),
        &["--config", dir.path().to_str().expect("utf-8")],
    );
    let admin = mixer.admin;
    tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        while !matches!(http_request(admin, "GET", "/readyz", &[]), Ok((200, _, _))) {
            assert!(start.elapsed() < Duration::from_secs(10), "mixer not ready");
            std::thread::sleep(Duration::from_millis(20));
        }
    })
    .await
    .expect("join");

    let values = [
        ("context.reporter.kind", Value::from("inbound")),
        ("source.workload.name", Value::from("productpage-v1")),
        ("destination.workload.name", Value::from("reviews-v2")),
        ("response.code", Value::Int64(200)),
        ("request.time", Value::from("2020-01-01T00:00:00Z")),
    ];
    let record = mixer_frontends::mixer_v1::encode(
        values.iter().map(|(n, v)| (*n, v)),
        mixer_frontends::mixer_v1::GLOBAL_WORD_COUNT,
    );
    let mut client = MixerClient::connect(format!("http://{}", mixer.grpc))
        .await
        .expect("connect");
    client
        .report(pb::ReportRequest {
            attributes: vec![record],
            global_word_count: mixer_frontends::mixer_v1::GLOBAL_WORD_COUNT as u32,
            ..Default::default()
        })
        .await
        .expect("report");

    let line = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = lines.recv_timeout(left).expect("a log line within 10 s");
            if line.contains("newlog") {
                return line;
            }
        }
    })
    .await
    .expect("join");
    let json: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
    assert_eq!(json["instance"], "newlog.instance.istio-system", "{line}");
    assert_eq!(json["level"], "warn", "{line}");
    assert_eq!(json["source"], "productpage-v1", "{line}");
    assert_eq!(json["user"], "unknown", "{line}");

    // Report batches reach the handler within the batch timeout.
    let series = r#"istio_double_request_count{destination="reviews-v2",message="twice the fun!",reporter="server",source="productpage-v1"} 2"#;
    let start = Instant::now();
    loop {
        let (status, _, body) = http_request(mixer.admin, "GET", "/metrics", &[]).expect("metrics");
        assert_eq!(status, 200);
        if body.contains(series) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{series} not in:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(mixer.terminate().success());
}

/// Istio's version whitelist sample (`samples/bookinfo/policy/mixer-rule-deny-whitelist-crd.yaml`,
/// unchanged, in `policies/istio-1.4/config/deny-whitelist.yaml`) answering a sidecar's Mixer
/// v1 Check as Istio 1.4 did: listchecker's default validity (300 s, 10000 uses:
/// `mixer/adapter/metadata/inventory.go`), a denial worded `handler:message` by the dispatcher
/// (`mixer/pkg/runtime/dispatcher/session.go`), and a caller without a version label checked
/// as the empty string, not refused as invalid input.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn istios_whitelist_sample_answers_as_istio_did() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("deny-whitelist.yaml"),
        sample("deny-whitelist.yaml"),
    )
    .expect("write sample");
    let mixer = Mixer::start(
        Path::new(env!("CARGO_BIN_EXE_mixer-under-test")),
        &["--config", dir.path().to_str().expect("utf-8")],
    );
    let admin = mixer.admin;
    tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        while !matches!(http_request(admin, "GET", "/readyz", &[]), Ok((200, _, _))) {
            assert!(start.elapsed() < Duration::from_secs(10), "mixer not ready");
            std::thread::sleep(Duration::from_millis(20));
        }
    })
    .await
    .expect("join");
    let mut client = MixerClient::connect(format!("http://{}", mixer.grpc))
        .await
        .expect("connect");
    let check = |labels: &[(&str, &str)]| {
        let destination = Value::from(mixer_model::StringMap::from_pairs([("app", "ratings")]));
        let source = Value::from(mixer_model::StringMap::from_pairs(labels.iter().copied()));
        let words = mixer_frontends::mixer_v1::GLOBAL_WORD_COUNT;
        pb::CheckRequest {
            attributes: Some(mixer_frontends::mixer_v1::encode(
                [
                    ("destination.labels", &destination),
                    ("source.labels", &source),
                ],
                words,
            )),
            global_word_count: words as u32,
            ..Default::default()
        }
    };
    let precondition = |response: pb::CheckResponse| response.precondition.expect("precondition");

    let allowed = precondition(
        client
            .check(check(&[("app", "reviews"), ("version", "v1")]))
            .await
            .expect("decided")
            .into_inner(),
    );
    assert_eq!(allowed.status.as_ref().map(|s| s.code), Some(0));
    assert_eq!(
        allowed.valid_duration,
        Some(prost_types::Duration {
            seconds: 300,
            nanos: 0
        })
    );
    assert_eq!(allowed.valid_use_count, 10_000);

    let denied = precondition(
        client
            .check(check(&[("app", "reviews"), ("version", "v3")]))
            .await
            .expect("decided")
            .into_inner(),
    );
    let status = denied.status.expect("status");
    assert_eq!(status.code, 7, "PERMISSION_DENIED");
    assert_eq!(
        status.message,
        "whitelist.listchecker.istio-system:v3 is not whitelisted"
    );

    let unlabelled = precondition(
        client
            .check(check(&[("app", "productpage")]))
            .await
            .expect("decided, not refused as invalid")
            .into_inner(),
    );
    let status = unlabelled.status.expect("status");
    assert_eq!(status.code, 7, "PERMISSION_DENIED, not INVALID_ARGUMENT");
    assert_eq!(
        status.message,
        "whitelist.listchecker.istio-system: is not whitelisted"
    );
    assert!(mixer.terminate().success());
}
