//! Access log entries -> attribute bags. The table in the module doc is the contract; keep the
//! two in step.

use std::collections::HashMap;
use std::net::IpAddr;

use envoy_types::pb::envoy::config::core::v3::RequestMethod;
use envoy_types::pb::envoy::config::core::v3::address::Address as AddressKind;
use envoy_types::pb::envoy::config::core::v3::socket_address::PortSpecifier;
use envoy_types::pb::envoy::config::core::v3::{Address, Node};
use envoy_types::pb::envoy::data::accesslog::v3::tls_properties::CertificateProperties;
use envoy_types::pb::envoy::data::accesslog::v3::tls_properties::certificate_properties::subject_alt_name::San;
use envoy_types::pb::envoy::data::accesslog::v3::{
    AccessLogCommon, AccessLogType, HttpAccessLogEntry, ResponseFlags, TcpAccessLogEntry,
};
use envoy_types::pb::envoy::service::accesslog::v3::stream_access_logs_message::Identifier;
use envoy_types::pb::google::protobuf::{Duration as PbDuration, Timestamp as PbTimestamp};
use mixer_model::{AttributeBag, Duration, StringMap, Timestamp, Value};

/// Undeclared attribute: the Envoy cluster the request went to (`upstream_cluster`).
pub const UPSTREAM_CLUSTER_ATTRIBUTE: &str = "envoy.upstream_cluster";
/// Undeclared attribute: the route that matched (`route_name`).
pub const ROUTE_NAME_ATTRIBUTE: &str = "envoy.route_name";
/// Undeclared attribute: the logger's `log_name` from the stream's identifier.
pub const LOG_NAME_ATTRIBUTE: &str = "envoy.log_name";
/// Undeclared attribute: the id of the Envoy node that sent the stream.
pub const NODE_ID_ATTRIBUTE: &str = "envoy.node.id";
/// Undeclared attribute: `response_code_details` (why Envoy answered what it answered).
pub const RESPONSE_CODE_DETAILS_ATTRIBUTE: &str = "envoy.response_code_details";
/// Undeclared attribute: the logger's `custom_tags`, as a string map.
pub const CUSTOM_TAGS_ATTRIBUTE: &str = "envoy.custom_tags";

/// Connections whose running byte counts a stream remembers, at most (periodic TCP entries).
const MAX_TRACKED_CONNECTIONS: usize = 10_000;

