//! What the attribute mapping reads of a `CheckRequest`, as a view that borrows its strings:
//! from the encoded message on the hot path (no field is copied, no map built), or from a
//! decoded `CheckRequest` elsewhere, so that one mapping serves both.
//!
//! The decoder follows protobuf's merge rules for what it keeps: a later scalar replaces an
//! earlier one, map entries and repeated fields accumulate (a later map key wins), a message
//! field that repeats merges, and a oneof keeps its last case. Fields the mapping does not
//! read (the body, the protocol, unknown fields) are stepped over without being examined.

use std::borrow::Cow;

use envoy_types::pb::envoy::config::core::v3::Metadata;
use envoy_types::pb::envoy::config::core::v3::address::Address as AddressKind;
use envoy_types::pb::envoy::config::core::v3::socket_address::PortSpecifier;
use envoy_types::pb::envoy::service::auth::v3::CheckRequest;
use envoy_types::pb::envoy::service::auth::v3::attribute_context::{HttpRequest, Peer};
use prost::Message;

use crate::protowire::Reader;
pub use crate::protowire::WireError;

/// A `CheckRequest` as the attribute mapping reads it.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct CheckView<'a> {
    /// `attributes`; a request without it carries nothing to map.
    pub attributes: Option<AttributesView<'a>>,
}

/// `AttributeContext`.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct AttributesView<'a> {
    pub source: Option<PeerView<'a>>,
    pub destination: Option<PeerView<'a>>,
    /// `tls_session.sni`, when a TLS session was sent.
    pub sni: Option<&'a str>,
    /// `context_extensions`, in the order sent.
    pub context_extensions: Vec<(&'a str, &'a str)>,
    pub metadata_context: Option<Cow<'a, Metadata>>,
    pub route_metadata_context: Option<Cow<'a, Metadata>>,
    pub request: Option<RequestView<'a>>,
}

/// `AttributeContext.Peer`.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct PeerView<'a> {
    /// The socket address, when the address is one (not a pipe or an internal address).
    pub socket: Option<SocketView<'a>>,
    pub service: &'a str,
    /// `labels`, in the order sent.
    pub labels: Vec<(&'a str, &'a str)>,
    pub principal: &'a str,
    /// Only whether a certificate was sent is read.
    pub has_certificate: bool,
}

/// `SocketAddress`: the address text and the port, when it is a number.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct SocketView<'a> {
    pub address: &'a str,
    pub port: Option<u32>,
}

/// `AttributeContext.Request`.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct RequestView<'a> {
    /// `time` as seconds and nanoseconds.
    pub time: Option<(i64, i32)>,
    pub http: Option<HttpView<'a>>,
}

/// `AttributeContext.HttpRequest`.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct HttpView<'a> {
    pub id: &'a str,
    pub method: &'a str,
    /// `headers`, in the order sent.
    pub headers: Vec<(&'a str, &'a str)>,
    /// `header_map.headers` (sent instead of `headers` with `encode_raw_headers`).
    pub header_map: Vec<HeaderView<'a>>,
    pub path: &'a str,
    pub host: &'a str,
    pub scheme: &'a str,
    pub size: i64,
}

/// `HeaderValue`.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct HeaderView<'a> {
    pub key: &'a str,
    pub value: &'a str,
    pub raw_value: &'a [u8],
}

