//! Attribute generators over the out-of-process and Wasm transports, through the real
//! `mixer serve` and forward-auth: an API key read by a generator (the SDK's keyring example
//! in its own server, and the key-labels Wasm plugin) becomes `request.auth.principal` and
//! `request.auth.claims` through the instance's `attributeBindings`, and a check rule decides
//! on the claim; an unknown key is the generator's denial (401).
//!
//! The keyring adapter is served by the SDK on a runtime of this test's own (the mixer
//! reaches it only over the adapter protocol); the plugin is built by
//! adapters/examples/wasm/build.sh (without it this test fails under CI=1).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use mixer_tests::{Mixer, http_request};

/// The keyring example served by the SDK on a loopback port, until dropped.
struct Keyring {
    addr: std::net::SocketAddr,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Keyring {
    fn start() -> Keyring {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the adapter");
        listener.set_nonblocking(true).expect("non-blocking");
        let addr = listener.local_addr().expect("adapter address");
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            let _ = mixer_adapter_sdk::Server::from_arc(Arc::new(mixer_example_keyring::Keyring))
                .serve_with_shutdown(listener, std::future::pending())
                .await;
        });
        Keyring {
            addr,
            runtime: Some(runtime),
        }
    }
}

impl Drop for Keyring {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// Two generators, each for the requests whose `x-via` names its transport, with the same
/// two keys; one check rule for every request, denying any tier but gold.
fn config(keyring: std::net::SocketAddr, plugin: &str) -> String {
    let keys = r#"{k-gold: {principal: team-a, labels: {tier: gold}}, k-free: {principal: team-b, labels: {tier: free}}}"#;
    let bindings = r#"
  attributeBindings:
    request.auth.principal: $out.principal | ""
    request.auth.claims: $out.claims | emptyStringMap()"#;
    format!(
        r#"apiVersion: config.istio.io/v1alpha2
kind: handler
metadata: {{name: keyring, namespace: istio-system}}
spec:
  adapter: keyring
  connection: {{address: "{keyring}", timeout: 2s}}
  params: {{keys: {keys}}}
---
kind: instance
metadata: {{name: oop-key, namespace: istio-system}}
spec:
  compiledTemplate: apikey
  params:
    key: request.headers["x-api-key"] | ""{bindings}
---
kind: rule
metadata: {{name: oop-identity, namespace: istio-system}}
spec:
  match: (request.headers["x-via"] | "") == "oop"
  actions: [{{handler: keyring, instances: [oop-key]}}]
---
kind: handler
metadata: {{name: key-labels, namespace: istio-system}}
spec:
  compiledAdapter: wasm
  params:
    module: {plugin}
    config: {{keys: {keys}}}
    # The default 1 ms bounds the plugin's own run; a debug build on a loaded 2-core
    # machine can be descheduled for longer than that.
    limits: {{checkDeadline: 100ms}}
---
kind: instance
metadata: {{name: wasm-key, namespace: istio-system}}
spec:
  compiledTemplate: apikey
  params:
    key: request.headers["x-api-key"] | ""{bindings}
---
kind: rule
metadata: {{name: wasm-identity, namespace: istio-system}}
spec:
  match: (request.headers["x-via"] | "") == "wasm"
  actions: [{{handler: key-labels, instances: [wasm-key]}}]
---
kind: handler
metadata: {{name: gold-only, namespace: istio-system}}
spec:
  compiledAdapter: denier
  params: {{status: {{code: 7, message: gold tier only}}}}
---
kind: instance
metadata: {{name: nothing, namespace: istio-system}}
spec: {{compiledTemplate: checknothing}}
---
kind: rule
metadata: {{name: gold-tier, namespace: istio-system}}
spec:
  match: (request.auth.claims["tier"] | "") != "gold"
  actions: [{{handler: gold-only, instances: [nothing]}}]
"#
    )
}

#[test]
fn generators_over_both_transports_feed_the_check_rules() {
    let Some(plugin) = mixer_tests::wasm_guest("key-labels") else {
        return;
    };
    let keyring = Keyring::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let text = config(keyring.addr, &plugin.display().to_string());
    std::fs::write(dir.path().join("config.yaml"), text).expect("write the config");
    let mixer = Mixer::start(
        Path::new(env!("CARGO_BIN_EXE_mixer-under-test")),
        &["--config", dir.path().to_str().expect("utf-8")],
    );
    mixer.wait_ready(Duration::from_secs(30));
    for via in ["oop", "wasm"] {
        let check = |key: &str| {
            let (status, _, body) = http_request(
                mixer.http,
                "GET",
                "/check",
                &[("x-via", via), ("x-api-key", key)],
            )
            .expect("check");
            (status, body)
        };
        assert_eq!(check("k-gold").0, 200, "{via}: a gold key passes");
        let (status, body) = check("k-free");
        assert_eq!(
            (status, body.contains("gold tier only")),
            (403, true),
            "{via}: the check rule read the generated claim: {body}"
        );
        let (status, body) = check("k-unknown");
        assert_eq!(
            (status, body.contains("unknown API key")),
            (401, true),
            "{via}: the generator's denial decides: {body}"
        );
    }
    assert!(mixer.terminate().success());
}