/// Envoy's short response flag names, in the order Envoy prints them (`%RESPONSE_FLAGS%`).
fn flag_names(f: &ResponseFlags) -> [(bool, &'static str); 28] {
    [
        (f.failed_local_healthcheck, "LH"),
        (f.no_healthy_upstream, "UH"),
        (f.upstream_request_timeout, "UT"),
        (f.local_reset, "LR"),
        (f.upstream_remote_reset, "UR"),
        (f.upstream_connection_failure, "UF"),
        (f.upstream_connection_termination, "UC"),
        (f.upstream_overflow, "UO"),
        (f.no_route_found, "NR"),
        (f.delay_injected, "DI"),
        (f.fault_injected, "FI"),
        (f.rate_limited, "RL"),
        (f.unauthorized_details.is_some(), "UAEX"),
        (f.rate_limit_service_error, "RLSE"),
        (f.downstream_connection_termination, "DC"),
        (f.upstream_retry_limit_exceeded, "URX"),
        (f.stream_idle_timeout, "SI"),
        (f.invalid_envoy_request_headers, "IH"),
        (f.downstream_protocol_error, "DPE"),
        (f.upstream_max_stream_duration_reached, "UMSDR"),
        (f.response_from_cache_filter, "RFCF"),
        (f.no_filter_config_found, "NFCF"),
        (f.duration_timeout, "DT"),
        (f.upstream_protocol_error, "UPE"),
        (f.no_cluster_found, "NC"),
        (f.overload_manager, "OM"),
        (f.dns_resolution_failure, "DF"),
        (f.downstream_remote_reset, "DR"),
    ]
}

/// Envoy's short form of the response flags: `"UH,UF"`, or `"-"` when none is set (also
/// what Istio's proxies reported as `response.flags`).
pub fn response_flags(flags: Option<&ResponseFlags>) -> String {
    let Some(flags) = flags else {
        return "-".to_string();
    };
    let set: Vec<&str> = flag_names(flags)
        .into_iter()
        .filter(|(on, _)| *on)
        .map(|(_, name)| name)
        .collect();
    if set.is_empty() {
        "-".to_string()
    } else {
        set.join(",")
    }
}

/// Byte counts of the TCP connections seen on one stream, so that `connection.*.bytes` can be
/// what Istio defines: the bytes since the previous entry of the same connection.
#[derive(Debug, Default)]
pub struct ConnectionTotals {
    seen: HashMap<String, (u64, u64)>,
}

impl ConnectionTotals {
    /// No connection seen yet.
    pub fn new() -> ConnectionTotals {
        ConnectionTotals::default()
    }

    /// The (received, sent) bytes since the previous entry of `id`, remembering the totals;
    /// a connection that ends is forgotten. Without an id, the totals themselves.
    fn delta(&mut self, id: &str, totals: (u64, u64), ends: bool) -> (u64, u64) {
        if id.is_empty() {
            return totals;
        }
        let before = if ends {
            self.seen.remove(id)
        } else {
            if self.seen.len() >= MAX_TRACKED_CONNECTIONS && !self.seen.contains_key(id) {
                // Bounded memory: a stream with too many open connections starts over.
                self.seen.clear();
            }
            self.seen.insert(id.to_string(), totals)
        };
        let (rx0, tx0) = before.unwrap_or((0, 0));
        (totals.0.saturating_sub(rx0), totals.1.saturating_sub(tx0))
    }
}

/// Fills `bag` from one HTTP entry. `identifier` is the stream's (from its first message);
/// `now` is the mixer's clock, for `context.time`.
pub fn fill_http(
    bag: &mut AttributeBag,
    identifier: Option<&Identifier>,
    entry: &HttpAccessLogEntry,
    now: Timestamp,
) {
    let mut set = setter(bag);
    identity(&mut set, identifier);
    set("context.time", Value::Timestamp(now));
    let common = entry.common_properties.as_ref();
    if let Some(common) = common {
        common_attributes(&mut set, common, "response");
    } else {
        set("response.flags", Value::from("-"));
    }

    let mut protocol = "http";
    if let Some(request) = entry.request.as_ref() {
        let method = RequestMethod::try_from(request.request_method)
            .ok()
            .filter(|m| *m != RequestMethod::MethodUnspecified);
        if let Some(method) = method {
            set("request.method", Value::from(method.as_str_name()));
        }
        set_text(&mut set, "request.scheme", &request.scheme);
        set_text(&mut set, "request.host", &request.authority);
        if !request.path.is_empty() {
            path_attributes(&mut set, &request.path);
        }
        set_text(&mut set, "request.useragent", &request.user_agent);
        set_text(&mut set, "request.referer", &request.referer);
        set_text(&mut set, "request.id", &request.request_id);
        set(
            "request.size",
            Value::Int64(to_i64(request.request_body_bytes)),
        );
        set(
            "request.total_size",
            Value::Int64(to_i64(
                request
                    .request_headers_bytes
                    .saturating_add(request.request_body_bytes),
            )),
        );
        if !request.request_headers.is_empty() {
            let headers = lower_map(&request.request_headers);
            if headers
                .get("content-type")
                .is_some_and(|ct| is_grpc_content_type(ct))
            {
                protocol = "grpc";
            }
            set("request.headers", headers.into());
        }
    }
    if let Some(response) = entry.response.as_ref() {
        if let Some(code) = response.response_code.as_ref() {
            set("response.code", Value::Int64(i64::from(code.value)));
        }
        set(
            "response.size",
            Value::Int64(to_i64(response.response_body_bytes)),
        );
        set(
            "response.total_size",
            Value::Int64(to_i64(
                response
                    .response_headers_bytes
                    .saturating_add(response.response_body_bytes),
            )),
        );
        set_text(
            &mut set,
            RESPONSE_CODE_DETAILS_ATTRIBUTE,
            &response.response_code_details,
        );
        let headers = lower_map(&response.response_headers);
        let trailers = lower_map(&response.response_trailers);
        // gRPC puts its status in the trailers, or in the headers of a trailers-only answer.
        let grpc_field = |name: &str| trailers.get(name).or_else(|| headers.get(name)).cloned();
        if let Some(status) = grpc_field("grpc-status") {
            protocol = "grpc";
            set("response.grpc_status", Value::from(status.as_ref()));
        }
        if let Some(message) = grpc_field("grpc-message") {
            set("response.grpc_message", Value::from(message.as_ref()));
        }
        if headers
            .get("content-type")
            .is_some_and(|ct| is_grpc_content_type(ct))
        {
            protocol = "grpc";
        }
        if !headers.is_empty() {
            set("response.headers", headers.into());
        }
    }
    set("context.protocol", Value::from(protocol));
}

/// Fills `bag` from one TCP entry; `totals` is the stream's memory of its connections.
pub fn fill_tcp(
    bag: &mut AttributeBag,
    identifier: Option<&Identifier>,
    entry: &TcpAccessLogEntry,
    totals: &mut ConnectionTotals,
    now: Timestamp,
) {
    let mut set = setter(bag);
    identity(&mut set, identifier);
    set("context.time", Value::Timestamp(now));
    set("context.protocol", Value::from("tcp"));
    let common = entry.common_properties.as_ref();
    match common {
        Some(common) => common_attributes(&mut set, common, "connection"),
        None => set("response.flags", Value::from("-")),
    }
    let kind = common.map_or(AccessLogType::NotSet, |c| {
        AccessLogType::try_from(c.access_log_type).unwrap_or(AccessLogType::NotSet)
    });
    // Envoy without `access_log_type` (older, or `flush_access_log_on_connected` off) logs a
    // TCP connection once, when it closes.
    let event = match kind {
        AccessLogType::TcpUpstreamConnected | AccessLogType::TcpConnectionStart => "open",
        AccessLogType::TcpPeriodic => "continue",
        _ => "close",
    };
    set("connection.event", Value::from(event));
    if let Some(c) = entry.connection_properties.as_ref() {
        let id = common.map_or("", |c| c.stream_id.as_str());
        let (rx, tx) = totals.delta(id, (c.received_bytes, c.sent_bytes), event == "close");
        set("connection.received.bytes", Value::Int64(to_i64(rx)));
        set("connection.sent.bytes", Value::Int64(to_i64(tx)));
        set(
            "connection.received.bytes_total",
            Value::Int64(to_i64(c.received_bytes)),
        );
        set(
            "connection.sent.bytes_total",
            Value::Int64(to_i64(c.sent_bytes)),
        );
    }
}

/// Values come from what the proxy sent; one that does not fit its declared type is left
/// out rather than failing the entry.
fn setter(bag: &mut AttributeBag) -> impl FnMut(&str, Value) + '_ {
    |name: &str, value: Value| {
        let _ = bag.set(name, value);
    }
}

