//! The attribute bag of sample requests, compared with the golden files.

use super::*;
use std::path::PathBuf;

use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue, Metadata, Pipe};
use envoy_types::pb::envoy::service::auth::v3::attribute_context::TlsSession;
use envoy_types::pb::google::protobuf::value::Kind;
use envoy_types::pb::google::protobuf::{ListValue, Struct, Value};
use mixer_model::{Timestamp, Vocabulary};

const NOW: Timestamp = Timestamp(1_700_000_100_000_000_000);

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/ext_authz")
}

fn assert_golden(name: &str, request: &CheckRequest) {
    let bag = ext_authz::bag_from_request(request, Arc::new(Vocabulary::istio()), NOW);
    common::assert_golden(&golden_dir(), name, &common::render_bag(&bag));
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
pub(crate) fn full_http_request() -> CheckRequest {
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
