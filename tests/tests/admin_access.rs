//! Who may read the admin port, on the real binary. `--admin-token-file`: `/metrics` and
//! `/config_dump` answer 401 without the bearer token and 200 with it; the probes
//! (`/healthz`, `/readyz`, gRPC health on the admin port) need none; a rewritten file replaces
//! the token without a restart; a file without a token stops the start. And an admin address
//! that is not loopback is warned of at start.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use mixer_tests::{Mixer, free_addr, header, http_request};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mixer-under-test"))
}

fn status(admin: SocketAddr, path: &str, token: Option<&str>) -> u16 {
    let authorization = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = authorization
        .iter()
        .map(|a| ("Authorization", a.as_str()))
        .collect();
    let (status, _, _) = http_request(admin, "GET", path, &headers).expect(path);
    status
}

async fn grpc_health(admin: SocketAddr) -> ServingStatus {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{admin}"))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("health")
        .into_inner()
        .status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_endpoints_but_the_probes_ask_for_the_token_of_the_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("admin-token");
    std::fs::write(&file, "first-token\n").expect("write");
    let file_arg = file.display().to_string();
    let mixer = Mixer::start(binary(), &["--admin-token-file", &file_arg]);
    let admin = mixer.admin;
    let mixer = tokio::task::spawn_blocking(move || {
        mixer.wait_ready(Duration::from_secs(10));
        mixer
    })
    .await
    .expect("join");
    assert_eq!(grpc_health(admin).await, ServingStatus::Serving);

    tokio::task::spawn_blocking(move || {
        for probe in ["/healthz", "/readyz"] {
            assert_eq!(status(admin, probe, None), 200, "{probe}");
        }
        for guarded in ["/metrics", "/config_dump"] {
            assert_eq!(status(admin, guarded, None), 401, "{guarded}");
            assert_eq!(status(admin, guarded, Some("wrong")), 401, "{guarded}");
            assert_eq!(
                status(admin, guarded, Some("first-token")),
                200,
                "{guarded}"
            );
        }
        let (_, headers, body) = http_request(admin, "GET", "/metrics", &[]).expect("metrics");
        assert_eq!(
            header(&headers, "www-authenticate"),
            Some(r#"Bearer realm="mixer admin""#)
        );
        assert!(body.contains("--admin-token-file"), "{body}");

        // A rotated token takes effect at the next request; the old one stops working.
        std::fs::write(&file, "second-token-of-another-length\n").expect("write");
        assert_eq!(status(admin, "/metrics", Some("first-token")), 401);
        assert_eq!(
            status(admin, "/metrics", Some("second-token-of-another-length")),
            200
        );
        // Emptied: every guarded request is refused, the probes still answered.
        std::fs::write(&file, "").expect("write");
        assert_eq!(
            status(admin, "/metrics", Some("second-token-of-another-length")),
            401
        );
        assert_eq!(status(admin, "/readyz", None), 200);
    })
    .await
    .expect("join");
    drop(mixer);
}

#[test]
fn an_admin_token_file_without_a_token_stops_the_start() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("admin-token");
    std::fs::write(&file, "\n").expect("write");
    let log = dir.path().join("mixer.log");
    let file_arg = file.display().to_string();
    let mixer =
        Mixer::start_with_env_and_log(binary(), &["--admin-token-file", &file_arg], &[], &log);
    let (status, _) = mixer.wait_exit(Duration::from_secs(10));
    assert!(!status.success(), "started without a token");
    let log = std::fs::read_to_string(&log).expect("read log");
    assert!(
        log.contains("--admin-token-file") && log.contains("holds no token"),
        "{log}"
    );
}

#[test]
fn an_admin_address_other_hosts_reach_is_warned_of_at_start() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("mixer.log");
    let port = free_addr().port();
    let (grpc, http) = (free_addr(), free_addr());
    // Bound to every address; asked only over loopback.
    let mut child = std::process::Command::new(binary())
        .arg("serve")
        .args(["--grpc-addr", &grpc.to_string()])
        .args(["--http-addr", &http.to_string()])
        .args(["--admin-addr", &format!("0.0.0.0:{port}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("start the mixer");
    let admin = SocketAddr::from(([127, 0, 0, 1], port));
    let start = std::time::Instant::now();
    let ready = loop {
        if let Ok((200, _, _)) = http_request(admin, "GET", "/readyz", &[]) {
            break true;
        }
        if start.elapsed() > Duration::from_secs(10) {
            break false;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(ready, "not ready within 10 s");
    let log = std::fs::read_to_string(&log).expect("read log");
    assert!(
        log.contains("--admin-addr is not a loopback address")
            && log.contains("without authentication"),
        "{log}"
    );
}
