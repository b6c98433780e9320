//! Behaviour tests through the adapter API: every entry type, whitelist and blacklist, the
//! provider over HTTP and file://, refresh, ttl expiry on a paused clock, close.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mixer_adapter_api::host::{AnyAdapter, decode_params};
use mixer_adapter_api::{AdapterError, BuildContext, ErrorKind, Handler};
use mixer_model::{CheckResult, Code, FieldValue, Instance, Template, Value};
use serde_json::{Value as Json, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::{ListChecker, ListHandler, ListParams};

fn ctx() -> BuildContext {
    BuildContext {
        handler_name: "list.istio-system".into(),
    }
}

fn entry(value: Option<Value>) -> Instance {
    Instance {
        name: "entry.istio-system".into(),
        template: Template::ListEntry,
        fields: value
            .map(|v| vec![("value", FieldValue::Value(v))])
            .unwrap_or_default(),
    }
}

fn build(params: Json) -> Arc<ListHandler> {
    let params: ListParams = decode_params(&params).expect("decodes");
    let config = params.compile().expect("valid params");
    ListChecker.build_handler(&config, &ctx()).expect("builds")
}

async fn check_value(h: &ListHandler, value: Value) -> Result<CheckResult, AdapterError> {
    h.as_check()
        .expect("check")
        .check(&entry(Some(value)))
        .await
}

async fn check(h: &ListHandler, value: &str) -> CheckResult {
    check_value(h, Value::from(value)).await.expect("decides")
}

async fn allowed(h: &ListHandler, value: &str) -> bool {
    let r = check(h, value).await;
    assert!(
        r.status.is_ok() || r.status.code == Code::PermissionDenied,
        "{value}: {:?}",
        r.status
    );
    r.status.is_ok()
}

#[test]
fn declares_listchecker_for_listentry() {
    let info = ListChecker.info();
    assert_eq!(info.name, "listchecker");
    assert_eq!(info.templates, &[Template::ListEntry]);
    assert!(info.cacheable);
}

#[tokio::test]
async fn whitelist_and_blacklist_codes_and_messages() {
    let white =
        build(json!({"overrides": ["a", "b"], "cachingInterval": "7s", "cachingUseCount": 3}));
    let ok = check(&white, "a").await;
    assert_eq!(ok.status.code, Code::Ok);
    assert_eq!(ok.valid_duration, Duration::from_secs(7));
    assert_eq!(ok.valid_use_count, 3);
    let denied = check(&white, "c").await;
    assert_eq!(denied.status.code, Code::PermissionDenied);
    assert_eq!(denied.status.message, "c is not whitelisted");
    assert_eq!(
        denied.valid_duration,
        Duration::from_secs(7),
        "denials are cacheable too"
    );

    let black = build(json!({"overrides": ["a"], "blacklist": true}));
    let denied = check(&black, "a").await;
    assert_eq!(denied.status.code, Code::PermissionDenied);
    assert_eq!(denied.status.message, "a is blacklisted");
    assert!(check(&black, "z").await.status.is_ok());
    // Istio's defaults for caching.
    assert_eq!(denied.valid_duration, Duration::from_secs(300));
    assert_eq!(denied.valid_use_count, 10_000);
}

#[tokio::test]
async fn values_that_cannot_be_looked_up_are_invalid_arguments() {
    let h = build(json!({"overrides": ["a"]}));
    let missing = h
        .as_check()
        .expect("check")
        .check(&entry(None))
        .await
        .expect("decides");
    assert_eq!(missing.status.code, Code::InvalidArgument);
    assert_eq!(
        missing.status.message,
        "<nil> is not a valid string or IP address"
    );
    let number = check_value(&h, Value::Int64(3)).await.expect("decides");
    assert_eq!(number.status.code, Code::InvalidArgument);

    let ips = build(json!({"entryType": "IP_ADDRESSES", "overrides": ["10.0.0.0/8"]}));
    let bad = check(&ips, "ten.0.0.1").await;
    assert_eq!(bad.status.code, Code::InvalidArgument);
    assert_eq!(bad.status.message, "ten.0.0.1 is not a valid IP address");
}

#[tokio::test]
async fn entry_types() {
    let ci =
        build(json!({"entryType": "CASE_INSENSITIVE_STRINGS", "overrides": ["Reviews.Default"]}));
    assert!(allowed(&ci, "reviews.default").await);
    assert!(allowed(&ci, "REVIEWS.DEFAULT").await);
    assert!(!allowed(&ci, "ratings.default").await);

    let exact = build(json!({"overrides": ["Reviews"]}));
    assert!(!allowed(&exact, "reviews").await);

    let re = build(json!({"entryType": "REGEX", "overrides": ["^/api/v[12]/", "admin"]}));
    assert!(allowed(&re, "/api/v1/books").await);
    assert!(allowed(&re, "/x/admin/y").await);
    assert!(!allowed(&re, "/api/v3/books").await);

    let ips = build(json!({"entryType": "IP_ADDRESSES", "blacklist": true,
        "overrides": ["10.0.0.0/8", "10.1.0.0/16", "192.168.1.1", "2001:db8::/32"]}));
    assert!(!allowed(&ips, "10.200.3.4").await);
    assert!(!allowed(&ips, "::ffff:10.200.3.4").await, "v4-mapped");
    assert!(!allowed(&ips, "192.168.1.1").await);
    assert!(allowed(&ips, "192.168.1.2").await);
    assert!(!allowed(&ips, "2001:db8:ffff::1").await);
    assert!(allowed(&ips, "2001:db9::1").await);
    // Typed IP_ADDRESS values (and Istio's byte form) are looked up as addresses.
    let typed = check_value(&ips, Value::IpAddress("10.9.9.9".parse().expect("ip")))
        .await
        .expect("decides");
    assert_eq!(typed.status.code, Code::PermissionDenied);
    assert_eq!(typed.status.message, "10.9.9.9 is blacklisted");
    let bytes = check_value(&ips, Value::Bytes(Arc::from(&[10u8, 0, 0, 1][..])))
        .await
        .expect("decides");
    assert_eq!(bytes.status.code, Code::PermissionDenied);

    // A typed address against a string list uses its text form.
    let names = build(json!({"overrides": ["10.0.0.1"]}));
    let ip: IpAddr = "::ffff:10.0.0.1".parse().expect("ip");
    let r = check_value(&names, Value::IpAddress(ip))
        .await
        .expect("decides");
    assert!(r.status.is_ok(), "{:?}", r.status);
}

#[test]
fn build_without_a_runtime_fails_only_with_a_provider() {
    ListChecker
        .compile_and_build(&json!({"overrides": ["a"]}), &ctx())
        .expect("no provider: no runtime needed");
    let err = ListChecker
        .compile_and_build(&json!({"providerUrl": "http://127.0.0.1:1/"}), &ctx())
        .err()
        .expect("no runtime");
    assert!(err.message.contains("tokio runtime"), "{}", err.message);
}

// ---------------------------------------------------------------- HTTP provider

#[derive(Clone, Copy)]
enum Framing {
    ContentLength,
    Chunked,
    ToEof,
}

struct Server {
    addr: SocketAddr,
    /// Status and body served next.
    answer: Arc<Mutex<(u16, String)>>,
    hits: Arc<AtomicUsize>,
}

async fn serve(framing: Framing, body: &str) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let answer = Arc::new(Mutex::new((200, body.to_string())));
    let hits = Arc::new(AtomicUsize::new(0));
    let (a, h) = (answer.clone(), hits.clone());
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let (answer, hits) = (a.clone(), h.clone());
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&request).to_string();
                assert!(
                    text.starts_with("GET /lists/users.txt HTTP/1.1\r\n"),
                    "{text}"
                );
                assert!(text.contains(&format!("\r\nHost: {addr}\r\n")), "{text}");
                hits.fetch_add(1, Ordering::SeqCst);
                let (status, body) = answer.lock().expect("lock").clone();
                let head = format!("HTTP/1.1 {status} X\r\nContent-Type: text/plain\r\n");
                let out = match framing {
                    Framing::ContentLength => {
                        format!("{head}Content-Length: {}\r\n\r\n{body}", body.len())
                    }
                    Framing::Chunked => {
                        let mut out = format!("{head}Transfer-Encoding: chunked\r\n\r\n");
                        for chunk in body.as_bytes().chunks(5) {
                            out.push_str(&format!("{:x}\r\n", chunk.len()));
                            out.push_str(std::str::from_utf8(chunk).expect("ascii"));
                            out.push_str("\r\n");
                        }
                        out + "0\r\n\r\n"
                    }
                    Framing::ToEof => format!("{head}\r\n{body}"),
                };
                let _ = conn.write_all(out.as_bytes()).await;
                match framing {
                    // Keep the connection open: the client must stop at the framing.
                    Framing::ContentLength | Framing::Chunked => {
                        tokio::time::sleep(Duration::from_secs(30)).await
                    }
                    Framing::ToEof => {
                        let _ = conn.shutdown().await;
                    }
                }
            });
        }
    });
    Server { addr, answer, hits }
}

