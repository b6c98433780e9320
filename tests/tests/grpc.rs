//! The gRPC services of `mixer serve`, through the real binary with the embedded default
//! config: Envoy ext_authz v3 and Istio Mixer v1 Check share one pipeline and one answer.

use std::path::Path;
use std::time::Duration;

use envoy_types::pb::envoy::service::auth::v3::authorization_client::AuthorizationClient;
use envoy_types::pb::envoy::service::auth::v3::check_response;
use mixer_model::{StringMap, Value};
use mixer_proto::istio::mixer::v1 as pb;
use mixer_proto::istio::mixer::v1::mixer_client::MixerClient;
use mixer_tests::Mixer;

#[path = "support/authz.rs"]
mod authz;
use authz::authz_request;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ext_authz_and_mixer_v1_decide_alike() {
    let mixer = Mixer::start(Path::new(env!("CARGO_BIN_EXE_mixer-under-test")), &[]);
    let wait = tokio::task::spawn_blocking({
        let admin = mixer.admin;
        move || {
            let start = std::time::Instant::now();
            while start.elapsed() < Duration::from_secs(10) {
                if let Ok((200, _, _)) = mixer_tests::http_request(admin, "GET", "/readyz", &[]) {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            false
        }
    });
    assert!(wait.await.expect("join"), "not ready");
    let endpoint = format!("http://{}", mixer.grpc);

    let mut authz = AuthorizationClient::connect(endpoint.clone())
        .await
        .expect("connect");
    let allowed = authz
        .check(authz_request(&[("x-user", "bob")]))
        .await
        .expect("check")
        .into_inner();
    assert_eq!(allowed.status.as_ref().map(|s| s.code), Some(0));
    let Some(check_response::HttpResponse::OkResponse(ok)) = allowed.http_response else {
        panic!("expected an OK response: {allowed:?}");
    };
    let added: Vec<(String, String)> = ok
        .headers
        .iter()
        .filter_map(|h| h.header.as_ref().map(|h| (h.key.clone(), h.value.clone())))
        .collect();
    assert!(
        added.contains(&("x-mixer-user".into(), "bob".into())),
        "{added:?}"
    );

    let denied = authz
        .check(authz_request(&[("x-mixer-deny", "true")]))
        .await
        .expect("check")
        .into_inner();
    assert_eq!(denied.status.as_ref().map(|s| s.code), Some(7));
    let Some(check_response::HttpResponse::DeniedResponse(no)) = denied.http_response else {
        panic!("expected a denied response");
    };
    assert_eq!(no.status.map(|s| s.code), Some(403));

    let mut v1 = MixerClient::connect(endpoint).await.expect("connect");
    let headers: Value = StringMap::from_pairs([("x-mixer-deny", "true")]).into();
    let attrs = [("request.headers", &headers)];
    let words = mixer_frontends::mixer_v1::GLOBAL_WORD_COUNT;
    let request = pb::CheckRequest {
        attributes: Some(mixer_frontends::mixer_v1::encode(attrs, words)),
        global_word_count: words as u32,
        ..Default::default()
    };
    let response = v1.check(request).await.expect("check").into_inner();
    let precondition = response.precondition.expect("precondition");
    assert_eq!(precondition.status.map(|s| s.code), Some(7));
    assert!(precondition.referenced_attributes.is_some());

    assert!(mixer.terminate().success());
}

/// Istio 1.4's rate limit task config (memquota with overrides) unchanged, driven by Mixer v1
/// Check quotas as an Istio proxy sends them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn istio_memquota_config_limits_mixer_v1_quota_requests() {
    let config =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/istio-1.4/config");
    let mixer = Mixer::start(
        Path::new(env!("CARGO_BIN_EXE_mixer-under-test")),
        &["--config", config.to_str().expect("utf-8")],
    );
    let admin = mixer.admin;
    tokio::task::spawn_blocking(move || {
        let start = std::time::Instant::now();
        while !matches!(
            mixer_tests::http_request(admin, "GET", "/readyz", &[]),
            Ok((200, _, _))
        ) {
            assert!(start.elapsed() < Duration::from_secs(10), "not ready");
            std::thread::sleep(Duration::from_millis(20));
        }
    })
    .await
    .expect("join");
    let mut v1 = MixerClient::connect(format!("http://{}", mixer.grpc))
        .await
        .expect("connect");
    let labels: Value = StringMap::from_pairs([("app", "reviews")]).into();
    let words = mixer_frontends::mixer_v1::GLOBAL_WORD_COUNT;
    let check = || pb::CheckRequest {
        attributes: Some(mixer_frontends::mixer_v1::encode(
            [("destination.labels", &labels)],
            words,
        )),
        global_word_count: words as u32,
        quotas: [(
            "requestcountquota".to_string(),
            pb::check_request::QuotaParams {
                amount: 1,
                best_effort: false,
            },
        )]
        .into(),
        ..Default::default()
    };
    let granted =
        |r: &pb::CheckResponse| r.quotas.get("requestcountquota").map(|q| q.granted_amount);
    let first = v1.check(check()).await.expect("check").into_inner();
    assert_eq!(granted(&first), Some(1), "{first:?}");
    // The reviews override allows one request per 5 s.
    let second = v1.check(check()).await.expect("check").into_inner();
    assert_eq!(granted(&second), Some(0), "{second:?}");
    assert!(mixer.terminate().success());
}
