//! Serving envoyproxy/ratelimit's own config format.

use super::*;

/// envoyproxy/ratelimit's README examples 2 and 3, with the default (memquota) backend.
const RATELIMIT_CONFIG: &str = r#"
kind: ratelimitconfig
metadata: {name: edge, namespace: istio-system}
spec:
  domain: edge
  descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: message_type
    value: marketing
    descriptors:
    - key: to_number
      rate_limit: {unit: day, requests_per_unit: 1}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: internal
    rate_limit: {unlimited: true}
"#;

#[tokio::test]
async fn envoyproxy_ratelimit_config_is_served() {
    let calls: Calls = Arc::default();
    let rt = runtime_with(calls.clone(), RATELIMIT_CONFIG);
    rt.reload().expect("ratelimit config loads");
    let snapshot = rt.snapshot();
    // One rule per limit, the unlimited one included (answered without a handler).
    assert_eq!(snapshot.config.rules.len(), 5);
    assert_eq!(
        snapshot.indexed_rules(),
        5,
        "every rule is found by literal lookup"
    );
    drop(snapshot);
    let mut h = serve(rt, calls).await;

    // The value-specific entry wins over the key-only one: 50.0.0.5 gets 0 requests.
    let r = h
        .ask(request(
            "edge",
            vec![descriptor(&[("remote_address", "50.0.0.5")])],
            0,
        ))
        .await;
    assert_eq!(codes(&r), [RlCode::OverLimit]);
    assert_eq!(
        limit(&r.statuses[0]),
        Some(("edge-remote_address-50_0_0_5".to_string(), 0, Unit::Second))
    );
    // Any other address: 3 a minute, each address counted apart.
    for _ in 0..3 {
        let r = h
            .ask(request(
                "edge",
                vec![descriptor(&[("remote_address", "10.0.0.1")])],
                0,
            ))
            .await;
        assert_eq!(codes(&r), [RlCode::Ok]);
    }
    let r = h
        .ask(request(
            "edge",
            vec![
                descriptor(&[("remote_address", "10.0.0.1")]),
                descriptor(&[("remote_address", "10.0.0.2")]),
            ],
            0,
        ))
        .await;
    assert_eq!(codes(&r), [RlCode::OverLimit, RlCode::Ok]);
    assert_eq!(
        headers(&r)[0],
        ("X-RateLimit-Limit".to_string(), "3".to_string())
    );

    // Example 2: one marketing message a day to a number, two of any kind.
    let marketing = || descriptor(&[("message_type", "marketing"), ("to_number", "2061111111")]);
    let any = || descriptor(&[("to_number", "2061111111")]);
    let r = h.ask(request("edge", vec![marketing(), any()], 0)).await;
    assert_eq!(codes(&r), [RlCode::Ok, RlCode::Ok]);
    let r = h.ask(request("edge", vec![marketing(), any()], 0)).await;
    assert_eq!(codes(&r), [RlCode::OverLimit, RlCode::Ok]);
    let r = h.ask(request("edge", vec![any()], 0)).await;
    assert_eq!(codes(&r), [RlCode::OverLimit]);
    // Another shape (or an unlimited key, or another domain) has no limit.
    let r = h
        .ask(request(
            "edge",
            vec![
                descriptor(&[("message_type", "marketing")]),
                descriptor(&[("internal", "x")]),
                descriptor(&[("to_number", "1"), ("remote_address", "50.0.0.5")]),
            ],
            0,
        ))
        .await;
    assert_eq!(codes(&r), [RlCode::Ok, RlCode::Ok, RlCode::Ok]);
    // envoyproxy/ratelimit answers an unlimited descriptor with the largest remaining count.
    assert_eq!(r.statuses[1].limit_remaining, u32::MAX);
    assert!(
        !h.calls().iter().any(|c| c.0.contains("internal")),
        "no handler is asked about an unlimited limit"
    );
    let r = h
        .ask(request(
            "other",
            vec![descriptor(&[("remote_address", "50.0.0.5")])],
            0,
        ))
        .await;
    assert_eq!(codes(&r), [RlCode::Ok]);

    // The instances carried the descriptor entries as dimensions.
    let calls = h.calls();
    assert!(calls.contains(&(
        "edge-message_type-marketing-to_number.instance.istio-system".to_string(),
        vec![
            ("message_type".to_string(), "marketing".to_string()),
            ("to_number".to_string(), "2061111111".to_string()),
        ],
        1
    )));
}

/// envoyproxy/ratelimit's examples/ratelimit/config/example.yaml as that project ships it.
const UPSTREAM_EXAMPLE: &str =
    include_str!("../../../../policies/envoy-ratelimit/config/example.yaml");

#[tokio::test]
async fn replaces_drops_the_replaced_limit_before_counting() {
    let calls: Calls = Arc::default();
    let rt = runtime_with(calls.clone(), UPSTREAM_EXAMPLE);
    rt.reload()
        .expect("an unchanged envoyproxy/ratelimit file loads");
    let mut h = serve(rt, calls).await;
    let banned = || descriptor(&[("foo", "bkthomps"), ("bar", "banned")]);
    let cluster = |dc| descriptor(&[("source_cluster", "proxy"), ("destination_cluster", dc)]);
    // integration-test/scripts/replaces.sh: banned_limit is 0 a minute...
    let r = h.ask(request("rl", vec![banned()], 0)).await;
    assert_eq!(codes(&r), [RlCode::OverLimit]);
    // ...unless (destination_cluster: override), which replaces it, is in the same request.
    let r = h
        .ask(request("rl", vec![banned(), cluster("override")], 0))
        .await;
    assert_eq!(RlCode::try_from(r.overall_code), Ok(RlCode::Ok));
    assert_eq!(codes(&r), [RlCode::Ok, RlCode::Ok]);
    assert!(
        r.statuses[0].current_limit.is_none(),
        "the replaced limit does not apply"
    );
    let banned_counted = |h: &Harness| {
        h.calls()
            .iter()
            .filter(|c| c.0 == "rl-foo-bar-banned.instance.istio-system")
            .count()
    };
    assert_eq!(banned_counted(&h), 1, "the replaced limit is not counted");
    // A descriptor naming no replacing limit leaves banned_limit in force.
    let r = h
        .ask(request("rl", vec![banned(), cluster("mock")], 0))
        .await;
    assert_eq!(codes(&r), [RlCode::OverLimit, RlCode::Ok]);
}

#[tokio::test]
async fn quota_mode_refuses_only_when_every_quota_is_spent() {
    let calls: Calls = Arc::default();
    let rt = runtime_with(calls.clone(), UPSTREAM_EXAMPLE);
    rt.reload().expect("loads");
    let mut h = serve(rt, calls).await;
    let both = || {
        request(
            "rl",
            vec![
                descriptor(&[("service", "service_1")]),
                descriptor(&[("service", "service_2")]),
            ],
            0,
        )
    };
    // integration-test/scripts/quota.sh: service_1 allows 1 a minute, service_2 2.
    let overall: Vec<Result<RlCode, _>> = [
        h.ask(both()).await,
        h.ask(both()).await,
        h.ask(both()).await,
    ]
    .iter()
    .map(|r| RlCode::try_from(r.overall_code))
    .collect();
    assert_eq!(
        overall,
        [Ok(RlCode::Ok), Ok(RlCode::Ok), Ok(RlCode::OverLimit)]
    );
}
