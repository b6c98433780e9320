//! `CheckRequest` -> attribute bag. The table in the module doc above is the contract; keep
//! the two in step.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use envoy_types::pb::envoy::config::core::v3::Metadata;
use envoy_types::pb::envoy::service::auth::v3::CheckRequest;
use envoy_types::pb::google::protobuf::{Struct, Value as PbValue, value::Kind};
use mixer_model::{AttributeBag, StringMap, Timestamp, Value, Vocabulary};

use super::names::*;
use super::wire::{CheckView, HttpView, PeerView, WireError};
use crate::envoy_core::{socket_ip, spiffe_namespace};
use crate::host::strip_port;

/// The undeclared attribute that carries `metadata_context.filter_metadata`, flattened.
pub const METADATA_ATTRIBUTE: &str = "context.metadata";
/// The undeclared attribute that carries `route_metadata_context.filter_metadata`, flattened.
pub const ROUTE_METADATA_ATTRIBUTE: &str = "context.route_metadata";

/// Metadata nested deeper than this is not flattened (a Struct can nest without bound).
const MAX_METADATA_DEPTH: usize = 8;

/// Builds the attribute bag for `request` against `vocabulary` (the active snapshot's).
///
/// `now` is the mixer's clock: it becomes `context.time`, and `request.time` when Envoy did
/// not send one. Passing it in keeps this function deterministic for tests and tools.
pub fn bag_from_request(
    request: &CheckRequest,
    vocabulary: Arc<Vocabulary>,
    now: Timestamp,
) -> AttributeBag {
    let mut bag = AttributeBag::new(vocabulary);
    fill_bag(&mut bag, request, now);
    bag
}

/// Fills an existing bag (call [`AttributeBag::clear`] first to reuse one) from `request`.
pub fn fill_bag(bag: &mut AttributeBag, request: &CheckRequest, now: Timestamp) {
    fill_from_view(bag, &CheckView::of(request), now);
}

/// Fills an existing bag from an encoded `CheckRequest`, reading its strings where they lie
/// in `message`: what the gRPC method does, without building the decoded message.
pub fn fill_bag_from_wire(
    bag: &mut AttributeBag,
    message: &[u8],
    now: Timestamp,
) -> Result<(), WireError> {
    fill_from_view(bag, &CheckView::decode(message)?, now);
    Ok(())
}

fn fill_from_view(bag: &mut AttributeBag, request: &CheckView<'_>, now: Timestamp) {
    with_setter(bag, |set| fill(set, request, now));
}

fn fill(set: &mut dyn FnMut(usize, Value), request: &CheckView<'_>, now: Timestamp) {
    set(CONTEXT_TIME, Value::Timestamp(now));
    let Some(attrs) = request.attributes.as_ref() else {
        return;
    };

    if let Some(peer) = &attrs.source {
        peer_attributes(set, &SOURCE, peer);
    }
    if let Some(peer) = &attrs.destination {
        peer_attributes(set, &DESTINATION, peer);
    }
    // A principal (or a certificate) on the source means Envoy verified a client
    // certificate: mutual TLS. A TLS session alone (tls_session) is one-way TLS.
    let mtls = attrs
        .source
        .as_ref()
        .is_some_and(|p| !p.principal.is_empty() || p.has_certificate);
    set(CONNECTION_MTLS, Value::Bool(mtls));
    if let Some(sni) = attrs.sni.filter(|sni| !sni.is_empty()) {
        set(CONNECTION_SNI, Value::from(sni));
    }

    if !attrs.context_extensions.is_empty() {
        set(CONTEXT_EXTENSIONS, map_of(&attrs.context_extensions).into());
    }
    if let Some(map) = attrs.metadata_context.as_deref().and_then(flatten_metadata) {
        set(CONTEXT_METADATA, map.into());
    }
    if let Some(map) = attrs
        .route_metadata_context
        .as_deref()
        .and_then(flatten_metadata)
    {
        set(CONTEXT_ROUTE_METADATA, map.into());
    }

    if let Some(request) = &attrs.request {
        let time = request
            .time
            .and_then(|(seconds, nanos)| Timestamp::from_parts(seconds, nanos))
            .unwrap_or(now);
        set(REQUEST_TIME, Value::Timestamp(time));
    }

    match attrs.request.as_ref().and_then(|r| r.http.as_ref()) {
        Some(http) => http_attributes(set, http),
        // The network (TCP) ext_authz filter sends no HTTP request.
        None => set(CONTEXT_PROTOCOL, Value::from("tcp")),
    }
}

