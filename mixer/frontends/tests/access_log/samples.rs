//! Sample access log entries and messages (HTTP, gRPC, TCP) the tests send or map.

use std::collections::HashMap;

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
use envoy_types::pb::envoy::service::accesslog::v3::stream_access_logs_message::{
    HttpAccessLogEntries, Identifier, LogEntries, TcpAccessLogEntries,
};
use envoy_types::pb::envoy::service::accesslog::v3::StreamAccessLogsMessage;
use envoy_types::pb::google::protobuf::{
    Duration as PbDuration, Timestamp as PbTimestamp, UInt32Value,
};

pub(crate) fn socket(ip: &str, port: u32) -> Option<Address> {
    Some(Address {
        address: Some(AddressKind::SocketAddress(SocketAddress {
            address: ip.into(),
            port_specifier: Some(PortSpecifier::PortValue(port)),
            ..Default::default()
        })),
    })
}

pub(crate) fn ts(seconds: i64, nanos: i32) -> Option<PbTimestamp> {
    Some(PbTimestamp { seconds, nanos })
}

pub(crate) fn dur(seconds: i64, nanos: i32) -> Option<PbDuration> {
    Some(PbDuration { seconds, nanos })
}

pub(crate) fn cert(uri: &str) -> Option<CertificateProperties> {
    Some(CertificateProperties {
        subject_alt_name: vec![SubjectAltName {
            san: Some(San::Uri(uri.into())),
        }],
        subject: "O=cluster.local".into(),
        issuer: String::new(),
    })
}

pub(crate) fn identifier() -> Identifier {
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
pub(crate) fn full_http_entry() -> HttpAccessLogEntry {
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
pub(crate) fn grpc_entry() -> HttpAccessLogEntry {
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

pub(crate) fn simple_http_entry(
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

pub(crate) fn tcp_entry(kind: AccessLogType, received: u64, sent: u64) -> TcpAccessLogEntry {
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

pub(crate) fn http_message(
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

pub(crate) fn tcp_message(entries: Vec<TcpAccessLogEntry>) -> StreamAccessLogsMessage {
    StreamAccessLogsMessage {
        identifier: None,
        log_entries: Some(LogEntries::TcpLogs(TcpAccessLogEntries {
            log_entry: entries,
        })),
    }
}
