//! gRPC server reflection on `mixer serve`'s gRPC listener, as `grpcurl -plaintext ADDR list`
//! asks it (Debian has no `grpcurl` package, so the client is built from the upstream
//! reflection proto): both protocol versions list every service the listener serves.

use std::path::Path;
use std::time::{Duration, Instant};

use mixer_tests::Mixer;

#[macro_use]
#[path = "support/reflection.rs"]
mod reflection;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_v1_and_v1alpha_list_every_service() {
    let mixer = Mixer::start(Path::new(env!("CARGO_BIN_EXE_mixer-under-test")), &[]);
    let admin = mixer.admin;
    let ready = tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok((200, _, _)) = mixer_tests::http_request(admin, "GET", "/readyz", &[]) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    });
    assert!(ready.await.expect("join"), "not ready");

    // Every service the listener routes, the streaming ones (access log, RLQS) included.
    let served = [
        "envoy.service.accesslog.v3.AccessLogService",
        "envoy.service.auth.v3.Authorization",
        "envoy.service.ratelimit.v3.RateLimitService",
        "envoy.service.rate_limit_quota.v3.RateLimitQuotaService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
        "istio.mixer.v1.Mixer",
        "opentelemetry.proto.collector.logs.v1.LogsService",
        "opentelemetry.proto.collector.metrics.v1.MetricsService",
        "opentelemetry.proto.collector.trace.v1.TraceService",
    ];
    let v1 = reflected_services!(v1, mixer.grpc);
    let v1alpha = reflected_services!(v1alpha, mixer.grpc);
    for service in served {
        assert!(
            v1.iter().any(|s| s == service),
            "v1 lists {v1:?}, not {service}"
        );
    }
    assert_eq!(v1alpha, v1, "both versions list the same services");
    mixer.terminate();
}
