//! `mixer validate` (and `serve`) with out-of-process adapters, as a user runs them: an
//! adapter that cannot be reached is a warning (an error with `--strict`) and a readiness
//! note, never "0 warnings"; a rule sending an adapter a template it does not serve is an
//! error naming the template, whether the adapter says what it serves through gRPC server
//! reflection (the Rust SDK's allowlist example) or an `adapter` document does. The same
//! template check for a built-in adapter and a Wasm plugin.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use mixer_proto::istio::mixer::adapter::model::v1beta1 as model;
use mixer_tests::adapters::start_adapter_binary;
use mixer_tests::{Mixer, free_addr, http_request};
use tonic::{Request, Response, Status};

fn mixer() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mixer-under-test"))
}

fn validate(config: &str, extra: &[&str]) -> (Output, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("mixer.yaml");
    std::fs::write(&path, config).expect("write config");
    let out = mixer()
        .arg("validate")
        .args(extra)
        .arg(&path)
        .output()
        .expect("run mixer validate");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stdout, stderr)
}

/// A handler of adapter `allowlist` at `address` (with `extra` documents before it), an
/// instance of `template` and a rule sending it there.
fn routed(address: SocketAddr, template: &str, extra: &str) -> String {
    let params = match template {
        "listentry" => "value: request.headers[\"x-user\"] | \"\"",
        _ => "{}",
    };
    let list =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../adapters/examples/allowlist/allowed.txt");
    let list = list.display();
    format!(
        r#"{extra}kind: handler
metadata: {{name: allowlist, namespace: istio-system}}
spec:
  adapter: allowlist
  connection: {{address: "{address}", timeout: 1s}}
  params: {{file: "{list}"}}
---
kind: instance
metadata: {{name: sent, namespace: istio-system}}
spec:
  compiledTemplate: {template}
  params:
    {params}
---
kind: rule
metadata: {{name: route, namespace: istio-system}}
spec:
  actions: [{{handler: allowlist, instances: [sent]}}]
"#
    )
}

#[test]
fn an_unreachable_adapter_is_a_warning_and_an_error_with_strict() {
    // Nothing listens there.
    let config = routed(free_addr(), "listentry", "");
    let (out, stdout, stderr) = validate(&config, &[]);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    let warning = stderr
        .lines()
        .find(|l| l.contains("warning:") && l.contains("unreachable"))
        .unwrap_or_else(|| panic!("no unreachable warning in {stderr}"));
    assert!(
        warning.contains("handler allowlist") && warning.contains("spec.connection"),
        "{warning}"
    );
    assert!(stdout.contains("1 warnings"), "{stdout}");
    let (out, _, stderr) = validate(&config, &["--strict"]);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("unreachable"), "{stderr}");
}

#[test]
fn a_template_the_sdk_adapter_does_not_serve_is_an_error_learned_by_reflection() {
    let addr = free_addr();
    let _adapter =
        start_adapter_binary(Path::new(env!("CARGO_BIN_EXE_allowlist-under-test")), addr);
    let (out, stdout, stderr) = validate(&routed(addr, "checknothing", ""), &[]);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(
        stderr.contains("rule route: spec.actions[0].instances[0]: instance sent.instance.istio-system is of template checknothing, which handler allowlist.handler.istio-system")
            && stderr.contains("does not serve (it serves listentry)"),
        "{stderr}"
    );
    // What it serves passes, with no warning.
    let (out, stdout, stderr) = validate(&routed(addr, "listentry", ""), &[]);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("0 warnings"), "{stdout}");
}

/// An adapter that answers `Validate` and serves no reflection.
struct Backend;

#[tonic::async_trait]
impl model::infrastructure_backend_server::InfrastructureBackend for Backend {
    async fn validate(
        &self,
        _: Request<model::ValidateRequest>,
    ) -> Result<Response<model::ValidateResponse>, Status> {
        Ok(Response::new(model::ValidateResponse { status: None }))
    }

    async fn create_session(
        &self,
        _: Request<model::CreateSessionRequest>,
    ) -> Result<Response<model::CreateSessionResponse>, Status> {
        Err(Status::unimplemented("no sessions"))
    }

    async fn close_session(
        &self,
        _: Request<model::CloseSessionRequest>,
    ) -> Result<Response<model::CloseSessionResponse>, Status> {
        Err(Status::unimplemented("no sessions"))
    }
}

/// Which gRPC server reflection a fake adapter serves.
#[derive(Clone, Copy, PartialEq)]
enum Reflection {
    None,
    V1,
    V1alpha,
}

