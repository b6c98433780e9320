//! The RLQS front end's answers, report by report, on a runtime with `policies/rlqs`'s limit
//! (300 a second for the bucket `{name: shared}` of domain `rlqs`) and a few more.

use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use envoy_types::pb::envoy::r#type::v3::rate_limit_strategy::{BlanketRule, Strategy};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_response::bucket_action::BucketAction as Action;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    BucketId, RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use mixer_config::{AdapterRegistry, ConfigOptions, SourceFile};
use mixer_runtime::{ConfigOrigin, Runtime, RuntimeMetrics, RuntimeOptions};

use super::*;

const LIMITS: &str = r#"
kind: ratelimitconfig
metadata: {name: rlqs, namespace: istio-system}
spec:
  domain: rlqs
  descriptors:
  - key: name
    value: shared
    rate_limit: {unit: second, requests_per_unit: 300}
  - key: name
    value: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: name
    value: free
    rate_limit: {unlimited: true}
  - key: name
    value: hourly
    rate_limit: {unit: hour, requests_per_unit: 3600}
"#;

fn runtime_at(origin: ConfigOrigin) -> Arc<Runtime> {
    let mut registry = AdapterRegistry::new();
    registry.register(Arc::new(mixer_adapter_memquota::MemQuota));
    let runtime = Runtime::new(
        origin,
        registry,
        ConfigOptions::default(),
        RuntimeOptions::default(),
        RuntimeMetrics::unregistered(),
    );
    runtime.reload().expect("test config loads");
    Arc::new(runtime)
}

fn service() -> Rlqs {
    Rlqs::new(runtime_at(ConfigOrigin::Embedded(vec![SourceFile::new(
        "rlqs.yaml",
        LIMITS,
    )])))
}

fn bucket(name: &str) -> BucketId {
    BucketId {
        bucket: [("name".to_string(), name.to_string())].into(),
    }
}

fn usage(name: &str, allowed: u64, denied: u64, elapsed: Duration) -> BucketQuotaUsage {
    BucketQuotaUsage {
        bucket_id: Some(bucket(name)),
        time_elapsed: Some(ProtoDuration {
            seconds: elapsed.as_secs() as i64,
            nanos: elapsed.subsec_nanos() as i32,
        }),
        num_requests_allowed: allowed,
        num_requests_denied: denied,
    }
}

fn report(usages: Vec<BucketQuotaUsage>) -> RateLimitQuotaUsageReports {
    RateLimitQuotaUsageReports {
        domain: "rlqs".to_string(),
        bucket_quota_usages: usages,
    }
}

/// Every action's strategy, by bucket name.
fn strategies(answer: &RateLimitQuotaResponse) -> Vec<(String, Option<Strategy>)> {
    answer
        .bucket_action
        .iter()
        .map(|a| {
            let name = a.bucket_id.as_ref().expect("bucket id").bucket["name"].clone();
            let strategy = match &a.bucket_action {
                Some(Action::QuotaAssignmentAction(q)) => {
                    assert!(
                        q.assignment_time_to_live.is_some(),
                        "every assignment has a TTL"
                    );
                    q.rate_limit_strategy.as_ref().and_then(|s| s.strategy)
                }
                _ => None,
            };
            (name, strategy)
        })
        .collect()
}

fn per_second(answer: &RateLimitQuotaResponse) -> u64 {
    match strategies(answer).as_slice() {
        [(_, Some(Strategy::RequestsPerTimeUnit(r)))] => {
            assert_eq!(r.time_unit, RateLimitUnit::Second as i32);
            r.requests_per_time_unit
        }
        other => panic!("one requests_per_time_unit assignment expected, got {other:?}"),
    }
}

