//! A forward-auth call's attributes (the table in the [module](super) docs).

use std::net::IpAddr;

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, header as std_header};
use mixer_model::{AttributeBag, StringMap, Timestamp, Value};

use super::TlsPeer;
use crate::envoy_core::spiffe_namespace;
use crate::host::strip_port;

/// Maps a forward-auth call to attributes, as the [module](super)'s table says: `request` as
/// the HTTP server hands it over, `client` the address [`ClientAddress`](super::ClientAddress)
/// found for it, when known. Values that do not fit their attribute's type are left out;
/// `request.time` and `context.time` are read from the clock. Public so the fuzz targets can
/// call it.
pub fn fill_bag(bag: &mut AttributeBag, request: &Request, client: Option<IpAddr>) {
    let headers = request.headers();
    let mut set = |name: &str, value: Value| {
        // Values come from text the client controls; one that does not fit its type is
        // left out rather than failing the whole check.
        let _ = bag.set(name, value);
    };
    let method = header(headers, &X_ORIGINAL_METHOD)
        .or_else(|| header(headers, &X_FORWARDED_METHOD))
        .unwrap_or(request.method().as_str());
    set("request.method", Value::from(method));
    let uri = header(headers, &X_ORIGINAL_URI)
        .or_else(|| header(headers, &X_FORWARDED_URI))
        .map(str::to_string)
        .unwrap_or_else(|| {
            request
                .uri()
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_string()
        });
    let (url_path, query) = uri.split_once('?').unwrap_or((&uri, ""));
    set("request.url_path", Value::from(url_path));
    if !query.is_empty() {
        let params = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| match p.split_once('=') {
                Some((k, v)) => (k, v),
                None => (p, ""),
            });
        set("request.query_params", StringMap::from_pairs(params).into());
    }
    set("request.path", Value::from(uri.as_str()));
    if let Some(host) =
        header(headers, &X_FORWARDED_HOST).or_else(|| header(headers, &std_header::HOST))
    {
        set("request.host", Value::from(host));
        set("destination.service.host", Value::from(strip_port(host)));
    }
    set(
        "request.scheme",
        Value::from(header(headers, &X_FORWARDED_PROTO).unwrap_or("http")),
    );
    if let Some(ip) = client {
        set("source.ip", Value::IpAddress(ip));
    }
    // The caller's verified certificate, put there by the TLS listener. It names whoever
    // opened the connection: the client itself, or the proxy calling on its behalf.
    let peer = request.extensions().get::<TlsPeer>();
    set("connection.mtls", Value::Bool(peer.is_some_and(|p| p.mtls)));
    if let Some(principal) = peer.filter(|p| p.mtls).and_then(|p| p.principal.as_deref()) {
        set("source.principal", Value::from(principal));
        if let Some(namespace) = spiffe_namespace(principal) {
            set("source.namespace", Value::from(namespace));
        }
    }
    for (attr, name) in [
        ("request.useragent", &std_header::USER_AGENT),
        ("request.referer", &std_header::REFERER),
        ("request.id", &X_REQUEST_ID),
    ] {
        if let Some(v) = header(headers, name) {
            set(attr, Value::from(v));
        }
    }
    // HTTP allows bytes beyond ASCII in values (obs-text); they are kept, as UTF-8 where they
    // are, with U+FFFD for what is not, rather than losing the header.
    let pairs = headers
        .iter()
        .map(|(name, value)| (name.as_str(), String::from_utf8_lossy(value.as_bytes())));
    set("request.headers", StringMap::from_pairs(pairs).into());
    let now = Value::Timestamp(Timestamp::now());
    set("request.time", now.clone());
    set("context.time", now);
    set("context.protocol", Value::from("http"));
}

// The headers read by name, as constants: looked up by a `&str`, each name was parsed and
// checked again on every request before it was hashed (about 1k instructions a forward-auth
// check, #36).
const X_ORIGINAL_METHOD: HeaderName = HeaderName::from_static("x-original-method");
const X_FORWARDED_METHOD: HeaderName = HeaderName::from_static("x-forwarded-method");
const X_ORIGINAL_URI: HeaderName = HeaderName::from_static("x-original-uri");
const X_FORWARDED_URI: HeaderName = HeaderName::from_static("x-forwarded-uri");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

