//! The rate limit quota service (RLQS) through the real mixer process serving
//! `policies/rlqs` (300 requests a second for the bucket `{name: shared}` of domain `rlqs`).
//!
//! No Envoy binary is installed here: each proxy is `rlqs_proxy::Proxy`, a client on Envoy's
//! own `rate_limit_quota` protos that behaves as the filter documents (see
//! `support/rlqs_proxy.rs`).

use std::path::Path;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::rate_limit_quota::v3::RateLimitQuotaUsageReports;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use mixer_tests::Mixer;

#[path = "support/rlqs_proxy.rs"]
mod rlqs_proxy;
use rlqs_proxy::{Proxy, bucket, run_intervals};

fn start_mixer() -> Mixer {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/rlqs/config");
    let binary = Path::new(env!("CARGO_BIN_EXE_mixer-under-test"));
    let mixer = Mixer::start(binary, &["--config", config.to_str().expect("utf-8")]);
    mixer.wait_ready(Duration::from_secs(20));
    mixer
}

/// The contract of issue #37: the first answer within 5 s; three proxies each wanting 200 a
/// second share 300 after 4 intervals (sum <= 315, each >= 60); a bucket no config names
/// never gets DENY_ALL or a zero rate, and its stream stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_proxies_share_the_global_limit() {
    let mixer = start_mixer();
    let opened = Instant::now();
    let mut proxies = Vec::new();
    for id in ["proxy-a", "proxy-b", "proxy-c"] {
        proxies.push(Proxy::connect(mixer.grpc, id, &[("shared", 200)]).await);
    }
    // A fourth proxy reports a bucket no config names.
    proxies.push(Proxy::connect(mixer.grpc, "proxy-unknown", &[("nobody-names-this", 50)]).await);
    run_intervals(&mut proxies, 4).await;

    let shares: Vec<u64> = proxies[..3]
        .iter()
        .map(|p| {
            p.rate("shared")
                .expect("every proxy holds a live assignment")
        })
        .collect();
    let sum: u64 = shares.iter().sum();
    assert!(sum <= 315, "assignments add up to {sum}: {shares:?}");
    assert!(shares.iter().all(|s| *s >= 60), "{shares:?}");
    // Every stream's first report is answered, the unknown bucket's too (with no action).
    for p in &proxies {
        let r = p.received.lock().expect("lock");
        let first = r.first_answer.expect("answered");
        assert!(
            first - opened < Duration::from_secs(5),
            "first answer after {:?}",
            first - opened
        );
        assert!(!r.deny_all_seen && !r.zero_rate_seen, "{r:?}");
    }

    // The unknown bucket's proxy: nothing was assigned (its own no-assignment behaviour
    // decides), and its stream is still open: a bucket with a limit is answered on it.
    let unknown = &mut proxies[3];
    {
        let r = unknown.received.lock().expect("lock");
        assert!(!r.deny_all_seen && !r.zero_rate_seen, "{r:?}");
        assert!(!r.assignments.contains_key("nobody-names-this"), "{r:?}");
        assert_eq!(r.ended, None);
    }
    unknown.wants.push(("shared".into(), 10));
    run_intervals(std::slice::from_mut(unknown), 1).await;
    assert!(unknown.rate("shared").is_some_and(|r| r > 0));
    assert!(unknown.rate("nobody-names-this").is_none());
    // The proxies close their streams, so the mixer stops without waiting for them.
    drop(proxies);
    mixer.terminate();
}

