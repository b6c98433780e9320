//! What the attribute mapping reads of a `CheckRequest`, as a view that borrows its strings:
//! from the encoded message on the hot path (no field is copied, no map built), or from a
//! decoded `CheckRequest` elsewhere, so that one mapping serves both.
//!
//! The decoder follows protobuf's merge rules for what it keeps: a later scalar replaces an
//! earlier one, map entries and repeated fields accumulate (a later map key wins), a message
//! field that repeats merges, and a oneof keeps its last case. Fields the mapping does not
//! read (the body, the protocol, unknown fields) are stepped over without being examined.

use std::borrow::Cow;
use std::fmt;

use envoy_types::pb::envoy::config::core::v3::Metadata;
use envoy_types::pb::envoy::config::core::v3::address::Address as AddressKind;
use envoy_types::pb::envoy::config::core::v3::socket_address::PortSpecifier;
use envoy_types::pb::envoy::service::auth::v3::CheckRequest;
use envoy_types::pb::envoy::service::auth::v3::attribute_context::{HttpRequest, Peer};
use prost::Message;

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

/// Why an encoded `CheckRequest` could not be read.
#[derive(Debug, PartialEq)]
pub enum WireError {
    /// A varint longer than ten bytes, or cut off by the end of its message.
    Varint,
    /// A length, or a fixed-size field, that runs past the end of its message.
    Truncated,
    /// A field number of 0, or a wire type that does not exist.
    Key,
    /// A known field sent with another wire type than its type has.
    WireType {
        /// The field's number.
        field: u32,
        /// The wire type it came with.
        wire: u8,
    },
    /// A string field that is not UTF-8.
    Utf8,
    /// A group left open, or one nested past the limit.
    Group,
    /// `metadata_context` or `route_metadata_context` did not decode.
    Metadata(String),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Varint => f.write_str("invalid varint"),
            WireError::Truncated => f.write_str("a field runs past the end of its message"),
            WireError::Key => f.write_str("invalid field key"),
            WireError::WireType { field, wire } => {
                write!(f, "field {field} has the wrong wire type {wire}")
            }
            WireError::Utf8 => f.write_str("a string field is not valid UTF-8"),
            WireError::Group => f.write_str("a group is unterminated or nested too deep"),
            WireError::Metadata(e) => write!(f, "metadata: {e}"),
        }
    }
}

impl std::error::Error for WireError {}

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const START_GROUP: u8 = 3;
const END_GROUP: u8 = 4;
const FIXED32: u8 = 5;
/// As deep as prost lets groups nest.
const MAX_GROUP_DEPTH: u32 = 100;

/// The unread rest of one message, and the number of the field being read.
struct Reader<'a> {
    buf: &'a [u8],
    field: u32,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, field: 0 }
    }

    /// The next field's number and wire type; `None` at the end of the message.
    #[inline]
    fn key(&mut self) -> Result<Option<(u32, u8)>, WireError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let wire = (key & 7) as u8;
        let field = u32::try_from(key >> 3).map_err(|_| WireError::Key)?;
        if field == 0 || wire > FIXED32 {
            return Err(WireError::Key);
        }
        self.field = field;
        Ok(Some((field, wire)))
    }

    #[inline]
    fn varint(&mut self) -> Result<u64, WireError> {
        // Keys, the lengths of short fields and small numbers take one byte.
        if let Some((&byte, rest)) = self.buf.split_first()
            && byte < 0x80
        {
            self.buf = rest;
            return Ok(u64::from(byte));
        }
        self.long_varint()
    }

    fn long_varint(&mut self) -> Result<u64, WireError> {
        let mut value = 0u64;
        for (i, &byte) in self.buf.iter().take(10).enumerate() {
            // The tenth byte holds bit 63 only.
            if i == 9 && byte > 1 {
                return Err(WireError::Varint);
            }
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte < 0x80 {
                self.buf = &self.buf[i + 1..];
                return Ok(value);
            }
        }
        Err(WireError::Varint)
    }

    fn varint_field(&mut self, wire: u8) -> Result<u64, WireError> {
        self.expect(wire, VARINT)?;
        self.varint()
    }

    /// A length-delimited field's bytes.
    fn len(&mut self, wire: u8) -> Result<&'a [u8], WireError> {
        self.expect(wire, LEN)?;
        let len = usize::try_from(self.varint()?).map_err(|_| WireError::Truncated)?;
        self.take(len)
    }

    fn string(&mut self, wire: u8) -> Result<&'a str, WireError> {
        std::str::from_utf8(self.len(wire)?).map_err(|_| WireError::Utf8)
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], WireError> {
        if len > self.buf.len() {
            return Err(WireError::Truncated);
        }
        let (head, rest) = self.buf.split_at(len);
        self.buf = rest;
        Ok(head)
    }

    /// Steps over a field the mapping does not read.
    fn skip(&mut self, field: u32, wire: u8, depth: u32) -> Result<(), WireError> {
        match wire {
            VARINT => self.varint().map(drop),
            FIXED64 => self.take(8).map(drop),
            LEN => self.len(LEN).map(drop),
            FIXED32 => self.take(4).map(drop),
            START_GROUP => {
                if depth >= MAX_GROUP_DEPTH {
                    return Err(WireError::Group);
                }
                loop {
                    match self.key()? {
                        None => return Err(WireError::Group),
                        Some((f, END_GROUP)) if f == field => return Ok(()),
                        Some((_, END_GROUP)) => return Err(WireError::Group),
                        Some((f, w)) => self.skip(f, w, depth + 1)?,
                    }
                }
            }
            // An end of group with no group open.
            _ => Err(WireError::Group),
        }
    }

    fn expect(&self, wire: u8, want: u8) -> Result<(), WireError> {
        if wire == want {
            Ok(())
        } else {
            Err(WireError::WireType {
                field: self.field,
                wire,
            })
        }
    }
}
