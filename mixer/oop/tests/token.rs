//! The access token of a `tls` connection arrives in the adapter's metadata, in the header
//! Istio's `authHeader` / `customHeader` say, and a rotated token file is picked up without
//! a config reload. The adapter is a tonic server over TLS that records what it received
//! (`support::recorder`).

mod support;

use std::time::Duration;

use support::Pki;
use support::recorder::{Recorder, check, handler, serve};

#[tokio::test]
async fn a_bearer_token_arrives_and_a_rotated_one_follows_within_a_second() {
    let pki = Pki::new();
    pki.write("token", "first-token\n");
    let recorder = Recorder::default();
    let port = serve(&pki, recorder.clone()).await;
    let h = handler(
        port,
        &format!(
            "{{caCertificates: {}, tokenPath: {}, authHeader: BEARER}}",
            pki.path("ca.pem"),
            pki.path("token")
        ),
    );
    check(&h).await.expect("answered");
    assert_eq!(recorder.last(), (Some("Bearer first-token".into()), None));

    pki.write("token", "second-token");
    tokio::time::sleep(mixer_oop::TOKEN_REFRESH + Duration::from_millis(100)).await;
    check(&h).await.expect("answered");
    assert_eq!(recorder.last(), (Some("Bearer second-token".into()), None));

    // A token file that disappears: the last good token goes on being sent.
    std::fs::remove_file(pki.path("token")).expect("remove");
    tokio::time::sleep(mixer_oop::TOKEN_REFRESH + Duration::from_millis(100)).await;
    check(&h).await.expect("answered");
    assert_eq!(recorder.last(), (Some("Bearer second-token".into()), None));
}

#[tokio::test]
async fn plain_and_custom_headers_carry_the_token_as_it_is() {
    let pki = Pki::new();
    pki.write("token", "k-123");
    let recorder = Recorder::default();
    let port = serve(&pki, recorder.clone()).await;
    let ca = pki.path("ca.pem");
    let token = pki.path("token");
    let h = handler(
        port,
        &format!("{{caCertificates: {ca}, tokenPath: {token}, authHeader: PLAIN}}"),
    );
    check(&h).await.expect("answered");
    assert_eq!(recorder.last(), (Some("k-123".into()), None));
    let h = handler(
        port,
        &format!("{{caCertificates: {ca}, tokenPath: {token}, customHeader: X-Api-Key}}"),
    );
    check(&h).await.expect("answered");
    assert_eq!(recorder.last(), (None, Some("k-123".into())));
    // No token configured: no header.
    let h = handler(port, &format!("{{caCertificates: {ca}}}"));
    check(&h).await.expect("answered");
    assert_eq!(recorder.last(), (None, None));
}