impl<'a> CheckView<'a> {
    /// Reads an encoded `CheckRequest`.
    pub fn decode(message: &'a [u8]) -> Result<CheckView<'a>, WireError> {
        let mut view = CheckView::default();
        let mut r = Reader::new(message);
        while let Some((field, wire)) = r.key()? {
            match field {
                1 => attributes(r.len(wire)?, view.attributes.get_or_insert_default())?,
                _ => r.skip(field, wire, 0)?,
            }
        }
        Ok(view)
    }

    /// Borrows a decoded `CheckRequest`.
    pub fn of(request: &'a CheckRequest) -> CheckView<'a> {
        let Some(attrs) = request.attributes.as_ref() else {
            return CheckView::default();
        };
        let pairs = |map: &'a std::collections::HashMap<String, String>| {
            map.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
        };
        let peer = |peer: &'a Peer| PeerView {
            socket: peer
                .address
                .as_ref()
                .and_then(|a| match a.address.as_ref() {
                    Some(AddressKind::SocketAddress(s)) => Some(SocketView {
                        address: s.address.as_str(),
                        port: match s.port_specifier {
                            Some(PortSpecifier::PortValue(p)) => Some(p),
                            _ => None,
                        },
                    }),
                    _ => None,
                }),
            service: &peer.service,
            labels: pairs(&peer.labels),
            principal: &peer.principal,
            has_certificate: !peer.certificate.is_empty(),
        };
        let http = |http: &'a HttpRequest| HttpView {
            id: &http.id,
            method: &http.method,
            headers: pairs(&http.headers),
            header_map: http.header_map.as_ref().map_or_else(Vec::new, |m| {
                m.headers
                    .iter()
                    .map(|h| HeaderView {
                        key: &h.key,
                        value: &h.value,
                        raw_value: &h.raw_value,
                    })
                    .collect()
            }),
            path: &http.path,
            host: &http.host,
            scheme: &http.scheme,
            size: http.size,
        };
        CheckView {
            attributes: Some(AttributesView {
                source: attrs.source.as_ref().map(peer),
                destination: attrs.destination.as_ref().map(peer),
                sni: attrs.tls_session.as_ref().map(|t| t.sni.as_str()),
                context_extensions: pairs(&attrs.context_extensions),
                metadata_context: attrs.metadata_context.as_ref().map(Cow::Borrowed),
                route_metadata_context: attrs.route_metadata_context.as_ref().map(Cow::Borrowed),
                request: attrs.request.as_ref().map(|r| RequestView {
                    time: r.time.as_ref().map(|t| (t.seconds, t.nanos)),
                    http: r.http.as_ref().map(http),
                }),
            }),
        }
    }
}

fn attributes<'a>(buf: &'a [u8], into: &mut AttributesView<'a>) -> Result<(), WireError> {
    let mut r = Reader::new(buf);
    while let Some((field, wire)) = r.key()? {
        match field {
            1 => peer(r.len(wire)?, into.source.get_or_insert_default())?,
            2 => peer(r.len(wire)?, into.destination.get_or_insert_default())?,
            4 => request(r.len(wire)?, into.request.get_or_insert_default())?,
            10 => into.context_extensions.push(map_entry(r.len(wire)?)?),
            11 => metadata(r.len(wire)?, &mut into.metadata_context)?,
            12 => tls_session(r.len(wire)?, into.sni.get_or_insert_default())?,
            13 => metadata(r.len(wire)?, &mut into.route_metadata_context)?,
            _ => r.skip(field, wire, 0)?,
        }
    }
    Ok(())
}

fn peer<'a>(buf: &'a [u8], into: &mut PeerView<'a>) -> Result<(), WireError> {
    let mut r = Reader::new(buf);
    while let Some((field, wire)) = r.key()? {
        match field {
            1 => address(r.len(wire)?, &mut into.socket)?,
            2 => into.service = r.string(wire)?,
            3 => into.labels.push(map_entry(r.len(wire)?)?),
            4 => into.principal = r.string(wire)?,
            5 => into.has_certificate = !r.len(wire)?.is_empty(),
            _ => r.skip(field, wire, 0)?,
        }
    }
    Ok(())
}

/// `Address`, a oneof: a socket address merges into the one already read; a pipe or an
/// internal address replaces it (and is not read further).
fn address<'a>(buf: &'a [u8], socket: &mut Option<SocketView<'a>>) -> Result<(), WireError> {
    let mut r = Reader::new(buf);
    while let Some((field, wire)) = r.key()? {
        match field {
            1 => socket_address(r.len(wire)?, socket.get_or_insert_default())?,
            2 | 3 => {
                r.len(wire)?;
                *socket = None;
            }
            _ => r.skip(field, wire, 0)?,
        }
    }
    Ok(())
}