/// Uneven load (one proxy wants five times what each other wants): the sum stays at the
/// limit, each proxy gets at least its fair share, and a proxy whose demand drops releases
/// its share within 2 intervals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uneven_load_and_a_demand_that_drops() {
    let mixer = start_mixer();
    let mut proxies = Vec::new();
    for (id, rps) in [("heavy", 500), ("light-1", 100), ("light-2", 100)] {
        proxies.push(Proxy::connect(mixer.grpc, id, &[("shared", rps)]).await);
    }
    run_intervals(&mut proxies, 3).await;
    let shares: Vec<u64> = proxies
        .iter()
        .map(|p| p.rate("shared").expect("held"))
        .collect();
    let sum: u64 = shares.iter().sum();
    assert!((285..=315).contains(&sum), "{shares:?}");
    assert!(
        shares.iter().all(|s| *s >= 95),
        "each gets its fair share: {shares:?}"
    );

    // The light proxies go quiet: within 2 intervals the heavy one holds most of the limit.
    for p in &mut proxies[1..] {
        p.wants[0].1 = 1;
    }
    run_intervals(&mut proxies, 2).await;
    let heavy = proxies[0].rate("shared").expect("held");
    assert!(heavy >= 230, "the heavy proxy got {heavy}");
    let sum: u64 = proxies
        .iter()
        .map(|p| p.rate("shared").expect("held"))
        .sum();
    assert!(sum <= 315, "{sum}");
    drop(proxies);
    mixer.terminate();
}

/// Bad input on one stream (absurd counts, thousands of buckets per report, buckets no config
/// names, reports as fast as it can send them) is answered and bounded, another stream is
/// unaffected, and streams that come and go with such reports leave the mixer's memory flat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_reports_do_not_disturb_other_streams() {
    let mixer = start_mixer();
    let mut good = vec![Proxy::connect(mixer.grpc, "good", &[("shared", 100)]).await];
    let abuser = Proxy::connect(mixer.grpc, "abuser", &[("shared", 1)]).await;
    let flood = tokio::spawn(async move {
        let many: Vec<BucketQuotaUsage> = (0..5000)
            .map(|i| BucketQuotaUsage {
                bucket_id: Some(bucket(&format!("b{i}"))),
                time_elapsed: Some(ProtoDuration {
                    seconds: -1,
                    nanos: -5,
                }),
                num_requests_allowed: u64::MAX,
                num_requests_denied: u64::MAX,
            })
            .collect();
        let start = Instant::now();
        let mut sent = 0u32;
        while start.elapsed() < Duration::from_secs(1) && sent < 2000 {
            let usages = if sent.is_multiple_of(100) {
                many.clone()
            } else {
                vec![BucketQuotaUsage {
                    bucket_id: Some(bucket("shared")),
                    time_elapsed: None,
                    num_requests_allowed: u64::MAX,
                    num_requests_denied: u64::MAX,
                }]
            };
            let report = RateLimitQuotaUsageReports {
                domain: "rlqs".into(),
                bucket_quota_usages: usages,
            };
            if abuser.reports.send(report).await.is_err() {
                break;
            }
            sent += 1;
        }
        abuser
    });
    run_intervals(&mut good, 3).await;
    let abuser = flood.await.expect("flood task");
    let good_share = good[0].rate("shared").expect("the good stream is answered");
    assert!(good_share >= 15, "{good_share}");
    {
        let r = abuser.received.lock().expect("lock");
        assert!(r.answers > 0 && r.ended.is_none(), "{r:?}");
        assert!(!r.deny_all_seen && !r.zero_rate_seen, "{r:?}");
    }
    let share = abuser.rate("shared").expect("the abuser is answered too");
    assert!(share <= 300, "{share}");
    assert!(good[0].received.lock().expect("lock").ended.is_none());
    drop(abuser);

    // Memory stays flat: streams that come and go, each reporting thousands of buckets no
    // config names, leave nothing behind. One round first, so that the allocator's pools
    // exist before the measure.
    churn(mixer.grpc, 0..5).await;
    let before = rss_kib(mixer.pid());
    churn(mixer.grpc, 5..35).await;
    let after = rss_kib(mixer.pid());
    assert!(
        after < before + 4 * 1024,
        "the mixer's RSS went from {before} KiB to {after} KiB"
    );
    run_intervals(&mut good, 1).await;
    assert!(good[0].rate("shared").is_some_and(|r| r >= 15));
    assert!(good[0].received.lock().expect("lock").ended.is_none());
    drop(good);
    mixer.terminate();
}

