//! `deploy/examples/istio/` and `deploy/examples/envoy-gateway/` (#38), checked offline: each
//! rendered with the real `kubectl kustomize` equals its golden file in
//! `deploy/examples/rendered/` (`MIXER_UPDATE_GOLDEN=1` rewrites them); every object, and the
//! Istio mesh config, validates against the CRD schemas of Istio 1.28.9 and Envoy Gateway 1.9.0
//! kept in `deploy/examples/schemas/` (`check_examples.py`, unknown fields refused); the objects
//! point at the mixer's Service and port; the Envoy config those Istio providers produce parses
//! into Envoy's v3 protos and calls only gRPC methods the mixer serves; and the real mixer,
//! given the example's config, answers the Istio sidecar's ext_authz checks (403, 429).
//!
//! Without kubectl or the deploy venv (deploy/requirements.txt) the tests are skipped, except
//! under `CI=1` where that is a failure.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use envoy_types::ext_authz::v3::pb::CheckRequest;
use envoy_types::pb::envoy::config::core::v3::{Node, RequestMethod};
use envoy_types::pb::envoy::data::accesslog::v3::tls_properties::certificate_properties::subject_alt_name;
use envoy_types::pb::envoy::data::accesslog::v3::{
    AccessLogCommon, HttpAccessLogEntry, HttpRequestProperties, HttpResponseProperties,
    TlsProperties,
    tls_properties::{CertificateProperties, certificate_properties::SubjectAltName},
};
use envoy_types::pb::envoy::service::accesslog::v3::StreamAccessLogsMessage;
use envoy_types::pb::envoy::service::accesslog::v3::access_log_service_client::AccessLogServiceClient;
use envoy_types::pb::envoy::service::accesslog::v3::stream_access_logs_message::{
    HttpAccessLogEntries, Identifier, LogEntries,
};
use envoy_types::pb::envoy::service::auth::v3::attribute_context::{HttpRequest, Peer, Request};
use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
use envoy_types::pb::envoy::service::auth::v3::{AttributeContext, check_response};
use envoy_types::pb::google::protobuf::{Duration as PbDuration, UInt32Value};
use mixer_tests::Mixer;
#[path = "support/deploy.rs"]
mod deploy;
use deploy::{check_golden, deploy_dir, deploy_python, kubectl, objects, render};
use serde_json::Value;

/// The examples, by the name of their folder and golden file.
const EXAMPLES: &[&str] = &["istio", "envoy-gateway"];

fn examples() -> PathBuf {
    deploy_dir("examples")
}

/// What the examples' checks import from the deploy venv: the schema validators, and Envoy's
/// protos for the Istio providers' Envoy config.
const PYTHON_IMPORTS: &str =
    "jsonschema, kubernetes_validate, yaml, envoy.config.bootstrap.v3.bootstrap_pb2";

fn render_example(kubectl: &Path, name: &str) -> String {
    render(kubectl, &examples().join(name))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(examples().join(path)).expect("read the example")
}

fn one<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = objects.iter().filter(|o| o["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind}");
    found[0]
}

fn said(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr)
}

fn golden_path(name: &str) -> PathBuf {
    examples().join("rendered").join(format!("{name}.yaml"))
}

#[test]
fn gateway_examples_render_as_their_golden_files() {
    let Some(kubectl) = kubectl() else { return };
    let golden: Vec<(PathBuf, String)> = EXAMPLES
        .iter()
        .map(|name| (golden_path(name), render_example(&kubectl, name)))
        .collect();
    check_golden("deploy_gateways", &golden);
}