#[tokio::test]
async fn three_proxies_wanting_200_each_share_300() {
    let rlqs = service();
    let mut proxies: Vec<ReportStream> = ["a", "b", "c"].map(|p| rlqs.open(Some(p))).into();
    let t0 = Instant::now();
    let mut last = vec![0; 3];
    for interval in 0..4u32 {
        let now = t0 + Duration::from_secs(u64::from(interval));
        for (i, proxy) in proxies.iter_mut().enumerate() {
            // Each proxy was asked 200 times in the last second, whatever it admitted.
            let allowed = last[i].min(200);
            let answer = proxy
                .answer(
                    &report(vec![usage(
                        "shared",
                        allowed,
                        200 - allowed,
                        Duration::from_secs(1),
                    )]),
                    now,
                )
                .await
                .expect("a limited bucket is answered");
            last[i] = per_second(&answer);
        }
    }
    let sum: u64 = last.iter().sum();
    assert!(sum <= 315, "{last:?}");
    assert!(last.iter().all(|s| *s >= 60), "{last:?}");
}

#[tokio::test]
async fn a_proxy_whose_demand_drops_releases_its_share() {
    let rlqs = service();
    let (mut a, mut b) = (rlqs.open(Some("a")), rlqs.open(Some("b")));
    let t0 = Instant::now();
    let one = Duration::from_secs(1);
    for k in 0..2 {
        let now = t0 + one * k;
        a.answer(&report(vec![usage("shared", 150, 350, one)]), now)
            .await;
        b.answer(&report(vec![usage("shared", 150, 350, one)]), now)
            .await;
    }
    // b goes quiet: a takes what b no longer asks for within two reports.
    let mut a_share = 0;
    for k in 2..4 {
        let now = t0 + one * k;
        let b_answer = b
            .answer(&report(vec![usage("shared", 5, 0, one)]), now)
            .await;
        let a_answer = a
            .answer(&report(vec![usage("shared", 150, 350, one)]), now)
            .await;
        a_share = per_second(&a_answer.expect("answered"));
        assert!(per_second(&b_answer.expect("answered")) >= 5);
    }
    assert!(a_share >= 250, "{a_share}");
}

#[tokio::test]
async fn unknown_buckets_get_no_assignment_and_never_deny_all() {
    let rlqs = service();
    let mut proxy = rlqs.open(None);
    let now = Instant::now();
    let answer = proxy
        .answer(
            &report(vec![usage(
                "nobody-names-this",
                10,
                0,
                Duration::from_secs(1),
            )]),
            now,
        )
        .await;
    assert_eq!(answer, None);
    // Another domain: the same name is not the limited bucket.
    let mut other_domain = report(vec![usage("shared", 10, 0, Duration::from_secs(1))]);
    other_domain.domain = "elsewhere".to_string();
    let later = now + Duration::from_secs(1);
    assert_eq!(proxy.answer(&other_domain, later).await, None);
    // The stream still answers a bucket that has a limit.
    let answer = proxy
        .answer(
            &report(vec![usage("shared", 10, 0, Duration::from_secs(1))]),
            later + Duration::from_secs(1),
        )
        .await
        .expect("answered");
    assert!(per_second(&answer) > 0);
}

