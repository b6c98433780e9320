//! `Server::require_token`: calls without the token, or with another one, are UNAUTHENTICATED
//! before they reach the adapter; health probes need none.

mod support;

use mixer_adapter_sdk::api::{AdapterInfo, Stability};
use mixer_adapter_sdk::model::Template;
use mixer_adapter_sdk::proto::istio::mixer::adapter::model::v1beta1 as model;
use mixer_adapter_sdk::{RequiredToken, Server};
use support::{AllowAll, CheckAdapter};
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

/// Serves checknothing, allowing everything; takes no params.
static NOTHING: AdapterInfo = AdapterInfo {
    name: "nothing",
    description: "allows everything",
    templates: &[Template::CheckNothing],
    cacheable: true,
    stability: Stability::Alpha,
};

async fn serve(token: RequiredToken) -> Channel {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = Server::new(CheckAdapter::new(&NOTHING, AllowAll)).require_token(token);
    tokio::spawn(server.serve_with_shutdown(listener, std::future::pending()));
    Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect")
}

async fn validate(channel: &Channel, header: Option<(&'static str, &str)>) -> tonic::Code {
    let mut request = tonic::Request::new(model::ValidateRequest::default());
    if let Some((name, value)) = header {
        request
            .metadata_mut()
            .insert(name, value.parse().expect("ascii"));
    }
    let mut client =
        model::infrastructure_backend_client::InfrastructureBackendClient::new(channel.clone());
    match client.validate(request).await {
        Ok(_) => tonic::Code::Ok,
        Err(status) => status.code(),
    }
}

#[tokio::test]
async fn a_bearer_token_is_required_except_for_health() {
    let dir = tempfile_dir();
    let file = dir.join("token");
    std::fs::write(&file, "t0ken\n").expect("write");
    let channel = serve(RequiredToken::bearer(&file).expect("token")).await;

    assert_eq!(validate(&channel, None).await, tonic::Code::Unauthenticated);
    let wrong = Some(("authorization", "Bearer guess"));
    assert_eq!(
        validate(&channel, wrong).await,
        tonic::Code::Unauthenticated
    );
    let plain = Some(("authorization", "t0ken"));
    assert_eq!(
        validate(&channel, plain).await,
        tonic::Code::Unauthenticated
    );
    let right = Some(("authorization", "bearer t0ken"));
    assert_eq!(validate(&channel, right).await, tonic::Code::Ok);

    let status = HealthClient::new(channel)
        .check(HealthCheckRequest::default())
        .await
        .expect("health needs no token")
        .into_inner()
        .status;
    assert_eq!(status, ServingStatus::Serving as i32);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_custom_header_carries_the_token_as_it_is() {
    let dir = tempfile_dir();
    let file = dir.join("key");
    std::fs::write(&file, "k-1").expect("write");
    let channel = serve(RequiredToken::header("X-Api-Key", &file).expect("token")).await;
    assert_eq!(
        validate(&channel, Some(("x-api-key", "k-1"))).await,
        tonic::Code::Ok
    );
    let bearer = Some(("authorization", "Bearer k-1"));
    assert_eq!(
        validate(&channel, bearer).await,
        tonic::Code::Unauthenticated
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn an_empty_or_missing_token_file_is_refused_at_start() {
    let dir = tempfile_dir();
    let empty = dir.join("empty");
    std::fs::write(&empty, " \n").expect("write");
    let e = RequiredToken::bearer(&empty).expect_err("empty");
    assert!(e.to_string().contains("holds no token"), "{e}");
    assert!(RequiredToken::bearer(dir.join("missing")).is_err());
    let good = dir.join("good");
    std::fs::write(&good, "k").expect("write");
    assert!(RequiredToken::header("X-Api-Key", &good).is_ok());
    assert!(RequiredToken::header("bad header", &good).is_err());
    let _ = std::fs::remove_dir_all(dir);
}

fn tempfile_dir() -> std::path::PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "sdk-token-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("dir");
    dir
}
