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
//! copies them upstream with `auth_request_set`) and cache hints ([`cache_hints`]); 403, 401 or 429 deny, after the verdict's
//! code. Quota rules that match the request are charged one unit once the check allows it
//! (see [`mixer_runtime::check_with_quota`]): over a limit the answer is 429 with `Retry-After`,
//! `X-RateLimit-*` and the IETF draft's `RateLimit-Limit`, `RateLimit-Remaining` and
//! `RateLimit-Reset`; a 200 that a quota counted carries the draft's three as well (the limit,
//! what is left, whole seconds until the counter is full again). 503 when the mixer could not
//! decide (a handler failed closed, or no config yet), 500 when an instance cannot be built
//! from the request. Every answer carries the decision's id in `x-mixer-decision-id` (see the
//! decision log).

mod attributes;
mod cache_hints;
mod client_address;
mod respond;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderName, HeaderValue};
use axum::response::Response;
use mixer_runtime::{DECISION_ID_HEADER, DecisionId, Runtime, Wants, with_current_decision};

use crate::request_scope::RequestScope;
use respond::{check_response, could_not_decide};

pub use attributes::fill_bag;
pub use client_address::{ClientAddress, RealIpHeader, TrustedProxies};
pub use respond::http_status;

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
    let scope = match RequestScope::begin(&endpoint.runtime) {
        Ok(scope) => scope,
        Err(not_ready) => {
            return with_decision_id(could_not_decide(not_ready), DecisionId::next());
        }
    };
    let id = scope.decision_id();
    with_current_decision(id, decide(endpoint, scope, request)).await
}

/// Decides the request of `scope`, as its current decision (so that every log line about it
/// carries its decision id).
async fn decide(endpoint: Endpoint, mut scope: RequestScope, request: Request) -> Response {
    let id = scope.decision_id();
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
    // Read in full: dropped now rather than held in this future across the check.
    drop(request);
    let decided = scope
        .check_with_quota(Wants::Verdict, "forward-auth")
        .await
        .map(crate::ratelimit::respond::with_draft_rate_limit_headers);
    let response = match decided {
        Ok((checked, rate_limit)) => {
            let mut response = check_response(&checked);
            cache_hints::add(response.headers_mut(), &checked.verdict, scope.parts().0);
            for (name, value) in rate_limit {
                if let Ok(value) = HeaderValue::from_str(&value) {
                    response.headers_mut().insert(name, value);
                }
            }
            response
        }
        Err(e) => could_not_decide(e),
    };
    drop(scope);
    tracing::debug!(status = response.status().as_u16(), "forward-auth answered");
    with_decision_id(response, id)
}

/// `response` with the decision's id in `x-mixer-decision-id`, whatever it answers, so that a
/// user can quote it and an operator find the decision's record.
fn with_decision_id(mut response: Response, id: DecisionId) -> Response {
    // Every answer carries it: the hex digits go straight into the value, and the name is a
    // constant, rather than a `String` formatted and a name looked up per request (#36).
    const NAME: HeaderName = HeaderName::from_static(DECISION_ID_HEADER);
    if let Ok(value) = HeaderValue::from_bytes(&id.to_hex()) {
        response.headers_mut().insert(NAME, value);
    }
    response
}