/// Streams `ids`, one after the other: each reports `shared` and 4,999 buckets no config
/// names, waits for its answer and goes away.
async fn churn(addr: std::net::SocketAddr, ids: std::ops::Range<u32>) {
    let usages: Vec<BucketQuotaUsage> = std::iter::once("shared".to_string())
        .chain((1..5000).map(|i| format!("unknown-{i}")))
        .map(|name| BucketQuotaUsage {
            bucket_id: Some(bucket(&name)),
            time_elapsed: Some(ProtoDuration {
                seconds: 1,
                nanos: 0,
            }),
            num_requests_allowed: u64::MAX,
            num_requests_denied: 0,
        })
        .collect();
    for i in ids {
        let proxy = Proxy::connect(addr, &format!("churn-{i}"), &[]).await;
        let report = RateLimitQuotaUsageReports {
            domain: "rlqs".into(),
            bucket_quota_usages: usages.clone(),
        };
        proxy.reports.send(report).await.expect("stream open");
        let start = Instant::now();
        while proxy.received.lock().expect("lock").answers < 2 {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "a churning stream was not answered"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// The resident memory of process `pid`, in KiB (`VmRSS`).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// A stream that never reports is closed by the body timeout (`--body-read-timeout`), while
/// one that reported stays open past it, as Envoy keeps its stream between reports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_stream_is_closed_and_a_reporting_one_stays_open() {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/rlqs/config");
    let binary = Path::new(env!("CARGO_BIN_EXE_mixer-under-test"));
    let mixer = Mixer::start(
        binary,
        &[
            "--config",
            config.to_str().expect("utf-8"),
            "--body-read-timeout",
            "1s",
        ],
    );
    mixer.wait_ready(Duration::from_secs(20));
    let mut reporting = vec![Proxy::connect(mixer.grpc, "reporting", &[("shared", 10)]).await];

    let mut client = RateLimitQuotaServiceClient::connect(format!("http://{}", mixer.grpc))
        .await
        .expect("connect");
    let silent = futures_util::stream::pending::<RateLimitQuotaUsageReports>();
    let started = Instant::now();
    let status = match tokio::time::timeout(
        Duration::from_secs(5),
        client.stream_rate_limit_quotas(silent),
    )
    .await
    .expect("the silent stream is answered within 5 s")
    {
        Ok(mut answers) => answers
            .get_mut()
            .message()
            .await
            .expect_err("the silent stream ends with an error"),
        Err(status) => status,
    };
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    assert!(started.elapsed() < Duration::from_secs(5));

    // Past the body timeout, the reporting proxy's stream still answers.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    run_intervals(&mut reporting, 1).await;
    let r = reporting[0].received.lock().expect("lock");
    assert!(r.ended.is_none() && r.answers >= 2, "{r:?}");
    drop(r);
    drop(reporting);
    mixer.terminate();
}

/// `mixer test` runs `variety: rlqs` cases (policies/rlqs has some), and says what a wrong
/// expectation got instead.
#[test]
fn mixer_test_checks_rlqs_assignments() {
    let binary = Path::new(env!("CARGO_BIN_EXE_mixer-under-test"));
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = std::process::Command::new(binary)
        .arg("test")
        .arg(repo.join("policies/rlqs"))
        .output()
        .expect("run mixer test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("hold 100 each"), "{stdout}");

    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("wrong_test.yaml"),
        format!(
            "config: {}\ntests:\n- name: expects an unknown bucket to be denied\n  variety: rlqs\n  domain: rlqs\n  reports:\n  - {{proxy: a, usages: [{{bucket: {{name: other}}, allowed: 5}}, {{bucket: {{name: shared}}, allowed: 5}}]}}\n  expect:\n    assignments:\n    - {{bucket: {{name: other}}, blanketRule: DENY_ALL}}\n",
            repo.join("policies/rlqs/config").display()
        ),
    )
    .expect("write test file");
    let out = std::process::Command::new(binary)
        .arg("test")
        .arg(dir.path())
        .output()
        .expect("run mixer test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(r#"assignments: expected [({"name": "other"}, "DENY_ALL")], got [({"name": "shared"}, "300/SECOND")]"#),
        "{stdout}"
    );
}
