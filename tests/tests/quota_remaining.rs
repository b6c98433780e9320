//! `GET /quota` on the admin listener of the real binary: how much of a quota is left, read
//! without charging it, by handler, quota and dimensions or by rate limit domain and
//! descriptor; 400 for a missing or malformed query (naming the parameters), 404 for a
//! counter the config does not have; 403 on an admin address other hosts reach.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use mixer_tests::{Mixer, free_addr, http_request};

const QUOTA: &str = include_str!("../configs/forward_auth_quota.yaml");

/// An envoyproxy/ratelimit file beside it, counted by the same memquota handler.
const EDGE: &str = "domain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 5}\n";

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_mixer-under-test"))
}

fn get(admin: SocketAddr, path: &str) -> (u16, String) {
    let (status, _, body) = http_request(admin, "GET", path, &[]).expect(path);
    (status, body)
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

const HOST_COUNTER: &str =
    "/quota?handler=quotahandler&quota=requestcountquota&dimension=host%3Dquota.example.com";

#[test]
fn quota_says_what_is_left_without_charging_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("quota.yaml"), QUOTA).expect("write");
    std::fs::write(dir.path().join("edge.yaml"), EDGE).expect("write");
    let mixer = Mixer::start(binary(), &["--config", dir.path().to_str().expect("utf-8")]);
    mixer.wait_ready(Duration::from_secs(10));
    let admin = mixer.admin;

    // The contract: no query is a 400 whose message names the parameters.
    let (status, body) = get(admin, "/quota");
    assert_eq!(status, 400, "{body}");
    for parameter in ["handler=", "quota=", "dimension=", "domain=", "descriptor="] {
        assert!(body.contains(parameter), "{body}");
    }

    // A fresh counter is full.
    let (status, body) = get(admin, HOST_COUNTER);
    assert_eq!(status, 200, "{body}");
    let counter = &json(&body)["counters"][0];
    assert_eq!(counter["handler"], "quotahandler.handler.istio-system");
    assert_eq!(counter["dimensions"]["host"], "quota.example.com");
    assert_eq!(
        (&counter["limit"], &counter["remaining"]),
        (&3.into(), &3.into())
    );
    assert_eq!(counter["window_seconds"], 60.0);

    // Two requests through forward-auth charge two units; reading the counter any number of
    // times charges none.
    let check = || {
        http_request(
            mixer.http,
            "GET",
            "/check",
            &[("X-Forwarded-Host", "quota.example.com")],
        )
        .expect("check")
        .0
    };
    assert_eq!((check(), check()), (200, 200));
    for _ in 0..3 {
        let (status, body) = get(admin, HOST_COUNTER);
        assert_eq!(status, 200, "{body}");
        let counter = &json(&body)["counters"][0];
        assert_eq!(counter["remaining"], 1, "{body}");
        let reset = counter["reset_after_seconds"].as_f64().expect("reset");
        assert!(reset > 0.0 && reset <= 60.0, "{body}");
    }
    assert_eq!(check(), 200, "the last unit was still there");
    assert_eq!(check(), 429);
    let (_, body) = get(admin, HOST_COUNTER);
    assert_eq!(json(&body)["counters"][0]["remaining"], 0, "{body}");

    // The rate limit form: the counter a descriptor is counted on, found by the same rules.
    let (status, body) = get(admin, "/quota?domain=edge&descriptor=tenant%3Dacme");
    assert_eq!(status, 200, "{body}");
    let answer = json(&body);
    assert_eq!(answer["counters"][0]["limit"], 5, "{body}");
    assert_eq!(answer["counters"][0]["remaining"], 5, "{body}");
    assert_eq!(answer["counters"][0]["dimensions"]["tenant"], "acme");

    // Counters the config does not have: 404, saying which name is unknown.
    for (path, says) in [
        ("/quota?handler=nosuch&quota=requestcountquota", "nosuch"),
        ("/quota?handler=quotahandler&quota=nosuch", "nosuch"),
        (
            "/quota?handler=quotahandler&quota=requestcountquota&dimension=user%3Dx",
            "user",
        ),
        ("/quota?domain=edge&descriptor=region%3Deu", "edge"),
        ("/quota?domain=nosuch&descriptor=tenant%3Dacme", "nosuch"),
    ] {
        let (status, body) = get(admin, path);
        assert_eq!(status, 404, "{path}: {body}");
        assert!(body.contains(says), "{path}: {body}");
    }
    // Malformed, huge or oddly encoded queries: 400, and nothing changes.
    let many: String = (0..200).map(|i| format!("&dimension=k{i}%3Dv")).collect();
    let long = format!("/quota?handler={}&quota=q", "h".repeat(5000));
    for path in [
        "/quota?handler=quotahandler",
        "/quota?handler=quotahandler&quota=requestcountquota&limit=9",
        "/quota?handler=%ZZ&quota=q",
        "/quota?handler=%FF%FE&quota=q",
        "/quota?handler=quotahandler&quota=requestcountquota&dimension=host",
        &format!("/quota?handler=quotahandler&quota=requestcountquota{many}"),
        &long,
    ] {
        let (status, body) = get(admin, path);
        assert_eq!(status, 400, "{path}: {body}");
    }
    let (_, body) = get(admin, HOST_COUNTER);
    assert_eq!(json(&body)["counters"][0]["remaining"], 0, "{body}");
    mixer.terminate();
}

