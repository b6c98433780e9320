//! Wasm plugins through the real `mixer serve` and forward-auth: the example deny-header
//! plugin decides checks, count-by counts reports in the mixer's metrics, a config the
//! plugin rejects leaves the previous one serving, and a reload under load fails no check.
//!
//! The plugins are built by adapters/examples/wasm/build.sh into target/wasm-guests/ (or
//! `$MIXER_WASM_GUESTS`); without them these tests fail under CI=1.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mixer_tests::{Mixer, http_request};

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mixer-under-test"))
}

fn guest(name: &str) -> Option<String> {
    let dir = std::env::var_os("MIXER_WASM_GUESTS").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/wasm-guests"),
        PathBuf::from,
    );
    let path = dir.join(format!("{name}.wasm"));
    if path.exists() {
        return Some(path.display().to_string());
    }
    let how = "build them with adapters/examples/wasm/build.sh";
    if std::env::var_os("CI").is_some() {
        panic!("{} is missing under CI=1: {how}", path.display());
    }
    eprintln!("skipped: {} is missing ({how})", path.display());
    None
}

fn config(deny: &str, count: &str, header: &str, message: &str) -> String {
    format!(
        r#"apiVersion: config.istio.io/v1alpha2
kind: handler
metadata: {{name: deny-header, namespace: istio-system}}
spec:
  compiledAdapter: wasm
  params:
    module: {deny}
    config: {{header: "{header}", message: "{message}"}}
    # The default 1 ms bounds the plugin's own run; a debug build on a loaded 2-core
    # machine can be descheduled for longer than that.
    limits: {{checkDeadline: 100ms}}
---
apiVersion: config.istio.io/v1alpha2
kind: instance
metadata: {{name: request-headers, namespace: istio-system}}
spec:
  compiledTemplate: authorization
  params:
    action:
      path: request.path | "/"
      properties:
        x-plugin-deny: request.headers["x-plugin-deny"] | ""
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {{name: plugin-check, namespace: istio-system}}
spec:
  actions: [{{handler: deny-header, instances: [request-headers]}}]
---
apiVersion: config.istio.io/v1alpha2
kind: handler
metadata: {{name: count-by, namespace: istio-system}}
spec:
  compiledAdapter: wasm
  params:
    module: {count}
    config: {{dimension: path}}
---
apiVersion: config.istio.io/v1alpha2
kind: instance
metadata: {{name: requestcount, namespace: istio-system}}
spec:
  compiledTemplate: metric
  params:
    value: "1"
    dimensions:
      path: request.path | "/"
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {{name: plugin-count, namespace: istio-system}}
spec:
  actions: [{{handler: count-by, instances: [requestcount]}}]
"#
    )
}

fn check(mixer: &Mixer, deny: &str) -> (u16, String) {
    let (status, _, body) =
        http_request(mixer.http, "GET", "/check", &[("x-plugin-deny", deny)]).expect("check");
    (status, body)
}

/// One Mixer v1 Report per path, each a request with that `request.path`.
fn report(mixer: &Mixer, paths: &[&str]) {
    use mixer_proto::istio::mixer::v1 as pb;
    let records: Vec<pb::CompressedAttributes> = paths
        .iter()
        .map(|p| {
            let path = mixer_model::Value::from(*p);
            mixer_frontends::mixer_v1::encode(
                [("request.path", &path)],
                mixer_frontends::mixer_v1::GLOBAL_WORD_COUNT,
            )
        })
        .collect();
    let grpc = mixer.grpc;
    tokio::runtime::Runtime::new()
        .expect("runtime")
        .block_on(async move {
            let mut client = pb::mixer_client::MixerClient::connect(format!("http://{grpc}"))
                .await
                .expect("connect");
            client
                .report(pb::ReportRequest {
                    attributes: records,
                    repeated_attributes_semantics:
                        pb::report_request::RepeatedAttributesSemantics::IndependentEncoding as i32,
                    default_words: vec![],
                    global_word_count: mixer_frontends::mixer_v1::GLOBAL_WORD_COUNT as u32,
                })
                .await
                .expect("report");
        });
}