fn header<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::body::Body;
    use axum::http::{HeaderName, HeaderValue};
    use mixer_model::Vocabulary;

    use super::*;

    fn bag_for(headers: &[(&'static str, &[u8])]) -> AttributeBag {
        let mut request = Request::new(Body::empty());
        for (name, value) in headers {
            request.headers_mut().insert(
                HeaderName::from_static(name),
                HeaderValue::from_bytes(value).expect("a header value"),
            );
        }
        let mut bag = AttributeBag::new(Arc::new(Vocabulary::istio()));
        fill_bag(&mut bag, &request, Some("192.0.2.1".parse().expect("ip")));
        bag
    }

    #[test]
    fn ipv6_hosts_lose_port_and_brackets_and_no_header_is_lost() {
        let bag = bag_for(&[
            ("host", b"[fd00::7]:8080"),
            ("x-accent", "café".as_bytes()),
            ("x-latin1", b"caf\xe9"),
        ]);
        let text = |name: &str| {
            bag.get_by_name(name)
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        assert_eq!(text("destination.service.host").as_deref(), Some("fd00::7"));
        assert_eq!(text("request.host").as_deref(), Some("[fd00::7]:8080"));
        let headers = bag
            .get_by_name("request.headers")
            .and_then(Value::as_map)
            .expect("request.headers");
        assert_eq!(headers.get("x-accent"), Some("café"));
        assert_eq!(headers.get("x-latin1"), Some("caf\u{fffd}"));
        assert_eq!(headers.get("host"), Some("[fd00::7]:8080"));
    }

    #[test]
    fn the_source_is_the_client_address_given_never_a_header() {
        let bag = bag_for(&[
            ("x-forwarded-for", b"10.57.1.1"),
            ("x-real-ip", b"10.57.1.1"),
        ]);
        assert_eq!(
            bag.get_by_name("source.ip"),
            Some(&Value::IpAddress("192.0.2.1".parse().expect("ip")))
        );
        let mut bag = AttributeBag::new(Arc::new(Vocabulary::istio()));
        fill_bag(&mut bag, &Request::new(Body::empty()), None);
        assert_eq!(bag.get_by_name("source.ip"), None);
    }

    #[test]
    fn the_callers_verified_certificate_names_the_source() {
        let mut request = Request::new(Body::empty());
        request.extensions_mut().insert(TlsPeer {
            mtls: true,
            principal: Some("spiffe://cluster.local/ns/edge/sa/nginx".into()),
        });
        let mut bag = AttributeBag::new(Arc::new(Vocabulary::istio()));
        fill_bag(&mut bag, &request, None);
        assert_eq!(
            bag.get_by_name("source.principal").and_then(Value::as_str),
            Some("spiffe://cluster.local/ns/edge/sa/nginx")
        );
        assert_eq!(
            bag.get_by_name("source.namespace").and_then(Value::as_str),
            Some("edge")
        );
        assert_eq!(bag.get_by_name("connection.mtls"), Some(&Value::Bool(true)));
    }

    #[test]
    fn without_a_verified_certificate_the_connection_is_not_mutual_tls() {
        let plaintext = bag_for(&[]);
        assert_eq!(
            plaintext.get_by_name("connection.mtls"),
            Some(&Value::Bool(false))
        );
        assert_eq!(plaintext.get_by_name("source.principal"), None);
        // One-way TLS: the listener has no client CA, nothing was verified.
        let mut request = Request::new(Body::empty());
        request.extensions_mut().insert(TlsPeer::default());
        let mut bag = AttributeBag::new(Arc::new(Vocabulary::istio()));
        fill_bag(&mut bag, &request, None);
        assert_eq!(
            bag.get_by_name("connection.mtls"),
            Some(&Value::Bool(false))
        );
    }
}
