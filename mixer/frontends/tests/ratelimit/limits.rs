//! Over-limit answers, limit overrides, hits addends and the limits reported back.

use super::*;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use envoy_types::pb::google::protobuf::UInt64Value;

#[tokio::test]
async fn one_descriptor_over_its_limit_makes_the_answer_over_limit() {
    let mut h = start().await;
    let both = || {
        request(
            "edge",
            vec![
                descriptor(&[("user", "amy")]),
                descriptor(&[("path", "/shop")]),
                descriptor(&[("unconfigured", "x")]),
            ],
            0,
        )
    };
    // amy may make 2 requests a minute; /shop 5 a second.
    for _ in 0..2 {
        let r = h.ask(both()).await;
        assert_eq!(r.overall_code, RlCode::Ok as i32);
        assert_eq!(codes(&r), [RlCode::Ok, RlCode::Ok, RlCode::Ok]);
    }
    let r = h.ask(both()).await;
    assert_eq!(r.overall_code, RlCode::OverLimit as i32);
    assert_eq!(codes(&r), [RlCode::OverLimit, RlCode::Ok, RlCode::Ok]);

    // Per-descriptor details: the limit when known, the time to reset when a handler answered.
    assert_eq!(
        limit(&r.statuses[0]),
        Some(("per-user".to_string(), 2, Unit::Minute))
    );
    assert_eq!(
        limit(&r.statuses[1]),
        Some(("per-path".to_string(), 5, Unit::Second))
    );
    assert_eq!(limit(&r.statuses[2]), None, "no rule, no limit");
    assert_eq!(
        r.statuses[0].duration_until_reset.map(|d| d.seconds),
        Some(60)
    );
    assert_eq!(r.statuses[2].duration_until_reset, None);
    assert_eq!(r.statuses[0].limit_remaining, 0, "over the limit");
    assert_eq!(
        r.statuses[1].limit_remaining, 2,
        "/shop: 5 a second, 3 used"
    );

    // Headers come from the descriptor over its limit.
    assert_eq!(
        headers(&r),
        [
            ("X-RateLimit-Limit".to_string(), "2".to_string()),
            ("X-RateLimit-Remaining".to_string(), "0".to_string()),
            ("X-RateLimit-Reset".to_string(), "60".to_string()),
        ]
    );

    // Another user has a counter of their own.
    let r = h
        .ask(request("edge", vec![descriptor(&[("user", "bob")])], 0))
        .await;
    assert_eq!(r.overall_code, RlCode::Ok as i32);
    assert_eq!(r.statuses[0].limit_remaining, 1);
    assert_eq!(
        headers(&r),
        [
            ("X-RateLimit-Limit".to_string(), "2".to_string()),
            ("X-RateLimit-Remaining".to_string(), "1".to_string()),
            ("X-RateLimit-Reset".to_string(), "60".to_string()),
        ]
    );

    // Allowed everywhere: the headers of the descriptor with the fewest requests left.
    let r = h
        .ask(request(
            "edge",
            vec![
                descriptor(&[("path", "/cart")]),
                descriptor(&[("user", "cy")]),
            ],
            0,
        ))
        .await;
    assert_eq!(codes(&r), [RlCode::Ok, RlCode::Ok]);
    assert_eq!(
        [r.statuses[0].limit_remaining, r.statuses[1].limit_remaining],
        [4, 1]
    );
    assert_eq!(
        headers(&r),
        [
            ("X-RateLimit-Limit".to_string(), "2".to_string()),
            ("X-RateLimit-Remaining".to_string(), "1".to_string()),
            ("X-RateLimit-Reset".to_string(), "60".to_string()),
        ]
    );
}

#[tokio::test]
async fn a_descriptor_limit_override_replaces_the_configured_limit() {
    let mut h = start().await;
    let limited = |per_unit: u32, unit: RateLimitUnit| {
        let mut d = descriptor(&[("path", "/api")]);
        d.limit = Some(RateLimitOverride {
            requests_per_unit: per_unit,
            unit: unit as i32,
        });
        request("edge", vec![d], 0)
    };
    // /api is configured at 5 a second; Envoy says 2 an hour.
    for left in [1, 0] {
        let r = h.ask(limited(2, RateLimitUnit::Hour)).await;
        assert_eq!(codes(&r), [RlCode::Ok]);
        assert_eq!(r.statuses[0].limit_remaining, left);
        assert_eq!(
            limit(&r.statuses[0]),
            Some(("per-path".to_string(), 2, Unit::Hour))
        );
    }
    let r = h.ask(limited(2, RateLimitUnit::Hour)).await;
    assert_eq!(codes(&r), [RlCode::OverLimit]);
    // Without the override the configured limit (and its own counter) applies.
    let r = h
        .ask(request("edge", vec![descriptor(&[("path", "/api")])], 0))
        .await;
    assert_eq!(codes(&r), [RlCode::Ok]);
    assert_eq!(
        limit(&r.statuses[0]),
        Some(("per-path".to_string(), 5, Unit::Second))
    );
    // A unit with no length is refused, not guessed.
    let err = h
        .client
        .should_rate_limit(limited(2, RateLimitUnit::Unknown))
        .await
        .expect_err("unknown unit");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message()
            .contains("descriptors[0].limit.unit 0 (UNKNOWN)"),
        "{}",
        err.message()
    );
}

#[tokio::test]
async fn hits_addend_comes_from_the_descriptor_then_the_request_then_one() {
    let mut h = start().await;
    // The request asks for 3 per descriptor: 3 of /a's 5 fit, the next 3 do not.
    let r = h
        .ask(request("edge", vec![descriptor(&[("path", "/a")])], 3))
        .await;
    assert_eq!(codes(&r), [RlCode::Ok]);
    let r = h
        .ask(request("edge", vec![descriptor(&[("path", "/a")])], 3))
        .await;
    assert_eq!(codes(&r), [RlCode::OverLimit]);
    // The descriptor's own hits_addend wins over the request's: 2 more fit exactly.
    let mut d = descriptor(&[("path", "/a")]);
    d.hits_addend = Some(UInt64Value { value: 2 });
    let r = h.ask(request("edge", vec![d], 3)).await;
    assert_eq!(codes(&r), [RlCode::Ok]);
    // Unset everywhere: 1.
    let r = h
        .ask(request("edge", vec![descriptor(&[("path", "/b")])], 0))
        .await;
    assert_eq!(codes(&r), [RlCode::Ok]);
    let amounts: Vec<i64> = h.calls().iter().map(|c| c.2).collect();
    assert_eq!(amounts, [3, 3, 2, 1]);
}

#[tokio::test]
async fn a_limit_the_protocol_cannot_say_is_left_out() {
    let mut h = start().await;
    let r = h
        .ask(request("odd", vec![descriptor(&[("k", "v")])], 0))
        .await;
    assert_eq!(codes(&r), [RlCode::Ok]);
    assert_eq!(limit(&r.statuses[0]), None, "7s is no unit");
    assert_eq!(
        r.statuses[0].duration_until_reset.map(|d| d.seconds),
        Some(7)
    );
}
