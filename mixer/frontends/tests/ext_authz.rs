//! ext_authz front end, end to end: a real tonic server on loopback, Envoy's own client
//! types (from `envoy-types`), a runtime built from an embedded config.
//!
//! Golden files: `tests/golden/ext_authz/*.txt` hold the attribute bag of each sample request.
//! Run with `UPDATE_GOLDEN=1` to rewrite them after an intended mapping change.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use envoy_types::pb::envoy::config::core::v3::address::Address as AddressKind;
use envoy_types::pb::envoy::config::core::v3::socket_address::PortSpecifier;
use envoy_types::pb::envoy::config::core::v3::{
    Address, HeaderMap, HeaderValue, HeaderValueOption, Metadata, Pipe, SocketAddress,
};
use envoy_types::pb::envoy::service::auth::v3::attribute_context::{
    HttpRequest, Peer, Request, TlsSession,
};
use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse;
use envoy_types::pb::envoy::service::auth::v3::{
    AttributeContext, CheckRequest, CheckResponse, DeniedHttpResponse, OkHttpResponse,
};
use envoy_types::pb::google::protobuf::value::Kind;
use envoy_types::pb::google::protobuf::{ListValue, Struct, Timestamp as PbTimestamp, Value};
use mixer_adapter_api::{
    Adapter, AdapterError, AdapterInfo, AdapterRegistry, BuildContext, CheckHandler, ErrorKind,
    Handler, ParamError, Params, Stability,
};
use mixer_config::{ConfigOptions, SourceFile};
use mixer_frontends::ext_authz;
use mixer_model::{CheckResult, Instance, Template, Timestamp, Vocabulary};
use mixer_runtime::{ConfigOrigin, Runtime, RuntimeMetrics, RuntimeOptions};
use tonic::Code;
use tonic::transport::Channel;

const CONFIG: &str = r#"
apiVersion: config.istio.io/v1alpha2
kind: handler
metadata: {name: forbid, namespace: istio-system}
spec:
  compiledAdapter: denier
  params:
    status: {code: PERMISSION_DENIED, message: denied by policy}
---
apiVersion: config.istio.io/v1alpha2
kind: handler
metadata: {name: bad-identity, namespace: istio-system}
spec:
  compiledAdapter: denier
  params:
    status: {code: UNAUTHENTICATED, message: workload identity not accepted}
---
apiVersion: config.istio.io/v1alpha2
kind: handler
metadata: {name: exhausted, namespace: istio-system}
spec:
  compiledAdapter: denier
  params:
    status: {code: RESOURCE_EXHAUSTED, message: slow down}
---
apiVersion: config.istio.io/v1alpha2
kind: handler
metadata: {name: broken, namespace: istio-system}
spec:
  compiledAdapter: failing
---
apiVersion: config.istio.io/v1alpha2
kind: instance
metadata: {name: request, namespace: istio-system}
spec:
  compiledTemplate: checknothing
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {name: deny-on-header, namespace: istio-system}
spec:
  match: (request.headers["x-mixer-deny"] | "") == "true"
  actions:
  - handler: forbid
    instances: [request]
  responseHeaderOperations:
  - name: x-denied-by
    values: ['"deny-on-header"']
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata:
  name: deny-admin
  namespace: istio-system
  annotations: {policy.istio.io/lang: CEL}
spec:
  match: request.url_path.startsWith("/admin")
  actions:
  - handler: forbid
    instances: [request]
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {name: deny-bad-principal, namespace: istio-system}
spec:
  match: (source.principal | "") == "spiffe://cluster.local/ns/x/sa/bad"
  actions:
  - handler: bad-identity
    instances: [request]
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {name: deny-source-ip, namespace: istio-system}
spec:
  match: source.ip == ip("10.9.9.9")
  actions:
  - handler: forbid
    instances: [request]
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {name: deny-blocked-tier, namespace: istio-system}
spec:
  match: (context.extensions["tier"] | "") == "blocked"
  actions:
  - handler: forbid
    instances: [request]
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata:
  name: rate-limited
  namespace: istio-system
  annotations: {policy.istio.io/lang: CEL}
spec:
  match: request.url_path.startsWith("/limited")
  actions:
  - handler: exhausted
    instances: [request]
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {name: fail-closed, namespace: istio-system}
spec:
  match: (request.headers["x-fail"] | "") == "1"
  actions:
  - handler: broken
    instances: [request]
