//! The example out-of-process adapters (`adapters/examples/`) as real processes: the Rust
//! allow-list (built as `allowlist-under-test`), and the Python metrics-to-file and
//! allowed-users adapters on the Python adapter helper (`adapters/sdk-python`; run by the
//! Python of a virtual environment with its requirements: `MIXER_PYTHON`, default
//! `/tmp/mixer-venv/bin/python`); and the Python recipe that sends a report
//! (`python-report`). Each runs with its own YAML from the examples folder (ports and paths
//! rewritten), behind the real mixer binary; checks go through HTTP forward-auth, reports
//! through Mixer v1 Report. Each adapter is also called directly over gRPC.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mixer_adapter_sdk::proto::istio::mixer::adapter::model::v1beta1 as model;
use mixer_adapter_sdk::proto::{listentry, metric};
use mixer_model::Value;
use mixer_oop::params_any;
use mixer_proto::istio::mixer::v1 as pb;
use mixer_proto::istio::mixer::v1::mixer_client::MixerClient;
use mixer_tests::adapters::{Process, start_adapter_binary};
use mixer_tests::{Mixer, free_addr, http_request};

#[path = "support/python.rs"]
mod python;
#[macro_use]
#[path = "support/reflection.rs"]
mod reflection;
use model::infrastructure_backend_client::InfrastructureBackendClient;
use python::python_or_skip;
use serde_json::json;

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../adapters/examples")
}

/// An example's YAML with its address and file path replaced, written to `dir`.
fn config(example_yaml: &Path, replacements: &[(&str, &str)], dir: &Path) -> PathBuf {
    let mut text = std::fs::read_to_string(example_yaml).expect("read example yaml");
    for (from, to) in replacements {
        assert!(
            text.contains(from),
            "{} no longer contains {from:?}",
            example_yaml.display()
        );
        text = text.replace(from, to);
    }
    let path = dir.join("mixer.yaml");
    std::fs::write(&path, text).expect("write config");
    path
}

async fn start_mixer(config: &Path) -> Mixer {
    let mixer = Mixer::start(
        Path::new(env!("CARGO_BIN_EXE_mixer-under-test")),
        &["--config", config.to_str().expect("utf-8")],
    );
    let admin = mixer.admin;
    tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        while !matches!(http_request(admin, "GET", "/readyz", &[]), Ok((200, _, _))) {
            assert!(start.elapsed() < Duration::from_secs(20), "mixer not ready");
            std::thread::sleep(Duration::from_millis(25));
        }
    })
    .await
    .expect("join");
    mixer
}

/// A forward-auth check with `x-user: USER` (no header when `None`): (status, body).
async fn check(mixer: SocketAddr, user: Option<&str>) -> (u16, String) {
    let user = user.map(str::to_string);
    tokio::task::spawn_blocking(move || {
        let headers: Vec<(&str, &str)> = user.iter().map(|u| ("x-user", u.as_str())).collect();
        let (status, _, body) = http_request(mixer, "GET", "/check", &headers).expect("check");
        (status, body)
    })
    .await
    .expect("join")
}