/// A protobuf map as sent: where a key repeats, the later entry is the one protobuf keeps.
fn map_of(pairs: &[(&str, &str)]) -> StringMap {
    StringMap::from_pairs(pairs.iter().rev().copied())
}

/// The attributes of one side of the connection.
struct PeerNames {
    ip: usize,
    port: usize,
    principal: usize,
    namespace: usize,
    service: usize,
    labels: usize,
}

const SOURCE: PeerNames = PeerNames {
    ip: SOURCE_IP,
    port: SOURCE_PORT,
    principal: SOURCE_PRINCIPAL,
    namespace: SOURCE_NAMESPACE,
    service: SOURCE_SERVICE,
    labels: SOURCE_LABELS,
};

const DESTINATION: PeerNames = PeerNames {
    ip: DESTINATION_IP,
    port: DESTINATION_PORT,
    principal: DESTINATION_PRINCIPAL,
    namespace: DESTINATION_NAMESPACE,
    service: DESTINATION_SERVICE,
    labels: DESTINATION_LABELS,
};

fn peer_attributes(set: &mut dyn FnMut(usize, Value), name: &PeerNames, peer: &PeerView<'_>) {
    if let Some(socket) = &peer.socket
        && let Some(ip) = socket_ip(socket.address)
    {
        set(name.ip, Value::IpAddress(ip));
        if let Some(port) = socket.port {
            set(name.port, Value::Int64(i64::from(port)));
        }
    }
    if !peer.principal.is_empty() {
        set(name.principal, Value::from(peer.principal));
        if let Some(namespace) = spiffe_namespace(peer.principal) {
            set(name.namespace, Value::from(namespace));
        }
    }
    if !peer.service.is_empty() {
        set(name.service, Value::from(peer.service));
    }
    if !peer.labels.is_empty() {
        set(name.labels, map_of(&peer.labels).into());
    }
}

fn http_attributes(set: &mut dyn FnMut(usize, Value), http: &HttpView<'_>) {
    // Built once: `request.headers` itself, and what the single-header lookups below search.
    let headers = request_headers(http);
    let header = |name: &str| {
        headers
            .get(name)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
    };

    let id = Some(http.id)
        .filter(|v| !v.is_empty())
        .or_else(|| header("x-request-id"));
    if let Some(id) = id {
        set(REQUEST_ID, Value::from(id));
    }
    let method = Some(http.method)
        .filter(|v| !v.is_empty())
        .or_else(|| header(":method"));
    if let Some(method) = method {
        set(REQUEST_METHOD, Value::from(method));
    }
    let path = Some(http.path)
        .filter(|v| !v.is_empty())
        .or_else(|| header(":path"));
    if let Some(path) = path {
        set(REQUEST_PATH, Value::from(path));
        // `query` and `fragment` are always empty in Envoy's request: the query is in `path`.
        let (url_path, query) = path.split_once('?').unwrap_or((path, ""));
        let url_path = url_path.split_once('#').map_or(url_path, |(p, _)| p);
        set(REQUEST_URL_PATH, Value::from(url_path));
        let query = query.split_once('#').map_or(query, |(q, _)| q);
        if !query.is_empty() {
            let params = query
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|p| p.split_once('=').unwrap_or((p, "")));
            set(REQUEST_QUERY_PARAMS, StringMap::from_pairs(params).into());
        }
    }
    let host = Some(http.host)
        .filter(|v| !v.is_empty())
        .or_else(|| header(":authority"))
        .or_else(|| header("host"));
    if let Some(host) = host {
        set(REQUEST_HOST, Value::from(host));
        set(DESTINATION_SERVICE_HOST, Value::from(strip_port(host)));
    }
    let scheme = Some(http.scheme)
        .filter(|v| !v.is_empty())
        .or_else(|| header(":scheme"));
    if let Some(scheme) = scheme {
        set(REQUEST_SCHEME, Value::from(scheme));
    }
    // Envoy sends -1 when the size is unknown.
    if http.size >= 0 {
        set(REQUEST_SIZE, Value::Int64(http.size));
    }
    if let Some(ua) = header("user-agent") {
        set(REQUEST_USERAGENT, Value::from(ua));
    }
    if let Some(referer) = header("referer") {
        set(REQUEST_REFERER, Value::from(referer));
    }
    let grpc = header("content-type").is_some_and(|ct| {
        ct.get(..16)
            .is_some_and(|p| p.eq_ignore_ascii_case("application/grpc"))
    });
    // "HTTP/1.0", "HTTP/1.1", "HTTP/2", "HTTP/3" are all plain HTTP to a policy.
    set(
        CONTEXT_PROTOCOL,
        Value::from(if grpc { "grpc" } else { "http" }),
    );
    if !headers.is_empty() {
        set(REQUEST_HEADERS, headers.into());
    }
}

