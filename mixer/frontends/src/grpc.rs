//! What the mixer's gRPC port serves, each path once: the unary methods straight from their
//! implementations ([`unary_methods`], served by [`mixer_grpc`] without tonic's layers), and
//! tonic's [`routes`] for the streaming methods (Envoy's access log and rate limit quota
//! streams). The server adds health to the routes; any other path gets UNIMPLEMENTED naming
//! the method.
//!
//! ```no_run
//! # async fn run(runtime: std::sync::Arc<mixer_runtime::Runtime>) -> std::io::Result<()> {
//! use mixer_frontends::grpc;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:9091").await?;
//! mixer_grpc::Server::new(grpc::unary_methods(&runtime), grpc::routes(&runtime).routes())
//!     .streaming_requests([grpc::ACCESS_LOG_STREAM])
//!     .serve(listener, std::future::pending())
//!     .await
//! # }
//! ```

use std::sync::Arc;

use bytes::Bytes;
use mixer_grpc::{Methods, unary};
use mixer_runtime::Runtime;

use crate::ext_authz::ExtAuthz;
use crate::mixer_v1::MixerV1;
use crate::otlp::Otlp;
use crate::ratelimit::RateLimit;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use prost::Message as _;

/// What a unary method answers: the response message's bytes, or the call's status.
type Answer =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Bytes, tonic::Status>> + Send>>;

/// Envoy's ext_authz Check.
pub const EXT_AUTHZ_CHECK: &str = "/envoy.service.auth.v3.Authorization/Check";
/// Mixer v1 Check.
pub const MIXER_CHECK: &str = "/istio.mixer.v1.Mixer/Check";
/// Mixer v1 Report.
pub const MIXER_REPORT: &str = "/istio.mixer.v1.Mixer/Report";
/// Envoy's rate limit service.
pub const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
/// OTLP logs.
pub const OTLP_LOGS: &str = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";
/// OTLP traces.
pub const OTLP_TRACES: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
/// OTLP metrics.
pub const OTLP_METRICS: &str = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export";

/// Envoy's access log stream, the one client-streaming method (served by [`routes`]).
pub const ACCESS_LOG_STREAM: &str = "/envoy.service.accesslog.v3.AccessLogService/StreamAccessLogs";

/// Envoy's rate limit quota service stream, bidirectional (served by [`routes`]).
pub const RLQS_STREAM: &str =
    "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas";

/// The paths served directly.
pub const PATHS: [&str; 7] = [
    EXT_AUTHZ_CHECK,
    MIXER_CHECK,
    MIXER_REPORT,
    SHOULD_RATE_LIMIT,
    OTLP_LOGS,
    OTLP_TRACES,
    OTLP_METRICS,
];