fn start(config_text: &str) -> (Mixer, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("config.yaml"), config_text).expect("write");
    let mixer = Mixer::start(binary(), &["--config", dir.path().to_str().expect("utf-8")]);
    mixer.wait_ready(Duration::from_secs(30));
    (mixer, dir)
}

#[test]
fn plugins_decide_checks_and_count_reports() {
    let (Some(deny), Some(count)) = (guest("deny-header"), guest("count-by")) else {
        return;
    };
    let (mixer, _dir) = start(&config(&deny, &count, "x-plugin-deny", "denied by plugin"));
    let (status, body) = check(&mixer, "true");
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("denied by plugin"), "{body}");
    for other in ["false", ""] {
        assert_eq!(check(&mixer, other).0, 200, "x-plugin-deny: {other:?}");
    }
    // Three Mixer v1 reports, through the batching queue to count-by: poll for its counter.
    report(&mixer, &["/orders", "/orders", "/cart"]);
    let series = r#"mixer_wasm_plugin_counter_total{handler="count-by.handler.istio-system",key="/orders",name="requests"}"#;
    let started = Instant::now();
    loop {
        if mixer.metric(series) == Some(2.0) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "no {series}");
        std::thread::sleep(Duration::from_millis(50));
    }
    mixer.terminate();
}

#[test]
fn a_config_the_plugin_rejects_leaves_the_old_one_serving() {
    let (Some(deny), Some(count)) = (guest("deny-header"), guest("count-by")) else {
        return;
    };
    let (mixer, dir) = start(&config(&deny, &count, "x-plugin-deny", "denied by plugin"));
    // The plugin's validate rejects an empty header name.
    std::fs::write(
        dir.path().join("config.yaml"),
        config(&deny, &count, " ", "x"),
    )
    .unwrap();
    let started = Instant::now();
    while mixer
        .metric(r#"mixer_config_reloads_total{result="failure"}"#)
        .is_none_or(|v| v < 1.0)
    {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "reload not attempted"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, body) = check(&mixer, "true");
    assert_eq!(status, 403, "old config still decides: {body}");
    assert_eq!(check(&mixer, "false").0, 200);
    mixer.terminate();

    // `mixer validate` says what the plugin said, at its field path.
    let out = std::process::Command::new(binary())
        .args(["validate", dir.path().to_str().unwrap()])
        .output()
        .expect("mixer validate");
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("spec.params.config.header: must not be empty"),
        "{text}"
    );
}

#[test]
fn a_reload_under_load_fails_no_check() {
    let (Some(deny), Some(count)) = (guest("deny-header"), guest("count-by")) else {
        return;
    };
    let (mixer, dir) = start(&config(&deny, &count, "x-plugin-deny", "denied by plugin"));
    let mixer = Arc::new(mixer);
    let stop = Arc::new(AtomicBool::new(false));
    let (done, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let load: Vec<_> = (0..2)
        .map(|_| {
            let (mixer, stop, done, failed) =
                (mixer.clone(), stop.clone(), done.clone(), failed.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let (allow, _) = check(&mixer, "false");
                    let (deny, body) = check(&mixer, "true");
                    if allow != 200 || deny != 403 || !body.contains("denied by plugin") {
                        failed.fetch_add(1, Ordering::SeqCst);
                    }
                    done.fetch_add(2, Ordering::SeqCst);
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    // A new plugin config (and so a new handler): the message changes, nothing else.
    std::fs::write(
        dir.path().join("config.yaml"),
        config(&deny, &count, "x-plugin-deny", "denied by plugin, v2"),
    )
    .unwrap();
    let started = Instant::now();
    while !check(&mixer, "true").1.contains("v2") {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "new config never served"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::SeqCst);
    for t in load {
        t.join().unwrap();
    }
    assert!(done.load(Ordering::SeqCst) > 20);
    assert_eq!(
        failed.load(Ordering::SeqCst),
        0,
        "checks failed during the reload"
    );
    Arc::try_unwrap(mixer).ok().expect("sole owner").terminate();
}