---
apiVersion: config.istio.io/v1alpha2
kind: rule
metadata: {name: tag-user, namespace: istio-system}
spec:
  requestHeaderOperations:
  - name: x-mixer-user
    values: ['request.headers["x-user"] | "anonymous"']
  - name: x-mixer-trace
    values: ['"mixer"']
    operation: APPEND
  - name: authorization
    operation: REMOVE
  responseHeaderOperations:
  - name: x-mixer-checked
    values: ['"yes"']
"#;

// ---------------------------------------------------------------- a handler that cannot decide

struct Failing;

static FAILING_INFO: AdapterInfo = AdapterInfo {
    name: "failing",
    description: "every check fails: the backend is down",
    templates: &[Template::CheckNothing],
    cacheable: false,
    stability: Stability::Alpha,
};

impl Adapter for Failing {
    fn info(&self) -> &AdapterInfo {
        &FAILING_INFO
    }

    fn validate(&self, _params: &Params) -> Result<(), Vec<ParamError>> {
        Ok(())
    }

    fn build(&self, _: &Params, _: &BuildContext) -> Result<Arc<dyn Handler>, AdapterError> {
        Ok(Arc::new(FailingHandler))
    }
}

struct FailingHandler;

impl Handler for FailingHandler {
    fn as_check(&self) -> Option<&dyn CheckHandler> {
        Some(self)
    }
}

#[async_trait]
impl CheckHandler for FailingHandler {
    async fn check(&self, _: &Instance) -> Result<CheckResult, AdapterError> {
        Err(AdapterError::transient(
            ErrorKind::Unavailable,
            "policy backend unreachable",
        ))
    }
}

// ---------------------------------------------------------------- harness

fn runtime() -> Arc<Runtime> {
    let mut registry = AdapterRegistry::new();
    registry.register(Arc::new(mixer_adapter_denier::Denier));
    registry.register(Arc::new(mixer_adapter_noop::Noop));
    registry.register(Arc::new(Failing));
    Arc::new(Runtime::new(
        ConfigOrigin::Embedded(vec![SourceFile::new("ext_authz_test.yaml", CONFIG)]),
        registry,
        ConfigOptions::default(),
        RuntimeOptions::default(),
        RuntimeMetrics::unregistered(),
    ))
}

fn ready_runtime() -> Arc<Runtime> {
    let runtime = runtime();
    if let Err(e) = runtime.reload() {
        panic!("test config rejected: {e}");
    }
    runtime
}

/// Serves the ext_authz service on 127.0.0.1:0 and returns a connected client.
async fn serve(runtime: Arc<Runtime>) -> (AuthorizationClient<Channel>, SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ext_authz::service(runtime))
            .serve_with_incoming(incoming),
    );
    (connect(addr).await, addr)
}

async fn connect(addr: SocketAddr) -> AuthorizationClient<Channel> {
    AuthorizationClient::connect(format!("http://{addr}"))
        .await
        .expect("connect to the test server")
}

fn socket(ip: &str, port: u32) -> Option<Address> {
    Some(Address {
        address: Some(AddressKind::SocketAddress(SocketAddress {
            address: ip.to_string(),
            port_specifier: Some(PortSpecifier::PortValue(port)),
            ..Default::default()
        })),
    })
}