#[test]
fn gateway_examples_validate_against_the_crd_schemas_kept_in_the_repository() {
    let Some(kubectl) = kubectl() else { return };
    let Some(python) = deploy_python(PYTHON_IMPORTS) else {
        return;
    };
    let script = examples().join("check_examples.py");
    // The command deploy/README.md names: both examples and the mesh config.
    let out = Command::new(&python)
        .arg(&script)
        .output()
        .expect("run check_examples.py");
    let text = said(&out);
    assert!(out.status.success(), "the examples do not validate: {text}");
    for expected in [
        "AuthorizationPolicy/orders-mixer: valid against istio-1.28.9-authorizationpolicy-v1.json",
        "Telemetry/orders-mixer: valid against istio-1.28.9-telemetry-v1.json",
        "SecurityPolicy/orders-mixer: valid against envoy-gateway-v1.9.0-securitypolicy-v1alpha1.json",
        "EnvoyProxy/mixer-telemetry: valid against envoy-gateway-v1.9.0-envoyproxy-v1alpha1.json",
        "ReferenceGrant/mixer-from-envoy-gateway: valid against gateway-api-v1.6.1-referencegrant-v1beta1.json",
        "istio/mesh-config.yaml: meshConfig valid against istio-1.28.9-meshconfig-extensionproviders.json",
        "Deployment/mixer: valid against Kubernetes 1.32",
    ] {
        assert!(text.contains(expected), "not checked: {expected}\n{text}");
    }

    // Each schema must refuse a mistake, or passing proves nothing: a misspelt field in each
    // kind, a value outside an enum, and a kind no schema here knows.
    let dir = tempfile::tempdir().expect("tempdir");
    let istio = render_example(&kubectl, "istio");
    let gateway = render_example(&kubectl, "envoy-gateway");
    let mesh = read("istio/mesh-config.yaml");
    let cases: [(&str, &String, &str, &str, &str); 7] = [
        (
            "AuthorizationPolicy",
            &istio,
            "  action: CUSTOM\n",
            "  action: CUSTOM\n  provder: {name: x}\n",
            "'provder' was unexpected",
        ),
        (
            "AuthorizationPolicy action",
            &istio,
            "action: CUSTOM",
            "action: CUSTM",
            "'CUSTM' is not one of",
        ),
        (
            "Telemetry",
            &istio,
            "- name: mixer-als\n",
            "- name: mixer-als\n      nmae: x\n",
            "'nmae' was unexpected",
        ),
        (
            "SecurityPolicy",
            &gateway,
            "failOpen: false",
            "failOpen: false\n    failOpn: true",
            "'failOpn' was unexpected",
        ),
        (
            "EnvoyProxy",
            &gateway,
            "logName: mixer",
            "logNam: mixer",
            "'logNam' was unexpected",
        ),
        (
            "meshConfig",
            &mesh,
            "envoyExtAuthzGrpc:",
            "envoyExtAuthzGrcp:",
            "'envoyExtAuthzGrcp' was unexpected",
        ),
        (
            "unknown kind",
            &istio,
            "apiVersion: telemetry.istio.io/v1\n",
            "apiVersion: telemetry.istio.io/v9\n",
            "no schema for telemetry.istio.io/v9 Telemetry",
        ),
    ];
    for (what, text, from, to, expected) in cases {
        let tampered = text.replacen(from, to, 1);
        assert_ne!(&tampered, text, "{what}: the example has {from:?}");
        let file = dir.path().join("tampered.yaml");
        std::fs::write(&file, tampered).expect("write");
        let out = Command::new(&python)
            .arg(&script)
            .arg(&file)
            .output()
            .expect("run check_examples.py");
        assert!(
            !out.status.success() && said(&out).contains(expected),
            "{what}: a mistake was not refused as expected ({expected}): {}",
            said(&out)
        );
    }
}