#[test]
fn quota_is_refused_on_an_admin_address_other_hosts_reach() {
    let port = free_addr().port();
    let (grpc, http) = (free_addr(), free_addr());
    // Bound to every address; asked only over loopback.
    let mut child = std::process::Command::new(binary())
        .arg("serve")
        .args(["--grpc-addr", &grpc.to_string()])
        .args(["--http-addr", &http.to_string()])
        .args(["--admin-addr", &format!("0.0.0.0:{port}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start the mixer");
    let admin = SocketAddr::from(([127, 0, 0, 1], port));
    let start = Instant::now();
    let answer = loop {
        if let Ok((200, _, _)) = http_request(admin, "GET", "/readyz", &[]) {
            break Some(get(admin, "/quota?domain=edge&descriptor=tenant%3Dacme"));
        }
        if start.elapsed() > Duration::from_secs(10) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = child.kill();
    let _ = child.wait();
    let (status, body) = answer.expect("ready within 10 s");
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("--admin-quota-remote"), "{body}");
}

#[test]
fn quota_reads_a_redisquota_counter_without_charging_it() {
    if !mixer_tests::redis::redis_installed() {
        return;
    }
    let redis = mixer_tests::redis::Redis::start();
    let dir = tempfile::tempdir().expect("tempdir");
    // The same limit (3 a minute) kept in Redis; a call timeout far above the default 5 ms,
    // so that a busy CI machine's first call (connecting, loading the scripts) is not a 503.
    let config = QUOTA.replace(
        "compiledAdapter: memquota\n  params:\n",
        &format!(
            "compiledAdapter: redisquota\n  params:\n    redisServerUrl: \"127.0.0.1:{}\"\n    callTimeout: 2s\n",
            redis.port
        ),
    );
    assert!(config.contains("redisquota"), "{config}");
    std::fs::write(dir.path().join("quota.yaml"), config).expect("write");
    let mixer = Mixer::start(binary(), &["--config", dir.path().to_str().expect("utf-8")]);
    mixer.wait_ready(Duration::from_secs(10));
    let admin = mixer.admin;

    let (status, body) = get(admin, HOST_COUNTER);
    assert_eq!(status, 200, "{body}");
    let counter = &json(&body)["counters"][0];
    assert_eq!(
        (&counter["limit"], &counter["remaining"]),
        (&3.into(), &3.into()),
        "{body}"
    );
    let (status, _, _) = http_request(
        mixer.http,
        "GET",
        "/check",
        &[("X-Forwarded-Host", "quota.example.com")],
    )
    .expect("check");
    assert_eq!(status, 200);
    for _ in 0..3 {
        let (status, body) = get(admin, HOST_COUNTER);
        assert_eq!(status, 200, "{body}");
        let counter = &json(&body)["counters"][0];
        assert_eq!(counter["remaining"], 2, "{body}");
        let reset = counter["reset_after_seconds"].as_f64().expect("reset");
        assert!(reset > 0.0 && reset <= 60.0, "{body}");
    }
    // A counter the config does not have is still a 404, with Redis behind it.
    let (status, body) = get(
        admin,
        "/quota?handler=quotahandler&quota=requestcountquota&dimension=user%3Dx",
    );
    assert_eq!(status, 404, "{body}");
    mixer.terminate();
}
