//! HTTP forward-auth: the endpoint nginx `auth_request`, Caddy `forward_auth` and Traefik
//! `forwardAuth` call before letting a request through.
//!
//! Any method on `/check` or a path below it. The original request is read from
//! `X-Original-Method` / `X-Original-URI` (nginx) or `X-Forwarded-Method` / `X-Forwarded-Uri` /
//! `X-Forwarded-Host` / `X-Forwarded-Proto` / `X-Forwarded-For` (Caddy, Traefik):
//!
//! | attribute | from |
//! |---|---|
//! | `request.method` | `X-Original-Method`, `X-Forwarded-Method`, else the call's method |
//! | `request.path` | `X-Original-URI`, `X-Forwarded-Uri`, else the call's path and query |
//! | `request.url_path`, `request.query_params` | the path split at `?` |
//! | `request.host`, `destination.service.host` | `X-Forwarded-Host`, else `Host` (the latter without port, and an IPv6 address without brackets) |
//! | `request.scheme` | `X-Forwarded-Proto`, else `http` |
//! | `source.ip` | first address of `X-Forwarded-For`, else `X-Real-IP`, else the peer |
//! | `request.headers` | every header, names lower-case, values as UTF-8 (bytes that are not, as U+FFFD) |
//! | `request.useragent`, `request.referer`, `request.id` | `User-Agent`, `Referer`, `X-Request-Id` |
//! | `request.time`, `context.time` | now |
//! | `context.protocol` | `http` |
//!
//! Answers: 200 allows, with the rules' request header operations as response headers (nginx
//! copies them upstream with `auth_request_set`); 403, 401 or 429 deny, after the verdict's
//! code; 503 only when the mixer could not decide (a handler failed closed, or no config yet).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use mixer_model::{AttributeBag, Code, HeaderOp, HeaderOperation, StringMap, Timestamp, Value};
use mixer_runtime::Runtime;

use crate::host::strip_port;

/// The forward-auth routes, to serve on `--http-addr`.
pub fn router(runtime: Arc<Runtime>) -> Router {
    Router::new()
        .route("/check", axum::routing::any(check))
        .route("/check/{*rest}", axum::routing::any(check))
        .with_state(runtime)
}

async fn check(State(runtime): State<Arc<Runtime>>, request: Request) -> Response {
    if !runtime.is_ready() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "no valid config is active\n",
        )
            .into_response();
    }
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    let snapshot = runtime.snapshot();
    let mut bag = AttributeBag::new(snapshot.vocabulary().clone());
    fill_bag(&mut bag, &request, peer);
    match snapshot.check_cached_without_reads(&bag).await {
        Ok(checked) => {
            let verdict = checked.verdict;
            let mut headers = HeaderMap::new();
            if verdict.is_allowed() {
                apply(&mut headers, &verdict.request_header_ops);
                apply(&mut headers, &verdict.response_header_ops);
                (StatusCode::OK, headers, Body::empty()).into_response()
            } else {
                apply(&mut headers, &verdict.response_header_ops);
                let status = http_status(verdict.status.code);
                let body = format!("{}\n", verdict.status);
                (status, headers, body).into_response()
            }
        }
        // The mixer could not decide: 5xx, never a denial, so the proxy's own failure
        // setting decides (nginx turns an auth_request 5xx into 500 for the client).
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")).into_response(),
    }
}

/// The HTTP status for a denial's code: 401 for UNAUTHENTICATED, 429 for RESOURCE_EXHAUSTED,
/// 403 for everything else.
pub fn http_status(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::OK,
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        _ => StatusCode::FORBIDDEN,
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

/// Maps a forward-auth call to attributes, as the [module](self)'s table says: `request` as
/// the HTTP server hands it over, `peer` the address of the connection it came on, when known.
/// Values that do not fit their attribute's type are left out; `request.time` and
/// `context.time` are read from the clock. Public so the fuzz targets can call it.
pub fn fill_bag(bag: &mut AttributeBag, request: &Request, peer: Option<IpAddr>) {
    let headers = request.headers();
    let mut set = |name: &str, value: Value| {
        // Values come from text the client controls; one that does not fit its type is
        // left out rather than failing the whole check.
        let _ = bag.set(name, value);
    };
    let method = header(headers, "x-original-method")
        .or_else(|| header(headers, "x-forwarded-method"))
        .unwrap_or(request.method().as_str());
    set("request.method", Value::from(method));
    let uri = header(headers, "x-original-uri")
        .or_else(|| header(headers, "x-forwarded-uri"))
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
    if let Some(host) = header(headers, "x-forwarded-host").or_else(|| header(headers, "host")) {
        set("request.host", Value::from(host));
        set("destination.service.host", Value::from(strip_port(host)));
    }
    set(
        "request.scheme",
        Value::from(header(headers, "x-forwarded-proto").unwrap_or("http")),
    );
    // Proxies write `unknown` (or an obfuscated name) into X-Forwarded-For when they will not
    // tell; X-Real-IP, when it holds an address, is then the better source than the peer.
    let address = |v: &str| v.trim().parse::<IpAddr>().ok();
    let forwarded_ip = header(headers, "x-forwarded-for")
        .and_then(|v| v.split(',').next())
        .and_then(address)
        .or_else(|| header(headers, "x-real-ip").and_then(address));
    if let Some(ip) = forwarded_ip.or(peer) {
        set("source.ip", Value::IpAddress(ip));
    }
    for (attr, name) in [
        ("request.useragent", "user-agent"),
        ("request.referer", "referer"),
        ("request.id", "x-request-id"),
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

fn apply(headers: &mut HeaderMap, ops: &[HeaderOperation]) {
    for op in ops {
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(op.name.as_bytes()),
            HeaderValue::from_str(&op.value),
        ) else {
            continue;
        };
        match op.op {
            HeaderOp::Replace => {
                headers.insert(name, value);
            }
            HeaderOp::Append => {
                headers.append(name, value);
            }
            // A forward-auth answer can only add headers; removal has no meaning here.
            HeaderOp::Remove => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

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

    fn source_ip(headers: &[(&'static str, &str)]) -> Option<Value> {
        let headers: Vec<_> = headers.iter().map(|(n, v)| (*n, v.as_bytes())).collect();
        bag_for(&headers).get_by_name("source.ip").cloned()
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
    fn the_source_is_the_first_forwarded_address_else_the_real_ip_else_the_peer() {
        let ip = |s: &str| Some(Value::IpAddress(s.parse().expect("ip")));
        let xff = "x-forwarded-for";
        assert_eq!(source_ip(&[(xff, "10.0.0.9, 10.0.0.1")]), ip("10.0.0.9"));
        assert_eq!(
            source_ip(&[(xff, "unknown"), ("x-real-ip", "10.1.2.3")]),
            ip("10.1.2.3")
        );
        assert_eq!(
            source_ip(&[("x-real-ip", "2001:db8::7")]),
            ip("2001:db8::7")
        );
        assert_eq!(source_ip(&[(xff, "unknown")]), ip("192.0.2.1"));
        assert_eq!(source_ip(&[]), ip("192.0.2.1"));
    }
}
