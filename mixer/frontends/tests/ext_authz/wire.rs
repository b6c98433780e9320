//! The Check method reads its request from the encoded bytes (`fill_bag_from_wire`); every
//! other caller maps a decoded `CheckRequest` (`fill_bag`). Both must give the same bag for
//! whatever protobuf allows on the wire: merged repeats, oneofs, maps, unknown fields.

use std::collections::HashMap;

use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue, Metadata, Pipe};
use envoy_types::pb::envoy::service::auth::v3::attribute_context::TlsSession;
use envoy_types::pb::google::protobuf::{Struct, Value as PbValue, value::Kind};
use mixer_frontends::ext_authz::{WireError, fill_bag, fill_bag_from_wire};
use mixer_model::{AttributeBag, Timestamp, Vocabulary};
use proptest::prelude::*;
use prost::Message;

use super::*;

const NOW: Timestamp = Timestamp(1_700_000_100_000_000_000);

/// The bag as sorted `name = value` lines, so two bags compare whatever their fill order.
fn lines(bag: &AttributeBag) -> Vec<String> {
    let mut lines: Vec<String> = bag.iter().map(|(k, v)| format!("{k} = {v:?}")).collect();
    lines.sort();
    lines
}

fn bag() -> AttributeBag {
    let mut vocabulary = Vocabulary::istio();
    for name in [
        ext_authz::METADATA_ATTRIBUTE,
        ext_authz::ROUTE_METADATA_ATTRIBUTE,
    ] {
        vocabulary
            .declare(name, mixer_model::ValueType::StringMap, "")
            .expect("declares");
    }
    AttributeBag::new(Arc::new(vocabulary))
}

fn from_message(request: &CheckRequest) -> Vec<String> {
    let mut bag = bag();
    fill_bag(&mut bag, request, NOW);
    lines(&bag)
}

fn from_wire(message: &[u8]) -> Result<Vec<String>, WireError> {
    let mut bag = bag();
    fill_bag_from_wire(&mut bag, message, NOW)?;
    Ok(lines(&bag))
}

fn text() -> BoxedStrategy<String> {
    prop_oneof![
        Just(String::new()),
        "[a-zA-Z0-9:./_-]{1,10}",
        "\\PC{0,6}",
        Just("spiffe://cluster.local/ns/shop/sa/web".to_string()),
        Just("/api/v1/users?page=4&x#frag".to_string()),
        Just("svc.example.com:8080".to_string()),
    ]
    .boxed()
}

fn map() -> BoxedStrategy<HashMap<String, String>> {
    prop::collection::hash_map(text(), text(), 0..4).boxed()
}

fn address() -> BoxedStrategy<Option<Address>> {
    let ip = prop_oneof![
        Just("10.1.2.3"),
        Just(" 192.168.0.9 "),
        Just("::1"),
        Just("nope")
    ];
    let port = prop_oneof![
        Just(None),
        any::<u32>().prop_map(|p| Some(PortSpecifier::PortValue(p))),
        Just(Some(PortSpecifier::NamedPort("http".into()))),
    ];
    let socket = (ip, port).prop_map(|(ip, port)| {
        AddressKind::SocketAddress(SocketAddress {
            address: ip.into(),
            port_specifier: port,
            ..Default::default()
        })
    });
    let pipe = Just(AddressKind::Pipe(Pipe {
        path: "/run/envoy.sock".into(),
        mode: 0,
    }));
    prop::option::of(
        prop::option::of(prop_oneof![socket, pipe]).prop_map(|a| Address { address: a }),
    )
    .boxed()
}

fn peer() -> BoxedStrategy<Option<Peer>> {
    prop::option::of(
        (
            address(),
            text(),
            map(),
            text(),
            prop_oneof![Just(""), Just("-----BEGIN")],
        )
            .prop_map(|(address, service, labels, principal, certificate)| Peer {
                address,
                service,
                labels,
                principal,
                certificate: certificate.into(),
            }),
    )
    .boxed()
}

fn metadata() -> BoxedStrategy<Option<Metadata>> {
    let value = prop_oneof![
        text().prop_map(Kind::StringValue),
        any::<i32>().prop_map(|n| Kind::NumberValue(f64::from(n))),
        any::<bool>().prop_map(Kind::BoolValue),
    ]
    .prop_map(|kind| PbValue { kind: Some(kind) });
    let fields = prop::collection::btree_map(text(), value, 0..3).prop_map(|f| Struct {
        fields: f.into_iter().collect(),
    });
    prop::option::of(
        prop::collection::hash_map("[a-z.]{1,8}", fields, 0..2).prop_map(|filter_metadata| {
            Metadata {
                filter_metadata,
                ..Default::default()
            }
        }),
    )
    .boxed()
}