fn socket_address<'a>(buf: &'a [u8], into: &mut SocketView<'a>) -> Result<(), WireError> {
    let mut r = Reader::new(buf);
    while let Some((field, wire)) = r.key()? {
        match field {
            2 => into.address = r.string(wire)?,
            // uint32, so the varint's low 32 bits, as protobuf reads it.
            3 => into.port = Some(r.varint_field(wire)? as u32),
            4 => {
                r.len(wire)?;
                into.port = None;
            }
            _ => r.skip(field, wire, 0)?,
        }
    }
    Ok(())
}

fn tls_session<'a>(buf: &'a [u8], sni: &mut &'a str) -> Result<(), WireError> {
    let mut r = Reader::new(buf);
    while let Some((field, wire)) = r.key()? {
        match field {
            1 => *sni = r.string(wire)?,
            _ => r.skip(field, wire, 0)?,
        }
    }
    Ok(())
}

fn metadata<'a>(buf: &[u8], into: &mut Option<Cow<'a, Metadata>>) -> Result<(), WireError> {
    // Rare and nested without bound: prost reads it, with its recursion limit.
    into.get_or_insert_default()
        .to_mut()
        .merge(buf)
        .map_err(|e| WireError::Metadata(e.to_string()))
}

fn request<'a>(buf: &'a [u8], into: &mut RequestView<'a>) -> Result<(), WireError> {
    let mut r = Reader::new(buf);
    while let Some((field, wire)) = r.key()? {
        match field {
            1 => timestamp(r.len(wire)?, into.time.get_or_insert_default())?,
            2 => http(r.len(wire)?, into.http.get_or_insert_default())?,
            _ => r.skip(field, wire, 0)?,
        }
    }
    Ok(())
}

fn timestamp(buf: &[u8], into: &mut (i64, i32)) -> Result<(), WireError> {
    let mut r = Reader::new(buf);
    while let Some((field, wire)) = r.key()? {
        match field {
            // int64 and int32: the varint's bits as two's complement, as protobuf reads them.
            1 => into.0 = r.varint_field(wire)? as i64,
            2 => into.1 = r.varint_field(wire)? as i32,
            _ => r.skip(field, wire, 0)?,
        }
    }
    Ok(())
}

fn http<'a>(buf: &'a [u8], into: &mut HttpView<'a>) -> Result<(), WireError> {
    let mut r = Reader::new(buf);
    while let Some((field, wire)) = r.key()? {
        match field {
            1 => into.id = r.string(wire)?,
            2 => into.method = r.string(wire)?,
            3 => into.headers.push(map_entry(r.len(wire)?)?),
            4 => into.path = r.string(wire)?,
            5 => into.host = r.string(wire)?,
            6 => into.scheme = r.string(wire)?,
            9 => into.size = r.varint_field(wire)? as i64,
            13 => header_map(r.len(wire)?, &mut into.header_map)?,
            _ => r.skip(field, wire, 0)?,
        }
    }
    Ok(())
}

fn header_map<'a>(buf: &'a [u8], into: &mut Vec<HeaderView<'a>>) -> Result<(), WireError> {
    let mut r = Reader::new(buf);
    while let Some((field, wire)) = r.key()? {
        match field {
            1 => {
                let mut header = HeaderView::default();
                let mut h = Reader::new(r.len(wire)?);
                while let Some((field, wire)) = h.key()? {
                    match field {
                        1 => header.key = h.string(wire)?,
                        2 => header.value = h.string(wire)?,
                        3 => header.raw_value = h.len(wire)?,
                        _ => h.skip(field, wire, 0)?,
                    }
                }
                into.push(header);
            }
            _ => r.skip(field, wire, 0)?,
        }
    }
    Ok(())
}

/// A `map<string, string>` entry: key 1, value 2, either missing meaning empty.
fn map_entry(buf: &[u8]) -> Result<(&str, &str), WireError> {
    let (mut key, mut value) = ("", "");
    let mut r = Reader::new(buf);
    while let Some((field, wire)) = r.key()? {
        match field {
            1 => key = r.string(wire)?,
            2 => value = r.string(wire)?,
            _ => r.skip(field, wire, 0)?,
        }
    }
    Ok((key, value))
}