fn strings(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A typical request as Envoy's HTTP filter sends it.
fn http_check(method: &str, path: &str, headers: &[(&str, &str)]) -> CheckRequest {
    let mut all = strings(&[
        (":authority", "shop.example.com"),
        (":method", method),
        (":path", path),
        (":scheme", "https"),
    ]);
    all.extend(strings(headers));
    CheckRequest {
        attributes: Some(AttributeContext {
            source: Some(Peer {
                address: socket("10.0.0.1", 51000),
                ..Default::default()
            }),
            destination: Some(Peer {
                address: socket("10.0.0.2", 8080),
                ..Default::default()
            }),
            request: Some(Request {
                time: Some(PbTimestamp {
                    seconds: 1_700_000_000,
                    nanos: 0,
                }),
                http: Some(HttpRequest {
                    id: "req-1".into(),
                    method: method.into(),
                    headers: all,
                    path: path.into(),
                    host: "shop.example.com".into(),
                    scheme: "https".into(),
                    size: 0,
                    protocol: "HTTP/1.1".into(),
                    ..Default::default()
                }),
            }),
            ..Default::default()
        }),
    }
}

fn with_source(mut request: CheckRequest, ip: &str, principal: &str) -> CheckRequest {
    if let Some(source) = request.attributes.as_mut().and_then(|a| a.source.as_mut()) {
        source.address = socket(ip, 51000);
        source.principal = principal.to_string();
    }
    request
}

async fn check(client: &mut AuthorizationClient<Channel>, request: CheckRequest) -> CheckResponse {
    match client.check(request).await {
        Ok(response) => response.into_inner(),
        Err(status) => panic!("check failed: {status:?}"),
    }
}

fn ok_response(response: &CheckResponse) -> &OkHttpResponse {
    match &response.http_response {
        Some(HttpResponse::OkResponse(ok)) => ok,
        other => panic!("expected an OK response, got {other:?}"),
    }
}

fn denied_response(response: &CheckResponse) -> &DeniedHttpResponse {
    match &response.http_response {
        Some(HttpResponse::DeniedResponse(denied)) => denied,
        other => panic!("expected a denied response, got {other:?}"),
    }
}

fn status_code(response: &CheckResponse) -> i32 {
    response.status.as_ref().map_or(-1, |s| s.code)
}

fn header<'a>(options: &'a [HeaderValueOption], name: &str) -> Option<&'a HeaderValueOption> {
    options
        .iter()
        .find(|o| o.header.as_ref().is_some_and(|h| h.key == name))
}

fn header_value<'a>(options: &'a [HeaderValueOption], name: &str) -> Option<&'a str> {
    header(options, name).and_then(|o| o.header.as_ref().map(|h| h.value.as_str()))
}

fn metadata_field<'a>(response: &'a CheckResponse, key: &str) -> Option<&'a Kind> {
    response
        .dynamic_metadata
        .as_ref()
        .and_then(|m| m.fields.get(key))
        .and_then(|v| v.kind.as_ref())
}

fn matched_rules(response: &CheckResponse) -> Vec<String> {
    match metadata_field(response, "matched_rules") {
        Some(Kind::ListValue(list)) => list
            .values
            .iter()
            .filter_map(|v| match &v.kind {
                Some(Kind::StringValue(s)) => Some(s.clone()),
                _ => None,
            })
            .collect(),
        other => panic!("matched_rules missing: {other:?}"),
    }
}

// ---------------------------------------------------------------- decisions over the wire

#[tokio::test]
async fn allowed_request_gets_header_operations_and_metadata() {
    let (mut client, _) = serve(ready_runtime()).await;
    let response = check(
        &mut client,
        http_check(
            "GET",
            "/products?page=2",
            &[("x-user", "alice"), ("authorization", "Bearer t")],
        ),
    )
    .await;
    assert_eq!(status_code(&response), 0);
    let ok = ok_response(&response);

    let user = header(&ok.headers, "x-mixer-user").expect("x-mixer-user set");
    assert_eq!(header_value(&ok.headers, "x-mixer-user"), Some("alice"));
    // REPLACE: overwrite-or-add, with the deprecated flag agreeing for older Envoys.
    assert_eq!(user.append_action, 2, "OVERWRITE_IF_EXISTS_OR_ADD");
    #[allow(deprecated)]
    let append = user.append.map(|b| b.value);
    assert_eq!(append, Some(false));

    let trace = header(&ok.headers, "x-mixer-trace").expect("x-mixer-trace set");
    assert_eq!(
        trace.header.as_ref().map(|h| h.value.as_str()),
        Some("mixer")
    );
    assert_eq!(trace.append_action, 0, "APPEND_IF_EXISTS_OR_ADD");
    #[allow(deprecated)]
    let append = trace.append.map(|b| b.value);
    assert_eq!(append, Some(true));

    assert_eq!(ok.headers_to_remove, vec!["authorization".to_string()]);
    assert_eq!(
        header_value(&ok.response_headers_to_add, "x-mixer-checked"),
        Some("yes")
    );

    assert_eq!(
        matched_rules(&response),
        vec!["tag-user.istio-system".to_string()]
    );
    assert_eq!(
        metadata_field(&response, "cache_hit"),
        Some(&Kind::BoolValue(false))
    );
    assert_eq!(
        metadata_field(&response, "status"),
        Some(&Kind::StringValue("OK".into()))
    );
}

#[tokio::test]
async fn anonymous_user_is_tagged_by_default() {
    let (mut client, _) = serve(ready_runtime()).await;
    let response = check(&mut client, http_check("GET", "/", &[])).await;
    let ok = ok_response(&response);
    assert_eq!(header_value(&ok.headers, "x-mixer-user"), Some("anonymous"));
}