/// Envoy's ext_authz Check, Mixer v1 Check and Report, Envoy's ShouldRateLimit and OTLP's
/// logs, traces and metrics Export, each deciding with `runtime`.
pub fn unary_methods(runtime: &Arc<Runtime>) -> Methods {
    let [
        authz,
        mixer_check,
        mixer_report,
        rate_limit,
        logs,
        traces,
        otlp_metrics,
    ] = PATHS;
    let mut methods = Methods::new();
    // ext_authz reads its request where it lies and writes its answer straight to its frame
    // rather than through the generated messages, which would be built only to be mapped
    // or encoded and dropped.
    let ext_authz = ExtAuthz::new(runtime.clone());
    methods.add(
        authz,
        Arc::new(move |message: Bytes| Box::pin(ext_authz.answer_encoded(&message))),
    );
    // Mixer v1 Check reads its request in place too (the response is still a generated
    // message).
    let mixer = MixerV1::new(runtime.clone());
    let check = mixer.clone();
    methods.add(
        mixer_check,
        Arc::new(move |message: Bytes| Box::pin(check.check_encoded(message))),
    );
    methods.add(
        mixer_report,
        unary(mixer, |s, r| async move {
            s.report(r.into_inner()).await.map(tonic::Response::new)
        }),
    );
    // Rate limit requests have their descriptors counted on the wire before prost builds
    // them: one over the limits costs a pass over its bytes. The answer is written straight
    // to its frame, as ext_authz's is.
    let rate_limiter = RateLimit::new(runtime.clone());
    let limits_of = runtime.clone();
    methods.add(
        rate_limit,
        Arc::new(move |message: Bytes| -> Answer {
            if let Err(status) =
                crate::ratelimit::check_encoded_limits(&message, limits_of.limits())
            {
                return Box::pin(std::future::ready(Err(status)));
            }
            let request = match RateLimitRequest::decode(message) {
                Ok(r) => r,
                Err(e) => {
                    let status = tonic::Status::internal(format!(
                        "the request message does not decode: {e}"
                    ));
                    return Box::pin(std::future::ready(Err(status)));
                }
            };
            let service = rate_limiter.clone();
            Box::pin(async move { service.decide_encoded(&request).await })
        }),
    );
    let otlp = Otlp::new(runtime.clone());
    methods.add(
        logs,
        unary(otlp.clone(), |s, r| async move {
            s.answer_logs(r.into_inner())
                .await
                .map(tonic::Response::new)
        }),
    );
    methods.add(
        traces,
        unary(otlp.clone(), |s, r| async move {
            s.answer_traces(r.into_inner())
                .await
                .map(tonic::Response::new)
        }),
    );
    methods.add(
        otlp_metrics,
        unary(otlp, |s, r| async move {
            s.answer_metrics(r.into_inner())
                .await
                .map(tonic::Response::new)
        }),
    );
    methods
}

/// tonic's routes for what [`unary_methods`] does not serve: Envoy's access log stream
/// ([`ACCESS_LOG_STREAM`]) and rate limit quota stream ([`RLQS_STREAM`]). The server adds its health service.
pub fn routes(runtime: &Arc<Runtime>) -> tonic::service::RoutesBuilder {
    routes_with(runtime, crate::rlqs::Rlqs::new(runtime.clone()))
}

/// [`routes`] with this RLQS service (its demands in Redis, say).
pub fn routes_with(
    runtime: &Arc<Runtime>,
    rlqs: crate::rlqs::Rlqs,
) -> tonic::service::RoutesBuilder {
    let mut routes = tonic::service::RoutesBuilder::default();
    routes.add_service(crate::access_log::service(runtime.clone()));
    routes.add_service(rlqs.into_service());
    routes
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path that named no real method would only be answered UNIMPLEMENTED: each must be
    /// `/<generated service name>/<method>`.
    #[test]
    fn every_path_names_a_generated_service() {
        use envoy_types::pb::envoy::service::accesslog::v3::access_log_service_server as access_log;
        use envoy_types::pb::envoy::service::auth::v3::authorization_server as authorization;
        use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server as rlqs;
        use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server as rate_limit;
        use mixer_proto::istio::mixer::v1::mixer_server as mixer;
        use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server as logs;
        use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server as metrics;
        use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server as trace;
        let expected = [
            format!("/{}/Check", authorization::SERVICE_NAME),
            format!("/{}/Check", mixer::SERVICE_NAME),
            format!("/{}/Report", mixer::SERVICE_NAME),
            format!("/{}/ShouldRateLimit", rate_limit::SERVICE_NAME),
            format!("/{}/Export", logs::SERVICE_NAME),
            format!("/{}/Export", trace::SERVICE_NAME),
            format!("/{}/Export", metrics::SERVICE_NAME),
        ];
        assert_eq!(PATHS.map(String::from), expected);
        assert_eq!(
            ACCESS_LOG_STREAM,
            format!("/{}/StreamAccessLogs", access_log::SERVICE_NAME)
        );
        assert_eq!(
            RLQS_STREAM,
            format!("/{}/StreamRateLimitQuotas", rlqs::SERVICE_NAME)
        );
    }
}