fn set_text(set: &mut impl FnMut(&str, Value), name: &str, text: &str) {
    if !text.is_empty() {
        set(name, Value::from(text));
    }
}

/// The stream's identifier: who reports (`context.reporter.uid` from an Istio node id), and
/// the undeclared `envoy.node.id` and `envoy.log_name`.
fn identity(set: &mut impl FnMut(&str, Value), identifier: Option<&Identifier>) {
    let Some(identifier) = identifier else {
        return;
    };
    set_text(set, LOG_NAME_ATTRIBUTE, &identifier.log_name);
    if let Some(node) = identifier.node.as_ref() {
        node_attributes(set, node);
    }
}

fn node_attributes(set: &mut impl FnMut(&str, Value), node: &Node) {
    set_text(set, NODE_ID_ATTRIBUTE, &node.id);
    // Istio names its proxies `<type>~<ip>~<pod>.<namespace>~<namespace>.svc.<domain>`;
    // Istio 1.4 reported such a proxy as `kubernetes://<pod>.<namespace>`.
    let parts: Vec<&str> = node.id.split('~').collect();
    if let [_, _, pod, _] = parts.as_slice()
        && !pod.is_empty()
    {
        set(
            "context.reporter.uid",
            Value::from(format!("kubernetes://{pod}")),
        );
    }
}

/// What HTTP and TCP entries share. `kind` names where the duration goes:
/// `response` (HTTP: `response.duration`, `response.time`) or `connection`.
fn common_attributes(set: &mut impl FnMut(&str, Value), common: &AccessLogCommon, kind: &str) {
    if let Some((ip, port)) = common
        .downstream_remote_address
        .as_ref()
        .and_then(socket_address)
    {
        set("source.ip", Value::IpAddress(ip));
        if let Some(port) = port {
            set("source.port", Value::Int64(i64::from(port)));
        }
    }
    let destination = common
        .upstream_remote_address
        .as_ref()
        .and_then(socket_address)
        .or_else(|| {
            common
                .downstream_local_address
                .as_ref()
                .and_then(socket_address)
        });
    if let Some((ip, port)) = destination {
        set("destination.ip", Value::IpAddress(ip));
        if let Some(port) = port {
            set("destination.port", Value::Int64(i64::from(port)));
        }
    }

    // Downstream TLS: the peer is the client (source), the local certificate is ours, the
    // destination's. A peer certificate means mutual TLS.
    let tls = common.tls_properties.as_ref();
    let peer = tls.and_then(|t| t.peer_certificate_properties.as_ref());
    set("connection.mtls", Value::Bool(peer.is_some()));
    if let Some(tls) = tls {
        set_text(
            set,
            "connection.requested_server_name",
            &tls.tls_sni_hostname,
        );
    }
    if let Some(principal) = peer.and_then(uri_san) {
        set("source.principal", Value::from(principal));
        if let Some(ns) = spiffe_namespace(principal) {
            set("source.namespace", Value::from(ns));
        }
    }
    if let Some(principal) = tls
        .and_then(|t| t.local_certificate_properties.as_ref())
        .and_then(uri_san)
    {
        set("destination.principal", Value::from(principal));
        if let Some(ns) = spiffe_namespace(principal) {
            set("destination.namespace", Value::from(ns));
        }
    }

    let start = common.start_time.as_ref().and_then(timestamp);
    if let Some(start) = start {
        set("request.time", Value::Timestamp(start));
    }
    let duration = if kind == "response" {
        // Last byte out to the client: what Istio measured as the response duration.
        common
            .time_to_last_downstream_tx_byte
            .as_ref()
            .or(common.duration.as_ref())
    } else {
        common
            .duration
            .as_ref()
            .or(common.time_to_last_downstream_tx_byte.as_ref())
    }
    .and_then(duration);
    if let Some(d) = duration {
        set(&format!("{kind}.duration"), Value::Duration(d));
        if kind == "response"
            && let Some(start) = start
        {
            set(
                "response.time",
                Value::Timestamp(Timestamp(start.0.saturating_add(d.0))),
            );
        }
    }

    let flags = response_flags(common.response_flags.as_ref());
    set("context.proxy_error_code", Value::from(flags.as_str()));
    set("response.flags", Value::from(flags));
    set_text(set, "connection.id", &common.stream_id);

    set_text(set, UPSTREAM_CLUSTER_ATTRIBUTE, &common.upstream_cluster);
    if let Some((direction, host)) = istio_cluster(&common.upstream_cluster) {
        set("context.reporter.kind", Value::from(direction));
        if !host.is_empty() {
            set("destination.service.host", Value::from(host));
        }
    }
    set_text(set, ROUTE_NAME_ATTRIBUTE, &common.route_name);
    if !common.custom_tags.is_empty() {
        let tags = StringMap::from_pairs(
            common
                .custom_tags
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str())),
        );
        set(CUSTOM_TAGS_ATTRIBUTE, tags.into());
    }
}