#[tokio::test]
async fn header_rule_denies_with_403_body_and_response_headers() {
    let (mut client, _) = serve(ready_runtime()).await;
    let response = check(
        &mut client,
        http_check("GET", "/", &[("x-mixer-deny", "true")]),
    )
    .await;
    assert_eq!(status_code(&response), 7, "PERMISSION_DENIED");
    assert_eq!(
        response.status.as_ref().map(|s| s.message.as_str()),
        Some("denied by policy")
    );
    let denied = denied_response(&response);
    assert_eq!(denied.status.as_ref().map(|s| s.code), Some(403));
    assert_eq!(denied.body, "denied by policy");
    // Response header operations of every matched rule reach the client, request ones do not.
    assert_eq!(
        header_value(&denied.headers, "x-denied-by"),
        Some("deny-on-header")
    );
    assert_eq!(
        header_value(&denied.headers, "x-mixer-checked"),
        Some("yes")
    );
    assert!(header(&denied.headers, "x-mixer-user").is_none());
    let rules = matched_rules(&response);
    assert!(
        rules.contains(&"deny-on-header.istio-system".to_string()),
        "{rules:?}"
    );
    assert_eq!(
        metadata_field(&response, "status"),
        Some(&Kind::StringValue("PERMISSION_DENIED".into()))
    );
}

#[tokio::test]
async fn url_path_rule_denies_admin_but_not_its_query() {
    let (mut client, _) = serve(ready_runtime()).await;
    let response = check(&mut client, http_check("GET", "/admin/users?x=1", &[])).await;
    assert_eq!(status_code(&response), 7);
    assert_eq!(
        denied_response(&response).status.as_ref().map(|s| s.code),
        Some(403)
    );
    // The query string is not part of request.url_path.
    let response = check(&mut client, http_check("GET", "/shop?next=/admin", &[])).await;
    assert_eq!(status_code(&response), 0);
}

#[tokio::test]
async fn bad_principal_is_unauthenticated_401() {
    let (mut client, _) = serve(ready_runtime()).await;
    let request = with_source(
        http_check("GET", "/", &[]),
        "10.0.0.1",
        "spiffe://cluster.local/ns/x/sa/bad",
    );
    let response = check(&mut client, request).await;
    assert_eq!(status_code(&response), 16, "UNAUTHENTICATED");
    let denied = denied_response(&response);
    assert_eq!(denied.status.as_ref().map(|s| s.code), Some(401));
    assert_eq!(denied.body, "workload identity not accepted");

    let request = with_source(
        http_check("GET", "/", &[]),
        "10.0.0.1",
        "spiffe://cluster.local/ns/x/sa/good",
    );
    assert_eq!(status_code(&check(&mut client, request).await), 0);
}

#[tokio::test]
async fn source_ip_rule_uses_the_socket_address() {
    let (mut client, _) = serve(ready_runtime()).await;
    let request = with_source(http_check("GET", "/", &[]), "10.9.9.9", "");
    let response = check(&mut client, request).await;
    assert_eq!(status_code(&response), 7);
    let rules = matched_rules(&response);
    assert!(
        rules.contains(&"deny-source-ip.istio-system".to_string()),
        "{rules:?}"
    );
}

#[tokio::test]
async fn context_extensions_reach_rules() {
    let (mut client, _) = serve(ready_runtime()).await;
    let mut request = http_check("GET", "/", &[]);
    if let Some(attrs) = request.attributes.as_mut() {
        attrs.context_extensions = strings(&[("tier", "blocked")]);
    }
    assert_eq!(status_code(&check(&mut client, request).await), 7);
}

#[tokio::test]
async fn resource_exhausted_is_429() {
    let (mut client, _) = serve(ready_runtime()).await;
    let response = check(&mut client, http_check("POST", "/limited/orders", &[])).await;
    assert_eq!(status_code(&response), 8, "RESOURCE_EXHAUSTED");
    let denied = denied_response(&response);
    assert_eq!(denied.status.as_ref().map(|s| s.code), Some(429));
    assert_eq!(denied.body, "slow down");
}

// ---------------------------------------------------------------- could not decide

#[tokio::test]
async fn handler_failing_closed_is_unavailable_not_a_denial() {
    let (mut client, _) = serve(ready_runtime()).await;
    let status = client
        .check(http_check("GET", "/", &[("x-fail", "1")]))
        .await
        .expect_err("a failed handler must not produce an answer");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains("broken"), "{}", status.message());
    // The server keeps serving.
    assert_eq!(
        status_code(&check(&mut client, http_check("GET", "/", &[])).await),
        0
    );
}

