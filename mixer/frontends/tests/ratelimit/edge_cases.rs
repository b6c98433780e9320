//! Undecidable handlers, missing config, malformed requests and negative hits.

use super::*;

#[tokio::test]
async fn a_handler_that_cannot_decide_is_unavailable() {
    let mut h = start().await;
    let err = h
        .client
        .should_rate_limit(request("broken", vec![descriptor(&[("user", "amy")])], 0))
        .await
        .expect_err("could not decide");
    assert_eq!(err.code(), tonic::Code::Unavailable);
    assert!(err.message().contains("redis is down"), "{}", err.message());

    // Failing open grants, for no longer than this call.
    let r = h
        .ask(request(
            "broken-open",
            vec![descriptor(&[("user", "amy")])],
            0,
        ))
        .await;
    assert_eq!(r.overall_code, RlCode::Ok as i32);
    assert_eq!(
        r.statuses[0]
            .duration_until_reset
            .map(|d| (d.seconds, d.nanos)),
        Some((0, 0))
    );
}

#[tokio::test]
async fn no_config_empty_domain_and_no_descriptors_are_errors() {
    let calls: Calls = Arc::default();
    let mut h = serve(runtime(calls.clone()), calls).await; // never reloaded
    let err = h
        .client
        .should_rate_limit(request("edge", vec![descriptor(&[("user", "amy")])], 0))
        .await
        .expect_err("not ready");
    assert_eq!(err.code(), tonic::Code::Unavailable);

    let mut h = start().await;
    let err = h
        .client
        .should_rate_limit(request("", vec![descriptor(&[("user", "amy")])], 0))
        .await
        .expect_err("no domain");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    let err = h
        .client
        .should_rate_limit(request("edge", vec![], 0))
        .await
        .expect_err("no descriptors");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
}

#[tokio::test]
async fn negative_hits_are_not_charged() {
    let mut h = start().await;
    let mut d = descriptor(&[("user", "amy")]);
    d.is_negative_hits = true;
    let r = h.ask(request("edge", vec![d], 5)).await;
    assert_eq!(codes(&r), [RlCode::Ok]);
    assert!(h.calls().is_empty());
}
