//! envoyproxy/ratelimit's statistics through the real mixer process: `policies/envoy-ratelimit`
//! served, `/metrics` has the series its Prometheus mapping names, per descriptor key path;
//! and rate limit calls through the gRPC listener move them as envoyproxy/ratelimit's own
//! tests say they move.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use mixer_tests::{Mixer, http_request};
use tonic::transport::Channel;

/// One limit per case of `TestNearLimit` (envoyproxy/ratelimit, test/redis/fixed_cache_impl_test.go),
/// each with the case's `requests_per_unit`. Units are hours (upstream's cases use seconds
/// for some): the statistics do not depend on the unit, and an hour cannot end mid-test.
const UPSTREAM_CASES: &str = r#"
domain: upstream
descriptors:
  - {key: key4, rate_limit: {unit: hour, requests_per_unit: 15}}
  - {key: key5, rate_limit: {unit: hour, requests_per_unit: 20}}
  - {key: key6, rate_limit: {unit: hour, requests_per_unit: 8}}
  - {key: key7, rate_limit: {unit: hour, requests_per_unit: 20}}
  - {key: key8, rate_limit: {unit: hour, requests_per_unit: 20}}
  - {key: key9, rate_limit: {unit: hour, requests_per_unit: 20}}
"#;

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
}

