//! The real mixer with an out-of-process adapter that fails: killed, restarted on the same
//! port, hung, or refusing its params at config load. Every check during an outage gets the
//! handler's declared fail policy (503 for CLOSED through forward-auth, 200 for OPEN) within
//! the deadline, the mixer never crashes, and a restarted adapter is used again within a
//! second. The Rust SDK's example adapter (the allowlist, a real process) killed and started
//! again on its port answers the very first request after: the mixer re-creates the session
//! the new process does not know and sends the check again.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mixer_proto::checknothing;
use mixer_proto::google::rpc::Status as RpcStatus;
use mixer_proto::istio::mixer::adapter::model::v1beta1 as model;
use mixer_tests::adapters::{InProcessAdapter, start_adapter_binary};
use mixer_tests::{Mixer, free_addr, http_request};
use tonic::{Request, Response, Status};

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mixer-under-test"))
}

/// The adapter's behaviour and what it saw; a restart starts with fresh sessions.
#[derive(Default)]
struct Shared {
    hang: AtomicBool,
    calls: AtomicUsize,
    sessions_created: AtomicUsize,
}

#[derive(Clone)]
struct Adapter {
    shared: Arc<Shared>,
    sessions: Arc<Mutex<HashSet<String>>>,
}

#[tonic::async_trait]
impl checknothing::handle_check_nothing_service_server::HandleCheckNothingService for Adapter {
    async fn handle_check_nothing(
        &self,
        request: Request<checknothing::HandleCheckNothingRequest>,
    ) -> Result<Response<model::CheckResult>, Status> {
        if self.shared.hang.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        let config = request.into_inner().adapter_config.unwrap_or_default();
        if config.type_url == mixer_oop_session_type_url() {
            let id = String::from_utf8_lossy(&config.value).to_string();
            if !self.sessions.lock().unwrap().contains(&id) {
                return Err(Status::not_found(format!("unknown session {id}")));
            }
        }
        self.shared.calls.fetch_add(1, Ordering::SeqCst);
        // No validity: every check reaches the adapter (nothing is cached).
        Ok(Response::new(model::CheckResult::default()))
    }
}

/// Istio 1.4's marker for an `adapter_config` that carries a session id.
fn mixer_oop_session_type_url() -> &'static str {
    "google.protobuf.Any.type_url"
}

#[tonic::async_trait]
impl model::infrastructure_backend_server::InfrastructureBackend for Adapter {
    async fn validate(
        &self,
        request: Request<model::ValidateRequest>,
    ) -> Result<Response<model::ValidateResponse>, Status> {
        let config = request.into_inner().adapter_config.unwrap_or_default();
        let params = <prost_types::Struct as prost::Message>::decode(config.value.as_slice())
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let status = params.fields.contains_key("bad").then(|| RpcStatus {
            code: 3,
            message: "params.bad: this adapter takes no 'bad'".into(),
            details: vec![],
        });
        Ok(Response::new(model::ValidateResponse { status }))
    }

    async fn create_session(
        &self,
        _: Request<model::CreateSessionRequest>,
    ) -> Result<Response<model::CreateSessionResponse>, Status> {
        let n = self.shared.sessions_created.fetch_add(1, Ordering::SeqCst);
        let id = format!("session-{n}");
        self.sessions.lock().unwrap().insert(id.clone());
        Ok(Response::new(model::CreateSessionResponse {
            session_id: id,
            status: None,
        }))
    }

    async fn close_session(
        &self,
        request: Request<model::CloseSessionRequest>,
    ) -> Result<Response<model::CloseSessionResponse>, Status> {
        self.sessions
            .lock()
            .unwrap()
            .remove(&request.into_inner().session_id);
        Ok(Response::new(model::CloseSessionResponse::default()))
    }
}

/// The adapter in this process, killed like a process when dropped.
fn start_adapter(addr: SocketAddr, shared: Arc<Shared>) -> InProcessAdapter {
    let adapter = Adapter {
        shared,
        sessions: Arc::default(),
    };
    let routes = tonic::service::Routes::new(
        checknothing::handle_check_nothing_service_server::HandleCheckNothingServiceServer::new(
            adapter.clone(),
        ),
    )
    .add_service(model::infrastructure_backend_server::InfrastructureBackendServer::new(adapter));
    InProcessAdapter::start(addr, routes)
}