/// Serves [`Backend`] on its own runtime, with gRPC server reflection listing only the
/// listentry service.
fn serve_backend(reflection: Reflection) -> (SocketAddr, tokio::runtime::Runtime) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    let builder = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(mixer_proto::FILE_DESCRIPTOR_SET)
            .with_service_name("listentry.HandleListEntryService")
    };
    let v1 = (reflection == Reflection::V1).then(|| builder().build_v1().expect("reflection"));
    let v1alpha =
        (reflection == Reflection::V1alpha).then(|| builder().build_v1alpha().expect("reflection"));
    runtime.spawn(
        tonic::transport::Server::builder()
            .add_service(
                model::infrastructure_backend_server::InfrastructureBackendServer::new(Backend),
            )
            .add_optional_service(v1)
            .add_optional_service(v1alpha)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    (addr, runtime)
}

#[test]
fn an_adapter_says_what_it_serves_through_reflection_v1_or_v1alpha() {
    for reflection in [Reflection::V1, Reflection::V1alpha] {
        let (addr, runtime) = serve_backend(reflection);
        let (out, stdout, stderr) = validate(&routed(addr, "checknothing", ""), &[]);
        assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
        assert!(
            stderr.contains("rule route: spec.actions[0].instances[0]: instance sent.instance.istio-system is of template checknothing, which handler allowlist.handler.istio-system")
                && stderr.contains("does not serve (it serves listentry)"),
            "{stderr}"
        );
        let (out, stdout, stderr) = validate(&routed(addr, "listentry", ""), &[]);
        assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
        assert!(stdout.contains("0 warnings"), "{stdout}");
        runtime.shutdown_background();
    }
}

#[test]
fn without_reflection_the_adapter_document_says_what_it_serves() {
    let (addr, runtime) = serve_backend(Reflection::None);
    let document = "kind: adapter\nmetadata: {name: allowlist, namespace: istio-system}\nspec:\n  templates: [listentry]\n---\n";
    let (out, stdout, stderr) = validate(&routed(addr, "checknothing", document), &[]);
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(
        stderr.contains("instance sent.instance.istio-system is of template checknothing")
            && stderr.contains("(it supports listentry)"),
        "{stderr}"
    );
    let (out, stdout, stderr) = validate(&routed(addr, "listentry", document), &[]);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("0 warnings"), "{stdout}");
    // Without the document nothing says what it serves: accepted.
    let (out, stdout, stderr) = validate(&routed(addr, "checknothing", ""), &[]);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    runtime.shutdown_background();
}

#[test]
fn built_in_and_wasm_adapters_get_the_same_template_check() {
    let config = r#"kind: handler
metadata: {name: deny, namespace: istio-system}
spec: {compiledAdapter: denier}
---
kind: instance
metadata: {name: count, namespace: istio-system}
spec:
  compiledTemplate: metric
  params: {value: "1"}
---
kind: rule
metadata: {name: route, namespace: istio-system}
spec:
  actions: [{handler: deny, instances: [count]}]
"#;
    let (out, _, stderr) = validate(config, &[]);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("rule route: spec.actions[0].instances[0]: instance count.instance.istio-system is of template metric, which handler deny.handler.istio-system (adapter denier) does not support"),
        "{stderr}"
    );
    let Some(module) = mixer_tests::wasm_guest("deny-header") else {
        return;
    };
    let wasm = config.replace(
        "spec: {compiledAdapter: denier}",
        &format!(
            "spec:\n  compiledAdapter: wasm\n  params:\n    module: {}\n    config: {{header: x-deny, message: denied}}",
            module.display()
        ),
    );
    let (out, _, stderr) = validate(&wasm, &[]);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("instance count.instance.istio-system is of template metric, which handler deny.handler.istio-system (adapter wasm) does not support"),
        "{stderr}"
    );
}

#[test]
fn serve_with_an_unreachable_adapter_is_ready_with_a_note() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("mixer.yaml");
    std::fs::write(&path, routed(free_addr(), "listentry", "")).expect("write config");
    let mixer = Mixer::start(
        Path::new(env!("CARGO_BIN_EXE_mixer-under-test")),
        &["--config", path.to_str().expect("utf-8")],
    );
    let start = Instant::now();
    let body = loop {
        if let Ok((200, _, body)) = http_request(mixer.admin, "GET", "/readyz", &[]) {
            break body;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "mixer not ready");
        std::thread::sleep(Duration::from_millis(25));
    };
    assert!(
        body.lines().any(
            |l| l.starts_with("note: handler allowlist.handler.istio-system")
                && l.contains("unreachable")
        ),
        "{body}"
    );
}
