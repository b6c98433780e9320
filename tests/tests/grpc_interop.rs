//! The mixer's gRPC server (`mixer-grpc`) against another implementation's client: Python's
//! grpcio (gRPC core, the C library most non-Go clients use) calls the real binary with raw
//! message bytes. Envoy's client is gRPC core too in its Google gRPC mode. Covered: a unary
//! method served directly (allowed and denied), a message that does not decode, an unknown
//! method, and health, which tonic serves behind the direct methods.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use envoy_types::ext_authz::v3::pb::CheckResponse;
use envoy_types::pb::envoy::service::auth::v3::check_response;
use mixer_tests::Mixer;

#[path = "support/authz.rs"]
mod authz;
#[path = "support/python.rs"]
mod python;
use python::python_or_skip;

fn authz_request(headers: &[(&str, &str)]) -> Vec<u8> {
    authz::authz_request(headers).encode_to_vec()
}
use prost::Message;

/// Calls `method` with each hex-encoded request given after it and prints, per call, `ok HEX`
/// or `error CODE_NAME DETAILS`.
const CLIENT: &str = r#"
import sys, grpc
channel = grpc.insecure_channel(sys.argv[1])
method = channel.unary_unary(sys.argv[2])
for request in sys.argv[3:]:
    try:
        answer = method(bytes.fromhex(request), timeout=10)
        print("ok", answer.hex())
    except grpc.RpcError as e:
        print("error", e.code().name, e.details())
"#;

fn call(python: &Path, mixer: &Mixer, method: &str, requests: &[Vec<u8>]) -> Vec<String> {
    let hex = |b: &Vec<u8>| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let out = Command::new(python)
        .args(["-c", CLIENT, &mixer.grpc.to_string(), method])
        .args(requests.iter().map(hex))
        .output()
        .expect("run the Python client");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

fn answer(line: &str) -> Vec<u8> {
    let hex = line
        .strip_prefix("ok ")
        .unwrap_or_else(|| panic!("not an answer: {line}"));
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
        .collect()
}

#[test]
fn grpcio_calls_the_mixer_direct_and_fallback_paths() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let mixer = Mixer::start(Path::new(env!("CARGO_BIN_EXE_mixer-under-test")), &[]);
    mixer.wait_ready(Duration::from_secs(10));

    let lines = call(
        &python,
        &mixer,
        "/envoy.service.auth.v3.Authorization/Check",
        &[
            authz_request(&[("x-user", "bob")]),
            authz_request(&[("x-mixer-deny", "true")]),
            vec![0xff, 0xff, 0xff],
        ],
    );
    assert_eq!(lines.len(), 3, "{lines:?}");
    let allowed = CheckResponse::decode(answer(&lines[0]).as_slice()).expect("decodes");
    assert_eq!(allowed.status.map(|s| s.code), Some(0));
    let Some(check_response::HttpResponse::OkResponse(ok)) = allowed.http_response else {
        panic!("expected an OK response: {}", lines[0]);
    };
    assert!(
        ok.headers
            .iter()
            .filter_map(|h| h.header.as_ref())
            .any(|h| h.key == "x-mixer-user" && h.value == "bob"),
        "{ok:?}"
    );
    let denied = CheckResponse::decode(answer(&lines[1]).as_slice()).expect("decodes");
    assert_eq!(denied.status.map(|s| s.code), Some(7));
    assert!(
        lines[2].starts_with("error INTERNAL") && lines[2].contains("does not decode"),
        "{}",
        lines[2]
    );

    let unknown = call(
        &python,
        &mixer,
        "/envoy.service.auth.v3.Authorization/Nope",
        &[vec![]],
    );
    assert!(unknown[0].starts_with("error UNIMPLEMENTED"), "{unknown:?}");

    // grpc.health.v1 HealthCheckRequest{service: ""} is empty; SERVING is status 1.
    let health = call(&python, &mixer, "/grpc.health.v1.Health/Check", &[vec![]]);
    assert_eq!(answer(&health[0]), vec![0x08, 0x01], "{health:?}");

    assert!(mixer.terminate().success());
}

/// Calls on one channel, each printing `CODE_NAME DETAILS` (`OK` for an answer): an unknown
/// method, a 5 MiB message to a direct method and to tonic's client-streaming access log
/// service, 100 KB of metadata, then a plain check.
const LIMITS_CLIENT: &str = r#"
import sys, grpc
channel = grpc.insecure_channel(sys.argv[1])
check = bytes.fromhex(sys.argv[2])
def show(call):
    try:
        call()
        print("OK")
    except grpc.RpcError as e:
        print(e.code().name, e.details())
unknown = channel.unary_unary("/envoy.service.auth.v3.Authorization/Nope")
authz = channel.unary_unary("/envoy.service.auth.v3.Authorization/Check")
logs = channel.stream_unary("/envoy.service.accesslog.v3.AccessLogService/StreamAccessLogs")
big = b"\x0a" + b"\xff\xff\xff\x02" + b"x" * (5 << 20)
show(lambda: unknown(b"", timeout=10))
show(lambda: authz(big, timeout=10))
show(lambda: logs(iter([big]), timeout=10))
show(lambda: authz(check, timeout=10, metadata=[("x-huge", "x" * (100 << 10))]))
show(lambda: authz(check, timeout=10))
"#;

#[test]
fn grpcio_gets_grpc_cores_codes_at_the_limits() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let mixer = Mixer::start(Path::new(env!("CARGO_BIN_EXE_mixer-under-test")), &[]);
    mixer.wait_ready(Duration::from_secs(10));
    let check: String = authz_request(&[("x-user", "bob")])
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect();
    let out = Command::new(&python)
        .args(["-c", LIMITS_CLIENT, &mixer.grpc.to_string(), &check])
        .output()
        .expect("run the Python client");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{stdout}");
    assert_eq!(
        lines[0],
        "UNIMPLEMENTED unknown method /envoy.service.auth.v3.Authorization/Nope"
    );
    // gRPC core's own code for a message over the receiver's limit, from the direct method
    // and from tonic's streaming service behind it alike.
    assert!(
        lines[1].starts_with("RESOURCE_EXHAUSTED received message larger than max"),
        "{}",
        lines[1]
    );
    assert!(lines[2].starts_with("RESOURCE_EXHAUSTED"), "{}", lines[2]);
    assert!(
        lines[3].starts_with("RESOURCE_EXHAUSTED") && lines[3].contains("header list"),
        "{}",
        lines[3]
    );
    // The channel's connection survived all of it.
    assert_eq!(lines[4], "OK");
    assert!(mixer.terminate().success());
}