/// Two handlers on the same adapter: `closed` (the default for checks) and `open`; the
/// `x-policy` header picks the rule.
fn config(adapter: SocketAddr, params: &str) -> String {
    format!(
        r#"
kind: handler
metadata: {{name: closed, namespace: istio-system}}
spec:
  adapter: myadapter
  params: {params}
  connection: {{address: '{adapter}', timeout: 300ms}}
---
kind: handler
metadata: {{name: open, namespace: istio-system}}
spec:
  adapter: myadapter
  failPolicy: OPEN
  params: {params}
  connection: {{address: '{adapter}', timeout: 300ms}}
---
kind: instance
metadata: {{name: nothing, namespace: istio-system}}
spec: {{compiledTemplate: checknothing}}
---
kind: rule
metadata: {{name: closed, namespace: istio-system}}
spec:
  match: request.headers["x-policy"] == "closed"
  actions: [{{handler: closed, instances: [nothing]}}]
---
kind: rule
metadata: {{name: open, namespace: istio-system}}
spec:
  match: request.headers["x-policy"] == "open"
  actions: [{{handler: open, instances: [nothing]}}]
"#
    )
}

/// One forward-auth check; returns the status and how long it took.
fn check(mixer: &Mixer, policy: &str) -> (u16, Duration) {
    let started = Instant::now();
    let (status, _, _) =
        http_request(mixer.http, "GET", "/check", &[("x-policy", policy)]).expect("check");
    (status, started.elapsed())
}

/// Checks in a loop for `how_long`, each answered with `closed` / `open` within the
/// deadline plus slack.
fn steady_load(mixer: &Mixer, how_long: Duration, closed: u16, open: u16) -> usize {
    let started = Instant::now();
    let mut n = 0;
    while started.elapsed() < how_long {
        for (policy, want) in [("closed", closed), ("open", open)] {
            let (status, took) = check(mixer, policy);
            assert_eq!(status, want, "{policy} check #{n}");
            assert!(
                took < Duration::from_millis(900),
                "{policy} check took {took:?}"
            );
            n += 1;
        }
    }
    n
}