fn wait_ready(admin: SocketAddr) {
    let start = Instant::now();
    while !matches!(http_request(admin, "GET", "/readyz", &[]), Ok((200, _, _))) {
        assert!(start.elapsed() < Duration::from_secs(10), "mixer not ready");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn metrics(admin: SocketAddr) -> String {
    let (status, _, body) = http_request(admin, "GET", "/metrics", &[]).expect("metrics");
    assert_eq!(status, 200);
    body
}

fn value(body: &str, series: &str) -> Option<u64> {
    body.lines().find_map(|l| {
        l.strip_prefix(series)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    })
}

fn request(domain: &str, entries: &[(&str, &str)], hits: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors: vec![RateLimitDescriptor {
            entries: entries
                .iter()
                .map(|(k, v)| Entry {
                    key: (*k).into(),
                    value: (*v).into(),
                })
                .collect(),
            ..Default::default()
        }],
        hits_addend: hits,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoyproxy_ratelimit_statistics_are_on_metrics() {
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = workspace().join("policies/envoy-ratelimit/config");
    for entry in std::fs::read_dir(&policy).expect("policy folder") {
        let path = entry.expect("entry").path();
        std::fs::copy(&path, dir.path().join(path.file_name().expect("name"))).expect("copy");
    }
    std::fs::write(dir.path().join("upstream.yaml"), UPSTREAM_CASES).expect("write");
    let binary = Path::new(env!("CARGO_BIN_EXE_mixer-under-test"));
    let mixer = Mixer::start(binary, &["--config", dir.path().to_str().expect("utf-8")]);
    let admin = mixer.admin;
    tokio::task::spawn_blocking(move || wait_ready(admin))
        .await
        .expect("join");

    // The contract: with policies/envoy-ratelimit served, every counted descriptor key path
    // has its series before any call, named as envoyproxy/ratelimit's mapping names them
    // (one level: domain and key1; deeper: domain, key1 and key2).
    let body = metrics(admin);
    for labels in [
        r#"{domain="mongo_cps",key1="database_users"}"#,
        r#"{domain="mongo_cps",key1="database_default"}"#,
        r#"{domain="rl",key1="category_account"}"#,
        r#"{domain="rl",key1="source_cluster_proxy",key2="destination_cluster_bkthomps"}"#,
        r#"{domain="rl",key1="foo"}"#,
        r#"{domain="rl",key1="foo",key2="bar_bkthomps"}"#,
        r#"{domain="rl",key1="foo",key2="baz_shady"}"#,
        r#"{domain="rl",key1="service_service_1"}"#,
    ] {
        for statistic in ["total_hits", "over_limit", "near_limit", "within_limit"] {
            let series = format!("ratelimit_service_rate_limit_{statistic}{labels}");
            assert_eq!(value(&body, &series), Some(0), "{series} in\n{body}");
        }
    }
    assert_eq!(
        value(
            &body,
            r#"ratelimit_service_rate_limit_shadow_mode{domain="rl",key1="foo",key2="baz_shady"}"#
        ),
        Some(0)
    );

    let mut client: RateLimitServiceClient<Channel> =
        RateLimitServiceClient::connect(format!("http://{}", mixer.grpc))
            .await
            .expect("connect");
    // TestNearLimit's cases, each (key, hits_addend, counter after the call as its mocked
    // Redis answers, [total_hits, over_limit, near_limit, within_limit] that call adds). The
    // counter is brought to `after - hits` first with one call; what the case's call adds
    // is then read off /metrics as a difference.
    let cases: [(&str, u32, u32, [u64; 4]); 8] = [
        ("key4", 1, 11, [1, 0, 0, 1]),
        ("key4", 1, 13, [1, 0, 1, 1]),
        ("key4", 1, 16, [1, 1, 0, 0]),
        ("key5", 3, 5, [3, 0, 0, 3]),
        ("key6", 2, 7, [2, 0, 1, 2]),
        ("key7", 3, 19, [3, 0, 3, 3]),
        ("key8", 3, 22, [3, 2, 1, 0]),
        ("key9", 7, 22, [7, 2, 4, 0]),
    ];
    let mut counter = std::collections::HashMap::new();
    for (key, hits, after, expected) in cases {
        let at: &mut u32 = counter.entry(key).or_default();
        let fill = after - hits - *at;
        if fill > 0 {
            client
                .should_rate_limit(request("upstream", &[(key, "v")], fill))
                .await
                .expect("answer");
            *at += fill;
        }
        let read = |body: &str| {
            ["total_hits", "over_limit", "near_limit", "within_limit"].map(|s| {
                let series = format!(
                    r#"ratelimit_service_rate_limit_{s}{{domain="upstream",key1="{key}"}}"#
                );
                value(body, &series).unwrap_or_else(|| panic!("{series} in\n{body}"))
            })
        };
        let before = read(&metrics(admin));
        client
            .should_rate_limit(request("upstream", &[(key, "v")], hits))
            .await
            .expect("answer");
        let now = read(&metrics(admin));
        let added: Vec<u64> = now.iter().zip(before).map(|(n, b)| n - b).collect();
        assert_eq!(added, expected, "{key}: {hits} hits to {after}");
        // A refused call leaves the counter where it was.
        if expected[1] == 0 {
            *at += hits;
        }
    }

    // A value the config does not name counts under its key-only entry: one series for any
    // number of values (rl's `foo` allows 2 a minute).
    for value_sent in ["a", "b", "c"] {
        client
            .should_rate_limit(request("rl", &[("foo", value_sent)], 1))
            .await
            .expect("answer");
    }
    let body = metrics(admin);
    assert_eq!(
        value(
            &body,
            r#"ratelimit_service_rate_limit_total_hits{domain="rl",key1="foo"}"#
        ),
        Some(3)
    );
    assert!(!body.contains(r#"key1="foo_a""#), "{body}");
    mixer.terminate();
}

/// A limit counted with `detailed_metric` and one without, for `--near-limit-ratio` and
/// `detailed_metric` as envoyproxy/ratelimit applies them (its settings' `NEAR_LIMIT_RATIO`,
/// its config_impl.go's detailed stats key `domain.key_value`).
const TUNED: &str = r#"
domain: tuned
descriptors:
  - {key: plain, rate_limit: {unit: hour, requests_per_unit: 10}}
  - {key: detailed, detailed_metric: true, rate_limit: {unit: hour, requests_per_unit: 10}}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn near_limit_ratio_and_detailed_metric_as_configured() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("tuned.yaml"), TUNED).expect("write");
    let binary = Path::new(env!("CARGO_BIN_EXE_mixer-under-test"));
    let config = dir.path().to_str().expect("utf-8");
    let mixer = Mixer::start(binary, &["--config", config, "--near-limit-ratio", "0.5"]);
    let admin = mixer.admin;
    tokio::task::spawn_blocking(move || wait_ready(admin))
        .await
        .expect("join");
    let mut client: RateLimitServiceClient<Channel> =
        RateLimitServiceClient::connect(format!("http://{}", mixer.grpc))
            .await
            .expect("connect");
    let series = |statistic: &str, key1: &str| {
        format!(r#"ratelimit_service_rate_limit_{statistic}{{domain="tuned",key1="{key1}"}}"#)
    };

    // 6 hits of 10 at ratio 0.5: the one past 5 is near the limit (at 0.8, none would be).
    client
        .should_rate_limit(request("tuned", &[("plain", "v")], 6))
        .await
        .expect("answer");
    let body = metrics(admin);
    assert_eq!(
        value(&body, &series("near_limit", "plain")),
        Some(1),
        "{body}"
    );
    assert_eq!(
        value(&body, &series("within_limit", "plain")),
        Some(6),
        "{body}"
    );

    // detailed_metric: a series per request value, up to the bound; further values are
    // counted under the limit's own key, so a client cannot grow /metrics without bound.
    // The bound the README documents (100 values per limit).
    let bound = 100;
    for i in 0..bound {
        let hits = if i == 0 { 2 } else { 1 };
        client
            .should_rate_limit(request("tuned", &[("detailed", &format!("v{i}"))], hits))
            .await
            .expect("answer");
    }
    client
        .should_rate_limit(request("tuned", &[("detailed", "one-too-many")], 1))
        .await
        .expect("answer");
    let body = metrics(admin);
    assert_eq!(
        value(&body, &series("total_hits", "detailed_v0")),
        Some(2),
        "{body}"
    );
    let last = format!("detailed_v{}", bound - 1);
    assert_eq!(
        value(&body, &series("total_hits", &last)),
        Some(1),
        "{body}"
    );
    assert_eq!(
        value(&body, &series("total_hits", "detailed")),
        Some(1),
        "{body}"
    );
    assert!(!body.contains("one-too-many"), "{body}");
    // The limit without detailed_metric never names a value.
    assert!(!body.contains(r#"key1="plain_v""#), "{body}");
    mixer.terminate();
}