fn url(server: &Server) -> String {
    format!("http://{}/lists/users.txt", server.addr)
}

#[tokio::test]
async fn fetches_over_http_with_every_framing() {
    for framing in [Framing::ContentLength, Framing::Chunked, Framing::ToEof] {
        let server = serve(framing, "# users\nalice\n\nbob\r\n").await;
        let h = build(json!({"providerUrl": url(&server), "overrides": ["carol"]}));
        tokio::time::timeout(Duration::from_secs(10), h.ready())
            .await
            .expect("first fetch");
        assert!(allowed(&h, "alice").await);
        assert!(allowed(&h, "bob").await);
        assert!(allowed(&h, "carol").await, "overrides are always in");
        assert!(!allowed(&h, "dave").await);
        assert!(!allowed(&h, "# users").await);
        assert_eq!(server.hits.load(Ordering::SeqCst), 1);
        h.close().await;
    }
}

#[tokio::test]
async fn http_refresh_picks_up_a_changed_list() {
    let server = serve(Framing::ContentLength, "alice\n").await;
    let h = build(json!({"providerUrl": url(&server), "refreshInterval": "1s", "ttl": "10s"}));
    tokio::time::timeout(Duration::from_secs(10), h.ready())
        .await
        .expect("first fetch");
    assert!(allowed(&h, "alice").await);
    assert!(!allowed(&h, "bob").await);
    *server.answer.lock().expect("lock") = (200, "bob\n".into());
    let g = h.generation();
    tokio::time::timeout(Duration::from_secs(10), h.wait_for_generation(g))
        .await
        .expect("refreshed");
    assert!(!allowed(&h, "alice").await);
    assert!(allowed(&h, "bob").await);
    // A provider error keeps the list (ttl is far away).
    *server.answer.lock().expect("lock") = (500, "oops".into());
    let hits = server.hits.load(Ordering::SeqCst);
    while server.hits.load(Ordering::SeqCst) == hits {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(allowed(&h, "bob").await);
    h.close().await;
}

#[tokio::test]
async fn ip_list_in_istio_yaml_over_http() {
    let server = serve(
        Framing::ToEof,
        "whitelist:\n  - 10.10.0.0/16\n  - 2001:db8::1\n",
    )
    .await;
    let h = build(json!({"providerUrl": url(&server), "entryType": "IP_ADDRESSES"}));
    tokio::time::timeout(Duration::from_secs(10), h.ready())
        .await
        .expect("first fetch");
    assert!(allowed(&h, "10.10.200.1").await);
    assert!(allowed(&h, "2001:db8::1").await);
    assert!(!allowed(&h, "10.11.0.1").await);
}

#[tokio::test]
async fn unreachable_provider_answers_unavailable_before_the_first_fetch() {
    // A port nobody listens on: bind, read the port, close.
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        l.local_addr().expect("addr").port()
    };
    let h = build(json!({"providerUrl": format!("http://127.0.0.1:{port}/x"), "overrides": ["a"]}));
    // Until a fetch succeeds nothing, not even the overrides, is answered (as in Istio).
    let mut last = None;
    for _ in 0..100 {
        let err = check_value(&h, Value::from("a"))
            .await
            .expect_err("no list");
        assert_eq!(err.kind, ErrorKind::Unavailable);
        assert!(err.retryable);
        let done = err.message.contains("could not fetch");
        last = Some(err);
        if done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let last = last.expect("checked");
    assert!(
        last.message.contains("could not connect"),
        "{}",
        last.message
    );
}

// ---------------------------------------------------------------- file provider, paused clock

fn file_url(path: &std::path::Path) -> String {
    format!("file://{}", path.display())
}

#[tokio::test(start_paused = true)]
async fn file_provider_refreshes_and_expires_after_ttl() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("list.txt");
    std::fs::write(&path, "alice\n").expect("write");
    let h = build(json!({
        "providerUrl": file_url(&path),
        "refreshInterval": "1s",
        "ttl": "3s",
        "overrides": ["root"],
    }));
    h.ready().await;
    assert!(allowed(&h, "alice").await);
    assert!(allowed(&h, "root").await);

    // t = 1.5s: the 1s refresh saw the new content.
    std::fs::write(&path, "bob\n").expect("write");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!allowed(&h, "alice").await);
    assert!(allowed(&h, "bob").await);
    assert_eq!(h.generation(), 2);

    // Unchanged content is not reinstalled but does confirm the list.
    tokio::time::sleep(Duration::from_secs(1)).await; // t = 2.5
    assert_eq!(h.generation(), 2);

    // The provider fails from t = 3 on; the last success was at t = 2.
    std::fs::remove_file(&path).expect("remove");
    tokio::time::sleep(Duration::from_secs(2)).await; // t = 4.5
    assert!(allowed(&h, "bob").await, "kept until ttl");
    tokio::time::sleep(Duration::from_secs(1)).await; // t = 5.5 >= 2 + 3
    let err = check_value(&h, Value::from("bob"))
        .await
        .expect_err("expired");
    assert_eq!(err.kind, ErrorKind::Unavailable);
    assert!(err.retryable);
    assert!(err.message.contains("expired"), "{}", err.message);
    assert!(err.message.contains("could not read"), "{}", err.message);
    let err = check_value(&h, Value::from("root"))
        .await
        .expect_err("overrides expire too");
    assert_eq!(err.kind, ErrorKind::Unavailable);

    // The provider comes back: the next refresh installs it again.
    std::fs::write(&path, "carol\n").expect("write");
    tokio::time::sleep(Duration::from_secs(1)).await; // t = 6.5
    assert!(allowed(&h, "carol").await);
    assert!(allowed(&h, "root").await);
    h.close().await;
}

