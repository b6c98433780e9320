//! The Envoy access log front end over a real loopback socket, driven by the generated tonic
//! client: HTTP and TCP entries become report instances, the identifier of the first message
//! applies to the whole stream, bad input ends the stream cleanly.
//!
//! Golden files: `tests/golden/access_log/*.txt` hold the attribute bag of each sample entry.
//! Run with `UPDATE_GOLDEN=1` to rewrite them after an intended mapping change.

mod common;

use common::{RawCodec, Recorder};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::address::Address as AddressKind;
use envoy_types::pb::envoy::config::core::v3::socket_address::PortSpecifier;
use envoy_types::pb::envoy::config::core::v3::{Address, Node, RequestMethod, SocketAddress};
use envoy_types::pb::envoy::data::accesslog::v3::response_flags::Unauthorized;
use envoy_types::pb::envoy::data::accesslog::v3::tls_properties::CertificateProperties;
use envoy_types::pb::envoy::data::accesslog::v3::tls_properties::certificate_properties::SubjectAltName;
use envoy_types::pb::envoy::data::accesslog::v3::tls_properties::certificate_properties::subject_alt_name::San;
use envoy_types::pb::envoy::data::accesslog::v3::{
    AccessLogCommon, AccessLogType, ConnectionProperties, HttpAccessLogEntry,
    HttpRequestProperties, HttpResponseProperties, ResponseFlags, TcpAccessLogEntry,
    TlsProperties,
};
use envoy_types::pb::envoy::service::accesslog::v3::access_log_service_client::AccessLogServiceClient;
use envoy_types::pb::envoy::service::accesslog::v3::stream_access_logs_message::{
    HttpAccessLogEntries, Identifier, LogEntries, TcpAccessLogEntries,
};
use envoy_types::pb::envoy::service::accesslog::v3::StreamAccessLogsMessage;
use envoy_types::pb::google::protobuf::{
    Duration as PbDuration, Timestamp as PbTimestamp, UInt32Value,
};
use mixer_adapter_api::AdapterRegistry;
use mixer_config::{ConfigOptions, SourceFile};
use mixer_frontends::access_log::{self, ConnectionTotals};
use mixer_model::{AttributeBag, Instance, Timestamp, Vocabulary};
use mixer_runtime::{ConfigOrigin, Runtime, RuntimeMetrics, RuntimeOptions};
use prost::Message;
use tonic::Code;
use tonic::codegen::tokio_stream;
use tonic::transport::Channel;

const CONFIG: &str = r#"
kind: attributemanifest
metadata: {name: envoy, namespace: istio-system}
spec:
  attributes:
    envoy.log_name: {valueType: STRING}
    envoy.upstream_cluster: {valueType: STRING}
---
kind: handler
metadata: {name: recorder, namespace: istio-system}
spec: {compiledAdapter: recorder}
---
kind: instance
metadata: {name: entry, namespace: istio-system}
spec:
  compiledTemplate: logentry
  params:
    timestamp: request.time
    variables:
      method: request.method
      path: request.path
      code: response.code
      duration: response.duration
      flags: response.flags
      protocol: context.protocol
      reporter: context.reporter.uid
      kind: context.reporter.kind
      log: envoy.log_name
      cluster: envoy.upstream_cluster
      source: source.ip
      destination: destination.ip
      user: request.headers["x-user"]
      event: connection.event
      received: connection.received.bytes
      received_total: connection.received.bytes_total
      sent: connection.sent.bytes
      mtls: connection.mtls
---
kind: rule
metadata: {name: record-all, namespace: istio-system}
spec:
  actions: [{handler: recorder, instances: [entry]}]
"#;

// ---- recording adapter ---------------------------------------------------------------------

// ---- harness -------------------------------------------------------------------------------

struct Harness {
    client: AccessLogServiceClient<Channel>,
    addr: SocketAddr,
    records: Arc<Mutex<Vec<Instance>>>,
}

