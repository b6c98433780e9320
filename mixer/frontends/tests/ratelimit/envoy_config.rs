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
    assert_eq!(snapshot.config.rules.len(), 4);
    assert_eq!(
        snapshot.indexed_rules(),
        4,
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
        "edge-message_type-marketing-to_number.istio-system".to_string(),
        vec![
            ("message_type".to_string(), "marketing".to_string()),
            ("to_number".to_string(), "2061111111".to_string()),
        ],
        1
    )));
}
