//! Access log entries -> attribute bags. The table in the module doc is the contract; keep the
//! two in step.

use std::collections::HashMap;

use envoy_types::pb::envoy::config::core::v3::{Node, RequestMethod};
use envoy_types::pb::envoy::data::accesslog::v3::{
    AccessLogType, HttpAccessLogEntry, TcpAccessLogEntry,
};
use envoy_types::pb::envoy::service::accesslog::v3::stream_access_logs_message::Identifier;
use mixer_model::{AttributeBag, StringMap, Timestamp, Value};

mod common;
mod flags;

use common::common_attributes;
pub use flags::response_flags;

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
                .is_some_and(is_grpc_content_type)
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
        let grpc_field = |name: &str| {
            trailers
                .get(name)
                .or_else(|| headers.get(name))
                .map(Value::from)
        };
        if let Some(status) = grpc_field("grpc-status") {
            protocol = "grpc";
            set("response.grpc_status", status);
        }
        if let Some(message) = grpc_field("grpc-message") {
            set("response.grpc_message", message);
        }
        if headers
            .get("content-type")
            .is_some_and(is_grpc_content_type)
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

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests;