fn http() -> BoxedStrategy<Option<HttpRequest>> {
    let raw = prop::collection::vec(
        (text(), text(), prop::collection::vec(any::<u8>(), 0..6)),
        0..4,
    )
    .prop_map(|headers| HeaderMap {
        headers: headers
            .into_iter()
            .map(|(key, value, raw_value)| HeaderValue {
                key,
                value,
                raw_value,
            })
            .collect(),
    });
    let fields = (text(), text(), map(), prop::option::of(raw), text(), text());
    let more = (text(), -2i64..5000, text(), text());
    prop::option::of((fields, more).prop_map(
        |((id, method, headers, header_map, path, host), (scheme, size, protocol, body))| {
            HttpRequest {
                id,
                method,
                headers,
                header_map,
                path,
                host,
                scheme,
                size,
                protocol,
                body,
                ..Default::default()
            }
        },
    ))
    .boxed()
}

fn check_request() -> BoxedStrategy<CheckRequest> {
    let time = prop::option::of(
        (any::<i64>(), any::<i32>()).prop_map(|(seconds, nanos)| PbTimestamp { seconds, nanos }),
    );
    let request = prop::option::of((time, http()).prop_map(|(time, http)| Request { time, http }));
    let tls = prop::option::of(text().prop_map(|sni| TlsSession { sni }));
    prop::option::of(
        (peer(), peer(), request, map(), metadata(), metadata(), tls).prop_map(
            |(source, destination, request, context_extensions, metadata, route, tls)| {
                AttributeContext {
                    source,
                    destination,
                    request,
                    context_extensions,
                    metadata_context: metadata,
                    route_metadata_context: route,
                    tls_session: tls,
                }
            },
        ),
    )
    .prop_map(|attributes| CheckRequest { attributes })
    .boxed()
}

