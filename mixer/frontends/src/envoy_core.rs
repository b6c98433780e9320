//! Readings of Envoy's core types that the ext_authz and access log front ends share, so
//! both map a peer the same way.

use std::net::IpAddr;

use envoy_types::pb::envoy::config::core::v3::Address;
use envoy_types::pb::envoy::config::core::v3::address::Address as AddressKind;
use envoy_types::pb::envoy::config::core::v3::socket_address::PortSpecifier;

/// The IP and port of a socket address; pipes and internal addresses have none.
pub(crate) fn socket_address(address: &Address) -> Option<(IpAddr, Option<u32>)> {
    let Some(AddressKind::SocketAddress(socket)) = address.address.as_ref() else {
        return None;
    };
    let ip = socket_ip(&socket.address)?;
    let port = match socket.port_specifier {
        Some(PortSpecifier::PortValue(p)) => Some(p),
        _ => None,
    };
    Some((ip, port))
}

/// The IP of a socket address's text.
pub(crate) fn socket_ip(address: &str) -> Option<IpAddr> {
    address.trim().parse().ok()
}

/// The namespace of an Istio SPIFFE identity `spiffe://<trust domain>/ns/<ns>/sa/<account>`.
pub(crate) fn spiffe_namespace(principal: &str) -> Option<&str> {
    let path = principal.strip_prefix("spiffe://")?;
    let mut segments = path.split('/').skip(1);
    match (segments.next(), segments.next()) {
        (Some("ns"), Some(ns)) if !ns.is_empty() => Some(ns),
        _ => None,
    }
}