#[tokio::test]
async fn no_config_yet_is_unavailable() {
    let (mut client, _) = serve(runtime()).await;
    let status = client
        .check(http_check("GET", "/", &[]))
        .await
        .expect_err("not ready");
    assert_eq!(status.code(), Code::Unavailable);
}

// ---------------------------------------------------------------- hostile input

#[tokio::test]
async fn ten_thousand_headers_are_handled() {
    let (mut client, _) = serve(ready_runtime()).await;
    let many: Vec<(String, String)> = (0..10_000)
        .map(|i| (format!("x-h-{i}"), format!("value-{i}")))
        .collect();
    let pairs: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let request = http_check("GET", "/", &pairs);
    let response = tokio::time::timeout(Duration::from_secs(20), client.check(request))
        .await
        .expect("answered in time")
        .expect("answered");
    assert_eq!(status_code(response.get_ref()), 0);
    assert_eq!(
        status_code(&check(&mut client, http_check("GET", "/", &[])).await),
        0
    );
}

#[tokio::test]
async fn oversized_request_is_rejected_and_the_server_keeps_serving() {
    let (mut client, addr) = serve(ready_runtime()).await;
    let mut request = http_check("POST", "/upload", &[]);
    if let Some(http) = request
        .attributes
        .as_mut()
        .and_then(|a| a.request.as_mut())
        .and_then(|r| r.http.as_mut())
    {
        http.body = "a".repeat(10 * 1024 * 1024);
    }
    let status = tokio::time::timeout(Duration::from_secs(30), client.check(request))
        .await
        .expect("answered in time")
        .expect_err("10 MB is over the 4 MiB limit");
    assert!(
        matches!(status.code(), Code::OutOfRange | Code::ResourceExhausted),
        "{status:?}"
    );
    assert!(
        status.message().contains("too large"),
        "{}",
        status.message()
    );
    // Same connection, then a fresh one: both still answered.
    assert_eq!(
        status_code(&check(&mut client, http_check("GET", "/", &[])).await),
        0
    );
    let mut fresh = connect(addr).await;
    assert_eq!(
        status_code(&check(&mut fresh, http_check("GET", "/", &[])).await),
        0
    );
}

// ---------------------------------------------------------------- golden attribute bags

const NOW: Timestamp = Timestamp(1_700_000_100_000_000_000);

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/ext_authz")
}

/// The bag as `name=value` lines, sorted by name.
fn render(request: &CheckRequest) -> String {
    let bag = ext_authz::bag_from_request(request, Arc::new(Vocabulary::istio()), NOW);
    let mut lines: Vec<String> = bag
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect();
    lines.sort();
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

fn assert_golden(name: &str, request: &CheckRequest) {
    let actual = render(request);
    let path = golden_dir().join(format!("{name}.txt"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(golden_dir()).expect("golden dir");
        std::fs::write(&path, &actual).expect("write golden file");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with UPDATE_GOLDEN=1 to create it)",
            path.display()
        )
    });
    assert_eq!(
        actual,
        expected,
        "{} differs (UPDATE_GOLDEN=1 rewrites it)",
        path.display()
    );
}

fn string_value(s: &str) -> Value {
    Value {
        kind: Some(Kind::StringValue(s.into())),
    }
}

fn structure(fields: Vec<(&str, Value)>) -> Struct {
    Struct {
        fields: fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    }
}

