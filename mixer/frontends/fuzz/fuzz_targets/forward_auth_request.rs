//! Forward-auth builds its attributes from headers any client can send. Whatever the method,
//! URI and headers the HTTP server accepts, mapping them must not panic and must give what the
//! module's table promises: the `X-Original-*` / `X-Forwarded-*` headers first, the call's own
//! values after them, every header under its lower-case name, and nothing undocumented.

#![no_main]

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, LazyLock};

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Uri};
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use mixer_frontends::forward_auth::fill_bag;
use mixer_model::{AttributeBag, Value, Vocabulary};

static VOCABULARY: LazyLock<Arc<Vocabulary>> = LazyLock::new(|| Arc::new(Vocabulary::istio()));

/// Headers the mapping reads by name (one in mixed case, which the server folds). Picking them
/// from a list reaches those branches far sooner than byte-by-byte discovery would.
const KNOWN: [&str; 13] = [
    "x-original-method",
    "x-forwarded-method",
    "x-original-uri",
    "x-forwarded-uri",
    "x-forwarded-host",
    "Host",
    "x-forwarded-proto",
    "x-forwarded-for",
    "x-real-ip",
    "user-agent",
    "referer",
    "x-request-id",
    "content-type",
];

const METHODS: [&str; 5] = ["GET", "POST", "HEAD", "OPTIONS", "PATCH"];

/// Everything the table names; anything else in the bag is undocumented.
const DOCUMENTED: [&str; 18] = [
    "request.method",
    "request.path",
    "request.url_path",
    "request.query_params",
    "request.host",
    "destination.service.host",
    "request.scheme",
    "source.ip",
    "connection.mtls",
    "source.principal",
    "source.namespace",
    "request.headers",
    "request.useragent",
    "request.referer",
    "request.id",
    "request.time",
    "context.time",
    "context.protocol",
];

/// A request as hyper would hand it over, or `None` for one it would refuse before routing.
fn request(u: &mut Unstructured) -> Result<Option<(Request, Option<IpAddr>)>> {
    let method = if u.arbitrary()? {
        Method::from_bytes(u.choose(&METHODS)?.as_bytes())
    } else {
        Method::from_bytes(u.arbitrary::<&[u8]>()?)
    };
    let Ok(method) = method else {
        return Ok(None);
    };
    let Ok(uri) = Uri::try_from(u.arbitrary::<&[u8]>()?) else {
        return Ok(None);
    };
    let peer: Option<IpAddr> = u.arbitrary()?;
    let mut request: Request = axum::http::Request::new(Body::empty());
    *request.method_mut() = method;
    *request.uri_mut() = uri;
    let count = u.int_in_range(0..=12)?;
    for _ in 0..count {
        let name = if u.ratio(3, 4)? {
            HeaderName::from_bytes(u.choose(&KNOWN)?.as_bytes())
        } else {
            HeaderName::from_bytes(u.arbitrary::<&[u8]>()?)
        };
        let value = HeaderValue::from_bytes(u.arbitrary::<&[u8]>()?);
        // A header the parser would refuse never reaches the front end: skip just that one.
        let (Ok(name), Ok(value)) = (name, value) else {
            continue;
        };
        request.headers_mut().append(name, value);
    }
    Ok(Some((request, peer)))
}

/// A header's text as the table means it: the first value, trimmed, when it is text and not
/// blank.
fn text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    let v = headers.get(name)?.to_str().ok()?.trim();
    (!v.is_empty()).then_some(v)
}

fn string<'a>(bag: &'a AttributeBag, name: &str) -> Option<&'a str> {
    bag.get_by_name(name).map(|v| {
        v.as_str()
            .unwrap_or_else(|| panic!("{name} is not a string: {v:?}"))
    })
}

