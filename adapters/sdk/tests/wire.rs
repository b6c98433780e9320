//! The SDK's server at the HTTP/2 level, with requests a generated client would never send:
//! each gets a gRPC status that says what is wrong, and the connection keeps serving. Also
//! concurrent calls on one connection, and shutdown letting a call in flight finish.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use mixer_adapter_sdk::api::{AdapterError, AdapterInfo, CheckHandler, Stability};
use mixer_adapter_sdk::model::{CheckResult, Code, Instance, ListEntryInstance, Status, Template};
use mixer_adapter_sdk::proto::listentry;
use mixer_adapter_sdk::{Server, async_trait};
use prost::Message;
use support::CheckAdapter;

static INFO: AdapterInfo = AdapterInfo {
    name: "lists",
    description: "denies nikto",
    templates: &[Template::ListEntry],
    cacheable: true,
    stability: Stability::Alpha,
};

/// Denies "nikto"; a value `sleep-<ms>` answers after that long.
struct ListsHandler;

#[async_trait]
impl CheckHandler for ListsHandler {
    async fn check(&self, instance: &Instance) -> Result<CheckResult, AdapterError> {
        let value = ListEntryInstance::of(instance)
            .and_then(|i| i.value)
            .and_then(|v| v.as_str())
            .unwrap_or_default();
        if let Some(ms) = value.strip_prefix("sleep-") {
            tokio::time::sleep(Duration::from_millis(ms.parse().unwrap_or(0))).await;
        }
        let mut answer = CheckResult::ok(Duration::from_secs(5), 1000);
        if value == "nikto" {
            answer.status = Status::new(Code::PermissionDenied, "nikto is blocked");
        }
        Ok(answer)
    }
}

const LIST_ENTRY: &str = "/listentry.HandleListEntryService/HandleListEntry";