proptest! {
    #[test]
    fn the_wire_gives_the_bag_the_decoded_message_gives(request in check_request()) {
        prop_assert_eq!(from_wire(&request.encode_to_vec())?, from_message(&request));
    }

    /// Two messages one after the other are one merged message to protobuf: later scalars
    /// win, maps and repeated fields accumulate, message fields merge, oneofs keep the last.
    #[test]
    fn concatenated_messages_merge_as_protobuf_merges_them(
        a in check_request(),
        b in check_request(),
    ) {
        let mut wire = a.encode_to_vec();
        wire.extend(b.encode_to_vec());
        let merged = CheckRequest::decode(wire.as_slice()).expect("prost decodes");
        prop_assert_eq!(from_wire(&wire)?, from_message(&merged));
    }

    /// Whatever prost accepts is read to the same bag; what it refuses may be refused or,
    /// when the damage is in a field the mapping skips, read. Nothing panics.
    #[test]
    fn damaged_messages_are_refused_or_read_as_prost_reads_them(
        request in check_request(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut wire = request.encode_to_vec();
        if !wire.is_empty() {
            let i = at.index(wire.len());
            wire[i] = byte;
            wire.truncate(cut.index(wire.len()) + 1);
        }
        let ours = from_wire(&wire);
        if let Ok(decoded) = CheckRequest::decode(wire.as_slice()) {
            prop_assert_eq!(ours?, from_message(&decoded));
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(wire in prop::collection::vec(any::<u8>(), 0..64)) {
        let _ = from_wire(&wire);
    }
}

/// A field key: number and wire type.
fn key(field: u32, wire: u8) -> u8 {
    u8::try_from(field << 3).expect("small field") | wire
}

#[test]
fn broken_framing_is_an_error_that_says_what_broke() {
    // attributes (1, LEN) announcing 5 bytes, 2 present.
    assert_eq!(from_wire(&[key(1, 2), 5, 0, 0]), Err(WireError::Truncated));
    // A varint that never ends.
    assert_eq!(from_wire(&[0x80; 11]), Err(WireError::Varint));
    // Field number 0.
    assert_eq!(from_wire(&[0, 0]), Err(WireError::Key));
    // A key past 32 bits, refused by prost though its field number (872396645) would fit.
    let past = [0xaa, 0xf6, 0xf6, 0xff, 0x19, 0x00];
    assert!(CheckRequest::decode(&past[..]).is_err());
    assert_eq!(from_wire(&past), Err(WireError::Key));
    // attributes sent as a varint.
    assert_eq!(
        from_wire(&[key(1, 0), 1]),
        Err(WireError::WireType { field: 1, wire: 0 })
    );
    // An end of group with no group open; a group never closed.
    assert_eq!(from_wire(&[key(7, 4)]), Err(WireError::Group));
    assert_eq!(from_wire(&[key(7, 3)]), Err(WireError::Group));
    let message = from_wire(&[key(1, 0), 1]).unwrap_err().to_string();
    assert!(message.contains("field 1"), "{message}");
}

#[test]
fn a_header_name_that_is_not_utf8_is_refused_but_a_skipped_body_is_not_examined() {
    let with = |http: HttpRequest| CheckRequest {
        attributes: Some(AttributeContext {
            request: Some(Request {
                time: None,
                http: Some(http),
            }),
            ..Default::default()
        }),
    };
    // HttpRequest.body (11) holding bytes that are not UTF-8.
    assert!(from_wire(&with(HttpRequest::default()).encode_to_vec()).is_ok());
    let http = [key(11, 2), 2, 0xff, 0xfe];
    let request = [&[key(2, 2), http.len() as u8][..], &http].concat();
    let attributes = [&[key(4, 2), request.len() as u8][..], &request].concat();
    let body = [&[key(1, 2), attributes.len() as u8][..], &attributes].concat();
    assert!(
        CheckRequest::decode(body.as_slice()).is_err(),
        "prost checks every string"
    );
    assert!(from_wire(&body).is_ok(), "the body is never read");

    // The same bytes as the method (2) are refused.
    let http = [key(2, 2), 2, 0xff, 0xfe];
    let request = [&[key(2, 2), http.len() as u8][..], &http].concat();
    let attributes = [&[key(4, 2), request.len() as u8][..], &request].concat();
    let method = [&[key(1, 2), attributes.len() as u8][..], &attributes].concat();
    let refused = from_wire(&method).expect_err("not UTF-8");
    assert_eq!(refused, WireError::Utf8 { field: 2 });
    // Named as a field of the wrong wire type is.
    assert_eq!(refused.to_string(), "string field 2 is not valid UTF-8");
}

#[test]
fn unknown_fields_and_groups_are_stepped_over() {
    let mut wire = golden::full_http_request().encode_to_vec();
    // Field 99 as varint, fixed64, fixed32 and a group holding a varint, at the top level.
    let mut unknown = vec![0x98, 0x06, 1];
    unknown.extend([0x99, 0x06, 1, 2, 3, 4, 5, 6, 7, 8]);
    unknown.extend([0x9d, 0x06, 1, 2, 3, 4]);
    unknown.extend([0x9b, 0x06, 0x08, 1, 0x9c, 0x06]);
    wire.splice(0..0, unknown);
    assert_eq!(
        from_wire(&wire).expect("reads"),
        from_message(&golden::full_http_request())
    );
}

#[test]
fn a_repeated_address_follows_the_oneof_rules() {
    let with_source = |kind: AddressKind| CheckRequest {
        attributes: Some(AttributeContext {
            source: Some(Peer {
                address: Some(Address {
                    address: Some(kind),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
    };
    let socket = |address: &str, port: Option<PortSpecifier>| {
        with_source(AddressKind::SocketAddress(SocketAddress {
            address: address.into(),
            port_specifier: port,
            ..Default::default()
        }))
    };
    let pipe = with_source(AddressKind::Pipe(Pipe {
        path: "/run/envoy.sock".into(),
        mode: 0,
    }));
    let ip = "source.ip = IpAddress(10.1.2.3)".to_string();
    let port = "source.port = Int64(8080)".to_string();
    let cases = [
        // A pipe after a socket address: no address left.
        (vec![socket("10.1.2.3", None), pipe.clone()], vec![]),
        // A socket address after a pipe.
        (vec![pipe, socket("10.1.2.3", None)], vec![ip.clone()]),
        // Two socket addresses merge: the port of the second joins the address of the first.
        (
            vec![
                socket("10.1.2.3", None),
                socket("", Some(PortSpecifier::PortValue(8080))),
            ],
            vec![ip.clone(), port.clone()],
        ),
        // A named port after a port number: no port.
        (
            vec![
                socket("10.1.2.3", Some(PortSpecifier::PortValue(8080))),
                socket("", Some(PortSpecifier::NamedPort("http".into()))),
            ],
            vec![ip],
        ),
    ];
    for (messages, want) in cases {
        let wire: Vec<u8> = messages.iter().flat_map(Message::encode_to_vec).collect();
        let got: Vec<String> = from_wire(&wire)
            .expect("reads")
            .into_iter()
            .filter(|l| l.starts_with("source.ip") || l.starts_with("source.port"))
            .collect();
        assert_eq!(got, want);
        let merged = CheckRequest::decode(wire.as_slice()).expect("prost decodes");
        assert_eq!(from_wire(&wire).expect("reads"), from_message(&merged));
    }
}
