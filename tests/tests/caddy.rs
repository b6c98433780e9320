//! End to end with a real Caddy: `forward_auth` asks the mixer before answering. Caddy sets
//! `X-Forwarded-For` to the client address it saw (replacing what an untrusted client sent),
//! so with `--trusted-proxies` naming Caddy the mixer checks the real client, and a client
//! that writes its own `X-Forwarded-For` gets nowhere.

use std::path::Path;
use std::time::Duration;

use mixer_tests::caddy::{self, Caddy};
use mixer_tests::{Mixer, free_addr, http_request_from};

/// Only 127.0.0.5 (a loopback address standing for an allowed client) and 10.57.0.0/16 pass.
const IP_ALLOW_LIST: &str = include_str!("../configs/ip_allow_list.yaml");

#[test]
fn caddy_forward_auth_checks_the_client_caddy_saw() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("mixer.yaml");
    std::fs::write(&config, IP_ALLOW_LIST).expect("write config");
    let mixer = Mixer::start(
        Path::new(env!("CARGO_BIN_EXE_mixer-under-test")),
        &[
            "--config",
            config.to_str().expect("utf-8"),
            "--trusted-proxies",
            "127.0.0.1",
        ],
    );
    mixer.wait_ready(Duration::from_secs(10));
    let listen = free_addr();
    let caddyfile = format!(
        "{{\n\tadmin off\n\tauto_https off\n}}\nhttp://{listen} {{\n\tforward_auth {mixer} {{\n\t\turi /check\n\t}}\n\trespond \"reached the app\"\n}}\n",
        mixer = mixer.http
    );
    let binary = caddy::binary().expect("caddy is installed (.ci/run installs it)");
    let _caddy = Caddy::start(&binary, dir.path(), &caddyfile, listen);

    let allowed = std::net::Ipv4Addr::new(127, 0, 0, 5);
    let outsider = std::net::Ipv4Addr::new(127, 0, 0, 9);
    let get = |from, headers: &[(&str, &str)]| {
        http_request_from(from, listen, "GET", "/", headers).expect("request")
    };
    let (status, _, body) = get(allowed, &[]);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, "reached the app");
    for spoof in [
        &[("x-forwarded-for", "10.57.1.1")][..],
        &[("x-real-ip", "10.57.1.1")][..],
    ] {
        let (status, _, _) = get(outsider, spoof);
        assert_eq!(status, 403, "spoofed with {spoof:?}");
    }
    assert!(mixer.terminate().success());
}