async fn start() -> (
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(async move {
        Server::new(CheckAdapter::new(&INFO, ListsHandler))
            .serve_with_shutdown(listener, async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    (addr, stop, served)
}

async fn connect(addr: SocketAddr) -> h2::client::SendRequest<Bytes> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    // The mixer's windows: with the default 64 KiB, h2 would take 200 answers arriving at
    // once for a flood of small frames.
    let (send, connection) = h2::client::Builder::new()
        .initial_window_size(1 << 20)
        .initial_connection_window_size(1 << 20)
        .handshake(tcp)
        .await
        .unwrap();
    tokio::spawn(connection);
    send
}

/// A gRPC frame around `message`, with the given compression flag.
fn frame(flag: u8, message: &[u8]) -> Bytes {
    let mut body = vec![flag];
    body.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    body.extend_from_slice(message);
    body.into()
}

fn request_for(value: &str) -> Bytes {
    frame(
        0,
        &listentry::HandleListEntryRequest {
            instance: Some(listentry::InstanceMsg {
                name: "agent".into(),
                value: value.into(),
            }),
            ..Default::default()
        }
        .encode_to_vec(),
    )
}

/// What came back: the gRPC status code and message (from the trailers, or from the headers
/// of a trailers-only answer) and the body.
struct Answer {
    code: i32,
    message: String,
    body: Bytes,
}

async fn call(
    send: &mut h2::client::SendRequest<Bytes>,
    path: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> Answer {
    let mut request = http::Request::post(format!("http://adapter{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut ready = send.clone().ready().await.unwrap();
    let (response, mut stream) = ready
        .send_request(request.body(()).unwrap(), false)
        .unwrap();
    stream.send_data(body, true).unwrap();
    let response = response.await.unwrap();
    assert_eq!(response.status(), 200, "gRPC answers in HTTP 200");
    let head = response.headers().clone();
    let mut recv = response.into_body();
    let mut body = Vec::new();
    while let Some(data) = recv.data().await {
        let data = data.unwrap();
        let _ = recv.flow_control().release_capacity(data.len());
        body.extend_from_slice(&data);
    }
    let trailers = recv.trailers().await.unwrap().unwrap_or(head);
    let text = |name: &str| {
        trailers
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    };
    Answer {
        code: text("grpc-status").parse().unwrap(),
        message: percent_decoded(&text("grpc-message")),
        body: body.into(),
    }
}

/// `grpc-message` is percent-encoded on the wire.
fn percent_decoded(text: &str) -> String {
    let mut out = Vec::new();
    let mut bytes = text.bytes();
    while let Some(b) = bytes.next() {
        if b == b'%' {
            let hex: String = bytes.by_ref().take(2).map(char::from).collect();
            out.push(u8::from_str_radix(&hex, 16).unwrap());
        } else {
            out.push(b);
        }
    }
    String::from_utf8(out).unwrap()
}

fn check_result(answer: &Answer) -> i32 {
    assert_eq!(answer.code, 0, "{}", answer.message);
    let message = answer.body.slice(5..);
    mixer_adapter_sdk::proto::istio::mixer::adapter::model::v1beta1::CheckResult::decode(message)
        .unwrap()
        .status
        .map_or(0, |s| s.code)
}

/// A path, extra headers, a body, and the status code and message words it must get.
type BadCall = (
    &'static str,
    &'static [(&'static str, &'static str)],
    Bytes,
    i32,
    &'static str,
);

#[tokio::test]
async fn bad_requests_get_a_status_and_the_connection_keeps_serving() {
    let (addr, _stop, _served) = start().await;
    let mut send = connect(addr).await;
    let bad: [BadCall; 6] = [
        (
            LIST_ENTRY,
            &[],
            frame(0, &[0xff, 0xff, 0xff]),
            13,
            "does not decode",
        ),
        (LIST_ENTRY, &[], Bytes::new(), 13, "no message"),
        (LIST_ENTRY, &[], frame(1, b"zz"), 12, "compressed"),
        (
            LIST_ENTRY,
            &[("grpc-encoding", "gzip")],
            request_for("x"),
            12,
            "gzip",
        ),
        (
            LIST_ENTRY,
            &[],
            frame(0, &vec![b'a'; (4 << 20) + 1]),
            // RESOURCE_EXHAUSTED, as gRPC core and grpc-go answer a message over the limit.
            8,
            "larger than max",
        ),
        (
            "/quota.HandleQuotaService/HandleQuota",
            &[],
            request_for("x"),
            12,
            "unknown method /quota.HandleQuotaService/HandleQuota",
        ),
    ];
    for (path, headers, body, code, says) in bad {
        let answer = call(&mut send, path, headers, body).await;
        assert_eq!(answer.code, code, "{path}: {}", answer.message);
        assert!(
            answer.message.contains(says),
            "{path}: {:?}",
            answer.message
        );
        // The same connection still answers a good call.
        let ok = call(&mut send, LIST_ENTRY, &[], request_for("curl")).await;
        assert_eq!(check_result(&ok), 0);
    }
    let denied = call(&mut send, LIST_ENTRY, &[], request_for("nikto")).await;
    assert_eq!(check_result(&denied), 7, "PERMISSION_DENIED");
}

#[tokio::test]
async fn concurrent_calls_on_one_connection_each_get_their_own_answer() {
    let (addr, _stop, _served) = start().await;
    let send = connect(addr).await;
    let calls = (0..200).map(|i| {
        let mut send = send.clone();
        async move {
            let value = if i % 2 == 0 { "nikto" } else { "curl" };
            let answer = call(&mut send, LIST_ENTRY, &[], request_for(value)).await;
            (i, check_result(&answer))
        }
    });
    for (i, code) in futures_join_all(calls).await {
        assert_eq!(code, if i % 2 == 0 { 7 } else { 0 }, "call {i}");
    }
}

async fn futures_join_all<F: std::future::Future + Send + 'static>(
    calls: impl Iterator<Item = F>,
) -> Vec<F::Output>
where
    F::Output: Send,
{
    let handles: Vec<_> = calls.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

#[tokio::test]
async fn shutdown_lets_a_call_in_flight_finish_then_stops_listening() {
    let (addr, stop, served) = start().await;
    let mut send = connect(addr).await;
    let slow =
        tokio::spawn(
            async move { call(&mut send, LIST_ENTRY, &[], request_for("sleep-300")).await },
        );
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.send(()).unwrap();
    let answer = slow.await.unwrap();
    assert_eq!(check_result(&answer), 0, "the call in flight was answered");
    tokio::time::timeout(Duration::from_secs(5), served)
        .await
        .expect("the server stops once its calls are done")
        .unwrap();
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "no longer listening"
    );
}

#[tokio::test]
async fn a_message_over_many_frames_is_put_together() {
    let (addr, _stop, _served) = start().await;
    let mut send = connect(addr).await;
    // 100 KB: h2 sends it in frames of 16 KiB at the most.
    let long = "a".repeat(100_000);
    let answer = call(&mut send, LIST_ENTRY, &[], request_for(&long)).await;
    assert_eq!(check_result(&answer), 0);
}