#[tokio::test]
async fn configured_zero_unlimited_and_hourly_limits() {
    let rlqs = service();
    let mut proxy = rlqs.open(None);
    let one = Duration::from_secs(1);
    let answer = proxy
        .answer(
            &report(vec![
                usage("blocked", 1, 0, one),
                usage("free", 1, 0, one),
                usage("hourly", 1, 0, one),
            ]),
            Instant::now(),
        )
        .await
        .expect("answered");
    let got = strategies(&answer);
    assert_eq!(
        got[0].1,
        Some(Strategy::BlanketRule(BlanketRule::DenyAll as i32))
    );
    assert_eq!(
        got[1].1,
        Some(Strategy::BlanketRule(BlanketRule::AllowAll as i32))
    );
    match got[2].1 {
        Some(Strategy::RequestsPerTimeUnit(r)) => {
            assert_eq!(r.time_unit, RateLimitUnit::Hour as i32);
            assert_eq!(r.requests_per_time_unit, 3600);
        }
        ref other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn absurd_reports_are_bounded() {
    let rlqs = service();
    let mut proxy = rlqs.open(Some("absurd"));
    let t0 = Instant::now();
    // u64::MAX counts, a negative elapsed time, an empty bucket id, a missing one.
    let mut negative = usage("shared", u64::MAX, u64::MAX, Duration::ZERO);
    negative.time_elapsed = Some(ProtoDuration {
        seconds: -5,
        nanos: -1,
    });
    let empty = BucketQuotaUsage {
        bucket_id: Some(BucketId::default()),
        ..BucketQuotaUsage::default()
    };
    let answer = proxy
        .answer(
            &report(vec![negative, empty, BucketQuotaUsage::default()]),
            t0,
        )
        .await
        .expect("answered");
    let share = per_second(&answer);
    assert!((1..=300).contains(&share), "{share}");

    // Thousands of buckets in one report: at most MAX_BUCKETS_PER_STREAM looked at.
    let many: Vec<BucketQuotaUsage> = (0..5000)
        .map(|i| usage(&format!("b{i}"), 1, 0, Duration::from_secs(1)))
        .collect();
    let t1 = t0 + Duration::from_secs(1);
    assert_eq!(proxy.answer(&report(many), t1).await, None);
    assert!(proxy.buckets.len() <= MAX_BUCKETS_PER_STREAM);

    // A report right after the last one, naming nothing new, is skipped.
    let again = report(vec![usage("shared", 1, 0, Duration::from_millis(1))]);
    assert_eq!(
        proxy.answer(&again, t1 + Duration::from_millis(1)).await,
        None
    );
    // The shares table holds what live streams reported, nothing more.
    drop(proxy);
    assert_eq!(rlqs.demands.size(), (0, 0));
}

#[tokio::test]
async fn a_limit_removed_by_a_reload_is_abandoned() {
    let dir = std::env::temp_dir().join(format!("mixer-rlqs-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("rlqs.yaml");
    std::fs::write(&file, LIMITS).expect("write config");
    let runtime = runtime_at(ConfigOrigin::Path(dir.clone()));
    let rlqs = Rlqs::new(runtime.clone());
    let mut proxy = rlqs.open(None);
    let one = Duration::from_secs(1);
    let t0 = Instant::now();
    let answer = proxy
        .answer(&report(vec![usage("shared", 1, 0, one)]), t0)
        .await;
    assert!(per_second(&answer.expect("answered")) > 0);
    std::fs::write(&file, LIMITS.replace("value: shared", "value: renamed")).expect("rewrite");
    runtime.reload().expect("reloads");
    let answer = proxy
        .answer(&report(vec![usage("shared", 1, 0, one)]), t0 + one)
        .await
        .expect("answered");
    assert!(matches!(
        answer.bucket_action[0].bucket_action,
        Some(Action::AbandonAction(_))
    ));
    // Abandoned once; after that the proxy's own no-assignment behaviour decides.
    let answer = proxy
        .answer(&report(vec![usage("shared", 1, 0, one)]), t0 + one * 2)
        .await;
    assert_eq!(answer, None);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A dry-run quota rule matching every bucket, beside `policies/rlqs`'s limit.
const DRY_RUN_LIMIT: &str = r#"
kind: handler
metadata: {name: per-bucket, namespace: istio-system}
spec:
  compiledAdapter: memquota
  params:
    quotas:
    - {name: per-bucket.instance.istio-system, maxAmount: 1, validDuration: 1s}
---
kind: instance
metadata: {name: per-bucket, namespace: istio-system}
spec:
  compiledTemplate: quota
  params:
    dimensions:
      bucket: rlqs.bucket_keys | "none"
---
kind: rule
metadata:
  name: try-per-bucket
  namespace: istio-system
  annotations: {istio.io/dry-run: "true"}
spec:
  actions:
  - handler: per-bucket
    instances: [per-bucket]
"#;

#[tokio::test]
async fn lookups_do_not_count_dry_run_rules() {
    let metrics = RuntimeMetrics::unregistered();
    let mut registry = AdapterRegistry::new();
    registry.register(Arc::new(mixer_adapter_memquota::MemQuota));
    let runtime = Runtime::new(
        ConfigOrigin::Embedded(vec![
            SourceFile::new("rlqs.yaml", LIMITS),
            SourceFile::new("dry-run.yaml", DRY_RUN_LIMIT),
        ]),
        registry,
        ConfigOptions::default(),
        RuntimeOptions::default(),
        metrics.clone(),
    );
    runtime.reload().expect("test config loads");
    let rlqs = Rlqs::new(Arc::new(runtime));
    let mut proxy = rlqs.open(Some("a"));
    let t0 = Instant::now();
    for i in 0..3 {
        let at = t0 + Duration::from_secs(i);
        let answer = proxy
            .answer(
                &report(vec![usage("shared", 50, 0, Duration::from_secs(1))]),
                at,
            )
            .await
            .expect("answered");
        assert!(per_second(&answer) >= 1);
    }
    let counted: u64 = ["allow", "deny", "error"]
        .iter()
        .map(|verdict| {
            metrics
                .rule_dry_run
                .with_label_values(&["try-per-bucket.rule.istio-system", verdict])
                .get()
        })
        .sum();
    assert_eq!(counted, 0, "RLQS lookups counted as dry-run decisions");
}

#[test]
fn shares_are_said_in_the_limits_unit_and_never_zero() {
    let rate = |s: Strategy| match s {
        Strategy::RequestsPerTimeUnit(r) => (r.requests_per_time_unit, r.time_unit),
        other => panic!("{other:?}"),
    };
    let second = RateLimitUnit::Second as i32;
    assert_eq!(rate(per_unit(100.7, Duration::from_secs(1))), (100, second));
    assert_eq!(rate(per_unit(0.01, Duration::from_secs(1))), (1, second));
    assert_eq!(
        rate(per_unit(f64::NAN, Duration::from_secs(1))),
        (1, second)
    );
    assert_eq!(
        rate(per_unit(f64::INFINITY, Duration::from_secs(1))),
        (u64::MAX, second)
    );
    assert_eq!(
        rate(per_unit(0.5, Duration::from_secs(60))),
        (30, RateLimitUnit::Minute as i32)
    );
    assert_eq!(rate(per_unit(2.0, Duration::from_secs(7))), (2, second));
    assert_eq!(
        rate(per_unit(2.0, Duration::from_millis(1500))),
        (2, second)
    );
}

#[test]
fn bucket_keys_do_not_depend_on_map_order_or_separators() {
    let id = |pairs: &[(&str, &str)]| BucketId {
        bucket: pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    };
    assert_eq!(
        bucket_key(&id(&[("a", "1"), ("b", "2")])),
        bucket_key(&id(&[("b", "2"), ("a", "1")]))
    );
    assert_ne!(
        bucket_key(&id(&[("a", "1;b=2")])),
        bucket_key(&id(&[("a", "1"), ("b", "2")]))
    );
}

#[test]
fn proxy_ids_are_bounded() {
    assert_eq!(proxy_id(b"envoy-1").expect("fine"), "envoy-1");
    assert_eq!(
        proxy_id(b"").map_err(|s| s.code()),
        Err(Code::InvalidArgument)
    );
    let long = vec![b'x'; MAX_PROXY_ID_BYTES + 1];
    assert_eq!(
        proxy_id(&long).map_err(|s| s.code()),
        Err(Code::InvalidArgument)
    );
    assert_eq!(
        proxy_id(&[0xff, 0xfe]).map_err(|s| s.code()),
        Err(Code::InvalidArgument)
    );
}
