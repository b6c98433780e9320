//! Forward-auth cache hints honoured by a real nginx: `proxy_cache` on the `auth_request`
//! location (the block from the README's "Cache hints on forward-auth" section) answers
//! repeated requests without asking the mixer, and asks it again for a request whose headers
//! the decision read (`Vary`) differ, and for every denial.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use mixer_tests::nginx::{self, Nginx};
use mixer_tests::{Mixer, free_addr, header, http_request};

/// Checks the mixer decided (cache hits included): each one is a call that reached it.
fn checks(mixer: &Mixer) -> f64 {
    ["allowed", "denied"]
        .iter()
        .map(|r| {
            mixer
                .metric(&format!("mixer_checks_total{{result=\"{r}\"}}"))
                .unwrap_or(0.0)
        })
        .sum()
}

#[test]
fn nginx_proxy_cache_reuses_allows_for_the_same_user_only() {
    let binary = nginx::binary().expect("nginx is installed (.ci/run installs it)");
    let dir = tempfile::tempdir().expect("tempdir");
    // The default config: `x-mixer-deny: true` denies, every allow reads `x-user`.
    let mixer = Mixer::start(Path::new(env!("CARGO_BIN_EXE_mixer-under-test")), &[]);
    mixer.wait_ready(Duration::from_secs(10));

    // The mixer's own answers: an allow carries the hints, a denial none.
    let (status, headers, _) =
        http_request(mixer.http, "GET", "/check", &[("x-user", "alice")]).expect("check");
    assert_eq!(status, 200);
    // The default config's allow is limited by no handler: Istio's one minute.
    assert_eq!(
        header(&headers, "cache-control"),
        Some("private, max-age=60")
    );
    assert_eq!(header(&headers, "vary"), Some("x-mixer-deny, x-user"));
    let (status, headers, _) =
        http_request(mixer.http, "GET", "/check", &[("x-mixer-deny", "true")]).expect("check");
    assert_eq!(status, 403);
    assert_eq!(header(&headers, "cache-control"), None, "{headers:?}");
    assert_eq!(header(&headers, "vary"), None, "{headers:?}");

    let (listen, app): (SocketAddr, SocketAddr) = (free_addr(), free_addr());
    let prefix = dir.path().display();
    let check = nginx::check_location(
        mixer.http,
        &mixer_tests::readme::block("# mixer forward-auth answers cached as the mixer's hints say"),
    );
    let http = format!(
        r#"
    proxy_cache_path {prefix}/mixer-auth keys_zone=mixer_auth:1m;
    server {{
        listen {app};
        location / {{ return 200 "app\n"; }}
    }}
    server {{
        listen {listen};
        location / {{
            auth_request /_mixer_check;
            proxy_pass http://{app};
        }}
        {check}
    }}"#
    );
    let _nginx = Nginx::start(&binary, dir.path(), &http, &[listen, app]);

    let ask = |headers: &[(&str, &str)]| {
        let (status, _, body) = http_request(listen, "GET", "/shop", headers).expect("request");
        assert!(status != 200 || body == "app\n", "{body}");
        status
    };
    let before = checks(&mixer);
    assert_eq!(ask(&[("x-user", "alice")]), 200);
    assert_eq!(checks(&mixer), before + 1.0, "the first request is asked");
    for _ in 0..3 {
        assert_eq!(ask(&[("x-user", "alice")]), 200);
    }
    assert_eq!(
        checks(&mixer),
        before + 1.0,
        "repeats are answered by nginx's cache"
    );
    assert_eq!(ask(&[("x-user", "bob")]), 200);
    assert_eq!(
        checks(&mixer),
        before + 2.0,
        "another user is asked (Vary: x-user)"
    );
    for n in 1..=2 {
        assert_eq!(ask(&[("x-user", "bob"), ("x-mixer-deny", "true")]), 403);
        assert_eq!(
            checks(&mixer),
            before + 2.0 + f64::from(n),
            "a denial is never cached"
        );
    }
    assert!(mixer.terminate().success());
}
