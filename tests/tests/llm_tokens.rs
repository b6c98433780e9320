//! Quota charged from reports, end to end with real processes: the `policies/llm-tokens`
//! bundle as shipped (memquota), and the same limit on a real Redis shared by two replicas.
//!
//! An OpenAI-style upstream answered with `usage.total_tokens: 150` and put it in the
//! `x-usage-tokens` response header; Envoy's access log service (a client generated from
//! Envoy's protos, envoy-types) reports the entry; forward-auth (and RLS, on Redis) checks the
//! next request: the 1st and 2nd are admitted, the 3rd refused with 429 (OVER_LIMIT on RLS).
//! The same usage reported as an OTLP log record (`http.response.header.x-usage-tokens`) is
//! charged the same way.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::data::accesslog::v3::{
    HttpAccessLogEntry, HttpRequestProperties, HttpResponseProperties,
};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::accesslog::v3::StreamAccessLogsMessage;
use envoy_types::pb::envoy::service::accesslog::v3::access_log_service_client::AccessLogServiceClient;
use envoy_types::pb::envoy::service::accesslog::v3::stream_access_logs_message::{
    HttpAccessLogEntries, Identifier, LogEntries,
};
use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::google::protobuf::UInt32Value;
use mixer_tests::poll::until;
use mixer_tests::redis::{Redis, redis_installed};
use mixer_tests::{Mixer, http_request};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_client::LogsServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};

#[path = "support/authz.rs"]
mod authz;
use authz::authz_request;

fn bundle() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/llm-tokens/config")
}

fn mixer_binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mixer-under-test"))
}