async fn start_with(ready: bool) -> Harness {
    let records = Arc::new(Mutex::new(Vec::new()));
    let mut registry = AdapterRegistry::new();
    registry.register(Arc::new(Recorder::new(records.clone())));
    let runtime = Runtime::new(
        ConfigOrigin::Embedded(vec![SourceFile {
            name: "test.yaml".into(),
            text: CONFIG.into(),
        }]),
        registry,
        ConfigOptions::default(),
        RuntimeOptions::default(),
        RuntimeMetrics::unregistered(),
    );
    if ready {
        runtime.reload().expect("test config loads");
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("bound");
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(access_log::service(Arc::new(runtime)))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    Harness {
        client: AccessLogServiceClient::new(channel),
        addr,
        records,
    }
}

async fn start() -> Harness {
    start_with(true).await
}

type Vars = BTreeMap<String, String>;

/// The variables of each recorded instance, as text.
fn recorded(records: &Mutex<Vec<Instance>>) -> Vec<Vars> {
    records
        .lock()
        .expect("not poisoned")
        .iter()
        .map(|i| {
            i.map("variables")
                .expect("variables")
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

/// Instances arrive from the handler's queue after the entries were reported: wait (a bounded
/// time) until `n` have arrived, then a little longer to catch any extra one.
async fn wait_recorded(records: &Mutex<Vec<Instance>>, n: usize) -> Vec<Vars> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while records.lock().expect("not poisoned").len() < n && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    recorded(records)
}

fn var<'a>(vars: &'a Vars, name: &str) -> Option<&'a str> {
    vars.get(name).map(String::as_str)
}

// ---- sample entries ------------------------------------------------------------------------

fn socket(ip: &str, port: u32) -> Option<Address> {
    Some(Address {
        address: Some(AddressKind::SocketAddress(SocketAddress {
            address: ip.into(),
            port_specifier: Some(PortSpecifier::PortValue(port)),
            ..Default::default()
        })),
    })
}

fn ts(seconds: i64, nanos: i32) -> Option<PbTimestamp> {
    Some(PbTimestamp { seconds, nanos })
}

fn dur(seconds: i64, nanos: i32) -> Option<PbDuration> {
    Some(PbDuration { seconds, nanos })
}

fn cert(uri: &str) -> Option<CertificateProperties> {
    Some(CertificateProperties {
        subject_alt_name: vec![SubjectAltName {
            san: Some(San::Uri(uri.into())),
        }],
        subject: "O=cluster.local".into(),
        issuer: String::new(),
    })
}

fn identifier() -> Identifier {
    Identifier {
        node: Some(Node {
            id: "sidecar~10.0.0.2~reviews-v1-abc.shop~shop.svc.cluster.local".into(),
            cluster: "reviews.shop".into(),
            ..Default::default()
        }),
        log_name: "istio-als".into(),
    }
}

/// A full inbound HTTP entry: mTLS, headers, a gRPC-less JSON answer with two flags.
fn full_http_entry() -> HttpAccessLogEntry {
    HttpAccessLogEntry {
        common_properties: Some(AccessLogCommon {
            downstream_remote_address: socket("10.0.0.1", 51000),
            downstream_local_address: socket("10.0.0.2", 9080),
            upstream_remote_address: socket("127.0.0.1", 9080),
            tls_properties: Some(TlsProperties {
                tls_sni_hostname: "outbound_.9080_._.reviews.shop.svc.cluster.local".into(),
                peer_certificate_properties: cert("spiffe://cluster.local/ns/shop/sa/productpage"),
                local_certificate_properties: cert("spiffe://cluster.local/ns/shop/sa/reviews"),
                ..Default::default()
            }),
            start_time: ts(1_700_000_000, 250_000_000),
            time_to_last_downstream_tx_byte: dur(0, 12_000_000),
            duration: dur(0, 13_000_000),
            upstream_cluster: "inbound|9080||".into(),
            route_name: "default".into(),
            response_flags: Some(ResponseFlags {
                upstream_connection_failure: true,
                no_healthy_upstream: true,
                ..Default::default()
            }),
            stream_id: "stream-1".into(),
            custom_tags: HashMap::from([("tenant".to_string(), "acme".to_string())]),
            ..Default::default()
        }),
        protocol_version: 2,
        request: Some(HttpRequestProperties {
            request_method: RequestMethod::Post as i32,
            scheme: "http".into(),
            authority: "reviews.shop:9080".into(),
            path: "/reviews/1?lang=en&debug".into(),
            user_agent: "curl/8.5.0".into(),
            referer: "http://productpage/".into(),
            request_id: "req-1".into(),
            request_headers_bytes: 120,
            request_body_bytes: 30,
            request_headers: HashMap::from([
                ("X-User".to_string(), "amy".to_string()),
                ("content-type".to_string(), "application/json".to_string()),
            ]),
            ..Default::default()
        }),
        response: Some(HttpResponseProperties {
            response_code: Some(UInt32Value { value: 503 }),
            response_headers_bytes: 80,
            response_body_bytes: 19,
            response_headers: HashMap::from([("Server".to_string(), "envoy".to_string())]),
            response_code_details: "upstream_reset_before_response_started".into(),
            ..Default::default()
        }),
    }
}

/// An outbound gRPC call: status in the trailers, unauthorized by ext_authz.
fn grpc_entry() -> HttpAccessLogEntry {
    HttpAccessLogEntry {
        common_properties: Some(AccessLogCommon {
            downstream_remote_address: socket("10.0.0.2", 40000),
            upstream_remote_address: socket("10.0.0.9", 9090),
            start_time: ts(1_700_000_001, 0),
            time_to_last_downstream_tx_byte: dur(1, 500_000_000),
            upstream_cluster: "outbound|9090||ratings.shop.svc.cluster.local".into(),
            response_flags: Some(ResponseFlags {
                unauthorized_details: Some(Unauthorized { reason: 1 }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        protocol_version: 3,
        request: Some(HttpRequestProperties {
            request_method: RequestMethod::Post as i32,
            authority: "ratings:9090".into(),
            path: "/ratings.Ratings/Get".into(),
            ..Default::default()
        }),
        response: Some(HttpResponseProperties {
            response_code: Some(UInt32Value { value: 200 }),
            response_trailers: HashMap::from([
                ("grpc-status".to_string(), "7".to_string()),
                ("grpc-message".to_string(), "denied".to_string()),
            ]),
            ..Default::default()
        }),
    }
}

fn simple_http_entry(
    method: RequestMethod,
    path: &str,
    code: u32,
    millis: i32,
) -> HttpAccessLogEntry {
    HttpAccessLogEntry {
        common_properties: Some(AccessLogCommon {
            downstream_remote_address: socket("10.0.0.5", 1234),
            start_time: ts(1_700_000_002, 0),
            time_to_last_downstream_tx_byte: dur(0, millis * 1_000_000),
            ..Default::default()
        }),
        protocol_version: 2,
        request: Some(HttpRequestProperties {
            request_method: method as i32,
            path: path.into(),
            ..Default::default()
        }),
        response: Some(HttpResponseProperties {
            response_code: Some(UInt32Value { value: code }),
            ..Default::default()
        }),
    }
}

fn tcp_entry(kind: AccessLogType, received: u64, sent: u64) -> TcpAccessLogEntry {
    TcpAccessLogEntry {
        common_properties: Some(AccessLogCommon {
            downstream_remote_address: socket("10.0.0.1", 52000),
            downstream_local_address: socket("10.0.0.2", 3306),
            start_time: ts(1_700_000_010, 0),
            duration: dur(5, 0),
            upstream_cluster: "outbound|3306||mysql.db.svc.cluster.local".into(),
            stream_id: "tcp-1".into(),
            access_log_type: kind as i32,
            response_flags: Some(ResponseFlags::default()),
            ..Default::default()
        }),
        connection_properties: Some(ConnectionProperties {
            received_bytes: received,
            sent_bytes: sent,
        }),
    }
}

fn http_message(
    identifier: Option<Identifier>,
    entries: Vec<HttpAccessLogEntry>,
) -> StreamAccessLogsMessage {
    StreamAccessLogsMessage {
        identifier,
        log_entries: Some(LogEntries::HttpLogs(HttpAccessLogEntries {
            log_entry: entries,
        })),
    }
}

fn tcp_message(entries: Vec<TcpAccessLogEntry>) -> StreamAccessLogsMessage {
    StreamAccessLogsMessage {
        identifier: None,
        log_entries: Some(LogEntries::TcpLogs(TcpAccessLogEntries {
            log_entry: entries,
        })),
    }
}

// ---- the stream ----------------------------------------------------------------------------

#[tokio::test]
async fn each_entry_of_a_stream_becomes_one_instance() {
    let mut h = start().await;
    let messages = vec![
        http_message(Some(identifier()), vec![full_http_entry(), grpc_entry()]),
        http_message(
            None,
            vec![
                simple_http_entry(RequestMethod::Get, "/a", 200, 5),
                simple_http_entry(RequestMethod::Delete, "/b", 404, 7),
            ],
        ),
        tcp_message(vec![
            tcp_entry(AccessLogType::TcpPeriodic, 1000, 100),
            tcp_entry(AccessLogType::TcpConnectionEnd, 1500, 400),
        ]),
    ];
    h.client
        .stream_access_logs(tokio_stream::iter(messages))
        .await
        .expect("the stream ends with an empty response");
    let got = wait_recorded(&h.records, 6).await;
    assert_eq!(got.len(), 6, "{got:#?}");

    let full = &got[0];
    assert_eq!(var(full, "method"), Some("POST"));
    assert_eq!(var(full, "path"), Some("/reviews/1?lang=en&debug"));
    assert_eq!(var(full, "code"), Some("503"));
    assert_eq!(var(full, "duration"), Some("12ms"));
    assert_eq!(var(full, "flags"), Some("UH,UF"));
    assert_eq!(var(full, "protocol"), Some("http"));
    assert_eq!(var(full, "user"), Some("amy"));
    assert_eq!(var(full, "source"), Some("10.0.0.1"));
    assert_eq!(var(full, "destination"), Some("127.0.0.1"));
    assert_eq!(var(full, "kind"), Some("inbound"));
    assert_eq!(var(full, "mtls"), Some("true"));
    assert_eq!(var(full, "log"), Some("istio-als"));
    assert_eq!(var(full, "cluster"), Some("inbound|9080||"));
    assert_eq!(
        var(full, "reporter"),
        Some("kubernetes://reviews-v1-abc.shop")
    );

    let grpc = &got[1];
    assert_eq!(var(grpc, "protocol"), Some("grpc"));
    assert_eq!(var(grpc, "flags"), Some("UAEX"));
    assert_eq!(var(grpc, "duration"), Some("1500ms"));
    assert_eq!(var(grpc, "kind"), Some("outbound"));
    assert_eq!(var(grpc, "mtls"), Some("false"));

    // The identifier came on the first message only; it still applies to the later ones.
    for later in &got[2..] {
        assert_eq!(var(later, "log"), Some("istio-als"), "{later:?}");
        assert_eq!(
            var(later, "reporter"),
            Some("kubernetes://reviews-v1-abc.shop")
        );
    }
    assert_eq!(
        (
            var(&got[2], "method"),
            var(&got[2], "path"),
            var(&got[2], "code")
        ),
        (Some("GET"), Some("/a"), Some("200"))
    );
    assert_eq!(var(&got[2], "flags"), Some("-"));
    assert_eq!(var(&got[2], "duration"), Some("5ms"));
    assert_eq!(
        (
            var(&got[3], "method"),
            var(&got[3], "path"),
            var(&got[3], "code")
        ),
        (Some("DELETE"), Some("/b"), Some("404"))
    );

    // TCP: running totals from Envoy, bytes since the previous entry of the connection.
    let (periodic, end) = (&got[4], &got[5]);
    assert_eq!(var(periodic, "protocol"), Some("tcp"));
    assert_eq!(var(periodic, "event"), Some("continue"));
    assert_eq!(var(periodic, "received"), Some("1000"));
    assert_eq!(var(periodic, "sent"), Some("100"));
    assert_eq!(var(end, "event"), Some("close"));
    assert_eq!(var(end, "received"), Some("500"));
    assert_eq!(var(end, "received_total"), Some("1500"));
    assert_eq!(var(end, "sent"), Some("300"));
    assert_eq!(var(end, "destination"), Some("10.0.0.2"));
    assert_eq!(var(end, "method"), None);
}

#[tokio::test]
async fn an_empty_stream_and_empty_messages_are_fine() {
    let mut h = start().await;
    h.client
        .stream_access_logs(tokio_stream::iter(Vec::<StreamAccessLogsMessage>::new()))
        .await
        .expect("empty stream");
    h.client
        .stream_access_logs(tokio_stream::iter(vec![
            StreamAccessLogsMessage {
                identifier: Some(identifier()),
                log_entries: None,
            },
            http_message(None, vec![]),
        ]))
        .await
        .expect("messages without entries");
    assert!(wait_recorded(&h.records, 0).await.is_empty());
}

#[tokio::test]
async fn without_a_valid_config_the_stream_is_unavailable() {
    let mut h = start_with(false).await;
    let err = h
        .client
        .stream_access_logs(tokio_stream::iter(vec![http_message(
            Some(identifier()),
            vec![full_http_entry()],
        )]))
        .await
        .expect_err("no config");
    assert_eq!(err.code(), Code::Unavailable);
    assert_eq!(err.message(), "no valid config");
}

// ---- bad input -----------------------------------------------------------------------------

async fn raw_stream(addr: SocketAddr, messages: Vec<Vec<u8>>) -> Result<(), tonic::Status> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("ready");
    grpc.client_streaming(
        tonic::Request::new(tokio_stream::iter(messages)),
        tonic::codegen::http::uri::PathAndQuery::from_static(
            "/envoy.service.accesslog.v3.AccessLogService/StreamAccessLogs",
        ),
        RawCodec,
    )
    .await
    .map(|_| ())
}

#[tokio::test]
async fn garbage_ends_the_stream_with_invalid_argument_after_the_good_entries() {
    let mut h = start().await;
    let good = http_message(
        Some(identifier()),
        vec![simple_http_entry(RequestMethod::Get, "/ok", 200, 1)],
    )
    .encode_to_vec();
    for garbage in [
        vec![0xff; 64],                     // invalid tag and varint
        vec![0x12, 0x80, 0x80, 0x80, 0x10], // http_logs with a length far past the end
        b"not a protobuf message at all".to_vec(),
    ] {
        let before = recorded(&h.records).len();
        let err = raw_stream(h.addr, vec![good.clone(), garbage, good.clone()])
            .await
            .expect_err("garbage is refused");
        assert_eq!(err.code(), Code::InvalidArgument, "{}", err.message());
        assert!(err.message().contains("malformed"), "{}", err.message());
        // The entry before the garbage was reported; the one after it was not read.
        let got = wait_recorded(&h.records, before + 1).await;
        assert_eq!(got.len(), before + 1);
        assert_eq!(var(&got[before], "path"), Some("/ok"));
    }
    // The server keeps serving.
    h.client
        .stream_access_logs(tokio_stream::iter(vec![http_message(
            None,
            vec![simple_http_entry(RequestMethod::Put, "/after", 201, 1)],
        )]))
        .await
        .expect("still serving");
    let got = wait_recorded(&h.records, 4).await;
    assert_eq!(var(&got[3], "path"), Some("/after"));
}

#[tokio::test]
async fn an_oversized_message_is_refused_and_the_server_keeps_serving() {
    let mut h = start().await;
    let mut entry = simple_http_entry(RequestMethod::Get, "/big", 200, 1);
    if let Some(request) = entry.request.as_mut() {
        request
            .request_headers
            .insert("x-big".into(), "x".repeat(5 * 1024 * 1024));
    }
    let err = h
        .client
        .stream_access_logs(tokio_stream::iter(vec![http_message(None, vec![entry])]))
        .await
        .expect_err("over tonic's 4 MiB limit");
    assert_eq!(err.code(), Code::OutOfRange, "{}", err.message());
    h.client
        .stream_access_logs(tokio_stream::iter(vec![http_message(
            None,
            vec![simple_http_entry(RequestMethod::Get, "/small", 200, 1)],
        )]))
        .await
        .expect("still serving");
    let got = wait_recorded(&h.records, 1).await;
    assert_eq!(got.len(), 1);
    assert_eq!(var(&got[0], "path"), Some("/small"));
}

// ---- golden attribute bags -----------------------------------------------------------------

const NOW: Timestamp = Timestamp(1_700_000_100_000_000_000);

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/access_log")
}

/// The bag as `name=value` lines, sorted by name.
fn render(bag: &AttributeBag) -> String {
    let mut lines: Vec<String> = bag
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect();
    lines.sort();
    let mut out = lines.join("\n");
    out.push('\n');
    out
}

fn assert_golden(name: &str, actual: &str) {
    let path = golden_dir().join(format!("{name}.txt"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(golden_dir()).expect("golden dir");
        std::fs::write(&path, actual).expect("write golden file");
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

fn http_bag(identifier: Option<&Identifier>, entry: &HttpAccessLogEntry) -> String {
    let mut bag = AttributeBag::new(Arc::new(Vocabulary::istio()));
    access_log::fill_http(&mut bag, identifier, entry, NOW);
    render(&bag)
}

#[test]
fn golden_full_http() {
    assert_golden(
        "full_http",
        &http_bag(Some(&identifier()), &full_http_entry()),
    );
}

#[test]
fn golden_grpc() {
    assert_golden("grpc", &http_bag(None, &grpc_entry()));
}

#[test]
fn golden_empty_http() {
    assert_golden(
        "empty_http",
        &http_bag(None, &HttpAccessLogEntry::default()),
    );
}

#[test]
fn golden_tcp() {
    let mut totals = ConnectionTotals::new();
    let mut out = String::new();
    for (i, entry) in [
        tcp_entry(AccessLogType::TcpConnectionStart, 0, 0),
        tcp_entry(AccessLogType::TcpPeriodic, 1000, 100),
        tcp_entry(AccessLogType::TcpConnectionEnd, 1500, 400),
    ]
    .iter()
    .enumerate()
    {
        let mut bag = AttributeBag::new(Arc::new(Vocabulary::istio()));
        access_log::fill_tcp(&mut bag, Some(&identifier()), entry, &mut totals, NOW);
        out.push_str(&format!("# entry {i}\n"));
        out.push_str(&render(&bag));
    }
    assert_golden("tcp", &out);
}

#[test]
fn every_flag_has_its_short_name_in_envoys_order() {
    let all = ResponseFlags {
        failed_local_healthcheck: true,
        no_healthy_upstream: true,
        upstream_request_timeout: true,
        local_reset: true,
        upstream_remote_reset: true,
        upstream_connection_failure: true,
        upstream_connection_termination: true,
        upstream_overflow: true,
        no_route_found: true,
        delay_injected: true,
        fault_injected: true,
        rate_limited: true,
        unauthorized_details: Some(Unauthorized { reason: 1 }),
        rate_limit_service_error: true,
        downstream_connection_termination: true,
        upstream_retry_limit_exceeded: true,
        stream_idle_timeout: true,
        invalid_envoy_request_headers: true,
        downstream_protocol_error: true,
        upstream_max_stream_duration_reached: true,
        response_from_cache_filter: true,
        no_filter_config_found: true,
        duration_timeout: true,
        upstream_protocol_error: true,
        no_cluster_found: true,
        overload_manager: true,
        dns_resolution_failure: true,
        downstream_remote_reset: true,
    };
    assert_eq!(
        access_log::response_flags(Some(&all)),
        "LH,UH,UT,LR,UR,UF,UC,UO,NR,DI,FI,RL,UAEX,RLSE,DC,URX,SI,IH,DPE,UMSDR,RFCF,NFCF,DT,UPE,NC,OM,DF,DR"
    );
}
