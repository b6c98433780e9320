//! kubernetesenv in the real mixer: its metrics on `/metrics` and, when the API server goes
//! away, a `note:` on `/readyz` while the mixer stays ready and the cache keeps serving.
//!
//! The API server is a stand-in (no Kubernetes API server can be installed where these tests
//! run: see `adapters/kubernetesenv/tests/standin/mod.rs`) holding bookinfo's productpage and
//! reviews pods, each owned by a ReplicaSet of a Deployment. The handler has empty params, as
//! in Istio 1.4's chart (the in-cluster config); the mixer is pointed at the stand-in by the
//! `KUBECONFIG` environment variable, which takes precedence over the params as in Istio.

#[path = "../../adapters/kubernetesenv/tests/standin/mod.rs"]
mod standin;

use std::path::Path;
use std::time::{Duration, Instant};

use mixer_tests::{Mixer, http_request};

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
