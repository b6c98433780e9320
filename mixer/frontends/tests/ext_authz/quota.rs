//! Quota on ext_authz, which has no quota field: the quota rules matching an allowed check
//! are charged one unit each, deduplicated by the request id; over the limit the answer is a
//! denial Envoy turns into HTTP 429 with the rate limit headers; a quota handler that cannot
//! decide keeps its fail policy.

use super::*;
use envoy_types::pb::envoy::service::auth::v3::check_response::HttpResponse;

const CONFIG: &str = r#"
kind: handler
metadata: {name: quotahandler, namespace: istio-system}
spec:
  compiledAdapter: memquota
  params:
    quotas:
    - {name: requestcountquota.instance.istio-system, maxAmount: 3, validDuration: 60s}
    - {name: onequota.instance.istio-system, maxAmount: 1, validDuration: 60s}
---
kind: handler
metadata: {name: quotadown, namespace: istio-system}
spec: {compiledAdapter: quota-down}
---
kind: instance
metadata: {name: requestcountquota, namespace: istio-system}
spec:
  compiledTemplate: quota
  params:
    dimensions: {host: request.host | "unknown"}
---
kind: instance
metadata: {name: onequota, namespace: istio-system}
spec:
  compiledTemplate: quota
  params:
    dimensions: {host: request.host | "unknown"}
---
kind: rule
metadata: {name: quota, namespace: istio-system}
spec:
  match: request.host == "quota.example.com"
  actions: [{handler: quotahandler, instances: [requestcountquota]}]
---
kind: rule
metadata: {name: once, namespace: istio-system}
spec:
  match: request.host == "once.example.com"
  actions: [{handler: quotahandler, instances: [onequota]}]
---
kind: rule
metadata: {name: down, namespace: istio-system}
spec:
  match: request.host == "down.example.com"
  actions: [{handler: quotadown, instances: [requestcountquota]}]
"#;

fn quota_runtime() -> Arc<Runtime> {
    let mut registry = AdapterRegistry::new();
    registry.register(Arc::new(mixer_adapter_memquota::MemQuota));
    registry.register(Arc::new(common::QuotaDown::new("quota-down", "redis down")));
    let runtime = Arc::new(Runtime::new(
        ConfigOrigin::Embedded(vec![SourceFile::new("quota.yaml", CONFIG)]),
        registry,
        ConfigOptions::default(),
        RuntimeOptions::default(),
        RuntimeMetrics::unregistered(),
    ));
    runtime.reload().expect("config loads");
    runtime
}

fn to_host(host: &str, id: &str) -> CheckRequest {
    let mut request = http_check("GET", "/", &[(":authority", host)]);
    if let Some(http) = request
        .attributes
        .as_mut()
        .and_then(|a| a.request.as_mut())
        .and_then(|r| r.http.as_mut())
    {
        http.host = host.to_string();
        http.id = id.to_string();
    }
    request
}

fn header<'a>(response: &'a CheckResponse, name: &str) -> Option<&'a str> {
    let Some(HttpResponse::DeniedResponse(denied)) = &response.http_response else {
        return None;
    };
    denied
        .headers
        .iter()
        .filter_map(|o| o.header.as_ref())
        .find(|h| h.key == name)
        .map(|h| h.value.as_str())
}

#[tokio::test]
async fn the_fourth_request_is_denied_429_with_the_rate_limit_headers() {
    let (mut client, _) = serve(quota_runtime()).await;
    for i in 0..3 {
        let response = check(&mut client, to_host("quota.example.com", &format!("r{i}"))).await;
        assert_eq!(status_code(&response), 0, "request {i}");
    }
    let response = check(&mut client, to_host("quota.example.com", "r3")).await;
    assert_eq!(status_code(&response), 8, "RESOURCE_EXHAUSTED");
    let Some(HttpResponse::DeniedResponse(denied)) = &response.http_response else {
        panic!("a denied response: {response:?}");
    };
    assert_eq!(denied.status.as_ref().map(|s| s.code), Some(429));
    assert_eq!(header(&response, "x-ratelimit-limit"), Some("3"));
    assert_eq!(header(&response, "x-ratelimit-remaining"), Some("0"));
    let retry: u64 = header(&response, "retry-after")
        .and_then(|v| v.parse().ok())
        .expect("Retry-After");
    assert!((1..=60).contains(&retry), "{retry}");
    assert_eq!(
        header(&response, "x-ratelimit-reset"),
        Some(retry.to_string().as_str())
    );
    // Other hosts are not charged.
    let response = check(&mut client, to_host("shop.example.com", "r4")).await;
    assert_eq!(status_code(&response), 0);
}

#[tokio::test]
async fn a_retried_check_with_the_same_request_id_is_charged_once() {
    let (mut client, _) = serve(quota_runtime()).await;
    for _ in 0..3 {
        let response = check(&mut client, to_host("once.example.com", "same-id")).await;
        assert_eq!(status_code(&response), 0, "the same request again");
    }
    let response = check(&mut client, to_host("once.example.com", "next-id")).await;
    assert_eq!(
        status_code(&response),
        8,
        "a second request is over the limit of 1"
    );
}

#[tokio::test]
async fn a_quota_handler_that_cannot_decide_fails_open_and_is_counted() {
    let runtime = quota_runtime();
    let metrics = runtime.metrics().clone();
    let (mut client, _) = serve(runtime).await;
    for i in 0..3 {
        let response = check(&mut client, to_host("down.example.com", &format!("d{i}"))).await;
        assert_eq!(status_code(&response), 0, "quota fails open by default");
    }
    let failures = metrics
        .handler_calls
        .with_label_values(&["quotadown.handler.istio-system", "quota", "unavailable"])
        .get();
    assert_eq!(failures, 3);
}
