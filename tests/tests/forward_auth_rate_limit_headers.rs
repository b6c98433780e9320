//! The IETF draft's rate limit headers on forward-auth, through the real mixer process: a
//! memquota limit of 3 a minute (tests/configs/forward_auth_quota.yaml) answers each counted
//! 200 with `RateLimit-Limit`, `RateLimit-Remaining` (going down by one) and `RateLimit-Reset`,
//! and the 429 past it with the same names, 0 remaining and the seconds until units come back.

use std::path::Path;
use std::time::{Duration, Instant};

use mixer_tests::{Mixer, header, http_request};

const QUOTA: &str = include_str!("../configs/forward_auth_quota.yaml");

#[test]
fn forward_auth_answers_carry_the_drafts_rate_limit_headers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("quota.yaml");
    std::fs::write(&path, QUOTA).expect("write");
    let binary = Path::new(env!("CARGO_BIN_EXE_mixer-under-test"));
    let mixer = Mixer::start(binary, &["--config", path.to_str().expect("utf-8")]);
    mixer.wait_ready(Duration::from_secs(10));
    let check = || {
        http_request(
            mixer.http,
            "GET",
            "/check",
            &[("X-Forwarded-Host", "quota.example.com")],
        )
        .expect("check")
    };
    let start = Instant::now();
    for remaining in ["2", "1", "0"] {
        let (status, headers, _) = check();
        assert_eq!(status, 200, "{headers:?}");
        assert_eq!(header(&headers, "ratelimit-limit"), Some("3"));
        assert_eq!(header(&headers, "ratelimit-remaining"), Some(remaining));
        let reset: u64 = header(&headers, "ratelimit-reset")
            .and_then(|r| r.parse().ok())
            .expect("ratelimit-reset in seconds");
        assert!((1..=60).contains(&reset), "reset {reset}");
    }
    let (status, headers, _) = check();
    assert_eq!(status, 429, "{headers:?}");
    assert_eq!(header(&headers, "ratelimit-limit"), Some("3"));
    assert_eq!(header(&headers, "ratelimit-remaining"), Some("0"));
    let reset: u64 = header(&headers, "ratelimit-reset")
        .and_then(|r| r.parse().ok())
        .expect("ratelimit-reset in seconds");
    assert!(
        (1..=60).contains(&reset) && start.elapsed() < Duration::from_secs(60),
        "reset {reset}"
    );
    // The same wait as Retry-After and the X- headers ext_authz sends too.
    assert_eq!(
        header(&headers, "retry-after"),
        Some(reset.to_string().as_str())
    );
    assert_eq!(header(&headers, "x-ratelimit-remaining"), Some("0"));
    // A request no quota counts carries none.
    let (status, headers, _) = http_request(mixer.http, "GET", "/check", &[]).expect("check");
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "ratelimit-limit"), None);
    mixer.terminate();
}
