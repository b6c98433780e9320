//! Envoy external authorization: `envoy.service.auth.v3.Authorization/Check`, the gRPC
//! service Envoy's `ext_authz` filter (HTTP or network) calls before letting a request through.
//!
//! Served by the mixer's gRPC server straight from its encoded message
//! ([`ExtAuthz::answer_encoded`], registered by [`crate::grpc::unary_methods`]):
//!
//! ```no_run
//! # async fn run(runtime: std::sync::Arc<mixer_runtime::Runtime>) -> std::io::Result<()> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9091").await?;
//! let routes = mixer_frontends::grpc::routes(&runtime);
//! mixer_grpc::Server::new(mixer_frontends::grpc::unary_methods(&runtime), routes.routes())
//!     .serve(listener, std::future::pending())
//!     .await
//! # }
//! ```
//!
//! ## From `AttributeContext` to attributes
//!
//! | attribute | taken from |
//! |---|---|
//! | `source.ip`, `source.port` | `source.address.socket_address` (`address`, `port_value`); pipes have neither |
//! | `source.principal`, `source.labels`, `source.service` | `source.principal`, `source.labels`, `source.service`, when not empty |
//! | `source.namespace` | the `ns` segment of a SPIFFE principal `spiffe://<domain>/ns/<ns>/sa/<sa>` |
//! | `destination.ip`, `destination.port`, `destination.principal`, `destination.labels`, `destination.service`, `destination.namespace` | the same fields of `destination` |
//! | `connection.mtls` | true when `source` carries a principal or a certificate (Envoy verified a client certificate); always set |
//! | `connection.requested_server_name` | `tls_session.sni` (sent only with `include_tls_session`) |
//! | `request.id` | `request.http.id`, else the `x-request-id` header |
//! | `request.method` | `request.http.method`, else `:method` |
//! | `request.path` | `request.http.path` (path and query as sent), else `:path` |
//! | `request.url_path`, `request.query_params` | `request.path` split at `?` (`a=1&b` gives `{a: "1", b: ""}`; a repeated name keeps its first value) |
//! | `request.host` | `request.http.host`, else `:authority` / `host` |
//! | `destination.service.host` | `request.host` without its port |
//! | `request.scheme` | `request.http.scheme`, else `:scheme` |
//! | `request.headers` | `request.http.headers` (names lower-cased); when empty, the raw `header_map` (`encode_raw_headers`), repeated names joined with `,` |
//! | `request.useragent`, `request.referer` | the `user-agent` and `referer` headers |
//! | `request.size` | `request.http.size`, unless -1 (unknown) |
//! | `request.time` | `request.time`, else the mixer's clock (not set without a request: network filter) |
//! | `context.time` | the mixer's clock |
//! | `context.protocol` | `grpc` when `content-type` starts with `application/grpc`, else `http` (HTTP/1.0, 1.1, 2 and 3 alike); `tcp` when there is no HTTP request (network filter) |
//! | `context.extensions` | `context_extensions` (per-route settings of the filter) |
//! | `context.metadata`, `context.route_metadata` | `metadata_context` / `route_metadata_context`: `filter_metadata` flattened to one string map, key `<filter>.<field>[.<nested>]`, value as text (numbers and booleans printed, lists joined with `,`). Not in the standard vocabulary: declare them as `STRING_MAP` in an `attributemanifest` to use them in rules. `typed_filter_metadata` (`Any`) is not read. |
//!
//! Not mapped: the request body (`body`, `raw_body`; buffering it is Envoy's `with_request_body`
//! and no standard attribute holds it) and peer certificates beyond their presence.
//!
//! ## Answers
//!
//! | mixer outcome | `CheckResponse` |
//! |---|---|
//! | allowed | `status` OK; `ok_response`: `headers` from the rules' request header operations (REPLACE overwrites, APPEND appends), `headers_to_remove` from REMOVE, `response_headers_to_add` from response header operations |
//! | denied | `status` = the verdict's code and message; `denied_response`: HTTP 401 for UNAUTHENTICATED, 429 for RESOURCE_EXHAUSTED, 403 otherwise; body = the message; `headers` from response header operations |
//! | a quota a matching rule charges is exhausted (one unit per allowed check, deduplicated by `request.id`; [`mixer_runtime::check_with_quota`]) | denied with RESOURCE_EXHAUSTED: HTTP 429 with `Retry-After`, `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` |
//! | both | `dynamic_metadata`: `matched_rules` (list of the matched rules' names), `cache_hit` (bool), `cache_tier` (`shared` when the replicas' shared cache answered; absent otherwise), `status` (the code name), `denied_by` (the denying handler's full name, on a denial a handler gave), `dry_run` (a struct of each matched dry-run rule's full name to its would-be verdict, `allow`, `deny` or `error`; only when one matched) |
//! | could not decide (a handler failed closed), or no valid config yet | gRPC error UNAVAILABLE, so that Envoy's `failure_mode_allow` decides |
//! | an instance cannot be built from the request (a field reads an absent attribute) | gRPC error INTERNAL naming it, as Istio 1.4; Envoy's `failure_mode_allow` decides alike |