/// The request headers with lower-case names: the `headers` map when Envoy sent it, else the
/// raw `header_map` (sent instead when `encode_raw_headers` is on), where a name that repeats
/// is merged with `,` as the `headers` map would have been.
fn request_headers<'a>(http: &HttpView<'a>) -> StringMap {
    if !http.headers.is_empty() {
        // Names differing only in case (never from Envoy, which sends lower case) keep one:
        // the later, as for a key sent twice.
        return StringMap::from_pairs(http.headers.iter().rev().map(|&(k, v)| (lower(k), v)));
    }
    let mut out: BTreeMap<Cow<'a, str>, Cow<'a, str>> = BTreeMap::new();
    for h in &http.header_map {
        // With encode_raw_headers Envoy fills raw_value only; `value` is the older field.
        let value = if h.raw_value.is_empty() {
            Cow::Borrowed(h.value)
        } else {
            String::from_utf8_lossy(h.raw_value)
        };
        match out.entry(lower(h.key)) {
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(value);
            }
            std::collections::btree_map::Entry::Occupied(mut e) => {
                let merged = format!("{},{}", e.get(), value);
                e.insert(Cow::Owned(merged));
            }
        }
    }
    StringMap::from_pairs(out.iter().map(|(k, v)| (k.as_ref(), v.as_ref())))
}

fn lower(name: &str) -> Cow<'_, str> {
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(name.to_ascii_lowercase())
    } else {
        Cow::Borrowed(name)
    }
}

/// `filter_metadata` as one string map: `<filter namespace>.<field>[.<nested field>...]` to
/// the value as text (strings as they are, numbers and booleans printed, lists joined with
/// `,`, null as empty). `None` when there is nothing to carry.
fn flatten_metadata(metadata: &Metadata) -> Option<StringMap> {
    let mut pairs = Vec::new();
    for (namespace, fields) in &metadata.filter_metadata {
        flatten_struct(namespace, fields, 0, &mut pairs);
    }
    (!pairs.is_empty()).then(|| StringMap::from_pairs(pairs))
}

fn flatten_struct(prefix: &str, s: &Struct, depth: usize, out: &mut Vec<(String, String)>) {
    if depth >= MAX_METADATA_DEPTH {
        return;
    }
    for (key, value) in &s.fields {
        let name = format!("{prefix}.{key}");
        match value.kind.as_ref() {
            Some(Kind::StructValue(inner)) => flatten_struct(&name, inner, depth + 1, out),
            _ => out.push((name, scalar_text(value))),
        }
    }
}

fn scalar_text(value: &PbValue) -> String {
    match value.kind.as_ref() {
        None | Some(Kind::NullValue(_)) => String::new(),
        Some(Kind::StringValue(s)) => s.clone(),
        Some(Kind::NumberValue(n)) => n.to_string(),
        Some(Kind::BoolValue(b)) => b.to_string(),
        Some(Kind::ListValue(list)) => list
            .values
            .iter()
            .map(scalar_text)
            .collect::<Vec<_>>()
            .join(","),
        // Nested structs inside lists are not flattened; their keys have no stable name.
        Some(Kind::StructValue(_)) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_spiffe_namespaces() {
        assert_eq!(
            spiffe_namespace("spiffe://cluster.local/ns/shop/sa/web"),
            Some("shop")
        );
        assert_eq!(spiffe_namespace("spiffe://cluster.local/other"), None);
        assert_eq!(spiffe_namespace("user@example.com"), None);
    }
}
