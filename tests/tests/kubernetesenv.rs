//! kubernetesenv in the real mixer: its metrics on `/metrics` and, when the API server goes
//! away, a `note:` on `/readyz` while the mixer stays ready and the cache keeps serving.
//!
//! The API server is a stand-in (no Kubernetes API server can be installed where these tests
//! run: see `adapters/kubernetesenv/tests/standin/mod.rs`) holding bookinfo's productpage and
//! reviews pods, each owned by a ReplicaSet of a Deployment. The handler has empty params, as
//! in Istio 1.4's chart (the in-cluster config); the mixer is pointed at the stand-in by the
//! `KUBECONFIG` environment variable, which takes precedence over the params as in Istio.
//!
//! Istio 1.4's chart config, unchanged (`policies/istio-1.4/chart/`: the attribute manifests,
//! the kubernetesenv handler, `attributes` instance and rules, the Prometheus metrics, as Helm
//! renders them): a Mixer v1 Report carrying what a sidecar sends, with `source.uid` /
//! `destination.uid` and no workload or label attributes, yields `istio_requests_total` with
//! the labels Istio 1.4 produced for the same pods: the label set of istio/istio release-1.4
//! `tests/integration/telemetry/stats/prometheus/stats_filter_test.go` (`buildQuery`:
//! productpage-v1 calling reviews-v1 in bookinfo), which kubernetesenv's workload rules give
//! (the Deployment's name through the pod's ReplicaSet: `mixer/adapter/kubernetesenv/cache.go`).

#[path = "../../adapters/kubernetesenv/tests/standin/mod.rs"]
mod standin;

use std::path::Path;
use std::time::{Duration, Instant};

use mixer_model::Value;
use mixer_proto::istio::mixer::v1 as pb;
use mixer_tests::{Mixer, http_request};
use pb::mixer_client::MixerClient;