fn wait_ready(mixer: &Mixer) {
    let start = Instant::now();
    while !matches!(
        http_request(mixer.admin, "GET", "/readyz", &[]),
        Ok((200, _, _))
    ) {
        assert!(start.elapsed() < Duration::from_secs(20), "mixer not ready");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Forward-auth's answer for a request of `user`.
fn forward_auth(mixer: &Mixer, user: &str) -> u16 {
    let headers = [
        ("X-Forwarded-Uri", "/v1/chat/completions"),
        ("X-Forwarded-Method", "POST"),
        ("x-user", user),
    ];
    http_request(mixer.http, "GET", "/check", &headers)
        .expect("forward-auth answers")
        .0
}

/// Waits (at most `limit`) until forward-auth answers `status` for `user`; how long it took.
fn until_status(mixer: &Mixer, user: &str, status: u16, limit: Duration) -> Duration {
    until(limit, Duration::from_millis(20), || {
        match forward_auth(mixer, user) {
            got if got == status => Ok(()),
            got => Err(format!(
                "forward-auth still answers {got} for {user}, not {status}"
            )),
        }
    })
    .1
}

/// One access log entry of a completed request of `user` whose response carried
/// `x-usage-tokens: tokens`.
fn entry(user: &str, request_id: &str, tokens: &str) -> HttpAccessLogEntry {
    HttpAccessLogEntry {
        request: Some(HttpRequestProperties {
            path: "/v1/chat/completions".into(),
            request_id: request_id.into(),
            request_headers: [
                ("x-user".to_string(), user.to_string()),
                ("x-request-id".to_string(), request_id.to_string()),
            ]
            .into(),
            ..Default::default()
        }),
        response: Some(HttpResponseProperties {
            response_code: Some(UInt32Value { value: 200 }),
            response_headers: [("x-usage-tokens".to_string(), tokens.to_string())].into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Sends `entries` on one access log stream, as Envoy's ALS client does.
async fn report(grpc: SocketAddr, entries: Vec<HttpAccessLogEntry>) {
    let message = StreamAccessLogsMessage {
        identifier: Some(Identifier {
            node: Some(Node {
                id: "router~10.0.0.9~gateway.llm~llm.svc.cluster.local".into(),
                ..Default::default()
            }),
            log_name: "als".into(),
        }),
        log_entries: Some(LogEntries::HttpLogs(HttpAccessLogEntries {
            log_entry: entries,
        })),
    };
    let mut als = AccessLogServiceClient::connect(format!("http://{grpc}"))
        .await
        .expect("connect");
    als.stream_access_logs(tonic::codegen::tokio_stream::iter(vec![message]))
        .await
        .expect("access log stream");
}

/// Exports one OTLP log record of a completed request of `user` that used `tokens`, with the
/// headers as OpenTelemetry's HTTP semantic conventions name them.
async fn report_otlp(grpc: SocketAddr, user: &str, request_id: &str, tokens: &str) {
    let text = |key: &str, value: &str| KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..Default::default()
    };
    let record = LogRecord {
        attributes: vec![
            text("http.request.method", "POST"),
            text("http.request.header.x-user", user),
            text("http.request.header.x-request-id", request_id),
            text("http.response.header.x-usage-tokens", tokens),
        ],
        ..Default::default()
    };
    let request = ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            scope_logs: vec![ScopeLogs {
                log_records: vec![record],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    LogsServiceClient::connect(format!("http://{grpc}"))
        .await
        .expect("connect")
        .export(request)
        .await
        .expect("logs exported");
}

/// A series' value on the mixer's `/metrics` (0 when absent).
fn metric(admin: SocketAddr, prefix: &str, parts: &[&str]) -> f64 {
    let (_, _, body) = http_request(admin, "GET", "/metrics", &[]).expect("metrics");
    body.lines()
        .filter(|l| l.starts_with(prefix) && parts.iter().all(|p| l.contains(p)))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bundle_charges_access_log_usage_and_forward_auth_refuses_once_exhausted() {
    let config = bundle();
    let mixer = Mixer::start(
        mixer_binary(),
        &["--config", config.to_str().expect("utf-8")],
    );
    let m = &mixer;
    tokio::task::block_in_place(|| wait_ready(m));

    // 1st request: nothing used yet. Checks charge nothing, so asking again changes nothing.
    for _ in 0..3 {
        assert_eq!(forward_auth(&mixer, "alice"), 200);
    }
    report(mixer.grpc, vec![entry("alice", "req-1", "150")]).await;
    // The same record delivered twice (a retried stream) is charged once.
    report(mixer.grpc, vec![entry("alice", "req-1", "150")]).await;
    // Reports are queued and delivered in batches; the charge must be visible well before
    // the contract's 3 s.
    let deadline = Instant::now() + Duration::from_secs(3);
    tokio::task::block_in_place(|| {
        while metric(m.admin, "mixer_report_delivered_total", &["llm-tokens"]) < 2.0 {
            assert!(Instant::now() < deadline, "the charge was not counted");
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    // 2nd request: 150 tokens left.
    assert_eq!(forward_auth(&mixer, "alice"), 200);
    report(mixer.grpc, vec![entry("alice", "req-2", "150")]).await;
    // 3rd request: nothing left, refused before it runs.
    let took =
        tokio::task::block_in_place(|| until_status(m, "alice", 429, Duration::from_secs(3)));
    assert!(took <= Duration::from_secs(3), "seen after {took:?}");
    // Another user is not affected; bad usage values are dropped and counted, never refunded.
    assert_eq!(forward_auth(&mixer, "bob"), 200);
    report(
        mixer.grpc,
        vec![
            entry("alice", "req-3", "-300"),
            entry("alice", "req-4", "1.5"),
            entry("alice", "req-5", "99999999999999999999"),
        ],
    )
    .await;
    tokio::task::block_in_place(|| {
        let deadline = Instant::now() + Duration::from_secs(3);
        while metric(
            m.admin,
            "mixer_report_dropped_total",
            &[r#"reason="invalid_charge""#],
        ) < 3.0
        {
            assert!(Instant::now() < deadline, "bad charges not counted");
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    assert_eq!(forward_auth(&mixer, "alice"), 429);

    // The same usage over OTLP logs: 150 and 150 of gina's 300, then refused.
    assert_eq!(forward_auth(&mixer, "gina"), 200);
    report_otlp(mixer.grpc, "gina", "g-1", "150").await;
    report_otlp(mixer.grpc, "gina", "g-2", "150").await;
    tokio::task::block_in_place(|| until_status(m, "gina", 429, Duration::from_secs(3)));

    // ext_authz reads the same counters: RESOURCE_EXHAUSTED for an exhausted user, OK for
    // one with tokens left.
    assert_eq!(
        ext_authz_code(mixer.grpc, "gina").await,
        8,
        "RESOURCE_EXHAUSTED"
    );
    assert_eq!(ext_authz_code(mixer.grpc, "bob").await, 0, "OK");
}

/// The gRPC status code of an ext_authz check for `user` (the `x-user` header).
async fn ext_authz_code(grpc: SocketAddr, user: &str) -> i32 {
    let mut client = AuthorizationClient::connect(format!("http://{grpc}"))
        .await
        .expect("connect");
    let answer = client
        .check(authz_request(&[("x-user", user)]))
        .await
        .expect("ext_authz answer")
        .into_inner();
    answer.status.map_or(0, |s| s.code)
}

/// The same limit in Redis, with a 2 s window so that the test sees it reset, and a rule for
/// Envoy's rate limit service reading the same counter (the descriptor entry `user`).
fn redis_config(port: u16) -> String {
    format!(
        r#"
kind: handler
metadata: {{name: llm-tokens, namespace: istio-system}}
spec:
  compiledAdapter: redisquota
  params:
    redisServerUrl: "127.0.0.1:{port}"
    callTimeout: 2s
    quotas:
    - name: llm-tokens.instance.istio-system
      maxAmount: 300
      validDuration: 2s
      rateLimitAlgorithm: FIXED_WINDOW
---
kind: instance
metadata: {{name: llm-tokens, namespace: istio-system}}
spec:
  compiledTemplate: quota
  params:
    dimensions:
      user: request.headers["x-user"] | ratelimit.descriptor["user"]
    charge: response.headers["x-usage-tokens"] | "0"
    deduplicationId: request.headers["x-request-id"] | ""
---
kind: rule
metadata: {{name: llm-tokens, namespace: istio-system}}
spec:
  match: (request.headers["x-user"] | ratelimit.descriptor["user"] | "") != ""
  actions:
  - handler: llm-tokens
    instances: [llm-tokens]
"#
    )
}

async fn rate_limit(grpc: SocketAddr, user: &str) -> Code {
    let mut client = RateLimitServiceClient::connect(format!("http://{grpc}"))
        .await
        .expect("connect");
    let response = client
        .should_rate_limit(RateLimitRequest {
            domain: "llm".into(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: "user".into(),
                    value: user.into(),
                }],
                ..Default::default()
            }],
            hits_addend: 1,
        })
        .await
        .expect("rate limit answer")
        .into_inner();
    Code::try_from(response.overall_code).expect("a known code")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charge_on_one_replica_is_seen_by_the_other_through_redis() {
    if !redis_installed() {
        return;
    }
    let mut redis = Redis::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("llm.yaml");
    std::fs::write(&config, redis_config(redis.port)).expect("write config");
    let args = [
        "--config",
        config.to_str().expect("utf-8"),
        "--report-max-age",
        "3s",
    ];
    let a = Mixer::start(mixer_binary(), &args);
    let b = Mixer::start(mixer_binary(), &args);
    tokio::task::block_in_place(|| {
        wait_ready(&a);
        wait_ready(&b);
    });

    // Charged on A, checked on B: seen within 1 s.
    assert_eq!(forward_auth(&b, "carol"), 200);
    report(a.grpc, vec![entry("carol", "c-1", "150")]).await;
    assert_eq!(forward_auth(&b, "carol"), 200, "150 tokens are left");
    report(a.grpc, vec![entry("carol", "c-2", "150")]).await;
    let seen =
        tokio::task::block_in_place(|| until_status(&b, "carol", 429, Duration::from_secs(1)));
    assert!(seen <= Duration::from_secs(1), "seen after {seen:?}");
    assert_eq!(rate_limit(b.grpc, "carol").await, Code::OverLimit);
    assert_eq!(rate_limit(a.grpc, "dave").await, Code::Ok);
    // The 2 s window ends and the user is admitted again.
    tokio::task::block_in_place(|| until_status(&b, "carol", 200, Duration::from_secs(4)));

    // Redis down: the charge waits in A's report queue and is retried once Redis is back.
    redis.kill();
    report(a.grpc, vec![entry("erin", "e-1", "300")]).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    redis.restart();
    tokio::task::block_in_place(|| until_status(&b, "erin", 429, Duration::from_secs(3)));

    // Down for longer than --report-max-age: dropped and counted as such.
    redis.kill();
    report(a.grpc, vec![entry("frank", "f-1", "300")]).await;
    tokio::task::block_in_place(|| {
        let deadline = Instant::now() + Duration::from_secs(8);
        while metric(
            a.admin,
            "mixer_report_dropped_total",
            &[r#"reason="max_age""#],
        ) < 1.0
        {
            assert!(
                Instant::now() < deadline,
                "the failed charge was not dropped"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    });
}
