//! OAuth client credentials end to end: a `tls` connection whose `oauth` block points at a
//! token endpoint served by the test (`support::token_endpoint`, plain HTTP or TLS), and an
//! adapter that records the headers of each call (`support::recorder`). Checked: the grant
//! as RFC 6749 section 4.4 asks for it, the token in the header the config says, a new token
//! after expiry, a rotated client secret, and refusing, failing or silent endpoints turning
//! into quick `Unavailable` errors rather than hanging calls.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hyper::StatusCode;
use mixer_adapter_api::{AdapterError, ErrorKind};
use support::Pki;
use support::recorder::{Recorder, check, handler, serve};
use support::token_endpoint::TokenEndpoint;

/// An `oauth` block for client `mixer` with the secret in `pki`'s `client-secret` file,
/// followed by `more` (other fields of the `tls` block).
fn tls_block(pki: &Pki, token_url: &str, more: &str) -> String {
    format!(
        "{{caCertificates: {}, oauth: {{clientId: mixer, clientSecret: {}, tokenUrl: '{token_url}', scopes: [adapter.check, adapter.report], endpointParams: {{audience: recorder}}}}{more}}}",
        pki.path("ca.pem"),
        pki.path("client-secret"),
    )
}

fn unavailable(result: Result<(), AdapterError>) -> String {
    let e = result.expect_err("no token, no call");
    assert_eq!(e.kind, ErrorKind::Unavailable, "{e}");
    assert!(e.retryable, "{e}");
    assert!(e.message.contains("h.istio-system"), "{}", e.message);
    e.message
}

#[tokio::test]
async fn the_adapter_gets_a_bearer_token_and_a_new_one_after_it_expires() {
    let pki = Pki::new();
    pki.write("client-secret", "s3cret\n");
    let idp = TokenEndpoint::start("mixer", "s3cret", 2, None).await;
    let recorder = Recorder::default();
    let port = serve(&pki, recorder.clone()).await;
    let h = handler(port, &tls_block(&pki, idp.url(), ""));

    check(&h).await.expect("answered");
    assert_eq!(recorder.last(), (Some("Bearer tok-1".into()), None));
    // One request, as section 4.4.2 describes it: the client authenticated with HTTP Basic
    // (not in the form), the scopes space-separated, the endpoint parameters added.
    let requests = idp.requests();
    assert_eq!(requests.len(), 1);
    assert!(requests[0].authenticated);
    let expected: BTreeMap<String, String> = [
        ("grant_type", "client_credentials"),
        ("scope", "adapter.check adapter.report"),
        ("audience", "recorder"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(requests[0].form, expected);

    // The token is kept: more calls, no more requests.
    check(&h).await.expect("answered");
    check(&h).await.expect("answered");
    assert_eq!(recorder.last(), (Some("Bearer tok-1".into()), None));
    assert_eq!(idp.requests().len(), 1);

    // Past its two seconds, the next call gets (and waits for) a new one.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    check(&h).await.expect("answered");
    assert_eq!(recorder.last(), (Some("Bearer tok-2".into()), None));
    assert_eq!(idp.issued(), 2);
    assert_eq!(recorder.calls(), 4);
}

#[tokio::test]
async fn a_refused_secret_fails_calls_at_once_until_the_rotated_secret_is_read() {
    let pki = Pki::new();
    pki.write("client-secret", "old-secret\n");
    let idp = TokenEndpoint::start("mixer", "new-secret", 1, None).await;
    let recorder = Recorder::default();
    let port = serve(&pki, recorder.clone()).await;
    let h = handler(port, &tls_block(&pki, idp.url(), ""));

    let started = Instant::now();
    let message = unavailable(check(&h).await);
    assert!(
        message.contains("401 Unauthorized: invalid_client"),
        "{message}"
    );
    // A second call within the backoff fails with the same reason without asking again.
    assert_eq!(unavailable(check(&h).await), message);
    assert!(started.elapsed() < Duration::from_millis(500));
    assert_eq!(idp.requests().len(), 1);
    assert_eq!(recorder.calls(), 0, "no call went without a token");

    // The secret is rotated: the file is read again for the next request (after the 250 ms
    // backoff), and the token follows.
    pki.write("client-secret", "new-secret\n");
    tokio::time::sleep(Duration::from_millis(300)).await;
    check(&h).await.expect("answered");
    assert_eq!(recorder.last(), (Some("Bearer tok-1".into()), None));
    assert!(idp.requests()[1].authenticated);

    // The endpoint breaks; once the token has expired, calls fail with its status.
    idp.fail_with(Some(StatusCode::INTERNAL_SERVER_ERROR));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let message = unavailable(check(&h).await);
    assert!(message.contains("500 Internal Server Error"), "{message}");
    assert_eq!(recorder.calls(), 1);
}

#[tokio::test]
async fn a_silent_token_endpoint_fails_the_call_at_its_deadline() {
    let pki = Pki::new();
    pki.write("client-secret", "s3cret");
    // Accepts connections and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/token", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = listener.accept().await {
            held.push(tcp);
        }
    });
    let recorder = Recorder::default();
    let port = serve(&pki, recorder.clone()).await;
    let h = handler(port, &tls_block(&pki, &url, ""));

    let started = Instant::now();
    let message = unavailable(check(&h).await);
    let waited = started.elapsed();
    // The handler's deadline (one second), not the endpoint, ends the wait.
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    assert!(message.contains("has not answered yet"), "{message}");
    assert_eq!(recorder.calls(), 0);
}

#[tokio::test]
async fn an_https_endpoint_is_trusted_through_ca_certificates_and_the_header_follows_the_config() {
    let pki = Pki::new();
    pki.write("client-secret", "s3cret");
    let idp = TokenEndpoint::start("mixer", "s3cret", 60, Some(&pki)).await;
    assert!(idp.url().starts_with("https://"));
    let recorder = Recorder::default();
    let port = serve(&pki, recorder.clone()).await;

    let h = handler(
        port,
        &tls_block(&pki, idp.url(), ", customHeader: X-Api-Key"),
    );
    check(&h).await.expect("answered");
    assert_eq!(recorder.last(), (None, Some("tok-1".into())));
    let h = handler(port, &tls_block(&pki, idp.url(), ", authHeader: PLAIN"));
    check(&h).await.expect("answered");
    assert_eq!(recorder.last(), (Some("tok-2".into()), None));

    // Without the CA that signed the endpoint's certificate, TLS fails, and says why.
    let untrusted = format!(
        "{{oauth: {{clientId: mixer, clientSecret: {}, tokenUrl: '{}'}}}}",
        pki.path("client-secret"),
        idp.url()
    );
    let h = handler(port, &untrusted);
    let message = unavailable(check(&h).await);
    assert!(
        message.contains(&format!("no OAuth token: TLS with {} failed", idp.url()))
            && message.contains("UnknownIssuer"),
        "{message}"
    );
    assert_eq!(idp.issued(), 2);
}
