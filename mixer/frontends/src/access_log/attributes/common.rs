//! What HTTP and TCP entries share: addresses, TLS identities, timing, response flags and
//! Envoy's cluster and route.

use envoy_types::pb::envoy::data::accesslog::v3::AccessLogCommon;
use envoy_types::pb::envoy::data::accesslog::v3::tls_properties::CertificateProperties;
use envoy_types::pb::envoy::data::accesslog::v3::tls_properties::certificate_properties::subject_alt_name::San;
use envoy_types::pb::google::protobuf::{Duration as PbDuration, Timestamp as PbTimestamp};
use mixer_model::{Duration, StringMap, Timestamp, Value};

use crate::envoy_core::{socket_address, spiffe_namespace};

use super::{
    CUSTOM_TAGS_ATTRIBUTE, ROUTE_NAME_ATTRIBUTE, UPSTREAM_CLUSTER_ATTRIBUTE, response_flags,
    set_text,
};

/// What HTTP and TCP entries share. `kind` names where the duration goes:
/// `response` (HTTP: `response.duration`, `response.time`) or `connection`.
pub(super) fn common_attributes(
    set: &mut impl FnMut(&str, Value),
    common: &AccessLogCommon,
    kind: &str,
) {
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
pub(super) fn istio_cluster(cluster: &str) -> Option<(&'static str, &str)> {
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

fn timestamp(t: &PbTimestamp) -> Option<Timestamp> {
    Timestamp::from_parts(t.seconds, t.nanos)
}

fn duration(d: &PbDuration) -> Option<Duration> {
    Duration::from_parts(d.seconds, d.nanos)
}