mod attributes;
mod encode;
mod names;
mod respond;
mod wire;

use std::sync::Arc;

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::address::Address as AddressKind;
use envoy_types::pb::envoy::config::core::v3::socket_address::PortSpecifier;
use envoy_types::pb::envoy::config::core::v3::{Address, SocketAddress};
use envoy_types::pb::envoy::service::auth::v3::attribute_context::Peer;
use envoy_types::pb::envoy::service::auth::v3::{CheckRequest, CheckResponse};
use mixer_model::{AttributeBag, Timestamp};
use mixer_runtime::{Checked, DecisionId, Runtime, Wants};
use tracing::Instrument;

use crate::request_scope::RequestScope;
use respond::could_not_decide;

pub use attributes::{
    METADATA_ATTRIBUTE, ROUTE_METADATA_ATTRIBUTE, bag_from_request, fill_bag, fill_bag_from_wire,
};
pub use encode::{framed_check_response, framed_check_response_with_id};
pub use respond::{check_response, check_response_with_id, http_status, metadata_keys};
pub use wire::WireError;

/// A peer at a socket address with a principal, as Envoy describes the source or destination
/// of a request: for clients, benchmarks and load generators that build requests.
pub fn socket_peer(ip: &str, port: u32, principal: &str) -> Peer {
    Peer {
        address: Some(Address {
            address: Some(AddressKind::SocketAddress(SocketAddress {
                address: ip.to_string(),
                port_specifier: Some(PortSpecifier::PortValue(port)),
                ..Default::default()
            })),
        }),
        principal: principal.to_string(),
        ..Default::default()
    }
}

/// The ext_authz Check over a runtime.
#[derive(Clone)]
pub struct ExtAuthz {
    runtime: Arc<Runtime>,
}

impl ExtAuthz {
    /// A service deciding with `runtime`'s active snapshot.
    pub fn new(runtime: Arc<Runtime>) -> ExtAuthz {
        ExtAuthz { runtime }
    }

    /// Decides one request: the whole path from `CheckRequest` to `CheckResponse`, without
    /// the transport (for benchmarks and the load generator).
    pub async fn decide(&self, request: &CheckRequest) -> Result<CheckResponse, tonic::Status> {
        let scope = self.filled(|bag, now| {
            fill_bag(bag, request, now);
            Ok(())
        })?;
        let id = scope.decision_id();
        let checked = checked(scope).instrument(request_span(id)).await?;
        Ok(check_response_with_id(&checked, Some(id)))
    }

    /// Answers one encoded `CheckRequest` (the gRPC method's message) with the gRPC frame of
    /// its `CheckResponse`, reading the request where it lies and writing the answer
    /// straight to its frame, without the decoded messages in between.
    pub fn answer_encoded(
        &self,
        message: &[u8],
    ) -> impl Future<Output = Result<Bytes, tonic::Status>> + Send + 'static {
        let filled = self.filled(|bag, now| {
            fill_bag_from_wire(bag, message, now).map_err(|e| {
                tonic::Status::internal(format!("the request message does not decode: {e}"))
            })
        });
        async move {
            let scope = filled?;
            let id = scope.decision_id();
            let checked = checked(scope).instrument(request_span(id)).await?;
            Ok(framed_check_response_with_id(&checked, Some(id)))
        }
    }

    /// The request's scope with its bag filled by `fill`, which runs before any await so
    /// that it may borrow the request.
    fn filled(
        &self,
        fill: impl FnOnce(&mut AttributeBag, Timestamp) -> Result<(), tonic::Status>,
    ) -> Result<RequestScope, tonic::Status> {
        // No valid config yet: we cannot decide, which is not the same as "deny".
        let mut scope = RequestScope::begin(&self.runtime).map_err(could_not_decide)?;
        fill(scope.bag_mut(), Timestamp::now())?;
        Ok(scope)
    }
}

/// The span of one request: every log line about it carries its decision id.
fn request_span(id: DecisionId) -> tracing::Span {
    tracing::info_span!("request", decision_id = %id, protocol = "ext_authz")
}

async fn checked(mut scope: RequestScope) -> Result<Checked, tonic::Status> {
    // Quota rules that match are charged once the check allows
    // ([`mixer_runtime::check_with_quota`]): over a limit, a denial Envoy answers with 429.
    let checked = scope
        .check_with_quota(Wants::Verdict, "ext_authz")
        .await
        .map(crate::ratelimit::respond::with_rate_limit_headers);
    // A handler failed closed. Answer a gRPC error (UNAVAILABLE), NOT a denial: Envoy treats
    // an error as a failed call and applies `failure_mode_allow`.
    checked.map_err(could_not_decide)
}

impl std::fmt::Debug for ExtAuthz {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExtAuthz").finish_non_exhaustive()
    }
}
