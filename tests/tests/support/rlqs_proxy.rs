//! A simulated Envoy proxy for the RLQS tests: a client on Envoy's own `rate_limit_quota`
//! protos (from `envoy-types`) that behaves as Envoy's `envoy.filters.http.rate_limit_quota`
//! filter documents it: per-bucket counters of allowed and denied requests, a usage report
//! every reporting interval on one long-lived stream, assignments applied until their time
//! to live runs out (kept across a reconnection, as the filter keeps its buckets), and
//! allow-all when it has no assignment (its `no_assignment_behavior`) or when one expired
//! (its `expired_assignment_behavior`). Requests are counted, not sent: a proxy that wants
//! `rps` requests a second admits `min(rps, assigned)` of them and denies the rest.
#![allow(dead_code)]

use std::collections::HashMap;
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
use tokio::sync::mpsc;

/// The reporting interval: 300 ms rather than a second, to keep the tests short; the
/// service's shares do not depend on the interval, only on the rates reported.
pub const INTERVAL: Duration = Duration::from_millis(300);

pub fn bucket(name: &str) -> BucketId {
    BucketId {
        bucket: [("name".to_string(), name.to_string())].into(),
    }
}

/// What the proxy holds for one bucket: an assignment until it expires.
#[derive(Clone, Debug)]
pub struct Assignment {
    /// `None`: allow all; `Some(0)` would be a zero rate.
    pub per_second: Option<u64>,
    pub deny_all: bool,
    pub expires: Instant,
}

/// Everything the service sent to one stream, as the filter keeps it.
#[derive(Debug, Default)]
pub struct Received {
    pub assignments: HashMap<String, Assignment>,
    pub answers: usize,
    pub first_answer: Option<Instant>,
    pub deny_all_seen: bool,
    pub zero_rate_seen: bool,
    pub ended: Option<String>,
}

pub fn apply(received: &Mutex<Received>, answer: RateLimitQuotaResponse) {
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
pub struct Proxy {
    /// Its id (`x-rlqs-proxy-id`).
    pub id: String,
    pub reports: mpsc::Sender<RateLimitQuotaUsageReports>,
    pub received: Arc<Mutex<Received>>,
    /// Requests a second it is asked for, per bucket.
    pub wants: Vec<(String, u64)>,
    pub last_report: Instant,
}

impl Proxy {
    pub async fn connect(addr: std::net::SocketAddr, id: &str, wants: &[(&str, u64)]) -> Proxy {
        let mut proxy = Proxy {
            id: id.to_string(),
            reports: mpsc::channel(1).0,
            received: Arc::new(Mutex::new(Received::default())),
            wants: wants.iter().map(|(b, n)| (b.to_string(), *n)).collect(),
            last_report: Instant::now(),
        };
        proxy.open(addr, true).await;
        proxy
    }

    /// Opens a new stream to `addr` (the filter does when its stream ends), keeping the
    /// assignments it holds; its first report is the one due, over the time since the last.
    pub async fn reconnect(&mut self, addr: std::net::SocketAddr) {
        self.open(addr, false).await;
    }

    /// Opens its stream; the first report of a new proxy names each bucket with one request,
    /// sent as it arrived.
    async fn open(&mut self, addr: std::net::SocketAddr, new: bool) {
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
            .insert("x-rlqs-proxy-id", self.id.parse().expect("ascii id"));
        self.reports = tx;
        self.received.lock().expect("lock").ended = None;
        let received = self.received.clone();
        if new {
            self.send(1, Duration::ZERO).await;
        } else {
            self.report().await;
        }
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
    }

    /// Whether its stream has ended.
    pub fn ended(&self) -> bool {
        self.received.lock().expect("lock").ended.is_some()
    }

    /// Sends a report of `requests` per bucket over `elapsed`, split by the assignments held.
    pub async fn send(&self, scale: u64, elapsed: Duration) {
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
            // A stream that ended: the caller sees it in `ended`.
            .ok();
    }

    /// The report due every interval.
    pub async fn report(&mut self) {
        let now = Instant::now();
        let elapsed = now - self.last_report;
        self.last_report = now;
        self.send(0, elapsed).await;
    }

    pub fn rate(&self, name: &str) -> Option<u64> {
        let r = self.received.lock().expect("lock");
        r.assignments
            .get(name)
            .filter(|a| a.expires > Instant::now())
            .and_then(|a| a.per_second)
    }
}

/// Sends one report from every proxy, `intervals` times, an interval apart.
pub async fn run_intervals(proxies: &mut [Proxy], intervals: u32) {
    for _ in 0..intervals {
        tokio::time::sleep(INTERVAL).await;
        for p in proxies.iter_mut() {
            p.report().await;
        }
    }
    // Let the answers to the last reports arrive.
    tokio::time::sleep(Duration::from_millis(100)).await;
}
