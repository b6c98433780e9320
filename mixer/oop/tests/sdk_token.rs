//! An adapter built on the SDK with `Server::require_token` accepts the mixer's calls when
//! they carry the token its handler sends (`tls.tokenPath`), refuses them otherwise, and
//! follows a rotated token file on both sides within a second.

mod support;

use std::time::Duration;

use mixer_adapter_sdk::{RequiredToken, Server, ServerTls};
use support::Pki;
use support::allow::Allow;
use support::recorder::{check, handler};

async fn serve(pki: &Pki, token_file: &str) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let server = Server::new(Allow::everything())
        .tls(ServerTls::new(
            pki.read("server.pem"),
            pki.read("server.key"),
        ))
        .require_token(RequiredToken::bearer(token_file).expect("token file"));
    tokio::spawn(server.serve_with_shutdown(listener, std::future::pending()));
    port
}

#[tokio::test]
async fn only_calls_with_the_expected_token_reach_the_adapter() {
    let pki = Pki::new();
    pki.write("expected", "s3cret\n");
    pki.write("sent", "s3cret");
    pki.write("wrong", "guess");
    let port = serve(&pki, &pki.path("expected")).await;
    let ca = pki.path("ca.pem");
    let with = |file: &str| {
        handler(
            port,
            &format!(
                "{{caCertificates: {ca}, tokenPath: {}, authHeader: BEARER}}",
                pki.path(file)
            ),
        )
    };

    check(&with("sent"))
        .await
        .expect("the right token is accepted");
    let refused = check(&with("wrong"))
        .await
        .expect_err("a wrong token is refused");
    assert!(refused.message.contains("token"), "{refused}");
    let none = handler(port, &format!("{{caCertificates: {ca}}}"));
    let refused = check(&none).await.expect_err("no token is refused");
    assert!(refused.message.contains("token"), "{refused}");

    // Both sides rotate: the adapter reads its file again, the mixer its own.
    let sent = with("sent");
    pki.write("expected", "rotated");
    pki.write("sent", "rotated");
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    check(&sent).await.expect("the rotated token is accepted");
    check(&with("wrong")).await.expect_err("still refused");
}