#[tokio::test(start_paused = true)]
async fn bad_provider_entries_keep_the_last_list() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ips.txt");
    std::fs::write(&path, "10.0.0.0/8\n").expect("write");
    let h = build(
        json!({"providerUrl": file_url(&path), "entryType": "IP_ADDRESSES",
        "refreshInterval": "1s", "ttl": "2s"}),
    );
    h.ready().await;
    std::fs::write(&path, "10.0.0.0/8\nnot-an-ip\n").expect("write");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(allowed(&h, "10.1.1.1").await, "last good list kept");
    assert_eq!(h.generation(), 1);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let err = check_value(&h, Value::from("10.1.1.1"))
        .await
        .expect_err("expired");
    assert!(err.message.contains("not-an-ip"), "{}", err.message);
}

#[tokio::test(start_paused = true)]
async fn missing_file_is_unavailable_from_the_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = build(json!({"providerUrl": file_url(&dir.path().join("none")), "overrides": ["a"]}));
    tokio::time::sleep(Duration::from_millis(10)).await;
    let err = check_value(&h, Value::from("a"))
        .await
        .expect_err("no list");
    assert_eq!(err.kind, ErrorKind::Unavailable);
    assert!(
        err.message.contains("no list available yet"),
        "{}",
        err.message
    );
    assert!(err.message.contains("could not read"), "{}", err.message);
}

#[tokio::test(start_paused = true)]
async fn close_stops_the_refresh_task() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("list.txt");
    std::fs::write(&path, "alice\n").expect("write");
    let h = build(json!({"providerUrl": file_url(&path), "refreshInterval": "1s", "ttl": "100s"}));
    h.ready().await;
    h.close().await;
    std::fs::write(&path, "bob\n").expect("write");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(h.generation(), 1);
    assert!(
        allowed(&h, "alice").await,
        "the last list stays until its ttl"
    );
    assert!(!allowed(&h, "bob").await);
}