/// Polls closed checks until the adapter answers; returns how long it took.
fn time_to_recover(mixer: &Mixer) -> Duration {
    let started = Instant::now();
    loop {
        let (status, _) = check(mixer, "closed");
        if status == 200 && check(mixer, "open").0 == 200 {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "adapter never used again"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn start_mixer(adapter: SocketAddr) -> (Mixer, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("config.yaml"),
        config(adapter, "{list: [a]}"),
    )
    .expect("write");
    let mixer = Mixer::start(binary(), &["--config", dir.path().to_str().expect("utf-8")]);
    mixer.wait_ready(Duration::from_secs(20));
    (mixer, dir)
}

#[test]
fn a_killed_adapter_gets_the_fail_policy_and_is_used_again_after_a_restart() {
    let addr = free_addr();
    let shared = Arc::new(Shared::default());
    let adapter = start_adapter(addr, shared.clone());
    let (mixer, _dir) = start_mixer(addr);

    steady_load(&mixer, Duration::from_millis(300), 200, 200);
    let before = shared.calls.load(Ordering::SeqCst);
    assert!(before >= 2, "checks reached the adapter");

    adapter.kill();
    let n = steady_load(&mixer, Duration::from_millis(1500), 503, 200);
    assert!(n >= 4);
    assert_eq!(shared.calls.load(Ordering::SeqCst), before);

    let adapter = start_adapter(addr, shared.clone());
    let took = time_to_recover(&mixer);
    assert!(took < Duration::from_secs(1), "recovered after {took:?}");
    assert!(shared.calls.load(Ordering::SeqCst) > before);
    // The restarted adapter forgot the sessions: new ones were created.
    assert!(shared.sessions_created.load(Ordering::SeqCst) >= 3);
    steady_load(&mixer, Duration::from_millis(300), 200, 200);

    let (status, _, body) = http_request(mixer.admin, "GET", "/metrics", &[]).expect("metrics");
    assert_eq!(status, 200);
    assert!(
        body.contains("mixer_oop_calls_total{handler=\"closed.handler.istio-system\""),
        "{body}"
    );
    assert!(
        body.contains("mixer_oop_circuit_opened_total{handler=\"closed.handler.istio-system\"}")
    );
    // Checks refused while the circuit was open are counted as such, not as overload.
    let calls = |result: &str| {
        body.lines().any(|l| {
            l.starts_with("mixer_handler_calls_total{")
                && l.contains("closed.handler.istio-system")
                && l.contains(&format!("result=\"{result}\""))
        })
    };
    assert!(calls("circuit_open"), "{body}");
    assert!(!calls("overloaded"), "{body}");
    assert_eq!(body.matches("# TYPE mixer_oop_calls_total").count(), 1);

    drop(adapter);
    let exit = mixer.terminate();
    assert!(exit.success(), "mixer exit {exit:?}");
}

#[test]
fn a_hung_adapter_gets_the_fail_policy_within_the_deadline() {
    let addr = free_addr();
    let shared = Arc::new(Shared::default());
    let _adapter = start_adapter(addr, shared.clone());
    let (mixer, _dir) = start_mixer(addr);
    steady_load(&mixer, Duration::from_millis(200), 200, 200);

    shared.hang.store(true, Ordering::SeqCst);
    steady_load(&mixer, Duration::from_millis(1500), 503, 200);

    shared.hang.store(false, Ordering::SeqCst);
    let took = time_to_recover(&mixer);
    assert!(took < Duration::from_secs(1), "recovered after {took:?}");
    let exit = mixer.terminate();
    assert!(exit.success(), "mixer exit {exit:?}");
}

#[test]
fn params_the_adapter_refuses_keep_the_previous_config() {
    let addr = free_addr();
    let shared = Arc::new(Shared::default());
    let _adapter = start_adapter(addr, shared.clone());
    let (mixer, dir) = start_mixer(addr);
    assert_eq!(check(&mixer, "closed").0, 200);

    std::fs::write(dir.path().join("config.yaml"), config(addr, "{bad: true}")).expect("write");
    let started = Instant::now();
    let body = loop {
        let (_, _, body) = http_request(mixer.admin, "GET", "/readyz", &[]).expect("readyz");
        if body.contains("last reload failed") {
            break body;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no reload failure: {body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(body.starts_with("ready"), "{body}");
    assert!(
        body.contains("params.bad: this adapter takes no 'bad'"),
        "{body}"
    );
    // The previous snapshot still sends checks to the adapter.
    let before = shared.calls.load(Ordering::SeqCst);
    assert_eq!(check(&mixer, "closed").0, 200);
    assert!(shared.calls.load(Ordering::SeqCst) > before);
    drop(mixer);
}

#[test]
fn the_first_check_after_an_adapter_restart_is_decided() {
    let dir = tempfile::tempdir().expect("tempdir");
    let allowed = dir.path().join("allowed.txt");
    std::fs::write(&allowed, "alice\nbob\n").expect("write allow list");
    let addr = free_addr();
    let adapter = start_adapter_binary(Path::new(env!("CARGO_BIN_EXE_allowlist-under-test")), addr);
    let example =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../adapters/examples/allowlist/allowlist.yaml");
    let yaml = std::fs::read_to_string(example)
        .expect("read example")
        .replace("127.0.0.1:9070", &addr.to_string())
        .replace(
            "adapters/examples/allowlist/allowed.txt",
            allowed.to_str().expect("utf-8"),
        );
    let configs = dir.path().join("config");
    std::fs::create_dir(&configs).expect("mkdir");
    std::fs::write(configs.join("allowlist.yaml"), yaml).expect("write config");
    let mixer = Mixer::start(binary(), &["--config", configs.to_str().expect("utf-8")]);
    mixer.wait_ready(Duration::from_secs(20));
    let check =
        |user: &str| http_request(mixer.http, "GET", "/check", &[("x-user", user)]).expect("check");
    assert_eq!(check("alice").0, 200);

    drop(adapter);
    let _adapter =
        start_adapter_binary(Path::new(env!("CARGO_BIN_EXE_allowlist-under-test")), addr);
    // Another user: the mixer's cached answer for alice would not reach the adapter.
    let (status, _, body) = check("bob");
    assert_eq!(status, 200, "the first check after the restart: {body}");
    let (status, _, body) = check("mallory");
    assert_eq!(status, 403, "{body}");
    let lost = mixer
        .metric(
            "mixer_oop_calls_total{handler=\"allowlist.handler.istio-system\",call=\"check\",outcome=\"session_lost\"}",
        )
        .unwrap_or_default();
    assert_eq!(lost, 1.0, "the check was sent again once");
    let exit = mixer.terminate();
    assert!(exit.success(), "mixer exit {exit:?}");
}

/// Runs the allowlist adapter with `args` and `env`, which must make it exit within a few
/// seconds; returns its exit status and stderr.
fn allowlist_exit(args: &[&str], env: &[(&str, &str)]) -> (std::process::ExitStatus, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_allowlist-under-test"))
        .args(args)
        .envs(env.iter().copied())
        .env_remove("ADAPTER_ADDR")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the allowlist adapter");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the adapter kept running with {args:?} {env:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("read stderr");
    (status, stderr)
}

/// The SDK's one-call `serve` refuses what it cannot serve with a message, never a panic nor
/// a plaintext port in place of the TLS one asked for.
#[test]
fn an_adapter_set_up_wrong_exits_with_a_clear_error() {
    let (status, stderr) = allowlist_exit(&["not an address"], &[]);
    assert!(!status.success(), "{stderr}");
    assert!(stderr.starts_with("mixer adapter allowlist: "), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    let addr = free_addr().to_string();
    let (status, stderr) = allowlist_exit(&[&addr], &[("ADAPTER_TLS_CERT", "/nonexistent.pem")]);
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("ADAPTER_TLS_CERT is set but ADAPTER_TLS_KEY is not"),
        "{stderr}"
    );

    // A required token that cannot be read would leave the adapter open to every caller.
    let (status, stderr) = allowlist_exit(&[&addr], &[("ADAPTER_TOKEN_FILE", "/nonexistent")]);
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("/nonexistent"), "{stderr}");
}
