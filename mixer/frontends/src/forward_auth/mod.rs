//! HTTP forward-auth: the endpoint nginx `auth_request`, Caddy `forward_auth` and Traefik
//! `forwardAuth` call before letting a request through.
//!
//! Any method on `/check` or a path below it. The original request is read from
//! `X-Original-Method` / `X-Original-URI` (nginx) or `X-Forwarded-Method` / `X-Forwarded-Uri` /
//! `X-Forwarded-Host` / `X-Forwarded-Proto` (Caddy, Traefik):
//!
//! | attribute | from |
//! |---|---|
//! | `request.method` | `X-Original-Method`, `X-Forwarded-Method`, else the call's method |
//! | `request.path` | `X-Original-URI`, `X-Forwarded-Uri`, else the call's path and query |
//! | `request.url_path`, `request.query_params` | the path split at `?` |
//! | `request.host`, `destination.service.host` | `X-Forwarded-Host`, else `Host` (the latter without port, and an IPv6 address without brackets) |
//! | `request.scheme` | `X-Forwarded-Proto`, else `http` |
//! | `source.ip` | the connection's peer; when the peer is a trusted proxy (`--trusted-proxies`), the right-most `X-Forwarded-For` address that is not a trusted proxy, or `X-Real-IP` with `--real-ip-header x-real-ip` ([`ClientAddress`]) |
//! | `connection.mtls` | true when the caller presented a certificate the listener verified (`--tls-client-ca`, [`TlsPeer`]); always set |
//! | `source.principal`, `source.namespace` | the first URI SAN of that certificate (`spiffe://<domain>/ns/<ns>/sa/<sa>`), and its `ns` segment: the caller's identity, nginx's own when nginx calls with `proxy_ssl_certificate` |
//! | `request.headers` | every header, names lower-case, values as UTF-8 (bytes that are not, as U+FFFD) |
//! | `request.useragent`, `request.referer`, `request.id` | `User-Agent`, `Referer`, `X-Request-Id` |
//! | `request.time`, `context.time` | now |
//! | `context.protocol` | `http` |
//!
//! Answers: 200 allows, with the rules' request header operations as response headers (nginx
//! copies them upstream with `auth_request_set`); 403, 401 or 429 deny, after the verdict's
//! code. Quota rules that match the request are charged one unit once the check allows it
//! (see [`crate::check_quota`]): over a limit the answer is 429 with `Retry-After` and
//! `X-RateLimit-*`. 503 when the mixer could not decide (a handler failed closed, or no config
//! yet), 500 when an instance cannot be built from the request.

mod attributes;
mod client_address;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use mixer_model::{Code, HeaderOp, HeaderOperation};
use mixer_runtime::{Runtime, Undecided, Wants};

use crate::request_scope::RequestScope;

pub use attributes::fill_bag;
pub use client_address::{ClientAddress, RealIpHeader, TrustedProxies};

/// What the forward-auth endpoint is told at start.
#[derive(Clone, Debug, Default)]
pub struct ForwardAuthOptions {
    /// How the client's address is found.
    pub client_address: ClientAddress,
}

/// What the TLS handshake of a forward-auth connection established about the caller, put in
/// each request's extensions by the listener (absent on plaintext connections).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsPeer {
    /// The caller presented a certificate that chains to the listener's client CA.
    pub mtls: bool,
    /// The first URI SAN of that certificate, as written (a SPIFFE ID in a mesh).
    pub principal: Option<Arc<str>>,
}

#[derive(Clone)]
struct Endpoint {
    runtime: Arc<Runtime>,
    options: Arc<ForwardAuthOptions>,
}

/// The forward-auth routes, to serve on `--http-addr` (with the peer's address as
/// `ConnectInfo<SocketAddr>`).
pub fn router(runtime: Arc<Runtime>, options: ForwardAuthOptions) -> Router {
    Router::new()
        .route("/check", axum::routing::any(check))
        .route("/check/{*rest}", axum::routing::any(check))
        .with_state(Endpoint {
            runtime,
            options: Arc::new(options),
        })
}

async fn check(State(endpoint): State<Endpoint>, request: Request) -> Response {
    let mut scope = match RequestScope::begin(&endpoint.runtime) {
        Ok(scope) => scope,
        Err(not_ready) => {
            return (StatusCode::SERVICE_UNAVAILABLE, format!("{not_ready}\n")).into_response();
        }
    };
    let client = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| {
            endpoint
                .options
                .client_address
                .resolve(request.headers(), c.0.ip())
        });
    fill_bag(scope.bag_mut(), &request, client);
    let decided = match scope.check(Wants::Verdict, "forward-auth").await {
        Ok(checked) => {
            let (snapshot, bag) = scope.parts();
            crate::check_quota::charged(snapshot, bag, checked, "forward-auth").await
        }
        Err(e) => Err(e),
    };
    drop(scope);
    match decided {
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
        // setting decides (nginx turns an auth_request 5xx into 500 for the client): 503
        // when a handler failed closed, 500 when an instance could not be built (Istio's
        // INTERNAL).
        Err(e) => {
            let status = match e {
                Undecided::Handler { .. } => StatusCode::SERVICE_UNAVAILABLE,
                Undecided::Instance(_) => StatusCode::INTERNAL_SERVER_ERROR,
            };
            (status, format!("{e}\n")).into_response()
        }
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