/// The mixer's Service port the proxies call, with its app protocol.
fn grpc_service_port(rendered: &[Value]) -> (u64, String) {
    let service = rendered
        .iter()
        .find(|o| o["kind"] == "Service" && o["metadata"]["name"] == "mixer")
        .expect("Service mixer");
    let port = service["spec"]["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .find(|p| p["name"] == "grpc")
        .expect("port grpc");
    (
        port["port"].as_u64().expect("port"),
        port["appProtocol"].as_str().unwrap_or_default().to_string(),
    )
}

/// The mesh config's extension providers, by name.
fn providers() -> HashMap<String, Value> {
    let values: Value = serde_saphyr::from_str(&read("istio/mesh-config.yaml")).expect("yaml");
    values["meshConfig"]["extensionProviders"]
        .as_array()
        .expect("extensionProviders")
        .iter()
        .map(|p| (p["name"].as_str().expect("name").to_string(), p.clone()))
        .collect()
}

#[test]
fn gateway_examples_send_checks_and_access_logs_to_the_mixers_grpc_port() {
    let Some(kubectl) = kubectl() else { return };
    let istio = objects(&render_example(&kubectl, "istio"));
    let (port, app_protocol) = grpc_service_port(&istio);
    // HTTP/2 without TLS: Istio reads the port's appProtocol to pick it.
    assert_eq!(app_protocol, "kubernetes.io/h2c");
    let providers = providers();
    let at_the_mixer = |provider: &Value, what: &str| {
        assert_eq!(
            provider["service"], "mixer.mixer.svc.cluster.local",
            "{what}"
        );
        assert_eq!(provider["port"].as_u64(), Some(port), "{what}");
    };

    let policy = one(&istio, "AuthorizationPolicy");
    assert_eq!(policy["spec"]["action"], "CUSTOM");
    let authz = policy["spec"]["provider"]["name"].as_str().expect("name");
    at_the_mixer(
        &providers[authz]["envoyExtAuthzGrpc"],
        "the CUSTOM policy's provider is an envoyExtAuthzGrpc provider",
    );
    let telemetry = one(&istio, "Telemetry");
    assert_eq!(
        telemetry["spec"]["selector"], policy["spec"]["selector"],
        "checks and reports for the same workload"
    );
    for logging in telemetry["spec"]["accessLogging"]
        .as_array()
        .expect("accessLogging")
    {
        for p in logging["providers"].as_array().expect("providers") {
            let provider = &providers[p["name"].as_str().expect("name")];
            let als = [&provider["envoyHttpAls"], &provider["envoyOtelAls"]]
                .into_iter()
                .find(|v| v.is_object())
                .expect("an envoyHttpAls or envoyOtelAls provider");
            at_the_mixer(als, "the Telemetry's access log provider");
        }
    }
    for kind in ["envoyHttpAls", "envoyOtelAls", "opentelemetry"] {
        let provider = providers
            .values()
            .find_map(|p| p[kind].as_object())
            .unwrap_or_else(|| panic!("no {kind} provider"));
        at_the_mixer(&Value::Object(provider.clone()), kind);
    }
    // The ConfigMap the mixer reads is the workload config `mixer test` checks.
    let config = istio
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "mixer-config")
        .expect("ConfigMap mixer-config");
    assert_eq!(
        config["data"]["config.yaml"].as_str(),
        Some(read("istio/mixer/config/orders.yaml").as_str()),
        "the rendered ConfigMap holds mixer/config/orders.yaml"
    );

    let gateway = objects(&render_example(&kubectl, "envoy-gateway"));
    let to_the_mixer = |backend: &Value, what: &str| {
        assert_eq!(backend["kind"], "Service", "{what}");
        assert_eq!(backend["name"], "mixer", "{what}");
        assert_eq!(backend["namespace"], "mixer", "{what}");
        assert_eq!(backend["port"].as_u64(), Some(port), "{what}");
    };
    let security = one(&gateway, "SecurityPolicy");
    to_the_mixer(
        &security["spec"]["extAuth"]["grpc"]["backendRefs"][0],
        "SecurityPolicy extAuth.grpc",
    );
    let proxy = one(&gateway, "EnvoyProxy");
    let sink = &proxy["spec"]["telemetry"]["accessLog"]["settings"][0]["sinks"][0];
    assert_eq!(sink["type"], "ALS");
    to_the_mixer(&sink["als"]["backendRefs"][0], "EnvoyProxy ALS sink");
    // Both references cross namespaces: the mixer's namespace grants them.
    let grant = one(&gateway, "ReferenceGrant");
    assert_eq!(grant["metadata"]["namespace"], "mixer");
    for (kind, object) in [("SecurityPolicy", security), ("EnvoyProxy", proxy)] {
        assert!(
            grant["spec"]["from"]
                .as_array()
                .expect("from")
                .iter()
                .any(|f| f["kind"] == kind && f["namespace"] == object["metadata"]["namespace"]),
            "the ReferenceGrant does not grant the {kind}"
        );
    }
}

