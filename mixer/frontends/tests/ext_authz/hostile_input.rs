//! Huge and oversized requests are handled or refused and the server keeps serving.

use super::*;
use std::time::Duration;
use tonic::Code;

#[tokio::test]
async fn ten_thousand_headers_are_handled() {
    let (mut client, _) = serve(ready_runtime()).await;
    let many: Vec<(String, String)> = (0..10_000)
        .map(|i| (format!("x-h-{i}"), format!("value-{i}")))
        .collect();
    let pairs: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let request = http_check("GET", "/", &pairs);
    let response = tokio::time::timeout(Duration::from_secs(20), client.check(request))
        .await
        .expect("answered in time")
        .expect("answered");
    assert_eq!(status_code(response.get_ref()), 0);
    assert_eq!(
        status_code(&check(&mut client, http_check("GET", "/", &[])).await),
        0
    );
}

#[tokio::test]
async fn oversized_request_is_rejected_and_the_server_keeps_serving() {
    let (mut client, addr) = serve(ready_runtime()).await;
    let mut request = http_check("POST", "/upload", &[]);
    if let Some(http) = request
        .attributes
        .as_mut()
        .and_then(|a| a.request.as_mut())
        .and_then(|r| r.http.as_mut())
    {
        http.body = "a".repeat(10 * 1024 * 1024);
    }
    let status = tokio::time::timeout(Duration::from_secs(30), client.check(request))
        .await
        .expect("answered in time")
        .expect_err("10 MB is over the 4 MiB limit");
    assert!(
        matches!(status.code(), Code::OutOfRange | Code::ResourceExhausted),
        "{status:?}"
    );
    assert!(
        status.message().contains("larger than"),
        "{}",
        status.message()
    );
    // Same connection, then a fresh one: both still answered.
    assert_eq!(
        status_code(&check(&mut client, http_check("GET", "/", &[])).await),
        0
    );
    let mut fresh = connect(addr).await;
    assert_eq!(
        status_code(&check(&mut fresh, http_check("GET", "/", &[])).await),
        0
    );
}
