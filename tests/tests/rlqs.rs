//! The rate limit quota service (RLQS) through the real mixer process serving
//! `policies/rlqs` (300 requests a second for the bucket `{name: shared}` of domain `rlqs`).
//!
//! No Envoy binary is installed here: each proxy is [`Proxy`], a client on Envoy's own
//! `rate_limit_quota` protos (from `envoy-types`) that behaves as Envoy's
//! `envoy.filters.http.rate_limit_quota` filter documents it: per-bucket counters of allowed
//! and denied requests, a usage report every reporting interval on one long-lived stream,
//! assignments applied until their time to live runs out, and allow-all when it has no
//! assignment (its `no_assignment_behavior`) or when one expired (its
//! `expired_assignment_behavior`). Requests are counted, not sent: a proxy that wants `rps`
//! requests a second admits `min(rps, assigned)` of them and denies the rest.
//!
//! The reporting interval is 300 ms rather than a second, to keep the test short; the
//! service's shares do not depend on the interval, only on the rates reported.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Action;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use futures_util::StreamExt;
use mixer_tests::Mixer;
use tokio::sync::mpsc;

const INTERVAL: Duration = Duration::from_millis(300);

fn start_mixer() -> Mixer {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/rlqs/config");
    let binary = Path::new(env!("CARGO_BIN_EXE_mixer-under-test"));
    let mixer = Mixer::start(binary, &["--config", config.to_str().expect("utf-8")]);
    mixer.wait_ready(Duration::from_secs(20));
    mixer
}

fn bucket(name: &str) -> BucketId {
    BucketId {
        bucket: [("name".to_string(), name.to_string())].into(),
    }
}

/// What the proxy holds for one bucket: an assignment until it expires.
#[derive(Clone, Debug)]
struct Assignment {
    /// `None`: allow all; `Some(0)` would be a zero rate.
    per_second: Option<u64>,
    deny_all: bool,
    expires: Instant,
}

/// Everything the service sent to one stream, as the filter keeps it.
#[derive(Debug, Default)]
struct Received {
    assignments: HashMap<String, Assignment>,
    answers: usize,
    first_answer: Option<Instant>,
    deny_all_seen: bool,
    zero_rate_seen: bool,
    ended: Option<String>,
}

fn apply(received: &Mutex<Received>, answer: RateLimitQuotaResponse) {
    let now = Instant::now();
    let mut r = received.lock().expect("lock");
    r.answers += 1;
    r.first_answer.get_or_insert(now);
    for action in answer.bucket_action {
        let name = action
            .bucket_id
            .and_then(|b| b.bucket.get("name").cloned())
            .unwrap_or_default();
        match action.bucket_action {
            Some(Action::QuotaAssignmentAction(q)) => {
                let ttl = q.assignment_time_to_live.expect("an assignment has a TTL");
                let ttl = Duration::new(ttl.seconds as u64, ttl.nanos as u32);
                let strategy = q.rate_limit_strategy.and_then(|s| s.strategy);
                let (per_second, deny_all) = match strategy {
                    Some(Strategy::RequestsPerTimeUnit(rate)) => {
                        assert_eq!(rate.time_unit, RateLimitUnit::Second as i32);
                        r.zero_rate_seen |= rate.requests_per_time_unit == 0;
                        (Some(rate.requests_per_time_unit), false)
                    }
                    Some(Strategy::BlanketRule(b)) => (None, b == BlanketRule::DenyAll as i32),
                    other => panic!("unexpected strategy {other:?}"),
                };
                r.deny_all_seen |= deny_all;
                r.assignments.insert(
                    name,
                    Assignment {
                        per_second,
                        deny_all,
                        expires: now + ttl,
                    },
                );
            }
            Some(Action::AbandonAction(_)) => {
                r.assignments.remove(&name);
            }
            None => {}
        }
    }
}

/// One simulated proxy: its stream to the mixer and what it received.
struct Proxy {
    reports: mpsc::Sender<RateLimitQuotaUsageReports>,
    received: Arc<Mutex<Received>>,
    /// Requests a second it is asked for, per bucket.
    wants: Vec<(String, u64)>,
    last_report: Instant,
}