#[test]
fn istio_providers_envoy_config_parses_into_envoys_protos_and_calls_what_the_mixer_serves() {
    let Some(python) = deploy_python(PYTHON_IMPORTS) else {
        return;
    };
    let script = examples().join("envoy/check_bootstrap.py");
    let generated = examples().join("istio/envoy-generated.yaml");
    let out = Command::new(&python)
        .arg(&script)
        .arg("--grpc-methods")
        .arg(&generated)
        .output()
        .expect("run check_bootstrap.py");
    assert!(
        out.status.success(),
        "the Envoy config of the Istio providers does not parse: {}",
        said(&out)
    );
    let calls: Vec<(String, String)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("calls "))
        .map(|l| {
            let (method, cluster) = l.split_once(' ').expect("calls METHOD CLUSTER");
            (method.to_string(), cluster.to_string())
        })
        .collect();
    let methods: Vec<&str> = calls.iter().map(|(m, _)| m.as_str()).collect();
    // The methods Envoy's protos define for these filters are the ones the mixer routes.
    assert_eq!(
        methods,
        [
            mixer_frontends::grpc::EXT_AUTHZ_CHECK,
            mixer_frontends::grpc::ACCESS_LOG_STREAM,
            mixer_frontends::grpc::OTLP_LOGS,
        ]
    );
    // Istio names the cluster of a provider `outbound|PORT||SERVICE`.
    let providers = providers();
    let authz = &providers["mixer-ext-authz"]["envoyExtAuthzGrpc"];
    let cluster = format!(
        "outbound|{}||{}",
        authz["port"],
        authz["service"].as_str().expect("service")
    );
    for (method, called) in &calls {
        assert_eq!(called, &cluster, "{method}");
    }
    // The provider's settings reach the filter as Istio's extauthz.go maps them.
    let bootstrap: Value =
        serde_saphyr::from_str(&read("istio/envoy-generated.yaml")).expect("yaml");
    let hcm = &bootstrap["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"];
    let ext_authz = hcm["http_filters"]
        .as_array()
        .expect("filters")
        .iter()
        .find(|f| f["name"] == "envoy.filters.http.ext_authz")
        .expect("ext_authz")["typed_config"]
        .clone();
    assert_eq!(ext_authz["grpc_service"]["timeout"], authz["timeout"]);
    assert_eq!(ext_authz["failure_mode_allow"], authz["failOpen"]);
    assert_eq!(authz["statusOnError"], "503");
    assert_eq!(ext_authz["status_on_error"]["code"], "ServiceUnavailable");
    assert!(
        bootstrap["static_resources"]["clusters"]
            .as_array()
            .expect("clusters")
            .iter()
            .any(|c| c["name"] == cluster.as_str()),
        "no cluster {cluster}"
    );

    // A misspelt field must fail, or passing proves nothing.
    let text = read("istio/envoy-generated.yaml");
    let tampered = text.replacen("failure_mode_allow: false", "failure_mode_alow: false", 1);
    assert_ne!(tampered, text);
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("envoy.yaml");
    std::fs::write(&bad, tampered).expect("write");
    let out = Command::new(&python)
        .arg(&script)
        .arg(&bad)
        .output()
        .expect("run check_bootstrap.py");
    assert!(
        !out.status.success() && said(&out).contains("failure_mode_alow"),
        "a misspelt field was accepted: {}",
        said(&out)
    );
}

#[test]
fn istio_example_mixer_config_validates_without_warnings_and_passes_its_policy_tests() {
    let mixer = Path::new(env!("CARGO_BIN_EXE_mixer-under-test"));
    let out = Command::new(mixer)
        .arg("validate")
        .arg(examples().join("istio/mixer/config"))
        .output()
        .expect("run mixer validate");
    assert!(
        out.status.success() && said(&out).contains("0 warnings"),
        "mixer validate: {}",
        said(&out)
    );
    let out = Command::new(mixer)
        .arg("test")
        .arg(examples().join("istio/mixer"))
        .output()
        .expect("run mixer test");
    assert!(
        out.status.success() && said(&out).contains(" 0 failed"),
        "mixer test: {}",
        said(&out)
    );
}

