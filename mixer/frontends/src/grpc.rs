//! The front ends' unary gRPC methods, served straight from their implementations by
//! [`mixer_grpc`]; the streaming access log service, health and unknown paths stay with
//! tonic's routes.

use std::sync::Arc;

use bytes::Bytes;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use mixer_grpc::{Methods, unary};
use mixer_proto::istio::mixer::v1::mixer_server::Mixer;
use mixer_runtime::Runtime;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::LogsService;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceService;

use crate::ext_authz::ExtAuthz;
use crate::mixer_v1::MixerV1;
use crate::otlp::Otlp;
use crate::ratelimit::RateLimit;

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

/// The paths served directly.
pub const PATHS: [&str; 6] = [
    EXT_AUTHZ_CHECK,
    MIXER_CHECK,
    MIXER_REPORT,
    SHOULD_RATE_LIMIT,
    OTLP_LOGS,
    OTLP_TRACES,
];

/// Envoy's ext_authz Check, Mixer v1 Check and Report, Envoy's ShouldRateLimit and OTLP's
/// logs and traces Export, each deciding with `runtime`.
pub fn unary_methods(runtime: &Arc<Runtime>) -> Methods {
    let [authz, mixer_check, mixer_report, rate_limit, logs, traces] = PATHS;
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
        unary(mixer, |s, r| async move { Mixer::report(&s, r).await }),
    );
    methods.add(
        rate_limit,
        unary(RateLimit::new(runtime.clone()), |s, r| async move {
            RateLimitService::should_rate_limit(&s, r).await
        }),
    );
    let otlp = Otlp::new(runtime.clone());
    methods.add(
        logs,
        unary(otlp.clone(), |s, r| async move {
            LogsService::export(&s, r).await
        }),
    );
    methods.add(
        traces,
        unary(
            otlp,
            |s, r| async move { TraceService::export(&s, r).await },
        ),
    );
    methods
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::server::NamedService;

    /// A path that named no real method would only fall back to tonic, slower: each must be
    /// `/<generated service name>/<method>`.
    #[test]
    fn every_path_names_a_generated_service() {
        use envoy_types::pb::envoy::service::auth::v3::authorization_server::AuthorizationServer;
        use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
        use mixer_proto::istio::mixer::v1::mixer_server::MixerServer;
        use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::LogsServiceServer;
        use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceServiceServer;
        let expected = [
            format!("/{}/Check", AuthorizationServer::<ExtAuthz>::NAME),
            format!("/{}/Check", MixerServer::<MixerV1>::NAME),
            format!("/{}/Report", MixerServer::<MixerV1>::NAME),
            format!(
                "/{}/ShouldRateLimit",
                RateLimitServiceServer::<RateLimit>::NAME
            ),
            format!("/{}/Export", LogsServiceServer::<Otlp>::NAME),
            format!("/{}/Export", TraceServiceServer::<Otlp>::NAME),
        ];
        assert_eq!(PATHS.map(String::from), expected);
    }
}