/// Polls `/metrics` (bounded) until `want` holds for its body.
fn scrape_until(admin: std::net::SocketAddr, what: &str, want: impl Fn(&str) -> bool) -> String {
    let start = Instant::now();
    loop {
        let (status, _, body) = http_request(admin, "GET", "/metrics", &[]).expect("metrics");
        assert_eq!(status, 200);
        if want(&body) {
            return body;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{what} not within 10 s:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A kubernetesenv handler as Istio 1.4's chart declares it (empty params), its instance and
/// rule, the mixer pointed at the stand-in by `KUBECONFIG`.
const HANDLER_ONLY: &str = r#"
apiVersion: "config.istio.io/v1alpha2"
kind: handler
metadata:
  name: kubernetesenv
  namespace: istio-system
spec:
  compiledAdapter: kubernetesenv
  params:
---
apiVersion: "config.istio.io/v1alpha2"
kind: instance
metadata:
  name: attributes
  namespace: istio-system
spec:
  compiledTemplate: kubernetes
  params:
    source_uid: source.uid | ""
    destination_uid: destination.uid | ""
---
apiVersion: "config.istio.io/v1alpha2"
kind: rule
metadata:
  name: kubeattrgenrulerule
  namespace: istio-system
spec:
  actions:
  - handler: kubernetesenv
    instances: [attributes]
"#;

/// Starts the mixer on `config` (a folder) with `KUBECONFIG` at the stand-in, and waits until
/// it is ready with its pod cache listed (no kubernetesenv note on `/readyz`).
async fn start_listed(apiserver: &standin::StandIn, dir: &Path, config: &Path) -> Mixer {
    let kubeconfig = apiserver.kubeconfig(dir);
    let mixer = Mixer::start_with_env_and_log(
        Path::new(env!("CARGO_BIN_EXE_mixer-under-test")),
        &["--config", config.to_str().expect("utf-8")],
        &[("KUBECONFIG", kubeconfig.to_str().expect("utf-8"))],
        &dir.join("mixer.log"),
    );
    let admin = mixer.admin;
    tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        loop {
            match http_request(admin, "GET", "/readyz", &[]) {
                Ok((200, _, body)) if !body.contains("kubernetesenv") => return,
                other => assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "mixer not ready, or its pod cache not listed: {other:?}"
                ),
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    })
    .await
    .expect("join");
    mixer
}

/// Waits (bounded) for the `/readyz` note the API server's absence gives; the mixer stays
/// ready throughout.
async fn unreachable_note(admin: std::net::SocketAddr) -> String {
    tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        loop {
            let (status, _, body) = http_request(admin, "GET", "/readyz", &[]).expect("readyz");
            assert_eq!(status, 200, "still ready: {body}");
            if let Some(note) = body.lines().find(|l| l.contains("API server unreachable")) {
                return note.to_owned();
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "no note within 10 s: {body}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await
    .expect("join")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_going_away_is_a_readiness_note_and_a_metric() {
    let mut objects = standin::items("pods.json");
    objects.extend(standin::items("replicasets.json"));
    let apiserver = standin::StandIn::start(objects).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config");
    std::fs::create_dir(&config).expect("config dir");
    std::fs::write(config.join("kubernetesenv.yaml"), HANDLER_ONLY).expect("write config");
    let mixer = start_listed(&apiserver, dir.path(), &config).await;
    let admin = mixer.admin;
    let listed = "mixer_kubernetesenv_pods{handler=\"kubernetesenv.handler.istio-system\"} 2";
    tokio::task::spawn_blocking(move || scrape_until(admin, listed, |b| b.contains(listed)))
        .await
        .expect("join");

    apiserver.go_away();
    let note = unreachable_note(admin).await;
    assert!(
        note.starts_with(
            "note: handler kubernetesenv.handler.istio-system: kubernetesenv: API server unreachable"
        ) && note.contains("serves the 2 pods it had"),
        "{note}"
    );
    let down = "mixer_kubernetesenv_apiserver_up{handler=\"kubernetesenv.handler.istio-system\"} 0";
    tokio::task::spawn_blocking(move || {
        scrape_until(admin, down, |b| b.contains(down) && b.contains(listed))
    })
    .await
    .expect("join");
    assert!(mixer.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn istios_chart_config_names_workloads_from_uids_only() {
    let mut objects = standin::items("pods.json");
    objects.extend(standin::items("replicasets.json"));
    let apiserver = standin::StandIn::start(objects).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config");
    std::fs::create_dir(&config).expect("config dir");
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/istio-1.4/chart");
    for entry in std::fs::read_dir(chart).expect("chart dir") {
        let path = entry.expect("entry").path();
        std::fs::copy(&path, config.join(path.file_name().expect("name"))).expect("copy");
    }
    let mixer = start_listed(&apiserver, dir.path(), &config).await;
    let admin = mixer.admin;

    // What a server-side sidecar at reviews-v1 reports for a call from productpage-v1: uids,
    // the service, the protocol and the response; no workload names, no labels.
    let values = [
        ("context.reporter.kind", Value::from("inbound")),
        (
            "context.reporter.uid",
            Value::from("kubernetes://reviews-v1-79d546878f-r5ps6.default"),
        ),
        ("context.protocol", Value::from("http")),
        (
            "source.uid",
            Value::from("kubernetes://productpage-v1-596598f447-nn64q.default"),
        ),
        (
            "destination.uid",
            Value::from("kubernetes://reviews-v1-79d546878f-r5ps6.default"),
        ),
        ("destination.port", Value::Int64(9080)),
        (
            "destination.service.host",
            Value::from("reviews.default.svc.cluster.local"),
        ),
        ("destination.service.name", Value::from("reviews")),
        ("destination.service.namespace", Value::from("default")),
        (
            "destination.service.uid",
            Value::from("istio://default/services/reviews"),
        ),
        ("request.host", Value::from("reviews:9080")),
        ("request.method", Value::from("GET")),
        ("request.path", Value::from("/reviews/0")),
        ("response.code", Value::Int64(200)),
        ("request.time", Value::from("2020-08-10T10:00:00Z")),
        ("response.time", Value::from("2020-08-10T10:00:00.012Z")),
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

    let expected = [
        ("reporter", "destination"),
        ("request_protocol", "http"),
        ("response_code", "200"),
        ("destination_app", "reviews"),
        ("destination_version", "v1"),
        ("destination_service", "reviews.default.svc.cluster.local"),
        ("destination_service_name", "reviews"),
        ("destination_service_namespace", "default"),
        ("destination_workload", "reviews-v1"),
        ("destination_workload_namespace", "default"),
        ("source_app", "productpage"),
        ("source_version", "v1"),
        ("source_workload", "productpage-v1"),
        ("source_workload_namespace", "default"),
    ];
    let series = |body: &str| -> Option<String> {
        body.lines()
            .find(|l| l.starts_with("istio_requests_total{"))
            .map(str::to_owned)
    };
    let body = tokio::task::spawn_blocking(move || {
        scrape_until(admin, "istio_requests_total", |b| series(b).is_some())
    })
    .await
    .expect("join");
    let line = series(&body).expect("a series");
    for (label, value) in expected {
        assert!(
            line.contains(&format!("{label}=\"{value}\"")),
            "{label}={value:?} not in {line}"
        );
    }
    assert!(line.ends_with(" 1"), "{line}");
    assert!(
        body.contains("mixer_kubernetesenv_pods{handler=\"kubernetesenv.handler.istio-system\"} 2"),
        "{body}"
    );

    assert!(mixer.terminate().success());
}