impl Proxy {
    async fn connect(addr: std::net::SocketAddr, id: &str, wants: &[(&str, u64)]) -> Proxy {
        let mut client = RateLimitQuotaServiceClient::connect(format!("http://{addr}"))
            .await
            .expect("connect");
        let (tx, rx) = mpsc::channel::<RateLimitQuotaUsageReports>(16);
        let outbound =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|m| (m, rx)) },
            );
        let mut request = tonic::Request::new(outbound);
        request
            .metadata_mut()
            .insert("x-rlqs-proxy-id", id.parse().expect("ascii id"));
        let received = Arc::new(Mutex::new(Received::default()));
        let proxy = Proxy {
            reports: tx,
            received: received.clone(),
            wants: wants.iter().map(|(b, n)| (b.to_string(), *n)).collect(),
            last_report: Instant::now(),
        };
        // The filter's first report: one request of each bucket, sent as it arrived.
        proxy.send(1, Duration::ZERO).await;
        let mut answers = client
            .stream_rate_limit_quotas(request)
            .await
            .expect("stream opens")
            .into_inner();
        tokio::spawn(async move {
            loop {
                match answers.next().await {
                    Some(Ok(answer)) => apply(&received, answer),
                    Some(Err(status)) => {
                        received.lock().expect("lock").ended = Some(status.to_string());
                        return;
                    }
                    None => {
                        received.lock().expect("lock").ended = Some("closed".into());
                        return;
                    }
                }
            }
        });
        proxy
    }

    /// Sends a report of `requests` per bucket over `elapsed`, split by the assignments held.
    async fn send(&self, scale: u64, elapsed: Duration) {
        let now = Instant::now();
        let usages = self
            .wants
            .iter()
            .map(|(name, rps)| {
                let asked = if elapsed.is_zero() {
                    scale
                } else {
                    (*rps as f64 * elapsed.as_secs_f64()).round() as u64
                };
                let held = self
                    .received
                    .lock()
                    .expect("lock")
                    .assignments
                    .get(name)
                    .filter(|a| a.expires > now)
                    .cloned();
                let admitted = match held {
                    Some(a) if a.deny_all => 0,
                    Some(Assignment {
                        per_second: Some(rate),
                        ..
                    }) => asked.min((rate as f64 * elapsed.as_secs_f64()).round() as u64),
                    // No assignment, or an expired one: allow all.
                    _ => asked,
                };
                BucketQuotaUsage {
                    bucket_id: Some(bucket(name)),
                    time_elapsed: Some(ProtoDuration {
                        seconds: elapsed.as_secs() as i64,
                        nanos: elapsed.subsec_nanos() as i32,
                    }),
                    num_requests_allowed: admitted,
                    num_requests_denied: asked - admitted,
                }
            })
            .collect();
        self.reports
            .send(RateLimitQuotaUsageReports {
                domain: "rlqs".into(),
                bucket_quota_usages: usages,
            })
            .await
            .expect("stream open");
    }

    /// The report due every interval.
    async fn report(&mut self) {
        let now = Instant::now();
        let elapsed = now - self.last_report;
        self.last_report = now;
        self.send(0, elapsed).await;
    }

    fn rate(&self, name: &str) -> Option<u64> {
        let r = self.received.lock().expect("lock");
        r.assignments
            .get(name)
            .filter(|a| a.expires > Instant::now())
            .and_then(|a| a.per_second)
    }
}

/// Sends one report from every proxy, `intervals` times, an interval apart.
async fn run_intervals(proxies: &mut [Proxy], intervals: u32) {
    for _ in 0..intervals {
        tokio::time::sleep(INTERVAL).await;
        for p in proxies.iter_mut() {
            p.report().await;
        }
    }
    // Let the answers to the last reports arrive.
    tokio::time::sleep(Duration::from_millis(100)).await;
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

/// Bad input on one stream (absurd counts, thousands of buckets per report, reports as fast
/// as it can send them) is answered and bounded, and another stream is unaffected.
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
    drop((good, abuser));
    mixer.terminate();
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