fn map(bag: &AttributeBag, name: &str) -> Option<BTreeMap<String, String>> {
    bag.get_by_name(name).map(|v| {
        let m = v
            .as_map()
            .unwrap_or_else(|| panic!("{name} is not a map: {v:?}"));
        m.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(Some((request, peer))) = request(&mut Unstructured::new(data)) else {
        return;
    };
    let mut bag = AttributeBag::new(VOCABULARY.clone());
    fill_bag(&mut bag, &request, peer);
    let headers = request.headers();

    for (name, _) in bag.iter() {
        assert!(DOCUMENTED.contains(&name), "undocumented attribute {name}");
    }

    let method = text(headers, "x-original-method")
        .or_else(|| text(headers, "x-forwarded-method"))
        .unwrap_or(request.method().as_str());
    assert_eq!(string(&bag, "request.method"), Some(method));

    let path = text(headers, "x-original-uri")
        .or_else(|| text(headers, "x-forwarded-uri"))
        .unwrap_or_else(|| request.uri().path_and_query().map_or("/", |p| p.as_str()));
    assert_eq!(string(&bag, "request.path"), Some(path));
    let (url_path, query) = path.split_once('?').unwrap_or((path, ""));
    assert_eq!(string(&bag, "request.url_path"), Some(url_path));
    let params = map(&bag, "request.query_params");
    assert_eq!(params.is_some(), !query.is_empty(), "query {query:?}");
    if let Some(params) = params {
        // A repeated parameter keeps its first value, as a repeated header does.
        let mut expected = BTreeMap::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            expected
                .entry(k.to_string())
                .or_insert_with(|| v.to_string());
        }
        assert_eq!(params, expected, "query {query:?}");
    }

    let host = text(headers, "x-forwarded-host").or_else(|| text(headers, "host"));
    assert_eq!(string(&bag, "request.host"), host);
    let service_host = string(&bag, "destination.service.host");
    match (host, service_host) {
        (Some(host), Some(bare)) => {
            // The host as it is, a name or IPv4 address without its numeric port, or the
            // address inside `[...]`.
            let whole = bare == host;
            let without_port = !bare.contains(':')
                && host
                    .strip_prefix(bare)
                    .and_then(|rest| rest.strip_prefix(':'))
                    .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()));
            let unbracketed = host.starts_with(&format!("[{bare}]"));
            assert!(
                whole || without_port || unbracketed,
                "{bare:?} is not {host:?} without its port"
            );
        }
        (None, None) => {}
        other => panic!("request.host and destination.service.host disagree: {other:?}"),
    }

    let scheme = text(headers, "x-forwarded-proto").unwrap_or("http");
    assert_eq!(string(&bag, "request.scheme"), Some(scheme));

    // The client address is resolved before the mapping (the peer, or what a trusted proxy
    // says: `client_address`), so no header the client sends can change source.ip here.
    let source = bag.get_by_name("source.ip").map(|v| match v {
        Value::IpAddress(ip) => *ip,
        other => panic!("source.ip is not an address: {other:?}"),
    });
    assert_eq!(source, peer, "source.ip");

    for (attribute, header) in [
        ("request.useragent", "user-agent"),
        ("request.referer", "referer"),
        ("request.id", "x-request-id"),
    ] {
        assert_eq!(
            string(&bag, attribute),
            text(headers, header),
            "{attribute}"
        );
    }

    // Every header under its lower-case name with its first value, as UTF-8 where it is and
    // U+FFFD where it is not.
    let mut expected = BTreeMap::new();
    for (name, value) in headers {
        expected
            .entry(name.as_str().to_string())
            .or_insert_with(|| String::from_utf8_lossy(value.as_bytes()).into_owned());
    }
    let carried = map(&bag, "request.headers").expect("request.headers is always set");
    for name in carried.keys() {
        assert!(
            !name.bytes().any(|b| b.is_ascii_uppercase()),
            "header name {name:?} is not lower case"
        );
    }
    assert_eq!(carried, expected);

    let time = bag.get_by_name("request.time");
    assert!(
        matches!(time, Some(Value::Timestamp(_))),
        "request.time {time:?}"
    );
    assert_eq!(time, bag.get_by_name("context.time"));
    assert_eq!(string(&bag, "context.protocol"), Some("http"));
});