/// Polls a check until it answers `want` (cached answers live one second).
async fn check_until(mixer: SocketAddr, user: &str, want: u16) {
    let start = Instant::now();
    loop {
        let (status, body) = check(mixer, Some(user)).await;
        if status == want {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "{user}: wanted {want}, still {status} {body:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn start_allowlist() -> (SocketAddr, Process) {
    let addr = free_addr();
    let binary = Path::new(env!("CARGO_BIN_EXE_allowlist-under-test"));
    (addr, start_adapter_binary(binary, addr))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowlist_answers_checks_through_the_mixer() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Not beside the config: the mixer reloads on changes there, and this test shows the
    // adapter's own re-reading.
    let lists = tempfile::tempdir().expect("tempdir");
    let allowed = lists.path().join("allowed.txt");
    std::fs::write(&allowed, "# test users\nalice\n").expect("write allow list");
    let (adapter, mut process) = start_allowlist();
    let config = config(
        &examples().join("allowlist/allowlist.yaml"),
        &[
            ("127.0.0.1:9070", &adapter.to_string()),
            (
                "adapters/examples/allowlist/allowed.txt",
                allowed.to_str().expect("utf-8"),
            ),
        ],
        dir.path(),
    );
    let mixer = start_mixer(&config).await;

    assert_eq!(check(mixer.http, Some("alice")).await.0, 200);
    let (status, body) = check(mixer.http, Some("mallory")).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("not on the allow list"), "{body:?}");
    assert_eq!(check(mixer.http, None).await.0, 403);

    // The adapter re-reads the file when it changes; the mixer's cached denial lasts 1 s.
    std::fs::write(&allowed, "alice\nmallory\n").expect("rewrite allow list");
    check_until(mixer.http, "mallory", 200).await;

    // Adapter gone: "could not decide", failing closed (503), never a 200.
    drop(process.0.kill());
    let _ = process.0.wait();
    let (status, body) = check(mixer.http, Some("bob")).await;
    assert_eq!(status, 503, "{body}");
    mixer.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowlist_answers_direct_grpc_calls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let allowed = dir.path().join("allowed.txt");
    std::fs::write(&allowed, "carol\n").expect("write allow list");
    let (adapter, _process) = start_allowlist();
    let endpoint = format!("http://{adapter}");
    let mut backend = InfrastructureBackendClient::connect(endpoint.clone())
        .await
        .expect("connect");

    let missing = backend
        .validate(model::ValidateRequest {
            adapter_config: Some(params_any(&json!({"file": "/nonexistent/allowed.txt"}))),
            ..Default::default()
        })
        .await
        .expect("validate")
        .into_inner();
    let status = missing.status.expect("status");
    assert_eq!(status.code, 3, "{status:?}");
    assert!(
        status
            .message
            .starts_with("file: /nonexistent/allowed.txt: "),
        "{status:?}"
    );

    let session = backend
        .create_session(model::CreateSessionRequest {
            adapter_config: Some(params_any(&json!({"file": allowed}))),
            ..Default::default()
        })
        .await
        .expect("create session")
        .into_inner();
    assert_eq!(session.status.expect("status").code, 0);

    let mut client =
        listentry::handle_list_entry_service_client::HandleListEntryServiceClient::connect(
            endpoint,
        )
        .await
        .expect("connect");
    let ask = |value: &str| listentry::HandleListEntryRequest {
        instance: Some(listentry::InstanceMsg {
            name: "user.instance.istio-system".into(),
            value: value.into(),
        }),
        adapter_config: Some(prost_types::Any {
            type_url: "google.protobuf.Any.type_url".into(),
            value: session.session_id.as_bytes().to_vec(),
        }),
        dedup_id: String::new(),
    };
    let ok = client.handle_list_entry(ask("carol")).await.expect("check");
    assert_eq!(ok.get_ref().status.as_ref().map(|s| s.code), Some(0));
    let no = client.handle_list_entry(ask("dave")).await.expect("check");
    assert_eq!(no.get_ref().status.as_ref().map(|s| s.code), Some(7));
    assert_eq!(
        no.get_ref().valid_duration.as_ref().map(|d| d.seconds),
        Some(1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowlist_refusing_its_params_keeps_the_config_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (adapter, _process) = start_allowlist();
    let config = config(
        &examples().join("allowlist/allowlist.yaml"),
        &[
            ("127.0.0.1:9070", &adapter.to_string()),
            (
                "adapters/examples/allowlist/allowed.txt",
                "/nonexistent/allowed.txt",
            ),
        ],
        dir.path(),
    );
    let mixer = Mixer::start(
        Path::new(env!("CARGO_BIN_EXE_mixer-under-test")),
        &["--config", config.to_str().expect("utf-8")],
    );
    // The mixer asks the adapter's Validate at config load: the refusal is a config error
    // (with the adapter's message), so no config is active and the mixer is not ready.
    let admin = mixer.admin;
    let (status, body) = tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        loop {
            if let Ok((status, _, body)) = http_request(admin, "GET", "/readyz", &[])
                && body.contains("file: /nonexistent/allowed.txt: ")
            {
                return (status, body);
            }
            assert!(start.elapsed() < Duration::from_secs(20), "no refusal seen");
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await
    .expect("join");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("/nonexistent/allowed.txt"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixer_validate_asks_the_remote_adapter_to_validate_its_params() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (adapter, _process) = start_allowlist();
    let address = adapter.to_string();
    let validate = |config: &Path| {
        let out = Command::new(env!("CARGO_BIN_EXE_mixer-under-test"))
            .args(["validate", config.to_str().expect("utf-8")])
            .output()
            .expect("run mixer validate");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let good = config(
        &examples().join("allowlist/allowlist.yaml"),
        &[
            ("127.0.0.1:9070", &address),
            (
                "adapters/examples/allowlist/allowed.txt",
                examples()
                    .join("allowlist/allowed.txt")
                    .to_str()
                    .expect("utf-8"),
            ),
        ],
        dir.path(),
    );
    let (ok, stderr) = validate(&good);
    assert!(ok, "the example's own params are valid: {stderr}");
    // The file exists only for the adapter to judge: the mixer's own checks pass, and only
    // the adapter's Validate refuses, as `serve` does when it builds the snapshot.
    let bad_dir = dir.path().join("bad");
    std::fs::create_dir(&bad_dir).expect("mkdir");
    let bad = config(
        &examples().join("allowlist/allowlist.yaml"),
        &[
            ("127.0.0.1:9070", &address),
            (
                "adapters/examples/allowlist/allowed.txt",
                "/nonexistent/allowed.txt",
            ),
        ],
        &bad_dir,
    );
    let (ok, stderr) = validate(&bad);
    assert!(!ok, "refused params must fail mixer validate: {stderr}");
    assert!(stderr.contains("mixer.yaml: handler "), "{stderr}");
    assert!(stderr.contains("spec.params: "), "{stderr}");
    assert!(stderr.contains("rejected its params"), "{stderr}");
    assert!(stderr.contains("/nonexistent/allowed.txt"), "{stderr}");
}

/// An example adapter on the Python adapter helper (`adapters/sdk-python`), listening on a
/// free port: `adapters/examples/<example>/adapter.py`.
fn start_python_adapter(python: &Path, example: &str) -> (SocketAddr, Process) {
    start_python_adapter_with(python, example, &[])
}

/// [`start_python_adapter`] with more command-line arguments.
fn start_python_adapter_with(python: &Path, example: &str, args: &[&str]) -> (SocketAddr, Process) {
    let addr = free_addr();
    (addr, python_adapter_at(python, example, addr, args))
}

/// The example adapter listening on `addr`.
fn python_adapter_at(python: &Path, example: &str, addr: SocketAddr, args: &[&str]) -> Process {
    let mut command = Command::new(python);
    command
        .arg(examples().join(example).join("adapter.py"))
        .arg(addr.to_string())
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    let mut process = Process::spawn(command, "the Python adapter");
    process.wait_listening(addr);
    process
}

fn record(method: &str, code: i64) -> pb::CompressedAttributes {
    let method = Value::from(method);
    let code = Value::Int64(code);
    mixer_frontends::mixer_v1::encode(
        [("request.method", &method), ("response.code", &code)],
        mixer_frontends::mixer_v1::GLOBAL_WORD_COUNT,
    )
}

fn lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_metrics_adapter_writes_reports_through_the_mixer() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("metrics.jsonl");
    let (adapter, _process) = start_python_adapter(&python, "python-metrics");

    // Directly: bad params are refused by Validate.
    let mut backend = InfrastructureBackendClient::connect(format!("http://{adapter}"))
        .await
        .expect("connect");
    let refused = backend
        .validate(model::ValidateRequest {
            adapter_config: Some(params_any(&json!({"path": 7}))),
            ..Default::default()
        })
        .await
        .expect("validate")
        .into_inner();
    assert_eq!(refused.status.map(|s| s.code), Some(3));

    // Directly: one metric call with params in the request; the helper hands the adapter
    // each attribute type as a Python value (written here with json.dumps' default=str).
    let mut metrics = metric::handle_metric_service_client::HandleMetricServiceClient::connect(
        format!("http://{adapter}"),
    )
    .await
    .expect("connect");
    let direct = dir.path().join("direct.jsonl");
    use mixer_proto::istio::policy::v1beta1 as policy;
    use policy::value::Value as V;
    let value = |v: V| policy::Value { value: Some(v) };
    let dimensions = [
        (
            "ip",
            V::IpAddressValue(policy::IpAddress {
                value: vec![10, 0, 0, 1],
            }),
        ),
        (
            "time",
            V::TimestampValue(policy::TimeStamp {
                value: Some(prost_types::Timestamp {
                    seconds: 1_700_000_000,
                    nanos: 0,
                }),
            }),
        ),
        (
            "took",
            V::DurationValue(policy::Duration {
                value: Some(prost_types::Duration {
                    seconds: 1,
                    nanos: 500_000_000,
                }),
            }),
        ),
        (
            "host",
            V::DnsNameValue(policy::DnsName {
                value: "example.com".into(),
            }),
        ),
        (
            "headers",
            V::StringMapValue(policy::StringMap {
                value: [("x-user".into(), "alice".into())].into(),
            }),
        ),
        ("ok", V::BoolValue(true)),
        ("code", V::Int64Value(200)),
    ];
    metrics
        .handle_metric(metric::HandleMetricRequest {
            instances: vec![metric::InstanceMsg {
                name: "direct".into(),
                value: Some(value(V::DoubleValue(2.5))),
                dimensions: dimensions
                    .into_iter()
                    .map(|(k, v)| (k.into(), value(v)))
                    .collect(),
                ..Default::default()
            }],
            adapter_config: Some(params_any(&json!({"path": direct}))),
            dedup_id: String::new(),
        })
        .await
        .expect("handle metric");
    assert_eq!(
        lines(&direct),
        [json!({"name": "direct", "value": 2.5, "dimensions": {
            "ip": "10.0.0.1",
            "time": "2023-11-14 22:13:20+00:00",
            "took": "0:00:01.500000",
            "host": "example.com",
            "headers": {"x-user": "alice"},
            "ok": true,
            "code": 200,
        }})]
    );

    // Through the mixer: two reported requests, two lines.
    let config = config(
        &examples().join("python-metrics/metrics.yaml"),
        &[
            ("127.0.0.1:9071", &adapter.to_string()),
            ("/tmp/mixer-metrics.jsonl", out.to_str().expect("utf-8")),
        ],
        dir.path(),
    );
    let mixer = start_mixer(&config).await;
    let mut client = MixerClient::connect(format!("http://{}", mixer.grpc))
        .await
        .expect("connect");
    client
        .report(pb::ReportRequest {
            attributes: vec![record("GET", 200), record("POST", 503)],
            repeated_attributes_semantics:
                pb::report_request::RepeatedAttributesSemantics::IndependentEncoding as i32,
            default_words: vec![],
            global_word_count: mixer_frontends::mixer_v1::GLOBAL_WORD_COUNT as u32,
        })
        .await
        .expect("report");
    let start = Instant::now();
    let mut got = lines(&out);
    while got.len() < 2 && start.elapsed() < Duration::from_secs(15) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        got = lines(&out);
    }
    let mut got: Vec<_> = got
        .into_iter()
        .map(|l| {
            // The instance's fully qualified name (`requestcount.istio-system`).
            let name = l["name"].as_str().unwrap_or_default();
            assert!(name.starts_with("requestcount."), "{l}");
            assert_eq!(l["value"], 1, "{l}");
            l["dimensions"].clone()
        })
        .collect();
    got.sort_by_key(|d| d.to_string());
    assert_eq!(
        got,
        [
            json!({"method": "GET", "response_code": 200}),
            json!({"method": "POST", "response_code": 503}),
        ]
    );
    mixer.terminate();
}

/// A Python author runs the conformance kit with the mixer binary alone: the templates come
/// from the helper's server reflection, the report says each promise held.
#[test]
fn python_check_adapter_passes_mixer_conformance() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let (adapter, _process) = start_python_adapter(&python, "python-check");
    let out = Command::new(env!("CARGO_BIN_EXE_mixer-under-test"))
        .args(["conformance", "--adapter", &adapter.to_string()])
        .args(["--params", "{users: [alice]}"])
        .output()
        .expect("run mixer conformance");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert!(
        report.contains("templates exercised: listentry"),
        "{report}"
    );
    assert!(report.contains("promises checked held"), "{report}");
    assert!(!report.contains("BROKEN"), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_check_adapter_decides_checks_through_the_mixer() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let (adapter, process) = start_python_adapter(&python, "python-check");

    // Server reflection lists the template's service (how the mixer learns what the adapter
    // serves), in both versions of the reflection protocol.
    let want = [
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
        "istio.mixer.adapter.model.v1beta1.InfrastructureBackend",
        "listentry.HandleListEntryService",
    ];
    assert_eq!(reflected_services!(v1, adapter), want);
    assert_eq!(reflected_services!(v1alpha, adapter), want);

    // Directly: Validate refuses bad params, with the adapter's message.
    let mut backend = InfrastructureBackendClient::connect(format!("http://{adapter}"))
        .await
        .expect("connect");
    let refused = backend
        .validate(model::ValidateRequest {
            adapter_config: Some(params_any(&json!({"users": "alice"}))),
            ..Default::default()
        })
        .await
        .expect("validate")
        .into_inner()
        .status
        .expect("status");
    assert_eq!(refused.code, 3, "{refused:?}");
    assert!(refused.message.starts_with("params.users: "), "{refused:?}");

    // Directly: a session id the adapter does not know is NOT_FOUND (the session contract:
    // the mixer then creates the session again and retries), never an answer.
    let mut checks =
        listentry::handle_list_entry_service_client::HandleListEntryServiceClient::connect(
            format!("http://{adapter}"),
        )
        .await
        .expect("connect");
    let unknown = checks
        .handle_list_entry(listentry::HandleListEntryRequest {
            instance: Some(listentry::InstanceMsg {
                name: "user.instance.istio-system".into(),
                value: "alice".into(),
            }),
            adapter_config: Some(mixer_oop::session_any("no-such-session")),
            dedup_id: String::new(),
        })
        .await
        .expect_err("an unknown session is an error");
    assert_eq!(unknown.code(), tonic::Code::NotFound, "{unknown:?}");

    // `mixer validate` shows the adapter's refusal, naming the field.
    let bad_dir = dir.path().join("bad");
    std::fs::create_dir(&bad_dir).expect("mkdir");
    let bad = config(
        &examples().join("python-check/check.yaml"),
        &[
            ("127.0.0.1:9072", &adapter.to_string()),
            ("users: [alice, bob]", "users: alice"),
        ],
        &bad_dir,
    );
    let validated = Command::new(env!("CARGO_BIN_EXE_mixer-under-test"))
        .args(["validate", bad.to_str().expect("utf-8")])
        .output()
        .expect("run mixer validate");
    let stderr = String::from_utf8_lossy(&validated.stderr);
    assert!(!validated.status.success(), "{stderr}");
    assert!(
        stderr.contains("params.users: expected a list of user names"),
        "{stderr}"
    );

    // Through the mixer: the example's own YAML, with its session.
    let config = config(
        &examples().join("python-check/check.yaml"),
        &[("127.0.0.1:9072", &adapter.to_string())],
        dir.path(),
    );
    let mixer = start_mixer(&config).await;
    assert_eq!(check(mixer.http, Some("alice")).await.0, 200);
    let (status, body) = check(mixer.http, Some("mallory")).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains("'mallory' is not an allowed user"),
        "{body:?}"
    );
    assert_eq!(check(mixer.http, None).await.0, 403);

    // The adapter restarts, its sessions gone: a call with the mixer's old session id is
    // answered NOT_FOUND (unless the mixer saw the connection drop first), and the mixer
    // opens a new session and sends the call again: the very first request after the restart
    // is decided (a user not asked before, so no cached answer can stand in).
    drop(process);
    let _restarted = python_adapter_at(&python, "python-check", adapter, &[]);
    let (status, body) = check(mixer.http, Some("bob")).await;
    assert_eq!(status, 200, "the first request after the restart: {body}");
    mixer.terminate();
}

/// PEM files of a test CA, a server certificate for `localhost` and 127.0.0.1 and a client
/// certificate it signed, written to `dir`: (ca, server cert, server key, client cert,
/// client key).
fn tls_files(dir: &Path) -> [PathBuf; 5] {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, KeyUsagePurpose,
        SanType,
    };
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    // Distinct names: a leaf whose subject were the CA's would look self-signed.
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "python adapter test CA");
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().expect("key")).expect("CA");
    let leaf = |name: &str| {
        let mut params = CertificateParams::new(vec![name.to_string()]).expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params
            .subject_alt_names
            .push(SanType::IpAddress([127, 0, 0, 1].into()));
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &ca).expect("sign");
        (cert.pem(), key.serialize_pem())
    };
    let (server_cert, server_key) = leaf("localhost");
    let (client_cert, client_key) = leaf("mixer");
    let files = [
        ("ca.pem", ca.as_ref().pem()),
        ("server.pem", server_cert),
        ("server-key.pem", server_key),
        ("client.pem", client_cert),
        ("client-key.pem", client_key),
    ];
    files.map(|(name, pem)| {
        let path = dir.join(name);
        std::fs::write(&path, pem).expect("write PEM");
        path
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_check_adapter_serves_mutual_tls_to_the_mixer() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let pems = tempfile::tempdir().expect("tempdir");
    let [ca, cert, key, client_cert, client_key] = tls_files(pems.path());
    let path = |p: &PathBuf| p.to_str().expect("utf-8").to_string();
    let (adapter, _process) = start_python_adapter_with(
        &python,
        "python-check",
        &[
            "--tls-cert",
            &path(&cert),
            "--tls-key",
            &path(&key),
            "--tls-client-ca",
            &path(&ca),
        ],
    );

    // The port speaks TLS only: a plaintext call fails.
    let plaintext = async {
        InfrastructureBackendClient::connect(format!("http://{adapter}"))
            .await
            .ok()?
            .validate(model::ValidateRequest::default())
            .await
            .ok()
    };
    assert!(plaintext.await.is_none(), "a plaintext call was answered");

    // The mixer, with the client certificate the adapter asks for, decides through it.
    let authentication = format!(
        "timeout: 2s\n    authentication:\n      mutual:\n        clientCertificate: {}\n        \
         privateKey: {}\n        caCertificates: {}\n        serverName: localhost",
        path(&client_cert),
        path(&client_key),
        path(&ca)
    );
    let config = config(
        &examples().join("python-check/check.yaml"),
        &[
            ("127.0.0.1:9072", &adapter.to_string()),
            ("timeout: 2s", &authentication),
        ],
        dir.path(),
    );
    let mixer = start_mixer(&config).await;
    assert_eq!(check(mixer.http, Some("alice")).await.0, 200);
    let (status, body) = check(mixer.http, Some("mallory")).await;
    assert_eq!(status, 403, "{body}");
    mixer.terminate();
}

/// The helper's own tests (`adapters/sdk-python/test_mixer_adapter.py`): a template of each
/// variety through a real gRPC server, sessions, refusals and failures.
#[test]
fn python_helper_tests_pass() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let out = Command::new(&python)
        .arg(examples().join("../sdk-python/test_mixer_adapter.py"))
        .output()
        .expect("run the helper's tests");
    assert!(
        out.status.success(),
        "adapters/sdk-python/test_mixer_adapter.py failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The stubs checked in beside the Python adapter helper are what `make_stubs.sh` makes from
/// today's `proto/`: a proto changed without regenerating them fails here.
#[test]
fn python_helper_stubs_match_the_protos() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let helper = examples().join("../sdk-python");
    let dir = tempfile::tempdir().expect("tempdir");
    let fresh = dir.path().join("stubs");
    let made = Command::new("sh")
        .arg(helper.join("make_stubs.sh"))
        .arg(&fresh)
        .env("PYTHON", &python)
        .stdout(Stdio::null())
        .status()
        .expect("run make_stubs.sh");
    assert!(made.success(), "make_stubs.sh failed");
    fn files(root: &Path) -> Vec<(PathBuf, String)> {
        let mut out = Vec::new();
        let mut dirs = vec![root.to_path_buf()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).expect("read dir") {
                let path = entry.expect("entry").path();
                if path.is_dir() {
                    if path.file_name().is_some_and(|n| n != "__pycache__") {
                        dirs.push(path);
                    }
                } else if path.extension().is_some_and(|e| e == "py") {
                    let text = std::fs::read_to_string(&path).expect("read stub");
                    let relative = path.strip_prefix(root).expect("under root").to_path_buf();
                    out.push((relative, text));
                }
            }
        }
        out.sort();
        out
    }
    let checked_in = files(&helper.join("stubs"));
    let regenerated = files(&fresh);
    let names = |files: &[(PathBuf, String)]| -> Vec<PathBuf> {
        files.iter().map(|(p, _)| p.clone()).collect()
    };
    assert_eq!(
        names(&checked_in),
        names(&regenerated),
        "adapters/sdk-python/stubs is not what make_stubs.sh makes: run \
         PYTHON=/tmp/mixer-venv/bin/python sh adapters/sdk-python/make_stubs.sh"
    );
    for ((path, old), (_, new)) in checked_in.iter().zip(&regenerated) {
        assert!(
            old == new,
            "adapters/sdk-python/stubs/{} differs from what make_stubs.sh makes from proto/: \
             run PYTHON=/tmp/mixer-venv/bin/python sh adapters/sdk-python/make_stubs.sh",
            path.display()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_report_recipe_reaches_a_stdio_handler() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("reports.jsonl");
    let recipe = examples().join("python-report");
    let config = config(
        &recipe.join("report.yaml"),
        &[("/tmp/mixer-reports.jsonl", out.to_str().expect("utf-8"))],
        dir.path(),
    );
    let mixer = start_mixer(&config).await;
    let sent = Command::new(&python)
        .arg(recipe.join("send_report.py"))
        .args(["--mixer", &mixer.grpc.to_string()])
        .args([
            "request.method=GET",
            "request.path=/hello",
            "response.code=200",
            r#"request.headers={"x-user": "alice"}"#,
        ])
        .output()
        .expect("run send_report.py");
    assert!(
        sent.status.success(),
        "send_report.py failed: {}",
        String::from_utf8_lossy(&sent.stderr)
    );
    // The report is answered once queued; the stdio handler writes it soon after.
    let start = Instant::now();
    let mut got = lines(&out);
    while got.is_empty() && start.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
        got = lines(&out);
    }
    assert_eq!(got.len(), 1, "{got:?}");
    let line = &got[0];
    assert_eq!(
        line["instance"], "requestlog.instance.istio-system",
        "{line}"
    );
    assert_eq!(line["method"], "GET", "{line}");
    assert_eq!(line["path"], "/hello", "{line}");
    assert_eq!(line["responseCode"], 200, "{line}");
    assert_eq!(line["user"], "alice", "{line}");
    mixer.terminate();
}
