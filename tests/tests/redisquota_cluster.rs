//! redisquota on a real three-node Redis Cluster: three mixer replicas count one rate limit
//! exactly across them, for tenants whose counters land on different nodes.

#[path = "support/tenant_limits.rs"]
mod tenant_limits;

use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use mixer_tests::Mixer;
use mixer_tests::redis::redis_installed;
use tenant_limits::{tenant_limits, tenant_request};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_is_counted_exactly_across_replicas_on_a_cluster() {
    if !redis_installed() {
        return;
    }
    let cluster = mixer_tests::redis_cluster::RedisCluster::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let config = dir.path().join("config.yaml");
    // The call budget is far above its default: a busy machine must not fail a call open.
    std::fs::write(
        &config,
        tenant_limits(
            "fleet",
            &format!(r#"redisServerUrl: "{}", callTimeout: 2s"#, cluster.url()),
            "day",
            5,
        ),
    )
    .expect("write config");
    let path = config.to_str().expect("utf-8").to_string();
    let replicas: Vec<Mixer> = (0..3)
        .map(|_| {
            Mixer::start(
                std::path::Path::new(env!("CARGO_BIN_EXE_mixer-under-test")),
                &["--config", &path, "--worker-threads", "1"],
            )
        })
        .collect();
    let mut clients = Vec::new();
    for r in &replicas {
        r.wait_ready(Duration::from_secs(20));
        clients.push(
            RateLimitServiceClient::connect(format!("http://{}", r.grpc))
                .await
                .expect("connect"),
        );
    }
    let tenants: Vec<String> = (0..6).map(|i| format!("tenant-{i}")).collect();
    for tenant in &tenants {
        let mut ok = 0;
        for i in 0..8 {
            let answer = clients[i % 3]
                .should_rate_limit(tenant_request("fleet", &[tenant]))
                .await
                .expect("answered")
                .into_inner();
            if answer.overall_code == Code::Ok as i32 {
                ok += 1;
            } else {
                assert_eq!(answer.overall_code, Code::OverLimit as i32);
            }
        }
        assert_eq!(ok, 5, "{tenant}: 5 a day, counted over the three replicas");
    }
    let per_node = cluster.keys_per_node();
    assert!(
        per_node.iter().filter(|&&n| n > 0).count() >= 2,
        "counters did not spread over the nodes: {per_node:?}"
    );
}