/// A check as the `orders` sidecar sends it for a request from `caller` (SPIFFE principals
/// over mTLS, as Istio's ext_authz filter fills them in).
fn sidecar_check(caller: &str, id: usize) -> CheckRequest {
    CheckRequest {
        attributes: Some(AttributeContext {
            source: Some(Peer {
                principal: format!("spiffe://cluster.local/ns/{caller}"),
                ..Default::default()
            }),
            destination: Some(Peer {
                principal: "spiffe://cluster.local/ns/shop/sa/orders".into(),
                ..Default::default()
            }),
            request: Some(Request {
                http: Some(HttpRequest {
                    id: format!("request-{id}"),
                    method: "POST".into(),
                    path: "/orders".into(),
                    host: "orders.shop.svc.cluster.local:8080".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
    }
}

/// The HTTP status Envoy answers with for a denial, or 200.
fn status(response: &envoy_types::ext_authz::v3::pb::CheckResponse) -> i32 {
    match &response.http_response {
        Some(check_response::HttpResponse::DeniedResponse(no)) => {
            no.status.as_ref().map_or(403, |s| s.code)
        }
        _ => 200,
    }
}

/// The real mixer with the config the rendered ConfigMap gives it, ready.
async fn mixer_with_the_istio_example_config(dir: &Path) -> Mixer {
    std::fs::copy(
        examples().join("istio/mixer/config/orders.yaml"),
        dir.join("config.yaml"),
    )
    .expect("copy the config");
    let mixer = Mixer::start(
        Path::new(env!("CARGO_BIN_EXE_mixer-under-test")),
        &["--config", dir.to_str().expect("utf-8")],
    );
    let admin = mixer.admin;
    tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        while !matches!(
            mixer_tests::http_request(admin, "GET", "/readyz", &[]),
            Ok((200, _, _))
        ) {
            assert!(start.elapsed() < Duration::from_secs(20), "not ready");
            std::thread::sleep(Duration::from_millis(20));
        }
    })
    .await
    .expect("join");
    mixer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn istio_example_config_answers_the_sidecars_checks_with_403_and_429() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mixer = mixer_with_the_istio_example_config(dir.path()).await;
    let mut authz = AuthorizationClient::connect(format!("http://{}", mixer.grpc))
        .await
        .expect("connect");
    let mut check = async |caller: &str, id: usize| {
        let response = authz
            .check(sidecar_check(caller, id))
            .await
            .expect("check")
            .into_inner();
        status(&response)
    };
    assert_eq!(
        check("batch/sa/report", 0).await,
        403,
        "not a frontend caller"
    );
    // mixer/config/orders.yaml: 60 requests a minute per calling workload.
    for id in 1..=60 {
        assert_eq!(check("frontend/sa/web", id).await, 200, "request {id}");
    }
    assert_eq!(check("frontend/sa/web", 61).await, 429, "over the quota");
    assert_eq!(
        check("frontend/sa/mobile", 62).await,
        200,
        "another caller's quota"
    );
    assert!(mixer.terminate().success());
}

/// An access log entry as the `orders` sidecar streams it for a request from `frontend/sa/web`
/// (the `mixer-als` provider): the server-side Istio cluster name, both SPIFFE identities in
/// the TLS properties.
fn sidecar_access_log(code: u32) -> HttpAccessLogEntry {
    let uri = |spiffe: &str| SubjectAltName {
        san: Some(subject_alt_name::San::Uri(spiffe.into())),
    };
    HttpAccessLogEntry {
        common_properties: Some(AccessLogCommon {
            upstream_cluster: "inbound|8080||".into(),
            tls_properties: Some(TlsProperties {
                peer_certificate_properties: Some(CertificateProperties {
                    subject_alt_name: vec![uri("spiffe://cluster.local/ns/frontend/sa/web")],
                    ..Default::default()
                }),
                local_certificate_properties: Some(CertificateProperties {
                    subject_alt_name: vec![uri("spiffe://cluster.local/ns/shop/sa/orders")],
                    ..Default::default()
                }),
                ..Default::default()
            }),
            time_to_last_downstream_tx_byte: Some(PbDuration {
                seconds: 0,
                nanos: 12_000_000,
            }),
            ..Default::default()
        }),
        request: Some(HttpRequestProperties {
            request_method: RequestMethod::Post as i32,
            authority: "orders.shop:8080".into(),
            path: "/orders".into(),
            ..Default::default()
        }),
        response: Some(HttpResponseProperties {
            response_code: Some(UInt32Value { value: code }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn istio_example_config_turns_the_sidecars_access_logs_into_istio_metrics() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mixer = mixer_with_the_istio_example_config(dir.path()).await;
    let message = StreamAccessLogsMessage {
        identifier: Some(Identifier {
            node: Some(Node {
                id: "sidecar~10.0.0.7~orders-5d8f9c.shop~shop.svc.cluster.local".into(),
                ..Default::default()
            }),
            log_name: "mixer".into(),
        }),
        log_entries: Some(LogEntries::HttpLogs(HttpAccessLogEntries {
            log_entry: vec![sidecar_access_log(201), sidecar_access_log(201)],
        })),
    };
    let mut als = AccessLogServiceClient::connect(format!("http://{}", mixer.grpc))
        .await
        .expect("connect");
    als.stream_access_logs(tonic::codegen::tokio_stream::iter(vec![message]))
        .await
        .expect("access log stream");
    // Reports are delivered after the answer: wait, bounded, for the counter.
    let admin = mixer.admin;
    let line = tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        loop {
            let (_, _, body) =
                mixer_tests::http_request(admin, "GET", "/metrics", &[]).expect("metrics");
            let found = body
                .lines()
                .find(|l| l.starts_with("istio_requests_total{") && l.ends_with(" 2"))
                .map(str::to_string);
            if let Some(line) = found {
                return line;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "no istio_requests_total of 2 on /metrics:\n{body}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    })
    .await
    .expect("join");
    for label in [
        r#"reporter="destination""#,
        r#"source_principal="spiffe://cluster.local/ns/frontend/sa/web""#,
        r#"source_workload_namespace="frontend""#,
        r#"destination_service="orders.shop:8080""#,
        r#"request_protocol="http""#,
        r#"response_code="201""#,
    ] {
        assert!(line.contains(label), "{label} not in {line}");
    }
    assert!(mixer.terminate().success());
}