/// Istio's cluster names: `inbound|<port>|<subset>|<host>` and
/// `outbound|<port>|<subset>|<host>` give the direction and the destination service host.
fn istio_cluster(cluster: &str) -> Option<(&'static str, &str)> {
    let mut parts = cluster.split('|');
    let direction = match parts.next()? {
        "inbound" => "inbound",
        "outbound" => "outbound",
        _ => return None,
    };
    let host = parts.nth(2).unwrap_or("");
    Some((direction, host))
}

fn uri_san(cert: &CertificateProperties) -> Option<&str> {
    cert.subject_alt_name.iter().find_map(|s| match &s.san {
        Some(San::Uri(uri)) if !uri.is_empty() => Some(uri.as_str()),
        _ => None,
    })
}

/// The namespace of an Istio SPIFFE identity `spiffe://<trust domain>/ns/<ns>/sa/<account>`.
fn spiffe_namespace(principal: &str) -> Option<&str> {
    let path = principal.strip_prefix("spiffe://")?;
    let mut segments = path.split('/').skip(1);
    match (segments.next(), segments.next()) {
        (Some("ns"), Some(ns)) if !ns.is_empty() => Some(ns),
        _ => None,
    }
}

/// `request.path` as sent, and its path and query parts.
fn path_attributes(set: &mut impl FnMut(&str, Value), path: &str) {
    set("request.path", Value::from(path));
    let (url_path, query) = path.split_once('?').unwrap_or((path, ""));
    let url_path = url_path.split_once('#').map_or(url_path, |(p, _)| p);
    set("request.url_path", Value::from(url_path));
    let query = query.split_once('#').map_or(query, |(q, _)| q);
    if !query.is_empty() {
        let params = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| p.split_once('=').unwrap_or((p, "")));
        set("request.query_params", StringMap::from_pairs(params).into());
    }
}

fn is_grpc_content_type(ct: &str) -> bool {
    ct.get(..16)
        .is_some_and(|p| p.eq_ignore_ascii_case("application/grpc"))
}

fn lower_map(map: &HashMap<String, String>) -> StringMap {
    StringMap::from_pairs(
        map.iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.as_str())),
    )
}

fn socket_address(address: &Address) -> Option<(IpAddr, Option<u32>)> {
    let Some(AddressKind::SocketAddress(socket)) = address.address.as_ref() else {
        return None;
    };
    let ip = socket.address.trim().parse::<IpAddr>().ok()?;
    let port = match socket.port_specifier {
        Some(PortSpecifier::PortValue(p)) => Some(p),
        _ => None,
    };
    Some((ip, port))
}

fn timestamp(t: &PbTimestamp) -> Option<Timestamp> {
    Timestamp::from_parts(t.seconds, t.nanos)
}

fn duration(d: &PbDuration) -> Option<Duration> {
    d.seconds
        .checked_mul(1_000_000_000)
        .and_then(|s| s.checked_add(i64::from(d.nanos)))
        .map(Duration)
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests;