/// Everything Envoy's HTTP filter can send, mTLS between two Istio workloads.
fn full_http_request() -> CheckRequest {
    let mut request = http_check(
        "POST",
        "/api/v1/orders?id=42&debug&id=43",
        &[
            ("user-agent", "curl/8.5.0"),
            ("referer", "https://shop.example.com/cart"),
            ("content-type", "application/json"),
            ("x-request-id", "ignored-because-id-is-set"),
        ],
    );
    let attrs = request.attributes.as_mut().expect("attributes");
    attrs.source = Some(Peer {
        address: socket("10.0.0.1", 51000),
        service: "frontend".into(),
        labels: strings(&[("app", "frontend"), ("version", "v2")]),
        principal: "spiffe://cluster.local/ns/shop/sa/frontend".into(),
        certificate: String::new(),
    });
    attrs.destination = Some(Peer {
        address: socket("10.0.0.2", 8080),
        labels: strings(&[("app", "orders")]),
        principal: "spiffe://cluster.local/ns/shop/sa/orders".into(),
        ..Default::default()
    });
    attrs.context_extensions = strings(&[("tier", "gold"), ("route", "orders")]);
    attrs.metadata_context = Some(Metadata {
        filter_metadata: [(
            "envoy.filters.http.jwt_authn".to_string(),
            structure(vec![
                ("sub", string_value("alice")),
                (
                    "claims",
                    Value {
                        kind: Some(Kind::StructValue(structure(vec![
                            (
                                "admin",
                                Value {
                                    kind: Some(Kind::BoolValue(false)),
                                },
                            ),
                            (
                                "level",
                                Value {
                                    kind: Some(Kind::NumberValue(3.0)),
                                },
                            ),
                            (
                                "groups",
                                Value {
                                    kind: Some(Kind::ListValue(ListValue {
                                        values: vec![string_value("a"), string_value("b")],
                                    })),
                                },
                            ),
                        ]))),
                    },
                ),
            ]),
        )]
        .into_iter()
        .collect(),
        ..Default::default()
    });
    attrs.tls_session = Some(TlsSession {
        sni: "shop.example.com".into(),
    });
    if let Some(http) = attrs.request.as_mut().and_then(|r| r.http.as_mut()) {
        http.host = "shop.example.com:8443".into();
        http.size = 512;
        http.protocol = "HTTP/2".into();
    }
    request
}

/// gRPC through Envoy with `encode_raw_headers`: headers only in `header_map`, raw bytes,
/// mixed-case names, a repeated name; no id, no request time, size unknown, IPv6 peers.
fn grpc_raw_headers_request() -> CheckRequest {
    let raw = |k: &str, v: &str| HeaderValue {
        key: k.into(),
        value: String::new(),
        raw_value: v.as_bytes().to_vec(),
    };
    CheckRequest {
        attributes: Some(AttributeContext {
            source: Some(Peer {
                address: socket("fd00::1", 40000),
                ..Default::default()
            }),
            destination: Some(Peer {
                address: socket("fd00::2", 9000),
                ..Default::default()
            }),
            request: Some(Request {
                time: None,
                http: Some(HttpRequest {
                    method: "POST".into(),
                    path: "/shop.Orders/Get".into(),
                    host: "[fd00::2]:9000".into(),
                    scheme: "http".into(),
                    size: -1,
                    protocol: "HTTP/2".into(),
                    header_map: Some(HeaderMap {
                        headers: vec![
                            raw(":method", "POST"),
                            raw("Content-Type", "application/grpc+proto"),
                            raw("X-Request-Id", "abc-123"),
                            raw("accept", "a"),
                            raw("Accept", "b"),
                        ],
                    }),
                    ..Default::default()
                }),
            }),
            ..Default::default()
        }),
    }
}

/// The network (TCP) filter: no HTTP request, a pipe peer, one-way TLS.
fn network_request() -> CheckRequest {
    CheckRequest {
        attributes: Some(AttributeContext {
            source: Some(Peer {
                address: Some(Address {
                    address: Some(AddressKind::Pipe(Pipe {
                        path: "/var/run/app.sock".into(),
                        mode: 0,
                    })),
                }),
                ..Default::default()
            }),
            destination: Some(Peer {
                address: socket("127.0.0.1", 5432),
                ..Default::default()
            }),
            tls_session: Some(TlsSession {
                sni: "db.internal".into(),
            }),
            ..Default::default()
        }),
    }
}

#[test]
fn golden_full_http() {
    assert_golden("full_http", &full_http_request());
}

#[test]
fn golden_grpc_raw_headers() {
    assert_golden("grpc_raw_headers", &grpc_raw_headers_request());
}

#[test]
fn golden_network() {
    assert_golden("network", &network_request());
}

#[test]
fn golden_empty() {
    assert_golden("empty", &CheckRequest::default());
}

#[test]
fn bag_can_be_reused() {
    let vocabulary = Arc::new(Vocabulary::istio());
    let mut bag = ext_authz::bag_from_request(&full_http_request(), vocabulary, NOW);
    bag.clear();
    ext_authz::fill_bag(&mut bag, &network_request(), NOW);
    assert_eq!(
        bag.get_by_name("context.protocol").map(ToString::to_string),
        Some("tcp".to_string())
    );
    assert!(bag.get_by_name("request.headers").is_none());
}
